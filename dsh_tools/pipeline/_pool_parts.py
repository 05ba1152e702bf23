"""What a ``DispatcherPoolActor`` holds and talks through: its entries (one per call, and where
each stands), the message that queues several calls at once, and the two seams it drives (the
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
    "PoolEntry",
    "PoolLane",
    "PoolPipeline",
    "SubmitCalls",
]

QUEUED, PREPARING, DISPATCHING, SETTLED, COMMITTING, DONE = range(6)
"""Where a pool entry stands, in the order it goes through."""


class SubmitCalls(msgspec.Struct, frozen=True):
    """Queue several calls (pool entries, in order) behind the ones already submitted: one
    message for a whole batch, so that its first calls start at once."""

    entries: tuple[Any, ...]


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
        # Completes the entry the first time the pool would classify or start it (a batch
        # reads the call's argument text there: the first calls start before the last is read).
        self.reader: Callable[[PoolEntry], None] | None = None
        self.refused: ToolExecutionResult | None = None  # the call's result before it starts
        self.record: CallRecord | None = None
        self.stage: Stage | None = None
        self.state = QUEUED
        self.exclusive = False
        self.off_loop = False  # its dispatch was handed to a body thread
        self.result: ToolExecutionResult | None = None
        self.task: asyncio.Task[None] | None = None  # the stage running now, held until it ends


class PoolLane(Protocol):
    """What starts, commits and abandonments mean outside the pool."""

    def started(self, entry: PoolEntry) -> None:
        """``entry`` is about to run its prepare stage."""

    def commits_anywhere(self) -> bool:
        """Whether ``committed`` may run on a worker thread now (asked only of a lane that may be
        told from any thread)."""

    def committed(self, entry: PoolEntry, result: ToolExecutionResult) -> Awaitable[None] | None:
        """``entry`` has its final result (in submission order). An awaitable return holds the
        coordinator (no start, no commit) until it settles: backpressure from the lane."""

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

    def on_body_thread(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a thread plain bodies run on."""

    async def dispatch(self, rec: CallRecord, *, inline: Inline) -> Stage:
        """Execute wrappers and the body: the candidate result."""

    def commits_quietly(self, rec: CallRecord | None, stage: Stage | None) -> bool:
        """Whether committing the call now runs no user code."""

    def commit_now(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult | None:
        """Post and finish without suspending (None: ``commit``)."""

    async def commit(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult:
        """Post-execute hooks, then finish: the call's one result."""

    def interrupt(self, rec: CallRecord, reason: Any) -> None:
        """Abort the call from the pool's side (it still settles and commits)."""
