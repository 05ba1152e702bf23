"""``CodeRunBridgeActor``: one ``run_code`` execution, from program start to settlement.

It owns the run-scoped abort controller (which follows the outer signal and fires when the run
settles for any reason), the binding functions the program calls, the run's
``DispatcherPoolActor`` (the same pool rules as a batch: submission order, at most
``max_parallel_sub_calls`` bodies at once, exclusive calls drain and block), the dispatch
events, the log-shaping tasks and the drain. The tool-agnostic half (the worker process, frames,
budgets and the output ledger) is the code runtime's.

It is an actor by confinement: its state (the counter, the sub-calls' awaitables, the log
tasks, the outer call's contexts) is touched only on the one event loop the run executes on, so
it needs no lock. Its pool is a ``DispatcherPoolActor`` whose protocol is messages; this object is
that pool's lane. The pool lets the worker thread that settled a plain body commit it and start
the next call itself (as a batch's pool does), so the lane's methods may be called on such a
thread: there they record session events (the log is thread-safe, and recording at once keeps
its order) and hand the rest to the loop in commit order (``LoopHandoff``). A commit that runs a
dispatch-log listener or the spill arm stays on the loop.

Every started sub-call records ``tool/code-dispatch-start`` and, once committed and shaped by the
``tools/code-dispatch-log`` waterfall, ``tool/code-dispatch``, with or without an agent on the
outer call (the session log is the system's, and top-level calls without an agent are recorded
too); the events carry the outer call's agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from msgspec import UNSET

from ..actors import (
    AbortController,
    AbortSignal,
    CodeRunFailedError,
    ExecuteCall,
    FrozenDict,
    ToolExecutionResult,
)
from ..actors._config import DEFAULT_MAX_SUB_CALLS
from ..actors._logging import get_logger
from ..actors._signal import follow
from ..pipeline import (
    ClosePool,
    DispatcherPoolActor,
    Pipeline,
    PoolEntry,
    PoolRequest,
    SpillPolicy,
    SubmitCall,
    message_of,
)
from ..pipeline._core import HOOK_WIND_DOWN_S
from ..pipeline._loop import running_loop
from ..pipeline._pool_parts import AbortPool, PoolOverdue
from ..registry import RUN_CODE, LosslessJsonError, snapshot_json, thaw
from ..registry._execution import ToolRunContext
from ..registry._hooks import CodeDispatchLog
from ..registry._lossless import INT_MAX, INT_MIN
from ._assembly import sdk_tool
from ._dispatch_log import logged_arguments, shaped_content
from ._handoff import LoopHandoff
from ._run_calls import AnsweredFuture
from ._sdk import SdkTool, render_sdk_declarations, render_sdk_help
from ._seam import BindingNamespace, CodeRunRequest, CodeRuntime, ErrorClassSpec

__all__ = [
    "TOOLS_NAMESPACE",
    "TOOL_CALL_ERROR",
    "CodeDispatchLog",
    "CodeRunBridgeActor",
    "ToolCallRejected",
    "binding_names",
]

_log = get_logger("dsh_tools.codebridge")

_ABSENT: Any = object()


TOOLS_NAMESPACE = "tools"
"""The global a program calls its tools through."""
TOOL_CALL_ERROR = ErrorClassSpec(name="ToolCallError", member_attr="tool_name")
"""What a program sees a failed tool call raise."""


def binding_names(pipeline: Pipeline, agent: str | None) -> list[str]:
    """The tools a program run for ``agent`` may call: every tool it sees but ``run_code``,
    sorted."""
    return sorted(name for name in pipeline.visible_names(agent) if name != RUN_CODE)


class ToolCallRejected(Exception):
    """A binding call the bridge refused or whose sub-call failed; the program sees
    ``ToolCallError(tool_name, message)`` with this message."""


class _SubCall:
    """One sub-call as the bridge tracks it. ``fields`` are the fields both its dispatch
    events start with (``tool/code-dispatch-start`` records them as they are): ``arguments`` is
    what they record of its arguments and, when that is not the whole arguments, their JSON
    size is ``arguments_bytes``."""

    __slots__ = ("fields", "future", "name", "number", "sub_call_id")

    def __init__(
        self,
        name: str,
        number: int,
        sub_call_id: str,
        fields: FrozenDict,
        future: asyncio.Future[Any],
    ) -> None:
        self.name = name
        self.number = number
        self.sub_call_id = sub_call_id
        self.fields = fields
        self.future = future


class CodeRunBridgeActor:
    """Runs one program against the calling scope's tools; see the module docstring."""

    def __init__(
        self,
        *,
        pipeline: Pipeline,
        runtime: CodeRuntime,
        outer: ToolRunContext,
        max_parallel: int,
        dispatch_log_hooks: Callable[[], tuple[Callable[..., Any], ...]],
        spill: SpillPolicy | None = None,
        max_calls: int = DEFAULT_MAX_SUB_CALLS,
    ) -> None:
        self._pipeline = pipeline
        self._runtime = runtime
        self._outer = outer
        self._agent: str | None = outer.agent
        self._parent_call_id: str = outer.call_id
        self._outer_token = outer.token  # every sub-call's parent, read once
        self._max_parallel = max_parallel
        self._max_calls = max_calls  # ``ToolsConfig.max_sub_calls``
        self._dispatch_log_hooks = dispatch_log_hooks
        self._spill = spill
        self._controller = AbortController()
        self._counter = 0
        self._log_tasks: set[asyncio.Task[None]] = set()
        self._finished: asyncio.Future[None] | None = None
        self._pool: DispatcherPoolActor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: LoopHandoff | None = None
        self._names: list[str] = []  # the run's bindings, by tool name
        self._described: dict[str | None, str | None] = {}  # ``_describe``'s texts

    @property
    def signal(self) -> AbortSignal:
        """The run-scoped signal every sub-call receives."""
        return self._controller.signal

    async def run(self, program: str) -> dict[str, Any]:
        """Run ``program``; return the canonical ``{logs, result?}`` or raise
        ``CodeRunFailedError`` once every started sub-call has settled."""
        loop = asyncio.get_running_loop()
        outer_signal = self._outer.signal
        unsubscribe = follow(self._controller, outer_signal)
        self._finished = loop.create_future()
        self._loop = loop
        self._handoff = LoopHandoff(loop)
        names = self._names = binding_names(self._pipeline, self._agent)
        request = CodeRunRequest(
            program=program,
            bindings=[
                BindingNamespace(
                    global_name=TOOLS_NAMESPACE,
                    functions={name: self._binding(name, snapshot=False) for name in names},
                    error_class=TOOL_CALL_ERROR,
                    snapshot_functions={name: self._binding(name, snapshot=True) for name in names},
                    describe=self._describe,
                )
            ],
            signal=self._controller.signal,
        )
        interrupted = False
        cancelled: asyncio.CancelledError | None = None
        try:
            outcome = await self._runtime.run(request)
        except asyncio.CancelledError:  # the pipeline interrupted the call (stop(), say)
            interrupted = True
            raise
        finally:
            self._controller.abort("run_code settled")
            if self._pool is not None:
                self._pool.tell(ClosePool())
                cancelled = await self._pool_finished()
                self._pool = None  # the pool's lane is this object: reference counting frees both
            try:
                await self._drain_logs(interrupted or cancelled is not None)
            finally:
                unsubscribe()
            if cancelled is not None:
                raise cancelled
        if outcome.error is not None:
            raise CodeRunFailedError(outcome.error.kind, outcome.error.message, outcome.logs)
        value: dict[str, Any] = {"logs": list(outcome.logs)}
        if outcome.value is not UNSET:
            value["result"] = outcome.value
        return value

    async def _pool_finished(self) -> asyncio.CancelledError | None:
        """Wait for the sub-calls' pool to finish (every sub-call committed or abandoned). A
        cancellation of this wait (the ``run_code`` body cancelled while its sub-calls drain)
        interrupts the started sub-calls, cancelling their async bodies even where they watch
        their signal, and waits ``HOOK_WIND_DOWN_S`` more for them, or until cancelled again
        (a plain body is given up then all the same, below); that cancellation is returned,
        for the caller to raise once the run has wound down.
        Left at the first one, a sub-call whose body watches its signal and never ended ran
        on after its run had settled, its ``tool/code-dispatch`` recorded after the run's
        result, if ever. A plain body still running then cannot be cancelled: it is given up
        as ``stop()`` gives it up once its grace is over (left to its thread, what it returns
        dropped), so that its sub-call settles ``ABORTED`` before the run does."""
        finished = self._finished
        pool = self._pool
        assert finished is not None and pool is not None
        cancelled: asyncio.CancelledError | None = None
        try:
            await asyncio.shield(finished)
        except asyncio.CancelledError as exc:
            if finished.done():
                return exc
            cancelled = exc
            pool.tell(AbortPool(self._controller.signal.reason, anyway=True))
            # Cancelled again: no more waiting, but a plain body still running is given up
            # now all the same. Left, its sub-call settled after the run, its
            # tool/code-dispatch recorded after the run's tool/result.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([finished], timeout=HOOK_WIND_DOWN_S)
            if not finished.done():  # a plain body ignores its signal: give it up
                pool.tell(PoolOverdue())
                with contextlib.suppress(asyncio.CancelledError):  # cancelled again: go now
                    await asyncio.wait([finished], timeout=HOOK_WIND_DOWN_S)
        return cancelled

    async def _drain_logs(self, interrupted: bool) -> None:
        """Wait for the dispatch-log tasks (listeners and the spill arm are user code that may
        await anything). Once the ``run_code`` call is aborted, ``interrupted``, or this wait
        is cancelled, what is still pending gets ``HOOK_WIND_DOWN_S`` more, as an interrupted
        call's hooks do, and is then cancelled, again each ``HOOK_WIND_DOWN_S`` while it goes
        on (a task that took the listener's cancellation may wait in the spill store next):
        each task records its ``tool/code-dispatch`` before the call settles. A cancellation
        of this wait is raised once the tasks are done."""
        signal = self._outer.signal
        cancelled: asyncio.CancelledError | None = None
        winding_down = False
        while self._log_tasks:
            tasks = set(self._log_tasks)
            try:
                if not (winding_down or interrupted or signal.aborted):
                    aborted = asyncio.ensure_future(signal)
                    try:
                        await asyncio.wait([*tasks, aborted], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        aborted.cancel()
                    continue
                winding_down = True
                _done, pending = await asyncio.wait(tasks, timeout=HOOK_WIND_DOWN_S)
                for task in pending:
                    task.cancel()
            except asyncio.CancelledError as exc:
                if cancelled is not None:  # cancelled again (stop()'s grace is over): go now
                    for task in self._log_tasks:
                        task.cancel()
                    raise
                cancelled, winding_down = exc, True
        if cancelled is not None:
            raise cancelled

    # --- bindings ------------------------------------------------------------------------------

    def _binding(self, name: str, *, snapshot: bool) -> Callable[..., asyncio.Future[Any]]:
        """The binding of tool ``name``; ``snapshot``: it takes arguments that are a snapshot
        already (see ``BindingNamespace.snapshot_functions``)."""

        def call_tool(arguments: Any = _ABSENT) -> asyncio.Future[Any]:
            try:
                return self._submit(name, arguments, snapshot)
            except ToolCallRejected as exc:  # refused before submission: a failed awaitable
                refused: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                _reject(refused, exc)
                return refused

        call_tool.__name__ = name if name.isidentifier() else "call_tool"
        return call_tool

    def _describe(self, name: str | None) -> str | None:
        """What ``help()`` in the program shows of tool ``name`` (``None``: of every tool the
        program may call): its declarations as the SDK gives them, from the registry as it was
        when first asked (a binding whose tool is gone has none). Kept for the run: a program
        asking again and again would otherwise have the host render the SDK each time, on
        the loop every call of the system shares, at no cost to its own budgets. Only the
        answers about the run's bindings are kept: a forged request may name anything, as
        large as a call's arguments, and a name the host kept would stay in its memory for
        the run, beside every budget."""
        if name is not None and name not in self._names:
            return None
        described = self._described
        if name not in described:
            described[name] = self._render_help(name)
        return described[name]

    def _render_help(self, name: str | None) -> str | None:
        pipeline = self._pipeline
        agent = self._agent
        tools: list[SdkTool] = []
        for known in self._names if name is None else [name]:
            entry = pipeline.lookup(known, agent)
            if entry is not None:
                tools.append(sdk_tool(known, entry.definition))
        if name is None:
            return render_sdk_declarations(tools)
        return render_sdk_help(tools[0]) if tools else None

    def _over(self) -> str:
        return message_of(self._controller.signal.reason)

    def _submit(self, name: str, arguments: Any, snapshot: bool) -> asyncio.Future[Any]:
        """Submit one sub-call; its future settles when the pool commits (or abandons) it.
        A call refused before it is submitted raises ``ToolCallRejected``. ``snapshot``: the
        arguments are a snapshot already, which the tool may have as they are."""
        if self._controller.signal.aborted:
            raise ToolCallRejected(f"run_code run is over ({self._over()}); {name} not dispatched")
        if arguments is _ABSENT:
            raise ToolCallRejected(
                "tool arguments must be lossless JSON (call the tool with an arguments "
                "object, e.g. `{}`)"
            )
        if self._counter >= self._max_calls:
            # Before any copy of the arguments: past the cap a call costs the host only its
            # frame and this answer, as little as the worker spends making it.
            raise ToolCallRejected(
                f"run_code run made {self._max_calls} tool calls, the most one run may make "
                f"(max_sub_calls); {name} not dispatched"
            )
        try:
            # The tool and the log get distinct copies (the log keeps a preview of large
            # ones); the pool hands the tool's snapshot to the pipeline as it is.
            dispatched = arguments if snapshot else snapshot_json(arguments, "arguments")
            logged, logged_bytes = logged_arguments(dispatched)
        except LosslessJsonError as exc:
            raise ToolCallRejected(f"tool arguments must be lossless JSON: {exc}") from None
        self._counter += 1
        assert self._loop is not None
        pool = self._pool
        if pool is None:
            # Made at the first sub-call: a program that calls no tool costs no pool. Calls
            # come only on the run's loop and only while the run's signal stands, so no call
            # can make a second pool once the run has closed this one.
            pool = self._pool = DispatcherPoolActor(
                self._pipeline,
                loop=self._loop,
                signal=self._controller.signal,
                max_parallel=self._max_parallel,
                lane=self,
                lane_any_thread=True,
            )
        parent_call_id = self._parent_call_id
        sub_call_id = f"{parent_call_id}:code:{self._counter}"
        sub = _SubCall(
            name,
            self._counter,
            sub_call_id,
            # The fields both dispatch events start with.
            FrozenDict(
                parent_call_id=parent_call_id, sub_call_id=sub_call_id, name=name, arguments=logged
            )
            if logged_bytes is None
            else FrozenDict(
                parent_call_id=parent_call_id,
                sub_call_id=sub_call_id,
                name=name,
                arguments=logged,
                arguments_bytes=logged_bytes,
            ),
            # A subprocess run answers the program as the future settles (see the class).
            AnsweredFuture(loop=self._loop),
        )
        call = ExecuteCall(
            call_id=sub_call_id,
            name=name,
            arguments=dispatched,
            signal=self._controller.signal,
            agent=self._agent,
            parent=self._outer_token,
        )
        # Bindings are called on the run's loop, the pool's.
        pool.tell_here(SubmitCall(PoolRequest(sub.number - 1, call, sub, frozen=True)))
        return sub.future

    # --- the pool lane -------------------------------------------------------------------------

    def started(self, entry: PoolEntry) -> None:
        """Lane: a sub-call starts (before its pre-execute): ``tool/code-dispatch-start``."""
        sub: _SubCall = entry.payload
        # The fields are a FrozenDict of their own, which the event may hold as they are.
        self._pipeline.session.append("tool/code-dispatch-start", sub.fields, self._agent)

    def commits_anywhere(self) -> bool:
        """Lane: whether a worker thread may commit now (no dispatch-log shaping to start)."""
        return self._spill is None and not self._dispatch_log_hooks()

    def committed(
        self, entry: PoolEntry, result: ToolExecutionResult, anywhere: bool = False
    ) -> Awaitable[None] | None:
        """Lane: a sub-call's final result, in submission order. Defer its contexts onto the
        outer call, deliver its outcome to the program, then log it (``tool/code-dispatch``,
        through the dispatch-log waterfall and spill arm when there are any). ``anywhere``:
        ``commits_anywhere()`` just found nothing to shape the log with."""
        sub: _SubCall = entry.payload
        assert self._handoff is not None
        pool = self._pool
        # The pool calls this in its drain, which only the loop or a worker thread without a
        # loop runs: the pool knows which, without asking asyncio (which costs a raised
        # exception off the loop).
        on_loop = not pool.on_worker() if pool is not None else running_loop() is self._loop
        # Whether the run is over is read now, at the commit, wherever the delivery runs.
        over = self._controller.signal.aborted
        self._handoff.run(
            partial(self._deliver, sub, result, over, later=over and entry.off_loop), on_loop
        )
        hooks = () if anywhere else self._dispatch_log_hooks()  # known empty when ``anywhere``
        if not hooks and self._spill is None:
            # Nothing shapes the log: append now (what the side task would do, without a task).
            self._pipeline.session.append(
                "tool/code-dispatch",
                FrozenDict(sub.fields, is_error=result.is_error, content=result.content),
                self._agent,
            )
            return None
        if not on_loop:
            # A listener came in after the pool let this thread commit: the loop starts the
            # task (without backpressure for this one call).
            self._handoff.run(partial(self._start_log, entry, result, hooks), False)
            return None
        self._start_log(entry, result, hooks)
        if len(self._log_tasks) > self._max_parallel:
            # Backpressure: no further start or commit while more log tasks
            # are pending than the run may have sub-calls in flight.
            return self._log_backlog_drained()
        return None

    def _deliver(
        self, sub: _SubCall, result: ToolExecutionResult, over: bool, *, later: bool
    ) -> None:
        """On the loop: the committed sub-call's contexts and its outcome for the program."""
        for context in result.additional_contexts:
            self._outer.defer_context(context)
        if sub.future.done():
            return
        if over:
            if later:
                # A body that ran on a body thread may have aborted the run itself: the runtime's
                # abort handling was woken from that thread before the body returned, and needs
                # a few loop passes to act. The rejection waits one pass more, so that the run
                # settles as aborted rather than failing with the program's reaction to it.
                assert self._loop is not None
                self._loop.call_soon(self._discard, sub)
            else:
                self._discard(sub)
        elif result.is_error:
            _reject(sub.future, ToolCallRejected(result.error.message))
        else:
            value = result.value
            # ``thaw``'s own fast path, inline: an integer in range, the usual value, as it is.
            if type(value) is not int or not INT_MIN <= value <= INT_MAX:
                value = thaw(value)
            sub.future.set_result(value)

    def _discard(self, sub: _SubCall, what: str = "result discarded") -> None:
        """Reject ``sub`` because the run is over: its result discarded, or the call
        abandoned before it started."""
        if not sub.future.done():
            _reject(
                sub.future,
                ToolCallRejected(f"run_code run is over ({self._over()}); {sub.name} {what}"),
            )

    def _start_log(
        self, entry: PoolEntry, result: ToolExecutionResult, hooks: tuple[Callable[..., Any], ...]
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._log_settle(entry, result, hooks))
        self._log_tasks.add(task)
        task.add_done_callback(self._log_tasks.discard)

    async def _log_backlog_drained(self) -> None:
        while len(self._log_tasks) > self._max_parallel:
            await asyncio.wait(list(self._log_tasks), return_when=asyncio.FIRST_COMPLETED)

    def abandoned(self, entry: PoolEntry) -> None:
        """Lane: a queued sub-call never started because the run settled; nothing is logged."""
        assert self._handoff is not None
        self._handoff.run(partial(self._discard, entry.payload, "tool call abandoned"))

    def finished(self) -> None:
        """Lane: every submitted sub-call is committed or abandoned; the drain may go on."""
        assert self._handoff is not None
        self._handoff.run(self._finish)

    def _finish(self) -> None:
        if self._finished is not None and not self._finished.done():
            self._finished.set_result(None)

    async def _log_settle(
        self,
        entry: PoolEntry,
        result: ToolExecutionResult,
        hooks: tuple[Callable[..., Any], ...],
    ) -> None:
        sub: _SubCall = entry.payload
        content: Any = result.content
        if hooks:
            log = CodeDispatchLog(
                exec=self._outer,
                agent=self._agent,
                sub_call_id=sub.sub_call_id,
                name=sub.name,
                is_error=result.is_error,
                content=result.content,
            )
            try:
                content = await shaped_content(hooks, log)
            except BaseException as exc:  # SystemExit too: user code never stops the loop
                _log.warning(
                    f"tools: code-dispatch-log listener failed for {sub.name}: "
                    f"{_failure_text(exc)}; logging the unshaped content",
                    call_id=sub.sub_call_id,
                    tool=sub.name,
                    agent=self._agent,
                    token=_token_id(entry),
                    parent=self._outer.token.id,
                )
                content = result.content
        spill = self._spill
        if spill is not None:
            try:
                content = await spill.bound(
                    content,
                    spill.dispatch_source(sub.name, sub.sub_call_id),
                    {
                        "agent": self._agent,
                        "token": _token_id(entry),
                        "parent": self._outer.token.id,
                    },
                )
            except BaseException as exc:  # the store is user code; the settle event must land
                _log.warning(
                    f"tools: dispatch-log spill failed for {sub.name}: {_failure_text(exc)}; "
                    "logging the full content",
                    call_id=sub.sub_call_id,
                    tool=sub.name,
                    agent=self._agent,
                    token=_token_id(entry),
                    parent=self._outer.token.id,
                )
        self._append_settle(sub, result, content)

    def _append_settle(self, sub: _SubCall, result: ToolExecutionResult, content: Any) -> None:
        self._pipeline.session.append(
            "tool/code-dispatch",
            FrozenDict(sub.fields, is_error=result.is_error, content=content),
            self._agent,
        )


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled (the run_code call was aborted or stopped while it waited)"
    return message_of(exc) or type(exc).__name__


def _token_id(entry: PoolEntry) -> int | None:
    return entry.record.token.id if entry.record is not None else None


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    future.set_exception(error)
    # Retrieved at once: a program may never await the call, and its failure is no noise.
    future.exception()
