"""The worker's native output: bytes written to descriptors 1 and 2 (by C code, subprocesses,
forked children, or a program that writes to the descriptors directly), decoded as UTF-8
(invalid bytes replaced, sequences split across reads kept whole) into entries of the run's
output ledger.

The entries are lines, as ``print``'s are: what a read brings up to its last newline is one
entry, without that newline, and the line it leaves unended waits for the rest. Each read was
an entry as it came, and the text shown, the entries joined by newlines, had a blank line after
each line a child printed and broke a line at every write of a program that writes one in
pieces (``ls``'s ``ls: `` + ``cannot open directory`` + ...). A line not yet ended is admitted
as it is before anything else is logged (the order of arrival holds), once it is longer than
``PARTIAL_LIMIT``, and at the end of the run."""

from __future__ import annotations

import codecs
from typing import Final

from ._ledger import OutputLedger
from ._run_crash_dump import CrashDumpFilter
from ._run_pipes import DRAIN_LIMIT, READ_SIZE, read_available

__all__ = ["PARTIAL_LIMIT", "NativeOutput"]

_UTF8 = codecs.getincrementaldecoder("utf-8")

PARTIAL_LIMIT: Final = 1 << 16
"""The most characters of a line not yet ended the host holds for a pipe."""


class NativeOutput:
    """One attempt's two native pipes (index 0 stdout, 1 stderr) as ledger entries."""

    __slots__ = ("_decoders", "_dumps", "_ledger", "_partial", "eof", "pending")

    def __init__(self, ledger: OutputLedger) -> None:
        self._ledger = ledger
        # Made at a pipe's first bytes: most runs write nothing natively.
        self._decoders: list[codecs.IncrementalDecoder | None] = [None, None]
        self._partial = ["", ""]
        self._dumps = (CrashDumpFilter(), CrashDumpFilter())
        self.pending = False
        """Whether a pipe's line not yet ended waits (``flush`` admits it)."""
        self.eof = [False, False]

    @property
    def closed(self) -> bool:
        """Whether both pipes reached end of file (or are no longer read)."""
        return self.eof[0] and self.eof[1]

    def close(self) -> None:
        """Stop counting on either pipe (what waits is admitted)."""
        self.flush()
        self.eof[0] = self.eof[1] = True

    def flush(self) -> bool:
        """Admit the lines not yet ended (stdout's first); ``False`` when the ledger
        overflowed."""
        self.pending = False
        admitted = True
        for index in (0, 1):
            partial = self._partial[index]
            if partial:
                self._partial[index] = ""
                admitted = self._admit_lines(index, partial) and admitted
        return admitted

    def take(self, index: int, data: bytes) -> bool:
        """Admit one read of pipe ``index`` (``b""``: its end of file); ``False`` when the
        ledger overflowed."""
        if data:
            return self._admit(index, self._decoder(index).decode(data), False)
        decoder = self._decoders[index]
        text = "" if decoder is None else decoder.decode(b"", True)
        self.eof[index] = True
        return self._admit(index, text, True)

    def _admit(self, index: int, text: str, final: bool) -> bool:
        """Admit ``text``, read from pipe ``index`` after what waits of it, up to its last
        newline (all of it when ``final``, or when what is left is too long to wait)."""
        partial = self._partial
        if partial[1 - index] and not self.flush():  # the other pipe's line came first
            return False
        if partial[index]:
            text = partial[index] + text
            partial[index] = ""
            self.pending = False
        if not text:
            return True
        whole = text
        if not final:
            cut = text.rfind("\n")
            rest = text[cut + 1 :]
            if rest and len(rest) <= PARTIAL_LIMIT:
                partial[index] = rest
                self.pending = True
                if cut < 0:
                    return True
                whole = text[: cut + 1]
        if whole.endswith("\n"):
            whole = whole[:-1]
        return self._admit_lines(index, whole)

    def _admit_lines(self, index: int, text: str) -> bool:
        """Admit ``text``, lines of pipe ``index``, less the worker's frames of a stack dump
        (nothing when that was all of it)."""
        shown = self._dumps[index].lines(text)
        return shown is None or self._ledger.admit(shown)

    @property
    def where(self) -> str | None:
        """Where the program was in the last stack dump on stderr (``CrashDumpFilter``)."""
        return self._dumps[1].where

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
            if not self._admit(index, self._decoder(index).decode(data), False):
                break
        decoder = self._decoders[index]
        tail = "" if decoder is None else decoder.decode(b"", True)
        self._admit(index, tail, True)
        self.eof[index] = True
