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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol

import structlog

from ..actors import (
    AbortSignal,
    ExecuteCall,
    ToolExecutionResult,
)
from ..actors._loop_actor import LoopActor
from ..actors._protocol import (
    AbortPool,
    ClosePool,
    CommitDone,
    DispatchSettled,
    LaneReady,
    PrepareDone,
    SubmitCall,
)
from ..registry import classify
from ..registry._execution import CallRecord
from ._loop import start_task
from ._pipeline import DISPATCH, FINISH, Pipeline, Stage
from ._results import failure_from_exception

_log = structlog.get_logger("dsh_tools.pool")

__all__ = ["DispatcherPoolActor", "PoolEntry", "PoolLane"]

_QUEUED, _PREPARING, _DISPATCHING, _SETTLED, _COMMITTING, _DONE = range(6)


class PoolEntry:
    """One call in a pool: its request, its record once started, where it stands."""

    __slots__ = (
        "call",
        "exclusive",
        "frozen",
        "index",
        "payload",
        "record",
        "refused",
        "result",
        "stage",
        "state",
        "task",
    )

    def __init__(
        self, index: int, call: ExecuteCall, payload: Any = None, *, frozen: bool = False
    ) -> None:
        self.index = index
        self.call = call
        self.payload = payload
        self.frozen = frozen  # the arguments are a snapshot already
        self.refused: ToolExecutionResult | None = None  # the call's result before it starts
        self.record: CallRecord | None = None
        self.stage: Stage | None = None
        self.state = _QUEUED
        self.exclusive = False
        self.result: ToolExecutionResult | None = None
        self.task: asyncio.Task[None] | None = None  # the stage running now, held until it ends


class PoolLane(Protocol):
    """What starts, commits and abandonments mean outside the pool."""

    def started(self, entry: PoolEntry) -> None:
        """``entry`` is about to run its prepare stage."""

    def committed(self, entry: PoolEntry, result: ToolExecutionResult) -> Awaitable[None] | None:
        """``entry`` has its final result (in submission order). An awaitable return holds the
        coordinator (no start, no commit) until it settles: backpressure from the lane."""

    def abandoned(self, entry: PoolEntry) -> None:
        """``entry`` never started because the pool aborted."""

    def finished(self) -> None:
        """Every submitted entry is committed or abandoned and the pool is closed."""


