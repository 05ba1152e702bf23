"""Batch scheduling in the dispatcher pool: ordering, the pool bound, barriers, and
re-classification before each start."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import WAIT, block, fixture, text
from pool_support import (
    Gates,
    batch,
    code,
    in_background,
    of_type,
    quiesce,
    safe,
    tool_call,
    trace,
)

from dsh_tools import (
    Accept,
    Allow,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)


def test_rp98_parallel_calls_all_start_before_any_is_released(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    with in_background(system, batch("1", "2", "3"), gates) as pending:
        gates.wait_started("1", "2", "3")
        assert gates.started == ["1", "2", "3"]
        assert gates.finished == []
        gates.release("1", "2", "3")
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:1", "done:2", "done:3"]


def test_rp98_plain_bodies_overlap_on_worker_threads(system: ToolSystem) -> None:
    gates = Gates("thread")
    system.tools.register(gates.tool())
    with in_background(system, batch("1", "2", "3"), gates) as pending:
        gates.wait_started("1", "2", "3")
        assert gates.peak == 3
        assert of_type(system, "tool/call") == ["1", "2", "3"]
        gates.release("1", "2", "3")
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:1", "done:2", "done:3"]


def test_rp99_an_exclusive_call_is_a_barrier_between_parallel_ones(system: ToolSystem) -> None:
    log: list[str] = []
    lock = threading.Lock()

    def note(entry: str) -> None:
        with lock:
            log.append(entry)

    def read(args: Any, ctx: Any) -> Any:
        note(f"r-start-{args['id']}")
        note(f"r-end-{args['id']}")
        return [block("read")]

    def write(args: Any, ctx: Any) -> Any:
        note(f"w-{args['id']}")
        return [block("written")]

    system.tools.register(fixture("r", read, is_concurrency_safe=safe))
    system.tools.register(fixture("w", write))
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[
                tool_call("c1", "r", '{"id": "A1"}'),
                tool_call("c2", "w", '{"id": "A2"}'),
                tool_call("c3", "r", '{"id": "A3"}'),
            ]
        )
    )
    assert log == ["r-start-A1", "r-end-A1", "w-A2", "r-start-A3", "r-end-A3"]
    assert [text(r) for r in outcome.results] == ["read", "written", "read"]


def test_rp100_a_call_is_reclassified_right_before_it_starts(system: ToolSystem) -> None:
    old_bodies: list[str] = []

    def old_x(args: Any, ctx: Any) -> Any:
        old_bodies.append(ctx.call_id)
        return [block("old")]

    gates = Gates("thread")
    owner = system.plugin("x-v1")
    owner.tools.register(fixture("x", old_x, is_concurrency_safe=safe))

    def replace(args: Any, ctx: Any) -> Any:
        owner.close()
        system.tools.register(gates.tool("x", parallel=False, tag="new"))
        return [block("replaced")]

    system.tools.register(fixture("replace", replace))
    request = ExecuteBatch(
        calls=[tool_call("r", "replace"), tool_call("x1", "x"), tool_call("x2", "x")]
    )
    with in_background(system, request, gates) as pending:
        gates.wait_started("x1")
        quiesce(system)
        assert gates.started == ["x1"]
        assert of_type(system, "tool/call") == ["r", "x1"]
        gates.release("x1")
        gates.wait_started("x2")
        assert gates.peak == 1
        gates.release("x2")
        outcome = pending.result()
    assert old_bodies == []
    assert [text(r) for r in outcome.results] == ["replaced", "new:x1", "new:x2"]


def test_rp101_an_observer_swap_makes_the_next_call_wait_for_the_drain(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    owner = system.plugin("x-v1")
    owner.tools.register(gates.tool("x", tag="old"))
    replacement_ran: list[str] = []

    def replacement(args: Any, ctx: Any) -> Any:
        replacement_ran.append(ctx.call_id)
        return [block("new")]

    def swap_after_c1(exec: Any, result: Any) -> None:
        if exec.call_id == "c1":
            owner.close()
            system.tools.register(fixture("x", replacement))

    system.tools.on_result(swap_after_c1)
    with in_background(system, batch("c1", "c2", "c3", max_parallel=2), gates) as pending:
        gates.wait_started("c1", "c2")
        gates.release("c1")
        gates.wait_finished("c1")
        quiesce(system)
        assert of_type(system, "tool/result") == ["c1"]
        assert of_type(system, "tool/call") == ["c1", "c2"]
        gates.release("c2")
        outcome = pending.result()
    assert replacement_ran == ["c3"]
    assert gates.started == ["c1", "c2"]
    assert [text(r) for r in outcome.results] == ["old:c1", "old:c2", "new"]
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c1"),
        ("tool/result", "c2"),
        ("tool/call", "c3"),
        ("tool/result", "c3"),
    ]


def test_rp102_results_commit_in_model_order_whatever_order_bodies_settle(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    with in_background(system, batch("c1", "c2"), gates) as pending:
        gates.wait_started("c1", "c2")
        gates.release("c2")
        gates.wait_finished("c2")
        quiesce(system)
        assert of_type(system, "tool/result") == []
        gates.release("c1")
        outcome = pending.result()
    assert of_type(system, "tool/result") == ["c1", "c2"]
    assert [text(r) for r in outcome.results] == ["done:c1", "done:c2"]
    history = system.session.derive_messages()
    assert [m["content"][0]["tool_call_id"] for m in history] == ["c1", "c2"]
    assert all(m["content"][0]["type"] == "tool-result" for m in history)


def test_rp103_a_pool_of_two_starts_the_third_call_when_the_first_settles(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    with in_background(system, batch("c1", "c2", "c3", "c4", max_parallel=2), gates) as pending:
        gates.wait_started("c1", "c2")
        quiesce(system)
        assert gates.started == ["c1", "c2"]
        gates.release("c1")
        gates.wait_started("c3")
        quiesce(system)
        assert gates.started == ["c1", "c2", "c3"]
        assert trace(system) == [
            ("tool/call", "c1"),
            ("tool/call", "c2"),
            ("tool/result", "c1"),
            ("tool/call", "c3"),
        ]
        gates.release("c2", "c3", "c4")
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:c1", "done:c2", "done:c3", "done:c4"]
    assert of_type(system, "tool/result") == ["c1", "c2", "c3", "c4"]
    assert gates.peak == 2


def test_rp104_a_settled_but_uncommitted_call_holds_no_pool_slot(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    with in_background(system, batch("c1", "c2", "c3", max_parallel=2), gates) as pending:
        gates.wait_started("c1", "c2")
        gates.release("c2")
        gates.wait_started("c3")
        assert of_type(system, "tool/result") == []
        assert gates.finished == ["c2"]
        gates.release("c1", "c3")
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:c1", "done:c2", "done:c3"]


@pytest.mark.parametrize("kind", ["async", "thread"])
def test_rp105_a_pool_of_one_runs_calls_one_at_a_time(system: ToolSystem, kind: str) -> None:
    gates = Gates(kind)
    system.tools.register(gates.tool())
    with in_background(system, batch("c1", "c2", max_parallel=1), gates) as pending:
        gates.wait_started("c1")
        quiesce(system)
        assert gates.started == ["c1"]
        assert of_type(system, "tool/call") == ["c1"]
        gates.release("c1")
        gates.wait_started("c2")
        gates.release("c2")
        pending.result()
    assert gates.peak == 1
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-3, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_rp105_a_pool_size_must_be_a_positive_integer(value: Any, error: type) -> None:
    with pytest.raises(error, match=r"ExecuteBatch\.max_parallel must be a positive integer"):
        ExecuteBatch(calls=[], max_parallel=value)
    with pytest.raises(error, match="max_parallel_tool_calls must be a positive integer"):
        ToolsConfig(max_parallel_tool_calls=value)


def test_rp105_an_omitted_pool_size_is_ten(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    ids = [f"c{i}" for i in range(1, 13)]
    with in_background(system, batch(*ids), gates) as pending:
        gates.wait_started(*ids[:10])
        quiesce(system)
        assert gates.started == ids[:10]
        gates.release("c1")
        gates.wait_started("c11")
        quiesce(system)
        assert gates.started == ids[:11]
        gates.release(*ids)
        outcome = pending.result()
    assert len(outcome.results) == 12
    assert gates.peak == 10


def test_an_omitted_pool_size_is_the_configured_one() -> None:
    system: ToolSystem = ToolSystem.start(ToolsConfig(max_parallel_tool_calls=3), code_runtime=None)
    try:
        gates = Gates("async")
        system.tools.register(gates.tool())
        with in_background(system, batch("c1", "c2", "c3", "c4"), gates) as pending:
            gates.wait_started("c1", "c2", "c3")
            quiesce(system)
            assert gates.started == ["c1", "c2", "c3"]
            gates.release("c1", "c2", "c3", "c4")
            pending.result()
        assert gates.peak == 3
    finally:
        system.stop()


def test_rp106_pre_and_post_execute_follow_model_order(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    pre_seen: list[str] = []
    post_seen: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        pre_seen.append(exec.call_id)
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        post_seen.append(exec.call_id)
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    with in_background(system, batch("c1", "c2", "c3"), gates) as pending:
        gates.wait_started("c1", "c2", "c3")
        for call_id in ("c3", "c2", "c1"):
            gates.release(call_id)
            gates.wait_finished(call_id)
        pending.result()
    assert gates.finished == ["c3", "c2", "c1"]
    assert pre_seen == ["c1", "c2", "c3"]
    assert post_seen == ["c1", "c2", "c3"]


def test_rp108_denials_and_pre_errors_take_no_slot_and_commit_in_order(
    system: ToolSystem,
) -> None:
    bodies: list[str] = []
    post_seen: list[str] = []

    def body(args: Any, ctx: Any) -> Any:
        bodies.append(ctx.call_id)
        return [block(f"ran:{ctx.call_id}")]

    async def pre(exec: Any, next: Any) -> Any:
        if exec.call_id == "c2":
            return Deny("blocked by policy")
        if exec.call_id == "c3":
            raise RuntimeError("pre exploded")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        post_seen.append(exec.call_id)
        return await next()

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    outcome = system.execute_batch(batch("c1", "c2", "c3"))
    assert bodies == ["c1"]
    assert post_seen == ["c1", "c2"]
    first, second, third = outcome.results
    assert text(first) == "ran:c1"
    assert second.is_error and "blocked by policy" in text(second)
    assert third.is_error and "pre exploded" in text(third)
    assert of_type(system, "tool/result") == ["c1", "c2", "c3"]


def test_denied_calls_do_not_occupy_the_pool(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())

    def deny_odd(exec: Any) -> str | None:
        return "odd call" if exec.call_id in ("c1", "c3") else None

    system.tools.guard(deny_odd)
    with in_background(system, batch("c1", "c2", "c3", "c4", max_parallel=2), gates) as pending:
        gates.wait_started("c2", "c4")
        gates.release("c2", "c4")
        outcome = pending.result()
    assert gates.started == ["c2", "c4"]
    assert gates.peak == 2
    assert [text(r) for r in outcome.results] == [
        "Error: odd call",
        "done:c2",
        "Error: odd call",
        "done:c4",
    ]


def test_exclusive_calls_run_alone_and_in_order(system: ToolSystem) -> None:
    gates = Gates("thread")
    system.tools.register(gates.tool(parallel=False))
    with in_background(system, batch("c1", "c2", "c3"), gates) as pending:
        for call_id in ("c1", "c2", "c3"):
            gates.wait_started(call_id)
            quiesce(system)
            assert gates.running == 1
            assert of_type(system, "tool/call")[-1] == call_id
            gates.release(call_id)
        pending.result()
    assert gates.peak == 1
    assert trace(system) == [
        (kind, call_id) for call_id in ("c1", "c2", "c3") for kind in ("tool/call", "tool/result")
    ]


def test_a_parallel_call_after_a_barrier_waits_for_the_barrier_to_commit(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool("p"))
    system.tools.register(gates.tool("w", parallel=False))
    post_gate = threading.Event()

    async def slow_post(exec: Any, result: Any, next: Any) -> Any:
        if exec.call_id == "w1":
            await wait_in_thread(post_gate)
        return await next()

    system.tools.on_post_execute(slow_post)
    request = ExecuteBatch(calls=[tool_call("p1", "p"), tool_call("w1", "w"), tool_call("p2", "p")])
    with in_background(system, request, gates) as pending:
        gates.wait_started("p1")
        gates.release("p1")
        gates.wait_started("w1")
        gates.release("w1", "p2")
        gates.wait_finished("w1")
        quiesce(system)
        assert "p2" not in of_type(system, "tool/call")
        post_gate.set()
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:p1", "done:w1", "done:p2"]
    assert trace(system)[-4:] == [
        ("tool/call", "w1"),
        ("tool/result", "w1"),
        ("tool/call", "p2"),
        ("tool/result", "p2"),
    ]


async def wait_in_thread(event: threading.Event) -> None:
    """Await a thread gate from a coroutine without blocking the loop."""
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, event.wait, WAIT)


def test_prepare_stages_never_overlap(system: ToolSystem) -> None:
    system.tools.register(fixture("x", lambda a, c: [block("ok")], is_concurrency_safe=safe))
    active: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    async def slow_pre(exec: Any, next: Any) -> Any:
        active.append(exec.call_id)
        if len(active) > 1:
            overlaps.append(tuple(active))
        for _ in range(3):
            await asyncio.sleep(0)
        active.remove(exec.call_id)
        return Allow()

    system.tools.on_pre_execute(slow_pre)
    outcome = system.execute_batch(batch("c1", "c2", "c3", "c4"))
    assert overlaps == []
    assert [r.is_error for r in outcome.results] == [False] * 4


def test_post_execute_sees_each_call_once_in_model_order_even_when_it_waits(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    seen: list[str] = []

    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen.append(exec.call_id)
        await asyncio.sleep(0.001)
        return Accept(content=[block(f"post:{exec.call_id}")])

    system.tools.on_post_execute(post)
    with in_background(system, batch("c1", "c2", "c3"), gates) as pending:
        gates.wait_started("c1", "c2", "c3")
        gates.release("c3", "c1", "c2")
        outcome = pending.result()
    assert seen == ["c1", "c2", "c3"]
    assert [text(r) for r in outcome.results] == ["post:c1", "post:c2", "post:c3"]


def test_a_call_found_exclusive_waits_for_the_whole_group_to_drain(system: ToolSystem) -> None:
    gates = Gates("async")
    mode = {"safe": True}
    system.tools.register(fixture("x", gates.body(), is_concurrency_safe=lambda args: mode["safe"]))
    with in_background(system, batch("c1", "c2", "c3", "c4", max_parallel=3), gates) as pending:
        gates.wait_started("c1", "c2", "c3")
        mode["safe"] = False
        gates.release("c1")
        gates.wait_finished("c1")
        quiesce(system)  # c4 was classified exclusive: replenishment stopped
        mode["safe"] = True
        gates.release("c2")
        gates.wait_finished("c2")
        quiesce(system)
        assert gates.started == ["c1", "c2", "c3"], "c4 started before its group drained"
        gates.release("c3")
        gates.wait_started("c4")
        gates.release("c4")
        outcome = pending.result()
    assert [text(r) for r in outcome.results] == ["done:c1", "done:c2", "done:c3", "done:c4"]
    assert trace(system)[-2:] == [("tool/call", "c4"), ("tool/result", "c4")]


@pytest.mark.parametrize("verdict", [1, "yes", False, None])
def test_only_a_classifier_returning_true_lets_batch_calls_overlap(
    system: ToolSystem, verdict: Any
) -> None:
    gates = Gates("thread")
    system.tools.register(fixture("x", gates.body(), is_concurrency_safe=lambda a: verdict))
    with in_background(system, batch("c1", "c2"), gates) as pending:
        gates.wait_started("c1")
        quiesce(system)
        assert gates.started == ["c1"]
        gates.release("c1", "c2")
        pending.result()
    assert gates.peak == 1
    assert system.tools.execution_mode(call_of("x")) == "exclusive"


def test_a_typed_call_with_invalid_arguments_is_exclusive_in_a_batch(
    system: ToolSystem,
) -> None:
    gates = Gates("thread")
    system.tools.register(
        define_tool(
            name="x",
            description="typed",
            parameters={"n": {"type": "integer", "required": True}},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [block(v)]),
            execute=lambda args, ctx: "ran",
            is_concurrency_safe=lambda args: True,
        )
    )
    system.tools.register(gates.tool("p"))
    request = ExecuteBatch(
        calls=[tool_call("c1", "p"), tool_call("c2", "x", '{"n": "one"}'), tool_call("c3", "p")]
    )
    with in_background(system, request, gates) as pending:
        gates.wait_started("c1")
        quiesce(system)
        assert of_type(system, "tool/call") == ["c1"]
        gates.release("c1", "c3")
        outcome = pending.result()
    assert [code(r) for r in outcome.results] == [None, "INVALID_ARGS", None]
    assert trace(system)[2:4] == [("tool/call", "c2"), ("tool/result", "c2")]


def call_of(name: str) -> ExecuteCall:
    return ExecuteCall(call_id="probe", name=name, arguments={})
