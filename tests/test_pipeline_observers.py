"""``result`` observers and scoped dispatch."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from typing import Any

import pytest
from conftest import Logs, block, call, echo, fixture, text, value_of

from dsh_tools import (
    Deny,
    ToolExecutionFailure,
    ToolFailure,
    ToolSystem,
)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_rp96_observers_are_isolated_and_cannot_change_the_result(
    system: ToolSystem, logs: Logs
) -> None:
    system.tools.register(echo())

    async def outer(exec: Any, next: Any) -> Any:
        await next()
        return ToolExecutionFailure(ToolFailure("outer failure"), [block("outer failure")])

    system.tools.on_execute(outer, prepend=True)
    checked: list[bool] = []
    recorded: list[bool] = []

    def checker(exec: Any, result: Any) -> None:
        with pytest.raises(AttributeError):
            exec.name = "other"
        with pytest.raises(TypeError):
            exec.arguments["text"] = "changed"
        with pytest.raises(AttributeError):
            result.content = []
        with pytest.raises(TypeError):
            result.content.append(block("more"))
        with pytest.raises(TypeError):
            result.content[0]["text"] = "changed"
        checked.append(result.is_error)

    def unprintable(exec: Any, result: Any) -> None:
        raise Unprintable()

    def failing_later(exec: Any, result: Any) -> Any:
        async def fail() -> None:
            raise RuntimeError("async observer failure")

        return fail()

    system.agent("A").tools.on_result(checker)
    system.tools.on_result(unprintable)
    system.tools.on_result(failing_later)
    system.tools.on_result(lambda exec, result: recorded.append(result.is_error))

    result = system.execute(call(agent="A"))
    assert result.is_error
    assert text(result) == "outer failure"
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "outer failure"}],
        "is_error": True,
        "error": {"message": "outer failure"},
    }
    assert checked == [True]
    assert recorded == [True]
    warnings = logs.wait_for_warnings(2)
    assert len(warnings) == 2
    assert any("<unprintable thrown value>" in w for w in warnings)
    assert any("async observer failure" in w for w in warnings)
    for warning in warnings:
        assert warning.startswith('tool "echo" (c1): tools/result observer failed: ')
    for entry in logs.entries:
        assert entry["call_id"] == "c1"
        assert entry["tool"] == "echo"
        assert type(entry["token"]) is int
        assert entry["parent"] is None


def test_rp97_scoped_listeners_see_only_their_agent(system: ToolSystem) -> None:
    system.tools.register(echo())
    vetoed: list[Any] = []

    async def veto(exec: Any, next: Any) -> Any:
        vetoed.append(exec.agent)
        return Deny("scoped veto")

    scope = system.agent("A")
    lift = scope.tools.on_pre_execute(veto)
    scoped: list[str] = []
    everyone: list[str] = []
    scope.tools.on_result(lambda exec, result: scoped.append(exec.call_id))
    system.tools.on_result(lambda exec, result: everyone.append(exec.call_id))

    assert text(system.execute(call(agent="A", call_id="a1"))) == "Error: scoped veto"
    assert text(system.execute(call(agent="B", call_id="b1"))) == "hi"
    assert text(system.execute(call(call_id="n1"))) == "hi"
    assert vetoed == ["A"]
    lift()
    assert text(system.execute(call(agent="A", call_id="a2"))) == "hi"
    assert scoped == ["a1", "a2"]
    assert everyone == ["a1", "b1", "n1", "a2"]


def test_rp97_an_observer_may_swap_a_tool_for_the_next_call(system: ToolSystem) -> None:
    dispose = system.tools.register(echo(execute=lambda a, c: "first version"))
    swapped: list[bool] = []

    def swap(exec: Any, result: Any) -> None:
        if not swapped:
            swapped.append(True)
            dispose()
            system.tools.register(echo(execute=lambda a, c: "second version"))

    system.tools.on_result(swap)
    assert value_of(system.execute(call())) == "first version"
    assert value_of(system.execute(call(call_id="c2"))) == "second version"


def test_an_async_change_observer_is_awaited_and_its_failure_logged(
    system: ToolSystem, logs: Any
) -> None:
    ran: list[str] = []

    async def observer() -> None:
        ran.append("change")
        raise RuntimeError("async change failure")

    system.tools.on_change(observer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system.tools.register(fixture("x"))
        found = logs.wait_for_warnings(1)
        gc.collect()

    assert ran == ["change"]
    assert any("async change failure" in w for w in found)
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_an_async_observer_still_pending_at_stop_is_cancelled_not_reported_as_failed(
    logs: Logs, caplog: pytest.LogCaptureFixture
) -> None:
    cancelled = threading.Event()
    with ToolSystem.start() as system:
        system.tools.register(echo())

        async def waits_forever(exec: Any, result: Any) -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        system.tools.on_result(waits_forever)
        assert not system.execute(call()).is_error
    assert cancelled.is_set()  # the stop ended it, rather than drop its task unfinished
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    assert logs.warnings == []
    assert "Task was destroyed but it is pending" not in caplog.text


def test_an_async_observer_finishing_as_the_system_stops_is_let_finish() -> None:
    """An exporter that ships the last results as the harness stops gets to ship them: a
    stop waits a moment for observers still running before it cancels them."""
    shipped: list[str] = []
    with ToolSystem.start() as system:
        system.tools.register(echo())

        async def export(exec: Any, result: Any) -> None:
            await asyncio.sleep(0.05)  # a round trip to the tracing backend
            shipped.append(exec.call_id)

        system.tools.on_result(export)
        assert not system.execute(call(call_id="last")).is_error
    assert shipped == ["last"]


def test_a_calls_log_lines_name_its_agent(system: ToolSystem, logs: Logs) -> None:
    """A harness running several agents tells from each log line which agent's call it is
    about, as it tells the call and its run (``agent`` is None for a call without one)."""

    def broken(args: Any, ctx: Any) -> Any:
        raise RuntimeError("the body broke")

    def broken_observer(exec: Any, result: Any) -> None:
        raise RuntimeError("the observer broke")

    system.tools.register(fixture("broken", broken))
    system.tools.on_result(broken_observer)
    system.execute(call("broken", call_id="p1", agent="planner"))
    system.execute(call("broken", call_id="n1"))
    logs.wait_for_warnings(4)
    by_call = {(e["call_id"], e["stage"]): e for e in logs.entries}
    assert by_call[("p1", "body")]["agent"] == "planner"
    assert by_call[("p1", "observer")]["agent"] == "planner"
    assert by_call[("n1", "body")]["agent"] is None
    assert by_call[("n1", "observer")]["agent"] is None
