"""The commit stages: post-execute hooks, then finish: materialize, the
captured finalizer, sealing, result observers."""

from __future__ import annotations

from asyncio import current_task
from collections.abc import Awaitable, Callable, Sequence
from types import CoroutineType
from typing import Any

import msgspec
from msgspec import UNSET

from ..actors import (
    NEVER_ABORTED,
    Accept,
    Block,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    ToolNotFoundError,
    ToolOutputError,
    message_of,
)
from ..registry import LosslessJsonError, normalize_output, replacement_value
from ..registry._execution import CallRecord
from ._chain import answered_by, is_awaitable, rest_of_chain
from ._core import (
    POST,
    PipelineCore,
    Stage,
    close_awaitable,
    closing_call,
    log,
    log_fields,
    owned_generator_exit,
    replace_if_aborted,
    take_back_cancels,
    wind_down,
)
from ._loop import event_loop, interrupts_held
from ._results import (
    CONTEXT_SEQUENCES,
    NOT_LOSSLESS_RESULT,
    block_message,
    concat_contexts,
    exception_type_name,
    failure_from_exception,
    freeze_blocks,
    lossless_detail,
    materialize,
    stamped,
)

__all__ = ["ACCEPT", "CommitStages"]

ACCEPT = Accept()

_REPLACED_VALUE = "the value a post-execute hook put in place with Accept(value=...)"


