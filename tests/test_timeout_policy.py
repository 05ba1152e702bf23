"""The timeout policy wrapper: deadlines, their reasons, and their precedence over aborts.

Most scenarios drive the deadline with a ``ManualClock``; two use the event loop's own timer to
show the default clock reaches sync and async bodies alike.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import (
    WAIT,
    ManualClock,
    arun,
    await_event,
    call,
    echo,
    spawn,
    text,
    wait,
)

from dsh_tools import (
    AbortController,
    AbortSignal,
    HarnessError,
    ToolSystem,
    timeout_policy,
)

TIMED_OUT = {
    "content": [{"type": "text", "text": "Error: tool call timed out after 100ms"}],
    "is_error": True,
    "error": {
        "message": "tool call timed out after 100ms",
        "info": {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"},
    },
}


def install(system: ToolSystem, clock: ManualClock | None = None, **options: Any) -> Any:
    """Install the policy through its own plugin; returns the plugin (close() disposes it)."""
    plugin = system.plugin("timeout")
    plugin.tools.on_execute(timeout_policy(clock=clock, **options))
    return plugin


class SignalLog:
    def __init__(self) -> None:
        self.body: list[AbortSignal] = []
        self.post: list[AbortSignal] = []


def recording(system: ToolSystem, log: SignalLog) -> None:
    def body(args: Any, ctx: Any) -> str:
        log.body.append(ctx.signal)
        return "quick"

    async def post(exec: Any, result: Any, next: Any) -> Any:
        log.post.append(exec.signal)
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.register(echo(name="budgeted", execute=body, timeout_ms=10000))
    system.tools.on_post_execute(post)


def test_rp92_a_tool_without_a_budget_gets_the_callers_signal(system: ToolSystem) -> None:
    clock = ManualClock()
    log = SignalLog()
    recording(system, log)
    install(system, clock)
    signal = AbortController().signal
    result = system.execute(call("echo", signal=signal))
    assert text(result) == "quick"
    assert log.body == [signal]
    assert log.body[0] is signal
    assert clock.pending == 0


def test_rp92_a_budgeted_tool_gets_a_deadline_signal_and_post_the_callers(
    system: ToolSystem,
) -> None:
    clock = ManualClock()
    log = SignalLog()
    recording(system, log)
    install(system, clock)
    signal = AbortController().signal
    result = system.execute(call("budgeted", {"text": "x"}, signal=signal))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "quick"}],
        "is_error": False,
        "value": "quick",
    }
    assert log.body[0] is not signal
    assert not log.body[0].aborted
    assert log.post[0] is signal
    assert clock.pending == 0


def test_rp92_disposing_the_policy_gives_budgeted_tools_the_callers_signal(
    system: ToolSystem,
) -> None:
    clock = ManualClock()
    log = SignalLog()
    recording(system, log)
    plugin = install(system, clock)
    first = AbortController().signal
    system.execute(call("budgeted", signal=first))
    assert log.body[0] is not first
    plugin.close()
    signal = AbortController().signal
    system.execute(call("budgeted", signal=signal, call_id="c2"))
    assert log.body[1] is signal


def cooperative(started: threading.Event, on_abort: Any) -> Any:
    def body(args: Any, ctx: Any) -> Any:
        started.set()
        assert ctx.signal.wait(WAIT)
        return on_abort(ctx)

    return body


def expire(system: ToolSystem, clock: ManualClock, body: Any, **call_fields: Any) -> Any:
    started = threading.Event()
    system.tools.register(echo(execute=cooperative(started, body), timeout_ms=100))
    future = spawn(system, call(**call_fields))
    wait(started)
    clock.advance(150)
    return future.result(WAIT)


def test_rp93_a_fired_deadline_is_tool_timeout(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)
    result = expire(system, clock, lambda ctx: "resolved after the deadline")
    assert result.to_dict() == TIMED_OUT


def test_rp93_a_provider_abort_error_becomes_tool_timeout(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)

    def fail(ctx: Any) -> Any:
        raise HarnessError("web fetch aborted", "WEB_ABORTED")

    assert expire(system, clock, fail).to_dict() == TIMED_OUT


def test_rp93_an_async_body_times_out_the_same_way(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)
    started = asyncio.Event()

    async def body(args: Any, ctx: Any) -> str:
        started.set()
        await ctx.signal
        return "late"

    system.tools.register(echo(execute=body, timeout_ms=100))

    async def scenario() -> Any:
        task = asyncio.create_task(system.execute_async(call()))
        await await_event(started)
        clock.advance(99)
        assert not task.done()
        clock.advance(51)
        return await task

    assert arun(scenario()).to_dict() == TIMED_OUT


def test_rp94_a_caller_abort_before_the_deadline_is_aborted(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)
    started = threading.Event()
    system.tools.register(
        echo(execute=cooperative(started, lambda ctx: "resolved on abort"), timeout_ms=100)
    )
    controller = AbortController()
    future = spawn(system, call(signal=controller.signal))
    wait(started)
    controller.abort()
    result = future.result(WAIT)
    assert text(result) == "Error: tool call aborted"
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED"
    assert clock.pending == 0


def test_rp95_a_caller_abort_after_the_deadline_stays_tool_timeout(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)
    started = threading.Event()
    saw_deadline = threading.Event()
    cleanup = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        started.set()
        assert ctx.signal.wait(WAIT)
        saw_deadline.set()
        assert cleanup.wait(WAIT)
        return "cleaned up"

    system.tools.register(echo(execute=body, timeout_ms=100))
    controller = AbortController()
    future = spawn(system, call(signal=controller.signal))
    wait(started)
    clock.advance(150)
    wait(saw_deadline)
    controller.abort()
    cleanup.set()
    assert future.result(WAIT).to_dict() == TIMED_OUT


def test_timeout_ms_prints_like_a_js_number(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock)
    started = threading.Event()
    system.tools.register(echo(execute=cooperative(started, lambda ctx: "late"), timeout_ms=12.5))
    future = spawn(system, call())
    wait(started)
    clock.advance(13)
    assert text(future.result(WAIT)) == "Error: tool call timed out after 12.5ms"


def test_default_ms_budgets_tools_without_their_own(system: ToolSystem) -> None:
    clock = ManualClock()
    install(system, clock, default_ms=100.0)
    started = threading.Event()
    system.tools.register(echo(execute=cooperative(started, lambda ctx: "late")))
    future = spawn(system, call())
    wait(started)
    clock.advance(100)
    assert future.result(WAIT).to_dict() == TIMED_OUT


@pytest.mark.parametrize(
    "default_ms",
    [
        0,
        -1,
        float("inf"),
        float("nan"),
        True,
        "100",
        pytest.param(10**400, id="10**400"),
        pytest.param(-(10**5000), id="-10**5000"),
    ],
)
def test_default_ms_must_be_a_positive_finite_number(default_ms: Any) -> None:
    # An integer past what a float holds is as infinite: refused, not an OverflowError.
    with pytest.raises(
        ValueError,
        match=r"^timeout_policy\(default_ms\): default_ms must be a positive finite number of "
        r"milliseconds or None, got ",
    ):
        timeout_policy(default_ms)


@pytest.mark.parametrize("clock", [3, "loop", object()], ids=["int", "str", "object"])
def test_a_clock_without_call_later_is_refused_when_the_policy_is_made(clock: Any) -> None:
    with pytest.raises(
        TypeError,
        match=r"^timeout_policy\(clock\): clock must have a call_later\(delay, callback\) "
        rf"method, or be None for the event loop's timer; got {type(clock).__name__}$",
    ):
        timeout_policy(100, clock=clock)


def test_the_loop_clock_reaches_a_sync_body_run_by_execute(system: ToolSystem) -> None:
    """With the default clock, a plain body that waits on its signal in ``system.execute``
    still sees the deadline (the caller's loop must stay free to fire it)."""
    system.tools.on_execute(timeout_policy())

    def body(args: Any, ctx: Any) -> str:
        assert ctx.signal.wait(WAIT), "the deadline never reached the body"
        return "late"

    system.tools.register(echo(execute=body, timeout_ms=20))
    assert text(system.execute(call())) == "Error: tool call timed out after 20ms"


def test_the_loop_clock_reaches_an_async_body(system: ToolSystem) -> None:
    system.tools.on_execute(timeout_policy())

    async def body(args: Any, ctx: Any) -> str:
        await asyncio.wait_for(_aborted(ctx.signal), WAIT)
        return "late"

    system.tools.register(echo(execute=body, timeout_ms=20))
    assert text(system.execute(call())) == "Error: tool call timed out after 20ms"


async def _aborted(signal: AbortSignal) -> Any:
    return await signal
