"""The bodies, renderers and call cards of the read tools, ``read_file`` and ``list_dir``
(declared in ``_fs``)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from ..actors import AbortSignal
from ..registry import FileLocation, GenericCallView
from ._diffs import split_lines
from ._fs_common import BINARY_SNIFF_BYTES, text_block
from ._workspace import Workspace, WorkspaceError, check_abort, int_arg

__all__ = [
    "DEFAULT_READ_LIMIT",
    "MAX_LIST_ENTRIES",
    "MAX_READ_BYTES",
    "list_dir",
    "present_list_dir_call",
    "present_read_file_call",
    "read_file",
    "render_list_dir",
    "render_read_file",
]

DEFAULT_READ_LIMIT = 2000
"""Lines ``read_file`` returns when the call gives no ``limit``."""

MAX_READ_BYTES = 256 * 1024
"""Text ``read_file`` returns at most per call; the rest is left for a later ``offset``."""

MAX_LIST_ENTRIES = 1000
"""Entries ``list_dir`` returns at most; the total is still reported."""


# --- read_file ---------------------------------------------------------------------------------


def _capped_lines(handle: BinaryIO, signal: AbortSignal) -> Iterator[tuple[bytes, bool]]:
    """The file's lines, each with whether it was cut: a line longer than ``MAX_READ_BYTES`` is
    cut there (its newline kept) and the rest of it skipped, so one huge line never sits in
    memory whole. Skipping watches ``signal``, and jumps over the holes of a sparse file
    (zeros, which end no line): the rest of a line may be a terabyte hole."""
    while True:
        raw = handle.readline(MAX_READ_BYTES)
        if not raw:
            return
        if len(raw) == MAX_READ_BYTES and not raw.endswith(b"\n"):
            rest = handle.readline(MAX_READ_BYTES)
            if not rest:  # the file's last line, exactly as long as the cap: nothing was cut
                yield raw, False
                return
            if rest[0] & 0xC0 == 0x80:  # the cut split a character: keep none of it
                raw = _whole_characters(raw)
            while not rest.endswith(b"\n"):  # skip the rest of the overlong line
                check_abort(signal)
                if not _past_hole(handle):
                    break  # a hole runs to the end of the file
                rest = handle.readline(MAX_READ_BYTES)
                if not rest:
                    break
            yield raw + b"\n", True
            continue
        yield raw, False


def _past_hole(handle: BinaryIO) -> bool:
    """Move ``handle`` to the next data when it stands in a hole of a sparse file; when only a
    hole is left, to the end of the file, and False. Where the file system cannot tell (no
    ``SEEK_DATA``), it stays where it is."""
    position = handle.tell()
    try:
        data = os.lseek(handle.fileno(), position, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            return True
        handle.seek(0, os.SEEK_END)  # no data past here: the rest is a hole
        return False
    except AttributeError:  # a platform without SEEK_DATA
        return True
    if data != position:
        handle.seek(data)
    return True


def _whole_characters(cut: bytes) -> bytes:
    """``cut`` without the start of a UTF-8 character that the cut at ``MAX_READ_BYTES`` split
    (the line goes on with a continuation byte): those bytes are not undecodable text, only
    the start of what was cut off. A byte that can start no character is kept."""
    for back in range(1, min(4, len(cut)) + 1):
        byte = cut[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: its lead byte is further back
            continue
        if 0xC2 <= byte <= 0xF4:  # a lead byte: is its sequence whole?
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return cut[:-back] if back < length else cut
        return cut  # ASCII, or a byte no character starts with
    return cut


def read_file(workspace: Workspace, args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
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
    not_utf8 = 0  # bytes of the returned lines that are not UTF-8 (shown as U+FFFD)
    cut: list[int] = []  # the returned lines cut at MAX_READ_BYTES
    try:
        with workspace.open_file(target, shown) as handle:
            if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
                raise WorkspaceError(f'"{shown}" is a binary file', "BINARY_FILE")
            handle.seek(0)
            for number, (raw, was_cut) in enumerate(_capped_lines(handle, signal), start=1):
                check_abort(signal)
                if number < start:
                    continue
                if len(lines) == wanted or (lines and size + len(raw) > MAX_READ_BYTES):
                    has_more = True
                    break
                try:
                    lines.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    lines.append(raw.decode("utf-8", "replace"))
                    not_utf8 += _undecodable_bytes(raw)
                size += len(raw)
                if was_cut:
                    cut.append(number)
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None
    value: dict[str, Any] = {
        "path": shown,
        "text": "".join(lines),
        "start_line": start,
        "line_count": len(lines),
        "has_more": has_more,
    }
    if not_utf8:
        value["not_utf8_bytes"] = not_utf8
    if cut:
        value["cut_lines"] = cut
    return value


def _undecodable_bytes(raw: bytes) -> int:
    """How many bytes of ``raw`` are not UTF-8 (each becomes one escape of its own)."""
    return sum(1 for ch in raw.decode("utf-8", "surrogateescape") if "\udc80" <= ch <= "\udcff")


def render_read_file(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
    start = value["start_line"]
    text = value["text"]
    if not value["line_count"]:
        if start == 1:
            return text_block(f"(empty file: {value['path']})")
        return text_block(f"(no lines at offset {start} in {value['path']})")
    numbered = [
        f"{number:6}\t{line.removesuffix(chr(10)).removesuffix(chr(13))}"
        for number, line in enumerate(split_lines(text), start=start)
    ]
    if value["has_more"]:
        following = start + value["line_count"]
        numbered.append(f"(more lines follow; continue with offset={following})")
    cut = value.get("cut_lines")
    if cut:
        which = ", ".join(str(number) for number in cut)
        lines, are, its = ("lines", "are", "their") if len(cut) > 1 else ("line", "is", "its")
        numbered.append(
            f"({lines} {which} {are} longer than {MAX_READ_BYTES} bytes: only {its} first"
            f" {MAX_READ_BYTES} bytes are shown, and no offset reaches the rest)"
        )
    not_utf8 = value.get("not_utf8_bytes")
    if not_utf8:
        what = "1 byte is" if not_utf8 == 1 else f"{not_utf8} bytes are"
        numbered.append(
            f"({what} not UTF-8 in these lines, shown as U+FFFD: edit_file refuses this file, "
            "and write_file would replace the file's bytes with what you write)"
        )
    return text_block("\n".join(numbered))


def present_read_file_call(args: Mapping[str, Any]) -> GenericCallView:
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
    return GenericCallView(title=title, kind="read", locations=[FileLocation(path=path, line=line)])


# --- list_dir ----------------------------------------------------------------------------------


def _entry_kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def list_dir(workspace: Workspace, args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
    signal: AbortSignal = run_ctx.signal
    check_abort(signal)
    target = workspace.resolve(args.get("path", "."))
    shown = workspace.display(target)
    include_hidden = args.get("include_hidden") is True
    entries: list[dict[str, Any]] = []
    total = 0
    directory = workspace.open_directory(target, shown)
    try:
        with os.scandir(directory) as scan:
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
    finally:
        os.close(directory)
    entries.sort(key=lambda item: item["name"])
    return {"path": shown, "entries": entries[:MAX_LIST_ENTRIES], "total": total}


def render_list_dir(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
    entries = value["entries"]
    if not entries:
        return text_block(f"(empty directory: {value['path']})")
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
    return text_block("\n".join(lines))


def present_list_dir_call(args: Mapping[str, Any]) -> GenericCallView:
    path: str = args.get("path", ".")
    return GenericCallView(title=f"List {path}", kind="read", locations=[FileLocation(path=path)])
