"""Waiting on the main thread for work on the system loop, safe against Ctrl-C.

Python raises ``KeyboardInterrupt`` wherever the main thread stands when the signal's handler
runs, and that may be inside a ``with lock:`` block between the lock's acquisition and the
block's protection: the lock then stays held. A ``concurrent.futures.Future`` waited on with
``result()`` is such a lock, and the system loop takes it to settle the future: one Ctrl-C
landing there left every later call of the system waiting for ever. So while the main thread
waits here, Python's SIGINT handler is replaced by one that only notes the Ctrl-C and wakes
the wait (through a pipe, which takes no lock); ``KeyboardInterrupt`` is raised once the wait
has let go of everything, where nothing is held.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from .pipeline._loop import pythons_interrupts_here

__all__ = ["wait_for_future"]


class _Interruptions:
    """The SIGINT handler of one wait: notes the Ctrl-C and wakes the wait; never raises."""

    __slots__ = ("interrupted", "wake")

    def __init__(self) -> None:
        self.interrupted = False
        self.wake: _Wake | None = None  # set once made (under this handler already)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        wake = self.wake
        if wake is not None:
            wake.write_here()


class _Wake:
    """A pipe the wait sleeps on; written by the future's settling (any thread) and by the
    SIGINT handler. ``close`` and ``write`` share a lock, so that a settling that comes after
    the wait has ended never writes to a descriptor number reused meanwhile."""

    __slots__ = ("_lock", "closed", "reader", "writer")

    def __init__(self) -> None:
        self.reader, self.writer = os.pipe()
        os.set_blocking(self.reader, False)
        os.set_blocking(self.writer, False)
        self._lock = threading.Lock()
        self.closed = False

    def write(self, _settled: object = None) -> None:
        with self._lock:
            self.write_here()

    def write_here(self) -> None:
        """``write`` from the main thread's signal handler, which runs between two steps of
        whatever the main thread does, maybe inside ``write`` or ``close`` holding the lock:
        no lock here (nothing else on this thread runs meanwhile)."""
        if not self.closed:
            with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
                os.write(self.writer, b"!")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.reader, 64):
                pass

    def close(self) -> None:
        with self._lock:
            self.closed = True
            os.close(self.reader)
            os.close(self.writer)


def wait_for_future(
    start: Callable[[], concurrent.futures.Future[Any]],
    timeout: float | None,
    on_interrupt: Callable[[concurrent.futures.Future[Any]], object],
) -> Any:
    """``start()``'s future's ``result(timeout)``, Ctrl-C safe on the main thread (see the
    module docstring): ``start`` runs under the wait's own handler already (it takes locks
    too). On a Ctrl-C, ``on_interrupt(future)`` (cancel or abort the work), then
    ``KeyboardInterrupt`` once the wait has let go of everything; ``TimeoutError`` (the
    ``concurrent.futures`` one) after ``timeout`` seconds."""
    if not pythons_interrupts_here():
        # Elsewhere no KeyboardInterrupt is raised; a handler of the application's own is
        # left as it is.
        future = start()
        try:
            return future.result(timeout)
        except KeyboardInterrupt:
            on_interrupt(future)
            raise
    handler = _Interruptions()
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main interpreter: signals are not delivered here
        return start().result(timeout)
    value: Any = None
    error: BaseException | None = None
    wake: _Wake | None = None
    try:
        # Made under this handler: a Ctrl-C that came before it interrupts the work once it
        # has started (``on_interrupt`` aborts it), and nothing made here is left open.
        handler.wake = wake = _Wake()
        future = start()
        future.add_done_callback(wake.write)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not handler.interrupted and not future.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                error = concurrent.futures.TimeoutError()
                break
            select.select([wake.reader], [], [], remaining)
            wake.drain()
        if handler.interrupted:
            on_interrupt(future)  # still under this handler: a second Ctrl-C cannot cut it short
        elif error is None:
            try:
                value = future.result()
            except BaseException as exc:  # raised below, once the handler is Python's again
                error = exc
    finally:
        if wake is not None:
            wake.close()
        if signal.getsignal(signal.SIGINT) is handler:  # else the application's own now
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if handler.interrupted:
        raise KeyboardInterrupt
    if error is not None:
        try:
            raise error
        finally:
            error = None
    return value
