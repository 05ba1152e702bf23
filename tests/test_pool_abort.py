"""Aborting a batch.

On abort the pool stops starting calls, waits for every in-flight dispatch, commits the started
calls in order through the registry, and gives every call that never started a synthetic
``tool/call`` + ``ABORTED_BEFORE_DISPATCH`` ``tool/result`` pair without touching the registry.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conftest import WAIT, block, fixture, text
from pool_support import (
    Gates,
    batch,
    code,
    context_text,
    in_background,
    of_type,
    plugin_context,
    quiesce,
    safe,
    tool_call,
    trace,
)

from dsh_tools import (
    AbortController,
    AbortSignal,
    Accept,
    ExecuteBatch,
    HarnessError,
    ToolSystem,
)

ABORTED_BEFORE_DISPATCH = {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"}


class Registry:
    """What reached the registry: pre-execute listeners and result observers, by call id."""

    def __init__(self, system: ToolSystem) -> None:
        self.pre: list[str] = []
        self.observed: list[str] = []

        async def pre(exec: Any, next: Any) -> Any:
            self.pre.append(exec.call_id)
            return await next()

        system.tools.on_pre_execute(pre)
        system.tools.on_result(lambda exec, result: self.observed.append(exec.call_id))


def add_context_after_post(system: ToolSystem, label: str = "ctx-{}") -> None:
    """A post-execute listener that attaches one context per call."""

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await next()
        return Accept(additional_contexts=[plugin_context(label.format(exec.call_id))])

    system.tools.on_post_execute(post)


def test_rp109_a_batch_whose_signal_is_already_aborted_touches_nothing(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    seen = Registry(system)
    outcome = system.execute_batch(
        batch("c1", "c2", signal=AbortSignal.aborted_signal("user stopped"))
    )
    assert gates.started == []
    assert seen.pre == [] and seen.observed == []
    assert of_type(system, "tool/call") == ["c1", "c2"]
    results = [e.data for e in system.session.events if e.type == "tool/result"]
    assert [r["call_id"] for r in results] == ["c1", "c2"]
    for data in results:
        assert data["is_error"] is True
        assert data["error"] == ABORTED_BEFORE_DISPATCH
        assert data["content"] == [block("Error: tool call aborted before dispatch")]
    assert [code(r) for r in outcome.results] == ["ABORTED_BEFORE_DISPATCH"] * 2


def test_rp110_an_abort_during_pre_execute_commits_that_call_and_skips_the_rest(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    controller = AbortController()
    observed: list[str] = []

    async def abort_in_c1(exec: Any, next: Any) -> Any:
        if exec.call_id == "c1":
            controller.abort("turn cancelled")
        return await next()

    system.tools.on_pre_execute(abort_in_c1)
    system.tools.on_result(lambda exec, result: observed.append(exec.call_id))
    outcome = system.execute_batch(batch("c1", "c2", signal=controller.signal))
    assert gates.started == []
    assert observed == ["c1"]
    assert [code(r) for r in outcome.results] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]


def test_rp111_abort_drains_started_calls_then_pairs_the_rest(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    seen = Registry(system)
    add_context_after_post(system)
    controller = AbortController()
    request = batch("c1", "c2", "c3", "c4", max_parallel=2, signal=controller.signal)
    with in_background(system, request, gates) as pending:
        gates.wait_started("c1", "c2")
        controller.abort()
        quiesce(system)
        assert not pending.done()  # in-flight bodies are waited for, never abandoned
        assert of_type(system, "tool/call") == ["c1", "c2"]
        gates.release("c2", "c1")
        outcome = pending.result()
    assert gates.started == ["c1", "c2"]
    assert seen.pre == ["c1", "c2"]
    assert seen.observed == ["c1", "c2"]
    assert [code(r) for r in outcome.results] == [
        "ABORTED",
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED_BEFORE_DISPATCH",
    ]
    assert of_type(system, "tool/call") == ["c1", "c2", "c3", "c4"]
    assert [event for event in trace(system) if event[0] != "tool/call"] == [
        ("tool/result", "c1"),
        ("tool/result", "c2"),
        ("tool/result", "c3"),
        ("tool/result", "c4"),
        ("user/message", "ctx-c1"),
        ("user/message", "ctx-c2"),
    ]
    assert [context_text(c) for c in outcome.contexts] == ["ctx-c1", "ctx-c2"]
    assert trace(system)[2:6] == [
        ("tool/result", "c1"),
        ("tool/result", "c2"),
        ("tool/call", "c3"),
        ("tool/result", "c3"),
    ]


def test_rp112_no_barrier_runs_after_an_abort(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool("p"))
    exclusive_ran: list[str] = []
    system.tools.register(
        fixture("x", lambda args, ctx: exclusive_ran.append(ctx.call_id) or [block("x")])
    )
    seen = Registry(system)
    controller = AbortController()
    request = ExecuteBatch(
        calls=[tool_call("c1", "p"), tool_call("c2", "p"), tool_call("c3", "x")],
        max_parallel=2,
        signal=controller.signal,
    )
    with in_background(system, request, gates) as pending:
        gates.wait_started("c1", "c2")
        controller.abort()
        gates.release("c1", "c2")
        outcome = pending.result()
    assert exclusive_ran == []
    assert seen.observed == ["c1", "c2"]
    assert code(outcome.results[-1]) == "ABORTED_BEFORE_DISPATCH"
    assert system.session.events[-1].type == "tool/result"
    assert system.session.events[-1].data["call_id"] == "c3"
    assert system.session.events[-1].data["error"] == ABORTED_BEFORE_DISPATCH


def test_rp113_a_body_that_aborts_the_turn_ends_it_after_its_own_commit(
    system: ToolSystem,
) -> None:
    controller = AbortController()
    bodies: list[str] = []

    def body(args: Any, ctx: Any) -> Any:
        bodies.append(ctx.call_id)
        if ctx.call_id == "c1":
            controller.abort()
        return [block(f"ran:{ctx.call_id}")]

    system.tools.register(fixture("x", body))
    add_context_after_post(system, "context for {}")
    outcome = system.execute_batch(batch("c1", "c2", signal=controller.signal))
    assert bodies == ["c1"]
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
        ("user/message", "context for c1"),
    ]
    first, second = outcome.results
    assert text(first) == "Error: tool call aborted"
    assert code(first) == "ABORTED"
    assert code(second) == "ABORTED_BEFORE_DISPATCH"
    assert [context_text(c) for c in outcome.contexts] == ["context for c1"]


def test_a_body_that_fails_on_abort_keeps_its_own_error(system: ToolSystem) -> None:
    both_started = threading.Barrier(3)

    def stops_on_abort(args: Any, ctx: Any) -> Any:
        both_started.wait(WAIT)
        assert ctx.signal.wait(WAIT)
        raise HarnessError("stopped early", "STOPPED")

    system.tools.register(fixture("x", stops_on_abort, is_concurrency_safe=safe))
    controller = AbortController()
    with in_background(system, batch("c1", "c2", signal=controller.signal)) as pending:
        both_started.wait(WAIT)
        controller.abort()
        outcome = pending.result()
    assert [code(r) for r in outcome.results] == ["STOPPED", "STOPPED"]
    assert [text(r) for r in outcome.results] == ["Error: stopped early"] * 2


def test_an_abort_while_a_call_prepares_lets_it_finish_preparing(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    controller = AbortController()
    pre_seen: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        pre_seen.append(exec.call_id)
        if exec.call_id == "c2":
            controller.abort()
            await asyncio.sleep(0)
        return await next()

    system.tools.on_pre_execute(pre)
    with in_background(system, batch("c1", "c2", "c3", signal=controller.signal), gates) as p:
        gates.wait_started("c1")
        gates.release("c1")
        outcome = p.result()
    assert pre_seen == ["c1", "c2"]
    assert gates.started == ["c1"]
    assert [code(r) for r in outcome.results] == [
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED_BEFORE_DISPATCH",
    ]


def test_a_call_committed_before_the_abort_keeps_its_success(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    controller = AbortController()
    request = batch("c1", "c2", "c3", max_parallel=1, signal=controller.signal)
    with in_background(system, request, gates) as pending:
        gates.release("c1")
        gates.wait_started("c2")
        controller.abort()
        gates.release("c2")
        outcome = pending.result()
    assert [code(r) for r in outcome.results] == [
        None,
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
    ]
    assert text(outcome.results[0]) == "done:c1"
    assert gates.started == ["c1", "c2"]
