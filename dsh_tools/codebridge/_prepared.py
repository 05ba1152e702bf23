"""Runs prepared ahead: pre-forked workers that have a held ``Boot`` and wait for the go.

A ``run_code`` call's program is known as soon as the call begins, long before its body asks
the runtime for the run (guards, hooks, approval and the pipeline come first). The runtime then
takes a pre-forked worker and sends it the program in a held ``Boot``: the worker wakes and
compiles it meanwhile, and runs nothing of it until the run itself sends ``GO``. The run claims
the worker whose boot is exactly its own (the same bytes: program, namespaces, limits), so no
identity links the call to its run and a mismatch (a tool registered in between, say) only
means the run takes a fresh worker.

A prepared worker that no run claims within ``HELD_SECONDS`` (its call was refused, failed, or
waits for approval that long) is closed, which ends it without running anything: its channel's
end of file is the worker's answer to a held boot (``_worker.read_go``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from ._pool import Slot

__all__ = ["HELD_SECONDS", "PreparedRuns"]

HELD_SECONDS: Final = 30.0
"""How long a prepared worker waits for its run before it is closed."""
MAX_HELD: Final = 8
"""At most this many prepared workers wait at once (each holds a compiled program)."""


class PreparedRuns:
    """The prepared workers of one runtime, each with the bytes of the ``Boot`` it holds
    (unheld) and its deadline; thread-safe. ``closed`` is called after each worker this closes
    unclaimed (the pool refills)."""

    def __init__(self, closed: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[bytes, Slot, float]] = []
        self._closed = closed
        self._shut = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def full(self) -> bool:
        """Whether no more may be prepared now (expired ones are closed first)."""
        self.sweep()
        with self._lock:
            return self._shut or len(self._held) >= MAX_HELD

    def add(self, boot: bytes, slot: Slot) -> None:
        """Keep ``slot``, whose worker holds ``boot``, for the run that claims it."""
        with self._lock:
            if not self._shut:
                self._held.append((boot, slot, time.monotonic() + HELD_SECONDS))
                return
        slot.close()

    def claim(self, boot: bytes) -> Slot | None:
        """The prepared worker holding ``boot``, taken out, or ``None``."""
        with self._lock:
            for index, (held, slot, _deadline) in enumerate(self._held):
                if held == boot:
                    del self._held[index]
                    return slot
        return None

    def sweep(self) -> None:
        """Close the workers no run claimed in time."""
        now = time.monotonic()
        with self._lock:
            expired = [slot for _boot, slot, deadline in self._held if deadline <= now]
            if not expired:
                return
            self._held = [entry for entry in self._held if entry[2] > now]
        for slot in expired:
            slot.close()
            self._closed()

    def close(self) -> None:
        """Close every prepared worker; later ones are closed as they come."""
        with self._lock:
            self._shut = True
            held, self._held = self._held, []
        for _boot, slot, _deadline in held:
            slot.close()
