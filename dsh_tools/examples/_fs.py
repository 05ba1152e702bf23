"""File tools confined to a workspace: ``read_file``, ``list_dir``, ``write_file``, ``edit_file``.

Reads are concurrency-safe (they may overlap in a batch); writes are exclusive (each runs alone,
as an ordered barrier). Every body checks the call's abort signal between units of work and
before it changes anything, so an aborted write never lands.

Presenters follow the reference tools:

- ``read_file``: a generic card ``Read <path>`` (plus the line range), kind ``read``, located
  at the first line read;
- ``list_dir``: a generic card ``List <path>``, kind ``read``;
- ``write_file``: a diff card ``Write <path>``; the result shows the applied hunks (3 lines of
  context) from the persisted metadata, or the whole file for a create;
- ``edit_file``: a diff card ``Edit <path>``; the result shows the applied hunks.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ..actors import AbortSignal
from ..registry import ToolDefinition, ToolOutput, define_tool
from ..registry._presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    ToolResult,
)
from ._diffs import diffs_from_meta, hunks, meta_from_hunks, split_lines
from ._workspace import Workspace, WorkspaceError, check_abort, int_arg

__all__ = [
    "DEFAULT_READ_LIMIT",
    "MAX_LIST_ENTRIES",
    "MAX_READ_BYTES",
    "edit_file_tool",
    "fs_tools",
    "list_dir_tool",
    "read_file_tool",
    "write_file_tool",
]

DEFAULT_READ_LIMIT = 2000
"""Lines ``read_file`` returns when the call gives no ``limit``."""

MAX_READ_BYTES = 256 * 1024
"""Text ``read_file`` returns at most per call; the rest is left for a later ``offset``."""

MAX_LIST_ENTRIES = 1000
"""Entries ``list_dir`` returns at most; the total is still reported."""

_BINARY_SNIFF_BYTES = 8192

# The ``path`` parameter of the tools that name one file (read, write, edit).
_FILE_PATH_PARAMETER: dict[str, Any] = {
    "type": "string",
    "required": True,
    "description": "File path, relative to the workspace root (or absolute inside it).",
}

_HUNK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "old_start": {"type": "integer", "required": True},
        "old_text": {"type": "string", "required": True},
        "new_start": {"type": "integer", "required": True},
        "new_text": {"type": "string", "required": True},
    },
}


def _always_parallel(args: Mapping[str, Any]) -> bool:
    return True


def _always_exclusive(args: Mapping[str, Any]) -> bool:
    return False


def _text_block(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _read_text(workspace: Workspace, target: Path, shown: str) -> str:
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise WorkspaceError(f'"{shown}" is a binary file', "BINARY_FILE")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkspaceError(f'"{shown}" is not UTF-8 text', "BINARY_FILE") from None


def _write_text(
    workspace: Workspace, target: Path, shown: str, text: str, signal: AbortSignal
) -> None:
    """Write ``text`` to ``target``. An existing file is replaced atomically (a temporary file
    renamed over it, keeping the file's mode); a new one is created with the process umask."""
    data = text.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            check_abort(signal)  # last point of return: nothing has changed yet
            with open(target, "xb") as handle:
                handle.write(data)
            return
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, mode)
        check_abort(signal)  # last point of return: nothing has changed yet
        os.replace(temp, target)
    except BaseException as exc:
        os.unlink(temp)
        if isinstance(exc, OSError):
            raise workspace.io_error(exc, shown) from None
        raise


# --- read_file ----------------------------------------------------------------------------------


