"""The per-call pipeline: prepare (E1-E10), dispatch (D1-D5, B1-B8), post (P1-P3), finish (F1-F4).

The stages are separate coroutines so the dispatcher pool can run prepare and commit on one
sequential coordinator while only dispatches overlap; ``run`` chains them for a single call.
Nothing here raises for tool, hook, policy or data faults: every outcome is a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import msgspec
import structlog
from msgspec import UNSET

from ..actors import (
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    ExecuteCall,
    FrozenDict,
    FrozenList,
    HarnessError,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    ToolNotFoundError,
    ToolOutputError,
    any_signal,
)
from ..actors._frozen import EMPTY_LIST
from ..registry import LosslessJsonError, compact_json, normalize_output, snapshot_json
from ..registry._snapshot import SnapshotCell, ToolEntry
from ._execution import CallRecord, DispatchExecution, ToolRunContext
from ._session import SessionLog

__all__ = [
    "DISPATCH",
    "FINISH",
    "POST",
    "Pipeline",
    "Stage",
    "failure_from_exception",
    "message_of",
]

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

_NOT_LOSSLESS_ARGS = "tool execution arguments must be losslessly JSON-serializable"
_NOT_LOSSLESS_RESULT = "tool result must be losslessly JSON-serializable"


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or ``<unprintable thrown value>`` when that raises or is not a str."""
    try:
        text = str(exc)
    except Exception:
        return "<unprintable thrown value>"
    return text if type(text) is str else "<unprintable thrown value>"


def _text(text: str) -> FrozenList:
    return FrozenList((FrozenDict(type="text", text=text),))


def _failure(
    message: str, info: ToolErrorInfo | Any = UNSET, contexts: Any = EMPTY_LIST, call_id: str = ""
) -> Any:
    return ToolExecutionFailure(
        ToolFailure(message, info), _text("Error: " + message), UNSET, contexts, call_id
    )


def failure_from_exception(exc: BaseException) -> ToolExecutionFailure:
    """The normalized failure for an exception: ``Error: <message>``, info for harness errors."""
    message = message_of(exc)
    info: Any = UNSET
    if isinstance(exc, HarnessError):
        try:
            name, code = exc.name, exc.code
            if type(name) is str and type(code) is str:
                info = ToolErrorInfo(name, code)
        except Exception:
            info = UNSET
    result: ToolExecutionFailure = _failure(message, info)
    return result


_ABORT_INFO = {
    "ABORTED": ToolErrorInfo("AbortError", "ABORTED"),
    "ABORTED_BEFORE_DISPATCH": ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH"),
}
_ABORT_TEXT = {
    "ABORTED": "tool call aborted",
    "ABORTED_BEFORE_DISPATCH": "tool call aborted before dispatch",
}


def cancelled(code: str, contexts: Any = EMPTY_LIST, *, call_id: str = "") -> ToolExecutionFailure:
    """The exact ``ABORTED`` / ``ABORTED_BEFORE_DISPATCH`` failure, keeping ``contexts``."""
    result: ToolExecutionFailure = _failure(_ABORT_TEXT[code], _ABORT_INFO[code], contexts, call_id)
    return result


def _freeze_blocks(value: Any) -> FrozenList:
    """Snapshot a list or tuple of JSON values into a FrozenList."""
    if type(value) is tuple:
        return FrozenList(snapshot_json(item) for item in value)
    frozen = snapshot_json(value)
    if type(frozen) is not FrozenList:
        raise TypeError(f"content must be a list of blocks, got {type(value).__name__}")
    return frozen


_CONTEXT_SEQUENCES = (FrozenList, list, tuple)


def _concat(a: Sequence[Any], b: Sequence[Any]) -> Any:
    """``a + b`` for context lists; anything but a list or tuple is refused, so that a
    single context dict never has its keys spliced in as contexts."""
    for contexts in (a, b):
        if type(contexts) not in _CONTEXT_SEQUENCES:
            raise TypeError(
                "additional_contexts must be a list or tuple of contexts, "
                f"got {type(contexts).__name__}"
            )
    if not b:
        return a
    if not a:
        return b
    return (*a, *b)


