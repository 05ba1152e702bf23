"""The workspace the example tools work in: path confinement, error vocabulary, abort checks.

A path is checked twice. ``resolve`` gives its real path (symbolic links followed) and refuses
one outside the root, which names the problem early and plainly. What a tool then reads or
writes is reached again from the root, one directory descriptor at a time, without following a
symbolic link anywhere (``Workspace.parent``): whoever may change the workspace meanwhile (a
Code Mode program with a write grant on it, swapping a directory for a link to ``/etc`` in a
loop) can make the call fail, never make it act outside the root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..actors import AbortError, AbortSignal, HarnessError

__all__ = ["Workspace", "WorkspaceError", "check_abort", "int_arg"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | os.O_CLOEXEC
# Not blocking: opening a FIFO for reading would otherwise wait for a writer for ever.
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)


class WorkspaceError(HarnessError):
    """A file or command request the workspace refuses; ``code`` says why.

    Codes: ``PATH_OUTSIDE_WORKSPACE``, ``INVALID_PATH``, ``NOT_FOUND``, ``NOT_A_FILE``,
    ``NOT_A_DIRECTORY``, ``BINARY_FILE``, ``PERMISSION_DENIED``, ``IO_ERROR``,
    ``INVALID_RANGE``, ``EDIT_MISMATCH``, ``FILE_TOO_LARGE``.
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, code)


class Workspace:
    """A root folder that every path a tool touches must stay inside.

    Paths are taken relative to the root, or absolute when they already point inside it.
    Resolution follows symbolic links, so a link that leads out of the root is refused like a
    ``..`` that does.
    """

    __slots__ = ("root",)

    def __init__(self, root: Path | str) -> None:
        self.root = Path(os.path.realpath(os.fspath(root)))

    def resolve(self, path: str) -> Path:
        """The real path ``path`` names; raises ``WorkspaceError`` when it leaves the root."""
        if "\x00" in path:
            raise WorkspaceError(f'path "{path}" contains a NUL character', "INVALID_PATH")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = Path(os.path.realpath(candidate))
        except OSError as exc:  # a link that turned into a directory as it was read, say
            raise self.io_error(exc, path) from None
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise WorkspaceError(
                f'path "{path}" is outside the workspace', "PATH_OUTSIDE_WORKSPACE"
            )
        return resolved

    @contextlib.contextmanager
    def parent(
        self, resolved: Path, shown: str, *, make: bool = False
    ) -> Iterator[tuple[int, str]]:
        """The directory holding ``resolved`` (a path ``resolve`` gave), open, and the entry's
        name in it (``""`` for the root itself), reached from the root without following a
        symbolic link; ``make``: create missing directories on the way. Raises
        ``WorkspaceError`` when the path changed since it was resolved (a link appeared)."""
        parts = resolved.relative_to(self.root).parts
        directories, name = (parts[:-1], parts[-1]) if parts else ((), "")
        try:
            fd = os.open(self.root, _DIRECTORY_FLAGS)
        except OSError as exc:
            raise self.io_error(exc, ".") from None
        part = ""
        try:
            for part in directories:
                try:
                    following = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not make:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                    following = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = following
        except OSError as exc:
            error = self._walk_error(exc, shown, fd, part)
            os.close(fd)
            raise error from None
        try:
            yield fd, name
        finally:
            os.close(fd)

    def open_directory(self, resolved: Path, shown: str) -> int:
        """A descriptor of the directory ``resolved``, reached as ``parent`` reaches it."""
        with self.parent(resolved, shown) as (directory, name):
            if not name:
                return os.dup(directory)
            try:
                return os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
            except OSError as exc:
                raise self._walk_error(exc, shown, directory, name) from None

    def open_file(self, resolved: Path, shown: str) -> BinaryIO:
        """The regular file ``resolved``, open for reading (reached as ``parent`` reaches it);
        a directory, a FIFO, a device or a socket is refused with ``NOT_A_FILE``."""
        with self.parent(resolved, shown) as (directory, name):
            if not name:
                raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=directory)
            except OSError as exc:
                raise self._walk_error(exc, shown, directory, name) from None
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
            if not stat.S_ISREG(mode):
                raise WorkspaceError(f'"{shown}" is not a regular file', "NOT_A_FILE")
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def kind(self, resolved: Path, shown: str) -> str | None:
        """``"file"``, ``"directory"``, ``"other"`` or None (no such entry) for ``resolved``,
        without following a symbolic link."""
        try:
            return self._kind(resolved, shown)
        except WorkspaceError as exc:
            if exc.code == "NOT_FOUND":  # a directory on the way is missing
                return None
            raise

    def _kind(self, resolved: Path, shown: str) -> str | None:
        with self.parent(resolved, shown) as (directory, name):
            if not name:
                return "directory"
            try:
                mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise self.io_error(exc, shown) from None
        if stat.S_ISREG(mode):
            return "file"
        return "directory" if stat.S_ISDIR(mode) else "other"

    def _walk_error(self, exc: OSError, shown: str, directory: int, name: str) -> WorkspaceError:
        """What an ``open`` of ``name`` in ``directory`` failing with ``exc`` means: a symbolic
        link there now (``O_NOFOLLOW`` refused it) means the path changed after it was resolved
        inside the root."""
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link and _loops(directory, name):  # resolving it found no end: it never changed
            return WorkspaceError(f'path "{shown}" is a loop of symbolic links', "INVALID_PATH")
        if link or exc.errno in (errno.ELOOP, errno.EMLINK):
            return WorkspaceError(
                f'path "{shown}" changed while in use (a symbolic link replaced part of it); '
                "it is no longer inside the workspace",
                "PATH_OUTSIDE_WORKSPACE",
            )
        return self.io_error(exc, shown)

    def display(self, resolved: Path) -> str:
        """A resolved path as the tools report it: relative to the root, ``.`` for the root."""
        relative = resolved.relative_to(self.root).as_posix()
        return relative if relative else "."

    def io_error(self, exc: OSError, shown: str) -> WorkspaceError:
        """A clear ``WorkspaceError`` for an ``OSError`` about the path shown as ``shown``."""
        if isinstance(exc, FileNotFoundError):
            return WorkspaceError(f'"{shown}" does not exist', "NOT_FOUND")
        if isinstance(exc, IsADirectoryError):
            return WorkspaceError(f'"{shown}" is a directory, not a file', "NOT_A_FILE")
        if isinstance(exc, NotADirectoryError):
            return WorkspaceError(f'"{shown}" is not a directory', "NOT_A_DIRECTORY")
        if isinstance(exc, PermissionError):
            return WorkspaceError(f'permission denied: "{shown}"', "PERMISSION_DENIED")
        return WorkspaceError(f'cannot access "{shown}": {exc.strerror or exc}', "IO_ERROR")


def _loops(directory: int, name: str) -> bool:
    """Whether following the symbolic link ``name`` in ``directory`` never ends (only its
    metadata is read, wherever it points)."""
    try:
        os.stat(name, dir_fd=directory)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def check_abort(signal: AbortSignal) -> None:
    """Raise ``AbortError`` when ``signal`` has aborted; a cheap check for loops."""
    if signal.aborted:
        raise AbortError()


def int_arg(args: Any, key: str) -> int | None:
    """An integer argument as an ``int`` (the schema also accepts integral floats like 2.0)."""
    value = args.get(key)
    if value is None or type(value) is bool:
        return None
    if type(value) is float:
        return int(value) if value.is_integer() else None
    return value if type(value) is int else None
