"""Code Mode dispatch bridge: sub-calls, the per-run pool, arguments and contexts
(most tests run a scripted in-process runtime; those that need it, the real subprocess runtime)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import msgspec
import pydantic
import pytest
from code_mode_support import (
    FakeProgram,
    FakeRuntime,
    Gates,
    code_system,
    dispatch_events,
    echo_tool,
    first_of,
    run_code,
    texts,
    value_of,
    wait_for,
)
from structlog.testing import capture_logs

import dsh_tools.codebridge._bridge as bridge_module
from dsh_tools import (
    DEFAULT,
    AbortController,
    Accept,
    Block,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
    tool,
)
from dsh_tools.codebridge import CodeSandbox, SubprocessCodeRuntime
from dsh_tools.codebridge._dispatch_log import (
    LOGGED_ARGUMENTS_LIMIT,
    LOGGED_VALUES_LIMIT,
    PREVIEW_CHARS,
    logged_arguments,
)
from dsh_tools.registry import snapshot_json, thaw


async def settle() -> None:
    """Let every ready callback on the loop run (for checks that something did NOT happen)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(system: ToolSystem, scenario: Any) -> Any:
    """Run ``scenario(system)`` (a coroutine function) on a fresh event loop."""
    return asyncio.run(scenario(system))


def context_text(context: Any) -> str:
    """The text of a hook context's single content block."""
    (block,) = context["content"]
    text: str = block["text"]
    return text


def depth_of(value: Any) -> tuple[int, Any]:
    """How many lists wrap the leaf, and the leaf (iteratively)."""
    depth = 0
    while isinstance(value, list):
        (value,) = value
        depth += 1
    return depth, value


def depth_tool(seen: list[Any]) -> ToolDefinition:
    """``depth`` measures how deep its ``json`` argument ``value`` nests lists."""

    def body(args: Any, ctx: Any) -> int:
        depth, leaf = depth_of(args["value"])
        seen.append((depth, leaf))
        return depth

    return define_tool(
        name="depth",
        description="Measure list nesting.",
        parameters={"value": {"type": "json", "required": True}},
        output=ToolOutput(
            schema={"type": "integer"},
            render=lambda args, value: [{"type": "text", "text": str(value)}],
        ),
        execute=body,
    )


# --- sequential calls, the outer token -----------------------------------------------------------


def test_two_sequential_calls_return_values_logs_and_settle_events() -> None:
    seen: list[Any] = []

    async def program(p: FakeProgram) -> Any:
        first = await p.call("echo", {"value": "one"})
        p.print("saw", first)
        return await p.call("echo", {"value": "two"})

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=seen)]) as system:
        result = system.execute(run_code())
        settles = dispatch_events(system)
    assert not result.is_error
    assert value_of(result) == {"logs": ["saw echo:one"], "result": "echo:two"}
    assert texts(result.content) == ["saw echo:one\necho:two"]
    assert seen == [{"value": "one"}, {"value": "two"}]
    assert settles == [
        {
            "parent_call_id": "call-1",
            "sub_call_id": f"call-1:code:{n}",
            "name": "echo",
            "arguments": {"value": value},
            "is_error": False,
            "content": [{"type": "text", "text": f"echo:{value}"}],
        }
        for n, value in ((1, "one"), (2, "two"))
    ]
    assert "meta" not in result.to_dict()


def test_a_signal_swapping_wrapper_on_run_code_and_the_sub_calls_parent_token() -> None:
    observed: list[tuple[str, Any, Any, Any]] = []

    async def swap_signal(exec: Any, next: Any) -> Any:
        if exec.name != "run_code":
            return await next()
        previous = exec.signal
        exec.signal = AbortController().signal
        try:
            return await next()
        finally:
            exec.signal = previous

    def observe(exec: Any, result: Any) -> None:
        observed.append((exec.name, exec, exec.token, exec.parent))

    async def program(p: FakeProgram) -> Any:
        await p.call("echo", {"value": "x"})
        return "done"

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_execute(swap_signal)
        system.tools.on_result(observe)
        result = system.execute(run_code())
    assert texts(result.content) == ["done"]
    (sub,) = [o for o in observed if o[0] == "echo"]
    (outer,) = [o for o in observed if o[0] == "run_code"]
    _, sub_exec, _, parent = sub
    _, outer_exec, outer_token, _ = outer
    assert parent is outer_token
    assert parent is not outer_exec
    assert parent is not sub_exec
    with pytest.raises(AttributeError):
        parent.id = 0
    with pytest.raises(AttributeError):
        parent.extra = 1


def test_aborting_a_wrapper_signal_aborts_the_run() -> None:
    """The run follows the signal its body receives, wrapper swaps
    included."""
    gates = Gates()
    wrapper_controller = AbortController()

    async def swap_signal(exec: Any, next: Any) -> Any:
        if exec.name != "run_code":
            return await next()
        previous = exec.signal
        exec.signal = wrapper_controller.signal
        try:
            return await next()
        finally:
            exec.signal = previous

    async def program(p: FakeProgram) -> Any:
        return await p.call("read", {"value": "slow"})

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await gates.entered("slow")
        wrapper_controller.abort("budget spent")
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[gates.tool("read")]) as system:
        system.tools.on_execute(swap_signal)
        result = run(system, scenario)
    assert result.is_error
    assert texts(result.content) == ["Error: code run failed (abort): budget spent"]
    assert gates.aborted == ["slow"]