def _block_message(feedback: Any) -> str:
    parts: list[str] = []
    try:
        for block in feedback:
            if isinstance(block, dict):
                kind = block.get("type")
                text = block.get("text")
                if kind == "text" and isinstance(text, str):
                    parts.append(text)
                else:
                    parts.append(f"[{kind} content]")
            else:
                parts.append(f"[{type(block).__name__} content]")
    except Exception:
        return "tool result blocked by post-execute policy"
    message = "\n".join(parts)
    return message or "tool result blocked by post-execute policy"


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
        approval: Callable[[], Any],
        background: Callable[[Awaitable[Any], str, dict[str, Any]], None],
    ) -> None:
        self._cell = cell
        self.session = session
        self._executor = executor
        self._approval = approval
        self._background = background

    def lookup(self, name: str, agent: str | None) -> ToolEntry | None:
        """The entry ``name`` resolves to for ``agent`` in the current snapshot."""
        return self._cell.current.lookup(name, agent)

    def visible_names(self, agent: str | None) -> list[str]:
        """The names ``agent`` sees now, in view order."""
        return list(self._cell.current.view(agent))

    # --- the whole call ------------------------------------------------------------------------

    async def run(self, call: ExecuteCall, *, inline: bool, record: bool = True) -> Any:
        """Run one call through every stage and return its one result."""
        rec, stage = self.begin(call)
        top = record and call.parent is None
        if top:
            self.session.record_call(
                rec.call_id, rec.name, _compact_arguments(rec.arguments), rec.agent
            )
        if stage is None:
            stage = self.prepare_now(rec) or await self.prepare(rec)
        if stage.kind == DISPATCH:
            stage = await self.dispatch(rec, inline=inline)
        result = self.commit_now(rec, stage) or await self.commit(rec, stage)
        if top:
            self.session.record_result(rec.call_id, result, rec.agent)
        return result

    # --- prepare (E1-E10) ----------------------------------------------------------------------

    def begin(self, call: ExecuteCall) -> tuple[CallRecord, Stage | None]:
        """E1-E3: mint the record, capture the finalizer, snapshot the arguments."""
        cell = self._cell
        rec = CallRecord(call.call_id, call.name, UNSET, call.signal, call.agent, call.parent)
        name, agent = call.name, call.agent
        rec.resolve = lambda: cell.current.lookup(name, agent)
        entry = cell.current.lookup(name, agent)
        if entry is not None:
            rec.entry = entry
            rec.finalizer = entry.definition.finalize_content
        try:
            rec.arguments = snapshot_json(call.arguments)
        except (LosslessJsonError, RecursionError, MemoryError):
            return rec, Stage(FINISH, _failure(_NOT_LOSSLESS_ARGS))
        if call.signal.aborted:
            return rec, Stage(FINISH, cancelled("ABORTED_BEFORE_DISPATCH"))
        return rec, None

    def prepare_now(self, rec: CallRecord) -> Stage | None:
        """E4-E10 without suspending, when no pre-execute listener applies; else None."""
        if self._cell.current.hooks_for("pre_execute", rec.agent):
            return None
        try:
            return self._decide(rec, ALLOW, False)
        except (Exception, asyncio.CancelledError) as exc:
            return Stage(FINISH, failure_from_exception(exc))

    async def prepare(self, rec: CallRecord) -> Stage:
        """E4-E10: pre-execute, approval, guards; the next stage and any candidate result."""
        try:
            hooks = self._cell.current.hooks_for("pre_execute", rec.agent)
            decision: Any = ALLOW
            if hooks:
                decision = await _pre_chain(hooks, 0, rec.view())
            approval_cancelled = False
            decision_type = type(decision)
            if decision_type is Ask:
                decision, approval_cancelled = await self._approve(rec, decision)
            elif decision_type is not Allow and decision_type is not Deny:
                raise TypeError(
                    f"tools/pre-execute returned {decision_type.__name__}; "
                    "expected Allow(), Deny(reason) or Ask(reason)"
                )
            return self._decide(rec, decision, approval_cancelled)
        except (Exception, asyncio.CancelledError) as exc:
            return Stage(FINISH, failure_from_exception(exc))

    def _decide(self, rec: CallRecord, decision: Any, approval_cancelled: bool) -> Stage:
        """E6-E9 once the decision is final (raises for E10)."""
        signal = rec.signal
        if approval_cancelled and signal.aborted:
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH"))
        if type(decision) is Allow:
            reason = self._evaluate_guards(rec)
        else:
            reason = decision.reason
            if type(reason) is not str:
                raise TypeError("Deny.reason must be a str")
        if reason is not None:
            return Stage(POST, _failure(reason))
        if signal.aborted:
            return Stage(POST, cancelled("ABORTED_BEFORE_DISPATCH"))
        return _DISPATCH_STAGE

    async def _approve(self, rec: CallRecord, ask: Ask) -> tuple[Any, bool]:
        name = rec.name
        approval = self._approval()
        if approval is None:
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
        kwargs: dict[str, Any] = {
            "agent": rec.agent,
            "tool_name": name,
            "call_id": rec.call_id,
            "signal": rec.signal,
        }
        if ask.reason is not None:
            kwargs["reason"] = ask.reason
        outcome = approval.request(**kwargs)
        if inspect.isawaitable(outcome):
            outcome = await outcome
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
        try:
            shown = json.dumps(outcome)
        except (TypeError, ValueError):
            shown = repr(outcome)
        raise ValueError(f"unreachable variant in ApprovalOutcome: {shown}")

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
            following = next((g for g in current.entries if g[0] > last), None)
            if following is None:
                return None
            last, fn = following
            out = fn(view)
            if out is None:
                continue
            if type(out) is str:
                return out
            if inspect.isawaitable(out):
                _close_awaitable(out)
                raise TypeError("guards must be synchronous; a guard returned an awaitable")
            raise TypeError(
                f"a guard returned {type(out).__name__}; guards return None or a str reason"
            )

    # --- dispatch (D1-D5) ----------------------------------------------------------------------

    async def dispatch(self, rec: CallRecord, *, inline: bool) -> Stage:
        """Run the execute waterfall and the body; the candidate result for post-execute."""
        dexec = DispatchExecution(rec)
        try:
            hooks = self._cell.current.hooks_for("execute", rec.agent)
            base = self._base(rec, dexec, inline)
            if hooks:
                result = await _execute_chain(hooks, 0, dexec, base)
            else:
                result = await base()
            rec.dispatch_signal = rec.signal
            result = self._normalize_dispatch_result(rec, result)
            rec.contexts_closed = True
            if rec.deferred:
                result = msgspec.structs.replace(
                    result,
                    additional_contexts=_concat(rec.deferred, result.additional_contexts),
                )
            if rec.signal.aborted and not result.is_error:
                code = "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"
                result = cancelled(code, result.additional_contexts)
            return Stage(POST, result)
        except (Exception, asyncio.CancelledError) as exc:
            rec.dispatch_signal = rec.signal
            rec.contexts_closed = True
            return Stage(FINISH, failure_from_exception(exc))

    def _base(
        self, rec: CallRecord, dexec: DispatchExecution, inline: bool
    ) -> Callable[[], Awaitable[ToolExecutionResult]]:
        async def base() -> ToolExecutionResult:
            result = _stamped(await self._invoke(rec, inline), rec.call_id)
            rec.canonical.append(result)
            return result

        return base

    async def _invoke(self, rec: CallRecord, inline: bool) -> ToolExecutionResult:
        wrapper_signal = rec.dispatch_signal
        caller = rec.signal
        if wrapper_signal is caller:
            fused, detach = caller, None
        else:
            fused, detach = any_signal(wrapper_signal, caller)
        try:
            if fused.aborted:
                return cancelled("ABORTED_BEFORE_DISPATCH")
            entry = self._cell.current.lookup(rec.name, rec.agent)
            if entry is None:
                return failure_from_exception(ToolNotFoundError(rec.name))
            rec.body_invoked = True
            # A wrapper that supplied its own signal (a deadline, say) may abort it from a timer
            # on this very loop: a plain body then runs on a worker thread so the loop stays free
            # to fire it. Without one, nothing on this loop can abort the body's signal, so the
            # body runs inline (the hot path).
            inline = inline and fused is caller
            try:
                value = await self._call_body(entry, rec, ToolRunContext(rec, fused), inline)
            except (Exception, asyncio.CancelledError) as exc:
                return failure_from_exception(exc)
            try:
                value, content, meta = normalize_output(
                    entry.definition, rec.arguments, value, nested=rec.parent is not None
                )
            except (Exception, asyncio.CancelledError) as exc:  # the base never raises
                return failure_from_exception(exc)
            if fused.aborted:
                return cancelled("ABORTED")
            return ToolExecutionSuccess(value, content, meta, EMPTY_LIST, rec.call_id)
        finally:
            if detach is not None:
                detach()
            rec.dispatch_signal = wrapper_signal

    async def _call_body(
        self, entry: ToolEntry, rec: CallRecord, ctx: ToolRunContext, inline: bool
    ) -> Any:
        execute = entry.definition.execute
        if entry.is_async:
            return await execute(rec.arguments, ctx)
        if inline:
            value = execute(rec.arguments, ctx)
        else:
            loop = asyncio.get_running_loop()
            value = await loop.run_in_executor(self._executor, execute, rec.arguments, ctx)
        if inspect.isawaitable(value):
            value = await value
        return value

    def _normalize_dispatch_result(self, rec: CallRecord, result: Any) -> ToolExecutionResult:
        if rec.is_canonical(result):
            return result  # type: ignore[no-any-return]
        result_type = type(result)
        if result_type is ToolExecutionFailure:
            return ToolExecutionFailure(
                result.error, result.content, result.meta, result.additional_contexts
            )
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
            if rec.signal.aborted and not result.is_error:
                code = "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"
                result = cancelled(code, result.additional_contexts)
        return self.finish(rec, result)

    async def commit(self, rec: CallRecord, stage: Stage) -> ToolExecutionResult:
        """Post-execute (when the path has it), then finish: materialize, finalize, publish."""
        result = stage.result
        assert result is not None
        if stage.kind == POST:
            result = await self._post(rec, _stamped(result, rec.call_id))
        return self.finish(rec, result)

    async def _post(self, rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
        try:
            hooks = self._cell.current.hooks_for("post_execute", rec.agent)
            if hooks:
                decision = await _post_chain(hooks, 0, rec.view(), result)
                result = self._apply_post(rec, result, decision)
            if rec.signal.aborted and not result.is_error:
                code = "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"
                result = cancelled(code, result.additional_contexts)
            return result
        except (Exception, asyncio.CancelledError) as exc:
            return failure_from_exception(exc)

    def _apply_post(
        self, rec: CallRecord, result: ToolExecutionResult, decision: Any
    ) -> ToolExecutionResult:
        decision_type = type(decision)
        if decision_type is Block:
            return ToolExecutionFailure(
                ToolFailure(_block_message(decision.feedback)),
                decision.feedback,
                UNSET,
                decision.additional_contexts,
            )
        if decision_type is not Accept:
            raise TypeError(
                f"tools/post-execute returned {decision_type.__name__}; "
                "expected Accept(...) or Block(...)"
            )
        contexts = _concat(result.additional_contexts, decision.additional_contexts)
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
        result = _materialize(result, rec.call_id)
        finalizer = rec.finalizer
        if finalizer is not None:
            try:
                content = finalizer(rec.view(), result)
                if inspect.isawaitable(content):
                    _close_awaitable(content)
                    raise TypeError(
                        "finalize_content must be synchronous; it returned an awaitable"
                    )
                if content is not None:
                    try:
                        frozen = _freeze_blocks(content)
                    except (LosslessJsonError, RecursionError) as exc:
                        raise ValueError(_NOT_LOSSLESS_RESULT) from exc
                    result = msgspec.structs.replace(result, content=frozen)
            except (Exception, asyncio.CancelledError) as exc:
                result = failure_from_exception(exc)
            result = _stamped(result, rec.call_id)
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
        for observer in observers:
            try:
                out = observer(view, result)
                if inspect.isawaitable(out):
                    self._background(out, label, _log_fields(rec))
            except (Exception, asyncio.CancelledError) as exc:
                _log.warning(label + message_of(exc), **_log_fields(rec))


def _stamped(result: ToolExecutionResult, call_id: str) -> ToolExecutionResult:
    """``result`` carrying ``call_id`` (itself when it already does)."""
    if result.call_id == call_id:
        return result
    return msgspec.structs.replace(result, call_id=call_id)


def _log_fields(rec: CallRecord) -> dict[str, Any]:
    """What every log line about a call carries (the token's id, never the token)."""
    return {
        "call_id": rec.call_id,
        "tool": rec.name,
        "token": rec.token.id,
        "parent": rec.parent.id if rec.parent is not None else None,
    }


def _materialize(result: Any, call_id: str) -> ToolExecutionResult:
    """F1: freeze content, error, meta and contexts and stamp ``call_id``; a lossy result
    becomes a plain failure."""
    try:
        result_type = type(result)
        content = result.content
        if type(content) is not FrozenList:
            content = _freeze_blocks(content)
        contexts = result.additional_contexts
        if contexts and type(contexts) is not FrozenList:
            contexts = _freeze_blocks(contexts)
        elif not contexts:
            contexts = EMPTY_LIST
        meta = result.meta
        if meta is not UNSET:
            meta = snapshot_json(meta)
        if result_type is ToolExecutionSuccess:
            if (
                content is result.content
                and contexts is result.additional_contexts
                and meta is result.meta
                and result.call_id == call_id
            ):
                return result  # type: ignore[no-any-return]
            return ToolExecutionSuccess(result.value, content, meta, contexts, call_id)
        error = result.error
        if type(error) is not ToolFailure or type(error.message) is not str:
            raise TypeError("a failure's error must be a ToolFailure with a str message")
        if (
            content is result.content
            and contexts is result.additional_contexts
            and meta is result.meta
            and result.call_id == call_id
        ):
            return result  # type: ignore[no-any-return]
        return ToolExecutionFailure(error, content, meta, contexts, call_id)
    except (LosslessJsonError, RecursionError, TypeError, ValueError):
        return ToolExecutionFailure(
            ToolFailure(_NOT_LOSSLESS_RESULT),
            _text("Error: " + _NOT_LOSSLESS_RESULT),
            UNSET,
            EMPTY_LIST,
            call_id,
        )


def _compact_arguments(arguments: Any) -> str | None:
    if arguments is UNSET:
        return None
    try:
        return msgspec.json.encode(arguments).decode()
    except (RecursionError, TypeError, ValueError):
        return compact_json(arguments)  # deeper than msgspec goes


async def _pre_chain(hooks: Sequence[Any], index: int, view: Any) -> Any:
    if index == len(hooks):
        return ALLOW
    out = hooks[index](view, lambda: _pre_chain(hooks, index + 1, view))
    while inspect.isawaitable(out):  # `return next()` unawaited resolves, as in the reference
        out = await out
    return out


async def _execute_chain(
    hooks: Sequence[Any],
    index: int,
    dexec: DispatchExecution,
    base: Callable[[], Awaitable[ToolExecutionResult]],
) -> Any:
    if index == len(hooks):
        return await base()
    out = hooks[index](dexec, lambda: _execute_chain(hooks, index + 1, dexec, base))
    while inspect.isawaitable(out):  # `return next()` unawaited resolves, as in the reference
        out = await out
    return out


async def _post_chain(hooks: Sequence[Any], index: int, view: Any, result: Any) -> Any:
    if index == len(hooks):
        return ACCEPT
    out = hooks[index](view, result, lambda: _post_chain(hooks, index + 1, view, result))
    while inspect.isawaitable(out):  # `return next()` unawaited resolves, as in the reference
        out = await out
    return out
