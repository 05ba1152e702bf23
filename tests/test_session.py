"""The session log of single calls.

Batch events (error info and meta, the context FIFO) are tested with the dispatcher pool; here
every entry point of one call records one ``tool/call`` and one ``tool/result``, with snake_case
frozen data.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
from conftest import WAIT, arun, block, call, context, echo, fixture

from dsh_tools import (
    Deny,
    ExecuteCall,
    ExecutionToken,
    FrozenDict,
    HarnessError,
    SessionEvent,
    SessionLog,
    ToolOutput,
    ToolSystem,
    define_tool,
)


def kinds(system: ToolSystem) -> list[tuple[str, str]]:
    return [(e.type, e.data["call_id"]) for e in system.session.events]


def test_execute_records_a_call_then_its_result(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call("echo", {"text": "hi"}, agent="A"))
    first, second = system.session.events
    assert isinstance(first, SessionEvent)
    assert first.type == "tool/call"
    assert first.data == {"call_id": "c1", "name": "echo", "arguments": '{"text":"hi"}'}
    assert first.agent == "A"
    assert second.type == "tool/result"
    assert second.data == {
        "call_id": "c1",
        "content": [{"type": "text", "text": "hi"}],
        "is_error": False,
    }
    assert second.agent == "A"
    assert first.time <= second.time


def test_every_entry_point_records_one_pair(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call(call_id="sync"))
    system.execute(call(call_id="timed"), timeout=WAIT)
    arun(system.execute_async(call(call_id="async")))
    system.ref.ask(call(call_id="asked"), timeout=WAIT)
    assert kinds(system) == [
        (kind, call_id)
        for call_id in ("sync", "timed", "async", "asked")
        for kind in ("tool/call", "tool/result")
    ]


def test_a_nested_call_records_no_tool_events(system: ToolSystem) -> None:
    system.tools.register(echo())
    result = system.execute(call(parent=ExecutionToken()))
    assert not result.is_error
    assert system.session.events == []


def test_a_harness_failure_persists_its_error_info_but_not_its_message(
    system: ToolSystem,
) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise HarnessError("exploded", "BOOM")

    system.tools.register(echo(execute=body))
    system.execute(call())
    result_event = system.session.events[1]
    assert result_event.data == {
        "call_id": "c1",
        "content": [{"type": "text", "text": "Error: exploded"}],
        "is_error": True,
        "error": {"name": "HarnessError", "code": "BOOM"},
    }


def test_a_denial_persists_no_error_field(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def deny(exec: Any, next: Any) -> Any:
        return Deny("not today")

    system.tools.on_pre_execute(deny)
    system.execute(call())
    data = system.session.events[1].data
    assert data["is_error"] is True
    assert "error" not in data
    assert data["content"] == [{"type": "text", "text": "Error: not today"}]


def test_meta_is_persisted_and_the_value_never_is(system: ToolSystem) -> None:
    system.tools.register(
        define_tool(
            name="edit",
            description="edit",
            parameters={},
            output=ToolOutput(
                schema={"type": "object", "additionalProperties": True},
                render=lambda a, v: [block("edited")],
                presentation_meta=lambda a, v: {"diffs": [{"path": "a"}]},
            ),
            execute=lambda a, c: {"secret": "value"},
        )
    )
    system.execute(call("edit"))
    data = system.session.events[1].data
    assert data["meta"] == {"diffs": [{"path": "a"}]}
    assert "value" not in data
    assert "secret" not in repr(data)


def test_lossy_arguments_are_logged_as_null(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call("echo", {"bad": {1, 2}}))
    assert system.session.events[0].data["arguments"] is None
    assert system.session.events[1].data["is_error"] is True


def test_deep_arguments_are_logged_as_compact_json(system: ToolSystem) -> None:
    system.tools.register(fixture("deep"))
    nested: list[Any] = []
    for _ in range(4999):
        nested = [nested]
    system.execute(call("deep", {"v": nested}))
    logged = system.session.events[0].data["arguments"]
    assert logged == '{"v":' + "[" * 5000 + "]" * 5000 + "}"


def test_event_data_is_frozen(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call())
    for event in system.session.events:
        assert type(event.data) is FrozenDict
        with pytest.raises(TypeError):
            event.data["call_id"] = "other"
    with pytest.raises(AttributeError):
        system.session.events[0].type = "other"  # type: ignore[misc]


def test_a_harness_that_logged_its_own_callback_is_collected_once_dropped() -> None:
    class Harness:
        def __init__(self) -> None:
            self.log = SessionLog()
            self.log.append("note", {"callback": self.on_note})

        def on_note(self) -> None:
            pass

    harness = Harness()
    gone = weakref.ref(harness)
    del harness
    gc.collect()
    assert gone() is None


def test_events_is_a_copy(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call())
    events = system.session.events
    events.clear()
    assert len(system.session.events) == 2


def test_derive_messages_shows_only_tool_results_and_contexts(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call(call_id="c1", agent="A"))
    system.agent("A").inject_context(context("note"))
    system.execute(call(call_id="c2", agent="B"))
    messages = system.session.derive_messages()
    assert messages == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "tool_call_id": "c1",
                    "content": [{"type": "text", "text": "hi"}],
                    "is_error": False,
                }
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "note"}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "tool_call_id": "c2",
                    "content": [{"type": "text", "text": "hi"}],
                    "is_error": False,
                }
            ],
        },
    ]
    only_a = system.session.derive_messages("A")
    assert [m["content"][0].get("tool_call_id") for m in only_a] == ["c1", None]


def test_an_injected_context_outside_a_batch_is_a_user_message(system: ToolSystem) -> None:
    system.agent("A").inject_context(context("fyi", placement="prompt-prefix"))
    (event,) = system.session.events
    assert event.type == "user/message"
    assert event.agent == "A"
    assert event.data == {
        "content": [{"type": "text", "text": "fyi"}],
        "source": {"kind": "plugin", "plugin": "fyi"},
        "placement": "prompt-prefix",
    }


def test_derived_failures_carry_no_error_info(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise HarnessError("exploded", "BOOM")

    system.tools.register(echo(execute=body))
    system.execute(call())
    (message,) = system.session.derive_messages()
    assert message["content"] == [
        {
            "type": "tool-result",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "Error: exploded"}],
            "is_error": True,
        }
    ]


def test_clear_forgets_every_event(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.execute(call())
    system.session.clear()
    assert system.session.events == []
    assert system.session.derive_messages() == []
    system.execute(call(call_id="c2"))
    assert kinds(system) == [("tool/call", "c2"), ("tool/result", "c2")]


def test_max_events_keeps_the_newest() -> None:
    log = SessionLog(max_events=3)
    for n in range(5):
        log.append("user/message", FrozenDict(content=[block(str(n))]))
    assert [e.data["content"][0]["text"] for e in log.events] == ["2", "3", "4"]
    assert len(log) == 3


@pytest.mark.parametrize(
    ("bound", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("1000", TypeError),
        (2**63, ValueError),
        (10**30, ValueError),
        pytest.param(10**5000, ValueError, id="10**5000"),
    ],
)
def test_max_events_must_be_a_positive_integer(bound: Any, error: type[Exception]) -> None:
    # Also one too large for a deque's length: refused where it is given, never an
    # OverflowError from inside, nor a message that cannot write the number out. One that
    # is no int at all is a wrong type.
    with pytest.raises(
        error,
        match=r"^SessionLog\(max_events\): max_events must be a positive integer of at most "
        r"9223372036854775807, or None for no bound; got ",
    ):
        SessionLog(max_events=bound)


def test_the_largest_bound_a_session_log_takes_keeps_every_event() -> None:
    log = SessionLog(max_events=2**63 - 1)
    log.append("user/message", FrozenDict(content=[]))
    assert len(log) == 1


def test_concurrent_calls_each_record_their_pair(system: ToolSystem) -> None:
    system.tools.register(echo())
    futures = [system.ref.ask(call(call_id=f"c{i}"), block=False) for i in range(40)]
    for future in futures:
        future.get(timeout=WAIT)
    events = system.session.events
    for i in range(40):
        mine = [e.type for e in events if e.data["call_id"] == f"c{i}"]
        assert mine == ["tool/call", "tool/result"]


def test_events_logged_from_many_threads_are_in_the_order_of_their_times() -> None:
    log = SessionLog()

    def record(worker: int) -> None:
        for i in range(2000):
            log.append("note", f"{worker}-{i}")

    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    times = [event.time for event in log.events]
    assert len(times) == 8000
    assert times == sorted(times)


def test_a_system_records_into_the_session_log_it_was_given() -> None:
    from dsh_tools import SessionLog

    log = SessionLog(max_events=4)
    with ToolSystem.start(code_runtime=None, session=log) as system:
        assert system.session is log
        system.tools.register(echo())
        for n in range(5):
            system.execute(ExecuteCall(call_id=f"c{n}", name="echo", arguments={"text": "x"}))
    assert [e.data["call_id"] for e in log.events] == ["c3", "c3", "c4", "c4"]