# --- the per-run pool ----------------------------------------------------------------------------


def test_three_safe_calls_overlap_and_join_in_submission_order() -> None:
    gates = Gates()

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("read", {"value": v}) for v in ("a", "b", "c")]
        return ",".join(await asyncio.gather(*calls))

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        for value in ("a", "b", "c"):
            await gates.entered(value)
        assert gates.live == 3
        gates.release("c", "a", "b")
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[gates.tool("read")]) as system:
        result = run(system, scenario)
        starts = dispatch_events(system, "tool/code-dispatch-start")
        settles = dispatch_events(system)
    assert gates.peak == 3
    assert [e["sub_call_id"] for e in starts] == [f"call-1:code:{n}" for n in (1, 2, 3)]
    assert {e["sub_call_id"] for e in settles} == {f"call-1:code:{n}" for n in (1, 2, 3)}
    assert value_of(result)["result"] == "read:a,read:b,read:c"


def test_an_exclusive_call_waits_for_earlier_calls_and_blocks_later_ones() -> None:
    gates = Gates()

    async def program(p: FakeProgram) -> Any:
        calls = [
            await p.fire("read", {"value": "r1"}),
            await p.fire("read", {"value": "r2"}),
            await p.fire("write", {"value": "w"}),
            await p.fire("read", {"value": "r3"}),
        ]
        return ",".join(await asyncio.gather(*calls))

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await gates.entered("r1")
        await gates.entered("r2")
        await settle()
        assert not gates.is_entered("w")
        gates.release("r1", "r2")
        await gates.entered("w")
        await settle()
        assert gates.live == 1
        assert not gates.is_entered("r3")
        gates.release("w")
        await gates.entered("r3")
        gates.release("r3")
        return await wait_for(task)

    with code_system(
        FakeRuntime(program), tools=[gates.tool("read"), gates.tool("write", safe=False)]
    ) as system:
        result = run(system, scenario)
    assert value_of(result)["result"] == "read:r1,read:r2,write:w,read:r3"
    assert gates.log.index("exit r1") < gates.log.index("enter w")
    assert gates.log.index("exit r2") < gates.log.index("enter w")
    assert gates.log.index("exit w") < gates.log.index("enter r3")


def test_max_parallel_sub_calls_bounds_the_live_bodies() -> None:
    gates = Gates()

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("read", {"value": v}) for v in ("a", "b", "c")]
        return ",".join(await asyncio.gather(*calls))

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await gates.entered("a")
        await gates.entered("b")
        await settle()
        assert gates.live == 2
        assert not gates.is_entered("c")
        gates.release("b")
        await gates.entered("c")
        assert gates.live == 2
        gates.release("a", "c")
        return await wait_for(task)

    with code_system(
        FakeRuntime(program), tools=[gates.tool("read")], max_parallel_sub_calls=2
    ) as system:
        result = run(system, scenario)
    assert gates.peak == 2
    assert value_of(result)["result"] == "read:a,read:b,read:c"


def test_one_sub_call_slot_runs_safe_calls_one_after_another() -> None:
    gates = Gates()

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("read", {"value": v}) for v in ("a", "b", "c")]
        return ",".join(await asyncio.gather(*calls))

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        for value, following in (("a", "b"), ("b", "c"), ("c", None)):
            await gates.entered(value)
            await settle()
            if following is not None:
                assert not gates.is_entered(following)
            gates.release(value)
        return await wait_for(task)

    with code_system(
        FakeRuntime(program), tools=[gates.tool("read")], max_parallel_sub_calls=1
    ) as system:
        result = run(system, scenario)
    assert gates.log == ["enter a", "exit a", "enter b", "exit b", "enter c", "exit c"]
    assert gates.peak == 1
    assert value_of(result)["result"] == "read:a,read:b,read:c"


def test_calls_of_a_tool_without_classifier_never_overlap() -> None:
    intervals: list[str] = []

    async def probe_body(args: Any, ctx: Any) -> str:
        intervals.append(f"enter {args['value']}")
        await asyncio.sleep(0.02)
        intervals.append(f"exit {args['value']}")
        return str(args["value"])

    probe = define_tool(
        name="probe",
        description="A 20 ms probe without a concurrency classifier.",
        parameters={"value": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=probe_body,
    )

    async def program(p: FakeProgram) -> Any:
        values = await asyncio.gather(*(p.call("probe", {"value": v}) for v in ("a", "b", "c")))
        return ",".join(values)

    with code_system(FakeRuntime(program), tools=[probe]) as system:
        result = system.execute(run_code())
    assert intervals == ["enter a", "exit a", "enter b", "exit b", "enter c", "exit c"]
    assert value_of(result)["result"] == "a,b,c"


# --- registry changes, ordered stages, settlement ------------------------------------------------


def test_a_binding_whose_tool_was_unregistered_fails_as_an_unknown_tool() -> None:
    ran: list[Any] = []
    caught: list[str] = []
    disposers: list[Any] = []

    async def program(p: FakeProgram) -> Any:
        disposers[0]()
        caught.append(await p.attempt("ephemeral", {"value": "x"}))
        return "after"

    with code_system(FakeRuntime(program)) as system:
        disposers.append(system.tools.register(echo_tool("ephemeral", seen=ran)))
        result = system.execute(run_code())
    assert caught == ['unknown tool "ephemeral"']
    assert ran == []
    assert value_of(result)["result"] == "after"


def test_the_next_start_waits_for_the_previous_pre_execute() -> None:
    stages: list[str] = []
    gate = asyncio.Event()
    first_entered = asyncio.Event()

    async def pre(exec: Any, next: Any) -> Any:
        if exec.parent is None:
            return await next()
        number = exec.call_id.rsplit(":", 1)[1]
        stages.append(f"enter{number}")
        if number == "1":
            first_entered.set()
            await gate.wait()
        stages.append(f"exit{number}")
        return await next()

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("echo", {"value": v}) for v in ("a", "b")]
        return await asyncio.gather(*calls)

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await wait_for(first_entered.wait())
        await settle()
        assert stages == ["enter1"]
        gate.set()
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[echo_tool(safe=True)]) as system:
        system.tools.on_pre_execute(pre)
        result = run(system, scenario)
    assert stages == ["enter1", "exit1", "enter2", "exit2"]
    assert value_of(result)["result"] == ["echo:a", "echo:b"]


