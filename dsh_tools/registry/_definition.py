"""Tool definitions: ``ToolDefinition`` (what the registry stores), its output contract
``ToolOutput`` and the ``Placement`` protocol.

``ToolDefinition`` holds raw JSON Schema ``parameters`` (model-facing), an output contract
(``ToolOutput``: schema, render, optional presentation projection), the body and optional
callbacks. ``define_tool`` (in ``_define_tool``) builds one from the author DSL; the registry's
per-definition checks are in ``_tool_contract``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..actors._keywords import KeywordChecked
from ._hooks import ContentFinalizer

__all__ = [
    "CALLBACK_SHAPES",
    "Placement",
    "ToolDefinition",
    "ToolOutput",
    "TypedToolDefinition",
    "shape_problem",
]

CALLBACK_SHAPES: dict[str, tuple[str, ...]] = {
    "output.render": ("args", "value"),
    "output.presentation_meta": ("args", "value"),
    "is_concurrency_safe": ("args",),
    "finalize_content": ("exec", "result"),
    "present_call": ("args",),
    "present_result": ("args", "result"),
}
"""The positional arguments each optional callback of a tool is called with."""

_COUNTS = ("no", "one", "two", "three")


class ToolOutput(msgspec.Struct, metaclass=KeywordChecked, frozen=True, eq=False):
    """A tool's output contract.

    ``schema`` validates every canonical value (raw JSON Schema on a ``ToolDefinition``; the
    DSL when passed to ``define_tool``). ``render(args, value)`` returns the model-visible
    content blocks; the optional ``presentation_meta(args, value)`` returns replayable JSON
    for UIs, computed only for direct (non-nested) calls.
    """

    schema: Any
    render: Callable[[Any, Any], Any]
    presentation_meta: Callable[[Any, Any], Any] | None = None


@runtime_checkable
class Placement(Protocol):
    """Where a tool's body runs (another process, another machine).

    ``place(tool, execute)`` returns the ``async def`` body that runs ``execute(args, run_ctx)``
    there (``args`` already validated, ``execute`` plain or ``async def``) and returns its
    canonical value or raises its exception. Only the body moves: the registry, hooks, guards,
    approval, wrappers, scheduling and the session log stay in the calling process and treat
    the placed body like any ``async def`` body. ``define_tool`` applies a placement once, at
    definition time.
    """

    def place(
        self, tool: str, execute: Callable[[Any, Any], Any]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        """The body that runs ``execute`` where this placement says."""
        ...


class ToolDefinition(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True, eq=False):
    """A registrable tool. Compared and hashed by identity.

    ``parameters`` is raw, model-facing JSON Schema (not validated by the registry for raw
    definitions, which own their input validation); ``execute(args, run_ctx)`` is a plain or
    ``async def`` function returning the canonical value. ``is_concurrency_safe(args)``
    returning exactly ``True`` lets a call overlap its siblings; ``timeout_ms`` is read by the
    timeout policy; ``finalize_content(exec, result)`` may replace the final content;
    ``present_call(args)`` and ``present_result(args, result)`` return presentation views.
    ``placement`` records where ``execute`` runs (``None``: in this process); ``define_tool``
    has already placed the body, so it is informational on a definition.
    """

    name: str
    description: str
    parameters: Any
    output: ToolOutput | None = None
    execute: Callable[..., Any]
    is_concurrency_safe: Callable[[Any], Any] | None = None
    timeout_ms: float | None = None
    finalize_content: ContentFinalizer | None = None
    present_call: Callable[[Any], Any] | None = None
    present_result: Callable[[Any, Any], Any] | None = None
    placement: Placement | None = None

    def __post_init__(self) -> None:
        # Refused when defined, not when the first call fails; other field checks stay with
        # check_registration, which reports them in its documented order.
        if callable(self.execute) and not accepts_positional(self.execute, 2):
            raise TypeError(
                f"tool {self.name!r}: execute must accept two positional arguments (args, run_ctx)"
            )


class TypedToolDefinition(ToolDefinition, frozen=True, kw_only=True, eq=False):
    """What ``@tool`` returns: a ``ToolDefinition`` whose output contract is always there (built
    from the return annotation), so ``definition.output.schema`` needs no ``None`` check.

    ``declared_output_schema`` is the return annotation's own JSON Schema (frozen), which
    ``output.schema`` projects into the subset the output contract checks: a union, a typed
    map or a recursive shape keeps its types there, and Code Mode's SDK types the binding's
    result with it. ``None`` (a definition made by hand) shows ``output.schema`` instead."""

    output: ToolOutput
    declared_output_schema: Any = None


def shape_problem(label: str, fn: Any, callback: str | None = None) -> str | None:
    """``<label> must accept two positional arguments (args, value)`` when ``fn`` cannot be
    called as ``callback`` (a key of ``CALLBACK_SHAPES``, ``label`` unless given) is, else
    None: refused when the tool is defined, not once every call fails (a classifier that
    cannot be called would leave every call exclusive without a word)."""
    shape = CALLBACK_SHAPES[label if callback is None else callback]
    if accepts_positional(fn, len(shape)):
        return None
    plural = "" if len(shape) == 1 else "s"
    return (
        f"{label} must accept {_COUNTS[len(shape)]} positional argument{plural} "
        f"({', '.join(shape)})"
    )


def accepts_positional(fn: Any, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments (``True`` when the
    signature cannot be read, as for some builtins: then the call itself decides)."""
    try:
        # The callable itself, not what a ``functools.wraps`` wrapper says it wraps: the
        # wrapper is what gets called.
        signature = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*(None,) * count)
    except TypeError:
        return False
    return True
