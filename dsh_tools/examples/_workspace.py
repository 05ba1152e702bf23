"""The workspace the example tools work in: path confinement, error vocabulary, abort checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..actors import AbortError, AbortSignal, HarnessError

__all__ = ["Workspace", "WorkspaceError", "check_abort", "int_arg"]


class WorkspaceError(HarnessError):
    """A file or command request the workspace refuses; ``code`` says why.

    Codes: ``PATH_OUTSIDE_WORKSPACE``, ``INVALID_PATH``, ``NOT_FOUND``, ``NOT_A_FILE``,
    ``NOT_A_DIRECTORY``, ``BINARY_FILE``, ``PERMISSION_DENIED``, ``IO_ERROR``,
    ``INVALID_RANGE``, ``EDIT_MISMATCH``.
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
        resolved = Path(os.path.realpath(candidate))
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise WorkspaceError(
                f'path "{path}" is outside the workspace', "PATH_OUTSIDE_WORKSPACE"
            )
        return resolved

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
