"""Every result names the call it answers: ``call_id`` on successes and failures (Code Mode
sub-calls carry the sub-call's id), and a batch's outcome is looked up by call id."""

from __future__ import annotations

from typing import Any

import pytest
from code_mode_support import FakeProgram, FakeRuntime, code_system, echo_tool, run_code
from conftest import call, echo, fixture

from dsh_tools import (
    AbortController,
    ExecuteBatch,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolSystem,
)


def test_a_success_and_a_failure_carry_their_call_id(system: ToolSystem) -> None:
    system.tools.register(echo())
    ok = system.execute(call("echo", {"text": "hi"}, call_id="first"))
    missing = system.execute(call("nowhere", call_id="second"))
    assert isinstance(ok, ToolExecutionSuccess) and ok.call_id == "first"
    assert isinstance(missing, ToolExecutionFailure) and missing.call_id == "second"


def test_call_id_is_part_of_equality_but_not_of_the_json_projection(system: ToolSystem) -> None:
    system.tools.register(echo())
    one = system.execute(call(call_id="one"))
    two = system.execute(call(call_id="two"))
    assert one != two
    assert (
        one.to_dict()
        == two.to_dict()
        == {
            "content": [{"type": "text", "text": "hi"}],
            "is_error": False,
            "value": "hi",
        }
    )


def test_post_execute_hooks_and_observers_see_the_call_id(system: ToolSystem) -> None:
    system.tools.register(echo())
    seen: list[str] = []

    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen.append("post:" + result.call_id)
        return await next()

    system.tools.on_post_execute(post)
    system.tools.on_result(lambda exec, result: seen.append("result:" + result.call_id))
    system.execute(call(call_id="c7"))
    assert seen == ["post:c7", "result:c7"]


def test_batch_outcome_looks_results_up_by_call_id(system: ToolSystem) -> None:
    system.tools.register(echo())
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[
                ToolCall("a", "echo", '{"text": "one"}'),
                ToolCall("b", "nowhere", "{}"),
                ToolCall("c", "echo", '{"text": "three"}'),
            ]
        )
    )
    assert [r.call_id for r in outcome.results] == ["a", "b", "c"]
    assert outcome.by_call_id("c").value == "three"  # type: ignore[union-attr]
    assert outcome.by_call_id("b").is_error
    assert outcome.get("a") is outcome.results[0]
    assert outcome.get("zzz") is None
    with pytest.raises(KeyError, match="'zzz'"):
        outcome.by_call_id("zzz")


def test_calls_abandoned_by_an_aborted_batch_carry_their_call_id(system: ToolSystem) -> None:
    controller = AbortController()

    def stop_the_batch(args: Any, ctx: Any) -> Any:
        controller.abort("user pressed stop")
        return [{"type": "text", "text": "stopped"}]

    system.tools.register(fixture("stopper", stop_the_batch))
    system.tools.register(fixture("later"))
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[ToolCall("s", "stopper", "{}"), ToolCall("l", "later", "{}")],
            signal=controller.signal,
        )
    )
    later = outcome.by_call_id("l")
    assert isinstance(later, ToolExecutionFailure)
    assert later.error.info.code == "ABORTED_BEFORE_DISPATCH"  # type: ignore[union-attr]


def test_code_mode_sub_call_results_carry_the_sub_call_id() -> None:
    seen: list[str] = []

    async def program(p: FakeProgram) -> Any:
        await p.call("echo", {"value": "one"})
        return await p.call("echo", {"value": "two"})

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_result(lambda exec, result: seen.append(result.call_id))
        outer = system.execute(run_code(call_id="outer"))
    assert outer.call_id == "outer"
    assert seen == ["outer:code:1", "outer:code:2", "outer"]
