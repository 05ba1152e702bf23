"""The per-call pipeline: prepare (E1-E10), dispatch (D1-D5, B1-B8), post (P1-P3), finish (F1-F4).

The stages are separate coroutines so the dispatcher pool can run prepare and commit on one
sequential coordinator while only dispatches overlap; ``run`` chains them for a single call.
Nothing here raises for tool, hook, policy or data faults: every outcome is a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import Any

import msgspec
import structlog
from msgspec import UNSET

from ..actors import (
    AbortController,
    AbortSignal,
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    ExecuteCall,
    HarnessError,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    ToolNotFoundError,
    ToolOutputError,
    any_signal,
    message_of,
)
from ..actors._frozen import EMPTY_LIST
from ..actors._signal import NEVER_ABORTED
from ..registry import LosslessJsonError, compact_json, normalize_output, snapshot_json
from ..registry._execution import CallRecord, DispatchExecution, ToolRunContext
from ..registry._snapshot import SnapshotCell, ToolEntry
from ._approval import ApprovalCall, unknown_outcome
from ._chain import is_awaitable, run_chain
from ._loop import event_loop, resume
from ._results import (
    NOT_LOSSLESS_ARGS,
    NOT_LOSSLESS_RESULT,
    block_message,
    cancelled,
    concat_contexts,
    exception_type_name,
    failure,
    failure_from_exception,
    freeze_blocks,
    materialize,
    stamped,
)
from ._session import SessionLog

__all__ = [
    "CANCELLED_REASON",
    "DISPATCH",
    "FINISH",
    "POST",
    "STOPPING_REASON",
    "Pipeline",
    "Stage",
]

CANCELLED_REASON = "the awaiting task was cancelled"
"""The abort reason of a call whose awaiting task (``execute_async``, a batch) was cancelled."""

STOPPING_REASON = "the tool system is stopping"
"""The abort reason of a call that ``ToolSystem.stop()`` interrupted."""

_log = structlog.get_logger("dsh_tools.pipeline")

ALLOW = Allow()
ACCEPT = Accept()

# Stage kinds: what a prepared or dispatched call needs next.
DISPATCH = 0  # run the execute waterfall and the body
POST = 1  # run post-execute, then finish
FINISH = 2  # finish only (post-execute is bypassed)


class Stage:
    """Where a call stands between stages: the next step and the candidate result."""

    __slots__ = ("kind", "result")

    def __init__(self, kind: int, result: ToolExecutionResult | None) -> None:
        self.kind = kind
        self.result = result


_DISPATCH_STAGE = Stage(DISPATCH, None)


class _BodyCancelled(Exception):
    """The body ended by the cancellation the pipeline (or the awaiting task) asked for."""


_APPROVAL_ABANDONED = object()
"""What ``_await_approval`` returns for an approval abandoned with its call."""


def _aborted(rec: CallRecord) -> bool:
    """Whether the caller's signal aborted or the pipeline interrupted the call."""
    return rec.signal.aborted or rec.stop_reason is not None


def _abort_reason(rec: CallRecord, signal: AbortSignal | None = None) -> Any:
    if rec.signal.aborted:
        return rec.signal.reason
    if signal is not None and signal.aborted:
        return signal.reason
    return rec.stop_reason


