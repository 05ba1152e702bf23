"""Event-loop plumbing: driving a coroutine without a loop, resuming it in a task, the loop
batches run on.

The blocking ``execute`` drives the pipeline's coroutine directly on the caller's thread
(``drive``): nothing on a hook-free call's usual path (guards, a plain body) needs an event
loop, and starting one costs more than the whole pipeline. Code that does need one (hooks,
which are async code free to await anything asyncio; an async body, which runs as its own
task; a plain body sent to a worker thread; an approver; a timer) first awaits
``event_loop()``: without a running loop that suspends the coroutine once, and ``drive``
carries on with it inside a task on the calling thread's own private loop, exactly where it
would have run before. A call asks once: ``Pipeline.run`` tells the later stages that it
runs on a loop already.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import signal
import socket
import sys
import threading
import types
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final, TypeVar

from ._epoll import mark_given_up_leftovers, mark_wake_only, new_pool_loop

__all__ = [
    "STARTS_AT_ONCE",
    "GiveUp",
    "cancel_for_interrupt",
    "carry_on",
    "disown_body",
    "drive",
    "driving",
    "event_loop",
    "first_loop",
    "in_context",
    "interrupted_task",
    "interrupts_held",
    "new_own_body",
    "new_pool_loop",
    "new_task",
    "note_interrupted",
    "own_body",
    "resume",
    "running_loop",
    "start_task",
    "thread_loop",
    "waiting_loop",
]

_T = TypeVar("_T")


class _NeedLoop:
    """What ``event_loop()`` yields to ``drive`` when no loop is running."""

    def __repr__(self) -> str:
        return "<the coroutine needs an event loop>"


_NEED_LOOP = _NeedLoop()
_NEED_LOOP_TO_WAIT = _NeedLoop()
"""What ``waiting_loop()`` yields: the coroutine will wait on the loop for more than one pass
(a body's task, a worker thread), so ``drive`` need not try a single pass first."""


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    # Asked of asyncio, though the answer costs a raised and caught RuntimeError when no loop
    # runs: a loop need not install async generator hooks while it runs (QtAsyncio's does
    # not), and nothing else public tells.
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@types.coroutine
def event_loop() -> Generator[Any, Any, asyncio.AbstractEventLoop]:
    """``loop = await event_loop()``: the running loop, once there is one.

    Under the blocking ``execute`` hooks and plain bodies run without an event loop (nothing
    they usually do needs one). A hook that needs the loop itself (to set a timer, create a
    future, call ``asyncio.sleep``) awaits this first: the call then carries on inside a
    task on the calling thread's private loop. Anywhere else it returns the running loop
    at once."""
    loop = running_loop()
    if loop is not None:
        return loop
    sent: asyncio.AbstractEventLoop | None = yield _NEED_LOOP  # see ``first_loop``
    return sent if sent is not None else asyncio.get_running_loop()


@types.coroutine
def waiting_loop() -> Generator[Any, Any, asyncio.AbstractEventLoop]:
    """``event_loop()`` for what waits on the loop for certain (a body's own task, a worker
    thread: either settles it on a later pass), which ``drive`` then need not try in one."""
    loop = running_loop()
    if loop is not None:
        return loop
    sent: asyncio.AbstractEventLoop | None = yield _NEED_LOOP_TO_WAIT
    return sent if sent is not None else asyncio.get_running_loop()


@types.coroutine
def first_loop() -> Generator[Any, Any, asyncio.AbstractEventLoop]:
    """``event_loop()`` for a coroutine that ``drive`` runs and that has not yet suspended:
    no loop runs there (``execute`` checked before it called ``drive``, and a loop that user
    code starts meanwhile has stopped by the time that code returns), so it yields for one
    at once instead of asking, which costs a raised and caught ``RuntimeError``.

    Both return the loop that what resumes the coroutine sends in (``drive`` does), else
    the running loop: asking asyncio costs a system call (``getpid``, its fork check)."""
    sent: asyncio.AbstractEventLoop | None = yield _NEED_LOOP
    return sent if sent is not None else asyncio.get_running_loop()


# --- the per-thread loop and the driver --------------------------------------------------------


def _close_in_owner(
    loop: asyncio.AbstractEventLoop, owner_pid: int, wakeups: list[_SignalWakeup]
) -> None:
    # A child forked by another thread drops this thread's locals at once; closing the loop
    # there would unregister its descriptors from the epoll instance it shares with the parent,
    # and the parent's loop would never again be woken from another thread.
    # At interpreter exit a daemon thread may still be running its loop (a hook blocking it):
    # that loop is left to the process's end.
    if os.getpid() == owner_pid and not loop.is_running():
        _wind_down(loop)
        mark_given_up_leftovers(loop)
        loop.close()
        for wakeup in wakeups:
            wakeup.close()


_WIND_DOWN_S: Final = 1.0
"""How long a private loop's last tasks are given to end once cancelled, as it closes."""


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending on ``loop`` (a call whose wait a second Ctrl-C left, with
    its body's cleanup) and run the loop until it has ended, at most ``_WIND_DOWN_S``, as
    ``asyncio.run`` does before it closes its loop. Closed with them pending, asyncio reported
    each as a task destroyed while pending, and a body's coroutine collected before the task
    that drives it made that task's close fail ("cannot reuse already awaited coroutine")."""
    if loop.is_closed():
        return
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    try:
        for task in tasks:
            task.cancel()
        ended = asyncio.gather(*tasks, return_exceptions=True)  # every end retrieved
        ended.add_done_callback(lambda _ended: loop.stop())
        deadline = loop.time() + _WIND_DOWN_S
        timer = loop.call_at(deadline, loop.stop)
        # A driven call's task stops the loop in its last step too: run on until all have ended.
        while not ended.done() and loop.time() < deadline:
            loop.run_forever()
        timer.cancel()
    except BaseException:  # a Ctrl-C more, at exit say: what is left is closed as it stands
        pass


class _SignalWakeup:
    """The main thread's wakeup descriptor for its private loop's waits (``_woken_by_signals``):
    one socket pair for the loop's life, its reading end watched by the loop all along (the
    loop runs only while a call waits, and only such a wait points Python's wakeup descriptor
    at the writing end). A pair made and closed per wait cost every waiting call two socket
    closes and two watch changes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self.previous: int | None = None
        """The descriptor the current wait's signals are passed on to."""
        loop.add_reader(self.reader.fileno(), self.pass_on)
        # Like the loop's own wake-up socket, it only wakes a blocked wait: a pass of the loop
        # that does not block need not look at it (``PreciseEpoll``).
        mark_wake_only(loop, self.reader.fileno())

    def pass_on(self) -> None:
        """Pass what arrived on to the descriptor the wait replaced (a stopped asyncio loop's,
        whose signal handlers learn of their signals only from it)."""
        previous = self.previous
        # Not ``contextlib.suppress``: every blocking call's wait ends here, nearly always with
        # nothing to read, and the context manager cost three Python calls more than the read.
        try:
            while data := self.reader.recv(4096):
                if previous is not None and previous >= 0 and previous != self.writer.fileno():
                    with contextlib.suppress(OSError):
                        os.write(previous, data)
        except OSError:  # nothing (more) to read: BlockingIOError
            return

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class _ThreadLoop:
    """One private event loop per calling thread, closed when the thread's locals go away."""

    def __init__(self) -> None:
        self.loop = new_pool_loop()
        self._wakeups: list[_SignalWakeup] = []  # at most one, closed with the loop
        weakref.finalize(self, _close_in_owner, self.loop, os.getpid(), self._wakeups)

    def wakeup(self) -> _SignalWakeup:
        """The main thread's ``_SignalWakeup`` (made on first use; closed with the loop)."""
        if not self._wakeups:
            self._wakeups.append(_SignalWakeup(self.loop))
        return self._wakeups[0]


class _ThreadState(threading.local):
    holder: _ThreadLoop | None = None
    driving = False  # a coroutine is being driven on this thread without a loop
    # The tasks running async bodies of the calls driven on this thread (``own_body``).
    own_bodies: weakref.WeakSet[asyncio.Task[Any]] | None = None
    # An owned body's task is taking its first step inside ``new_own_body`` (an eager task).
    body_starting = False


_state = _ThreadState()


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's private event loop (made on first use)."""
    holder = _state.holder
    if holder is None or holder.loop.is_closed():
        holder = _ThreadLoop()
        _state.holder = holder
    return holder.loop


def driving(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether this thread is inside ``drive`` (without a loop, or on its private loop), given
    the loop running on it now (``running_loop()``, which the caller needs too)."""
    if _state.driving:
        return True
    holder = _state.holder
    return loop is not None and holder is not None and loop is holder.loop


def drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end on this thread and return what it returns.

    It runs in a copy of the caller's context (as a task would) without an event loop for as
    long as it never suspends; from its first real suspension on it finishes inside a task
    on this thread's private loop.

    The loop makes one pass first (``stop()`` before ``run_forever()``): the task's first step,
    which is the whole call unless it really suspends; only then does the loop run on until the
    task is done, which stops the loop in its own last step. A call whose hooks merely pass
    through so costs one pass of the loop, not the two (and the done callback) of
    ``run_until_complete``, and a call that suspends saves the pass that callback takes. A
    coroutine that first suspends for a loop it will wait on (``waiting_loop()``: its body's
    task, a worker thread) skips that first pass, and the loop's second start."""
    context = contextvars.copy_context()
    state = _state
    outer = state.driving
    state.driving = True
    try:
        try:
            first = context.run(coro.send, None)
        except StopIteration as done:
            value: _T = done.value
            return value
        loop = thread_loop()
        task = asyncio.Task(
            _carry_on(coro, first, loop, then_stop=True), loop=loop, context=context
        )
        handler: _CancelOnInterrupt | None = None  # the wait's SIGINT handler, if it has one
        try:
            if first is not _NEED_LOOP_TO_WAIT:
                loop.stop()
                loop.run_forever()
            if not task.done():
                with _woken_by_signals(loop, task) as handler:
                    _run_until_settled(loop, task, handler)
                if handler is not None and handler.cancelled:
                    raise KeyboardInterrupt  # the call was cancelled for it and has settled
        except BaseException:
            if not task.done() and not (handler is not None and handler.cancelled):
                # Interrupted while the call waits (Ctrl-C in the blocking wait): the call is
                # cancelled and settles here, its one result recorded, before the interruption
                # goes on. Left pending, the next call driven on this thread would resume it.
                # (A second Ctrl-C after the first one's cancellation leaves it instead.)
                _settle_interrupted(loop, task)
            if task.done() and not task.cancelled():
                task.exception()  # raised here and now: not "never retrieved"
            raise
        if STARTS_AT_ONCE:
            # A body that never waits ran at once inside the call's last step (an eager task),
            # which stopped the loop: what it scheduled (a task of its own, ``call_soon``) takes
            # its first step before ``execute`` returns, as where the body's own task ends a pass
            # before the call does, rather than at this thread's next call, or never.
            loop.stop()
            loop.run_forever()
        return task.result()
    finally:
        state.driving = outer


def _settle_interrupted(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` (a driven call whose loop an interruption left) and run the loop until it
    has settled; a second interruption stops the wait and leaves the call to be closed with
    the thread's loop."""
    try:
        # Every Ctrl-C from here on is a second one: the wait's handler stops the wait at the
        # loop's next turn rather than raise inside whatever the loop runs (see
        # ``_CancelOnInterrupt``).
        with _woken_by_signals(loop, task, cancelled=True) as handler:
            # The interruption may have come before the task's first step (as the wait was
            # being set up): cancelled then, it would end without the call it carries ever
            # settling, and without the stop() of its last step. One pass of the loop lets it
            # take that step (a task past it is waiting: the pass runs nothing of it).
            loop.stop()
            loop.run_forever()
            cancel_for_interrupt(task)
            _run_until_settled(loop, task, handler)
    except BaseException:  # a second interruption: the first one is what propagates
        pass


def _run_until_settled(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], handler: _CancelOnInterrupt | None
) -> None:
    """Run ``loop`` until ``task`` is done, or a second Ctrl-C left the wait (``handler``)."""
    while not task.done() and not (handler is not None and handler.left):
        loop.run_forever()  # until the task's last step stops the loop


_INTERRUPTED: Final = weakref.WeakSet["asyncio.Task[Any]"]()
"""Tasks of calls cancelled for their blocking caller's Ctrl-C (``cancel_for_interrupt``)."""


def note_interrupted(task: asyncio.Task[Any]) -> None:
    """Note ``task``, a call's, as cancelled for its blocking caller's Ctrl-C (before that
    cancellation lands): what else cancels that task is user code of the call's own (a
    wrapper's ``asyncio.timeout`` around ``next()``), which the pipeline must not take for
    the caller's interruption (``interrupted_task``)."""
    _INTERRUPTED.add(task)


def cancel_for_interrupt(task: asyncio.Task[Any]) -> None:
    """Cancel ``task``, a call's, for its blocking caller's Ctrl-C (``note_interrupted``)."""
    _INTERRUPTED.add(task)
    if not task.done():
        task.cancel()


def interrupted_task(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` was cancelled for its blocking caller's Ctrl-C."""
    return task in _INTERRUPTED


class _CancelOnInterrupt:
    """The SIGINT handler of a ``drive`` wait (see ``_woken_by_signals``). Left in place by a
    wait whose ending a Ctrl-C cut short, it acts as Python's own, and the next wait replaces
    it as it would Python's. ``cancelled``: a Ctrl-C cancelled the call (``cancelled=True``:
    the call is cancelled already, every Ctrl-C is a second one); ``left``: a second Ctrl-C
    stopped the wait, which leaves the call as it stands."""

    __slots__ = ("cancelled", "left", "loop", "task", "waiting")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], *, cancelled: bool = False
    ) -> None:
        self.loop = loop
        self.task = task
        self.cancelled = cancelled
        self.left = False
        self.waiting = True

    def __call__(self, signum: int, frame: Any) -> None:
        task = self.task
        if not self.waiting or task.done():
            raise KeyboardInterrupt
        if not _in_library_code(frame):
            current = asyncio.current_task(self.loop)
            bodies = _state.own_bodies
            if (
                current is task
                or self.cancelled
                or (
                    current is not None
                    and (_state.body_starting or (bodies is not None and current in bodies))
                )
            ):
                # In user code (a plain body inline, the call's async body holding the loop,
                # a callback that blocks it): raised there, as ever; a second Ctrl-C so ends
                # a wait the loop cannot turn in.
                raise KeyboardInterrupt
        elif self.cancelled:
            # A second Ctrl-C while the loop runs the package's or asyncio's own code (a Code
            # Mode run's teardown, a callback waking a task, the wait itself): the wait stops
            # once the loop has finished its turn. Raised there instead, it would cut that
            # code short: a run's worker, its descriptors and its slot were never given back,
            # a wake-up was lost and the task waiting for it with it.
            self.left = True
            self.loop.stop()
            return
        if self.cancelled:
            return
        self.cancelled = True
        if asyncio.current_task(self.loop) is task:
            # The call's own task runs the pipeline's bookkeeping (recording its result, say):
            # raised there, the call would end without its result. Cancelled instead, the call
            # settles at its next wait, or ends as it would have; ``drive`` raises afterwards.
            cancel_for_interrupt(task)
        else:
            self.loop.call_soon_threadsafe(cancel_for_interrupt, task)


def new_own_body(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T], context: contextvars.Context
) -> asyncio.Task[_T]:
    """``new_task`` for the async body of a call that a blocking ``execute`` drives on this
    thread, owned (``own_body``) from its first line on: on Python 3.12+ that line runs inside
    this call (an eager task), before the task could be named, and the task holding the loop
    there is the body's own (``_CancelOnInterrupt``)."""
    state = _state
    outer = state.body_starting
    state.body_starting = True
    try:
        task = new_task(loop, coro, context)
    finally:
        state.body_starting = outer
    if not task.done():
        own_body(task)
    try:
        return task
    finally:
        # A body that ended in its first step left its frames linked back to this one: holding
        # the task (its failure, whose traceback keeps those frames), this one makes a cycle.
        del task


def own_body(task: asyncio.Task[Any]) -> None:
    """``task`` runs the async body of the call that a blocking ``execute`` drives on this
    thread: a Ctrl-C that comes while its code holds the loop (a blocking sleep, a loop of
    pure Python) is the call's own, raised there as in a plain body inline (see
    ``_CancelOnInterrupt``). Only the main thread takes a Ctrl-C; ``disown_body`` undoes it."""
    if threading.current_thread() is threading.main_thread():
        bodies = _state.own_bodies
        if bodies is None:
            bodies = _state.own_bodies = weakref.WeakSet()
        bodies.add(task)


def disown_body(task: asyncio.Task[Any]) -> None:
    """``task``'s body has ended (``own_body``)."""
    bodies = _state.own_bodies
    if bodies is not None:
        bodies.discard(task)


def pythons_interrupts_here() -> bool:
    """Whether a Ctrl-C raises ``KeyboardInterrupt`` on this thread as Python's own handler
    does: the main thread, with that handler in place, or a ``drive`` wait's that a Ctrl-C
    left there as its wait ended, which acts as Python's own (an application's own is left
    alone). Cut short before it noted its ending (``waiting``), such a wait's handler has its
    call settled already: it raises as Python's own too."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGINT)
    return current is signal.default_int_handler or (
        isinstance(current, _CancelOnInterrupt) and (not current.waiting or current.task.done())
    )


def interrupts_deferred() -> _InterruptsNoted:
    """Bookkeeping that a Ctrl-C must not cut short (recording an interrupted call's result,
    while one ``KeyboardInterrupt`` propagates already): on the main thread, with Python's own
    SIGINT handler in place, a Ctrl-C meanwhile is dropped rather than raised inside it. Its
    ``came`` tells afterwards whether one was, for a caller that raises it once it holds what
    the block made."""
    return _InterruptsNoted(raise_after=False)


def interrupts_held() -> contextlib.AbstractContextManager[None]:
    """Work that a Ctrl-C must not cut in two (taking a pre-forked worker and handing it to
    its owner, or giving it back): on the main thread, with Python's own SIGINT handler in
    place, a Ctrl-C meanwhile raises ``KeyboardInterrupt`` once the work is done. Raised
    inside it, the worker was held by neither: its six descriptors stayed open for good."""
    return _InterruptsNoted(raise_after=True)


class _InterruptsNoted:
    """A Ctrl-C meanwhile is noted, not raised (on the main thread, with Python's own SIGINT
    handler in place; elsewhere it changes nothing): the instance is the SIGINT handler while
    the block runs. Python's handler is put back after, unless someone else's was installed
    meanwhile. ``raise_after``: a noted Ctrl-C raises ``KeyboardInterrupt`` once the block has
    ended without an exception of its own.

    A class rather than a generator-based context manager: every Code Mode run passes through
    two of these, and a generator's setup and teardown cost several times this one's."""

    __slots__ = ("came", "installed", "raise_after")

    def __init__(self, *, raise_after: bool) -> None:
        self.came = False
        self.installed = False
        self.raise_after = raise_after

    def __call__(self, signum: int, frame: types.FrameType | None) -> None:
        self.came = True

    def __enter__(self) -> None:
        if pythons_interrupts_here():
            signal.signal(signal.SIGINT, self)
            self.installed = True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        if not self.installed:
            return
        _put_back_pythons_handler(self)
        if kind is None and self.raise_after and self.came:
            raise KeyboardInterrupt


def _put_back_pythons_handler(ours: object) -> None:
    """Python's own SIGINT handler again in place of ``ours``, unless user code installed its
    own meanwhile (it is left alone)."""
    if signal.getsignal(signal.SIGINT) is ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_PACKAGE_DIR: Final = os.path.dirname(
    os.path.abspath(sys.modules[__name__.rpartition(".")[0].rpartition(".")[0]].__file__ or "")
)
_STDLIB_DIR: Final = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_LIBRARY_CODE: Final = (
    _PACKAGE_DIR + os.sep,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
    os.path.dirname(os.path.abspath(concurrent.futures.__file__)) + os.sep,
    os.path.abspath(threading.__file__),
)
"""This package, asyncio and the standard library's thread primitives: code that runs calls
(or that a call waits in), not a call's own."""
_TOOL_CODE: Final = os.path.join(_PACKAGE_DIR, "examples") + os.sep
"""The package's example tools: bodies, the call's own code like any other tool's."""
_INSTALLED: Final = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
"""Where installed distributions live, inside the standard library's directory too."""


def is_library_code(filename: str) -> bool:
    """Whether code of ``filename`` is library code (``_LIBRARY_CODE``), not user code (a
    body, a hook, the package's example tools)."""
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_CODE) and not path.startswith(_TOOL_CODE)


