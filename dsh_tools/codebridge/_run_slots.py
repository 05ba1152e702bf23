"""``RunSlots``: how many runs of one runtime are in flight at once, across every event loop.

Each run in flight holds up to ``max_processes`` processes and a bounded share of host memory
(its output ledger, frame buffers and replies); without a bound on the runs themselves, a
harness that fires many ``run_code`` calls at once (or a model that asks for them) multiplies
both without end. A run past the bound waits for a slot, in arrival order, before it takes a
worker; its wall ceiling starts when its worker does. A run whose signal aborts while it waits,
or whose runtime is disposed meanwhile, stops waiting at once.

Runs come from any thread's event loop, so the state sits behind one lock and a waiter is woken
on its own loop (``call_soon_threadsafe``). A slot freed while runs wait passes straight to the
first of them: it is never free in between, so a newcomer cannot overtake the queue. A waiter
whose loop has closed can never take the slot it is given, so the slot passes on; one whose
loop closes after it was given a slot and before it took it gives the slot back at the next
``reclaim()``. A run that waits long calls ``on_stall`` now and then (every
``STALL_CHECK_SECONDS``): the runtime ends there the runs whose loop closed under them, which
would otherwise hold their slots until another run starts.

Nothing is allocated while the lock is held (no object the cyclic collector tracks), and a
waiter that a collection finalizes (a run whose loop was closed while it waited, given up since)
leaves without taking the lock: on Python 3.12+ a collection runs at the next safe point after
the allocation that asked for it, which may lie inside the lock, and the cleanup would wait
there for the lock its own thread holds.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

from ..actors import AbortSignal

__all__ = ["RunSlots", "wait_checking"]

_QUEUED: Final = 0  # in the queue, waiting
_GRANTED: Final = 1  # given a slot, not yet woken to take it
_HELD: Final = 2  # took its slot: its run frees it
_GONE: Final = 3  # stopped waiting (aborted, cancelled, closed, its loop gone); holds nothing

STALL_CHECK_SECONDS: Final = 1.0
"""How often a waiting run calls ``on_stall``."""
_SPARSE_SLACK: Final = 64
"""Runs that stopped waiting stay in the queue until it is compacted, once it holds more than
twice the runs still waiting plus this many."""


_T = TypeVar("_T")


async def wait_checking(future: asyncio.Future[_T], every: float, check: Callable[[], None]) -> _T:
    """Await ``future``, calling ``check()`` each time ``every`` seconds pass without it
    settling (cancelling the wait leaves ``future`` as it is)."""
    while True:
        done, _pending = await asyncio.wait((future,), timeout=every)
        if done:
            return future.result()
        check()


class _Waiter:
    """One run waiting for a slot; ``state`` changes only under the slots' lock."""

    __slots__ = ("future", "loop", "state")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[bool] = loop.create_future()
        self.state = _QUEUED


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _wake(waiter: _Waiter, value: bool, _reason: Any = None) -> bool:
    """Tell ``waiter`` on its own loop; ``False`` when that loop has closed."""
    try:
        waiter.loop.call_soon_threadsafe(_settle, waiter.future, value)
    except RuntimeError:
        return False
    return True


