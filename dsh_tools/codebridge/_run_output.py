"""The worker's native output: bytes written to descriptors 1 and 2 (by C code, subprocesses,
or a program that writes to the descriptors directly), decoded as UTF-8 (invalid bytes
replaced, sequences split across reads kept whole) into entries of the run's output ledger."""

from __future__ import annotations

import codecs

from ._ledger import OutputLedger
from ._run_pipes import DRAIN_LIMIT, READ_SIZE, read_available

__all__ = ["NativeOutput"]

_UTF8 = codecs.getincrementaldecoder("utf-8")


class NativeOutput:
    """One attempt's two native pipes (index 0 stdout, 1 stderr) as ledger entries."""

    __slots__ = ("_decoders", "_ledger", "eof")

    def __init__(self, ledger: OutputLedger) -> None:
        self._ledger = ledger
        # Made at a pipe's first bytes: most runs write nothing natively.
        self._decoders: list[codecs.IncrementalDecoder | None] = [None, None]
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
        if data:
            text = self._decoder(index).decode(data)
        else:
            decoder = self._decoders[index]
            text = "" if decoder is None else decoder.decode(b"", True)
            self.eof[index] = True
        return not text or self._ledger.admit(text)

    def _decoder(self, index: int) -> codecs.IncrementalDecoder:
        decoder = self._decoders[index]
        if decoder is None:
            decoder = self._decoders[index] = _UTF8("replace")
        return decoder

    def drain(self, index: int, fd: int | None) -> None:
        """Admit what pipe ``index`` holds now (bounded), and the decoder's tail; the pipe then
        counts as closed. Nothing for a pipe closed already: it was read to its end of file
        (its decoder's tail taken then), or is no longer counted."""
        if self.eof[index]:
            return
        taken = 0
        while fd is not None and taken < DRAIN_LIMIT:
            data = read_available(fd, READ_SIZE)
            if not data:
                break
            taken += len(data)
            text = self._decoder(index).decode(data)
            if text and not self._ledger.admit(text):
                break
        decoder = self._decoders[index]
        tail = "" if decoder is None else decoder.decode(b"", True)
        if tail:
            self._ledger.admit(tail)
        self.eof[index] = True
