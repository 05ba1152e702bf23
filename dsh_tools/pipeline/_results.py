"""Results as the pipeline makes them: failures from exceptions, the exact cancellation
results, materialization (freezing content, contexts and meta, stamping the call id) and the
small rules on content and context lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from ..actors import (
    FrozenDict,
    FrozenList,
    HarnessError,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    message_of,
)
from ..actors._frozen import EMPTY_LIST
from ..registry import LosslessJsonError, snapshot_json

__all__ = [
    "CONTEXT_SEQUENCES",
    "NOT_LOSSLESS_ARGS",
    "NOT_LOSSLESS_RESULT",
    "block_message",
    "cancelled",
    "concat_contexts",
    "exception_type_name",
    "failure",
    "failure_from_exception",
    "freeze_blocks",
    "lossless_detail",
    "materialize",
    "not_lossless_result",
    "refusal",
    "stamped",
    "with_abort_reason",
]


NOT_LOSSLESS_ARGS = "tool execution arguments must be losslessly JSON-serializable"
NOT_LOSSLESS_RESULT = "tool result must be losslessly JSON-serializable"


def _text(text: str) -> FrozenList:
    return FrozenList((FrozenDict(type="text", text=text),))


def failure(
    message: str, info: ToolErrorInfo | Any = UNSET, contexts: Any = EMPTY_LIST, call_id: str = ""
) -> Any:
    return ToolExecutionFailure(
        ToolFailure(message, info), _text("Error: " + message), UNSET, contexts, call_id
    )


def refusal(reason: str, stage: str) -> ToolExecutionFailure:
    """A policy's denial: ``Error: <reason>``, no code, and the ``stage`` that refused."""
    return ToolExecutionFailure(
        ToolFailure(reason), _text("Error: " + reason), UNSET, EMPTY_LIST, refused_by=stage
    )


def exception_type_name(exc: BaseException) -> str:
    """``KeyError`` for builtins, ``dsh_tools.ToolArgsError`` for this package's errors (all
    exported at the top), ``package.module.Name`` for everything else."""
    cls = type(exc)
    module = getattr(cls, "__module__", "")
    name = getattr(cls, "__qualname__", cls.__name__)
    if module in ("builtins", ""):
        return name
    if module.startswith("dsh_tools."):
        return f"dsh_tools.{name}"
    return f"{module}.{name}"


def failure_from_exception(exc: BaseException) -> ToolExecutionFailure:
    """The normalized failure for an exception: ``Error: <message>``, info for harness errors,
    and the exception's type in ``exception_type`` (not shown to the model)."""
    message = message_of(exc)
    info: Any = UNSET
    if isinstance(exc, HarnessError):
        try:
            name, code = exc.name, exc.code
            if type(name) is str and type(code) is str:
                info = ToolErrorInfo(name, code)
        except Exception:
            info = UNSET
    return ToolExecutionFailure(
        ToolFailure(message, info),
        _text("Error: " + message),
        exception_type=exception_type_name(exc),
    )


_ABORT_INFO = {
    "ABORTED": ToolErrorInfo("AbortError", "ABORTED"),
    "ABORTED_BEFORE_DISPATCH": ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH"),
}
_ABORT_TEXT = {
    "ABORTED": "tool call aborted",
    "ABORTED_BEFORE_DISPATCH": "tool call aborted before dispatch",
}


def cancelled(
    code: str,
    contexts: Any = EMPTY_LIST,
    *,
    call_id: str = "",
    reason: Any = None,
    settled: ToolExecutionResult | None = None,
) -> ToolExecutionFailure:
    """The exact ``ABORTED`` / ``ABORTED_BEFORE_DISPATCH`` failure, keeping ``contexts``; the
    abort's ``reason`` and what the body ``settled`` with ride along for the harness."""
    text = _ABORT_TEXT[code]
    return ToolExecutionFailure(
        ToolFailure(text, _ABORT_INFO[code]),
        _text("Error: " + text),
        UNSET,
        contexts,
        call_id,
        abort_reason=None if reason is None else _reason_text(reason),
        settled_with=settled,
    )


