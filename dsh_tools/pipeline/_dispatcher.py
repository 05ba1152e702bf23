"""``DispatcherPoolActor``: one model turn's calls in a bounded pool with ordered barriers.

Calls start strictly in submission order; each start runs its prepare stage on the pool's one
sequential coordinator before the next may start. Only dispatches (execute wrappers and bodies)
overlap, at most ``max_parallel`` at once; a settled dispatch frees its slot at once. A call
whose tool is not concurrency-safe when it is classified, right before it would start, is a
barrier: nothing more starts until everything before it is committed, then it is classified
afresh (normally it then runs alone, and nothing starts until its own commit is done).
Commits (post-execute, finalizer, result observers, the result event) follow submission order.
On abort the pool stops starting, drains what is in flight, commits every started call and
abandons the rest.

The actor's protocol is messages (``SubmitCall``, ``PrepareDone``, ``DispatchSettled``,
``CommitDone``, ``AbortPool``, ``ClosePool``); what a start, commit or abandonment means to the
outside world is the ``PoolLane``'s business (a batch records session events; a Code Mode run
answers the program).

The mailbox is drained on the system loop, one message at a time. With a lane that may be told
from any thread (a batch's, a code run's), a worker thread whose plain body has just settled
drains it itself when nobody else is: it commits (unless the lane says a commit must run on the
loop now), starts the next call and, when that call's dispatch is a plain body again, runs it
right there. A pool of plain bodies then moves from one body to the next as
a thread pool does, instead of waking the loop and then a worker thread for every call. Stages
that need the loop (hooks, async bodies, approvals) carry on there: they await ``event_loop()``
first, and a stage suspended that way off the loop is handed to a task on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import partial
from threading import get_ident
from typing import Any, Final

from ..actors import (
    AbortSignal,
    ToolExecutionResult,
)
from ..actors._logging import get_logger
from ..registry import classify
from ..registry._execution import CallRecord
from ._core import DISPATCH, Stage, after_give_up_time
from ._dispatch import OFF_LOOP, Inline
from ._loop import start_task
from ._mailbox import WORKER, SharedMailboxActor
from ._pool_parts import (
    COMMITTING,
    DISPATCHING,
    DONE,
    PREPARING,
    SETTLED,
    AbortPool,
    BodyGivenUp,
    ClosePool,
    CommitDone,
    DispatchSettled,
    HooksGivenUp,
    LaneReady,
    PoolEntry,
    PoolLane,
    PoolOverdue,
    PoolPipeline,
    PrepareDone,
    SubmitCall,
    SubmitCalls,
)
from ._results import failure_from_exception

_log = get_logger("dsh_tools.pool")

__all__ = ["DispatcherPoolActor"]

_COMPACT_AFTER = 256
"""Committed slots a pool keeps before it drops them from its list."""

_LET_GO: Final = PoolEntry.__new__(PoolEntry)
"""What fills a committed entry's slot until the list is compacted: the pool never reads a
committed slot again, and holding the entry there would keep its call's arguments and record
alive (256 calls of 10 MB arguments kept 2.5 GB)."""


class DispatcherPoolActor(SharedMailboxActor):
    """Schedules submitted calls under the pool rules; see the module docstring."""

    def __init__(
        self,
        pipeline: PoolPipeline,
        *,
        loop: asyncio.AbstractEventLoop,
        signal: AbortSignal,
        max_parallel: int,
        lane: PoolLane,
        lane_any_thread: bool = False,
    ) -> None:
        """``lane_any_thread``: the lane's methods may be called from any thread (see the module
        docstring); otherwise every message is handled on ``loop``."""
        super().__init__(loop, workers_drain=lane_any_thread)
        self._pipeline = pipeline
        self._signal = signal
        self._max_parallel = max_parallel
        self._lane = lane
        # The submitted entries not yet let go of, in submission order: those before
        # ``_commit_cursor`` are committed (their slots hold ``_LET_GO``), those before
        # ``_start_cursor`` started.
        self._entries: list[PoolEntry] = []
        self._start_cursor = 0
        self._commit_cursor = 0
        self._in_flight = 0
        self._exclusive_active = False
        self._group_closed = False  # a call was found exclusive: the running group drains
        self._busy = False  # the coordinator runs one prepare or commit at a time
        self._closed = False
        self._hold_task: asyncio.Task[None] | None = None  # a lane backpressure wait
        self._finished = False
        self.aborted = False
        self._remove_abort = signal.add_callback(lambda reason: self.tell(AbortPool(reason)))
        self._unwatch = pipeline.watch_pool(partial(self.tell, PoolOverdue()))

    # --- messages ------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        kind = type(message)
        # The two messages every call sends first.
        if kind is SubmitCall:
            self._entries.append(PoolEntry(message.request))
        elif kind is DispatchSettled:
            entry = message.entry
            entry.task = None
            if entry.state == DISPATCHING:  # else it settled already, without its body
                self._in_flight -= 1
                entry.stage = message.stage
                entry.state = SETTLED
        elif kind is SubmitCalls:
            self._entries.extend(map(PoolEntry, message.requests))
        elif kind is PrepareDone:
            if message.entry.state == PREPARING:  # else it settled already, without its hooks
                self._busy = False
                message.entry.task = None
                self._settle_prepare(message.entry, message.stage)
        elif kind is CommitDone:
            if message.entry.state == COMMITTING:  # else it settled already, without its hooks
                self._busy = False
                message.entry.task = None
                self._settle_commit(message.entry, message.result)
        elif kind is ClosePool:
            self._closed = True
        elif kind is LaneReady:
            self._busy = False
        elif kind is AbortPool:
            self._interrupt_started(message.reason, message.anyway)
        elif kind is PoolOverdue:
            self._overdue()
        elif kind is BodyGivenUp:
            self._give_up(message.entry)
        elif kind is HooksGivenUp:
            self._give_up_hooks(message.entry)
        else:
            raise TypeError(f"DispatcherPoolActor cannot handle {kind.__name__}")
        while self._step():  # ``pump()``, inline: every message ends here
            pass

    def _interrupt_started(self, reason: Any, anyway: bool = False) -> None:
        """The pool aborted: every started, uncommitted call is interrupted (its async body's
        task cancelled, its success committed as ``ABORTED``), whatever signal it holds;
        ``anyway``: a body that watches its signal too."""
        self.aborted = True
        for entry in self._entries[self._commit_cursor : self._start_cursor]:
            if entry.record is not None and entry.state != DONE:
                self._pipeline.interrupt(entry.record, reason, anyway)

    def _overdue(self) -> None:
        """``stop()``'s grace is over: a plain body a body thread runs for a started call is
        given up (the call settles without it and commits as any other, its slot free), and
        a hook chain still waiting is cancelled once more (and given up a moment later if it
        goes on after that too: ``HooksGivenUp``)."""
        for entry in self._entries[self._commit_cursor : self._start_cursor]:
            record = entry.record
            if record is None or entry.state == DONE:
                continue
            if entry.state == DISPATCHING and entry.off_loop:
                self._in_flight -= 1
                entry.stage = self._pipeline.abandoned_stage(record)
                entry.state = SETTLED
            else:
                if entry.state == DISPATCHING and record.body_task is not None:
                    # An async body (which stop() cancels outright now) running as the dispatch
                    # task itself: one that swallows that cancellation too would hold its call,
                    # and the whole batch, for good. It is given up a moment later, as one in a
                    # task of its own is (``abandon_bodies``).
                    after_give_up_time(self._loop, self.tell, BodyGivenUp(entry))
                # Given up a moment later if it goes on, or if one starts waiting later
                # (its post-execute hook, once its body was given up) and goes on.
                self._pipeline.hooks_overdue(record, partial(self._hooks_given_up, entry))

    def _give_up(self, entry: PoolEntry) -> None:
        """``BodyGivenUp``: settle ``entry`` without its async body if that still runs as its
        dispatch task, cancelled (else it has settled, or runs in a task of its own, which
        its dispatch gives up)."""
        record = entry.record
        if record is None or entry.state != DISPATCHING or not record.cancel_sent:
            return
        task = record.body_task
        if task is None or task is not entry.task:
            return
        self._pipeline.give_up_body(record, task)
        self._in_flight -= 1
        entry.stage = self._pipeline.abandoned_stage(record)
        entry.state = SETTLED

    def _hooks_given_up(self, entry: PoolEntry, task: asyncio.Task[Any]) -> None:
        """``hooks_overdue``'s give-up for ``entry`` (on the loop, a while after its hook chain
        in ``task`` was cancelled): ``HooksGivenUp``, which reads its stage task itself."""
        self.tell(HooksGivenUp(entry))

    def _give_up_hooks(self, entry: PoolEntry) -> None:
        """``HooksGivenUp``: settle ``entry`` without its stage task if a hook chain still waits
        in it (a hook that swallowed every cancellation): the call finishes aborted and commits
        in its turn, the task runs on in the background, and what its stage reports later is
        dropped (its entry has moved on)."""
        record, state = entry.record, entry.state
        if record is None or state not in (PREPARING, DISPATCHING, COMMITTING):
            return
        task = entry.task
        if not self._pipeline.hooks_gone_on(record, task):
            return
        assert task is not None  # ``hooks_gone_on``
        self._pipeline.hold_given_up(task)
        if state == DISPATCHING:
            self._in_flight -= 1
        else:  # the prepare or commit the coordinator ran
            self._busy = False
        entry.task = None
        entry.stage = self._pipeline.given_up_stage(record)
        entry.state = SETTLED

    def on_failure(self, exc: BaseException) -> None:
        self.pump()

    # --- scheduling ----------------------------------------------------------------------------

    def pump(self) -> None:
        # Synchronous stages (no hooks to await) settle inside _step; keep stepping until the
        # pool must wait for a message. A loop, not recursion: a pool may be very wide.
        while self._step():
            pass

    def _step(self) -> bool:
        """Advance by one action; True when another step may make progress at once."""
        if self._busy or self._finished:
            return False
        # The cursors and counts, read once: a step that changes them returns at once (but the
        # abandoning loop, which works on the attributes). ``_drainer == WORKER`` is
        # ``on_worker()``, inline.
        entries = self._entries
        start = self._start_cursor
        commit = self._commit_cursor
        if commit < start:
            head = entries[commit]
            if head.state == SETTLED:
                if self._drainer == WORKER:
                    if not (
                        self._pipeline.commits_quietly(head.record, head.stage)
                        and self._lane.commits_anywhere()
                    ):
                        return self.hand_over()
                    return self._commit(head, anywhere=True)
                return self._commit(head)
        pending = start < len(entries)
        in_flight = self._in_flight
        # The signal is read only when a call might start (or, aborted, be abandoned): with
        # nothing left to start, a pool with every started call committed finishes either way
        # once closed, and with every slot taken or an exclusive call running, a call is in
        # flight, so nothing starts and nothing is abandoned either way.
        aborted = self.aborted
        if (
            not aborted
            and pending
            and in_flight < self._max_parallel
            and not self._exclusive_active
            and self._signal.aborted
        ):
            self.aborted = aborted = True
        if aborted:
            if in_flight == 0 and commit == start:
                while self._start_cursor < len(entries):
                    entry = entries[self._start_cursor]
                    entries[self._start_cursor] = _LET_GO
                    self._start_cursor += 1
                    self._commit_cursor += 1
                    entry.state = DONE
                    self._lane.abandoned(entry)
                if self._closed:
                    self._finish()
            return False
        if pending and not self._exclusive_active:
            drained = in_flight == 0 and commit == start
            if self._group_closed and drained:
                self._group_closed = False  # the group has ended: classify the head afresh
            # With every slot taken nothing can start (an exclusive call needs an empty pool),
            # so the head is classified only when it might start: a classifier validates the
            # arguments and runs user code.
            if not self._group_closed and in_flight < self._max_parallel:
                head = entries[start]
                reader = head.reader
                if reader is not None:
                    head.reader = None
                    reader(head)
                if self._drainer == WORKER and not self._pipeline.starts_quietly(head.call):
                    return self.hand_over()
                if self._classify(head):
                    return self._start(head, exclusive=False)
                if drained:
                    return self._start(head, exclusive=True)
                # Not concurrency-safe beside running calls: replenishment stops here until
                # the group has drained, whatever a later classification would say.
                self._group_closed = True
        if self._closed and commit == len(entries):
            self._finish()
        return False

    def _classify(self, entry: PoolEntry) -> bool:
        if entry.refused is not None:
            return True  # it runs nothing: no reason to hold its siblings back
        call = entry.call
        found = self._pipeline.lookup(call.name, call.agent)
        return found is not None and classify(found.definition, call.arguments)

    def _start(self, entry: PoolEntry, *, exclusive: bool) -> bool:
        self._start_cursor += 1
        entry.exclusive = exclusive
        if exclusive:
            self._exclusive_active = True
        self._lane.started(entry)
        # ``in_own_context``, inline: every call starts here.
        record, stage = self._context.copy().run(
            self._pipeline.start_now, entry.call, frozen=entry.frozen, refused=entry.refused
        )
        entry.record = record
        if stage is not None:
            self._settle_prepare(entry, stage)
            return True
        entry.state = PREPARING
        self._busy = True
        self.spawn(entry, self._prepare(entry, record))
        return False

    async def _prepare(self, entry: PoolEntry, record: CallRecord) -> None:
        try:
            stage = await self._pipeline.prepare(record)
        except BaseException as exc:  # the pipeline does not raise; stay total regardless
            if self._closed_under(exc):
                raise
            stage = Stage(2, failure_from_exception(exc))
        self.report(PrepareDone(entry, stage))

    def _settle_prepare(self, entry: PoolEntry, stage: Stage) -> None:
        if stage.kind == DISPATCH:
            entry.state = DISPATCHING
            self._in_flight += 1
            record = entry.record
            assert record is not None
            if self._workers_drain and self._pipeline.plain_dispatch(record):
                job = partial(self._dispatch_here, entry, record)
                entry.off_loop = True
                if self.hand(job):  # this worker runs it once its drain is done
                    return
                try:
                    self._pipeline.on_body_thread(partial(self.run_jobs, job))
                    return
                except RuntimeError:  # the body threads have shut down: the usual path says so
                    entry.off_loop = False
            # Its own task either way: with no execute wrapper the body runs right in it (the
            # body's task, from its first line), else the wrappers do and the body gets one.
            own_task = self._pipeline.dispatches_quietly(record)
            self.spawn(entry, self._dispatch(entry, record, False, own_task))
        else:
            entry.stage = stage
            entry.state = SETTLED

    async def _dispatch(
        self, entry: PoolEntry, record: CallRecord, inline: Inline, own_task: bool = False
    ) -> None:
        # A dispatch off the loop starts on a body thread, where no loop runs; when it ends
        # there too (it never moved onto the loop) the report need not ask asyncio whether a
        # loop runs (a raised exception, off the loop).
        thread = get_ident() if inline == OFF_LOOP else None
        try:
            stage = await self._pipeline.dispatch(record, inline=inline, own_task=own_task)
        except BaseException as exc:  # a plain body's GeneratorExit too: that call's failure
            if self._closed_under(exc):
                raise
            stage = Stage(2, failure_from_exception(exc))
        self.report(DispatchSettled(entry, stage), off_loop=thread == get_ident())

    def _dispatch_here(self, entry: PoolEntry, record: CallRecord) -> None:
        """On a body thread: the dispatch of a plain body, the body inline (none once ``stop()``
        has given up on it)."""
        if entry.state == DISPATCHING:
            self.run_here(entry, self._dispatch(entry, record, OFF_LOOP))

    def _commit(self, entry: PoolEntry, *, anywhere: bool = False) -> bool:
        """``anywhere``: the lane said ``commits_anywhere()`` for this commit just now."""
        assert entry.record is not None and entry.stage is not None
        # ``in_own_context``, inline: every call commits here.
        result = self._context.copy().run(self._pipeline.commit_now, entry.record, entry.stage)
        if result is not None:
            self._settle_commit(entry, result, anywhere)
            return True
        entry.state = COMMITTING
        self._busy = True
        self.spawn(entry, self._run_commit(entry))
        return False

    async def _run_commit(self, entry: PoolEntry) -> None:
        assert entry.record is not None and entry.stage is not None
        try:
            result = await self._pipeline.commit(entry.record, entry.stage)
        except BaseException as exc:
            if self._closed_under(exc):
                raise
            result = failure_from_exception(exc)
        self.report(CommitDone(entry, result))

    def _closed_under(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a stage coroutine being closed after its loop has closed: the
        collector taking a stage that outlived ``stop()`` (its hook swallowed every
        cancellation). Such a stage reports nothing: the closed loop would refuse the report
        (an error from the collector), and a drain on whichever thread collects it recorded a
        late, meaningless failure for a call that ``stop()`` had left without a result."""
        return isinstance(exc, GeneratorExit) and self._loop.is_closed()

    def _settle_commit(
        self, entry: PoolEntry, result: ToolExecutionResult, anywhere: bool = False
    ) -> None:
        self._entries[self._commit_cursor] = _LET_GO
        self._commit_cursor += 1
        entry.state = DONE
        if self._commit_cursor >= _COMPACT_AFTER and 2 * self._commit_cursor >= len(self._entries):
            # Committed entries are never looked at again: a long run lets go of them (and of
            # their records) as it goes, in amortized constant time, instead of at its end.
            del self._entries[: self._commit_cursor]
            self._start_cursor -= self._commit_cursor
            self._commit_cursor = 0
        if entry.exclusive:
            self._exclusive_active = False
        hold = self._lane.committed(entry, result, anywhere)
        if hold is not None:
            self._busy = True
            if self._on_loop():
                self._hold(hold)
            else:
                self._loop.call_soon_threadsafe(self._hold, hold)

    def _hold(self, hold: Awaitable[None]) -> None:
        self._hold_task = start_task(self._loop, self._release_after(hold), self._context.copy())

    async def _release_after(self, hold: Awaitable[None]) -> None:
        try:
            await hold
        except BaseException as exc:  # the lane's wait failing must not wedge the pool
            _log.warning("pool lane backpressure failed", error=repr(exc))
        self.tell(LaneReady())

    def _finish(self) -> None:
        self._finished = True
        # Every entry is committed or abandoned: nothing of them is needed any more, and the
        # lane (a code run's bridge) refers to this pool, so keeping them would leave the
        # whole turn to the cyclic collector.
        self._entries.clear()
        self._start_cursor = self._commit_cursor = 0
        self._remove_abort()
        self._unwatch()
        self._lane.finished()


# The pool starts stages only while its mailbox is draining, so a stage that reports back at
# once is queued, never handled re-entrantly.
