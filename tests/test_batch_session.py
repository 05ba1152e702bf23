"""What a batch leaves in the session log: its call and result events, error info and meta kept
for the harness, and the messages the model would see."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import WAIT, arun, block, content_output, fixture
from pool_support import batch, code, tool_call, trace

from dsh_tools import (
    AbortController,
    BatchOutcome,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    FrozenDict,
    HarnessError,
    ToolDefinition,
    ToolSystem,
)

TOOL_RESULT_KEYS = {"type", "tool_call_id", "content", "is_error"}


def result_data(system: ToolSystem) -> dict[str, Any]:
    """The ``tool/result`` data of each call, by call id."""
    return {e.data["call_id"]: e.data for e in system.session.events if e.type == "tool/result"}


def test_rp116_the_session_keeps_error_info_and_meta_and_the_model_sees_neither(
    system: ToolSystem,
) -> None:
    def explode(args: Any, ctx: Any) -> Any:
        raise HarnessError("exploded", "BOOM")

    system.tools.register(fixture("boom", explode))
    system.tools.register(fixture("denied"))
    system.tools.register(
        ToolDefinition(
            name="meta",
            description="a tool with presentation meta",
            parameters={"type": "object"},
            output=content_output(presentation_meta=lambda args, value: {"lines": 2}),
            execute=lambda args, ctx: [block("two lines")],
        )
    )

    async def deny_denied(exec: Any, next: Any) -> Any:
        return Deny("not allowed") if exec.name == "denied" else await next()

    system.tools.on_pre_execute(deny_denied)
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[tool_call("c1", "boom"), tool_call("c2", "denied"), tool_call("c3", "meta")]
        )
    )
    data = result_data(system)
    assert data["c1"] == {
        "call_id": "c1",
        "content": [block("Error: exploded")],
        "is_error": True,
        "error": {"name": "HarnessError", "code": "BOOM"},
    }
    assert data["c2"] == {
        "call_id": "c2",
        "content": [block("Error: not allowed")],
        "is_error": True,
    }
    assert data["c3"] == {
        "call_id": "c3",
        "content": [block("two lines")],
        "is_error": False,
        "meta": {"lines": 2},
    }
    history = system.session.derive_messages()
    blocks = [m["content"] for m in history]
    assert all(len(b) == 1 and set(b[0]) == TOOL_RESULT_KEYS for b in blocks)
    assert [m["role"] for m in history] == ["user"] * 3
    assert [b[0] for b in blocks] == [
        {
            "type": "tool-result",
            "tool_call_id": "c1",
            "content": [block("Error: exploded")],
            "is_error": True,
        },
        {
            "type": "tool-result",
            "tool_call_id": "c2",
            "content": [block("Error: not allowed")],
            "is_error": True,
        },
        {
            "type": "tool-result",
            "tool_call_id": "c3",
            "content": [block("two lines")],
            "is_error": False,
        },
    ]
    assert [r.is_error for r in outcome.results] == [True, True, False]


def test_a_tool_call_event_holds_the_raw_text_and_the_batch_agent(system: ToolSystem) -> None:
    system.tools.register(fixture("x"))
    raw = '{ "b": 1,  "a": [ ] }'
    system.execute_batch(batch(tool_call("c1", "x", raw), agent="A"))
    first, second = system.session.events
    assert first.type == "tool/call"
    assert first.data == {"call_id": "c1", "name": "x", "arguments": raw}
    assert type(first.data) is FrozenDict
    assert first.agent == "A" and second.agent == "A"
    assert "value" not in second.data


def test_every_call_ends_with_one_call_event_and_one_result_event(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        if ctx.call_id == "c3":
            controller.abort()
        return [block("ran")]

    controller = AbortController()
    system.tools.register(fixture("x", body))
    ids = [f"c{i}" for i in range(1, 7)]
    outcome = system.execute_batch(batch(*ids, signal=controller.signal))
    events = trace(system)
    for call_id in ids:
        assert events.count(("tool/call", call_id)) == 1
        assert events.count(("tool/result", call_id)) == 1
        assert events.index(("tool/call", call_id)) < events.index(("tool/result", call_id))
    assert len(events) == 2 * len(ids)
    assert [code(r) for r in outcome.results] == [None, None, "ABORTED"] + [
        "ABORTED_BEFORE_DISPATCH"
    ] * 3


def test_an_empty_batch_records_nothing(system: ToolSystem) -> None:
    outcome = system.execute_batch(ExecuteBatch(calls=[]))
    assert list(outcome.results) == [] and list(outcome.contexts) == []
    assert system.session.events == []


def test_ref_ask_runs_a_batch_like_execute_batch(system: ToolSystem) -> None:
    system.tools.register(fixture("x", lambda args, ctx: [block(f"ran:{ctx.call_id}")]))
    outcome = system.ref.ask(batch("c1", "c2"), timeout=WAIT)
    assert isinstance(outcome, BatchOutcome)
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:c1", "ran:c2"]
    assert trace(system) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]


def test_a_wrong_message_told_to_system_ref_is_refused_and_leaves_it_answering(
    system: ToolSystem,
) -> None:
    # Told (no caller to hand the TypeError to), it stopped the front actor for good: every
    # later system.ref.ask failed with ActorDeadError while the system ran on.
    system.tools.register(fixture("x", lambda args, ctx: [block(f"ran:{ctx.call_id}")]))
    with pytest.raises(TypeError, match=r"system\.ref answers ExecuteCall and ExecuteBatch"):
        system.ref.tell(tool_call("c1"))
    with pytest.raises(TypeError, match=r"system\.ref answers ExecuteCall and ExecuteBatch"):
        system.ref.ask(tool_call("c2"), timeout=WAIT)
    system.ref.tell(batch("c3"))
    outcome = system.ref.ask(batch("c4"), timeout=WAIT)
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:c4"]


@pytest.mark.parametrize(
    ("timeout", "error"),
    [("1", TypeError), (True, TypeError), (-1, ValueError), (float("nan"), ValueError)],
    ids=["str", "bool", "negative", "nan"],
)
def test_ref_ask_refuses_a_bad_timeout_before_anything_runs(
    system: ToolSystem, timeout: Any, error: type[Exception]
) -> None:
    # Found only once the call had been sent, it would leave the call running unclaimed.
    ran: list[str] = []
    system.tools.register(fixture("x", lambda args, ctx: ran.append("x") or [block("ran")]))
    with pytest.raises(error, match=r"^ref\.ask\(\) timeout must be a number of seconds"):
        system.ref.ask(ExecuteCall(call_id="c1", name="x", arguments={}), timeout=timeout)
    assert system.ref.ask(batch("c2"), timeout=WAIT).results[0].content[0]["text"] == "ran"
    assert ran == ["x"]
    assert trace(system) == [("tool/call", "c2"), ("tool/result", "c2")]


def test_execute_batch_async_runs_the_batch_on_the_system_loop(system: ToolSystem) -> None:
    system.tools.register(fixture("x"))

    async def main() -> BatchOutcome:
        return await system.execute_batch_async(batch("c1"))

    outcome = arun(main())
    assert [r.is_error for r in outcome.results] == [False]
    assert trace(system) == [("tool/call", "c1"), ("tool/result", "c1")]


def test_a_blocking_batch_from_a_tool_on_the_system_loop_is_refused_naming_the_async_form(
    system: ToolSystem,
) -> None:
    # It said only "this blocking call cannot be made from the system loop", naming neither
    # the call nor what to use instead.
    system.tools.register(fixture("leaf"))

    async def nested(args: Any, ctx: Any) -> Any:
        try:
            system.execute_batch(ExecuteBatch(calls=[tool_call("n1", "leaf", "{}")]))
        except RuntimeError as exc:
            inner = await system.execute_batch_async(ExecuteBatch(calls=[tool_call("n2", "leaf")]))
            return [block(f"{exc} | {inner.results[0].content[0]['text']}")]
        return [block("ran")]

    system.tools.register(fixture("outer", nested))
    outcome = system.execute_batch(ExecuteBatch(calls=[tool_call("c1", "outer", "{}")]))
    assert outcome.results[0].content[0]["text"] == (
        "execute_batch() cannot block the system loop, which runs this hook or async tool and "
        "would run the batch; use await system.execute_batch_async(batch) | ran:leaf"
    )


def test_derived_history_of_one_agent_skips_the_other_agents_batch(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("x"))
    system.execute_batch(batch("a1", agent="A"))
    system.execute_batch(batch("b1", agent="B"))
    history = system.session.derive_messages("B")
    assert [m["content"][0]["tool_call_id"] for m in history] == ["b1"]
