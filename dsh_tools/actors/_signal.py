"""Cooperative cancellation: ``AbortController`` and ``AbortSignal``.

Semantics (the same as the web platform's, made thread-safe):

- A signal aborts at most once. The first ``abort(reason)`` wins; later calls keep the first
  reason. The default reason is the string ``"aborted"``.
- ``add_callback(fn)`` calls ``fn(reason)`` once when the signal aborts (at once, in the caller's
  thread, if it already has) and returns a remover. Callbacks run in the thread that aborts; one
  that raises is logged and does not stop the others.
- ``wait(timeout)`` blocks a thread; ``await signal`` suspends a coroutine on any event loop.
  Both return once the signal has aborted (``await`` returns the reason).
- ``NEVER_ABORTED`` is one shared signal that never aborts; its ``add_callback`` stores nothing,
  so calls without a signal cost nothing and leak nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Generator
from types import MethodType
from typing import Any

from ._logging import get_logger
from ._timeouts import checked_timeout

__all__ = ["NEVER_ABORTED", "AbortController", "AbortSignal"]

_log = get_logger("dsh_tools.signal")

_DEFAULT_REASON = "aborted"

_CO_COROUTINE = inspect.CO_COROUTINE

# The class ``threading.RLock()`` makes, called directly: ``threading.RLock`` is a function
# that picks it, and a signal is made for every call.
_new_rlock: Callable[[], Any] = type(threading.RLock())


def _noop() -> None:
    return None


class AbortSignal:
    """A read-only view of an abort state. Obtain one from ``AbortController().signal``."""

    __slots__ = ("_aborted", "_callbacks", "_event", "_lock", "_never", "_parent", "_reason")

    def __init__(self, *, _never: bool = False) -> None:
        # Re-entrant: a collection may start while this thread holds the lock (at an
        # allocation, or on Python 3.12+ at any safe point after one), and a finalizer it runs
        # may abort or subscribe to this very signal; a plain lock would hang the thread.
        self._lock = _new_rlock()
        self._aborted = False
        self._reason: Any = None
        self._callbacks: dict[object, Callable[[Any], object]] | None = None
        self._event: threading.Event | None = None
        self._never = _never
        self._parent: AbortSignal | None = None  # see ``follow``

    @staticmethod
    def aborted_signal(reason: Any = _DEFAULT_REASON) -> AbortSignal:
        """Return a signal that is already aborted with ``reason``."""
        signal = AbortSignal()
        signal._fire(reason)
        return signal

    @property
    def aborted(self) -> bool:
        """Whether the signal has aborted."""
        if self._aborted:
            return True
        # The chain of followed signals, walked here rather than through each one's property:
        # the hot path asks a run's signal (which follows its caller's) several times per call.
        # A signal of a subclass may work out whether it aborted when asked (a placed body's
        # signal on a Ray worker reads Ray's cancellation flag): that one is asked in full.
        parent = self._parent
        while parent is not None:
            if parent._aborted:
                return True  # before its callback reaches this one
            if type(parent) is not AbortSignal:
                return parent.aborted
            parent = parent._parent
        return False

    @property
    def reason(self) -> Any:
        """The abort reason, or ``None`` while not aborted."""
        if self._aborted:
            return self._reason
        parent = self._parent
        return parent.reason if parent is not None and parent.aborted else None

    def add_callback(self, fn: Callable[[Any], object]) -> Callable[[], None]:
        """Call ``fn(reason)`` once on abort (at once if already aborted); return a remover."""
        if not callable(fn):  # refused here, not as a warning in whichever thread aborts
            raise TypeError(f"add_callback() takes a callable, got {type(fn).__name__}")
        # An ``async def`` function (or method) would only make a coroutine nobody awaits.
        # Its code's flags, not ``inspect.iscoroutinefunction`` (a few times dearer): every
        # call with a signal of its own adds callbacks.
        code = getattr(fn, "__code__", None)
        if code is not None:
            if code.co_flags & _CO_COROUTINE:
                raise TypeError(
                    "add_callback() takes a plain function, called in the thread that aborts; "
                    f"{getattr(fn, '__qualname__', fn)!s} is an async def function, whose "
                    "coroutine nobody would await (schedule it from a plain callback, with "
                    "loop.call_soon_threadsafe, say)"
                )
            # One positional parameter (and self for a method), the shape of every callback
            # the package adds, costs one comparison; any other is read from its signature,
            # so that one that cannot take the reason fails here rather than as a warning
            # in whichever thread aborts.
            if code.co_argcount != (2 if type(fn) is MethodType else 1) or code.co_kwonlyargcount:
                _check_takes_reason(fn)
        if self._never:
            return _noop
        # Everything is allocated before the lock is taken: a collection an allocation starts
        # may run a finalizer that aborts or subscribes to this signal on this thread.
        key = object()
        fresh: dict[object, Callable[[Any], object]] | None = (
            {} if self._callbacks is None else None
        )

        def remove() -> None:
            with self._lock:
                callbacks = self._callbacks
                removed = None if callbacks is None else callbacks.pop(key, None)
            # The last reference to the callback is dropped here, after the lock: its
            # finalizer may touch this signal.
            del removed

        with self._lock:
            # No call between this check and the insertion: a finalizer run by a collection
            # on this thread (at a safe point, on Python 3.12+) re-enters the lock only at a
            # call, so the callback is either stored before the abort takes the callbacks or
            # sees it aborted and is run below.
            if not self._aborted:
                callbacks = self._callbacks
                if callbacks is None:  # ``fresh`` is a dict then: only an abort takes it away
                    callbacks = self._callbacks = fresh if fresh is not None else {}
                callbacks[key] = fn
                return remove
        _run_callback(fn, self._reason)
        return _noop

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` seconds pass; return whether it aborted.

        ``timeout`` is ``None`` (no limit) or seconds from 0 to ``threading.TIMEOUT_MAX``
        (else ``ValueError``, or ``TypeError`` for a non-number).
        """
        if timeout is not None:
            timeout = checked_timeout(timeout, caller="wait() ", poll=True)
        if self.aborted:
            return True
        if self._never:
            if timeout is None:
                raise ValueError("waiting without a timeout on a signal that never aborts")
            threading.Event().wait(timeout)
            return False
        fresh = threading.Event() if self._event is None else None  # allocated before the lock
        with self._lock:
            if self._aborted:
                return True
            event = self._event
            if event is None:  # ``fresh`` is an event then: none is ever taken away
                event = self._event = fresh if fresh is not None else threading.Event()
        return event.wait(timeout)

    def __await__(self) -> Generator[Any, None, Any]:
        if self.aborted:
            return self.reason
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def wake(reason: Any) -> None:
            def settle() -> None:
                if not future.done():
                    future.set_result(reason)

            with contextlib.suppress(RuntimeError):  # the loop closed while we waited
                loop.call_soon_threadsafe(settle)

        remove = self.add_callback(wake)
        try:
            return (yield from future.__await__())
        finally:
            remove()

    def throw_if_aborted(self) -> None:
        """Raise ``asyncio.CancelledError`` carrying the reason if the signal has aborted."""
        if self.aborted:
            raise asyncio.CancelledError(self.reason)

    def _fire(self, reason: Any) -> bool:
        if self._never:
            return False
        with self._lock:
            if self._aborted:
                return False
            parent = self._parent
            if parent is not None and parent.aborted:
                reason = parent.reason  # it aborted first, as this signal has been reading
            if self._aborted:
                # Aborted meanwhile by a finalizer a collection ran on this thread while the
                # parent was asked (a call, where a collection may start on Python 3.12+).
                return False
            self._reason = reason
            self._aborted = True
            callbacks = self._callbacks
            self._callbacks = None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for fn in list(callbacks.values()):
                _run_callback(fn, reason)
        return True

    def __repr__(self) -> str:
        if self._never:
            return "AbortSignal(never)"
        if self._aborted:
            return f"AbortSignal(aborted, reason={self._reason!r})"
        return "AbortSignal(pending)"