def _runs_for_others(filename: str) -> bool:
    """Whether a frame of ``filename`` runs only on behalf of the frames below it on the stack:
    library code, or the standard library (``contextlib``, ``selectors``, a frozen module),
    which the package's code calls as user code does; what called it tells whose it is."""
    if filename.startswith("<frozen "):
        return True
    if is_library_code(filename):
        return True
    path = os.path.abspath(filename)
    return path.startswith(_STDLIB_DIR) and not any(part in path for part in _INSTALLED)


def _in_library_code(frame: types.FrameType | None) -> bool:
    """Whether the main thread, where a signal's handler found it (``frame``), runs only library
    code on behalf of the driven call: no frame of user code stands between it and ``drive``."""
    while frame is not None:
        code = frame.f_code
        if code is drive.__code__:
            return True
        if not _runs_for_others(code.co_filename):
            return False
        frame = frame.f_back
    return True


def _woken_by_signals(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[Any] | None = None,
    *,
    cancelled: bool = False,
) -> contextlib.AbstractContextManager[_CancelOnInterrupt | None]:
    """While the main thread's loop waits: a signal the kernel delivers to another thread
    (any thread may take a process's Ctrl-C) wakes the wait at once, so that the main thread
    raises its ``KeyboardInterrupt`` then, not when the wait would have ended (an hour, for
    a body sleeping that long). Python notes the signal and writes its number to the wakeup
    descriptor, which the loop watches (``_SignalWakeup``).

    With ``task`` (the driven call), while Python's own SIGINT handler is in place, a first
    Ctrl-C that comes while the loop waits or runs anything but ``task`` cancels ``task`` from
    the loop instead (the handler it yields says so: ``cancelled``; ``drive`` raises
    ``KeyboardInterrupt`` once the call has settled), as ``asyncio.run`` does: raised wherever
    the main thread stood, it could land in a loop callback, losing the wake-up the call waited
    for (the wait then never ended), or in a Code Mode sub-call's hook or renderer running on
    this loop, which took it for its own failure (the run went on without it). One that comes
    while ``task`` itself runs (a plain body inline, a nested blocking call it waits for) is
    raised there as ever. A second Ctrl-C (every one, with ``cancelled``: the call is
    cancelled already) stops the wait: raised where user code runs, else once the loop has
    finished its turn (the handler's ``left``), never inside the package's or asyncio's own
    code that the loop runs."""
    return _SignalWait(loop, task, cancelled)


