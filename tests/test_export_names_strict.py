"""Provider exports: names mapped where they leave the system, strict mode that round-trips,
and definitions whose body cannot take (args, run_ctx) refused at definition."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import msgspec
import pytest

from dsh_tools import (
    ExecuteBatch,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolSystem,
    define_tool,
    to_anthropic_tools,
    to_openai_tools,
    tool,
)
from dsh_tools.integrations import ToolNameMap, is_provider_name


class Window(msgspec.Struct):
    start: str
    end: str | None = None
    limit: int = 10


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    started = ToolSystem.start(code_runtime=None)
    try:
        yield started
    finally:
        started.stop()


def text_output() -> ToolOutput:
    return ToolOutput({"type": "string"}, lambda args, value: [{"type": "text", "text": value}])


def now_tool(name: str) -> Any:
    return define_tool(
        name=name,
        description="The time.",
        parameters={"zone": {"type": "string"}},
        output=text_output(),
        execute=lambda args, ctx: f"{name} in {args.get('zone', 'UTC')}",
    )


# --- names -------------------------------------------------------------------------------------


def test_names_providers_refuse_are_exported_mapped_and_map_back(system: ToolSystem) -> None:
    long_name = "a" * 80
    for name in ("time.now", "bad name!", long_name, "plain_name"):
        system.tools.register(now_tool(name))
    schemas = system.tools.schemas()
    chat = [entry["function"]["name"] for entry in to_openai_tools(schemas)]
    responses = [entry["name"] for entry in to_openai_tools(schemas, api="responses")]
    anthropic = [entry["name"] for entry in to_anthropic_tools(schemas)]
    assert chat == responses == anthropic
    assert all(is_provider_name(name) for name in chat)
    names = ToolNameMap.from_schemas(schemas)
    assert [names.to_registry(name) for name in chat] == [s["name"] for s in schemas]
    assert chat[:2] == ["time_now", "bad_name_"]
    assert chat[2] == "a" * 55 + "_" + chat[2][-8:]
    assert chat[3] == "plain_name"

    # The model calls the provider name; the adapter maps it back and the registry runs it.
    outcome = system.execute_batch(
        ExecuteBatch(calls=[ToolCall("c1", names.to_registry("time_now"), '{"zone": "CET"}')])
    )
    assert outcome.results[0].content[0]["text"] == "time.now in CET"


def test_an_explicit_name_map_must_cover_every_exported_tool(system: ToolSystem) -> None:
    system.tools.register(now_tool("time.now"))
    schemas = system.tools.schemas()
    custom = ToolNameMap(["time.now", "other"])
    assert to_anthropic_tools(schemas, names=custom)[0]["name"] == "time_now"
    with pytest.raises(ValueError, match=r"names has no provider name for tool\(s\) time\.now"):
        to_openai_tools(schemas, names=ToolNameMap(["other"]))


# --- strict mode -------------------------------------------------------------------------------


def model_call(strict_parameters: dict[str, Any], arguments: dict[str, Any]) -> str:
    """What a strict-mode model may send: every property present, nulls for the unused ones."""
    jsonschema.validate(arguments, strict_parameters)
    return json.dumps(arguments)


def test_strict_define_tool_with_optional_parameters_round_trips(system: ToolSystem) -> None:
    seen: list[Any] = []
    search = define_tool(
        name="search",
        description="Search.",
        parameters={
            "query": {"type": "string", "required": True},
            "limit": {"type": "integer"},
            "sort": {"type": "string", "enum": ["new", "old"]},
        },
        output=text_output(),
        execute=lambda args, ctx: seen.append(dict(args)) or "ok",
    )
    system.tools.register(search)
    [exported] = to_openai_tools(system.tools.schemas(), strict=True)
    parameters = exported["function"]["parameters"]
    assert parameters["required"] == ["query", "limit", "sort"]
    assert parameters["properties"]["limit"] == {"type": ["integer", "null"]}
    assert parameters["properties"]["sort"] == {
        "type": ["string", "null"],
        "enum": ["new", "old", None],
    }
    raw = model_call(parameters, {"query": "x", "limit": None, "sort": None})
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "search", raw)]))
    assert not outcome.results[0].is_error, outcome.results[0].content
    assert seen == [{"query": "x"}]


def test_strict_typed_tool_with_optional_and_nested_optional_parameters_round_trips(
    system: ToolSystem,
) -> None:
    seen: list[Any] = []

    @tool
    def events(window: Window, kind: str = "all", owner: str | None = "me") -> str:
        seen.append((window, kind, owner))
        return "ok"

    system.tools.register(events)
    [exported] = to_openai_tools(system.tools.schemas(), api="responses", strict=True)
    parameters = exported["parameters"]
    assert exported["strict"] is True
    assert parameters["properties"]["kind"] == {"type": ["string", "null"]}
    assert parameters["$defs"]["Window"]["required"] == ["start", "end", "limit"]
    assert parameters["$defs"]["Window"]["additionalProperties"] is False
    raw = model_call(
        parameters,
        {"window": {"start": "a", "end": None, "limit": None}, "kind": None, "owner": None},
    )
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "events", raw)]))
    assert not outcome.results[0].is_error, outcome.results[0].content
    # ``owner`` accepts null, so the model's null is a value; the others fall back to defaults.
    assert seen == [(Window(start="a", end=None, limit=10), "all", None)]


def test_a_null_for_a_required_property_is_still_an_error(system: ToolSystem) -> None:
    system.tools.register(now_tool("clock"))
    search = define_tool(
        name="need",
        description="Needs its argument.",
        parameters={"query": {"type": "string", "required": True}},
        output=text_output(),
        execute=lambda args, ctx: "ran",
    )
    system.tools.register(search)
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "need", '{"query": null}')]))
    assert outcome.results[0].content[0]["text"] == (
        'Error: invalid arguments: "query" must be a string'
    )


# --- execute signatures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "execute",
    [lambda args: "x", lambda: "x", lambda args, ctx, extra: "x", lambda *, args, ctx: "x"],
    ids=["one-argument", "no-argument", "three-required", "keyword-only"],
)
def test_define_tool_refuses_an_execute_that_cannot_take_args_and_context(execute: Any) -> None:
    with pytest.raises(TypeError, match=r"define_tool\(t\): execute must accept two positional"):
        define_tool(name="t", description="", parameters={}, output=text_output(), execute=execute)


@pytest.mark.parametrize(
    "execute",
    [lambda args, ctx: "x", lambda *args: "x", lambda args, ctx=None, more=1: "x", print],
    ids=["two", "variadic", "defaults", "builtin"],
)
def test_define_tool_accepts_every_execute_that_can_take_args_and_context(execute: Any) -> None:
    define_tool(name="t", description="", parameters={}, output=text_output(), execute=execute)


def test_a_raw_definition_whose_execute_cannot_take_args_and_context_is_refused() -> None:
    with pytest.raises(TypeError, match=r"tool 'raw': execute must accept two positional"):
        ToolDefinition(
            name="raw", description="", parameters={}, output=text_output(), execute=lambda a: a
        )
