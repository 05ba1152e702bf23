"""Cooperative cancellation and its precedence.

Scenarios that abort while a hook waits run on one event loop (``execute_async`` inside
``asyncio.run``) with ``asyncio.Event`` gates: the hook opens ``reached`` and waits for
``release``; the test aborts the caller, then releases the hook.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from conftest import (
    WAIT,
    Logs,
    arun,
    await_event,
    block,
    call,
    context,
    echo,
    sources,
    spawn,
    text,
    wait,
)
from msgspec import UNSET

from dsh_tools import (
    AbortController,
    AbortSignal,
    Accept,
    Allow,
    Ask,
    Deny,
    FrozenDict,
    HarnessError,
    ToolExecutionSuccess,
    ToolSystem,
)

BEFORE_DISPATCH = {
    "message": "tool call aborted before dispatch",
    "info": {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"},
}
ABORTED = {
    "message": "tool call aborted",
    "info": {"name": "AbortError", "code": "ABORTED"},
}


class Gate:
    """A hook pauses here: ``reached`` opens, then it waits for ``release``."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def pause(self) -> None:
        self.reached.set()
        await await_event(self.release)


def abort_at(system: ToolSystem, gate: Gate, **call_fields: Any) -> Any:
    """Run one call; abort the caller once ``gate`` is reached, then release the gate."""
    controller = AbortController()

    async def scenario() -> Any:
        task = asyncio.create_task(
            system.execute_async(call(signal=controller.signal, **call_fields))
        )
        await await_event(gate.reached)
        controller.abort()
        gate.release.set()
        return await task

    return arun(scenario())


class Stages:
    """Counts every phase of a call of echo (registered here with ``body``)."""

    def __init__(self, system: ToolSystem, body: Any = None) -> None:
        self.counts = {"pre": 0, "around": 0, "body": 0, "post": 0, "result": 0}
        self.posts: list[Any] = []
        self.post_signals: list[AbortSignal] = []
        self.observed: list[tuple[Any, Any]] = []

        def default_body(args: Any, ctx: Any) -> Any:
            return args.get("text") or "" if isinstance(args, dict) else ""

        inner = body if body is not None else default_body

        def counted(args: Any, ctx: Any) -> Any:
            self.counts["body"] += 1
            return inner(args, ctx)

        if asyncio.iscoroutinefunction(inner):

            async def counted_async(args: Any, ctx: Any) -> Any:
                self.counts["body"] += 1
                return await inner(args, ctx)

            system.tools.register(echo(execute=counted_async))
        else:
            system.tools.register(echo(execute=counted))

        async def pre(exec: Any, next: Any) -> Any:
            self.counts["pre"] += 1
            return await next()

        async def around(exec: Any, next: Any) -> Any:
            self.counts["around"] += 1
            return await next()

        async def post(exec: Any, result: Any, next: Any) -> Any:
            self.counts["post"] += 1
            self.posts.append(result)
            self.post_signals.append(exec.signal)
            return await next()

        def observe(exec: Any, result: Any) -> None:
            self.counts["result"] += 1
            self.observed.append((exec, result))

        system.tools.on_pre_execute(pre)
        system.tools.on_execute(around)
        system.tools.on_post_execute(post)
        system.tools.on_result(observe)


def test_rp77_a_pre_aborted_call_touches_only_the_observers(system: ToolSystem) -> None:
    stages = Stages(system)
    signal = AbortSignal.aborted_signal("stop")
    arguments = {"nested": {"value": 1}}
    result = system.execute(call("echo", arguments, signal=signal))
    assert stages.counts == {"pre": 0, "around": 0, "body": 0, "post": 0, "result": 1}
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "Error: tool call aborted before dispatch"}],
        "is_error": True,
        "error": BEFORE_DISPATCH,
    }
    ((exec, observed),) = stages.observed
    assert observed is result
    assert exec.sealed
    assert exec.token is not None
    assert exec.signal is signal
    assert exec.arguments == arguments
    assert exec.arguments is not arguments
    assert type(exec.arguments) is FrozenDict
    assert type(exec.arguments["nested"]) is FrozenDict


