"""The worker's native output: bytes written to descriptors 1 and 2 (by C code, subprocesses,
or a program that writes to the descriptors directly), decoded as UTF-8 (invalid bytes
replaced, sequences split across reads kept whole) into entries of the run's output ledger."""

from __future__ import annotations

import codecs

from ._ledger import OutputLedger
from ._run_pipes import DRAIN_LIMIT, READ_SIZE, read_available

__all__ = ["NativeOutput"]


class NativeOutput:
    """One attempt's two native pipes (index 0 stdout, 1 stderr) as ledger entries."""

    __slots__ = ("_decoders", "_ledger", "eof")

    def __init__(self, ledger: OutputLedger) -> None:
        self._ledger = ledger
        self._decoders = [
            codecs.getincrementaldecoder("utf-8")("replace"),
            codecs.getincrementaldecoder("utf-8")("replace"),
        ]
        self.eof = [False, False]

    @property
    def closed(self) -> bool:
        """Whether both pipes reached end of file (or are no longer read)."""
        return self.eof[0] and self.eof[1]

    def close(self) -> None:
        """Stop counting on either pipe."""
        self.eof[0] = self.eof[1] = True

    def take(self, index: int, data: bytes) -> bool:
        """Admit one read of pipe ``index`` (``b""``: its end of file); ``False`` when the
        ledger overflowed."""
        decoder = self._decoders[index]
        if data:
            text = decoder.decode(data)
        else:
            text = decoder.decode(b"", True)
            self.eof[index] = True
        return not text or self._ledger.admit(text)

    def drain(self, index: int, fd: int | None) -> None:
        """Admit what pipe ``index`` holds now (bounded), and the decoder's tail; the pipe then
        counts as closed."""
        decoder = self._decoders[index]
        taken = 0
        while fd is not None and taken < DRAIN_LIMIT:
            data = read_available(fd, READ_SIZE)
            if not data:
                break
            taken += len(data)
            text = decoder.decode(data)
            if text and not self._ledger.admit(text):
                break
        tail = decoder.decode(b"", True)
        if tail:
            self._ledger.admit(tail)
        self.eof[index] = True
