"""``LoopHandoff``: callbacks run on one event loop in the order they were handed over, from
any thread, with one wake-up of the loop per burst.

A code run's pool lets the worker thread that settled a plain body commit it and start the next
call itself; what that commit means to the program (its awaitable settled, its contexts deferred
onto the outer call) and the pool's end belong on the loop the run executes on. Waking the loop
once per settled sub-call would cost about as much as the sub-call itself, so a thread queues the
callback and wakes the loop only when nothing is queued yet: everything settled meanwhile is run
by that one wake-up, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from ..actors._logging import get_logger
from ..pipeline._loop import running_loop

__all__ = ["LoopHandoff"]

_log = get_logger("dsh_tools.codebridge")


class LoopHandoff:
    """Runs ``fn()`` on ``loop``: at once when called there (after whatever was queued before
    it), else on the loop's next pass."""

    __slots__ = ("_lock", "_loop", "_queue", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._queue: list[Callable[[], None]] = []
        self._scheduled = False  # a wake-up of the loop is on its way

    def run(self, fn: Callable[[], None], on_loop: bool | None = None) -> None:
        """Run ``fn`` on the loop, after every callback handed over before it. ``on_loop``:
        whether this thread runs the loop, when the caller knows (None: asked of asyncio)."""
        if on_loop is None:
            on_loop = running_loop() is self._loop
        if on_loop:
            # Whatever was handed over before this call (an earlier commit on a worker thread,
            # whose drain ended under the pool's lock before this one began) is queued already.
            if self._queue:
                self.flush()
            _call(fn)
            return
        with self._lock:
            self._queue.append(fn)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            self._loop.call_soon_threadsafe(self.flush)

    def flush(self) -> None:
        """On the loop: run every callback queued so far, in order."""
        with self._lock:
            queued, self._queue = self._queue, []
            self._scheduled = False
        for fn in queued:
            try:  # ``_call``, inline: every sub-call's delivery passes here
                fn()
            except Exception as exc:  # one failing callback must not drop those queued behind it
                _log.exception("code run hand-off callback failed", error=repr(exc))


def _call(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:  # one failing callback must not drop those queued behind it
        _log.exception("code run hand-off callback failed", error=repr(exc))
