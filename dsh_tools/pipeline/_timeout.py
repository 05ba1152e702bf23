"""``timeout_policy``: an execute wrapper that enforces a tool's ``timeout_ms``.

The registry never enforces ``timeout_ms`` itself. Installed with
``system.tools.on_execute(timeout_policy())``, this wrapper gives the body a deadline signal;
when the deadline (and not the caller) aborted it, the call's result is ``TOOL_TIMEOUT``
whatever the body returned. The deadline is cooperative: the body must observe its signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..actors import AbortController, ToolTimeoutError, any_signal
from ..actors._config import finite_number, number_text
from ..registry._execution import DispatchExecution
from ..registry._handle import listener_of
from ._loop import event_loop
from ._results import failure_from_exception

__all__ = ["Clock", "timeout_policy"]


class Clock(Protocol):
    """A timer source: ``call_later(seconds, fn)`` returns a handle with ``cancel()``."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        """Run ``callback`` after ``delay`` seconds."""


class _LoopClock:
    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        return asyncio.get_running_loop().call_later(delay, callback)


class _TimeoutReason:
    """The reason a deadline signal carries, so the policy can tell its own timer apart."""

    __slots__ = ("timeout_ms",)

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms

    def __str__(self) -> str:
        return ToolTimeoutError(self.timeout_ms).message


def timeout_policy(
    default_ms: float | None = None, *, clock: Clock | None = None
) -> Callable[[DispatchExecution, Callable[[], Awaitable[Any]]], Awaitable[Any]]:
    """Return an execute wrapper enforcing ``timeout_ms`` (or ``default_ms`` for tools without
    one) with ``TOOL_TIMEOUT``; ``clock`` replaces the event loop's timer in tests."""
    if default_ms is not None and (
        type(default_ms) not in (int, float) or not finite_number(default_ms) or default_ms <= 0
    ):
        raise ValueError(
            "timeout_policy(default_ms): default_ms must be a positive finite number of "
            f"milliseconds or None, got {number_text(default_ms)}"
        )
    if clock is not None and not callable(getattr(clock, "call_later", None)):
        # Refused here, not as every later call's failure.
        raise TypeError(
            "timeout_policy(clock): clock must have a call_later(delay, callback) method, or be "
            f"None for the event loop's timer; got {type(clock).__name__}"
        )
    timer: Clock = clock if clock is not None else _LoopClock()

    async def enforce_timeout(exec: DispatchExecution, next: Callable[[], Awaitable[Any]]) -> Any:
        definition = exec.definition
        timeout_ms = getattr(definition, "timeout_ms", None) if definition is not None else None
        if timeout_ms is None:
            timeout_ms = default_ms
        if timeout_ms is None:
            return await next()
        previous = exec.signal
        own = AbortController()
        reason = _TimeoutReason(timeout_ms)
        if clock is None:
            await event_loop()  # the timer fires on the running loop
        handle = timer.call_later(timeout_ms / 1000, lambda: own.abort(reason))
        deadline, detach = any_signal(previous, own.signal)
        exec.signal = deadline
        try:
            result = await next()
        finally:
            exec.signal = previous
            detach()
            handle.cancel()
        if deadline.aborted and deadline.reason is reason:
            return failure_from_exception(ToolTimeoutError(timeout_ms))
        return result

    # It takes (exec, next) as a pre-execute hook does: registered as one it would fail every
    # call with an AttributeError, so registering it as anything but a wrapper is refused.
    return listener_of("execute", enforce_timeout)
