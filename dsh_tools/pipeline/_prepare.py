"""The prepare stages: the call's record and argument snapshot, pre-execute hooks,
approval, guards; what the call needs next."""

from __future__ import annotations

import asyncio
import contextvars
from asyncio import current_task
from collections.abc import Awaitable
from functools import partial
from inspect import CORO_CREATED, getcoroutinestate
from types import CoroutineType
from typing import Any

from msgspec import UNSET

from ..actors import (
    NEVER_ABORTED,
    AbortController,
    Allow,
    Ask,
    Deny,
    ExecuteCall,
    ToolExecutionResult,
    message_of,
    without_stop_iteration,
)
from ..actors._messages import check_reason
from ..registry import LosslessJsonError, snapshot_json
from ..registry._execution import CallRecord
from ._approval import unknown_outcome
from ._chain import answered_by, callable_name, is_awaitable, rest_of_chain
from ._core import (
    DISPATCH_STAGE,
    FINISH,
    INTERRUPTED_REASON,
    POST,
    PipelineCore,
    Stage,
    abort_reason,
    call_aborted,
    cancellation_behind,
    close_awaitable,
    closing_call,
    log,
    log_fields,
    owned_generator_exit,
    take_back_cancels,
    wind_down,
)
from ._loop import event_loop, interrupts_deferred, interrupts_held
from ._results import NOT_LOSSLESS_ARGS, cancelled, failure, lossless_detail, refusal

__all__ = ["ALLOW", "PrepareStages"]

ALLOW = Allow()

_APPROVAL_ABANDONED = object()
"""What ``_await_approval`` returns for an approval abandoned with its call."""


