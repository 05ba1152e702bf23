"""Reading and writing workspace text for the file tools: binary sniffing, UTF-8 checks,
atomic replacement that keeps a file's mode, and the abort check before anything lands."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..actors import AbortSignal
from ._workspace import Workspace, WorkspaceError, check_abort

__all__ = ["BINARY_SNIFF_BYTES", "read_text", "read_text_lenient", "text_block", "write_text"]

BINARY_SNIFF_BYTES = 8192


def text_block(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def read_text(workspace: Workspace, target: Path, shown: str) -> str:
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None
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


def read_text_lenient(workspace: Workspace, target: Path, shown: str) -> str:
    """The current text of a file about to be overwritten (undecodable bytes replaced)."""
    try:
        return target.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise workspace.io_error(exc, shown) from None
