"""What a ``DispatcherPoolActor`` holds and talks through: the messages that queue calls (each a
frozen ``PoolRequest``), its entries (one per call, made by the pool from its request, and
where each stands; only the pool's own code changes them), and the two seams it drives (the
lane: what starts and commits mean outside the pool; the pipeline: the stages of a call)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from ..actors import ExecuteCall, ToolExecutionResult
from ..registry._execution import CallRecord
from ..registry._snapshot import ToolEntry
from ._core import Stage
from ._dispatch import Inline

__all__ = [
    "COMMITTING",
    "DISPATCHING",
    "DONE",
    "PREPARING",
    "QUEUED",
    "SETTLED",
    "AbortPool",
    "BodyGivenUp",
    "ClosePool",
    "CommitDone",
    "DispatchSettled",
    "HooksGivenUp",
    "LaneReady",
    "PoolEntry",
    "PoolLane",
    "PoolOverdue",
    "PoolPipeline",
    "PoolRequest",
    "PrepareDone",
    "SubmitCall",
    "SubmitCalls",
]

QUEUED, PREPARING, DISPATCHING, SETTLED, COMMITTING, DONE = range(6)
"""Where a pool entry stands, in the order it goes through."""


class PoolRequest(msgspec.Struct, frozen=True):
    """One call submitted to a pool.

    ``index``: its place in submission order (0-based); ``call``: the call as it will run,
    unless ``reader`` is set: then its arguments are the model's text and ``reader``, run by
    the pool when it first comes to the call, reads them into the entry (a batch's first calls
    so start before its last text is read); ``payload``: the submitter's own token, handed back
    to the lane with the entry; ``frozen``: the arguments are a snapshot already;
    ``refused``: the call's result decided before it starts."""

    index: int
    call: ExecuteCall
    payload: Any = None
    frozen: bool = False
    refused: ToolExecutionResult | None = None
    reader: Callable[[PoolEntry], None] | None = None


class SubmitCall(msgspec.Struct, frozen=True):
    """Queue one call behind the ones already submitted."""

    request: PoolRequest


class SubmitCalls(msgspec.Struct, frozen=True):
    """Queue several calls (in order) behind the ones already submitted: one message for a
    whole batch, so that its first calls start at once."""

    requests: tuple[PoolRequest, ...]


class PoolEntry:
    """One call in a pool: its request, its record once started, where it stands."""

    __slots__ = (
        "call",
        "exclusive",
        "frozen",
        "index",
        "off_loop",
        "payload",
        "reader",
        "record",
        "refused",
        "stage",
        "state",
        "task",
    )

    def __init__(self, request: PoolRequest) -> None:
        self.index = request.index
        self.call = request.call
        self.payload = request.payload
        self.frozen = request.frozen  # the arguments are a snapshot already
        # Completes the entry the first time the pool would classify or start it.
        self.reader = request.reader
        self.refused = request.refused  # the call's result before it starts
        self.record: CallRecord | None = None
        self.stage: Stage | None = None
        self.state = QUEUED
        self.exclusive = False
        self.off_loop = False  # its dispatch was handed to a body thread
        self.task: asyncio.Task[None] | None = None  # the stage running now, held until it ends


class ClosePool(msgspec.Struct, frozen=True):
    """No more submissions: the pool finishes once every entry is committed or abandoned."""


class AbortPool(msgspec.Struct, frozen=True):
    """The pool's signal aborted: stop starting, drain, commit the started, abandon the rest.
    ``anyway``: cancel the started calls' async bodies even where they watch their signal
    (a batch whose awaiting task was cancelled, once such a body had its time to settle)."""

    reason: object
    anyway: bool = False


class PoolOverdue(msgspec.Struct, frozen=True):
    """``stop()``'s grace is over: settle each started call's plain body running on a body
    thread without it (what it reports later is dropped) and cancel the hook chains still
    waiting once more."""


class PrepareDone(msgspec.Struct, frozen=True):
    """The pool to itself: ``entry``'s prepare stage settled with ``stage`` (dispatch next,
    or a candidate result)."""

    entry: PoolEntry
    stage: Stage


class BodyGivenUp(msgspec.Struct, frozen=True):
    """The pool to itself: ``entry``'s async body, running as its dispatch task, was cancelled
    outright a while ago (``stop()``'s grace over) and may have gone on: its call settles
    without it, unless it has settled since."""

    entry: PoolEntry


class HooksGivenUp(msgspec.Struct, frozen=True):
    """The pool to itself: the hook chain ``entry``'s stage task waits on was cancelled once
    more a while ago (``stop()``'s grace over) and may have gone on: its call settles without
    it, unless it has settled since."""

    entry: PoolEntry