def test_a_safe_call_after_an_exclusive_one_waits_for_its_post_execute() -> None:
    log: list[str] = []
    gate = asyncio.Event()
    post_entered = asyncio.Event()

    async def pre(exec: Any, next: Any) -> Any:
        if exec.parent is not None:
            log.append(f"pre {exec.name}")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.name == "writer":
            log.append("post writer enter")
            post_entered.set()
            await gate.wait()
            log.append("post writer exit")
        return await next()

    def body(name: str) -> Any:
        def execute(args: Any, ctx: Any) -> str:
            log.append(f"body {name}")
            return f"{name}:{args['value']}"

        return execute

    writer = define_tool(
        name="writer",
        description="An exclusive writer.",
        parameters={"value": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=body("writer"),
    )
    reader = define_tool(
        name="reader",
        description="A safe reader.",
        parameters={"value": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=body("reader"),
        is_concurrency_safe=lambda args: True,
    )

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("writer", {"value": "w"}), await p.fire("reader", {"value": "r"})]
        return await asyncio.gather(*calls)

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await wait_for(post_entered.wait())
        await settle()
        assert "pre reader" not in log
        assert "body reader" not in log
        gate.set()
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[writer, reader]) as system:
        system.tools.on_pre_execute(pre)
        system.tools.on_post_execute(post)
        result = run(system, scenario)
    assert log == [
        "pre writer",
        "body writer",
        "post writer enter",
        "post writer exit",
        "pre reader",
        "body reader",
    ]
    assert value_of(result)["result"] == ["writer:w", "reader:r"]


def test_a_fired_call_mid_post_execute_at_settlement_settles_once_as_an_error() -> None:
    post_entered = asyncio.Event()
    gate = asyncio.Event()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.parent is not None:
            post_entered.set()
            await first_of(gate, exec.signal)
        return await next()

    async def program(p: FakeProgram) -> Any:
        await p.fire("echo", {"value": "fire"})
        await post_entered.wait()
        return "done"

    with code_system(FakeRuntime(program), tools=[echo_tool(safe=True)]) as system:
        system.tools.on_post_execute(post)
        result = system.execute(run_code())
        events = system.session.events
    assert texts(result.content) == ["done"]
    settles = [e for e in events if e.type == "tool/code-dispatch"]
    assert len(settles) == 1
    assert settles[0].data["is_error"] is True
    (outer_result,) = [i for i, e in enumerate(events) if e.type == "tool/result"]
    assert events.index(settles[0]) < outer_result


def test_contexts_follow_commit_order_even_when_bodies_finish_out_of_order() -> None:
    gates = Gates()
    post_order: list[str] = []

    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.parent is None:
            return await next()
        post_order.append(exec.call_id)
        context = {"content": [{"type": "text", "text": f"ctx:{exec.call_id}"}]}
        return Accept(additional_contexts=[context])

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("read", {"value": v}) for v in ("a", "b")]
        return await asyncio.gather(*calls)

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await gates.entered("a")
        await gates.entered("b")
        gates.release("b")
        await gates.exited("b")
        gates.release("a")
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[gates.tool("read")]) as system:
        system.tools.on_post_execute(post)
        result = run(system, scenario)
    assert gates.log.index("exit b") < gates.log.index("exit a")
    assert post_order == ["call-1:code:1", "call-1:code:2"]
    assert [context_text(c) for c in result.additional_contexts] == [
        "ctx:call-1:code:1",
        "ctx:call-1:code:2",
    ]


def test_a_later_value_is_delivered_only_after_every_earlier_call_committed() -> None:
    gates = Gates()
    received: list[str] = []

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("read", {"value": v}) for v in ("a", "b")]
        for call in calls:
            call.add_done_callback(lambda done: received.append(done.result()))
        return await asyncio.gather(*calls)

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await gates.entered("a")
        await gates.entered("b")
        gates.release("b")
        await gates.exited("b")
        await settle()
        assert received == []
        gates.release("a")
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[gates.tool("read")]) as system:
        result = run(system, scenario)
    assert received == ["read:a", "read:b"]
    assert value_of(result)["result"] == ["read:a", "read:b"]