class RunSlots:
    """At most ``limit`` runs hold a slot at once; the rest wait in arrival order."""

    def __init__(self, limit: int, on_stall: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._taken = 0  # slots held or granted (0 <= _taken <= limit)
        self._waiters: deque[_Waiter] = deque()  # arrival order; may hold gone waiters
        self._live = 0  # waiters in the queue still waiting
        # The waiters given a slot and not yet woken to take it (at most one per slot), in a
        # table made once, so that it changes under the lock without allocating.
        self._granted: list[_Waiter | None] = [None] * limit
        self._closed = False

    @property
    def taken(self) -> int:
        """How many slots are held now."""
        return self._taken

    @property
    def waiting(self) -> int:
        """How many runs wait for a slot now."""
        return self._live

    def _take_free(self) -> bool | None:
        """Under the lock: ``True`` (a slot taken), ``False`` (closed) or ``None`` (wait)."""
        if self._closed:
            return False
        if self._taken < self.limit and not self._live:
            self._taken += 1
            return True
        return None

    async def acquire(self, signal: AbortSignal) -> bool:
        """Take a slot, waiting for one if all are held; ``False`` (and no slot) when ``signal``
        aborts or the slots close first. Cancelled while waiting, it holds no slot."""
        with self._lock:
            now = self._take_free()
        if now is not None:
            return now
        waiter = _Waiter(asyncio.get_running_loop())  # made before the lock is taken
        with self._lock:
            now = self._take_free()  # a slot may have come free meanwhile
            if now is None:
                self._waiters.append(waiter)
                self._live += 1
        if now is not None:
            return now
        try:
            remove = signal.add_callback(partial(_wake, waiter, False))
            try:
                granted = await self._wait(waiter.future)
            finally:
                remove()
        except BaseException:
            self._leave(waiter)
            raise
        with self._lock:
            if granted and waiter.state == _GRANTED:
                waiter.state = _HELD
                self._ungrant(waiter)
                return True
        self._leave(waiter)
        return False

    async def _wait(self, future: asyncio.Future[bool]) -> bool:
        if self._on_stall is None:
            return await future
        return await wait_checking(future, STALL_CHECK_SECONDS, self._on_stall)

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` stops waiting: a slot already passed to it is freed again."""
        if waiter.state == _GONE:
            # Nothing to undo, and never again anything (gone is final): read without the lock.
            # A waiter the slots no longer hold is the only kind a collection finalizes, which
            # on Python 3.12+ may start inside the lock on this thread (at its next safe point,
            # however little the lock's holder allocates), and would wait for it for ever.
            return
        with self._lock:
            state = waiter.state
            waiter.state = _GONE
            if state == _QUEUED:
                self._live -= 1
                self._compact_if_sparse()
                return
            if state != _GRANTED:
                return
            self._ungrant(waiter)
        self.release()

    def _ungrant(self, waiter: _Waiter) -> None:
        """Under the lock: ``waiter`` no longer waits to take the slot it was given."""
        granted = self._granted
        index = 0
        while index < self.limit:
            if granted[index] is waiter:
                granted[index] = None
                return
            index += 1

    def reclaim(self) -> None:
        """Give back the slots given to waiters whose loop closed before they could take them."""
        while True:
            with self._lock:
                lost = self._lost_grant()
            if lost is None:
                return
            self.release()

    def _lost_grant(self) -> _Waiter | None:
        """Under the lock: a granted waiter whose loop has closed, made gone; else None."""
        granted = self._granted
        index = 0
        while index < self.limit:
            waiter = granted[index]
            if waiter is not None and waiter.loop.is_closed():
                granted[index] = None
                waiter.state = _GONE
                return waiter
            index += 1
        return None

    def _compact_if_sparse(self) -> None:
        """Under the lock: drop the gone waiters from a queue that is mostly them, in place."""
        queue = self._waiters
        count = len(queue)
        if count <= 2 * self._live + _SPARSE_SLACK:
            return
        while count:
            count -= 1
            waiter = queue.popleft()
            if waiter.state == _QUEUED:
                queue.append(waiter)

    def release(self) -> None:
        """Free a slot: it passes to the first run still waiting whose loop lives, if any."""
        while True:
            with self._lock:
                waiter = self._next_waiter()
                if waiter is None:
                    self._taken -= 1
                    return
                waiter.state = _GRANTED
                self._grant(waiter)
            if _wake(waiter, True):
                return
            with self._lock:  # its loop closed just now: nobody there will take the slot
                if waiter.state != _GRANTED:
                    return  # it left meanwhile, and passed the slot on itself
                waiter.state = _GONE
                self._ungrant(waiter)

    def _grant(self, waiter: _Waiter) -> None:
        """Under the lock: note ``waiter`` among those given a slot (there is room: each holds
        one of the ``limit`` slots)."""
        granted = self._granted
        index = 0
        while granted[index] is not None:
            index += 1
        granted[index] = waiter

    def _next_waiter(self) -> _Waiter | None:
        """Under the lock: the first waiter still waiting on a live loop, out of the queue."""
        queue = self._waiters
        while queue:
            waiter = queue.popleft()
            if waiter.state != _QUEUED:
                continue
            self._live -= 1
            if waiter.loop.is_closed():
                waiter.state = _GONE
                continue
            return waiter
        return None

    def close(self) -> None:
        """No slot is given any more: every waiting run stops waiting (``acquire`` returns
        ``False``), and so does every later one. Slots held are still released as runs end."""
        with self._lock:
            self._closed = True
        while True:
            with self._lock:
                waiter = self._next_waiter()
                if waiter is None:
                    return
                waiter.state = _GONE
            _wake(waiter, False)

    def __repr__(self) -> str:
        return f"RunSlots(limit={self.limit}, taken={self._taken}, waiting={self._live})"
