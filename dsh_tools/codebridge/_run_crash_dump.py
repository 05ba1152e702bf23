"""The worker's own frames taken out of a crash dump in its native output.

After a crash in C (``ctypes`` on a bad address, recursion past the C stack) the worker's
``faulthandler`` writes the Python stack of each thread to descriptor 2, from C, as the process
dies: nothing in the worker can trim it. Beneath the program's own frames it showed some twenty
of the worker's, asyncio's and the sandbox's, naming their files on the host. The host takes
them out of the lines it reads, as a traceback of the program leaves them out: in a thread's
block (``Current thread 0x... (most recent call first):`` or ``Thread 0x...``, one
``  File "<name>", line <n> in <function>`` line per frame, innermost first), every frame
beneath the outermost frame of the program's file and every frame of the worker's package
or of the event loop (asyncio, selectors: the worker's loop waiting).
Lines a program writes that merely look like a dump lose at most such frame lines (and name
nothing: the line a budget's failure names is read elsewhere, below).

A thread's block that shows no frame (the worker's loop waiting while the program awaits) is
left out, first line and all.

The same stacks come, with the program running on, when the run's compute budget has run out
or its wall ceiling is reached (``WHERE_SIGNAL``), but on the worker's where pipe
(``WHERE_FD``), never on its output: the host reads them only for where the program was
(``where_of``), its innermost frame of the program being where the time ran out, which the
failure names. Descriptor 2 keeps what the program and a crash write.
"""

from __future__ import annotations

import asyncio
import os
import selectors
from typing import Final

from ._program import FILENAME

__all__ = ["DUMP_STARTS", "CrashDumpFilter", "where_of"]

_WORKER_PACKAGE: Final = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The directory of the worker's modules (and the sandbox's, beneath it)."""
_LOOP_FILES: Final = (
    os.path.dirname(asyncio.__file__) + os.sep,
    selectors.__file__,
)
"""The event loop's plumbing: the worker's loop waiting in a thread's block, beneath anything
of the program's, or between a program's own frames (a loop it runs in a thread)."""
DUMP_STARTS: Final = ("Current thread 0x", "Thread 0x")
"""How the first line of a thread's stack in a dump begins."""
_BLOCK_END: Final = " (most recent call first):"
_FRAME: Final = '  File "'
_PROGRAM_FRAME: Final = f'{_FRAME}{FILENAME}", '
_MARK: Final = "most recent call first"
"""What an entry holds when a dump may start in it (the cheap test ``lines`` makes first)."""


class CrashDumpFilter:
    """The state of one native pipe's lines: in a dump or not, in a thread's block of it or
    not, and where in that block."""

    __slots__ = ("_below", "_block", "_dump", "_held", "_inner", "_rank", "where")

    def __init__(self) -> None:
        self._dump = False
        self._block = False
        # A thread's first line, shown only with a line of its block that is shown: a block
        # with none (the worker's loop waiting while the program awaits) says nothing but
        # that a thread exists.
        self._held: str | None = None
        self._inner = False  # a frame is shown of this block (the innermost comes first)
        self._below = False  # a frame of the program's was seen in this block
        self._rank = 0  # how well ``where`` tells where this dump's program was (``lines``)
        self.where: str | None = None
        """Where the program was in the last dump that showed it: ``line <n>, in <name>``
        (``line <n>`` at its top level), the innermost frame of the program in a thread that
        runs the program's own code (whose innermost frame is the program's), else in the
        first thread that has one (waiting in a call it made)."""

    @property
    def in_dump(self) -> bool:
        """Whether the lines read so far end inside a dump (its next line may continue it)."""
        return self._dump or self._block

    def lines(self, text: str) -> str | None:
        """``text`` (whole lines, without the last one's newline) without the worker's frames
        of any dump it holds or continues; ``None`` when nothing is left of it."""
        if not self._dump and _MARK not in text:
            return text  # nearly always: no dump
        kept: list[str] = []
        dropped = False
        for line in text.split("\n"):
            if self._block and line.startswith(_FRAME):
                if line.startswith(_PROGRAM_FRAME):
                    if not self._below:
                        rank = 1 if self._inner else 2
                        if rank > self._rank:
                            self._rank = rank
                            self.where = _where(line[len(_PROGRAM_FRAME) :])
                    self._below = self._inner = True
                elif self._below or line[len(_FRAME) :].startswith((_WORKER_PACKAGE, *_LOOP_FILES)):
                    dropped = True
                    continue
                else:
                    self._inner = True  # a library's frame, in a call the program made
            elif line.endswith(_BLOCK_END) and line.startswith(DUMP_STARTS):
                if not self._dump:
                    self._dump = True
                    self._rank = 0
                self._block = True
                self._inner = self._below = False
                self._held = line
                dropped = True
                continue
            elif self._block and line.startswith("  "):  # "  <no Python frame>", "  ..."
                pass
            else:
                empty = self._block and self._held is not None
                self._block = False
                self._held = None
                self._dump = line == ""  # threads' blocks are apart by a blank line
                if empty and self._dump:
                    dropped = True  # the separator after a block that showed nothing
                    continue
            if self._held is not None:
                kept.append(self._held)
                self._held = None
            kept.append(line)
        if dropped and not kept:
            return None
        return "\n".join(kept)


def where_of(written: bytes) -> str | None:
    """Where the program was by the stacks the worker wrote when asked (``WHERE_SIGNAL``),
    whole lines only (a dump that found the pipe full ends unended); ``None`` when they show
    no line of the program."""
    text = written.decode("utf-8", "replace")
    end = text.rfind("\n")
    if end < 0:
        return None
    dump = CrashDumpFilter()
    dump.lines(text[:end])
    return dump.where


def _where(frame: str) -> str:
    """``line 4, in spin`` of a frame's ``line 4 in spin`` (``line 4`` of ``<module>``)."""
    line, _, name = frame.partition(" in ")
    return line if name in ("", "<module>") else f"{line}, in {name}"