def test_a_queued_call_is_abandoned_without_events_when_the_program_fails() -> None:
    gates = Gates()
    handles: list[asyncio.Task[Any]] = []

    async def program(p: FakeProgram) -> Any:
        handles.append(await p.fire("writer", {"value": "w1"}))
        handles.append(await p.fire("writer", {"value": "w2"}))
        await gates.entered("w1")
        return p.fail("exception", "Traceback ...\nRuntimeError: program raised")

    with code_system(FakeRuntime(program), tools=[gates.tool("writer", safe=False)]) as system:
        result = system.execute(run_code())
        starts = dispatch_events(system, "tool/code-dispatch-start")
        settles = dispatch_events(system)
    assert result.is_error
    assert gates.started == ["w1"]
    assert gates.aborted == ["w1"]
    assert [e["arguments"] for e in starts] == [{"value": "w1"}]
    assert [e["arguments"] for e in settles] == [{"value": "w1"}]
    w2 = handles[1]
    assert w2.done()
    assert str(w2.exception()) == (
        "run_code run is over (run_code settled); writer tool call abandoned"
    )


# --- failures the program sees -------------------------------------------------------------------


def test_a_tool_failure_is_caught_by_the_program() -> None:
    def fail(args: Any, ctx: Any) -> str:
        raise RuntimeError("deliberate failure")

    failing = define_tool(
        name="fail",
        description="Always fails.",
        parameters={},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=fail,
    )

    async def program(p: FakeProgram) -> Any:
        return "caught: " + await p.attempt("fail", {})

    with code_system(FakeRuntime(program), tools=[failing]) as system:
        result = system.execute(run_code())
    assert texts(result.content) == ["caught: deliberate failure"]


def test_a_pre_execute_denial_reaches_the_program_as_the_message() -> None:
    messages: list[str] = []

    async def deny_sub_calls(exec: Any, next: Any) -> Any:
        if exec.parent is not None:
            return Deny("not on my watch")
        return await next()

    async def program(p: FakeProgram) -> Any:
        messages.append(await p.attempt("echo", {"value": "x"}))
        return "ok"

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_pre_execute(deny_sub_calls)
        system.execute(run_code())
    (message,) = messages
    assert "not on my watch" in message


def test_a_throwing_pre_execute_listener_fails_the_call_and_skips_post_execute() -> None:
    messages: list[str] = []
    ran: list[Any] = []
    posts: list[str] = []

    async def explode(exec: Any, next: Any) -> Any:
        if exec.parent is not None:
            raise RuntimeError("gate exploded")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        posts.append(exec.name)
        return await next()

    async def program(p: FakeProgram) -> Any:
        messages.append(await p.attempt("echo", {"value": "x"}))
        return "ok"

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=ran)]) as system:
        system.tools.on_pre_execute(explode)
        system.tools.on_post_execute(post)
        system.execute(run_code())
        settles = dispatch_events(system)
    assert messages == ["gate exploded"]
    assert ran == []
    assert posts == ["run_code"]
    assert len(settles) == 1
    assert settles[0]["is_error"] is True


def test_a_raising_dispatch_log_listener_logs_the_unshaped_content_and_warns() -> None:
    async def shaper(log: Any, next: Any) -> Any:
        raise RuntimeError("shaper broke")

    async def program(p: FakeProgram) -> Any:
        return await p.call("echo", {"value": "x"})

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(shaper)
        with capture_logs() as logs:
            result = system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    assert value_of(result)["result"] == "echo:x"
    assert settle_event["content"] == [{"type": "text", "text": "echo:x"}]
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [w["event"] for w in warnings] == [
        "tools: code-dispatch-log listener failed for echo: shaper broke; "
        "logging the unshaped content"
    ]
    assert warnings[0]["call_id"] == "call-1:code:1"
    assert warnings[0]["tool"] == "echo"


def test_a_sub_calls_log_lines_name_the_agent_of_its_run() -> None:
    async def shaper(log: Any, next: Any) -> Any:
        raise RuntimeError("shaper broke")

    def broken(args: Any, ctx: Any) -> Any:
        raise RuntimeError("the body broke")

    async def program(p: FakeProgram) -> Any:
        await p.attempt("broken", {})
        return await p.call("echo", {"value": "x"})

    broken_tool = define_tool(
        name="broken",
        description="Always breaks.",
        parameters={},
        output=ToolOutput({"type": "string"}, lambda a, v: [{"type": "text", "text": v}]),
        execute=broken,
    )
    with code_system(FakeRuntime(program), tools=[echo_tool(), broken_tool]) as system:
        system.tools.on_code_dispatch_log(shaper)
        with capture_logs() as logs:
            system.execute(run_code(agent="coder"))
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert {(w["call_id"], w["tool"]) for w in warnings} == {
        ("call-1:code:1", "broken"),  # the body's failure, then the listener's, per sub-call
        ("call-1:code:2", "echo"),
    }
    assert all(w["agent"] == "coder" for w in warnings), warnings