def _reason_text(reason: Any) -> str:
    return message_of(reason, "<unprintable abort reason>")


def with_abort_reason(failure: ToolExecutionFailure, reason: Any) -> ToolExecutionFailure:
    """``failure`` carrying ``str(reason)`` as its ``abort_reason`` (content and error kept)."""
    return msgspec.structs.replace(failure, abort_reason=_reason_text(reason))


def freeze_blocks(value: Any, root: str = "content") -> FrozenList:
    """Snapshot a list or tuple of JSON values into a FrozenList (``LosslessJsonError`` paths
    rooted at ``root``; ``TypeError`` for anything but a list or tuple)."""
    if type(value) is tuple:
        return FrozenList(snapshot_json(item, f"{root}[{i}]") for i, item in enumerate(value))
    frozen = snapshot_json(value, root)
    if type(frozen) is not FrozenList:
        raise TypeError(f"{root} must be a list of blocks, got {type(value).__name__}")
    return frozen


def lossless_detail(exc: BaseException) -> str:
    """What a failed snapshot says after a boundary's pinned text: ``<path> is <type>`` (or
    the reason a value was refused)."""
    if isinstance(exc, LosslessJsonError):
        return f"{exc.path} is {exc.type_name}"
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return message_of(exc, type(exc).__name__)


def not_lossless_result(detail: str, call_id: str = "") -> ToolExecutionFailure:
    """The failure a result that cannot be materialized becomes: the pinned text, then what
    was wrong and where."""
    message = f"{NOT_LOSSLESS_RESULT}: {detail}"
    return ToolExecutionFailure(
        ToolFailure(message), _text("Error: " + message), UNSET, EMPTY_LIST, call_id
    )


CONTEXT_SEQUENCES = (FrozenList, list, tuple)


def concat_contexts(a: Sequence[Any], b: Sequence[Any]) -> Any:
    """``a + b`` for context lists; anything but a list or tuple is refused, so that a
    single context dict never has its keys spliced in as contexts."""
    for contexts in (a, b):
        if type(contexts) not in CONTEXT_SEQUENCES:
            raise TypeError(
                "additional_contexts must be a list or tuple of contexts, "
                f"got {type(contexts).__name__}"
            )
    if not b:
        return a
    if not a:
        return b
    return (*a, *b)


def block_message(feedback: Any) -> str:
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


def stamped(result: ToolExecutionResult, call_id: str) -> ToolExecutionResult:
    """``result`` carrying ``call_id`` (itself when it already does)."""
    if result.call_id == call_id:
        return result
    return msgspec.structs.replace(result, call_id=call_id)


def materialize(result: Any, call_id: str) -> ToolExecutionResult:
    """Freeze content, error, meta and contexts and stamp ``call_id``; a lossy result
    becomes a plain failure."""
    if (
        type(result) is ToolExecutionSuccess
        and type(result.content) is FrozenList
        and result.additional_contexts is EMPTY_LIST
        and result.meta is UNSET
        and result.call_id == call_id
    ):
        return result  # what the checks below find for a body's usual success, at a glance
    try:
        result_type = type(result)
        content = result.content
        if type(content) is not FrozenList:
            content = freeze_blocks(content)
        contexts = result.additional_contexts
        if contexts and type(contexts) is not FrozenList:
            contexts = freeze_blocks(contexts, "additional_contexts")
        elif not contexts:
            contexts = EMPTY_LIST
        meta = result.meta
        if meta is not UNSET:
            meta = snapshot_json(meta, "meta")
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
        return msgspec.structs.replace(  # type: ignore[no-any-return]
            result, content=content, meta=meta, additional_contexts=contexts, call_id=call_id
        )
    except (LosslessJsonError, RecursionError, TypeError, ValueError) as exc:
        return not_lossless_result(lossless_detail(exc), call_id)