class DispatcherPoolActor(LoopActor):
    """Schedules submitted calls under the pool rules; see the module docstring."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        loop: asyncio.AbstractEventLoop,
        signal: AbortSignal,
        max_parallel: int,
        lane: PoolLane,
    ) -> None:
        super().__init__(loop)
        self._pipeline = pipeline
        self._signal = signal
        self._max_parallel = max_parallel
        self._lane = lane
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

    @property
    def in_flight(self) -> int:
        """How many dispatches are running now."""
        return self._in_flight

    # --- messages ------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        kind = type(message)
        if kind is SubmitCall:
            self._entries.append(message.entry)
        elif kind is PrepareDone:
            self._busy = False
            message.entry.task = None
            self._settle_prepare(message.entry, message.stage)
        elif kind is DispatchSettled:
            self._in_flight -= 1
            entry = message.entry
            entry.task = None
            entry.stage = message.stage
            entry.state = _SETTLED
        elif kind is CommitDone:
            self._busy = False
            message.entry.task = None
            self._settle_commit(message.entry, message.result)
        elif kind is ClosePool:
            self._closed = True
        elif kind is LaneReady:
            self._busy = False
        elif kind is AbortPool:
            self._interrupt_started(message.reason)
        else:
            raise TypeError(f"DispatcherPoolActor cannot handle {kind.__name__}")
        self._pump()

    def _interrupt_started(self, reason: Any) -> None:
        """The pool aborted: every started, uncommitted call is interrupted (its async body's
        task cancelled, its success committed as ``ABORTED``), whatever signal it holds."""
        self.aborted = True
        for entry in self._entries[self._commit_cursor : self._start_cursor]:
            if entry.record is not None and entry.state != _DONE:
                self._pipeline.interrupt(entry.record, reason)

    def on_failure(self, exc: BaseException) -> None:
        self._pump()

    # --- scheduling ----------------------------------------------------------------------------

    def _pump(self) -> None:
        # Synchronous stages (no hooks to await) settle inside _step; keep stepping until the
        # pool must wait for a message. A loop, not recursion: a pool may be very wide.
        while self._step():
            pass

    def _step(self) -> bool:
        """Advance by one action; True when another step may make progress at once."""
        if self._busy or self._finished:
            return False
        entries = self._entries
        if self._commit_cursor < self._start_cursor:
            head = entries[self._commit_cursor]
            if head.state == _SETTLED:
                return self._commit(head)
        if not self.aborted and self._signal.aborted:
            self.aborted = True
        if self.aborted:
            if self._in_flight == 0 and self._commit_cursor == self._start_cursor:
                while self._start_cursor < len(entries):
                    entry = entries[self._start_cursor]
                    self._start_cursor += 1
                    self._commit_cursor += 1
                    entry.state = _DONE
                    self._lane.abandoned(entry)
                if self._closed:
                    self._finish()
            return False
        if self._start_cursor < len(entries) and not self._exclusive_active:
            drained = self._in_flight == 0 and self._commit_cursor == self._start_cursor
            if self._group_closed and drained:
                self._group_closed = False  # the group has ended: classify the head afresh
            # With every slot taken nothing can start (an exclusive call needs an empty pool),
            # so the head is classified only when it might start: a classifier validates the
            # arguments and runs user code.
            if not self._group_closed and self._in_flight < self._max_parallel:
                head = entries[self._start_cursor]
                if self._classify(head):
                    return self._start(head, exclusive=False)
                if drained:
                    return self._start(head, exclusive=True)
                # Not concurrency-safe beside running calls: replenishment stops here until
                # the group has drained, whatever a later classification would say.
                self._group_closed = True
        if self._closed and self._commit_cursor == len(entries):
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
        record, stage = self._pipeline.begin(entry.call, frozen=entry.frozen)
        if entry.refused is not None and stage is None:
            stage = Stage(FINISH, entry.refused)
        entry.record = record
        if stage is not None:
            entry.stage = stage
            entry.state = _SETTLED
            return True
        stage = self._pipeline.prepare_now(record)
        if stage is not None:
            self._settle_prepare(entry, stage)
            return True
        entry.state = _PREPARING
        self._busy = True
        entry.task = start_task(self._loop, self._prepare(entry, record))
        return False

    async def _prepare(self, entry: PoolEntry, record: CallRecord) -> None:
        try:
            stage = await self._pipeline.prepare(record)
        except BaseException as exc:  # the pipeline does not raise; stay total regardless
            stage = Stage(2, failure_from_exception(exc))
        self.tell(PrepareDone(entry, stage))

    def _settle_prepare(self, entry: PoolEntry, stage: Stage) -> None:
        if stage.kind == DISPATCH:
            entry.state = _DISPATCHING
            self._in_flight += 1
            assert entry.record is not None
            entry.task = start_task(self._loop, self._dispatch(entry, entry.record))
        else:
            entry.stage = stage
            entry.state = _SETTLED

    async def _dispatch(self, entry: PoolEntry, record: CallRecord) -> None:
        try:
            stage = await self._pipeline.dispatch(record, inline=False)
        except BaseException as exc:
            stage = Stage(2, failure_from_exception(exc))
        self.tell(DispatchSettled(entry, stage))

    def _commit(self, entry: PoolEntry) -> bool:
        assert entry.record is not None and entry.stage is not None
        result = self._pipeline.commit_now(entry.record, entry.stage)
        if result is not None:
            self._settle_commit(entry, result)
            return True
        entry.state = _COMMITTING
        self._busy = True
        entry.task = start_task(self._loop, self._run_commit(entry))
        return False

    async def _run_commit(self, entry: PoolEntry) -> None:
        assert entry.record is not None and entry.stage is not None
        try:
            result = await self._pipeline.commit(entry.record, entry.stage)
        except BaseException as exc:
            result = failure_from_exception(exc)
        self.tell(CommitDone(entry, result))

    def _settle_commit(self, entry: PoolEntry, result: ToolExecutionResult) -> None:
        self._commit_cursor += 1
        entry.state = _DONE
        entry.result = result
        if entry.exclusive:
            self._exclusive_active = False
        hold = self._lane.committed(entry, result)
        if hold is not None:
            self._busy = True
            self._hold_task = start_task(self._loop, self._release_after(hold))

    async def _release_after(self, hold: Awaitable[None]) -> None:
        try:
            await hold
        except BaseException as exc:  # the lane's wait failing must not wedge the pool
            _log.warning("pool lane backpressure failed", error=repr(exc))
        self.tell(LaneReady())

    def _finish(self) -> None:
        self._finished = True
        self._remove_abort()
        self._lane.finished()


# The pool starts stages with ``start_task`` only while its mailbox is draining, so a stage
# that reports back at once is queued, never handled re-entrantly.