def pausing_pre(system: ToolSystem, gate: Gate, then: Any) -> None:
    async def pre(exec: Any, next: Any) -> Any:
        await gate.pause()
        return await then(next)

    system.tools.on_pre_execute(pre, prepend=True)


def test_rp78_an_abort_during_pre_execute_stops_before_dispatch(system: ToolSystem) -> None:
    stages = Stages(system)
    gate = Gate()

    async def allow(next: Any) -> Any:
        return await next()

    pausing_pre(system, gate, allow)
    result = abort_at(system, gate)
    assert result.to_dict()["error"] == BEFORE_DISPATCH
    assert stages.counts["body"] == 0
    assert stages.posts == [result]


def test_rp79_a_denial_after_an_abort_during_pre_is_the_denial(system: ToolSystem) -> None:
    Stages(system)
    gate = Gate()

    async def deny(next: Any) -> Any:
        return Deny("policy denied the call")

    pausing_pre(system, gate, deny)
    assert abort_at(system, gate).to_dict() == {
        "content": [{"type": "text", "text": "Error: policy denied the call"}],
        "is_error": True,
        "error": {"message": "policy denied the call"},
    }


def test_rp79_a_raise_after_an_abort_during_pre_is_that_error(system: ToolSystem) -> None:
    Stages(system)
    gate = Gate()

    async def interrupted(next: Any) -> Any:
        raise RuntimeError("gate interrupted")

    pausing_pre(system, gate, interrupted)
    assert abort_at(system, gate).to_dict() == {
        "content": [{"type": "text", "text": "Error: gate interrupted"}],
        "is_error": True,
        "error": {"message": "gate interrupted"},
    }


def test_rp80_a_guard_denial_beats_an_abort_during_pre(system: ToolSystem) -> None:
    Stages(system)
    gate = Gate()

    async def allow(next: Any) -> Any:
        return Allow()

    pausing_pre(system, gate, allow)
    system.tools.guard(lambda exec: "late guard")
    assert text(abort_at(system, gate)) == "Error: late guard"


def test_rp81_an_abort_while_a_wrapper_holds_its_own_signal_stops_dispatch(
    system: ToolSystem,
) -> None:
    stages = Stages(system)
    gate = Gate()
    own = AbortController()

    async def wrapper(exec: Any, next: Any) -> Any:
        exec.signal = own.signal
        await gate.pause()
        return await next()

    system.tools.on_execute(wrapper)
    result = abort_at(system, gate)
    assert result.to_dict()["error"] == BEFORE_DISPATCH
    assert stages.counts["body"] == 0
    assert not own.signal.aborted


def test_rp82_an_already_aborted_wrapper_signal_stops_dispatch(system: ToolSystem) -> None:
    stages = Stages(system)

    async def wrapper(exec: Any, next: Any) -> Any:
        exec.signal = AbortSignal.aborted_signal("wrapper gave up")
        return await next()

    system.tools.on_execute(wrapper)
    result = system.execute(call())
    assert result.to_dict()["error"] == BEFORE_DISPATCH
    assert stages.counts["body"] == 0


def test_rp83_a_short_circuit_overtaken_by_abort_is_before_dispatch(system: ToolSystem) -> None:
    stages = Stages(system)
    gate = Gate()

    async def wrapper(exec: Any, next: Any) -> Any:
        await gate.pause()
        return ToolExecutionSuccess("cached", [block("cached")], UNSET, [context("wrapper")])

    system.tools.on_execute(wrapper)
    result = abort_at(system, gate)
    assert result.to_dict()["error"] == BEFORE_DISPATCH
    assert sources(result) == ["wrapper"]
    assert stages.counts["body"] == 0


def deferring(label: str) -> Any:
    def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(context(label))
        return "done"

    return body


