"""The approval seam: what ``ToolSystem.start(approval=...)`` accepts and what it must answer.

A pre-execute hook that returns ``Ask(reason)`` routes the call to the approver. The approver
is an object with a ``request`` method (the ``Approval`` protocol), or a plain function or an
``async def`` taking the same keyword arguments (a shorthand for such an object). It returns,
or resolves to, one ``ApprovalOutcome``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from ..actors import AbortSignal

__all__ = [
    "APPROVAL_OUTCOMES",
    "Approval",
    "ApprovalCall",
    "ApprovalOutcome",
    "as_approval",
    "unknown_outcome",
]

ApprovalOutcome = Literal["allowed-once", "rejected", "cancelled", "unavailable"]
"""``allowed-once`` runs the call; ``rejected`` denies it (``the user rejected tool "x"``);
``cancelled`` denies it, and makes it ``ABORTED_BEFORE_DISPATCH`` when the call's signal has
aborted meanwhile; ``unavailable`` denies it (no channel to a human)."""

APPROVAL_OUTCOMES: tuple[str, ...] = ("allowed-once", "rejected", "cancelled", "unavailable")


class Approval(Protocol):
    """Answers ``Ask`` decisions, typically by asking a human.

    ``request`` receives the asking ``agent``, the ``tool_name``, the ``call_id``, the call's
    ``signal`` (it aborts when the call is abandoned: stop waiting then), the call's frozen
    ``arguments``, and ``reason`` only when the hook gave one. ``arguments`` and ``reason`` are
    passed only to an approver that takes them (or ``**kwargs``); one that cannot take the other
    four keywords is refused when the system starts.

    An ``async def request`` runs on the event loop the call runs on, so a web-style approver
    awaits a future that another thread resolves with
    ``loop.call_soon_threadsafe(future.set_result, "allowed-once")``. When the caller aborts,
    the approver learns it from ``signal`` and answers (``cancelled`` ends the call
    ``ABORTED_BEFORE_DISPATCH``); when the awaiting task is cancelled or the system stops, its
    task is cancelled and the call ends ``ABORTED_BEFORE_DISPATCH``.

    A plain ``request`` may block (a console prompt): it runs on a worker thread, so other
    calls go on meanwhile, under the blocking ``execute()`` too (whose caller's Ctrl-C, or a
    ``stop()``, must still be able to settle the call, and aborts ``signal``).
    """

    def request(
        self,
        *,
        agent: str,
        tool_name: str,
        call_id: str,
        signal: AbortSignal,
        arguments: Any,
        reason: str = ...,
    ) -> ApprovalOutcome | Awaitable[ApprovalOutcome]:
        """The outcome for one call (or an awaitable of it)."""
        ...


ApprovalFunction = Callable[..., ApprovalOutcome | Awaitable[ApprovalOutcome]]


class _FunctionApproval:
    """The ``Approval`` a plain function or ``async def`` stands for."""

    __slots__ = ("function",)

    def __init__(self, function: ApprovalFunction) -> None:
        self.function = function

    def request(self, **kwargs: Any) -> ApprovalOutcome | Awaitable[ApprovalOutcome]:
        return self.function(**kwargs)

    def target(self) -> Callable[..., Any]:
        """The function whose signature and kind (async or not) count."""
        return self.function

    def __repr__(self) -> str:
        return f"<approval {getattr(self.function, '__qualname__', self.function)!r}>"


def as_approval(value: Any) -> Approval | None:
    """``value`` as an ``Approval``: ``None`` stays ``None``, an object with a callable
    ``request`` is used as it is, any other callable is the shorthand; ``TypeError`` else.
    ``ApprovalCall(approval)`` checks the keywords its ``request`` takes."""
    if value is None:
        return None
    approval: Approval
    if callable(getattr(value, "request", None)):
        approval = value
    elif callable(value):
        approval = _FunctionApproval(value)
    else:
        raise TypeError(
            "approval must be an object with a request(*, agent, tool_name, call_id, signal, "
            "arguments, reason=...) method, or a function or async def taking those keywords; "
            f"got {type(value).__name__}"
        )
    return approval


def unknown_outcome(outcome: Any) -> ValueError:
    """The error for an approver answer that is not an ``ApprovalOutcome``."""
    if type(outcome) is str:
        shown = json.dumps(outcome)
    else:
        try:
            shown = repr(outcome)
        except Exception:
            shown = f"<unprintable {type(outcome).__name__}>"
    expected = ", ".join(json.dumps(o) for o in APPROVAL_OUTCOMES)
    return ValueError(
        f"unreachable variant in ApprovalOutcome: the approver returned {shown}; "
        f"expected one of {expected}"
    )


_REQUIRED_KEYWORDS = ("agent", "tool_name", "call_id", "signal")
_OPTIONAL_KEYWORDS = ("arguments", "reason")


class ApprovalCall:
    """How the pipeline calls one approver: which keywords its ``request`` takes, and whether
    it is a coroutine function (run on the call's loop) or a plain one (may block: run on a
    worker thread when the call is not on the caller's own thread). Made once, when the
    approver is set; ``TypeError`` for a ``request`` that cannot take the required keywords."""

    __slots__ = ("approval", "is_async", "passes")

    def __init__(self, approval: Approval) -> None:
        self.approval = approval
        target: Callable[..., Any] = (
            approval.target() if isinstance(approval, _FunctionApproval) else approval.request
        )
        self.is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
            getattr(target, "__call__", None)  # noqa: B004 - an object with async __call__
        )
        self.passes = _accepted_keywords(target)


def _accepted_keywords(request: Callable[..., Any]) -> frozenset[str]:
    """The optional keywords ``request`` takes; ``TypeError`` naming a required keyword it
    cannot take."""
    try:
        parameters = inspect.signature(request).parameters.values()
    except (TypeError, ValueError):
        return frozenset(_OPTIONAL_KEYWORDS)  # a builtin or C callable: trust it
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return frozenset(_OPTIONAL_KEYWORDS)
    names = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    missing = [k for k in _REQUIRED_KEYWORDS if k not in names]
    if missing:
        shown = getattr(request, "__qualname__", repr(request))
        raise TypeError(
            f"approval {shown} must take the keyword arguments agent, tool_name, call_id and "
            f"signal (and may take arguments and reason); it does not take {', '.join(missing)}"
        )
    return frozenset(k for k in _OPTIONAL_KEYWORDS if k in names)