def _check_takes_reason(fn: Callable[..., object]) -> None:
    try:
        inspect.signature(fn).bind(None)
    except ValueError:  # no signature to read: its call will tell
        return
    except TypeError:
        raise TypeError(
            "add_callback() takes a function of one argument, the abort reason; "
            f"{getattr(fn, '__qualname__', fn)!s} cannot be called with it"
        ) from None


def _run_callback(fn: Callable[[Any], object], reason: Any) -> None:
    try:
        returned = fn(reason)
    except BaseException as exc:  # a failing listener stops no other, nor the loop it runs on
        _log.warning("abort callback failed", error=repr(exc), exc_info=exc)
        return
    if returned is not None and inspect.iscoroutine(returned):
        # An async function behind a lambda or a partial: named here, and its coroutine
        # closed (else Python warns that it was never awaited, from inside this module).
        returned.close()
        _log.warning(
            "abort callback returned a coroutine, which nobody awaits: callbacks are plain "
            "functions, called in the thread that aborts",
            callback=repr(fn),
        )


class AbortController:
    """Owns an ``AbortSignal`` and aborts it."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Abort the signal with ``reason`` (``"aborted"`` when None); later calls do nothing."""
        self.signal._fire(_DEFAULT_REASON if reason is None else reason)


NEVER_ABORTED = AbortSignal(_never=True)
"""The shared signal used when a call gives none: it never aborts and stores no callbacks."""


def any_signal(*signals: AbortSignal) -> tuple[AbortSignal, Callable[[], None]]:
    """Return a signal that aborts when any of ``signals`` does (first reason wins) and a detacher.

    The detacher removes the listeners installed on the sources, so a short-lived fusion never
    leaks into a long-lived source signal.
    """
    controller = AbortController()
    for source in signals:
        if source.aborted:
            controller.abort(source.reason)
            return controller.signal, _noop
    removers = [source.add_callback(controller.abort) for source in signals]

    def detach() -> None:
        for remove in removers:
            remove()

    return controller.signal, detach


def follow(controller: AbortController, parent: AbortSignal) -> Callable[[], None]:
    """Have ``controller`` abort when ``parent`` does, with ``parent``'s reason; return the
    remover of the callback that does so.

    Besides that callback, ``controller.signal`` reads as aborted, with ``parent``'s reason, as
    soon as ``parent`` has aborted: the callbacks of ``parent`` run one after another in the
    thread that aborts it, and one that wakes another thread (an event loop, say) may leave
    that thread waiting for the interpreter lock while other threads run for milliseconds,
    which would still see ``controller.signal`` as live. A run that follows its caller's signal
    so stops starting sub-calls the moment its caller aborts. Reading never runs callbacks:
    ``controller.signal``'s own run, as ever, in the thread that aborts ``parent``, when the
    callback registered here reaches them (or in the thread that aborts ``controller``)."""
    signal = controller.signal
    if not parent._never:
        signal._parent = parent
    return parent.add_callback(controller.abort)