def test_rp84_an_abort_after_the_body_returned_is_aborted_with_its_contexts(
    system: ToolSystem,
) -> None:
    stages = Stages(system, deferring("child"))
    gate = Gate()

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        await gate.pause()
        return result

    system.tools.on_execute(wrapper)
    result = abort_at(system, gate)
    assert result.to_dict()["error"] == ABORTED
    assert text(result) == "Error: tool call aborted"
    assert sources(result) == ["child"]
    assert stages.counts["body"] == 1


def test_rp85_an_abort_during_post_keeps_body_and_post_contexts(system: ToolSystem) -> None:
    Stages(system, deferring("child"))
    gate = Gate()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        decision = await next()
        await gate.pause()
        return Accept(additional_contexts=[*decision.additional_contexts, context("post")])

    system.tools.on_post_execute(post)
    result = abort_at(system, gate)
    assert result.to_dict()["error"] == ABORTED
    assert sources(result) == ["child", "post"]


def test_rp86_a_wrapper_failure_after_an_abort_is_that_failure(system: ToolSystem) -> None:
    stages = Stages(system)
    gate = Gate()

    async def wrapper(exec: Any, next: Any) -> Any:
        await gate.pause()
        raise HarnessError("wrapper failed", "WRAPPER_FAILURE")

    system.tools.on_execute(wrapper)
    result = abort_at(system, gate)
    assert text(result) == "Error: wrapper failed"
    assert result.to_dict()["error"]["info"] == {
        "name": "HarnessError",
        "code": "WRAPPER_FAILURE",
    }
    assert stages.counts["body"] == 0


def test_rp86_a_post_failure_after_an_abort_is_that_failure(system: ToolSystem) -> None:
    Stages(system)
    gate = Gate()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await next()
        await gate.pause()
        raise HarnessError("post-policy failed", "POST_FAILURE")

    system.tools.on_post_execute(post)
    result = abort_at(system, gate)
    assert text(result) == "Error: post-policy failed"
    assert result.to_dict()["error"]["info"]["code"] == "POST_FAILURE"


def test_rp87_a_body_that_raises_on_abort_keeps_its_error(system: ToolSystem) -> None:
    gate = Gate()

    async def body(args: Any, ctx: Any) -> Any:
        gate.reached.set()
        await ctx.signal
        raise HarnessError("tool failed", "TOOL_FAILURE")

    Stages(system, body)
    gate.release.set()
    result = abort_at(system, gate)
    assert text(result) == "Error: tool failed"
    assert result.to_dict()["error"]["info"] == {"name": "HarnessError", "code": "TOOL_FAILURE"}


def test_a_cancelled_body_whose_cleanup_raises_is_still_aborted(
    system: ToolSystem, logs: Logs
) -> None:
    # A body that never reads its signal is cancelled; one that catches the cancellation to
    # clean up and fails doing so was cancelled all the same: ABORTED with the abort's reason,
    # the cleanup's error in the log, not a tool failure the model would act on.
    gate = Gate()

    async def body(args: Any, ctx: Any) -> Any:
        gate.reached.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise ValueError("closing the connection failed") from None

    Stages(system, body)
    gate.release.set()
    result = abort_at(system, gate)
    assert result.to_dict()["error"]["info"] == {"name": "AbortError", "code": "ABORTED"}
    assert result.abort_reason is not None
    (warning,) = logs.wait_for_warnings(1)
    assert "closing the connection failed" in warning


def test_rp87_a_sync_body_that_raises_on_abort_keeps_its_error(system: ToolSystem) -> None:
    started = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        started.set()
        assert ctx.signal.wait(WAIT)
        raise HarnessError("tool failed", "TOOL_FAILURE")

    Stages(system, body)
    controller = AbortController()
    future = spawn(system, call(signal=controller.signal))
    wait(started)
    controller.abort()
    result = future.result(WAIT)
    assert result.to_dict()["error"] == {
        "message": "tool failed",
        "info": {"name": "HarnessError", "code": "TOOL_FAILURE"},
    }