def _capped_lines(handle: BinaryIO) -> Iterator[bytes]:
    """The file's lines; a line longer than ``MAX_READ_BYTES`` is cut there (its newline kept)
    and the rest of it skipped, so one huge line never sits in memory whole."""
    while True:
        raw = handle.readline(MAX_READ_BYTES)
        if not raw:
            return
        if len(raw) == MAX_READ_BYTES and not raw.endswith(b"\n"):
            while True:  # skip the rest of the overlong line
                rest = handle.readline(MAX_READ_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
            raw += b"\n"
        yield raw


def read_file_tool(root: Path | str) -> ToolDefinition:
    """``read_file``: numbered lines of a UTF-8 text file, optionally a range of them."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        signal: AbortSignal = run_ctx.signal
        check_abort(signal)
        offset = int_arg(args, "offset")
        limit = int_arg(args, "limit")
        if offset is not None and offset < 1:
            raise WorkspaceError("offset must be a line number of at least 1", "INVALID_RANGE")
        if limit is not None and limit < 1:
            raise WorkspaceError("limit must be at least 1", "INVALID_RANGE")
        start = offset if offset is not None else 1
        wanted = limit if limit is not None else DEFAULT_READ_LIMIT
        target = workspace.resolve(args["path"])
        shown = workspace.display(target)
        lines: list[str] = []
        size = 0
        has_more = False
        try:
            with target.open("rb") as handle:
                if b"\x00" in handle.read(_BINARY_SNIFF_BYTES):
                    raise WorkspaceError(f'"{shown}" is a binary file', "BINARY_FILE")
                handle.seek(0)
                for number, raw in enumerate(_capped_lines(handle), start=1):
                    check_abort(signal)
                    if number < start:
                        continue
                    if len(lines) == wanted or (lines and size + len(raw) > MAX_READ_BYTES):
                        has_more = True
                        break
                    lines.append(raw.decode("utf-8", "replace"))
                    size += len(raw)
        except OSError as exc:
            raise workspace.io_error(exc, shown) from None
        return {
            "path": shown,
            "text": "".join(lines),
            "start_line": start,
            "line_count": len(lines),
            "has_more": has_more,
        }

    def render(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
        start = value["start_line"]
        text = value["text"]
        if not value["line_count"]:
            if start == 1:
                return _text_block(f"(empty file: {value['path']})")
            return _text_block(f"(no lines at offset {start} in {value['path']})")
        numbered = [
            f"{number:6}\t{line.removesuffix(chr(10)).removesuffix(chr(13))}"
            for number, line in enumerate(split_lines(text), start=start)
        ]
        if value["has_more"]:
            following = start + value["line_count"]
            numbered.append(f"(more lines follow; continue with offset={following})")
        return _text_block("\n".join(numbered))

    def present_call(args: Mapping[str, Any]) -> GenericCallView:
        path: str = args["path"]
        offset = int_arg(args, "offset")
        limit = int_arg(args, "limit")
        title = f"Read {path}"
        if limit is not None and limit > 0:
            first = offset if offset is not None else 1
            title += f" ({first} - {first + limit - 1})"
        elif offset is not None:
            title += f" (from line {offset})"
        line = offset if offset is not None and offset >= 1 else 1
        return GenericCallView(
            title=title, kind="read", locations=[FileLocation(path=path, line=line)]
        )

    return define_tool(
        name="read_file",
        description=(
            "Read a UTF-8 text file from the workspace. Returns numbered lines "
            f"(at most {DEFAULT_READ_LIMIT} unless `limit` says otherwise); use `offset` and "
            "`limit` to page through long files."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "offset": {
                "type": "integer",
                "description": "1-based line number to start reading at (default 1).",
            },
            "limit": {"type": "integer", "description": "Maximum number of lines to return."},
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "text": {"type": "string", "required": True},
                    "start_line": {"type": "integer", "required": True},
                    "line_count": {"type": "integer", "required": True},
                    "has_more": {"type": "boolean", "required": True},
                },
            },
            render=render,
        ),
        execute=execute,
        is_concurrency_safe=_always_parallel,
        present_call=present_call,
    )


# --- list_dir -----------------------------------------------------------------------------------


def _entry_kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def list_dir_tool(root: Path | str) -> ToolDefinition:
    """``list_dir``: the entries of a workspace directory, sorted by name."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        signal: AbortSignal = run_ctx.signal
        check_abort(signal)
        target = workspace.resolve(args.get("path", "."))
        shown = workspace.display(target)
        include_hidden = args.get("include_hidden") is True
        entries: list[dict[str, Any]] = []
        total = 0
        try:
            with os.scandir(target) as scan:
                for entry in scan:
                    check_abort(signal)
                    if not include_hidden and entry.name.startswith("."):
                        continue
                    total += 1
                    kind = _entry_kind(entry)
                    size = entry.stat(follow_symlinks=False).st_size if kind == "file" else None
                    entries.append({"name": entry.name, "type": kind, "size": size})
        except OSError as exc:
            raise workspace.io_error(exc, shown) from None
        entries.sort(key=lambda item: item["name"])
        return {"path": shown, "entries": entries[:MAX_LIST_ENTRIES], "total": total}

    def render(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
        entries = value["entries"]
        if not entries:
            return _text_block(f"(empty directory: {value['path']})")
        lines = [f"{value['path']}:"]
        for entry in entries:
            if entry["type"] == "directory":
                lines.append(f"  {entry['name']}/")
            elif entry["type"] == "symlink":
                lines.append(f"  {entry['name']}@")
            elif entry["type"] == "file":
                lines.append(f"  {entry['name']}  ({entry['size']} bytes)")
            else:
                lines.append(f"  {entry['name']}")
        hidden = value["total"] - len(entries)
        if hidden:
            lines.append(f"  ... and {hidden} more entries")
        return _text_block("\n".join(lines))

    def present_call(args: Mapping[str, Any]) -> GenericCallView:
        path: str = args.get("path", ".")
        return GenericCallView(
            title=f"List {path}", kind="read", locations=[FileLocation(path=path)]
        )

    return define_tool(
        name="list_dir",
        description=(
            "List a directory of the workspace: names sorted, directories marked with `/`, "
            f"file sizes in bytes, at most {MAX_LIST_ENTRIES} entries."
        ),
        parameters={
            "path": {
                "type": "string",
                "description": "Directory path relative to the workspace root (default `.`).",
            },
            "include_hidden": {
                "type": "boolean",
                "description": "Also list entries whose name starts with a dot.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "entries": {
                        "type": "array",
                        "required": True,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string", "required": True},
                                "type": {
                                    "type": "string",
                                    "required": True,
                                    "enum": ["file", "directory", "symlink", "other"],
                                },
                                "size": {
                                    "oneOf": [{"type": "integer"}, {"type": "null"}],
                                    "required": True,
                                },
                            },
                        },
                    },
                    "total": {"type": "integer", "required": True},
                },
            },
            render=render,
        ),
        execute=execute,
        is_concurrency_safe=_always_parallel,
        present_call=present_call,
    )


