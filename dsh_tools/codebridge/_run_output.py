"""The worker's native output: bytes written to descriptors 1 and 2 (by C code, subprocesses,
or a program that writes to the descriptors directly), decoded as UTF-8 (invalid bytes
replaced, sequences split across reads kept whole) into entries of the run's output ledger."""

from __future__ import annotations

import codecs

from ._ledger import OutputLedger

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
