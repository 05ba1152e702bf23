"""A frame body too large to hold in host memory while it arrives: it goes to disk instead.

A worker may announce a frame of up to ``max_frame_bytes`` and then send it slowly, or never
finish it. Above ``SPILL_BYTES`` the host writes the body, as it arrives, to an unlinked
temporary file (in the temporary directory, ``TMPDIR``) and decodes it from a read-only memory
map once complete, so a partial frame costs the host a file, not memory.
"""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Callable
from typing import Any, Final

__all__ = ["SPILL_BYTES", "SpilledBody"]

SPILL_BYTES: Final = 4 * 2**20
"""Frame bodies larger than this are spilled to disk while they arrive."""


class SpilledBody:
    """The body of one frame of ``size`` bytes, written to an unlinked temporary file."""

    __slots__ = ("_failed", "_file", "remaining")

    def __init__(self, size: int) -> None:
        self._file = tempfile.TemporaryFile(prefix="dsh-frame-")  # noqa: SIM115 (closed by decode or close)
        self._failed = False
        self.remaining = size

    def write(self, data: memoryview) -> int:
        """Take up to ``remaining`` bytes of ``data``; return how many were taken. A failed
        write (a full disk) still takes them, so the framing stays in step; the frame is then
        dropped at ``decode``."""
        take = min(len(data), self.remaining)
        if take:
            if not self._failed:
                try:
                    self._file.write(data[:take])
                except OSError:
                    self._failed = True
            self.remaining -= take
        return take

    def decode(self, decode: Callable[[Any], Any]) -> Any:
        """Decode the complete body (raises what ``decode`` raises, ``OSError`` when it could
        not be stored); the file is then closed."""
        try:
            if self._failed:
                raise OSError("the spilled frame could not be stored")
            self._file.flush()
            with mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return decode(mapped)
        finally:
            self.close()

    def close(self) -> None:
        """Drop the file (and its disk space)."""
        self._file.close()
