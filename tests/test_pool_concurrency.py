"""Separate batches run concurrently: each has its own pool and barriers, so a slow batch
(a body that has not returned, an exclusive barrier) never holds up another agent's batch,
whether sent with ``execute_batch`` or ``ref.ask``."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from conftest import WAIT, block, fixture, text
from pool_support import Gates, batch, in_background, tool_call, trace

from dsh_tools import ExecuteBatch, ToolSystem


def test_a_slow_batch_does_not_hold_up_another_agents_batch(system: ToolSystem) -> None:
    gates = Gates("thread")
    system.tools.register(gates.tool("slow", parallel=False))
    system.tools.register(fixture("quick", lambda args, ctx: [block("quick")]))
    with in_background(system, batch("a1", name="slow", agent="A"), gates) as slow:
        gates.wait_started("a1")
        quick = system.execute_batch(batch("b1", "b2", name="quick", agent="B"), timeout=WAIT)
        assert [text(r) for r in quick.results] == ["quick", "quick"]
        assert not slow.done()
        gates.release("a1")
        assert [text(r) for r in slow.result().results] == ["done:a1"]
    assert trace(system, agent="B") == [
        ("tool/call", "b1"),
        ("tool/result", "b1"),
        ("tool/call", "b2"),
        ("tool/result", "b2"),
    ]


def test_exclusive_barriers_of_different_batches_overlap(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool(parallel=False))
    with (
        in_background(system, batch("a1", "a2", agent="A"), gates) as first,
        in_background(system, batch("b1", "b2", agent="B"), gates) as second,
    ):
        gates.wait_started("a1", "b1")
        assert gates.running == 2
        gates.release("b1", "b2")
        assert [text(r) for r in second.result().results] == ["done:b1", "done:b2"]
        assert not first.done()
        gates.release("a1", "a2")
        assert [text(r) for r in first.result().results] == ["done:a1", "done:a2"]


def test_a_slow_batch_asked_through_the_ref_does_not_block_other_asks(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool("slow"))
    system.tools.register(fixture("quick", lambda args, ctx: [block("quick")]))
    try:
        slow = system.ref.ask(batch("a1", name="slow", agent="A"), block=False)
        gates.wait_started("a1")
        quick = system.ref.ask(batch("b1", name="quick", agent="B"), timeout=WAIT)
        assert [text(r) for r in quick.results] == ["quick"]
        gates.release("a1")
        assert [text(r) for r in slow.get(timeout=WAIT).results] == ["done:a1"]
    finally:
        gates.release_all()


def test_many_batches_at_once_each_keep_their_own_order(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        return [block(f"{ctx.agent}:{ctx.call_id}")]

    system.tools.register(fixture("p", body, is_concurrency_safe=lambda a: True))
    system.tools.register(fixture("w", body))
    agents = [f"agent{n}" for n in range(8)]

    def run(agent: str) -> Any:
        names = ["p", "p", "w", "p", "w", "p"]
        calls = [tool_call(f"{agent}-c{i}", name) for i, name in enumerate(names)]
        request = ExecuteBatch(calls=calls, agent=agent, max_parallel=2)
        return system.execute_batch(request, timeout=WAIT)

    with concurrent.futures.ThreadPoolExecutor(len(agents)) as helpers:
        outcomes = dict(zip(agents, helpers.map(run, agents), strict=True))
    for agent, outcome in outcomes.items():
        ids = [f"{agent}-c{i}" for i in range(6)]
        assert [text(r) for r in outcome.results] == [f"{agent}:{i}" for i in ids]
        events = trace(system, agent=agent)
        assert [label for kind, label in events if kind == "tool/call"] == ids
        assert [label for kind, label in events if kind == "tool/result"] == ids