class _SignalWait:
    """``_woken_by_signals``: a class rather than a generator-based context manager, which
    cost every blocking call's wait several Python calls more."""

    __slots__ = ("cancelled", "handler", "loop", "previous", "task", "wakeup")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None, cancelled: bool
    ) -> None:
        self.loop = loop
        self.task = task
        self.cancelled = cancelled
        self.wakeup: _SignalWakeup | None = None  # set while the wait is armed
        self.previous = -1
        self.handler: _CancelOnInterrupt | None = None

    def __enter__(self) -> _CancelOnInterrupt | None:
        holder = _state.holder
        if threading.current_thread() is not threading.main_thread() or holder is None:
            return None
        assert holder.loop is self.loop  # ``drive`` waits on this thread's private loop only
        wakeup = holder.wakeup()
        writer = wakeup.writer.fileno()
        try:
            previous = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        except ValueError:  # not the main interpreter: signals are not delivered here
            return None
        if previous == writer:
            # Left pointing here by a wait whose ending a Ctrl-C cut short: passing on to it
            # would write what arrives straight back to where it is read from, for ever.
            previous = -1
        self.previous = wakeup.previous = previous
        self.wakeup = wakeup
        current = signal.getsignal(signal.SIGINT)
        if self.task is not None and (
            current is signal.default_int_handler or isinstance(current, _CancelOnInterrupt)
        ):
            handler = self.handler = _CancelOnInterrupt(
                self.loop, self.task, cancelled=self.cancelled
            )
            signal.signal(signal.SIGINT, handler)
        return self.handler

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        wakeup = self.wakeup
        if wakeup is None:
            return
        handler = self.handler
        if handler is not None:
            handler.waiting = False  # if this ending is cut short, it acts as Python's own
            _put_back_pythons_handler(handler)
        signal.set_wakeup_fd(self.previous)
        wakeup.pass_on()  # what came in since the loop last looked
        wakeup.previous = None


