"""``execution_mode(call)``: when a call may run in parallel, through a handle and in
``classify``, the rule underneath."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest
from conftest import block, call, fixture, text
from pool_support import batch

from dsh_tools import ToolCall, ToolOutput, ToolSystem, define_tool
from dsh_tools.registry import ToolDefinition, classify


def test_rp91_a_classifier_returning_true_is_parallel(system: ToolSystem) -> None:
    system.tools.register(fixture("safe", is_concurrency_safe=lambda a: True))
    assert system.tools.execution_mode(call("safe")) == "parallel"


def test_rp91_no_classifier_is_exclusive(system: ToolSystem) -> None:
    system.tools.register(fixture("plain"))
    assert system.tools.execution_mode(call("plain")) == "exclusive"


def test_rp91_an_unknown_tool_is_exclusive(system: ToolSystem) -> None:
    assert system.tools.execution_mode(call("ghost")) == "exclusive"


def typed_mode_tool(classifier: Any, *, required: bool = False) -> Any:
    mode: dict[str, Any] = {"type": "string", "enum": ["read", "write"]}
    if required:
        mode["required"] = True
    return define_tool(
        name="files",
        description="read or write",
        parameters={"mode": mode},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [block(v)]),
        execute=lambda args, ctx: args["mode"],
        is_concurrency_safe=classifier,
    )


def test_rp91_a_typed_classifier_reads_the_arguments(system: ToolSystem) -> None:
    system.tools.register(typed_mode_tool(lambda args: args.get("mode") == "read"))
    assert system.tools.execution_mode(call("files", {"mode": "read"})) == "parallel"
    assert system.tools.execution_mode(call("files", {"mode": "write"})) == "exclusive"


def test_a_tool_call_is_classified_on_its_argument_text_read_as_a_batch_reads_it(
    system: ToolSystem,
) -> None:
    system.tools.register(typed_mode_tool(lambda args: args.get("mode") == "read"))
    assert system.tools.execution_mode(ToolCall("c1", "files", '{"mode": "read"}')) == "parallel"
    assert system.tools.execution_mode(ToolCall("c1", "files", '{"mode": "write"}')) == "exclusive"
    # A text the batch refuses runs nothing, so it holds no sibling back, as in the pool.
    assert system.tools.execution_mode(ToolCall("c1", "files", "{not json")) == "parallel"
    turn = batch(ToolCall("c1", "files", '{"mode": "read"}'), ToolCall("c2", "files", "{}"))
    assert [system.tools.execution_mode(c) for c in turn.calls] == ["parallel", "exclusive"]


def test_rp91_invalid_typed_arguments_are_exclusive_without_asking(system: ToolSystem) -> None:
    asked: list[Any] = []

    def classifier(args: Any) -> bool:
        asked.append(args)
        return True

    system.tools.register(typed_mode_tool(classifier, required=True))
    assert system.tools.execution_mode(call("files", {})) == "exclusive"
    assert asked == []


def test_rp91_a_raising_classifier_is_exclusive(system: ToolSystem) -> None:
    def classifier(args: Any) -> bool:
        raise RuntimeError("classifier exploded")

    system.tools.register(fixture("raw", is_concurrency_safe=classifier))
    assert system.tools.execution_mode(call("raw")) == "exclusive"


@pytest.mark.parametrize("verdict", ["yes", 1, 1.0, [True], False, None])
def test_rp91_only_the_true_singleton_is_parallel(system: ToolSystem, verdict: Any) -> None:
    system.tools.register(fixture("raw", is_concurrency_safe=lambda a: verdict))
    assert system.tools.execution_mode(call("raw")) == "exclusive"


def test_rp91_an_async_classifier_is_exclusive_and_leaks_no_coroutine(
    system: ToolSystem,
) -> None:
    async def classifier(args: Any) -> bool:
        return True

    system.tools.register(fixture("raw", is_concurrency_safe=classifier))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert system.tools.execution_mode(call("raw")) == "exclusive"
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_rp91_a_raw_classifier_receives_the_arguments_unchanged(system: ToolSystem) -> None:
    received: list[Any] = []

    def classifier(args: Any) -> bool:
        received.append(args)
        return True

    system.tools.register(fixture("raw", is_concurrency_safe=classifier))
    arguments = {"anything": 1}
    assert system.tools.execution_mode(call("raw", arguments)) == "parallel"
    assert received == [{"anything": 1}]


def test_rp91_classification_never_affects_a_single_call(system: ToolSystem) -> None:
    system.tools.register(fixture("safe", is_concurrency_safe=lambda a: True))
    system.tools.register(fixture("plain"))
    assert not system.execute(call("safe")).is_error
    assert not system.execute(call("plain")).is_error


def test_rp91_the_scope_handle_classifies_for_its_agent(system: ToolSystem) -> None:
    system.tools.register(fixture("t", is_concurrency_safe=lambda a: False))
    scope = system.agent("A")
    scope.tools.register(fixture("t", is_concurrency_safe=lambda a: True))
    assert system.tools.execution_mode(call("t")) == "exclusive"
    assert scope.tools.execution_mode(call("t")) == "parallel"
    assert system.tools.execution_mode(call("t", agent="A")) == "parallel"


def cancelling_classifier(args: Any) -> bool:
    raise asyncio.CancelledError("classifier gave up")


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


# --- classify(), the rule execution_mode applies -----------------------------------------------


def classified(**overrides: Any) -> ToolDefinition:
    """A raw definition for ``classify`` on its own, without a system."""
    fields: dict[str, Any] = {
        "name": "raw",
        "description": "a raw tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "output": ToolOutput({}, lambda args, value: [{"type": "text", "text": str(value)}]),
        "execute": lambda args, run_ctx: None,
    }
    fields.update(overrides)
    return ToolDefinition(**fields)


@pytest.mark.parametrize("verdict", [False, 1, "yes", None, [True]])
def test_classify_calls_only_the_true_singleton_parallel(verdict: Any) -> None:
    assert classify(classified(is_concurrency_safe=lambda args: verdict), {}) is False


def test_classify_without_a_classifier_or_when_it_raises_is_exclusive() -> None:
    assert classify(classified(is_concurrency_safe=lambda args: True), {}) is True
    assert classify(classified(), {}) is False

    def explode(args: Any) -> bool:
        raise RuntimeError("no")

    assert classify(classified(is_concurrency_safe=explode), {}) is False


def test_classify_never_starts_an_async_classifier() -> None:
    started: list[bool] = []

    async def classifier(args: Any) -> bool:
        started.append(True)
        return True

    assert classify(classified(is_concurrency_safe=classifier), {}) is False
    assert started == []


def test_classify_passes_the_very_arguments_object() -> None:
    seen: list[Any] = []

    def classifier(args: Any) -> bool:
        seen.append(args)
        return True

    arguments = {"anything": 1}
    assert classify(classified(is_concurrency_safe=classifier), arguments) is True
    assert seen[0] is arguments


@pytest.mark.parametrize("given", ["safe", None, {"name": "safe"}], ids=["str", "none", "dict"])
def test_execution_mode_refuses_what_is_not_a_call(system: ToolSystem, given: Any) -> None:
    # A bare tool name is the likely slip: said so, not an AttributeError about ``.name``.
    system.tools.register(fixture("safe", is_concurrency_safe=lambda a: True))
    with pytest.raises(TypeError) as error:
        system.tools.execution_mode(given)
    expected = f"execution_mode() takes an ExecuteCall or a ToolCall, got {type(given).__name__}"
    assert str(error.value) == expected
