"""Reading and writing workspace text for the file tools: binary sniffing, UTF-8 checks,
atomic replacement that keeps a file's mode, and the abort check before anything lands."""

from __future__ import annotations

import contextlib
import errno
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
    "encoded",
    "read_text",
    "read_text_lenient",
    "refuse_past_limit",
    "text_block",
    "write_bytes",
]

BINARY_SNIFF_BYTES = 8192


def text_block(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


MAX_EDIT_BYTES = 16 * 2**20
"""The largest existing file ``write_file`` and ``edit_file`` read whole (to edit it, or to show
what an overwrite changed): a larger one, or a sparse file claiming a terabyte, is refused
(``FILE_TOO_LARGE``) once this much of it is read. It is also the largest file they write, so
that what they write they can edit again (and a ``replace_all`` of one character by 500 cannot
turn 2 MB into a gigabyte)."""


def refuse_past_limit(shown: str, size: int) -> None:
    """Refuse (``FILE_TOO_LARGE``) a write of ``size`` bytes, or more, to ``shown`` past
    ``MAX_EDIT_BYTES``."""
    if size > MAX_EDIT_BYTES:
        raise WorkspaceError(
            f'"{shown}" would have {size} bytes, more than the {MAX_EDIT_BYTES} these tools write',
            "FILE_TOO_LARGE",
        )


def encoded(shown: str, text: str) -> bytes:
    """``text`` as the UTF-8 bytes to write to ``shown`` (refused past ``MAX_EDIT_BYTES``)."""
    data = text.encode("utf-8")
    refuse_past_limit(shown, len(data))
    return data


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


def write_bytes(
    workspace: Workspace, target: Path, shown: str, data: bytes, signal: AbortSignal
) -> None:
    """Write ``data`` (from ``encoded``) to ``target``. An existing file is replaced atomically
    (a temporary file renamed over it, keeping the file's mode, and its owner and group as far
    as this process may set them; a file this process may not write is refused); a new one is
    created with the process umask.
    Everything happens in the directory ``Workspace.parent`` reached, so a path changed
    meanwhile never leads the write out of the workspace."""
    with workspace.parent(target, shown, make=True) as (directory, name):
        if not name:
            raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
        try:
            try:
                existing = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                check_abort(signal)  # last point of return: nothing has changed yet
                fd = os.open(name, _CREATE_FLAGS, 0o666, dir_fd=directory)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                return
            if not stat.S_ISREG(existing.st_mode):
                kind = "a directory" if stat.S_ISDIR(existing.st_mode) else "not a regular file"
                raise WorkspaceError(f'"{shown}" is {kind}', "NOT_A_FILE")
            # Replacing needs only a writable directory: a file this process may not write
            # (read-only, say) is refused as writing it in place would be.
            if not os.access(
                name, os.W_OK, dir_fd=directory, effective_ids=True, follow_symlinks=False
            ):
                raise PermissionError(errno.EACCES, "permission denied")
            temp, fd = _temporary(directory, name)
        except OSError as exc:
            raise workspace.io_error(exc, shown) from None
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                _keep_owner(handle.fileno(), existing)
                os.fchmod(handle.fileno(), stat.S_IMODE(existing.st_mode))
            check_abort(signal)  # last point of return: nothing has changed yet
            os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            if isinstance(exc, OSError):
                raise workspace.io_error(exc, shown) from None
            raise


def _keep_owner(fd: int, existing: os.stat_result) -> None:
    """Give the replacement the owner and group of the file it replaces, as far as this
    process may (root may; another user may keep the group it belongs to), so that a
    harness running as root does not take a user's files from them."""
    if existing.st_uid == os.geteuid() and existing.st_gid == os.getegid():
        return
    with contextlib.suppress(OSError):
        os.fchown(fd, existing.st_uid, existing.st_gid)
        return
    with contextlib.suppress(OSError):
        os.fchown(fd, -1, existing.st_gid)


_NAME_MAX = 255
"""The longest file name, in bytes, of the usual Linux file systems."""


def _temporary(directory: int, name: str) -> tuple[str, int]:
    """A new file beside ``name`` in ``directory``, for an atomic replace: its name and an
    open descriptor. It is named after ``name`` where that fits the longest file name."""
    fits = len(os.fsencode(name)) + len("..12345678.tmp") <= _NAME_MAX
    for _ in range(100):
        token = secrets.token_hex(4)
        temp = f".{name}.{token}.tmp" if fits else f".dsh-tools.{token}.tmp"
        try:
            return temp, os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=directory)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {name}")


def read_text_lenient(workspace: Workspace, target: Path, shown: str) -> str:
    """The current text of a file about to be overwritten (undecodable bytes replaced)."""
    return _read_bytes(workspace, target, shown).decode("utf-8", "replace")
