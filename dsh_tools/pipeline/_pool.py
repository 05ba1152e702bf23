"""Batches: one model turn's ``ExecuteBatch`` run through a ``DispatcherPoolActor`` per batch,
its argument texts read (off the loop when long), its session events and context FIFO."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import msgspec

from ..actors import (
    AbortController,
    AbortSignal,
    BatchOutcome,
    ExecuteBatch,
    ExecuteCall,
    FrozenList,
    ToolArgsError,
    ToolExecutionResult,
)
from ..actors._signal import NEVER_ABORTED
from ..registry import LosslessJsonError, snapshot_json
from ..registry._json_text import ArgumentsTextError, read_arguments
from ._dispatcher import DispatcherPoolActor
from ._loop import running_loop
from ._pipeline import Pipeline
from ._pool_parts import AbortPool, ClosePool, PoolEntry, PoolRequest, SubmitCalls
from ._results import cancelled, failure_from_exception

__all__ = ["BatchRunner"]


class _BatchLane:
    """A batch: session events per call, results in model order, the context FIFO. Its methods
    may be called from any thread (the pool's worker threads commit too)."""

    def __init__(
        self, runner: BatchRunner, batch: ExecuteBatch, size: int, signals: tuple[AbortSignal, ...]
    ) -> None:
        self.runner = runner
        self.signals = signals  # where an abort's reason is found (the batch's, then ours)
        self.agent = batch.agent
        self.session = runner.pipeline.session
        self.results: list[ToolExecutionResult | None] = [None] * size
        self.contexts: list[Any] = []
        self.drained = False  # the FIFO was read for the outcome: contexts join it no more
        self.lock = threading.Lock()
        self.done: asyncio.Future[BatchOutcome] = asyncio.get_running_loop().create_future()

    def started(self, entry: PoolEntry) -> None:
        self.session.record_call(entry.call.call_id, entry.call.name, entry.payload, self.agent)

    def commits_anywhere(self) -> bool:
        return True

    def committed(
        self, entry: PoolEntry, result: ToolExecutionResult, anywhere: bool = False
    ) -> None:
        self.session.record_result(entry.call.call_id, result, self.agent)
        self.results[entry.index] = result
        if result.additional_contexts:
            with self.lock:
                self.contexts.extend(result.additional_contexts)

    def abandoned(self, entry: PoolEntry) -> None:
        reason = next((s.reason for s in self.signals if s.aborted), None)
        result = cancelled("ABORTED_BEFORE_DISPATCH", call_id=entry.call.call_id, reason=reason)
        self.session.record_call(entry.call.call_id, entry.call.name, entry.payload, self.agent)
        self.session.record_result(entry.call.call_id, result, self.agent)
        self.results[entry.index] = result

    def inject(self, context: Any) -> bool:
        """Add an injected context to the FIFO; False once the batch has drained it (the
        caller then records the context itself, after the batch's)."""
        with self.lock:
            if self.drained:
                return False
            self.contexts.append(context)
            return True

    def finished(self) -> None:
        self.runner._deactivate(self)
        with self.lock:
            # An injection that chose this lane before it was deactivated may still come:
            # it finds the FIFO drained and records its context after these.
            self.drained = True
            contexts = FrozenList(self.contexts)
            for context in contexts:
                self.session.record_context(context, self.agent)
        results = tuple(r for r in self.results if r is not None)
        outcome = BatchOutcome(results, contexts)
        loop = self.done.get_loop()
        if running_loop() is loop:
            _settle(self.done, outcome)
        else:  # the pool finished on a worker thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: stop() failed it
                loop.call_soon_threadsafe(_settle, self.done, outcome)


class BatchRunner:
    """Runs ``ExecuteBatch`` requests, one ``DispatcherPoolActor`` per batch, on the system
    loop; batches of different agents run concurrently."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        max_parallel: int,
        stopping: AbortSignal,
        executor: Executor,
    ) -> None:
        self.pipeline = pipeline
        self._max_parallel = max_parallel  # a batch's max_parallel when it gives none
        self._stopping = stopping  # the system's stop() aborts every batch
        self._executor = executor  # long argument texts are read there, off the loop
        self._active: dict[str | None, list[_BatchLane]] = {}
        self._lock = threading.Lock()

    async def run(
        self,
        batch: ExecuteBatch,
        control: AbortController | None = None,
        forced: AbortSignal = NEVER_ABORTED,
    ) -> BatchOutcome:
        """Run ``batch`` to completion (call on the system loop).

        ``control`` aborts the batch from the harness's side (a cancelled awaiting task);
        ``stop()`` aborts it too. When the batch has no signal of its own, its calls get the
        signal of ``control``, so that even plain bodies can see such an abort. ``forced``
        aborts it too, and cancels the started calls' async bodies even where they watch
        their signal (the awaiting task's cancellation, once they had their time)."""
        if control is None:
            control = AbortController()
        max_parallel = batch.max_parallel or self._max_parallel
        own = batch.signal is NEVER_ABORTED
        signal = control.signal if own else batch.signal
        lane = _BatchLane(self, batch, len(batch.calls), (signal, control.signal))
        loop = asyncio.get_running_loop()
        remove_stop = self._stopping.add_callback(control.abort)
        texts = [c.arguments for c in batch.calls]
        read: list[tuple[Any, bool, str | None]] | None = None
        if sum(len(t) for t in texts) > _READ_ON_LOOP_CHARS:
            # Long texts are read on a worker thread, so that the loop other batches share
            # stays responsive; short ones as the pool first looks at each call, so that the
            # first calls start while the rest are still unread.
            read = await loop.run_in_executor(
                self._executor, lambda: [_read(t, gradual=True) for t in texts]
            )
        with self._lock:
            self._active.setdefault(batch.agent, []).append(lane)
        pool = DispatcherPoolActor(
            self.pipeline,
            loop=loop,
            signal=signal,
            max_parallel=max_parallel,
            lane=lane,
            lane_any_thread=True,
        )
        remove_control: Callable[[], None] = _nothing
        if not own:
            remove_control = control.signal.add_callback(lambda r: pool.tell(AbortPool(r)))
        remove_forced = forced.add_callback(lambda r: pool.tell(AbortPool(r, anyway=True)))
        try:
            requests: list[PoolRequest] = []
            for index, tool_call in enumerate(batch.calls):
                text = texts[index]
                call = ExecuteCall(
                    call_id=tool_call.call_id,
                    name=tool_call.name,
                    arguments=text,  # until it is read
                    signal=signal,
                    agent=batch.agent,
                )
                if read is None:
                    requests.append(PoolRequest(index, call, text, reader=_read_entry))
                else:
                    requests.append(_read_request(index, call, text, read[index]))
            pool.tell(SubmitCalls(tuple(requests)))
            pool.tell(ClosePool())
            return await lane.done
        finally:
            remove_forced()
            remove_control()
            remove_stop()

    def _deactivate(self, lane: _BatchLane) -> None:
        with self._lock:
            lanes = self._active.get(lane.agent)
            if lanes is not None and lane in lanes:
                lanes.remove(lane)
                if not lanes:
                    del self._active[lane.agent]

    def inject(self, agent: str | None, context: Any) -> None:
        """Accept a context for ``agent``: into its active batch FIFO, else the session."""
        frozen = snapshot_json(context, "context")
        with self._lock:
            lanes = self._active.get(agent)
            lane = lanes[-1] if lanes else None
        if lane is None or not lane.inject(frozen):
            self.pipeline.session.record_context(frozen, agent)


_READ_ON_LOOP_CHARS = 16 * 2**10
"""Batches whose argument texts are longer in total are read on a worker thread."""


def _nothing() -> None:
    return None


def _settle(done: asyncio.Future[BatchOutcome], outcome: BatchOutcome) -> None:
    if not done.done():
        done.set_result(outcome)


def _read_entry(entry: PoolEntry) -> None:
    try:
        read = _read(entry.payload)
    except Exception as exc:  # never run the call on its unread text
        entry.refused = failure_from_exception(exc)
        return
    _complete(entry, read)


def _complete(entry: PoolEntry, read: tuple[Any, bool, str | None]) -> None:
    """Give ``entry``'s call the arguments read from its text (or refuse it)."""
    entry.call, entry.frozen, entry.refused = _applied(entry.call, read)


def _read_request(
    index: int, call: ExecuteCall, text: str, read: tuple[Any, bool, str | None]
) -> PoolRequest:
    """The request for a call whose argument text was read already."""
    call, frozen, refused = _applied(call, read)
    return PoolRequest(index, call, text, frozen=frozen, refused=refused)


def _applied(
    call: ExecuteCall, read: tuple[Any, bool, str | None]
) -> tuple[ExecuteCall, bool, ToolExecutionResult | None]:
    """``call`` with the arguments ``_read`` gave, whether they are a snapshot, and the
    call's refusal when its text was refused."""
    value, frozen, refusal = read
    refused = None if refusal is None else failure_from_exception(ToolArgsError([refusal]))
    return msgspec.structs.replace(call, arguments=value), frozen, refused


def _read(text: str, gradual: bool = False) -> tuple[Any, bool, str | None]:
    """``(value, frozen, refusal)`` for one argument text: the snapshot (``frozen``), or
    ``(text, True, why)`` when the text is refused (not JSON, too long or deep, or a value
    that is not lossless JSON), or the parsed value when the snapshot ran out of resources
    (the pipeline's own snapshot then decides)."""
    try:
        value = read_arguments(text, gradual=gradual and len(text) > _READ_ON_LOOP_CHARS)
    except ArgumentsTextError as exc:
        return text, True, str(exc)  # never snapshotted: the call fails before it starts
    try:
        return snapshot_json(value, "arguments"), True, None
    except LosslessJsonError as exc:
        # Valid JSON text the registry cannot hold exactly (-0.0, 1e400 read as inf, an
        # escaped lone surrogate): the model is told which value, like any argument error.
        path = exc.path
        if len(path) > 120:  # thousands of levels deep: the start and the end say enough
            path = f"{path[:60]}...{path[-40:]}"
        return text, True, f"arguments are not lossless JSON: {path} is {exc.type_name}"
    except (ValueError, RecursionError, MemoryError):
        return value, False, None
