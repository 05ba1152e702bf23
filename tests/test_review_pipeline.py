"""Contract checks found by an adversarial review of the registry, pipeline and pool.

Each test names the rule it holds the code to and the odd input or timing that once broke it.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest
from conftest import call, context, echo, fixture, text
from pool_support import batch, tool_call

from dsh_tools import (
    AbortController,
    Accept,
    ExecuteBatch,
    ExecuteCall,
    ToolOutput,
    ToolSystem,
    define_tool,
)
from dsh_tools.pipeline._json_text import parse_arguments


def cancelling_classifier(args: Any) -> bool:
    raise asyncio.CancelledError("classifier gave up")


# --- 1.21: a raising classifier means exclusive ---------------------------------------------


def test_a_classifier_raising_cancelled_error_reads_as_exclusive(system: ToolSystem) -> None:
    system.tools.register(fixture("x", is_concurrency_safe=cancelling_classifier))

    assert system.tools.execution_mode(call("x", {})) == "exclusive"


def test_a_batch_survives_a_classifier_raising_cancelled_error(system: ToolSystem) -> None:
    system.tools.register(fixture("x", is_concurrency_safe=cancelling_classifier))

    outcome = system.execute_batch(batch("c1", "c2"), timeout=10)

    assert [text(r) for r in outcome.results] == ["ran:x", "ran:x"]
    assert [e.type for e in system.session.events] == [
        "tool/call",
        "tool/result",
        "tool/call",
        "tool/result",
    ]


# --- only syntax errors fall back to the raw argument text ----------------------------------------


def test_an_integer_too_long_for_int_parsing_is_invalid_args_naming_it(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("x"))
    long_int = "1" + "0" * 5000  # valid JSON, beyond Python's default int-from-text limit

    assert parse_arguments(long_int) != long_int
    assert parse_arguments("[" * 3000 + long_int + "]" * 3000) != "[" * 3000 + long_int
    outcome = system.execute_batch(
        ExecuteBatch(calls=[tool_call("c1", "x", '{"n": ' + long_int + "}")]), timeout=10
    )

    assert text(outcome.results[0]) == (
        "Error: invalid arguments: arguments are not lossless JSON: arguments.n is int "
        "(out of range)"
    )


# --- an observer returning an awaitable has it scheduled, its failure logged ----------------------


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


# --- result and decision contexts are a list or tuple, kept element by element --------------------


def test_contexts_given_as_a_single_dict_fail_instead_of_splicing_its_keys(
    system: ToolSystem,
) -> None:
    deferred = context("body")
    single = context("post")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(deferred)
        return [{"type": "text", "text": "ok"}]

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await next()
        return Accept(additional_contexts=single)  # one context, not a list of them

    system.tools.register(fixture("x", body))
    system.tools.on_post_execute(post)

    result = system.execute(call("x", {}))

    assert result.is_error
    assert "additional_contexts" in text(result)
    assert "source" not in result.additional_contexts


# --- signal contract: one failing abort callback does not stop the others -------------------------


def test_an_abort_callback_raising_cancelled_error_does_not_stop_the_others(logs: Any) -> None:
    controller = AbortController()
    seen: list[Any] = []

    def cancelling(reason: Any) -> None:
        raise asyncio.CancelledError

    controller.signal.add_callback(cancelling)
    controller.signal.add_callback(seen.append)
    controller.abort("stop")

    assert seen == ["stop"]
    assert logs.warnings == ["abort callback failed"]


# --- stopping the system never leaves a waiting caller hanging ------------------------------------


def test_stopping_the_system_from_a_batch_observer_fails_the_batch_instead_of_hanging() -> None:
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("x"))
        system.tools.on_result(lambda exec, result: system.stop())

        with pytest.raises(RuntimeError, match="stopped before the call finished"):
            system.execute_batch(batch("c1", "c2"), timeout=10)
    finally:
        system.stop()


def test_a_system_records_into_the_session_log_it_was_given() -> None:
    from dsh_tools import SessionLog

    log = SessionLog(max_events=4)
    with ToolSystem.start(code_runtime=None, session=log) as system:
        assert system.session is log
        system.tools.register(echo())
        for n in range(5):
            system.execute(ExecuteCall(call_id=f"c{n}", name="echo", arguments={"text": "x"}))
    assert [e.data["call_id"] for e in log.events] == ["c3", "c3", "c4", "c4"]


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