def carry_on(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, _T],
    first: Any,
    context: contextvars.Context,
) -> asyncio.Task[_T]:
    """Continue, in a task on ``loop`` (call this on its thread), a coroutine that was started
    on another thread and suspended there with ``first`` (an ``event_loop()`` wait, say)."""
    if first is _NEED_LOOP or first is _NEED_LOOP_TO_WAIT:
        return loop.create_task(coro, context=context)  # resumed there, event_loop() returns
    return loop.create_task(_carry_on(coro, first), context=context)


async def _carry_on(
    coro: Coroutine[Any, Any, _T],
    first: Any,
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    then_stop: bool = False,
) -> _T:
    """Continue a started coroutine inside its task: first past every ``event_loop()`` wait
    (a loop runs now: ``loop``, when the caller knows it, is what the wait returns), then as
    ``resume`` does. ``then_stop``: stop ``loop`` in the same step, however the coroutine ends
    (the ``run_forever`` that ``drive`` runs returns with that pass). A coroutine, not a
    generator: Python 3.12+ makes a task of a coroutine only."""
    try:
        yielded = first
        while yielded is _NEED_LOOP or yielded is _NEED_LOOP_TO_WAIT:
            try:
                yielded = coro.send(loop)
            except StopIteration as done:
                value: _T = done.value
                return value
        result: _T = await resume(coro, yielded)
        return result
    finally:
        if then_stop and loop is not None:
            loop.stop()


