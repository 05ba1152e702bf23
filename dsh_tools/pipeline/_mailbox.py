"""``SharedMailboxActor``: a ``LoopActor`` whose mailbox a worker thread may drain too.

A ``LoopActor`` handles every message on the loop: a stage that ends on a worker thread reports
back with a cross-thread wake-up of the loop, and whatever the actor starts next on a worker
thread is another wake-up. For an actor whose work is mostly plain code on worker threads (a
dispatcher pool of plain bodies) those two wake-ups are most of the time between one body and
the next. Here a worker thread that reports while nobody drains the mailbox drains it itself,
one message at a time as ever (a lock guards only the mailbox and who drains it), and may be
handed one job to run once the drain is done (the next body). A step that must run where it
always has (on the loop) hands the rest of the drain to the loop (``hand_over``). A message a
worker reports while the loop is draining reaches the loop as any other thread's does, a loop
pass later, so that what the loop does next (stopping, say) comes first as it always did.

Where asyncio cannot start a task at once (Python 3.11), the loop's drain waits, after it has
started a stage task, until that task has taken its first step (``_stage_started``), while the
stages it sees suspend in their first step: a slot's next body then starts its timer or request
before the loop commits the other calls that settled in the same pass, as with eager tasks. A
call's first step may so come before the commit of a call that settled earlier; if that step
aborts the pool, the earlier call is committed as aborted, as on Python 3.12+.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, ParamSpec, Protocol, TypeVar

from ..actors._logging import get_logger
from ..actors._loop_actor import LoopActor
from ._loop import STARTS_AT_ONCE, carry_on, running_loop, start_task

_P = ParamSpec("_P")
_T = TypeVar("_T")

__all__ = ["WORKER", "HoldsTask", "SharedMailboxActor"]

_log = get_logger("dsh_tools.actors")

# Who drains the mailbox now.
_NOBODY, _LOOP, _WORKER = range(3)
WORKER: Final = _WORKER
"""``_drainer`` while a worker thread drains (what ``on_worker()`` asks; a subclass's hot path
reads it inline)."""


class HoldsTask(Protocol):
    """What holds the task a stage runs in until it ends (asyncio keeps only weak references)."""

    task: asyncio.Task[None] | None


class SharedMailboxActor(LoopActor):
    """See the module docstring. ``workers_drain`` False: a plain ``LoopActor``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, workers_drain: bool) -> None:
        super().__init__(loop)
        self._workers_drain = workers_drain
        self._mail_lock = threading.Lock()
        self._drainer = _NOBODY
        self._handing = False  # a worker's drain is to be handed to the loop
        # Where asyncio cannot start a task at once: the first stage task the loop's drain has
        # started since ``_stage_started`` last ran (which is queued right behind it), whether
        # the drain waits for that task's first step (only while stages' first steps tend to
        # suspend: a body waiting on a timer or a socket), and whether it is waiting now.
        self._starting: asyncio.Task[None] | None = None
        self._wait_for_starts = True
        self._parked = False
        # Every stage starts in a copy of the context the actor was made in (its submitter's),
        # never in whichever task or thread drains the mailbox: what one call's hooks set in
        # their context must not reach the next call.
        self._context = contextvars.copy_context()

    def tell(self, message: Any) -> None:
        if not self._workers_drain:
            super().tell(message)
        elif self._on_loop():
            self._post(message, _LOOP)
        else:
            self._loop.call_soon_threadsafe(self.tell, message)

    def tell_here(self, message: Any) -> None:
        """``tell`` from the loop's own thread, as the caller knows (nothing is asked of
        asyncio)."""
        if self._workers_drain:
            self._post(message, _LOOP)
        else:
            super().tell(message)

    def report(self, message: Any, *, off_loop: bool = False) -> None:
        """``tell`` for a stage ending here: on a worker thread that finds nobody draining, drain
        the mailbox right here (see ``hand``). ``off_loop``: the caller knows that no event loop
        runs on this thread (else asyncio is asked)."""
        if not self._workers_drain or (not off_loop and running_loop() is not None):
            self.tell(message)
            return
        here = _here
        outer, here.taker = here.taker, self
        try:
            posted = self._post(message, _WORKER)
        finally:
            here.taker = outer
        if not posted:
            self._loop.call_soon_threadsafe(self.tell, message)

    def on_worker(self) -> bool:
        """Whether a worker thread runs this drain (call from a message handler)."""
        return self._drainer == _WORKER

    def hand_over(self) -> bool:
        """On a worker thread: leave the rest of this drain to the loop, which goes on with
        ``pump()`` and the mailbox; returns False (a step that made no progress here)."""
        self._handing = True
        return False

    def hand(self, job: Callable[[], None]) -> bool:
        """Give ``job`` to the worker thread draining now, to run once its drain is done; False
        when this drain is not a worker's report, or that worker has a job already."""
        here = _here
        if here.taker is not self or here.job is not None:
            return False
        here.job = job
        return True

    @staticmethod
    def run_jobs(job: Callable[[], None]) -> None:
        """On a worker thread: run ``job``, then each job handed to this thread meanwhile."""
        here = _here
        while True:
            job()
            handed = here.job
            if handed is None:
                return
            here.job = None
            job = handed

    def spawn(self, holder: HoldsTask, coro: Coroutine[Any, Any, None]) -> None:
        """Start a stage on the loop, as a task started at once (from another thread: on the
        loop's next pass)."""
        if self._on_loop():
            holder.task = start_task(self._loop, coro, self._context.copy())
            if holder.task is not None and not STARTS_AT_ONCE and self._starting is None:
                self._starting = holder.task
                self._loop.call_soon(self._stage_started)
        else:
            self._loop.call_soon_threadsafe(self._start_stage, holder, coro)

    def in_own_context(self, stage: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run a synchronous stage that may run user code (guards as a call starts, result
        observers as it commits) in a fresh copy of the submitter's context, as a stage task
        starts: never in the context of whichever task or thread drains the mailbox, where
        what the previous call's guard or observer set would still be."""
        return self._context.copy().run(stage, *args, **kwargs)

    def run_here(self, holder: HoldsTask, coro: Coroutine[Any, Any, None]) -> None:
        """Run a stage on this worker thread up to its first suspension (it awaits
        ``event_loop()`` before anything that needs a loop); it carries on in a task on the loop
        from there."""
        context = self._context.copy()
        try:
            first = context.run(coro.send, None)
        except StopIteration:
            return
        self._loop.call_soon_threadsafe(self._adopt, holder, coro, first, context)

    def pump(self) -> None:
        """Make what progress the handled messages allow (the loop calls it on taking over)."""

    # --- the drain -----------------------------------------------------------------------------

    def _post(self, message: Any, here: int) -> bool:
        """Queue ``message`` and drain the mailbox on this thread (``here``: the loop or a
        worker) unless some thread is at it already; False when a worker finds the loop at it."""
        with self._mail_lock:
            drainer = self._drainer
            if drainer is not _NOBODY:
                if drainer == _LOOP and here == _WORKER:
                    return False
                self._mailbox.append(message)
                return True
            self._drainer = here
            # Nobody drained, so the mailbox is empty and this message comes first: it is
            # handled at once, not queued and taken back, unless the loop's drain must wait
            # for a stage's first step before it handles anything (see ``_run_drain``).
            first = here != _LOOP or self._starting is None or not self._wait_for_starts
            if not first:
                self._mailbox.append(message)
        if first:
            try:
                self.on_receive(message)
            except Exception as exc:  # a handler bug must not wedge the mailbox
                self._failed(exc)
        self._run_drain()
        return True

    def _run_drain(self) -> None:
        lock, mailbox = self._mail_lock, self._mailbox
        while True:
            with lock:
                if self._handing:
                    self._handing = False
                    self._drainer = _LOOP
                    self._loop.call_soon_threadsafe(self._take_over)
                    return
                if not mailbox:
                    self._drainer = _NOBODY
                    return
                if self._starting is not None and self._wait_for_starts and self._drainer == _LOOP:
                    self._parked = True
                    return
                message = mailbox.popleft()
            try:
                self.on_receive(message)
            except Exception as exc:  # a handler bug must not wedge the mailbox
                self._failed(exc)

    def _stage_started(self) -> None:
        """Queued right behind ``_starting``, which has now taken its first step.

        Waiting for it lets a body's first timer or request be on its way before the loop goes
        on with the next settled call: the ten bodies of a pool that settle in one pass then
        start their successors one by one, as eager tasks would, instead of each successor
        waiting for all ten commits and starts. That costs a loop pass per start, which a body
        that ends in its first step gains nothing from: the drain waits only while the last
        task observed here did not end in its first step."""
        task, self._starting = self._starting, None
        self._wait_for_starts = task is not None and not task.done()
        if self._parked:
            self._parked = False
            self._take_over()

    def _take_over(self) -> None:
        try:
            self.pump()
        except Exception as exc:
            self._failed(exc)
        self._run_drain()

    def _failed(self, exc: Exception) -> None:
        _log.exception("actor message handler failed", actor=type(self).__name__, error=repr(exc))
        self.on_failure(exc)

    def _start_stage(self, holder: HoldsTask, coro: Coroutine[Any, Any, None]) -> None:
        holder.task = start_task(self._loop, coro, self._context.copy())

    def _adopt(
        self,
        holder: HoldsTask,
        coro: Coroutine[Any, Any, None],
        first: Any,
        context: contextvars.Context,
    ) -> None:
        holder.task = carry_on(self._loop, coro, first, context)


class _Here(threading.local):
    """What a worker thread draining an actor's mailbox may take on."""

    taker: SharedMailboxActor | None = None  # the actor whose drain this thread's report runs
    job: Callable[[], None] | None = None  # what it runs once that drain is done


_here = _Here()