# --- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        (({1, 2},), "tool arguments must be lossless JSON: "),
        (((1, 2),), "tool arguments must be lossless JSON: "),
        ((float("nan"),), "tool arguments must be lossless JSON: "),
        (({1: "x"},), "tool arguments must be lossless JSON: "),
        (
            (),
            "tool arguments must be lossless JSON (call the tool with an arguments object, "
            "e.g. `{}`)",
        ),
    ],
    ids=["set", "tuple", "nan", "int-key", "no-argument"],
)
def test_non_lossless_binding_arguments_fail_before_dispatch(
    arguments: tuple[Any, ...], detail: str
) -> None:
    ran: list[Any] = []
    messages: list[str] = []

    async def program(p: FakeProgram) -> Any:
        messages.append(await p.attempt("echo", *arguments))
        return "ok"

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=ran)]) as system:
        system.execute(run_code())
        events = [e.type for e in system.session.events]
    (message,) = messages
    if arguments:
        assert message.startswith(detail)
        assert len(message) > len(detail)
    else:
        assert message == detail
    assert ran == []
    assert events == ["tool/call", "tool/result"]


def test_rejected_arguments_consume_no_submission_number() -> None:
    async def program(p: FakeProgram) -> Any:
        await p.attempt("echo", {"bad": {1, 2}})
        return await p.call("echo", {"value": "x"})

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    assert settle_event["sub_call_id"] == "call-1:code:1"


def test_the_tool_and_the_log_get_equal_but_distinct_argument_copies() -> None:
    seen: list[Any] = []
    arguments = {"value": "x", "nested": ["same"]}

    async def program(p: FakeProgram) -> Any:
        return await p.call("echo", arguments)

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=seen)]) as system:
        system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    (received,) = seen
    logged = settle_event["arguments"]
    assert received == arguments
    assert logged == arguments
    assert received is not logged
    assert received["nested"] is not logged["nested"]


def test_a_tool_cannot_mutate_its_arguments_or_the_logged_copy() -> None:
    attempts: list[str] = []

    def mutate(args: Any, ctx: Any) -> str:
        try:
            args["items"].append("evil")
        except TypeError as exc:
            attempts.append(f"refused: {type(exc).__name__}")
        return "tried"

    mutator = define_tool(
        name="mutator",
        description="Tries to change its arguments.",
        parameters={"items": {"type": "array", "items": {"type": "string"}, "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=mutate,
    )

    async def program(p: FakeProgram) -> Any:
        return await p.call("mutator", {"items": ["original"]})

    with code_system(FakeRuntime(program), tools=[mutator]) as system:
        result = system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    assert attempts == ["refused: TypeError"]
    assert value_of(result)["result"] == "tried"
    assert settle_event["arguments"] == {"items": ["original"]}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_a_5000_level_argument_through_an_in_process_binding() -> None:
    seen: list[Any] = []

    async def program(p: FakeProgram) -> Any:
        return await p.call("depth", {"value": _nested(5000)})

    with code_system(FakeRuntime(program), tools=[depth_tool(seen)]) as system:
        result = system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    assert seen == [(5000, "leaf")]
    assert value_of(result)["result"] == 5000
    assert depth_of(settle_event["arguments"]["value"]) == (5000, "leaf")


def test_a_5000_level_argument_through_the_real_worker() -> None:
    seen: list[Any] = []
    program = (
        'v = "leaf"\nfor _ in range(5000):\n    v = [v]\nreturn await tools.depth({"value": v})'
    )
    with code_system(DEFAULT, tools=[depth_tool(seen)]) as system:
        result = system.execute(run_code(program))
        (settle_event,) = dispatch_events(system)
    assert not result.is_error, result.content
    assert seen == [(5000, "leaf")]
    assert value_of(result)["result"] == 5000
    assert depth_of(settle_event["arguments"]["value"]) == (5000, "leaf")


def test_the_log_keeps_a_preview_of_arguments_above_its_limit_and_the_tool_gets_them_whole() -> (
    None
):
    seen: list[Any] = []
    big = {"value": "x" * (LOGGED_ARGUMENTS_LIMIT + 1)}

    async def program(p: FakeProgram) -> Any:
        await p.call("echo", {"value": "small"})
        return await p.call("echo", big)

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=seen)]) as system:
        result = system.execute(run_code())
        starts = dispatch_events(system, "tool/code-dispatch-start")
        settles = dispatch_events(system)
    assert not result.is_error
    assert seen == [{"value": "small"}, big]
    size = len(json.dumps(big, separators=(",", ":")))
    for events in (starts, settles):
        small, large = events
        assert small["arguments"] == {"value": "small"} and "arguments_bytes" not in small
        assert large["arguments_bytes"] == size
        preview = large["arguments"]
        assert preview.startswith('{"value":"xxx')
        assert preview.endswith(
            f"... [arguments of {size} JSON bytes; the session log keeps at most "
            f"{LOGGED_ARGUMENTS_LIMIT} bytes and {LOGGED_VALUES_LIMIT} values per call]"
        )
        assert len(preview) < 2 * PREVIEW_CHARS


def test_the_log_keeps_a_preview_of_arguments_of_many_small_values() -> None:
    # 5,000 empty objects are 15 KB of JSON but about 64 bytes each once decoded: kept whole,
    # a program's loop of such calls would make the log hold 20 times what it counts.
    many = snapshot_json({"items": [{}] * (LOGGED_VALUES_LIMIT + 1)})
    notice, size = logged_arguments(many)
    assert size == len(json.dumps(thaw(many), separators=(",", ":"))) < LOGGED_ARGUMENTS_LIMIT
    assert notice.startswith('{"items":[{},{}') and notice.endswith("values per call]")
    within = snapshot_json({"items": [{}] * (LOGGED_VALUES_LIMIT - 2)})  # with the list, the root
    copy, size = logged_arguments(within)
    assert size is None and copy == within and copy is not within