class DispatchSettled(msgspec.Struct, frozen=True):
    """The pool to itself: ``entry``'s dispatch (wrappers and body) settled with ``stage``;
    its slot is free."""

    entry: PoolEntry
    stage: Stage


class CommitDone(msgspec.Struct, frozen=True):
    """The pool to itself: ``entry``'s post-execute and finish stages produced its final
    ``result``."""

    entry: PoolEntry
    result: ToolExecutionResult


class LaneReady(msgspec.Struct, frozen=True):
    """The lane finished the work a commit handed it (e.g. a log backlog drained); the pool
    may go on."""


class PoolLane(Protocol):
    """What starts, commits and abandonments mean outside the pool."""

    def started(self, entry: PoolEntry) -> None:
        """``entry`` is about to run its prepare stage."""

    def commits_anywhere(self) -> bool:
        """Whether ``committed`` may run on a worker thread now (asked only of a lane that may be
        told from any thread)."""

    def committed(
        self, entry: PoolEntry, result: ToolExecutionResult, anywhere: bool = False
    ) -> Awaitable[None] | None:
        """``entry`` has its final result (in submission order). An awaitable return holds the
        coordinator (no start, no commit) until it settles: backpressure from the lane.
        ``anywhere``: ``commits_anywhere()`` answered True for this very commit, in this drain,
        and no user code has run since."""

    def abandoned(self, entry: PoolEntry) -> None:
        """``entry`` never started because the pool aborted."""

    def finished(self) -> None:
        """Every submitted entry is committed or abandoned and the pool is closed."""


class PoolPipeline(Protocol):
    """What the pool asks of the pipeline (``Pipeline`` is one): the stages of a call, run one
    at a time, and what they would run."""

    def lookup(self, name: str, agent: str | None) -> ToolEntry | None:
        """The entry ``name`` resolves to for ``agent`` now."""

    def starts_quietly(self, call: ExecuteCall) -> bool:
        """Whether starting ``call`` now runs no user code (no guard or pre-execute hook)."""

    def start_now(
        self, call: ExecuteCall, *, frozen: bool, refused: ToolExecutionResult | None = None
    ) -> tuple[CallRecord, Stage | None]:
        """The call's record and the stage it reached without suspending (None: ``prepare``)."""

    async def prepare(self, rec: CallRecord) -> Stage:
        """Pre-execute hooks, approval, guards: the stage the call reached."""

    def plain_dispatch(self, rec: CallRecord) -> bool:
        """Whether the call's dispatch is nothing but a plain body."""

    def dispatches_quietly(self, rec: CallRecord) -> bool:
        """Whether the call's dispatch runs no user code outside the body (no execute
        wrapper applies)."""

    def on_body_thread(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a thread plain bodies run on."""

    def watch_pool(self, overdue: Callable[[], None]) -> Callable[[], None]:
        """Have ``overdue()`` called once ``stop()``'s grace is over; returns the remover."""

    def hooks_overdue(
        self, rec: CallRecord, give_up: Callable[[asyncio.Task[Any]], object]
    ) -> bool:
        """Cancel the hook chain the call still waits on once more, and have ``give_up(task)``
        called a while later (for one that starts waiting later too); whether it waits."""

    def abandoned_stage(self, rec: CallRecord) -> Stage:
        """What a call settles with when ``stop()`` gave up on its plain body."""

    def given_up_stage(self, rec: CallRecord) -> Stage:
        """What a call settles with when ``stop()`` gave up on its hook chain."""

    def hooks_gone_on(self, rec: CallRecord, task: asyncio.Task[Any] | None) -> bool:
        """Whether the call's hook chain still waits in ``task`` after its last cancellation
        (then it is given up, and logged so)."""

    def hold_given_up(self, task: asyncio.Task[Any]) -> None:
        """Hold ``task``, which runs what ``stop()`` gave up, until it ends."""

    def give_up_body(self, rec: CallRecord, task: asyncio.Task[Any]) -> None:
        """Stop waiting for the call's async body ``task``, which went on after it was
        cancelled outright: it runs on in the background, what it returns dropped."""

    async def dispatch(self, rec: CallRecord, *, inline: Inline, own_task: bool = False) -> Stage:
        """Execute wrappers and the body: the candidate result. ``own_task``: the coroutine is
        its task's whole work (then an async body without wrappers runs right in it)."""

    def commits_quietly(self, rec: CallRecord | None, stage: Stage | None) -> bool:
        """Whether committing the call now runs no user code."""

    def commit_now(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult | None:
        """Post and finish without suspending (None: ``commit``)."""

    async def commit(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult:
        """Post-execute hooks, then finish: the call's one result."""

    def interrupt(self, rec: CallRecord, reason: Any, anyway: bool = False) -> None:
        """Abort the call from the pool's side (it still settles and commits); ``anyway``:
        cancel its async body even if it watches its signal."""
