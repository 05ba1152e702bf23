"""The worker's native output: bytes written to descriptors 1 and 2 (by C code, subprocesses,
forked children, or a program that writes to the descriptors directly), decoded as UTF-8
(invalid bytes replaced, sequences split across reads kept whole) into entries of the run's
output ledger: each read is one entry, as it came (the contract's rule: a line a child prints
keeps its newline, and a line written in pieces may come in several entries).

The one exception is a stack dump (``faulthandler``'s, after a crash in C), whose worker frames
are taken out (``CrashDumpFilter``): the filter reads whole lines, and ``faulthandler`` writes
each line in pieces, so while a dump may be under way the line a read leaves unended waits for
the next read of its pipe (``CARRY_LIMIT`` at most) or the end of the run. (The stacks the host
asks for as a budget runs out come on a pipe of their own, never here: ``_run_crash_dump``.)"""

from __future__ import annotations

import codecs
from typing import Final

from ._ledger import OutputLedger
from ._run_crash_dump import DUMP_STARTS, CrashDumpFilter
from ._run_pipes import DRAIN_LIMIT, READ_SIZE, read_available

__all__ = ["CARRY_LIMIT", "NativeOutput"]

_UTF8 = codecs.getincrementaldecoder("utf-8")

CARRY_LIMIT: Final = 1 << 12
"""The most characters of an unended line of a stack dump the host holds for a pipe (a dump's
lines are short: a frame names a file, a line and a function)."""


def _may_start_dump(tail: str) -> bool:
    """Whether an unended line may be, or become, the first line of a thread's stack in a
    dump."""
    return tail.startswith(DUMP_STARTS) or any(start.startswith(tail) for start in DUMP_STARTS)


class NativeOutput:
    """One attempt's two native pipes (index 0 stdout, 1 stderr) as ledger entries."""

    __slots__ = ("_carried", "_decoders", "_dumps", "_ledger", "eof")

    def __init__(self, ledger: OutputLedger) -> None:
        self._ledger = ledger
        # Made at a pipe's first bytes: most runs write nothing natively.
        self._decoders: list[codecs.IncrementalDecoder | None] = [None, None]
        self._dumps = (CrashDumpFilter(), CrashDumpFilter())
        self._carried = ["", ""]
        self.eof = [False, False]

    @property
    def closed(self) -> bool:
        """Whether both pipes reached end of file (or are no longer read)."""
        return self.eof[0] and self.eof[1]

    def close(self) -> None:
        """Stop counting on either pipe (an unended line of a dump that waits is admitted)."""
        self.flush()
        self.eof[0] = self.eof[1] = True

    def flush(self) -> bool:
        """Admit what waits of a dump's unended lines; ``False`` when the ledger overflowed."""
        admitted = True
        for index in (0, 1):
            if self._carried[index]:
                admitted = self._admit(index, "", final=True) and admitted
        return admitted

    def take(self, index: int, data: bytes) -> bool:
        """Admit one read of pipe ``index`` (``b""``: its end of file); ``False`` when the
        ledger overflowed."""
        if data:
            return self._admit(index, self._decoder(index).decode(data))
        decoder = self._decoders[index]
        text = "" if decoder is None else decoder.decode(b"", True)
        self.eof[index] = True
        return self._admit(index, text, final=True)

    def _admit(self, index: int, text: str, *, final: bool = False) -> bool:
        """Admit ``text``, one read of pipe ``index``, less the worker's frames of a stack
        dump it holds (nothing when that was all of it); while a dump may be under way, its
        unended last line waits for the next read (unless ``final``)."""
        carried = self._carried[index]
        if carried:
            text = carried + text
            self._carried[index] = ""
        dump = self._dumps[index]
        cut = text.rfind("\n") + 1
        head, tail = text[:cut], text[cut:]
        shown = ""
        if head:  # whole lines, which the filter reads (the last newline is kept)
            kept = dump.lines(head[:-1])
            if kept is not None:
                shown = kept + "\n"
        if tail:
            # Whether a dump is under way is known once the whole lines before are read.
            if not final and len(tail) <= CARRY_LIMIT and (dump.in_dump or _may_start_dump(tail)):
                self._carried[index] = tail
            else:
                kept = dump.lines(tail)
                if kept is not None:
                    shown += kept
        return not shown or self._ledger.admit(shown)

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
            if not self._admit(index, self._decoder(index).decode(data)):
                break
        decoder = self._decoders[index]
        tail = "" if decoder is None else decoder.decode(b"", True)
        self._admit(index, tail, final=True)
        self.eof[index] = True
