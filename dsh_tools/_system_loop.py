"""The system event loop thread: batches, code runs and ``ref.ask`` calls run there.

It keeps every coroutine submitted to it until that settles, so that stopping fails the waiters
of work the loop will never finish instead of leaving them waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Future
from types import FrameType
from typing import Any, NamedTuple

from ._blocking_wait import wait_for_future
from .actors._logging import get_logger
from .pipeline import message_of
from .pipeline._epoll import mark_given_up_leftovers
from .pipeline._loop import is_library_code, new_pool_loop, note_interrupted, resume

__all__ = ["SystemLoop"]

_log = get_logger("dsh_tools.system")

_BACKGROUND_GRACE_SECONDS = 1.0
"""How long a stopping system waits for its background listeners to finish on their own (an
exporter shipping the last results), and then again for those it cancelled to end."""

_REFUSAL_TURNS = 3
"""How many more turns an ended loop takes to fail work submitted as it stopped."""

_WATCH_EXIT_SECONDS = 1.0
"""How long a stop waits for the stall watch to return once the loop has ended."""

STALL_WARNING_SECONDS = 2.0
"""How long the loop may go without turning, while work waits for it, before a warning names
what holds it."""


class SystemLoop:
    """One event loop on its own daemon thread, and the futures of what runs on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # What was submitted and has not settled, with its coroutine (closed unstarted when the
        # loop ends before it ran); ``background`` awaitables not started yet; whether the loop
        # has ended (from then on both are refused at once). All under ``_lock``.
        self._pending: dict[concurrent.futures.Future[Any], _Submitted] = {}
        self._unstarted: dict[object, Awaitable[Any]] = {}
        self._ended = False
        self._refusing = False  # ``refuse_submissions``: ``submit`` fails work at once
        # The tasks of ``background`` awaits still running (touched on the loop's thread only),
        # and whether the loop is ending them because the system stops.
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.loop = new_pool_loop()
        self.thread = threading.Thread(target=self._run, name="dsh-tools-loop", daemon=True)
        self.thread.start()
        # Set while submitted work waits (under ``_lock``); the stall watch's thread, started
        # with the first submission, sleeps on it otherwise.
        self._busy = threading.Event()
        self._watch: threading.Thread | None = None
        # Set by the loop when the watch's probe runs; both set when the loop ends.
        self._turned = threading.Event()
        self._watch_ends = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # However stop() was reached (from another thread, or from a hook or observer on
            # this very loop), work the loop will never finish fails its waiters here, and what
            # it never started is closed (an awaitable left unawaited would be reported so).
            with self._lock:
                self._ended = True
                unstarted = list(self._unstarted.values())
                self._unstarted.clear()
            for wake in (self._busy, self._turned, self._watch_ends):
                wake.set()  # the stall watch sees the end and returns
            self._refuse_unstarted()
            self.fail_pending()
            for awaitable in unstarted:
                _close(awaitable)
            self._end_background()
            mark_given_up_leftovers(self.loop)
            self.loop.close()

    def _end_background(self) -> None:
        """Give the listeners still awaited in the background (``background``) a moment to
        finish, then cancel those still running and give them a moment to end, rather than
        drop their tasks unfinished with the loop. Costs a stop nothing when none is left."""
        tasks = [task for task in self._background if not task.done()]
        if not tasks:
            return
        with contextlib.suppress(Exception):  # stopped again meanwhile: close as it stands
            self.loop.run_until_complete(asyncio.wait(tasks, timeout=_BACKGROUND_GRACE_SECONDS))
        # Read again: a listener that finished meanwhile may have started another.
        tasks = [task for task in self._background if not task.done()]
        if not tasks:
            return
        self._closing = True
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):  # stopped again meanwhile: close as it stands
            self.loop.run_until_complete(asyncio.wait(tasks, timeout=_BACKGROUND_GRACE_SECONDS))

    def _refuse_unstarted(self) -> None:
        """The loop has ended (``_ended``): work submitted as it stopped, whose task the loop
        never stepped (made in its last turn, or still to be made by a callback ``submit``
        queued), takes that first step now, which fails it (``_unless_ended``) without running
        any of it. Left pending, the task was reported destroyed unfinished once collected."""
        with self._lock:
            unstarted = [
                future
                for future, submitted in self._pending.items()
                if inspect.getcoroutinestate(submitted.coro) == inspect.CORO_CREATED
            ]
        # A turn each to make the task, to take its first step and to settle its future with
        # what that step raised (else never retrieved); no more, whatever else waits.
        for _ in range(_REFUSAL_TURNS):
            if all(future.done() for future in unstarted):
                return
            try:
                self.loop.stop()
                self.loop.run_forever()
            except Exception:  # stopped again meanwhile: fail_pending fails what is left
                return

    async def _unless_ended(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """``coro``, unless its task's first step comes once the loop has ended
        (``_refuse_unstarted``). ``submit`` takes the step up to ``_handed_over`` itself, so
        that whatever ends this before that first step (a cancellation, a close) closes
        ``coro`` too: else it would be reported never awaited."""
        try:
            await _handed_over()
        except BaseException:
            coro.close()
            raise
        if self._ended:
            coro.close()
            raise RuntimeError(_STOPPED_BEFORE)
        # Driven, not awaited: a call whose hook went on after stop() cancelled it is given up
        # there (``GiveUp``), and this returns the result it was settled with.
        try:
            first = coro.send(None)
        except StopIteration as done:
            return done.value
        return await resume(coro, first, closed_outside=True)

    def fail_pending(self) -> None:
        """Fail every submitted call or batch that has not finished: its waiter gets an error
        instead of waiting forever (a body still running, say)."""
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for future, submitted in pending:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(RuntimeError(_STOPPED_BEFORE))
            if inspect.getcoroutinestate(submitted.coro) == inspect.CORO_CREATED:
                submitted.wrapper.close()  # never started: its loop will not run it

    def pending_now(self) -> frozenset[concurrent.futures.Future[Any]]:
        """What was submitted and has not settled yet."""
        with self._lock:
            return frozenset(self._pending)

    def refuse_submissions(self) -> None:
        """From now on ``submit`` fails what it is given at once, as once the loop has ended:
        what is pending then is all that may still settle before the loop ends."""
        with self._lock:
            self._refusing = True

    def wait_pending(
        self, deadline: float, besides: frozenset[concurrent.futures.Future[Any]] = frozenset()
    ) -> None:
        """Wait (until ``deadline``) for what was submitted to settle (but ``besides``)."""
        with self._lock:
            pending = [future for future in self._pending if future not in besides]
        if pending:
            concurrent.futures.wait(pending, timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop the loop; from another thread, wait for it and fail what it never finished."""
        with contextlib.suppress(RuntimeError):  # closed: stopped by an earlier stop()
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)
            # The loop thread fails what it never finished as it exits; if a callback still
            # blocks it, fail the waiters from here rather than leave them waiting.
            self.fail_pending()
            with self._lock:
                watch = self._watch
            if watch is not None and not self.thread.is_alive():
                # Woken by the loop's end, it returns at once: stop() leaves no thread of it.
                watch.join(timeout=_WATCH_EXIT_SECONDS)

    def call(
        self,
        coro: Coroutine[Any, Any, Any],
        timeout: float | None,
        on_interrupt: Callable[[Future[Any]], object] | None = None,
    ) -> Any:
        """Run ``coro`` on the loop and wait for its result (``TimeoutError`` after
        ``timeout``); refused on the loop's own thread, which would wait for itself. A Ctrl-C
        while waiting runs ``on_interrupt(future)`` (by default, cancels the work: ``_interrupt``)
        and raises ``KeyboardInterrupt`` (``wait_for_future``)."""
        if on_interrupt is None:
            on_interrupt = self._interrupt
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("this blocking call cannot be made from the system loop")
        submitted: list[Future[Any]] = []

        def start() -> Future[Any]:
            submitted.append(self.submit(coro))
            return submitted[0]

        try:
            return wait_for_future(start, timeout, on_interrupt)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"did not finish within {timeout} s") from None
        except BaseException:
            if not submitted:  # a Ctrl-C before the wait could take it: the work never started
                coro.close()
            raise

    def _interrupt(self, future: Future[Any]) -> None:
        """``call``'s default on a Ctrl-C: cancel the work, its task first noted as cancelled
        for its caller's interruption (``note_interrupted``; the loop runs the two callbacks in
        the order they come), so that a call tells that cancellation from its own code's."""
        with self._lock:
            submitted = self._pending.get(future)
        if submitted is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to note
                self.loop.call_soon_threadsafe(_note_interrupted, self.loop, submitted.wrapper)
        future.cancel()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Start ``coro`` on the system loop; ``stop()`` fails it if it has not finished."""
        with self._lock:
            if self._ended or self._refusing:
                coro.close()
                future: concurrent.futures.Future[Any] = concurrent.futures.Future()
                future.set_exception(RuntimeError(_STOPPED_BEFORE))
                return future
            if self._watch is None:
                # Started before the work is (a Ctrl-C landing in the start then precedes it).
                self._watch = threading.Thread(
                    target=self._watch_stalls, name="dsh-tools-loop-watch", daemon=True
                )
                self._watch.start()
            wrapper = self._unless_ended(coro)
            wrapper.send(None)  # up to ``_handed_over``: see ``_unless_ended``
            future = asyncio.run_coroutine_threadsafe(wrapper, self.loop)
            self._pending[future] = _Submitted(coro, wrapper)
            self._busy.set()
        future.add_done_callback(self._settled)
        return future

    def _settled(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.pop(future, None)
            if not self._pending and not self._ended:  # once ended, the watch must see it
                self._busy.clear()

    def _watch_stalls(self) -> None:
        """While submitted work waits, check every ``STALL_WARNING_SECONDS`` that the loop
        still turns; when it does not, warn once per stall, naming the code that holds it.

        Synchronous callbacks (guards, renderers, classifiers, finalizers, observers, plain
        hooks) run on the loop, so one that blocks holds every batch and timed call: without
        this, that looks like a hang with nothing to show for it."""
        turned = self._turned
        while True:
            self._busy.wait()
            if self._ended:
                return
            turned.clear()
            if self._ended:  # ended since: the clear undid what the end set
                return
            posted = time.monotonic()  # the loop runs the probe at its next turn
            try:
                self.loop.call_soon_threadsafe(turned.set)
            except RuntimeError:  # the loop is closed
                return
            if turned.wait(STALL_WARNING_SECONDS):
                self._watch_ends.wait(STALL_WARNING_SECONDS)  # one look per period
                continue
            _log.warning(
                "the system loop is blocked: synchronous callbacks (guards, renderers, "
                "classifiers, finalizers, observers, plain hooks) must not wait; do blocking "
                "work in the tool's body, or in an async hook through asyncio.to_thread",
                blocked_for_s=round(time.monotonic() - posted, 1),
                running=_blocking_frame(sys._current_frames().get(self.thread.ident or 0)),
            )
            turned.wait()
            if self._ended:
                return
            _log.info(
                "the system loop turns again", blocked_for_s=round(time.monotonic() - posted, 1)
            )

    def background(
        self, awaitable: Awaitable[Any], label: str, fields: dict[str, Any] | None = None
    ) -> None:
        """Await ``awaitable`` on the system loop; log its failure as ``label + message``."""

        async def watch() -> None:
            try:
                await awaitable
            except GeneratorExit:
                # Closed unfinished (its loop stopped for good, or the collector took it): no
                # failure of the awaitable, and nothing to report into whatever logs by then.
                raise
            except BaseException as exc:  # SystemExit included: the loop must survive
                # A cancellation by the system's stop is no failure either.
                if not (self._closing and isinstance(exc, asyncio.CancelledError)):
                    _log.warning(label + message_of(exc), exc_info=exc, **(fields or {}))

        request = object()

        def start() -> None:
            with self._lock:
                if self._unstarted.pop(request, None) is None:
                    return  # the loop ended meanwhile and closed it
            task = self.loop.create_task(watch())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        with self._lock:
            if not self._ended:
                self._unstarted[request] = awaitable
                try:
                    self.loop.call_soon_threadsafe(start)
                    return
                except RuntimeError:  # closed
                    del self._unstarted[request]
        _close(awaitable)


_STOPPED_BEFORE = "the tool system stopped before the call finished"


@types.coroutine
def _handed_over() -> Generator[None, None, None]:
    """Where ``SystemLoop.submit`` leaves what it submits: the task resumes it from here."""
    yield


class _Submitted(NamedTuple):
    """What ``SystemLoop.submit`` started: the work, and what its task runs around it."""

    coro: Coroutine[Any, Any, Any]
    wrapper: Coroutine[Any, Any, Any]


def _note_interrupted(loop: asyncio.AbstractEventLoop, wrapper: Coroutine[Any, Any, Any]) -> None:
    """Note the task running ``wrapper`` (``submit``'s) as cancelled for a Ctrl-C."""
    for task in asyncio.all_tasks(loop):
        if task.get_coro() is wrapper:
            note_interrupted(task)
            return


def _blocking_frame(frame: FrameType | None) -> str:
    """``function (file:line)`` of the innermost frame of ``frame``'s stack that is not library
    code (the harness author's callback), else of the innermost frame."""
    innermost = frame
    while frame is not None:
        if not is_library_code(frame.f_code.co_filename):
            innermost = frame
            break
        frame = frame.f_back
    if innermost is None:
        return "unknown"
    code = innermost.f_code
    return f"{code.co_qualname} ({code.co_filename}:{innermost.f_lineno})"


def _close(awaitable: Awaitable[Any]) -> None:
    """Close an awaitable that will never be awaited (a coroutine: no warning that it was not)."""
    close: Callable[[], None] | None = getattr(awaitable, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
