"""Arguments that a provider response holds already parsed, read into ``ToolCall`` text.

Python's ``json`` (which the SDKs' HTTP client decodes with) accepts ``NaN``, ``Infinity`` and
escaped lone surrogates, and a hand-built response may nest deeper than a recursive encoder
goes. The adapters keep such arguments as the model sent them, so the batch fails that call
alone, naming what is wrong, while the other calls of the turn run.
"""

from __future__ import annotations

import collections
import json
import math
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dsh_tools import (
    BatchOutcome,
    ExecuteBatch,
    ToolCall,
    ToolExecutionSuccess,
    ToolOutput,
    ToolSystem,
    define_tool,
    snapshot_json,
)
from dsh_tools.integrations import (
    anthropic_tool_calls,
    anthropic_tool_results,
    openai_assistant_message,
    openai_tool_calls,
    openai_tool_messages,
    responses_tool_calls,
)

Read = Callable[[Any, Any], list[ToolCall]]


def _anthropic(first: Any, second: Any) -> list[ToolCall]:
    blocks = [
        {"type": "tool_use", "id": "c1", "name": "echo", "input": first},
        {"type": "tool_use", "id": "c2", "name": "echo", "input": second},
    ]
    return anthropic_tool_calls({"content": blocks})


def _chat(first: Any, second: Any) -> list[ToolCall]:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": first}},
        {"id": "c2", "type": "function", "function": {"name": "echo", "arguments": second}},
    ]
    return openai_tool_calls({"role": "assistant", "tool_calls": calls})


def _responses(first: Any, second: Any) -> list[ToolCall]:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": first},
        {"type": "function_call", "call_id": "c2", "name": "echo", "arguments": second},
    ]
    return responses_tool_calls({"output": items})


ADAPTERS = pytest.mark.parametrize(
    "read", [_anthropic, _chat, _responses], ids=["anthropic", "chat", "responses"]
)

# Where each adapter's first call keeps its arguments, as its errors name it.
ARGUMENTS_AT: dict[Read, str] = {
    _anthropic: "message.content[0].input",
    _chat: "message.tool_calls[0].function.arguments",
    _responses: "response.output[0].arguments",
}


@pytest.fixture(scope="module")
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(code_runtime=None) as started:
        started.tools.register(
            define_tool(
                name="echo",
                description="Says what it was given.",
                parameters={"x": {"type": "json"}},
                output=ToolOutput(
                    schema={"type": "json"},
                    render=lambda args, value: [{"type": "text", "text": repr(value)}],
                ),
                execute=lambda args, ctx: args["x"],
            )
        )
        started.tools.register(
            define_tool(
                name="depth",
                description="How deep its argument nests.",
                parameters={"x": {"type": "json"}},
                output=ToolOutput(
                    schema={"type": "json"},
                    render=lambda args, value: [{"type": "text", "text": str(value)}],
                ),
                execute=lambda args, ctx: _depth(args["x"]),
            )
        )
        yield started


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, dict) and "a" in value:
        value, depth = value["a"], depth + 1
    return depth


def _nested(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    current = root
    for _ in range(levels):
        current["a"] = {}
        current = current["a"]
    return root


NOT_LOSSLESS = "invalid arguments: arguments are not lossless JSON: "


@ADAPTERS
@pytest.mark.parametrize(
    ("bad", "text", "error"),
    [
        (
            math.nan,
            '{"x":NaN}',
            "invalid arguments: arguments are not valid JSON: unexpected character 'N' at "
            "line 1, column 6",
        ),
        (math.inf, '{"x":1e400}', NOT_LOSSLESS + "arguments.x is float (inf)"),
        (-math.inf, '{"x":-1e400}', NOT_LOSSLESS + "arguments.x is float (-inf)"),
        ("\ud800", '{"x":"\\ud800"}', NOT_LOSSLESS + "arguments.x is str (lone surrogate)"),
    ],
    ids=["nan", "inf", "-inf", "lone-surrogate"],
)
def test_arguments_that_are_not_lossless_fail_that_call_alone(
    system: ToolSystem, read: Read, bad: Any, text: str, error: str
) -> None:
    calls = read({"x": bad}, {"x": 1.5})
    assert calls == [ToolCall("c1", "echo", text), ToolCall("c2", "echo", '{"x":1.5}')]
    first, second = system.execute_batch(ExecuteBatch(calls=calls)).results
    assert first.is_error is True
    assert first.content[0]["text"] == f"Error: {error}"
    assert (second.is_error, second.content[0]["text"]) == (False, "1.5")


def test_the_echoed_chat_call_keeps_the_arguments_it_was_sent() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": {"x": math.nan}},
            }
        ],
    }
    echo: Any = openai_assistant_message(message)
    assert echo["tool_calls"][0]["function"]["arguments"] == '{"x":NaN}'


@ADAPTERS
def test_arguments_nested_thousands_of_levels_deep_reach_the_tool(
    system: ToolSystem, read: Read
) -> None:
    levels = 5_000
    calls = read({"x": _nested(levels)}, {"x": 1.5})
    assert calls[0].arguments == '{"x":' + '{"a":' * levels + "{}" + "}" * levels + "}"
    deep = ToolCall(calls[0].call_id, "depth", calls[0].arguments)
    first, second = system.execute_batch(ExecuteBatch(calls=[deep, calls[1]])).results
    assert (first.is_error, first.content[0]["text"]) == (False, str(levels))
    assert second.is_error is False


@ADAPTERS
def test_arguments_a_json_decoder_hook_made_reach_the_tool_as_json(
    system: ToolSystem, read: Read
) -> None:
    # json.loads(object_pairs_hook=OrderedDict) makes dict subclasses: still JSON objects.
    given = json.loads('{"x": {"b": 1, "a": [2]}}', object_pairs_hook=collections.OrderedDict)
    calls = read(given, {"x": 1.5})
    assert calls[0].arguments == '{"x":{"b":1,"a":[2]}}'


def _cycle() -> dict[str, Any]:
    looped: dict[str, Any] = {"x": 1}
    looped["self"] = looped
    return looped


@ADAPTERS
@pytest.mark.parametrize(
    ("given", "found"),
    [
        ({"x": (1, 2)}, ".x is tuple"),
        ({"x": [1, {3}]}, ".x[1] is set"),
        ({"x": {1: "one"}}, ".x is dict with int key"),
        (_cycle(), ".self is cycle"),
        (types.MappingProxyType({"x": 1}), " is mappingproxy"),
    ],
    ids=["tuple", "set", "int-key", "cycle", "mappingproxy"],
)
def test_values_no_json_decoder_gives_are_refused_naming_where(
    read: Read, given: Any, found: str
) -> None:
    # Only code can build these, never a provider, so the code is told at once.
    with pytest.raises(ValueError) as refused:
        read(given, {"x": 1})
    assert str(refused.value) == f"tool call arguments are not JSON: {ARGUMENTS_AT[read]}{found}"


def test_a_context_that_is_not_lossless_is_refused_under_its_place_in_the_outcome() -> None:
    done = BatchOutcome(
        results=[ToolExecutionSuccess(None, snapshot_json([]), call_id="c1")],
        contexts=[{"content": [{"type": "text", "text": "ok"}]}, {"score": math.nan}],  # type: ignore[arg-type]
    )
    for write in (openai_tool_messages, anthropic_tool_results):
        with pytest.raises(ValueError, match=r"^outcome\.contexts\[1\]\.score is float \(NaN\)$"):
            write(done)
