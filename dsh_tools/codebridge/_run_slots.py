"""``RunSlots``: how many runs of one runtime are in flight at once, across every event loop.

Each run in flight holds up to ``max_processes`` processes and a bounded share of host memory
(its output ledger, frame buffers and replies); without a bound on the runs themselves, a
harness that fires many ``run_code`` calls at once (or a model that asks for them) multiplies
both without end. A run past the bound waits for a slot, in arrival order, before it takes a
worker; its wall ceiling starts when its worker does. A run whose signal aborts while it waits,
or whose runtime is disposed meanwhile, stops waiting at once.

Runs come from any thread's event loop, so the state sits behind one lock and a waiter is woken
on its own loop (``call_soon_threadsafe``). A slot freed while waiters wait passes straight to the
first of them: it is never free in between, so a newcomer cannot overtake the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque

from ..actors import AbortSignal

__all__ = ["RunSlots"]


class _Waiter:
    """One run waiting for a slot. ``granted``: the slot is this run's (it must free it);
    ``gone``: the run stopped waiting before a slot came (skipped when one frees). Both change
    only under the slots' lock."""

    __slots__ = ("future", "gone", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[bool] = loop.create_future()
        self.granted = False
        self.gone = False


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _wake(waiter: _Waiter, value: bool) -> None:
    with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits there any more
        waiter.loop.call_soon_threadsafe(_settle, waiter.future, value)


class RunSlots:
    """At most ``limit`` runs hold a slot at once; the rest wait in arrival order."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._taken = 0  # slots held (0 <= _taken <= limit)
        self._waiters: deque[_Waiter] = deque()
        self._closed = False

    @property
    def taken(self) -> int:
        """How many slots are held now."""
        return self._taken

    @property
    def waiting(self) -> int:
        """How many runs wait for a slot now."""
        with self._lock:
            return sum(1 for waiter in self._waiters if not waiter.gone)

    async def acquire(self, signal: AbortSignal) -> bool:
        """Take a slot, waiting for one if all are held; ``False`` (and no slot) when ``signal``
        aborts or the slots close first. Cancelled while waiting, it holds no slot."""
        with self._lock:
            if self._closed:
                return False
            if self._taken < self.limit and not self._waiters:
                self._taken += 1
                return True
            waiter = _Waiter(asyncio.get_running_loop())
            self._waiters.append(waiter)
        remove = signal.add_callback(lambda _reason: _wake(waiter, False))
        try:
            granted = await waiter.future
        except BaseException:
            self._leave(waiter)
            raise
        finally:
            remove()
        if not granted:
            self._leave(waiter)
        return granted

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` stops waiting: a slot already passed to it is freed again."""
        with self._lock:
            waiter.gone = True
            if not waiter.granted:
                return
        self.release()

    def release(self) -> None:
        """Free a slot: it passes to the first run still waiting, if any."""
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.gone:
                    waiter.granted = True
                    break
            else:
                self._taken -= 1
                return
        _wake(waiter, True)

    def close(self) -> None:
        """No slot is given any more: every waiting run stops waiting (``acquire`` returns
        ``False``), and so does every later one. Slots held are still released as runs end."""
        with self._lock:
            self._closed = True
            waiters = [waiter for waiter in self._waiters if not waiter.gone]
            self._waiters.clear()
        for waiter in waiters:
            _wake(waiter, False)

    def __repr__(self) -> str:
        return f"RunSlots(limit={self.limit}, taken={self._taken})"