class PrepareStages(PipelineCore):
    """The prepare stages of a call (see ``Pipeline``)."""

    def begin(
        self, call: ExecuteCall, own: AbortController | None = None, *, frozen: bool = False
    ) -> tuple[CallRecord, Stage | None]:
        """Mint the record, capture the finalizer, snapshot the arguments.

        ``own``: a controller whose signal replaces the call's absent one (the pipeline may
        abort it); ``frozen``: the arguments are a snapshot already (taken off the loop)."""
        cell = self._cell
        signal = call.signal if own is None else own.signal
        rec = CallRecord(call.call_id, call.name, UNSET, signal, call.agent, call.parent)
        rec.own = own
        name, agent = call.name, call.agent
        rec.cell = cell
        current = rec.snapshot = cell.current
        rec.hooks = current.hooks_of(agent)
        entry = current.lookup(name, agent)
        if entry is not None:
            rec.entry = entry
            rec.finalizer = entry.definition.finalize_content
        try:
            rec.arguments = call.arguments if frozen else snapshot_json(call.arguments, "arguments")
        except (LosslessJsonError, RecursionError, MemoryError) as exc:
            return rec, Stage(FINISH, failure(f"{NOT_LOSSLESS_ARGS}: {lossless_detail(exc)}"))
        if signal is not NEVER_ABORTED and signal.aborted:  # see ``call_aborted``
            return rec, Stage(FINISH, cancelled("ABORTED_BEFORE_DISPATCH", reason=signal.reason))
        if entry is not None and self.announcers:
            announce = self.announcers.get(name)
            if announce is not None:
                # Whole or not at all: what it returns owns what it took (a pre-forked worker).
                try:
                    with interrupts_held():
                        rec.announced = announce(rec.arguments, agent)
                except BaseException:
                    # A Ctrl-C held meanwhile ends the call here, before it began: nothing
                    # would ever give back what it took. (A Ctrl-C more is dropped meanwhile.)
                    with interrupts_deferred():
                        self.release_announced(rec)
                    raise
        return rec, None

    def start_now(
        self, call: ExecuteCall, *, frozen: bool, refused: ToolExecutionResult | None = None
    ) -> tuple[CallRecord, Stage | None]:
        """The prepare stages as far as they go without suspending: the record, and the stage
        the call has reached (None: ``prepare`` must run, a pre-execute hook applies).
        ``refused``: the call's result decided before it started (its arguments could not be
        read)."""
        rec, stage = self.begin(call, frozen=frozen)
        if stage is None:
            stage = Stage(FINISH, refused) if refused is not None else self.prepare_now(rec)
        return rec, stage

    def starts_quietly(self, call: ExecuteCall) -> bool:
        """Whether preparing ``call`` now runs no user code: no pre-execute hook and no guard
        applies."""
        current = self._cell.current
        agent = call.agent
        if current.hooks_of(agent).pre_execute:
            return False
        # ``guard_table`` of both layers, inline: a pool asks this before every call it
        # starts on a worker thread.
        if current.global_layer.guards.entries:
            return False
        return (
            agent is None
            or (layer := current.scopes.get(agent)) is None
            or not (layer.guards.entries)
        )

    def prepare_now(self, rec: CallRecord) -> Stage | None:
        """Pre-execute, approval and guards without suspending, when no pre-execute listener
        applies; else None."""
        current = self._cell.current
        agent = rec.agent
        if rec.hooks_under(current).pre_execute:
            return None
        try:
            if not current.global_layer.guards.entries and (
                agent is None
                or (layer := current.scopes.get(agent)) is None
                or not layer.guards.entries
            ):
                # No guard applies either (the usual call): what ``_decide`` comes to then,
                # without its calls (``call_aborted`` inline).
                rec.stage = "guard"
                signal = rec.signal
                if (signal is not NEVER_ABORTED and signal.aborted) or rec.stop_reason is not None:
                    return Stage(
                        POST, cancelled("ABORTED_BEFORE_DISPATCH", reason=abort_reason(rec))
                    )
                return DISPATCH_STAGE
            return self._decide(rec, ALLOW, False)
        except BaseException as exc:  # a plain method: no coroutine of it is ever closed
            return Stage(FINISH, self._fault(rec, exc))

    async def prepare(self, rec: CallRecord, *, looped: bool = False) -> Stage:
        """Pre-execute, approval, guards: the next stage and any candidate result.
        ``looped``: the caller runs on an event loop already."""
        try:
            hooks = rec.hooks_under(self._cell.current).pre_execute
            decision: Any = ALLOW
            if hooks:
                rec.stage = "pre-execute"
                if not looped:  # hooks are async code: they may await anything asyncio
                    loop = await event_loop()
                    rec.hook_task = current_task(loop)  # interrupt() cancels it
                view = rec.view()
                then = _allow if len(hooks) == 1 else rest_of_chain(hooks, (view,), _allow)
                decision = hooks[0](view, then)
                if type(decision) is CoroutineType or is_awaitable(decision):
                    # Inline, not calls: the four-hook path pays for every call on it.
                    rec.hooks_waiting = True  # interrupt() cancels the task from now on
                    if rec.stop_reason is not None:
                        wind_down(rec)
                    decision = await decision
                    # A hook may return next() unawaited; a pass-through answer is ALLOW.
                    while decision is not ALLOW and is_awaitable(decision):
                        decision = await decision
                    rec.hooks_waiting = False
                    if rec.own_cancels:  # a hook swallowed the interrupt's cancellation
                        take_back_cancels(rec)
                if decision is ALLOW:  # what a pass-through chain returns
                    return self._decide(rec, ALLOW, False)
            approval_cancelled = False
            decision_type = type(decision)
            if decision_type is Ask:
                check_reason(decision)  # before an approver is asked with it
                rec.stage = "approval"
                decision, approval_cancelled = await self._approve(rec, decision)
            elif decision_type is not Allow and decision_type is not Deny:
                raise TypeError(
                    f"tools/pre-execute returned {decision_type.__name__}; "
                    "expected Allow(), Deny(reason) or Ask(reason)" + answered_by(hooks, decision)
                )
            return self._decide(rec, decision, approval_cancelled)
        except BaseException as exc:
            if closing_call(rec, exc):
                raise
            return Stage(FINISH, self._fault(rec, exc))

    def _decide(self, rec: CallRecord, decision: Any, approval_cancelled: bool) -> Stage:
        """Guards once the pre-execute decision is final (raises ``TypeError`` for a ``Deny``
        whose reason is not a ``str``)."""
        if approval_cancelled and call_aborted(rec):
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH", reason=abort_reason(rec)))
        if type(decision) is Allow:
            rec.stage = "guard"
            reason = self._evaluate_guards(rec)
        else:
            check_reason(decision)
            reason = decision.reason
        if reason is not None:
            # ``rec.stage`` says who refused: "guard" (set above), "approval" (an ``Ask`` not
            # granted) or "pre-execute" (a hook's ``Deny``).
            return Stage(POST, refusal(reason, rec.stage))
        if call_aborted(rec):
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH", reason=abort_reason(rec)))
        return DISPATCH_STAGE

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
        signal = rec.signal
        own = None
        if signal is NEVER_ABORTED and rec.own is None:
            # A blocking execute's call without a signal of its own: the approver (a console
            # prompt on a worker thread) could never learn that a Ctrl-C or stop() abandoned
            # the question, and held its thread past both. It gets a signal that aborts as
            # the call is interrupted (``interrupt`` aborts ``rec.own``) or its task cancelled
            # (below); the call's own stays the never-aborted one.
            own = rec.own = AbortController()
            signal = own.signal
            if rec.stop_reason is not None:  # interrupted before ``own`` was there to abort
                own.abort(rec.stop_reason)
        kwargs: dict[str, Any] = {
            "agent": rec.agent,
            "tool_name": name,
            "call_id": rec.call_id,
            "signal": signal,
        }
        if "arguments" in how.passes:
            kwargs["arguments"] = rec.arguments
        if ask.reason is not None and "reason" in how.passes:
            kwargs["reason"] = ask.reason
        outcome: Any
        try:
            await event_loop()  # approvers may wait on the loop (a future, a timer)
            if how.is_async:
                outcome = approval.request(**kwargs)
            else:
                # A plain approver may block (a console prompt): never on a loop, nor on the
                # thread of a blocking execute, whose call stop() must still be able to settle.
                # It runs in a copy of the call's context, as asyncio.to_thread runs a function.
                outcome = asyncio.wrap_future(
                    self._executor.submit(
                        contextvars.copy_context().run,
                        partial(without_stop_iteration, "the approver", approval.request, **kwargs),
                    )
                )
            while is_awaitable(outcome):
                await event_loop()
                outcome = await self._await_approval(rec, outcome)
                if outcome is _APPROVAL_ABANDONED:
                    return Deny(f'approval for tool "{name}" was cancelled'), True
        except BaseException:
            # The blocking caller's Ctrl-C cancelled the call's task, or was raised in it as
            # the approver started: withdraw the question.
            if own is not None:
                own.abort(rec.stop_reason if rec.stop_reason is not None else INTERRUPTED_REASON)
            raise
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
        task = asyncio.ensure_future(_approval_outcome(pending))
        rec.approval_task = task
        if rec.stop_reason is not None:
            task.cancel()
        try:
            settled, outcome = await task
            if (
                not settled
                and isinstance(outcome, Exception)
                and (
                    rec.stop_reason is not None
                    or self._check_outer(rec, cancellation_behind(outcome))
                )
            ):
                # The approver was cancelled (by ``stop()``, or with the awaiting task) and its
                # cleanup raised: the call ends as cancelled all the same, as a hook's would
                # (and the awaiting task's CancelledError keeps the message it was cancelled
                # with).
                fields = log_fields(rec)
                log.warning(
                    f"approval raised while cancelled: {message_of(outcome)}",
                    exc_info=outcome,
                    stage="approval",
                    exception_type=type(outcome).__name__,
                    **fields,
                )
                outcome = None
                return _APPROVAL_ABANDONED
            if not settled:
                # Raised here, in the call's own task, where a failing stage becomes the call's
                # failure; in the approver's task a SystemExit or KeyboardInterrupt would have
                # gone through the event loop and stopped it.
                try:
                    raise outcome
                finally:
                    outcome = None
            return outcome
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return _APPROVAL_ABANDONED
            raise
        finally:
            rec.approval_task = None
            if type(pending) is CoroutineType and getcoroutinestate(pending) == CORO_CREATED:
                # Its task was cancelled before its first step (the call's task cancelled, or
                # stop(), just as the question was put): the approver never ran. Closed here,
                # or Python warns that it was never awaited wherever it is collected.
                pending.close()

    def _evaluate_guards(self, rec: CallRecord) -> str | None:
        reason = self._guard_pass(None, rec)
        if reason is None and rec.agent is not None:
            reason = self._guard_pass(rec.agent, rec)
        return reason

    def _guard_pass(self, agent: str | None, rec: CallRecord) -> str | None:
        cell = self._cell
        table = cell.current.guard_table(agent)
        if table is None or not table.entries:
            return None  # the call's view is made only for code that sees it
        view = rec.view()
        generation = table.generation
        last = -1
        current = table
        while True:
            for following in current.entries:
                if following[0] > last:
                    break
            else:
                return None
            last, fn = following
            try:
                out = fn(view)
            except GeneratorExit as exc:  # raised by the guard: no coroutine is closing here
                raise owned_generator_exit("a guard") from exc
            if out is None:
                # Re-read the table before each next guard: guards may add or remove guards.
                fresh = cell.current.guard_table(agent)
                if fresh is None or fresh.generation != generation:
                    return None
                current = fresh
                continue
            if type(out) is str:
                return out
            if is_awaitable(out):
                close_awaitable(out)
                raise TypeError("guards must be synchronous; a guard returned an awaitable")
            raise TypeError(
                f"a guard returned {type(out).__name__}; guards return None or a str reason"
                f" (the guard: {callable_name(fn)})"
            )


async def _approval_outcome(pending: Awaitable[Any]) -> tuple[bool, Any]:
    """What an approver's awaitable settles with: ``(True, answer)``, or ``(False, exception)``
    for anything it raised but its cancellation (which ends its task as cancelled)."""
    try:
        return True, await pending
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return False, exc  # from inside the handler, which unbinds ``exc``: no cycle


async def _allow() -> Allow:
    return ALLOW