# --- resuming a started coroutine in a task ----------------------------------------------------


@types.coroutine
def resume(
    coro: Coroutine[Any, Any, _T],
    first: Any,
    context: contextvars.Context | None = None,
    *,
    closed_outside: bool = False,
) -> Generator[Any, Any, _T]:
    """Drive a coroutine that has already yielded ``first`` (to its task, unchanged); return
    what it returns, each step run in ``context`` when one is given. Cancellation and other
    throws go to the coroutine, from outside the handler that caught them: thrown from inside
    it, the coroutine would see that exception as the one being handled once it has handled it
    itself (``sys.exc_info()``, and the context of what it raises next), as it never would in a
    task of its own. ``closed_outside``: closed unfinished, this closes the coroutine outside
    ``context``, as the collector closes a task's coroutine (``isolated``)."""
    step: Any = coro.send
    arg: Any = None
    yielded = first
    while True:
        # What was thrown in carries a traceback that holds this frame: once it is passed on,
        # nothing here may keep it, or the call waits for the cyclic collector.
        try:
            arg = yield yielded
            step = coro.send
        except GeneratorExit as exc:
            if closed_outside:
                coro.close()
                raise
            step, arg = coro.throw, exc
        except BaseException as exc:
            if type(exc) is asyncio.CancelledError and exc.args and type(exc.args[0]) is GiveUp:
                given_up = exc.args[0]
                call = given_up.owner(context)
                if call is not None:
                    return given_up.detach(call, coro, exc, context)  # type: ignore[no-any-return]
            step, arg = coro.throw, exc
        yielded = None
        try:
            yielded = step(arg) if context is None else context.run(step, arg)
        except StopIteration as done:
            step = arg = None
            value: _T = done.value
            return value
        except BaseException:
            step = arg = None
            raise
        arg = None