def _replace_if_aborted(rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
    """D4 / P2: a success of a call that was aborted meanwhile becomes the cancellation result
    (keeping the success in ``settled_with``)."""
    if not result.is_error and _aborted(rec):
        code = "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"
        return cancelled(
            code, result.additional_contexts, reason=_abort_reason(rec), settled=result
        )
    return result


def _close_awaitable(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


class Pipeline:
    """Runs calls against the published registry snapshot; stateless between calls."""

    def __init__(
        self,
        cell: SnapshotCell,
        *,
        session: SessionLog,
        executor: Executor,
        approval: Callable[[], ApprovalCall | None],
        background: Callable[[Awaitable[Any], str, dict[str, Any]], None],
    ) -> None:
        self._cell = cell
        self.session = session
        self._executor = executor
        self._approval = approval
        self._background = background
        self.live: set[CallRecord] = set()  # calls inside ``run`` now (stop() interrupts them)

    def lookup(self, name: str, agent: str | None) -> ToolEntry | None:
        """The entry ``name`` resolves to for ``agent`` in the current snapshot."""
        return self._cell.current.lookup(name, agent)

    def visible_names(self, agent: str | None) -> list[str]:
        """The names ``agent`` sees now, in view order."""
        return list(self._cell.current.view(agent))

    # --- the whole call ------------------------------------------------------------------------

    async def run(
        self,
        call: ExecuteCall,
        *,
        inline: bool,
        record: bool = True,
        outer: asyncio.Task[Any] | None = None,
    ) -> Any:
        """Run one call through every stage and return its one result.

        ``inline``: the blocking ``execute`` on the caller's own thread (plain bodies inline;
        ``KeyboardInterrupt`` / ``SystemExit`` from user code propagate once the result is
        recorded). ``outer``: the caller's task (``execute_async``); when it is cancelled the
        call is aborted, settles, is recorded, and ``CancelledError`` is raised.
        """
        own = None
        if outer is not None and call.signal is NEVER_ABORTED:
            # A signal the pipeline can abort on the caller's behalf (cancellation, stop()).
            own = AbortController()
        rec, stage = self.begin(call, own)
        rec.inline = inline
        rec.thread = threading.get_ident()
        if outer is not None:
            rec.outer = outer
            rec.cancel_base = outer.cancelling()
        live = self.live
        live.add(rec)
        try:
            top = record and call.parent is None
            if top:
                self.session.record_call(
                    rec.call_id, rec.name, _compact_arguments(rec.arguments), rec.agent
                )
            if stage is None:
                stage = self.prepare_now(rec) or await self.prepare(rec)
                if outer is not None:
                    self._check_outer(rec)
            if stage.kind == DISPATCH:
                stage = await self.dispatch(rec, inline=inline)
                if outer is not None:
                    self._check_outer(rec)
            result = self.commit_now(rec, stage) or await self.commit(rec, stage)
            if top:
                self.session.record_result(rec.call_id, result, rec.agent)
        finally:
            live.discard(rec)
        if rec.reraise is not None:
            raise rec.reraise
        if outer is not None:
            self._check_outer(rec)
            if rec.outer_cancelled:
                raise asyncio.CancelledError(CANCELLED_REASON)
        return result

    # --- cancellation --------------------------------------------------------------------------

    def interrupt(self, rec: CallRecord, reason: Any) -> None:
        """Abort ``rec`` from the pipeline's side (any thread): remember ``reason``, abort the
        signal the pipeline owns for it, cancel its async body's task. The call still settles
        and commits as usual; its success becomes ``ABORTED``."""
        if rec.stop_reason is None:
            rec.stop_reason = reason
        own = rec.own
        if own is not None:
            own.abort(reason)
        task, loop = rec.body_task, rec.body_loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(_cancel_soon, rec, task)
        approval = rec.approval_task
        if approval is not None:
            with contextlib.suppress(RuntimeError):
                approval.get_loop().call_soon_threadsafe(approval.cancel)

    def interrupt_all(self, reason: Any) -> None:
        """``interrupt`` every call running through ``run`` now (``stop()``)."""
        for rec in list(self.live):
            self.interrupt(rec, reason)

    def _check_outer(self, rec: CallRecord) -> bool:
        """Whether the awaiting task has been cancelled since the call began (then interrupt
        the call once)."""
        outer = rec.outer
        if outer is None:
            return False
        if not rec.outer_cancelled and outer.cancelling() > rec.cancel_base:
            rec.outer_cancelled = True
            self.interrupt(rec, CANCELLED_REASON)
        return rec.outer_cancelled

    def _fault(self, rec: CallRecord, exc: BaseException) -> ToolExecutionFailure:
        """The result for ``exc`` escaping user code at ``rec.stage``: the cancellation result
        when it is the awaiting task's cancellation, else a failure, logged once with its
        traceback. ``KeyboardInterrupt`` / ``SystemExit`` on the caller's own thread are
        re-raised by ``run`` after the result is recorded; anywhere else they stay a failure,
        so that no user code can stop the system loop."""
        if isinstance(exc, asyncio.CancelledError) and self._check_outer(rec):
            code = "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"
            return cancelled(code, reason=CANCELLED_REASON)
        failure = failure_from_exception(exc)
        fields = _log_fields(rec)
        fields["stage"] = rec.stage
        fields["exception_type"] = failure.exception_type
        if isinstance(exc, HarnessError):
            # An expected outcome the model is told about (bad arguments, an abort, a
            # deadline): kept for whoever turns on debug logs, never noise at the default.
            _log.debug(f"{rec.stage} raised: {failure.error.message}", exc_info=exc, **fields)
        else:
            _log.warning(f"{rec.stage} raised: {failure.error.message}", exc_info=exc, **fields)
        if rec.inline and isinstance(exc, KeyboardInterrupt | SystemExit):
            rec.reraise = exc
        return failure

    # --- prepare (E1-E10) ----------------------------------------------------------------------

    def begin(
        self, call: ExecuteCall, own: AbortController | None = None, *, frozen: bool = False
    ) -> tuple[CallRecord, Stage | None]:
        """E1-E3: mint the record, capture the finalizer, snapshot the arguments.

        ``own``: a controller whose signal replaces the call's absent one (the pipeline may
        abort it); ``frozen``: the arguments are a snapshot already (taken off the loop)."""
        cell = self._cell
        signal = call.signal if own is None else own.signal
        rec = CallRecord(call.call_id, call.name, UNSET, signal, call.agent, call.parent)
        rec.own = own
        name, agent = call.name, call.agent
        rec.cell = cell
        entry = cell.current.lookup(name, agent)
        if entry is not None:
            rec.entry = entry
            rec.finalizer = entry.definition.finalize_content
        try:
            rec.arguments = call.arguments if frozen else snapshot_json(call.arguments)
        except (LosslessJsonError, RecursionError, MemoryError):
            return rec, Stage(FINISH, failure(NOT_LOSSLESS_ARGS))
        if signal.aborted:
            return rec, Stage(FINISH, cancelled("ABORTED_BEFORE_DISPATCH", reason=signal.reason))
        return rec, None

    def prepare_now(self, rec: CallRecord) -> Stage | None:
        """E4-E10 without suspending, when no pre-execute listener applies; else None."""
        if self._cell.current.hooks_for("pre_execute", rec.agent):
            return None
        try:
            return self._decide(rec, ALLOW, False)
        except GeneratorExit:  # this coroutine is being closed
            raise
        except BaseException as exc:
            return Stage(FINISH, self._fault(rec, exc))

    async def prepare(self, rec: CallRecord) -> Stage:
        """E4-E10: pre-execute, approval, guards; the next stage and any candidate result."""
        try:
            hooks = self._cell.current.hooks_for("pre_execute", rec.agent)
            decision: Any = ALLOW
            if hooks:
                rec.stage = "pre-execute"
                await event_loop()  # hooks are async code: they may await anything asyncio
                decision = await run_chain(hooks, (rec.view(),), _allow)
            approval_cancelled = False
            decision_type = type(decision)
            if decision_type is Ask:
                rec.stage = "approval"
                decision, approval_cancelled = await self._approve(rec, decision)
            elif decision_type is not Allow and decision_type is not Deny:
                raise TypeError(
                    f"tools/pre-execute returned {decision_type.__name__}; "
                    "expected Allow(), Deny(reason) or Ask(reason)"
                )
            return self._decide(rec, decision, approval_cancelled)
        except GeneratorExit:  # this coroutine is being closed
            raise
        except BaseException as exc:
            return Stage(FINISH, self._fault(rec, exc))

    def _decide(self, rec: CallRecord, decision: Any, approval_cancelled: bool) -> Stage:
        """E6-E9 once the decision is final (raises for E10)."""
        if approval_cancelled and _aborted(rec):
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH", reason=_abort_reason(rec)))
        if type(decision) is Allow:
            rec.stage = "guard"
            reason = self._evaluate_guards(rec)
        else:
            reason = decision.reason
            if type(reason) is not str:
                raise TypeError("Deny.reason must be a str")
        if reason is not None:
            return Stage(POST, failure(reason))
        if _aborted(rec):
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH", reason=_abort_reason(rec)))
        return _DISPATCH_STAGE

    async def _approve(self, rec: CallRecord, ask: Ask) -> tuple[Any, bool]:
        name = rec.name
        how = self._approval()
        if how is None:
            if ask.reason is not None:
                return Deny(ask.reason), False
            return Deny(f'tool "{name}" requires approval (not yet supported)'), False
        if rec.agent is None:
            return (
                Deny(
                    f'tool "{name}" requires approval, but the call has no agent to route it '
                    "through"
                ),
                False,
            )
        approval = how.approval
        kwargs: dict[str, Any] = {
            "agent": rec.agent,
            "tool_name": name,
            "call_id": rec.call_id,
            "signal": rec.signal,
        }
        if "arguments" in how.passes:
            kwargs["arguments"] = rec.arguments
        if ask.reason is not None and "reason" in how.passes:
            kwargs["reason"] = ask.reason
        outcome: Any
        if rec.inline and not how.is_async:
            outcome = approval.request(**kwargs)  # the caller's own thread: it may block
        else:
            await event_loop()  # approvers may wait on the loop (a future, a timer)
            if how.is_async:
                outcome = approval.request(**kwargs)
            else:
                # A plain approver may block (a console prompt): never on the shared loop.
                outcome = asyncio.wrap_future(
                    self._executor.submit(partial(approval.request, **kwargs))
                )
        while is_awaitable(outcome):
            await event_loop()
            outcome = await self._await_approval(rec, outcome)
            if outcome is _APPROVAL_ABANDONED:
                return Deny(f'approval for tool "{name}" was cancelled'), True
        if type(outcome) is str:
            if outcome == "allowed-once":
                return ALLOW, False
            if outcome == "rejected":
                return Deny(f'the user rejected tool "{name}"'), False
            if outcome == "cancelled":
                return Deny(f'approval for tool "{name}" was cancelled'), True
            if outcome == "unavailable":
                return (
                    Deny(f'tool "{name}" requires approval, but no approval channel is available'),
                    False,
                )
        raise unknown_outcome(outcome)

    async def _await_approval(self, rec: CallRecord, pending: Awaitable[Any]) -> Any:
        """What the approver's awaitable settles with, or ``_APPROVAL_ABANDONED`` when the
        pipeline abandoned the call meanwhile (``stop()`` interrupted it): the approver's task
        is cancelled then, so nothing waits on a human who will not answer. The caller's own
        abort does not cancel it: the approver sees its signal and answers (``cancelled``, or
        an answer that still lets a guard's denial win)."""
        task = asyncio.ensure_future(pending)
        rec.approval_task = task
        if rec.stop_reason is not None:
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return _APPROVAL_ABANDONED
            raise
        finally:
            rec.approval_task = None

    def _evaluate_guards(self, rec: CallRecord) -> str | None:
        view = rec.view()
        reason = self._guard_pass(None, view)
        if reason is None and rec.agent is not None:
            reason = self._guard_pass(rec.agent, view)
        return reason

    def _guard_pass(self, agent: str | None, view: Any) -> str | None:
        cell = self._cell
        table = cell.current.guard_table(agent)
        if table is None or not table.entries:
            return None
        generation = table.generation
        last = -1
        while True:
            # Re-read the table before each guard: guards may add or remove guards.
            current = cell.current.guard_table(agent)
            if current is None or current.generation != generation:
                return None
            for following in current.entries:
                if following[0] > last:
                    break
            else:
                return None
            last, fn = following
            out = fn(view)
            if out is None:
                continue
            if type(out) is str:
                return out
            if is_awaitable(out):
                _close_awaitable(out)
                raise TypeError("guards must be synchronous; a guard returned an awaitable")
            raise TypeError(
                f"a guard returned {type(out).__name__}; guards return None or a str reason"
            )

    # --- dispatch (D1-D5) ----------------------------------------------------------------------

    async def dispatch(self, rec: CallRecord, *, inline: bool) -> Stage:
        """Run the execute waterfall and the body; the candidate result for post-execute."""
        try:
            hooks = self._cell.current.hooks_for("execute", rec.agent)
            if hooks:
                rec.stage = "execute-wrapper"
                await event_loop()  # hooks are async code: they may await anything asyncio
                base = partial(self._invoke, rec, inline)
                result = await run_chain(hooks, (DispatchExecution(rec),), base)
            else:
                result = await self._invoke(rec, inline)
            rec.dispatch_signal = rec.signal
            rec.stage = "execute-wrapper"
            result = self._normalize_dispatch_result(rec, result)
            rec.contexts_closed = True
            if rec.deferred:
                result = msgspec.structs.replace(
                    result,
                    additional_contexts=concat_contexts(rec.deferred, result.additional_contexts),
                )
            return Stage(POST, _replace_if_aborted(rec, result))
        except GeneratorExit:  # this coroutine is being closed
            raise
        except BaseException as exc:
            rec.dispatch_signal = rec.signal
            rec.contexts_closed = True
            return Stage(FINISH, self._fault(rec, exc))

    async def _invoke(self, rec: CallRecord, inline: bool) -> ToolExecutionResult:
        """The base of the execute waterfall (what the last wrapper's ``next()`` runs): the
        body and its rendering, as a canonical result of this execution. Never raises."""
        wrapper_signal = rec.dispatch_signal
        caller = rec.signal
        if wrapper_signal is caller:
            fused, detach = caller, None
        else:
            fused, detach = any_signal(wrapper_signal, caller)
        try:
            if fused.aborted or rec.stop_reason is not None:
                return _canonical(
                    rec, cancelled("ABORTED_BEFORE_DISPATCH", reason=_abort_reason(rec, fused))
                )
            entry = self._cell.current.lookup(rec.name, rec.agent)
            if entry is None:
                return _canonical(rec, failure_from_exception(ToolNotFoundError(rec.name)))
            rec.body_invoked = True
            # A wrapper that supplied its own signal (a deadline, say) may abort it from a timer
            # on this very loop: a plain body then runs on a worker thread so the loop stays free
            # to fire it. Without one, nothing on this loop can abort the body's signal, so the
            # body runs inline (the hot path).
            inline = inline and fused is caller
            rec.stage = "body"
            try:
                ctx = ToolRunContext(rec, fused)
                if inline and not entry.is_async:
                    value = entry.definition.execute(rec.arguments, ctx)
                    if is_awaitable(value):
                        value = await self._run_task(rec, _awaited(value), fused)
                else:
                    value = await self._call_body(entry, rec, ctx, inline)
            except _BodyCancelled:
                return _canonical(rec, cancelled("ABORTED", reason=_abort_reason(rec, fused)))
            except GeneratorExit:  # this coroutine is being closed
                raise
            except BaseException as exc:  # the base never raises
                return _canonical(rec, self._fault(rec, exc))
            rec.stage = "render"
            try:
                value, content, meta = normalize_output(
                    entry.definition, rec.arguments, value, nested=rec.parent is not None
                )
            except GeneratorExit:  # this coroutine is being closed
                raise
            except BaseException as exc:
                return _canonical(rec, self._fault(rec, exc))
            success = ToolExecutionSuccess(value, content, meta, EMPTY_LIST, rec.call_id)
            if fused.aborted or rec.stop_reason is not None:
                success = cancelled("ABORTED", reason=_abort_reason(rec, fused), settled=success)
            return _canonical(rec, success)
        finally:
            if detach is not None:
                detach()
            rec.dispatch_signal = wrapper_signal

    async def _call_body(
        self, entry: ToolEntry, rec: CallRecord, ctx: ToolRunContext, inline: bool
    ) -> Any:
        execute = entry.definition.execute
        signal = object.__getattribute__(ctx, "_signal")  # not ctx.signal: the body reads that
        if entry.is_async:
            return await self._run_task(rec, execute(rec.arguments, ctx), signal)
        if inline:
            value = execute(rec.arguments, ctx)
        else:
            value = await self._run_in_worker(rec, execute, ctx)
        if is_awaitable(value):
            value = await self._run_task(rec, _awaited(value), signal)
        return value

    async def _run_task(
        self, rec: CallRecord, coro: Coroutine[Any, Any, Any], signal: AbortSignal
    ) -> Any:
        """Run an async body as its own task (started at once, in a copy of the context) and
        await it to the end. The task is cancelled when ``signal`` aborts or the pipeline
        interrupts the call; a cancellation of the awaiting task reaches it the same way. A
        body that ends by such a cancellation raises ``_BodyCancelled``; one that raised
        ``CancelledError`` of its own accord raises it (a tool failure)."""
        loop = await event_loop()  # the body's task needs one; it starts right here
        outcome = _capture(coro)
        context = contextvars.copy_context()
        try:
            first = context.run(outcome.send, None)
        except StopIteration as done:
            ok, value = done.value
        else:
            task = loop.create_task(resume(outcome, first), context=context)
            rec.body_task, rec.body_loop, rec.body_signal = task, loop, signal
            remove = signal.add_callback(partial(_cancel_from_any_thread, loop, rec, task))
            if rec.stop_reason is not None:
                _cancel_body(rec, task)
            try:
                while True:
                    try:
                        # Shielded: a cancellation of the awaiting task interrupts the call
                        # (aborting the signal the pipeline owns, cancelling the body by the
                        # rule of _cancel_body) instead of reaching the body unannounced.
                        ok, value = await asyncio.shield(task)
                        break
                    except asyncio.CancelledError:
                        if task.done():
                            ok, value = task.result()
                            break
                        if not self._check_outer(rec):
                            _cancel_body(rec, task)
            finally:
                remove()
                rec.body_task = None
        self._check_outer(rec)
        if ok:
            return value
        if isinstance(value, GeneratorExit):  # raised by the body: not our coroutine closing
            raise RuntimeError("the tool body raised GeneratorExit") from value
        if isinstance(value, asyncio.CancelledError) and (rec.cancel_sent or rec.outer_cancelled):
            raise _BodyCancelled
        raise value

    async def _run_in_worker(self, rec: CallRecord, execute: Any, ctx: ToolRunContext) -> Any:
        """Run a plain body on a worker thread; a cancellation of the awaiting task aborts the
        call and then waits for the body to return (it is never abandoned)."""
        await event_loop()  # to wait for the worker
        work = self._executor.submit(execute, rec.arguments, ctx)
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            if work.done() and not work.cancelled():
                raise  # the body raised CancelledError itself: its own failure
        self._check_outer(rec)
        while not work.done():
            try:
                await asyncio.wrap_future(work)
            except asyncio.CancelledError:
                self._check_outer(rec)
        if work.cancelled():  # cancelled before a worker thread picked it up
            raise _BodyCancelled
        return work.result()

    def _normalize_dispatch_result(self, rec: CallRecord, result: Any) -> ToolExecutionResult:
        if rec.is_canonical(result):
            return result  # type: ignore[no-any-return]
        result_type = type(result)
        if result_type is ToolExecutionFailure:
            failure: ToolExecutionFailure = msgspec.structs.replace(result)
            return failure
        if result_type is ToolExecutionSuccess:
            entry = self._cell.current.lookup(rec.name, rec.agent)
            if entry is None:
                raise ToolNotFoundError(rec.name)
            value, content, meta = normalize_output(
                entry.definition, rec.arguments, result.value, nested=rec.parent is not None
            )
            return ToolExecutionSuccess(value, content, meta, result.additional_contexts)
        raise TypeError(
            f"tools/execute wrapper returned {result_type.__name__}; "
            "expected ToolExecutionSuccess or ToolExecutionFailure"
        )

    # --- post and finish (P1-P3, F1-F4) --------------------------------------------------------

    def commit_now(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult | None:
        """Post and finish without suspending, when no post-execute listener applies."""
        result = stage.result
        assert result is not None
        if stage.kind == POST:
            if self._cell.current.hooks_for("post_execute", rec.agent):
                return None
            result = _replace_if_aborted(rec, result)
        return self.finish(rec, result)

    async def commit(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult:
        """Post-execute (when the path has it), then finish: materialize, finalize, publish."""
        result = stage.result
        assert result is not None
        if stage.kind == POST:
            result = await self._post(rec, stamped(result, rec.call_id))
        return self.finish(rec, result)

    async def _post(self, rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
        try:
            hooks = self._cell.current.hooks_for("post_execute", rec.agent)
            if hooks:
                rec.stage = "post-execute"
                await event_loop()  # hooks are async code: they may await anything asyncio
                decision = await run_chain(hooks, (rec.view(), result), _accept)
                result = self._apply_post(rec, result, decision)
            if rec.outer is not None:
                self._check_outer(rec)
            return _replace_if_aborted(rec, result)
        except GeneratorExit:  # this coroutine is being closed
            raise
        except BaseException as exc:
            failure = self._fault(rec, exc)
            if failure.settled_with is None and failure.abort_reason is not None:
                # the awaiting task was cancelled during post-execute: keep the candidate
                failure = msgspec.structs.replace(failure, settled_with=result)
            return failure

    def _apply_post(
        self, rec: CallRecord, result: ToolExecutionResult, decision: Any
    ) -> ToolExecutionResult:
        decision_type = type(decision)
        if decision_type is Block:
            return ToolExecutionFailure(
                ToolFailure(block_message(decision.feedback)),
                decision.feedback,
                UNSET,
                decision.additional_contexts,
            )
        if decision_type is not Accept:
            raise TypeError(
                f"tools/post-execute returned {decision_type.__name__}; "
                "expected Accept(...) or Block(...)"
            )
        contexts = concat_contexts(result.additional_contexts, decision.additional_contexts)
        has_content = decision.content is not UNSET
        has_value = decision.value is not UNSET
        if has_content and has_value:
            raise ValueError(
                "tools/post-execute accept decision cannot replace both value and content"
            )
        if has_value:
            if result.is_error:
                raise ValueError("tools/post-execute cannot replace the value of a failed result")
            entry = self._cell.current.lookup(rec.name, rec.agent)
            if entry is None:
                raise ToolNotFoundError(rec.name)
            try:
                value, content, meta = normalize_output(
                    entry.definition, rec.arguments, decision.value, nested=rec.parent is not None
                )
            except ToolOutputError as exc:
                return msgspec.structs.replace(
                    failure_from_exception(exc), additional_contexts=contexts
                )
            return ToolExecutionSuccess(value, content, meta, contexts)
        if has_content:
            return msgspec.structs.replace(
                result, content=decision.content, additional_contexts=contexts
            )
        if contexts is result.additional_contexts:
            return result
        return msgspec.structs.replace(result, additional_contexts=contexts)

    def finish(self, rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
        """F1-F4: materialize, run the captured finalizer, seal, publish to observers.

        Every result leaves here carrying its call's ``call_id``."""
        result = materialize(result, rec.call_id)
        finalizer = rec.finalizer
        if finalizer is not None:
            rec.stage = "finalizer"
            try:
                content = finalizer(rec.view(), result)
                if is_awaitable(content):
                    _close_awaitable(content)
                    raise TypeError(
                        "finalize_content must be synchronous; it returned an awaitable"
                    )
                if content is not None:
                    try:
                        frozen = freeze_blocks(content)
                    except (LosslessJsonError, RecursionError) as exc:
                        raise ValueError(NOT_LOSSLESS_RESULT) from exc
                    result = msgspec.structs.replace(result, content=frozen)
            except GeneratorExit:  # this coroutine is being closed
                raise
            except BaseException as exc:
                result = self._fault(rec, exc)
            result = stamped(result, rec.call_id)
        rec.sealed = True
        observers = self._cell.current.hooks_for("result", rec.agent)
        if observers:
            self._notify(rec, result, observers)
        return result

    def _notify(
        self, rec: CallRecord, result: ToolExecutionResult, observers: Sequence[Any]
    ) -> None:
        view = rec.view()
        label = f'tool "{rec.name}" ({rec.call_id}): tools/result observer failed: '
        fields = _log_fields(rec)
        fields["stage"] = "observer"
        for observer in observers:
            try:
                out = observer(view, result)
                if is_awaitable(out):
                    self._background(out, label, fields)
            except BaseException as exc:  # SystemExit included: the loop must survive
                _log.warning(
                    label + message_of(exc),
                    exc_info=exc,
                    exception_type=exception_type_name(exc),
                    **fields,
                )
                if rec.inline and isinstance(exc, KeyboardInterrupt | SystemExit):
                    rec.reraise = exc


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _capture(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """``(True, value)`` or ``(False, exception)``: the body's task itself never fails, so no
    ``SystemExit`` or ``KeyboardInterrupt`` from a body can escape into the event loop."""
    try:
        return True, await coro
    except BaseException as exc:
        return False, exc


async def _allow() -> Allow:
    return ALLOW


async def _accept() -> Accept:
    return ACCEPT


def _canonical(rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
    """``result`` stamped with the call's id and remembered as the base's own."""
    result = stamped(result, rec.call_id)
    rec.canonical.append(result)
    rec.stage = "execute-wrapper"
    return result


def _cancel_body(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    """Cancel an aborted call's async body, unless it looks at its signal and that signal has
    aborted: such a body learns of the abort itself and settles its own way (raises its own
    error, returns what it has, drains what it started)."""
    if task.done():
        return
    signal = rec.body_signal
    if rec.signal_read and signal is not None and signal.aborted:
        return
    rec.cancel_sent = True
    task.cancel()


def _cancel_soon(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    # One more pass of the loop first: a body awaiting its signal is woken by a callback queued
    # just before this one, and it may settle on its own (raise its own error, return what it
    # has) before the cancellation would reach it.
    task.get_loop().call_soon(_cancel_body, rec, task)


def _cancel_from_any_thread(
    loop: asyncio.AbstractEventLoop, rec: CallRecord, task: asyncio.Task[Any], reason: Any
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed
        loop.call_soon_threadsafe(_cancel_soon, rec, task)


def _log_fields(rec: CallRecord) -> dict[str, Any]:
    """What every log line about a call carries (the token's id, never the token)."""
    return {
        "call_id": rec.call_id,
        "tool": rec.name,
        "token": rec.token.id,
        "parent": rec.parent.id if rec.parent is not None else None,
    }


def _compact_arguments(arguments: Any) -> str | None:
    if arguments is UNSET:
        return None
    try:
        return msgspec.json.encode(arguments).decode()
    except (RecursionError, TypeError, ValueError):
        return compact_json(arguments)  # deeper than msgspec goes