def test_rp88_the_body_sees_a_fusion_of_the_caller_and_wrapper_signals(
    system: ToolSystem,
) -> None:
    gate = Gate()
    body_signals: list[AbortSignal] = []
    replacement = AbortController()

    async def body(args: Any, ctx: Any) -> str:
        body_signals.append(ctx.signal)
        gate.reached.set()
        await ctx.signal
        return "resolved on abort"

    stages = Stages(system, body)

    async def wrapper(exec: Any, next: Any) -> Any:
        previous = exec.signal
        exec.signal = replacement.signal
        try:
            return await next()
        finally:
            exec.signal = previous

    system.tools.on_execute(wrapper)
    gate.release.set()
    controller = AbortController()

    async def scenario() -> Any:
        task = asyncio.create_task(system.execute_async(call(signal=controller.signal)))
        await await_event(gate.reached)
        controller.abort()
        return await task

    result = arun(scenario())
    (seen,) = body_signals
    assert seen is not controller.signal
    assert seen is not replacement.signal
    assert seen.aborted
    assert not replacement.signal.aborted
    assert result.to_dict()["error"] == ABORTED
    assert stages.post_signals == [controller.signal]
    assert stages.post_signals[0] is controller.signal


def test_rp88_without_wrappers_the_body_gets_the_callers_signal(system: ToolSystem) -> None:
    seen: list[AbortSignal] = []

    def body(args: Any, ctx: Any) -> str:
        seen.append(ctx.signal)
        return "ok"

    system.tools.register(echo(execute=body))
    signal = AbortController().signal
    system.execute(call(signal=signal))
    assert seen[0] is signal


def test_rp89_a_body_ignoring_its_signal_keeps_the_call_pending(system: ToolSystem) -> None:
    started = threading.Event()
    release = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(context("nested"))
        started.set()
        assert release.wait(WAIT)
        return "finished anyway"

    system.tools.register(echo(execute=body))
    controller = AbortController()
    future = spawn(system, call(signal=controller.signal))
    wait(started)
    controller.abort()
    done, _ = concurrent.futures.wait([future], timeout=0.1)
    assert not done
    release.set()
    result = future.result(WAIT)
    assert result.to_dict()["error"] == ABORTED
    assert sources(result) == ["nested"]


def test_rp90_invalid_output_after_an_abort_beats_cancellation(system: ToolSystem) -> None:
    gate = Gate()

    async def body(args: Any, ctx: Any) -> Any:
        gate.reached.set()
        await ctx.signal
        return 42

    system.tools.register(echo(execute=body))
    gate.release.set()
    result = abort_at(system, gate)
    assert result.to_dict()["error"]["info"] == {
        "name": "ToolOutputError",
        "code": "INVALID_TOOL_OUTPUT",
    }


def test_every_stage_but_the_body_sees_the_callers_signal(make_system: Any) -> None:
    seen: dict[str, AbortSignal] = {}

    class Approval:
        def request(self, **kwargs: Any) -> str:
            seen["approval"] = kwargs["signal"]
            return "allowed-once"

    system = make_system(approval=Approval())

    def finalizer(exec: Any, result: Any) -> None:
        seen["finalizer"] = exec.signal

    def body(args: Any, ctx: Any) -> str:
        seen["body"] = ctx.signal
        return "hi"

    system.tools.register(echo(execute=body, finalize_content=finalizer))

    async def pre(exec: Any, next: Any) -> Any:
        seen["pre"] = exec.signal
        return Ask("check")

    def guard(exec: Any) -> None:
        seen["guard"] = exec.signal

    async def wrapper(exec: Any, next: Any) -> Any:
        seen["wrapper"] = exec.signal
        exec.signal = AbortController().signal
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen["post"] = exec.signal
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.guard(guard)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    system.tools.on_result(lambda exec, result: seen.setdefault("observer", exec.signal))
    signal = AbortController().signal
    assert text(system.execute(call(agent="A", signal=signal))) == "hi"
    body_signal = seen.pop("body")
    assert body_signal is not signal
    assert sorted(seen) == sorted(
        ["approval", "finalizer", "pre", "guard", "wrapper", "post", "observer"]
    )
    assert all(value is signal for value in seen.values())