class CommitStages(PipelineCore):
    """The post-execute and finish stages of a call (see ``Pipeline``)."""

    def commits_quietly(self, rec: CallRecord | None, stage: Stage | None) -> bool:
        """Whether committing ``rec`` now runs no user code: no post-execute hook, finalizer or
        result observer applies."""
        if rec is None or stage is None or rec.finalizer is not None:
            return False
        hooks = rec.hooks_under(self._cell.current)
        if stage.kind == POST and hooks.post_execute:
            return False
        return not hooks.result

    def commit_now(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult | None:
        """Post and finish without suspending, when no post-execute listener applies."""
        result = stage.result
        assert result is not None
        if stage.kind == POST:
            if rec.hooks_under(self._cell.current).post_execute:
                return None
            signal = rec.signal
            if (signal is not NEVER_ABORTED and signal.aborted) or rec.stop_reason is not None:
                result = replace_if_aborted(rec, result)  # its test inline: most calls pass
        return self.finish(rec, result)

    async def commit(
        self, rec: CallRecord, stage: Stage, *, looped: bool = False
    ) -> ToolExecutionResult:
        """Post-execute (when the path has it), then finish: materialize, finalize, publish.
        ``looped``: the caller runs on an event loop already."""
        result = stage.result
        assert result is not None
        if stage.kind == POST:
            # Post-execute runs here, not in a coroutine of its own: one less per call.
            if result.call_id != rec.call_id:  # ``stamped``, its usual case inline
                result = stamped(result, rec.call_id)
            try:
                hooks = rec.hooks_under(self._cell.current).post_execute
                if hooks:
                    rec.stage = "post-execute"
                    if not looped:  # hooks are async code: they may await anything
                        loop = await event_loop()
                        rec.hook_task = current_task(loop)  # interrupt() cancels it
                    view = rec.view()
                    then: Callable[[], Awaitable[Any]] = _accept
                    if len(hooks) > 1:
                        then = rest_of_chain(hooks, (view, result), _accept)
                    decision = hooks[0](view, result, then)
                    if type(decision) is CoroutineType or is_awaitable(decision):
                        # Inline, not calls: the four-hook path pays for every call on it.
                        rec.hooks_waiting = True  # interrupt() cancels the task from now on
                        if rec.stop_reason is not None:
                            wind_down(rec)
                        decision = await decision
                        # A hook may return next() unawaited; a pass-through answer is ACCEPT.
                        while decision is not ACCEPT and is_awaitable(decision):
                            decision = await decision
                        rec.hooks_waiting = False
                        if rec.own_cancels:  # a hook swallowed the interrupt's cancellation
                            take_back_cancels(rec)
                    if not (
                        decision is ACCEPT and type(result.additional_contexts) in CONTEXT_SEQUENCES
                    ):  # else a pass-through chain's answer: the result as it is
                        result = self._apply_post(rec, result, decision, hooks)
                if rec.outer is not None:
                    self._check_outer(rec)
                result = replace_if_aborted(rec, result)
            except BaseException as exc:
                if closing_call(rec, exc):
                    raise
                failure = self._fault(rec, exc)
                if failure.settled_with is None and failure.abort_reason is not None:
                    # the awaiting task was cancelled during post-execute: keep the candidate
                    failure = msgspec.structs.replace(failure, settled_with=result)
                result = failure
        return self.finish(rec, result)

    def _apply_post(
        self,
        rec: CallRecord,
        result: ToolExecutionResult,
        decision: Any,
        hooks: tuple[Callable[..., Any], ...],
    ) -> ToolExecutionResult:
        """``decision`` (not a pass-through ``ACCEPT``, which ``commit`` keeps the result for)
        applied to ``result``; ``hooks`` (outermost first) answered it."""
        decision_type = type(decision)
        if decision_type is Block:
            return ToolExecutionFailure(
                ToolFailure(block_message(decision.feedback)),
                decision.feedback,
                UNSET,
                decision.additional_contexts,
                refused_by="post-execute",
            )
        if decision_type is not Accept:
            raise TypeError(
                f"tools/post-execute returned {decision_type.__name__}; "
                "expected Accept(...) or Block(...)" + answered_by(hooks, decision)
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
                    entry.definition,
                    rec.arguments,
                    replacement_value(entry.definition, rec.name, decision.value),
                    nested=rec.parent is not None,
                )
            except ToolOutputError as exc:
                blamed = ToolOutputError(exc.tool_name, exc.violations, source=_REPLACED_VALUE)
                return msgspec.structs.replace(
                    failure_from_exception(blamed), additional_contexts=contexts
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
        """Materialize, run the captured finalizer, seal, publish to observers.

        Every result leaves here carrying its call's ``call_id``. A call is finished once: one
        whose caller gave up on it was finished then, and what it settles with later is
        dropped (``Pipeline.abandon_interrupted``)."""
        if rec.sealed:
            return result
        announced = rec.announced
        if announced is not None:
            if announced.holds():
                with interrupts_held():  # the release runs whole (``PrepareStages.begin``)
                    self.release_announced(rec)
            else:  # the run claimed its worker: nothing to give back, no Ctrl-C guard to pay
                rec.announced = None
        result = materialize(result, rec.call_id)
        finalizer = rec.finalizer
        if finalizer is not None:
            rec.stage = "finalizer"
            try:
                try:
                    content = finalizer(rec.view(), result)
                except GeneratorExit as exc:  # raised by the finalizer, a plain function
                    raise owned_generator_exit("the finalizer") from exc
                if is_awaitable(content):
                    close_awaitable(content)
                    raise TypeError(
                        "finalize_content must be synchronous; it returned an awaitable"
                    )
                if content is not None:
                    try:
                        frozen = freeze_blocks(content)
                    except (LosslessJsonError, RecursionError) as exc:
                        raise ValueError(f"{NOT_LOSSLESS_RESULT}: {lossless_detail(exc)}") from exc
                    result = msgspec.structs.replace(result, content=frozen)
            except BaseException as exc:  # a plain method: no coroutine of it is ever closed
                result = self._fault(rec, exc)
            result = stamped(result, rec.call_id)
        rec.sealed = True
        observers = rec.hooks_under(self._cell.current).result
        if observers:
            self._notify(rec, result, observers)
        # The last stage that shows the call's view: the view and the record refer to each
        # other, and without this every call (single or in a pool) would wait for the cyclic
        # collector. Hooks that kept the view still reach the record.
        rec.exec_view = None
        # Nor may a record a hook kept hold on to the registry as it was.
        rec.snapshot = rec.hooks = None
        return result

    def _notify(
        self, rec: CallRecord, result: ToolExecutionResult, observers: Sequence[Any]
    ) -> None:
        view = rec.view()
        label = f'tool "{rec.name}" ({rec.call_id}): tools/result observer failed: '
        fields = log_fields(rec)
        fields["stage"] = "observer"
        for observer in observers:
            try:
                out = observer(view, result)
                if is_awaitable(out):
                    self._background(out, label, fields)
            except BaseException as exc:  # SystemExit included: the loop must survive
                log.warning(
                    label + message_of(exc),
                    exc_info=exc,
                    exception_type=exception_type_name(exc),
                    **fields,
                )
                if rec.inline and isinstance(exc, KeyboardInterrupt | SystemExit):
                    rec.reraise = exc


async def _accept() -> Accept:
    return ACCEPT