class GiveUp:
    """The message of the cancellation that gives up calls whose hooks went on after their
    cancellation (``stop()``, its grace over), nested in one another in one task: the driver
    (``resume``) of the outermost one's coroutine (the ``owner`` it finds) stops driving it there
    and returns that call's result from ``results`` (each call was settled without its hooks);
    the coroutine runs on in a task of its own (handed to ``hold``), the cancellation thrown
    into it as asyncio would have, and what it returns is dropped. The awaiting task's count
    of cancellations goes back by ``cancels`` (the pipeline's own, which the hooks swallowed)
    and this one.

    Which driver is a call's is told by ``mark``, a context variable that the call's coroutine
    set to its key in ``results`` in the context its steps run in as it started
    (``STEPPING``): a driver further out runs its coroutine in a context made before the call
    began, one further in (a hook's, a nested call's) is reached only through the call's
    own driver; the first driver the cancellation reaches is the outermost.

    ``owed(call, task)``: the arguments of a cancellation the awaiting task's own caller asked
    for meanwhile (a hook swallowed it), which the driver raises instead of returning the
    result, as the call would have once settled; None when there is none."""

    __slots__ = ("cancels", "hold", "mark", "owed", "results")

    def __init__(
        self,
        results: dict[Any, Any],
        cancels: int,
        mark: contextvars.ContextVar[Any],
        hold: Callable[[asyncio.Task[Any]], None],
        owed: Callable[[Any, asyncio.Task[Any]], tuple[Any, ...] | None],
    ) -> None:
        self.results = results
        self.cancels = cancels
        self.mark = mark
        self.hold = hold
        self.owed = owed

    def owner(self, context: contextvars.Context | None) -> Any:
        """The call whose coroutine a ``resume`` steps in ``context`` (None: the awaiting
        task's own, the one current), if it is a key of ``results``; else None."""
        mark = self.mark
        call = mark.get(None) if context is None else context.get(mark)
        return call if call is not None and call in self.results else None

    def detach(
        self,
        call: Any,
        coro: Coroutine[Any, Any, Any],
        exc: BaseException,
        context: contextvars.Context | None,
    ) -> Any:
        """Call in the awaiting task, which caught ``exc`` (this cancellation), with the
        ``owner`` of ``coro``."""
        task = asyncio.current_task()
        assert task is not None
        for _ in range(self.cancels + 1):
            task.uncancel()
        owed = self.owed(call, task)
        # The new task runs in the context the coroutine's steps ran in (its driver's, else
        # the awaiting task's): stepping it through ``context.run`` there as well would enter
        # a context already entered, and the coroutine would never run again.
        self.hold(
            task.get_loop().create_task(
                _given_up(coro, exc), context=context or contextvars.copy_context()
            )
        )
        if owed is not None:
            raise asyncio.CancelledError(*owed)
        return self.results[call]


