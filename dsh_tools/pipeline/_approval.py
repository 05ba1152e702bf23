"""The approval seam: what ``ToolSystem.start(approval=...)`` accepts and what it must answer.

A pre-execute hook that returns ``Ask(reason)`` routes the call to the approver. The approver
is an object with a ``request`` method (the ``Approval`` protocol), or a plain function or an
``async def`` taking the same keyword arguments (a shorthand for such an object). It returns,
or resolves to, one ``ApprovalOutcome``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from ..actors import AbortSignal

__all__ = ["APPROVAL_OUTCOMES", "Approval", "ApprovalOutcome", "as_approval", "unknown_outcome"]

ApprovalOutcome = Literal["allowed-once", "rejected", "cancelled", "unavailable"]
"""``allowed-once`` runs the call; ``rejected`` denies it (``the user rejected tool "x"``);
``cancelled`` denies it, and makes it ``ABORTED_BEFORE_DISPATCH`` when the call's signal has
aborted meanwhile; ``unavailable`` denies it (no channel to a human)."""

APPROVAL_OUTCOMES: tuple[str, ...] = ("allowed-once", "rejected", "cancelled", "unavailable")


class Approval(Protocol):
    """Answers ``Ask`` decisions, typically by asking a human.

    ``request`` receives the asking ``agent``, the ``tool_name``, the ``call_id``, the call's
    ``signal`` (it aborts when the call is abandoned: stop waiting then), the call's frozen
    ``arguments``, and ``reason`` only when the hook gave one. It may return the outcome or an
    awaitable of it (``async def request``); it runs on the event loop the call runs on, so a
    web-style approver awaits a future that another thread resolves with
    ``loop.call_soon_threadsafe(future.set_result, "allowed-once")``.
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

    def __repr__(self) -> str:
        return f"<approval {getattr(self.function, '__qualname__', self.function)!r}>"


def as_approval(value: Any) -> Approval | None:
    """``value`` as an ``Approval``: ``None`` stays ``None``, an object with a callable
    ``request`` is used as it is, any other callable is the shorthand; ``TypeError`` else."""
    if value is None:
        return None
    request = getattr(value, "request", None)
    if callable(request):
        approval: Approval = value
        return approval
    if callable(value):
        return _FunctionApproval(value)
    raise TypeError(
        "approval must be an object with a request(*, agent, tool_name, call_id, signal, "
        "arguments, reason=...) method, or a function or async def taking those keywords; "
        f"got {type(value).__name__}"
    )


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
