"""The worker's own frames taken out of a crash dump in its native output.

After a crash in C (``ctypes`` on a bad address, recursion past the C stack) the worker's
``faulthandler`` writes the Python stack of each thread to descriptor 2, from C, as the process
dies: nothing in the worker can trim it. Beneath the program's own frames it showed some twenty
of the worker's, asyncio's and the sandbox's, naming their files on the host. The host takes
them out of the lines it reads, as a traceback of the program leaves them out: in a thread's
block (``Current thread 0x... (most recent call first):`` or ``Thread 0x...``, one
``  File "<name>", line <n> in <function>`` line per frame, innermost first), every frame
beneath the outermost frame of the program's file and every frame of the worker's package.
Lines a program writes that merely look like a dump lose at most such frame lines.
"""

from __future__ import annotations

import os
from typing import Final

from ._program import FILENAME

__all__ = ["CrashDumpFilter"]

_WORKER_PACKAGE: Final = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The directory of the worker's modules (and the sandbox's, beneath it)."""
_BLOCK_END: Final = " (most recent call first):"
_FRAME: Final = '  File "'
_PROGRAM_FRAME: Final = f'{_FRAME}{FILENAME}", '
_MARK: Final = "most recent call first"
"""What an entry holds when a dump may start in it (the cheap test ``lines`` makes first)."""


class CrashDumpFilter:
    """The state of one native pipe's lines: outside a thread's block, in one, or in one
    past the program's outermost frame so far."""

    __slots__ = ("_below", "_block")

    def __init__(self) -> None:
        self._block = False
        self._below = False  # a frame of the program's was seen in this block

    def lines(self, text: str) -> str:
        """``text`` (whole lines, without the last one's newline) without the worker's frames
        of any dump it holds or continues."""
        if not self._block and _MARK not in text:
            return text  # nearly always: no dump
        kept: list[str] = []
        for line in text.split("\n"):
            if self._block and line.startswith(_FRAME):
                if line.startswith(_PROGRAM_FRAME):
                    self._below = True
                elif self._below or line[len(_FRAME) :].startswith(_WORKER_PACKAGE):
                    continue
            else:
                self._block = line.endswith(_BLOCK_END) and (
                    line.startswith("Current thread 0x") or line.startswith("Thread 0x")
                )
                self._below = False
            kept.append(line)
        return "\n".join(kept)
