"""The batch context FIFO: contexts from results and injections. Contexts are drained after
the batch's last ``tool/result``, in the order they were accepted (commits follow model order;
injections join when they happen)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import WAIT, PausedAtLine, block, fixture, lines_of
from pool_support import (
    Gates,
    batch,
    context_text,
    in_background,
    plugin_context,
    safe,
    trace,
)

from dsh_tools import (
    Accept,
    ExecuteCall,
    FrozenDict,
    FrozenList,
    LosslessJsonError,
    ToolOutput,
    ToolSystem,
    define_tool,
)
from dsh_tools.pipeline._pool import BatchRunner


def add_post_context(system: ToolSystem, label: str = "ctx-{}") -> None:
    async def post(exec: Any, result: Any, next: Any) -> Any:
        await next()
        return Accept(additional_contexts=[plugin_context(label.format(exec.call_id))])

    system.tools.on_post_execute(post)


def test_rp107_post_contexts_drain_in_model_order_after_the_last_result(
    system: ToolSystem,
) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    add_post_context(system)
    with in_background(system, batch("c1", "c2"), gates) as pending:
        gates.wait_started("c1", "c2")
        gates.release("c2")
        gates.wait_finished("c2")
        gates.release("c1")
        outcome = pending.result()
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c1"),
        ("tool/result", "c2"),
        ("user/message", "ctx-c1"),
        ("user/message", "ctx-c2"),
    ]
    assert [context_text(c) for c in outcome.contexts] == ["ctx-c1", "ctx-c2"]
    messages = system.session.derive_messages()
    assert [m["content"] for m in messages[-2:]] == [[block("ctx-c1")], [block("ctx-c2")]]


def test_rp114_a_context_injected_during_the_batch_joins_the_fifo_first(
    system: ToolSystem,
) -> None:
    scope = system.agent("A")

    def body(args: Any, ctx: Any) -> Any:
        scope.inject_context(plugin_context("injected by c1"))
        return [block("ran")]

    system.tools.register(fixture("x", body))
    add_post_context(system, "result context for {}")
    outcome = system.execute_batch(batch("c1", agent="A"))
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("user/message", "injected by c1"),
        ("user/message", "result context for c1"),
    ]
    assert [context_text(c) for c in outcome.contexts] == [
        "injected by c1",
        "result context for c1",
    ]
    assert {e.agent for e in system.session.events} == {"A"}


def test_a_context_injected_with_no_batch_running_is_recorded_at_once(
    system: ToolSystem,
) -> None:
    system.agent("A").inject_context(plugin_context("hello"))
    [event] = system.session.events
    assert event.type == "user/message"
    assert event.agent == "A"
    assert event.data == {
        "content": [block("hello")],
        "source": {"kind": "plugin", "plugin": "test"},
    }


def test_a_context_that_is_not_lossless_json_is_refused_naming_where(
    system: ToolSystem,
) -> None:
    # "context...", the argument, not a "value" the caller never named.
    scope = system.agent("A")
    with pytest.raises(LosslessJsonError, match=r"^context\.content\[0\] is float \(NaN\)$"):
        scope.inject_context({"content": [float("nan")]})
    with pytest.raises(LosslessJsonError, match=r"^context is set$"):
        scope.inject_context({"hello"})
    assert system.session.events == []


def test_an_injection_joins_only_its_own_agents_batch(system: ToolSystem) -> None:
    gates = Gates("async")
    system.tools.register(gates.tool())
    with in_background(system, batch("b1", agent="B"), gates) as pending:
        gates.wait_started("b1")
        system.agent("A").inject_context(plugin_context("for A"))
        system.agent("B").inject_context(plugin_context("for B"))
        assert trace(system) == [("tool/call", "b1"), ("user/message", "for A")]
        gates.release("b1")
        outcome = pending.result()
    assert [context_text(c) for c in outcome.contexts] == ["for B"]
    assert trace(system, agent="B") == [
        ("tool/call", "b1"),
        ("tool/result", "b1"),
        ("user/message", "for B"),
    ]


def test_contexts_are_frozen_snapshots_taken_on_acceptance(system: ToolSystem) -> None:
    gates = Gates("thread")
    system.tools.register(gates.tool())
    original = plugin_context("before")
    with in_background(system, batch("c1", agent="A"), gates) as pending:
        gates.wait_started("c1")
        system.agent("A").inject_context(original)
        original["content"][0]["text"] = "after"
        gates.release("c1")
        outcome = pending.result()
    assert type(outcome.contexts) is FrozenList
    [accepted] = outcome.contexts
    assert type(accepted) is FrozenDict
    assert context_text(accepted) == "before"
    with pytest.raises(TypeError):
        accepted["content"] = []  # type: ignore[index]


def test_a_context_that_is_not_lossless_json_is_refused_to_the_injector(
    system: ToolSystem,
) -> None:
    with pytest.raises(ValueError, match="meta"):
        system.agent("A").inject_context({"content": [], "meta": float("nan")})
    assert system.session.events == []


def test_deferred_wrapper_and_post_contexts_keep_their_order_per_call(
    system: ToolSystem,
) -> None:
    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(plugin_context(f"deferred {ctx.call_id}"))
        return [block("ran")]

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        contexts = [*result.additional_contexts, plugin_context(f"wrapper {exec.call_id}")]
        return type(result)(result.value, result.content, result.meta, contexts)

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.on_execute(wrapper)
    add_post_context(system, "post {}")
    outcome = system.execute_batch(batch("c1", "c2"))
    assert [context_text(c) for c in outcome.contexts] == [
        "deferred c1",
        "wrapper c1",
        "post c1",
        "deferred c2",
        "wrapper c2",
        "post c2",
    ]
    assert [label for kind, label in trace(system) if kind == "user/message"] == [
        context_text(c) for c in outcome.contexts
    ]


def test_injections_from_parallel_bodies_all_arrive_before_the_drain(
    system: ToolSystem,
) -> None:
    scope = system.agent("A")
    ready = threading.Barrier(4)

    def body(args: Any, ctx: Any) -> Any:
        ready.wait(WAIT)
        for n in range(25):
            scope.inject_context(plugin_context(f"{ctx.call_id}-{n}"))
        return [block("ran")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    outcome = system.execute_batch(batch("c1", "c2", "c3", "c4", agent="A"))
    texts = [context_text(c) for c in outcome.contexts]
    assert sorted(texts) == sorted(f"c{i}-{n}" for i in range(1, 5) for n in range(25))
    for call_id in ("c1", "c2", "c3", "c4"):
        own = [t for t in texts if t.startswith(call_id + "-")]
        assert own == [f"{call_id}-{n}" for n in range(25)]
    kinds = [kind for kind, _ in trace(system)]
    assert kinds[:8].count("tool/result") == 4
    assert kinds[8:] == ["user/message"] * 100


def test_a_deferred_context_is_frozen_when_deferred() -> None:
    context: dict[str, Any] = {"content": [{"type": "text", "text": "before"}], "source": {}}

    def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(context)
        context["content"][0]["text"] = "after"
        return "ok"

    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(
            define_tool(
                name="defers",
                description="defers a context, then changes its own copy",
                parameters={},
                output=ToolOutput(schema={"type": "string"}, render=lambda a, v: []),
                execute=body,
            )
        )
        result = system.execute(ExecuteCall(call_id="c1", name="defers", arguments={}))
    assert result.additional_contexts[0]["content"][0]["text"] == "before"


def late_injection_is_kept(pause_at: int) -> bool | None:
    """Whether a context injected for agent A, by a thread paused at line ``pause_at`` of
    ``BatchRunner.inject`` while A's batch finished, is drained or recorded exactly once;
    None when the injection never reaches that line."""
    with ToolSystem.start(code_runtime=None) as system:
        entered, go = threading.Event(), threading.Event()

        def held(args: Any, ctx: Any) -> Any:
            entered.set()
            go.wait(WAIT)
            return [block("ran")]

        system.tools.register(fixture("held", held))
        outcomes: list[Any] = []
        held_batch = batch("c1", name="held", agent="A")
        batch_thread = threading.Thread(
            target=lambda: outcomes.append(system.execute_batch(held_batch))
        )
        batch_thread.start()
        assert entered.wait(WAIT)
        injection = PausedAtLine(
            BatchRunner.inject.__code__,
            pause_at,
            lambda: system.agent("A").inject_context(plugin_context("late")),
        )
        go.set()
        batch_thread.join(0.5)  # the batch may wait for the paused injection's lock
        injection.resume()
        batch_thread.join(WAIT)
        if not injection.reached:
            return None
        drained = [context_text(c) for c in outcomes[0].contexts]
        recorded = [e for e in system.session.events if e.type == "user/message"]
        return drained.count("late") <= 1 and len(recorded) == 1


def test_a_context_injected_as_its_batch_finishes_is_never_lost() -> None:
    for pause_at in lines_of(BatchRunner.inject.__code__):
        assert late_injection_is_kept(pause_at) in (None, True), pause_at