def test_arguments_nested_deeper_than_the_encoder_are_measured_without_it() -> None:
    deep = snapshot_json({"value": _nested(5000)})
    copy, size = logged_arguments(deep)
    assert size is None and copy is not deep
    assert depth_of(copy["value"]) == (5000, "leaf")
    wide_and_deep: Any = "y" * LOGGED_ARGUMENTS_LIMIT
    # Deeper than the encoder goes on any Python: 3.13 bounds its C recursion apart from the
    # recursion limit (5,000 levels encode there), where 3.11 and 3.12 stop it at that limit.
    for _ in range(20_000):
        wide_and_deep = [wide_and_deep]
    notice, size = logged_arguments(snapshot_json({"value": wide_and_deep}))
    assert size is not None and size > LOGGED_ARGUMENTS_LIMIT
    assert notice.startswith(f"... [arguments of {size} JSON bytes")
    # Escapes count as what they encode to: 55,000 control characters are 330,000 bytes.
    escaped: Any = "\x01" * 55_000
    for _ in range(1_500):
        escaped = [escaped]
    notice, size = logged_arguments(snapshot_json({"value": escaped}))
    assert size is not None and size > LOGGED_ARGUMENTS_LIMIT


# --- contexts ------------------------------------------------------------------------------------


def test_sub_call_contexts_reach_the_outer_result_in_call_order_with_source_and_meta() -> None:
    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.parent is None:
            return await next()
        context = {
            "content": [{"type": "text", "text": f"about {exec.call_id}"}],
            "source": {"kind": "plugin", "plugin": "auditor"},
            "meta": {"call": exec.call_id},
        }
        return Accept(additional_contexts=[context])

    async def program(p: FakeProgram) -> Any:
        await p.call("echo", {"value": "a"})
        await p.call("echo", {"value": "b"})
        return "ok"

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_post_execute(post)
        result = system.execute(run_code())
    assert [dict(c) for c in result.additional_contexts] == [
        {
            "content": [{"type": "text", "text": f"about call-1:code:{n}"}],
            "source": {"kind": "plugin", "plugin": "auditor"},
            "meta": {"call": f"call-1:code:{n}"},
        }
        for n in (1, 2)
    ]


def test_contexts_survive_a_run_that_fails_later() -> None:
    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.parent is None:
            return await next()
        return Accept(additional_contexts=[{"content": [{"type": "text", "text": "kept"}]}])

    async def program(p: FakeProgram) -> Any:
        await p.call("echo", {"value": "a"})
        return p.fail("exception", "program failed later")

    with code_system(FakeRuntime(program), mode="both", tools=[echo_tool()]) as system:
        system.tools.on_post_execute(post)
        result = system.execute(run_code())
    assert result.is_error
    assert texts(result.content) == ["Error: code run failed (exception): program failed later"]
    assert [context_text(c) for c in result.additional_contexts] == ["kept"]


# --- however run_code is called, outer policy over sub-call contexts ------------------------------


def _echo_twice(p: FakeProgram) -> Any:
    async def program() -> Any:
        return [await p.call("echo", {"value": "a"}), await p.call("echo", {"value": "b"})]

    return program()


def assert_dispatch_log(system: ToolSystem, count: int) -> None:
    """One ``tool/call`` first and one ``tool/result`` last; between them ``count`` sub-calls,
    started in submission order, each settled once after its own start (settles pair by
    ``sub_call_id`` and may interleave with later starts)."""
    events = system.session.events
    assert [events[0].type, events[-1].type] == ["tool/call", "tool/result"]
    inner = events[1:-1]
    starts = [e.data["sub_call_id"] for e in inner if e.type == "tool/code-dispatch-start"]
    settles = [e.data["sub_call_id"] for e in inner if e.type == "tool/code-dispatch"]
    assert len(inner) == 2 * count
    assert starts == [f"{events[0].data['call_id']}:code:{n}" for n in range(1, count + 1)]
    assert sorted(settles) == sorted(starts)
    positions = {(e.type, e.data["sub_call_id"]): i for i, e in enumerate(inner)}
    for sub_call_id in starts:
        assert (
            positions[("tool/code-dispatch-start", sub_call_id)]
            < positions[("tool/code-dispatch", sub_call_id)]
        )


def test_a_run_in_a_batch_records_its_dispatch_events_inside_the_turn() -> None:
    arguments = json.dumps({"code": "-", "description": "Echo twice"})
    batch = ExecuteBatch(calls=[ToolCall(call_id="t1", name="run_code", arguments=arguments)])
    with code_system(FakeRuntime(_echo_twice), tools=[echo_tool()]) as system:
        outcome = system.execute_batch(batch)
        assert_dispatch_log(system, 2)
    assert value_of(outcome.results[0])["result"] == ["echo:a", "echo:b"]


