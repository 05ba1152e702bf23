"""Reading and writing workspace text for the file tools: binary sniffing, UTF-8 checks,
atomic replacement that keeps a file's mode, and the abort check before anything lands."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from ..actors import AbortSignal
from ._workspace import Workspace, WorkspaceError, check_abort

__all__ = [
    "BINARY_SNIFF_BYTES",
    "MAX_EDIT_BYTES",
    "read_text",
    "read_text_lenient",
    "text_block",
    "write_text",
]

BINARY_SNIFF_BYTES = 8192


def text_block(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


MAX_EDIT_BYTES = 16 * 2**20
"""The largest existing file ``write_file`` and ``edit_file`` read whole (to edit it, or to show
what an overwrite changed): a larger one, or a sparse file claiming a terabyte, is refused
(``FILE_TOO_LARGE``) once this much of it is read."""


def _read_bytes(workspace: Workspace, target: Path, shown: str) -> bytes:
    with workspace.open_file(target, shown) as handle:
        try:
            data = handle.read(MAX_EDIT_BYTES + 1)
        except OSError as exc:
            raise workspace.io_error(exc, shown) from None
    if len(data) > MAX_EDIT_BYTES:
        raise WorkspaceError(
            f'"{shown}" has more than the {MAX_EDIT_BYTES} bytes this tool reads whole',
            "FILE_TOO_LARGE",
        )
    return data


def read_text(workspace: Workspace, target: Path, shown: str) -> str:
    data = _read_bytes(workspace, target, shown)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise WorkspaceError(f'"{shown}" is a binary file', "BINARY_FILE")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkspaceError(f'"{shown}" is not UTF-8 text', "BINARY_FILE") from None


def write_text(
    workspace: Workspace, target: Path, shown: str, text: str, signal: AbortSignal
) -> None:
    """Write ``text`` to ``target``. An existing file is replaced atomically (a temporary file
    renamed over it, keeping the file's mode); a new one is created with the process umask.
    Everything happens in the directory ``Workspace.parent`` reached, so a path changed
    meanwhile never leads the write out of the workspace."""
    data = text.encode("utf-8")
    with workspace.parent(target, shown, make=True) as (directory, name):
        if not name:
            raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
        try:
            try:
                existing = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
            except FileNotFoundError:
                check_abort(signal)  # last point of return: nothing has changed yet
                fd = os.open(name, _CREATE_FLAGS, 0o666, dir_fd=directory)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                return
            if not stat.S_ISREG(existing):
                kind = "a directory" if stat.S_ISDIR(existing) else "not a regular file"
                raise WorkspaceError(f'"{shown}" is {kind}', "NOT_A_FILE")
            temp, fd = _temporary(directory, name)
        except OSError as exc:
            raise workspace.io_error(exc, shown) from None
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                os.fchmod(handle.fileno(), stat.S_IMODE(existing))
            check_abort(signal)  # last point of return: nothing has changed yet
            os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            if isinstance(exc, OSError):
                raise workspace.io_error(exc, shown) from None
            raise


def _temporary(directory: int, name: str) -> tuple[str, int]:
    """A new file beside ``name`` in ``directory``, for an atomic replace: its name and an
    open descriptor."""
    for _ in range(100):
        temp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return temp, os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=directory)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {name}")


def read_text_lenient(workspace: Workspace, target: Path, shown: str) -> str:
    """The current text of a file about to be overwritten (undecodable bytes replaced)."""
    return _read_bytes(workspace, target, shown).decode("utf-8", "replace")