async def _given_up(coro: Coroutine[Any, Any, Any], exc: BaseException) -> None:
    """Run a given-up call's coroutine on (``GiveUp``) to its end, in this task's context,
    dropping how it ends."""
    try:
        first = coro.throw(exc)
    except BaseException:
        return
    del exc
    with contextlib.suppress(BaseException):
        await resume(coro, first, closed_outside=True)


STARTS_AT_ONCE: Final = sys.version_info >= (3, 12)
"""Whether ``new_task`` starts a task at once, its first step inside the task (Python 3.12+:
an eager task); else the task takes its first step on the loop's next pass."""


def new_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T], context: contextvars.Context
) -> asyncio.Task[_T]:
    """A task on ``loop`` (call on its thread, with the loop running) running ``coro`` in
    ``context``: started at once where asyncio can (Python 3.12+: an eager task, which may be
    done on return), else on the loop's next pass.

    User code (hooks, bodies) always starts inside its own task, never in whichever task or
    callback happens to be running: ``asyncio.current_task()``, ``asyncio.timeout()`` and
    ``TaskGroup`` must find that task from the first line on, or a body's timeout would cancel
    its caller."""
    if STARTS_AT_ONCE:
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return loop.create_task(coro, context=context)


def start_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None], context: contextvars.Context
) -> asyncio.Task[None] | None:
    """Run a stage coroutine as its own task (``new_task``) in ``context``; None when it is
    done already."""
    task = new_task(loop, coro, context)
    return None if task.done() else task


@types.coroutine
def isolated(
    coro: Coroutine[Any, Any, _T], context: contextvars.Context
) -> Generator[Any, Any, _T]:
    """Await ``coro`` in the awaiting task as if in a task of its own: each step in
    ``context`` (a copy of the caller's), so that what it sets there never reaches the
    caller's context. Closed unfinished (the awaiting task collected with its loop closed), it
    closes ``coro`` from outside ``context``, as the collector closes a task's coroutine:
    what tells such a close from a step of the call by the context (``STEPPING``) sees one."""
    try:
        first = context.run(coro.send, None)
    except StopIteration as done:
        value: _T = done.value
        return value
    result: _T = yield from resume(coro, first, context, closed_outside=True)
    return result


@types.coroutine
def in_context(
    coro: Coroutine[Any, Any, Any], context: contextvars.Context
) -> Generator[Any, Any, Any]:
    """Await ``coro`` with each of its steps run in ``context`` (its own copy, inside the
    awaiting task), passing what it yields to the task and what the task sends or throws back
    to it (``resume``)."""
    try:
        first = context.run(coro.send, None)
    except StopIteration as done:
        return done.value
    return (yield from resume(coro, first, context))
