"""The shapes of everything a harness plugs in: hooks of each kind, guards, observers, and the
values only hooks receive (the assembled prompt, a Code Mode dispatch log).

They are precise callable types, so that a type checker sees what a hook is given and must
return; ``dsh_tools.types`` re-exports them for users' own annotations. A hook may be a plain
function or an ``async def`` (or return an awaitable): the pipeline awaits what it returns for
as long as it is awaitable, so ``return next()`` works unawaited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias, TypeVar

import msgspec

from ..actors import Accept, Allow, Ask, Block, Deny, ToolExecutionResult
from ..actors._keywords import KeywordChecked
from ._execution import DispatchExecution, ToolExecution, ToolRunContext

__all__ = [
    "AssembleHook",
    "AssembledPrompt",
    "ChangeObserver",
    "CodeDispatchLog",
    "CodeDispatchLogHook",
    "ContentFinalizer",
    "ExecuteWrapper",
    "Guard",
    "Next",
    "PostDecision",
    "PostExecuteHook",
    "PreDecision",
    "PreExecuteHook",
    "PromptSection",
    "ResultObserver",
]

_T = TypeVar("_T")

Next: TypeAlias = Callable[[], Awaitable[_T]]
"""The ``next`` a waterfall hook is given: the rest of the chain, to await (or return)."""

MaybeAwaitable: TypeAlias = _T | Awaitable[_T]

PreDecision: TypeAlias = Allow | Deny | Ask
"""What a pre-execute hook decides."""

PostDecision: TypeAlias = Accept | Block
"""What a post-execute hook decides."""

PreExecuteHook: TypeAlias = Callable[
    [ToolExecution, Next[PreDecision]], MaybeAwaitable[PreDecision]
]
"""``tools.on_pre_execute(hook)``: ``hook(exec, next) -> Allow() | Deny(reason) | Ask(...)``."""

ExecuteWrapper: TypeAlias = Callable[
    [DispatchExecution, Next[ToolExecutionResult]], MaybeAwaitable[ToolExecutionResult]
]
"""``tools.on_execute(wrapper)``: ``wrapper(exec, next) -> result`` around the body."""

PostExecuteHook: TypeAlias = Callable[
    [ToolExecution, ToolExecutionResult, Next[PostDecision]], MaybeAwaitable[PostDecision]
]
"""``tools.on_post_execute(hook)``: ``hook(exec, result, next) -> Accept(...) | Block(...)``."""

Guard: TypeAlias = Callable[[ToolExecution], str | None]
"""``tools.guard(fn)``: synchronous; a ``str`` is the reason the call is refused."""

ResultObserver: TypeAlias = Callable[[ToolExecution, ToolExecutionResult], MaybeAwaitable[None]]
"""``tools.on_result(fn)``: sees every published result; what it returns is not used (an
awaitable is awaited in the background)."""

ChangeObserver: TypeAlias = Callable[[], MaybeAwaitable[None]]
"""``tools.on_change(fn)``: called after each registry change."""

ContentFinalizer: TypeAlias = Callable[[ToolExecution, ToolExecutionResult], Any]
"""A tool's ``finalize_content``: synchronous; new content blocks, or None to keep them."""


class PromptSection(msgspec.Struct, metaclass=KeywordChecked, frozen=True):
    """One named block of the system prompt; sections are sorted by ``order``."""

    name: str
    order: float
    text: str


class AssembledPrompt(msgspec.Struct, frozen=True):
    """What a model turn is given: the prompt ``sections`` and the ``tools`` schemas in order."""

    sections: list[PromptSection]
    tools: list[dict[str, Any]]


AssembleHook: TypeAlias = Callable[[AssembledPrompt], AssembledPrompt]
"""``tools.on_assemble(hook)``: may return a changed ``AssembledPrompt``."""


class CodeDispatchLog(msgspec.Struct, frozen=True, kw_only=True):
    """What a ``tools/code-dispatch-log`` listener receives about one settled sub-call.

    ``exec`` is the outer ``run_code`` execution, ``agent`` its agent, ``sub_call_id`` the
    sub-call's id (``<parent call id>:code:<n>``), ``name`` the tool, ``is_error`` whether it
    failed and ``content`` its final model-facing content blocks (frozen). A listener is
    ``async def hook(log, next) -> list[dict]``: ``await next()`` returns what the listeners
    after it made of ``content`` (``content`` itself at the end of the chain), and what the
    first listener returns is the logged ``content`` of the ``tool/code-dispatch`` event.
    """

    exec: ToolRunContext
    agent: str | None
    sub_call_id: str
    name: str
    is_error: bool
    content: Sequence[Any]


CodeDispatchLogHook: TypeAlias = Callable[
    [CodeDispatchLog, Next[Sequence[Any]]], MaybeAwaitable[Sequence[Any]]
]
"""``tools.on_code_dispatch_log(hook)``: ``hook(log, next) -> content blocks``."""
