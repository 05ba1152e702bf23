"""Runs prepared ahead: pre-forked workers that have a held ``Boot`` and wait for the go.

A ``run_code`` call's program is known as soon as the call begins, long before its body asks
the runtime for the run (guards, hooks, approval and the pipeline come first). The runtime then
takes a pre-forked worker and sends it the program in a held ``Boot``: the worker wakes and
compiles it meanwhile (measured by its init as the run would be), and runs nothing of it until
the run itself sends ``GO``. The run claims a worker whose boot is exactly its own (the same
bytes: program, namespaces, limits), so no identity links the call to its run and a mismatch
(a tool registered in between, say) only means the run takes a fresh worker.

Each prepared worker is released when the call that prepared it ends: claimed by then, or
closed, its program never run (the channel's end of file is a held worker's answer, and the
runtime kills what closing does not end at once). One left held for ``HELD_SECONDS`` (its call
waits that long for approval, say) is closed at the next prepare or run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from ._pool import Slot

__all__ = ["HELD_SECONDS", "MAX_HELD", "PreparedRuns", "Release"]

HELD_SECONDS: Final = 30.0
"""How long a prepared worker waits for its run at most."""
MAX_HELD: Final = 2
"""At most this many prepared workers wait at once: each may hold a compiled program as large
as the run's memory budget allows."""


class _Held:
    """One prepared worker: the bytes of the ``Boot`` it holds (unheld) and its deadline."""

    __slots__ = ("boot", "claimed", "deadline", "slot")

    def __init__(self, boot: bytes, slot: Slot) -> None:
        self.boot = boot
        self.slot = slot
        self.deadline = time.monotonic() + HELD_SECONDS
        self.claimed = False  # set once, under the lock, as a run takes it


class Release:
    """What releases one prepared worker once its call has ended (``PreparedRuns.add``)."""

    __slots__ = ("_held", "_runs")

    def __init__(self, runs: PreparedRuns, held: _Held) -> None:
        self._runs = runs
        self._held = held

    def __call__(self) -> None:
        self._runs._release(self._held)

    def holds(self) -> bool:
        """Whether calling it may still end the worker: not once a run claimed it (read
        without the lock: a claim is final, and a stale ``True`` only costs the call)."""
        return not self._held.claimed


class PreparedRuns:
    """The prepared workers of one runtime; thread-safe. ``end`` closes a worker that no run
    claimed (and has the pool replace it)."""

    def __init__(self, end: Callable[[Slot], None]) -> None:
        self._lock = threading.Lock()
        self._held: list[_Held] = []
        self._end = end
        self._shut = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def full(self) -> bool:
        """Whether no more may be prepared now (expired ones are closed first)."""
        self.sweep()
        with self._lock:
            return self._shut or len(self._held) >= MAX_HELD

    def add(self, boot: bytes, slot: Slot) -> Release:
        """Keep ``slot``, whose worker holds ``boot``, for the run that claims it; return what
        releases it once its call has ended (nothing if a run claimed it)."""
        with self._lock:  # the deadline taken under it: ``_held`` stays in deadline order
            held = _Held(boot, slot)
            shut = self._shut
            if not shut:
                self._held.append(held)
        if shut:
            self._end(slot)
        return Release(self, held)

    def claim(self, boot: bytes) -> Slot | None:
        """A prepared worker holding ``boot``, taken out, or ``None``."""
        with self._lock:
            for index, held in enumerate(self._held):
                if held.boot == boot:
                    del self._held[index]
                    held.claimed = True
                    return held.slot
        return None

    def _release(self, held: _Held) -> None:
        with self._lock:
            try:
                self._held.remove(held)
            except ValueError:  # claimed, expired or closed already
                return
        self._end(held.slot)

    def sweep(self) -> None:
        """Close the workers no run claimed in time."""
        now = time.monotonic()
        with self._lock:
            # In deadline order (``add``): none has expired unless the first has (every run
            # and every prepare asks, nearly always with none held or none due).
            if not self._held or self._held[0].deadline > now:
                return
            expired = [held for held in self._held if held.deadline <= now]
            self._held = [held for held in self._held if held.deadline > now]
        for held in expired:
            self._end(held.slot)

    def close(self) -> None:
        """Close every prepared worker; later ones are closed as they come."""
        with self._lock:
            self._shut = True
            held, self._held = self._held, []
        for entry in held:
            self._end(entry.slot)