def test_a_run_asked_of_the_front_actor_records_its_dispatch_events() -> None:
    with code_system(FakeRuntime(_echo_twice), tools=[echo_tool()]) as system:
        result: Any = system.ref.ask(run_code())
        assert_dispatch_log(system, 2)
    assert value_of(result)["result"] == ["echo:a", "echo:b"]


def test_a_run_awaited_with_execute_async_records_its_dispatch_events() -> None:
    with code_system(FakeRuntime(_echo_twice), tools=[echo_tool()]) as system:
        result = asyncio.run(system.execute_async(run_code()))
        assert_dispatch_log(system, 2)
    assert value_of(result)["result"] == ["echo:a", "echo:b"]


def test_dispatch_events_pair_up_with_a_shaping_listener_on_the_system_loop() -> None:
    async def passthrough(log: Any, next: Any) -> Any:
        return await next()

    with code_system(FakeRuntime(_echo_twice), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(passthrough)
        system.ref.ask(run_code())
        assert_dispatch_log(system, 2)


def test_an_outer_block_discards_the_sub_calls_deferred_contexts() -> None:
    async def post(exec: Any, result: Any, next: Any) -> Any:
        if exec.parent is not None:
            return Accept(additional_contexts=[{"content": [{"type": "text", "text": "sub"}]}])
        return Block([{"type": "text", "text": "run_code output withheld"}])

    with code_system(FakeRuntime(_echo_twice), tools=[echo_tool()]) as system:
        system.tools.on_post_execute(post)
        result = system.execute(run_code())
    assert result.is_error
    assert texts(result.content) == ["run_code output withheld"]
    assert list(result.additional_contexts) == []


def test_a_run_code_call_prepares_its_run_before_its_guards_and_a_refused_one_never_runs(
    tmp_path: Path,
) -> None:
    # As a run_code call begins, the runtime gives its program to a pre-forked worker, which
    # compiles it while guards, hooks and approval decide, and runs it only once the call's
    # body asks for the run: a refused call's program never runs.
    order: list[str] = []

    def marking(name: str) -> str:
        return f"open({str(tmp_path / name)!r}, 'a').write('ran')\nreturn {name!r}"

    with ToolSystem.start(
        ToolsConfig(mode="code"), code_sandbox=CodeSandbox(write=[str(tmp_path)])
    ) as system:
        runtime = system.code_runtime
        assert isinstance(runtime, SubprocessCodeRuntime)
        assert not system.execute(run_code("return 0", call_id="first")).is_error
        prepare = runtime.prepare

        def preparing(program: str, namespaces: Any) -> Callable[[], None] | None:
            order.append(f"prepare {program.splitlines()[-1]}")
            return prepare(program, namespaces)

        runtime.prepare = preparing  # type: ignore[method-assign]
        prepared = runtime._prepared
        claim = prepared.claim
        claimed: list[bool] = []

        def claiming(boot: bytes) -> Any:
            slot = claim(boot)
            claimed.append(slot is not None)
            return slot

        prepared.claim = claiming  # type: ignore[method-assign]

        def guard(execution: Any) -> str | None:
            order.append(f"guard {execution.call_id}")
            return "refused" if execution.call_id == "refused" else None

        system.tools.guard(guard)
        deadline = time.monotonic() + 10
        while runtime.idle_workers < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = system.execute(run_code(marking("refused"), call_id="refused"))
        assert runtime.prepared_runs == 0  # its call ended: closed, its program never run
        ran = system.execute(run_code(marking("ran"), call_id="ran"))
        assert runtime.prepared_runs == 0  # claimed by its run
        other = system.execute(ExecuteCall(call_id="x", name="no_such_tool", arguments={}))
        aborted = AbortController()
        aborted.abort("gone")
        late = system.execute(run_code("return 1", call_id="late", signal=aborted.signal))
    assert refused.is_error and "refused" in texts(refused.content)[0]
    assert value_of(ran)["result"] == "ran"
    assert other.is_error
    assert late.is_error  # arrived aborted: not prepared, no guard asked
    assert order == [
        "prepare return 'refused'",
        "guard refused",
        "prepare return 'ran'",
        "guard ran",
        "guard x",
    ]
    assert os.listdir(tmp_path) == ["ran"]
    assert claimed == [True]  # the allowed call's run took the worker its call prepared


def test_help_on_a_tool_in_a_program_shows_its_sdk_declarations() -> None:
    program = "help(tools.echo)\nhelp(tools)"
    with code_system(
        DEFAULT, tools=[echo_tool(description="Say the value back."), echo_tool("other")]
    ) as system:
        result = system.execute(run_code(program))
        assert dispatch_events(system, "tool/code-dispatch-start") == []  # no tool was called
        [sdk] = [s.text for s in system.assemble_prompt().sections if s.name == "tools:sdk"]
    one, every = value_of(result)["logs"]
    assert one == (
        "Help on tools.echo (call it as `await tools.echo(args)`):\n"
        "\n"
        "class Tools:\n"
        "    # Say the value back.\n"
        "    async def echo(self, args: EchoArgs, /) -> EchoOutput: ...\n"
        "\n"
        "class EchoArgs(TypedDict, extra_items=JsonValue):\n"
        "    value: str\n"
        "\n"
        "EchoOutput = str\n"
        "\n"
        'JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]'
    )
    heading, declarations = every.split("\n\n", 1)
    assert heading == (
        "Help on tools, the binding namespace (call a binding as `await tools.name(args)`):"
    )
    assert f"```python\n{declarations}\n```" in sdk  # the prompt's SDK, whole


def test_help_shows_a_typed_tools_result_as_its_annotation_declares_it() -> None:
    # As the prompt's SDK does: the output contract's projection would read as JsonValue.
    @dataclasses.dataclass
    class Item:
        sku: str
        count: int

    @tool
    def stock(shelf: str) -> dict[str, Item]:
        """Items on a shelf by name."""
        return {"a1": Item("bolt", 2)}

    program = "help(tools.stock)\nhelp(tools)\nreturn (await tools.stock({'shelf': 'a'}))['a1']"
    with code_system(DEFAULT, tools=[stock]) as system:
        result = system.execute(run_code(program))
        [sdk] = [s.text for s in system.assemble_prompt().sections if s.name == "tools:sdk"]
    one, every = value_of(result)["logs"]
    for text in (one, every, sdk):
        assert "StockOutput = dict[str, Item]\n" in text
        assert "class Item(TypedDict, extra_items=JsonValue):\n    sku: str\n    count: int" in text
    assert every.split("\n\n", 1)[1] in sdk
    assert value_of(result)["result"] == {"sku": "bolt", "count": 2}


class Sizes(msgspec.Struct):
    width: int
    height: int = 480
    # Left out of the result while it holds UNSET: a key the result may lack.
    depth: int | msgspec.UnsetType = msgspec.UNSET


class Compact(msgspec.Struct, omit_defaults=True):
    unit: str = "px"  # left out while it holds its default


@dataclasses.dataclass
class Owner:
    name: str
    team: str = "core"


class Label(pydantic.BaseModel):
    text: str
    color: str = "grey"


class Extra(TypedDict):
    note: NotRequired[str]  # a dict the body returns may lack it


class Picture(msgspec.Struct):
    sizes: Sizes
    compact: Compact
    owner: Owner
    label: Label
    extra: Extra
    tags: list[str] = []


@tool
def picture(name: str) -> Picture:
    """Describe a picture."""
    return Picture(Sizes(640), Compact(), Owner(name), Label(text=name), {})


def test_a_typed_tools_result_fields_with_defaults_are_required_where_they_are_always_written() -> (
    None
):
    # A result always carries a field with a default (the value is converted with every field
    # written), yet the SDK declared it NotRequired, as for an argument the model may leave
    # out: a program guarded reads of keys that are always there.
    program = "help(tools.picture)\nreturn await tools.picture({'name': 'cat'})"
    with code_system(DEFAULT, tools=[picture]) as system:
        result = system.execute(run_code(program))
        [sdk] = [s.text for s in system.assemble_prompt().sections if s.name == "tools:sdk"]
    [shown] = value_of(result)["logs"]
    for text in (shown, sdk):
        assert (
            "class Sizes(TypedDict, extra_items=JsonValue):\n"
            "    width: int\n"
            "    # [default: 480]\n"
            "    height: int\n"
            "    depth: NotRequired[int]\n"
        ) in text
        assert '    # [default: "px"]\n    unit: NotRequired[str]\n' in text
        assert '    # [default: "core"]\n    team: str\n' in text
        assert '    # [default: "grey"]\n    color: str\n' in text
        assert "    note: NotRequired[str]\n" in text
        assert "    # [default: []]\n    tags: list[str]\n" in text
    # What the result holds, as declared.
    assert value_of(result)["result"] == {
        "sizes": {"width": 640, "height": 480},
        "compact": {},
        "owner": {"name": "cat", "team": "core"},
        "label": {"text": "cat", "color": "grey"},
        "extra": {},
        "tags": [],
    }


def test_help_asked_again_and_again_is_rendered_once_per_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The host renders the text on the loop every call of the system shares, at no cost to
    # the program's budgets: a program asking in a loop must not make it render each time.
    rendered: list[str] = []
    render = bridge_module.render_sdk_help

    def counting(tool: Any) -> str:
        rendered.append(tool.name)
        return render(tool)

    monkeypatch.setattr(bridge_module, "render_sdk_help", counting)
    program = "for _ in range(50):\n    help(tools.echo)"
    with code_system(DEFAULT, tools=[echo_tool()]) as system:
        result = system.execute(run_code(program))
    logs = value_of(result)["logs"]
    assert len(logs) == 50 and len(set(logs)) == 1
    assert rendered == ["echo"]


def test_help_asked_about_names_that_are_no_bindings_keeps_nothing_of_them() -> None:
    # A program can ask the host about any name, through the worker it runs in, each name as
    # large as a call's arguments: the host kept its answer to each (nothing) for the rest of
    # the run, beside every budget, up to one more name than the run has bindings, and then
    # answered nothing more, the run's own bindings included.
    program = """
ask = print.__self__.describe
for n in range(5):
    ask("tools", f"no-such-tool-{n}")
help(tools.echo)
"""
    with code_system(DEFAULT, tools=[echo_tool(description="Say the value back.")]) as system:
        result = system.execute(run_code(program))
    [shown] = value_of(result)["logs"]
    assert shown.startswith("Help on tools.echo (call it as `await tools.echo(args)`):\n")
    assert "    async def echo(self, args: EchoArgs, /) -> EchoOutput: ..." in shown