# --- write_file ---------------------------------------------------------------------------------


def write_file_tool(root: Path | str) -> ToolDefinition:
    """``write_file``: create or overwrite a UTF-8 text file (parent folders are created)."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        signal: AbortSignal = run_ctx.signal
        check_abort(signal)
        target = workspace.resolve(args["path"])
        shown = workspace.display(target)
        content: str = args["content"]
        if target.is_dir():
            raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
        created = not target.exists()
        old = "" if created else _read_text_lenient(workspace, target, shown)
        applied = [] if created else hunks(old, content)
        _write_text(workspace, target, shown, content, signal)
        return {
            "path": shown,
            "created": created,
            "bytes_written": len(content.encode("utf-8")),
            "hunks": applied,
        }

    def render(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
        if value["created"]:
            return _text_block(f"Created {value['path']} ({value['bytes_written']} bytes)")
        changed = len(value["hunks"])
        detail = "unchanged" if not changed else f"{changed} changed region" + "s" * (changed > 1)
        return _text_block(f"Wrote {value['bytes_written']} bytes to {value['path']} ({detail})")

    def presentation_meta(args: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
        return meta_from_hunks(args["path"], value["hunks"])

    def present_call(args: Mapping[str, Any]) -> DiffCallView:
        path: str = args["path"]
        return DiffCallView(
            title=f"Write {path}",
            diffs=[FileDiff(path=path, old_text=None, new_text=args["content"])],
            locations=[FileLocation(path=path)],
        )

    def present_result(args: Mapping[str, Any], result: ToolResult) -> DiffResultView | None:
        if result.is_error:
            return None
        diffs = diffs_from_meta(result.meta)
        if diffs is None:
            diffs = [FileDiff(path=args["path"], old_text=None, new_text=args["content"])]
        return DiffResultView(diffs=diffs)

    return define_tool(
        name="write_file",
        description=(
            "Create or overwrite a UTF-8 text file in the workspace with `content`, creating "
            "missing parent folders. Prefer `edit_file` for small changes to an existing file."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "content": {
                "type": "string",
                "required": True,
                "description": "The complete new content of the file.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "created": {"type": "boolean", "required": True},
                    "bytes_written": {"type": "integer", "required": True},
                    "hunks": {"type": "array", "required": True, "items": _HUNK_SCHEMA},
                },
            },
            render=render,
            presentation_meta=presentation_meta,
        ),
        execute=execute,
        is_concurrency_safe=_always_exclusive,
        present_call=present_call,
        present_result=present_result,
    )


def _read_text_lenient(workspace: Workspace, target: Path, shown: str) -> str:
    """The current text of a file about to be overwritten (undecodable bytes replaced)."""
    try:
        return target.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None


# --- edit_file ----------------------------------------------------------------------------------


def edit_file_tool(root: Path | str) -> ToolDefinition:
    """``edit_file``: replace an exact string in a text file (or create a file from nothing)."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        signal: AbortSignal = run_ctx.signal
        check_abort(signal)
        target = workspace.resolve(args["path"])
        shown = workspace.display(target)
        old_string: str = args["old_string"]
        new_string: str = args["new_string"]
        replace_all = args.get("replace_all") is True
        if old_string == new_string:
            raise WorkspaceError("old_string and new_string are identical", "EDIT_MISMATCH")
        if not old_string:
            if target.is_dir():
                raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
            existed = target.exists()
            if existed and _read_text(workspace, target, shown):
                raise WorkspaceError(
                    f'old_string is empty but "{shown}" already has content; '
                    "quote the text to replace",
                    "EDIT_MISMATCH",
                )
            applied = hunks("", new_string) if existed else []
            _write_text(workspace, target, shown, new_string, signal)
            return {"path": shown, "created": not existed, "replacements": 1, "hunks": applied}
        old = _read_text(workspace, target, shown)
        count = old.count(old_string)
        if count == 0:
            raise WorkspaceError(f'old_string was not found in "{shown}"', "EDIT_MISMATCH")
        if count > 1 and not replace_all:
            raise WorkspaceError(
                f'old_string occurs {count} times in "{shown}"; '
                "include more surrounding text to make it unique, or set replace_all",
                "EDIT_MISMATCH",
            )
        new = (
            old.replace(old_string, new_string)
            if replace_all
            else old.replace(old_string, new_string, 1)
        )
        check_abort(signal)
        applied = hunks(old, new)
        _write_text(workspace, target, shown, new, signal)
        return {"path": shown, "created": False, "replacements": count, "hunks": applied}

    def render(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
        if value["created"]:
            return _text_block(f"Created {value['path']}")
        count = value["replacements"]
        return _text_block(
            f"Edited {value['path']}: replaced {count} occurrence" + "s" * (count > 1)
        )

    def presentation_meta(args: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
        if value["created"]:
            return {
                "diffs": [{"path": args["path"], "old_text": None, "new_text": args["new_string"]}]
            }
        return meta_from_hunks(args["path"], value["hunks"])

    def present_call(args: Mapping[str, Any]) -> DiffCallView:
        path: str = args["path"]
        old_string: str = args["old_string"]
        return DiffCallView(
            title=f"Edit {path}",
            diffs=[FileDiff(path=path, old_text=old_string or None, new_text=args["new_string"])],
            locations=[FileLocation(path=path)],
        )

    def present_result(args: Mapping[str, Any], result: ToolResult) -> DiffResultView | None:
        if result.is_error:
            return None
        diffs = diffs_from_meta(result.meta)
        return DiffResultView(diffs=diffs) if diffs is not None else None

    return define_tool(
        name="edit_file",
        description=(
            "Replace `old_string` with `new_string` in a UTF-8 text file of the workspace. "
            "`old_string` must match exactly once (quote enough surrounding lines), unless "
            "`replace_all` is true. An empty `old_string` creates a new file holding "
            "`new_string`."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "old_string": {
                "type": "string",
                "required": True,
                "description": "The exact text to replace, whitespace included.",
            },
            "new_string": {
                "type": "string",
                "required": True,
                "description": "The text to put in its place.",
            },
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "created": {"type": "boolean", "required": True},
                    "replacements": {"type": "integer", "required": True},
                    "hunks": {"type": "array", "required": True, "items": _HUNK_SCHEMA},
                },
            },
            render=render,
            presentation_meta=presentation_meta,
        ),
        execute=execute,
        is_concurrency_safe=_always_exclusive,
        present_call=present_call,
        present_result=present_result,
    )


def fs_tools(root: Path | str) -> list[ToolDefinition]:
    """The four file tools over the workspace at ``root``."""
    return [
        read_file_tool(root),
        list_dir_tool(root),
        write_file_tool(root),
        edit_file_tool(root),
    ]
