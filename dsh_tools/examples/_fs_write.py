"""The bodies, renderers and diff cards of the write tools, ``write_file`` and ``edit_file``
(declared in ``_fs``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..actors import AbortSignal
from ..registry import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    ToolResult,
)
from ._diffs import diffs_from_meta, hunks, meta_from_hunks
from ._fs_common import (
    encoded,
    read_text,
    read_text_lenient,
    refuse_past_limit,
    text_block,
    write_bytes,
)
from ._workspace import Workspace, WorkspaceError, check_abort

__all__ = [
    "edit_file",
    "edit_file_meta",
    "present_edit_file_call",
    "present_edit_file_result",
    "present_write_file_call",
    "present_write_file_result",
    "render_edit_file",
    "render_write_file",
    "write_file",
    "write_file_meta",
]


# --- write_file --------------------------------------------------------------------------------


def write_file(workspace: Workspace, args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
    signal: AbortSignal = run_ctx.signal
    check_abort(signal)
    target = workspace.resolve(args["path"])
    shown = workspace.display(target)
    content: str = args["content"]
    data = encoded(shown, content)  # refused before the old text is read and compared
    kind = workspace.kind(target, shown)
    if kind == "directory":
        raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
    created = kind is None
    old = "" if created else read_text_lenient(workspace, target, shown)
    applied = [] if created else hunks(old, content)
    write_bytes(workspace, target, shown, data, signal)
    return {
        "path": shown,
        "created": created,
        "bytes_written": len(data),
        "hunks": applied,
    }


def render_write_file(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
    if value["created"]:
        return text_block(f"Created {value['path']} ({value['bytes_written']} bytes)")
    changed = len(value["hunks"])
    detail = "unchanged" if not changed else f"{changed} changed region" + "s" * (changed > 1)
    return text_block(f"Wrote {value['bytes_written']} bytes to {value['path']} ({detail})")


def write_file_meta(args: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    return meta_from_hunks(args["path"], value["hunks"])


def present_write_file_call(args: Mapping[str, Any]) -> DiffCallView:
    path: str = args["path"]
    return DiffCallView(
        title=f"Write {path}",
        diffs=[FileDiff(path=path, old_text=None, new_text=args["content"])],
        locations=[FileLocation(path=path)],
    )


def present_write_file_result(args: Mapping[str, Any], result: ToolResult) -> DiffResultView | None:
    if result.is_error:
        return None
    diffs = diffs_from_meta(result.meta)
    if diffs is None:
        diffs = [FileDiff(path=args["path"], old_text=None, new_text=args["content"])]
    return DiffResultView(diffs=diffs)


# --- edit_file ---------------------------------------------------------------------------------


def edit_file(workspace: Workspace, args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
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
        kind = workspace.kind(target, shown)
        if kind == "directory":
            raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
        existed = kind is not None
        if existed and read_text(workspace, target, shown):
            raise WorkspaceError(
                f'old_string is empty but "{shown}" already has content; quote the text to replace',
                "EDIT_MISMATCH",
            )
        applied = hunks("", new_string) if existed else []
        write_bytes(workspace, target, shown, encoded(shown, new_string), signal)
        return {"path": shown, "created": not existed, "replacements": 1, "hunks": applied}
    old = read_text(workspace, target, shown)
    count = old.count(old_string)
    if count == 0:
        message = f'old_string was not found in "{shown}"'
        if "\r\n" in old and "\n" in old_string and old_string.replace("\n", "\r\n") in old:
            # read_file shows the lines without their "\r": quoting them as shown misses
            message += (
                "; the file ends its lines with \\r\\n (CRLF), which read_file does not show:"
                " write them so in old_string and new_string"
            )
        raise WorkspaceError(message, "EDIT_MISMATCH")
    if count > 1 and not replace_all:
        raise WorkspaceError(
            f'old_string occurs {count} times in "{shown}"; '
            "include more surrounding text to make it unique, or set replace_all",
            "EDIT_MISMATCH",
        )
    # Characters are at most bytes: a result over the limit in characters is refused before
    # it is built.
    length = len(old) + (count if replace_all else 1) * (len(new_string) - len(old_string))
    refuse_past_limit(shown, length)
    new = (
        old.replace(old_string, new_string)
        if replace_all
        else old.replace(old_string, new_string, 1)
    )
    check_abort(signal)
    applied = hunks(old, new)
    write_bytes(workspace, target, shown, encoded(shown, new), signal)
    return {"path": shown, "created": False, "replacements": count, "hunks": applied}


def render_edit_file(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
    if value["created"]:
        return text_block(f"Created {value['path']}")
    count = value["replacements"]
    return text_block(f"Edited {value['path']}: replaced {count} occurrence" + "s" * (count > 1))


def edit_file_meta(args: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    if value["created"]:
        return {"diffs": [{"path": args["path"], "old_text": None, "new_text": args["new_string"]}]}
    return meta_from_hunks(args["path"], value["hunks"])


def present_edit_file_call(args: Mapping[str, Any]) -> DiffCallView:
    path: str = args["path"]
    old_string: str = args["old_string"]
    return DiffCallView(
        title=f"Edit {path}",
        diffs=[FileDiff(path=path, old_text=old_string or None, new_text=args["new_string"])],
        locations=[FileLocation(path=path)],
    )


def present_edit_file_result(args: Mapping[str, Any], result: ToolResult) -> DiffResultView | None:
    if result.is_error:
        return None
    diffs = diffs_from_meta(result.meta)
    return DiffResultView(diffs=diffs) if diffs is not None else None
