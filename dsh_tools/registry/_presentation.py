"""Tool-owned presentation intents: the card vocabulary a tool returns from its presenters.

A tool may own how a UI shows its calls. ``present_call(args)`` returns a *call view* and
``present_result(args, result)`` a *result view*; both are closed unions tagged by the ``card``
field:

- call views: ``GenericCallView`` (``generic``), ``TerminalCallView`` (``terminal``),
  ``DiffCallView`` (``diff``);
- result views: ``GenericResultView``, ``TerminalResultView``, ``DiffResultView``;
- supporting types: ``FileLocation`` and ``FileDiff``;
- ``ToolResult``: the durable part of a result (``content``, ``is_error``, ``meta``) that
  ``present_result`` receives. The canonical value is execution-local and never reaches it.

The views, their encoded form and ``ToolResult`` live in ``_cards`` and are re-exported here,
where presenters and their callers import them from.

Presenters must be pure: a UI calls them while streaming and again when replaying a session
log, from any thread. ``present_call_view`` and ``present_result_view`` are the safe way to
invoke them: a presenter that raises or returns something that is not a view counts as
``None``, and ``None`` selects the generic fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from ..actors._logging import get_logger
from ._cards import (
    CALL_VIEW_TYPES,
    RESULT_VIEW_TYPES,
    CallView,
    GenericCallView,
    GenericResultView,
    ResultView,
    ToolResult,
)

__all__ = [
    "Presentable",
    "fallback_call_view",
    "fallback_result_view",
    "present_call_view",
    "present_result_view",
    "safe_present_call",
    "safe_present_result",
]

_log = get_logger("dsh_tools.presentation")


# --- fallbacks and safe invocation --------------------------------------------------------------


def fallback_call_view(name: str, arguments: Any) -> GenericCallView:
    """The generic pending card: titled with the tool name, showing the raw arguments.

    Arguments that are not lossless JSON (a replayed log may hold anything) are shown as their
    ``repr``, so the fallback itself never fails.
    """
    try:
        return GenericCallView(title=name, raw_input=arguments)
    except (TypeError, ValueError):
        return GenericCallView(title=name, raw_input=repr(arguments))


def fallback_result_view(result: ToolResult) -> GenericResultView:
    """The generic settled card: keeps the pending title and shows the raw result content."""
    _check_result("fallback_result_view", result)
    return GenericResultView(content=result.content)


def _check_result(function: str, result: object) -> None:
    """A ``ToolExecutionResult`` is the likely slip: its card is built from a ``ToolResult``
    (``ToolResult(content=result.content, ...)``), which ``function`` says."""
    if not isinstance(result, ToolResult):
        raise TypeError(f"{function}() takes a ToolResult as result, got {type(result).__name__}")


CallPresenter: TypeAlias = Callable[[Any], "CallView | None"]
ResultPresenter: TypeAlias = Callable[[Any, ToolResult], "ResultView | None"]


class Presentable(Protocol):
    """Anything carrying the two optional presenters (a ``ToolDefinition`` does)."""

    @property
    def present_call(self) -> CallPresenter | None:
        """The call presenter, or ``None``."""

    @property
    def present_result(self) -> ResultPresenter | None:
        """The result presenter, or ``None``."""


def _checked_view(
    label: str, view_types: tuple[type[Any], ...], presenter: Callable[..., Any], *args: Any
) -> Any:
    """Call ``presenter``; an exception or a value that is not one of ``view_types`` is logged
    under ``label`` and becomes ``None``."""
    try:
        view = presenter(*args)
    except Exception as exc:  # presenters should be total; a UI must survive one that is not
        _log.warning(f"{label} failed", error=repr(exc))
        return None
    if view is None or isinstance(view, view_types):
        return view
    _log.warning(f"{label} returned a non-view", type=type(view).__name__)
    return None


def safe_present_call(presenter: CallPresenter | None, arguments: Any) -> CallView | None:
    """Invoke a call presenter; an exception or a value that is not a call view is ``None``."""
    if presenter is None:
        return None
    view: CallView | None = _checked_view("present_call", CALL_VIEW_TYPES, presenter, arguments)
    return view


def safe_present_result(
    presenter: ResultPresenter | None, arguments: Any, result: ToolResult
) -> ResultView | None:
    """Invoke a result presenter; an exception or a value that is not a result view is
    ``None``."""
    if presenter is None:
        return None
    view: ResultView | None = _checked_view(
        "present_result", RESULT_VIEW_TYPES, presenter, arguments, result
    )
    return view


def present_call_view(definition: Presentable | None, name: str, arguments: Any) -> CallView:
    """The card for a pending call: the tool's own view, or the generic fallback.

    ``definition`` is the definition the calling agent sees (``None`` when the tool is unknown,
    for example on replay after it was removed).
    """
    presenter = definition.present_call if definition is not None else None
    view = safe_present_call(presenter, arguments)
    return view if view is not None else fallback_call_view(name, arguments)


def present_result_view(
    definition: Presentable | None, arguments: Any, result: ToolResult
) -> ResultView:
    """The card for a settled call: the tool's own view, or the generic fallback."""
    _check_result("present_result_view", result)
    presenter = definition.present_result if definition is not None else None
    view = safe_present_result(presenter, arguments, result)
    return view if view is not None else fallback_result_view(result)
