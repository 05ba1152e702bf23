"""How a worker's threads fit its address-space limit.

The worker runs under ``RLIMIT_AS`` = ``max_memory_mb``, which counts address space reserved,
not memory used. Left to their defaults, each thread a program starts reserves the C library's
default stack (8 MiB, from ``RLIMIT_STACK``) and, once it allocates, a malloc arena of its own
(glibc reserves 64 MiB of address space for each, up to eight per core): measured, a program
could start 4 threads under ``max_memory_mb=256`` and 12 under 512 before ``RuntimeError: can't
start new thread``, so a ``ThreadPoolExecutor(32)`` failed while using almost no memory.

``fit_threads`` runs once in the template, before it forks any worker (what it sets is the
process's own state, which each forked worker inherits; the ``MALLOC_ARENA_MAX`` variable would
be read only when a process starts, and the workers never start, they are forked):

- glibc's malloc keeps to its main arena (``mallopt(M_ARENA_MAX, 1)``). Python's own small
  objects come from its allocator, in blocks it maps itself, and every thread allocates under
  the interpreter lock, so a second arena would cost 64 MiB of address space for nearly
  nothing; C code that allocates with the lock released waits for the arena's lock instead.
- Python threads get ``THREAD_STACK_BYTES`` of stack (``threading.stack_size``), see there.

A program may choose another stack size for its own threads (``threading.stack_size``); its
child processes start with the C library's defaults again, under the same per-process limit.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Final

__all__ = ["ARENAS", "THREAD_STACK_BYTES", "fit_threads"]

THREAD_STACK_BYTES: Final = 4 * 1024 * 1024
"""The stack of each thread the program starts with ``threading``. The deepest recursions
measured in a thread at the default recursion limit (through ``functools.lru_cache``, class
construction, generators, operator methods, ``compile`` of a 50,000-term expression; and the
C-level recursions of ``repr``, ``==``, ``json`` and ``pickle`` on nested lists up to their own
limits) needed at most 430 KiB on CPython 3.11 and 3.12 and 1.7 MiB on 3.13, whose C-level
limit lets ``==`` on lists nested 10,000 deep recurse that far. A program that raises the
recursion limit, as models' programs often do, recurses further: a 2 MiB stack crashed at a
depth of 5,000 ``lru_cache`` calls that the main thread's 8 MiB took. Half the main thread's
stack takes about twice that depth, at half its address space."""

ARENAS: Final = 1
"""The most malloc arenas a worker's C library keeps (its main arena only)."""

_M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` parameter for the arena limit (``malloc.h``)."""


def fit_threads() -> None:
    """Set this process's thread stacks and malloc arenas for the workers it forks (see the
    module's docstring). Best effort: a C library other than glibc keeps its own ways."""
    threading.stack_size(THREAD_STACK_BYTES)
    with contextlib.suppress(Exception):
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return  # glibc only: another C library's mallopt parameters differ
        import ctypes

        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, ARENAS)
