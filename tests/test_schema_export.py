"""Exporting projected tool schemas to the OpenAI and Anthropic function-calling formats: the
shapes, strict mode (and that a strict-mode model's calls round-trip), and provider names
mapped where they leave the system."""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import subprocess
import sys
from typing import Annotated, Any, Literal

import jsonschema
import msgspec
import pytest
from conftest import echo, fixture

from dsh_tools import ExecuteBatch, ToolCall, ToolOutput, ToolSystem, define_tool, tool
from dsh_tools.integrations import (
    ToolNameMap,
    is_provider_name,
    to_anthropic_tools,
    to_openai_strict_schema,
    to_openai_tools,
)

ECHO_PARAMETERS = {"type": "object", "properties": {"text": {"type": "string"}}}


def lookup_tool() -> Any:
    """A DSL tool whose arguments are all required: a union and a closed nested object."""
    return define_tool(
        name="lookup",
        description="look a key up",
        parameters={
            "key": {"oneOf": [{"type": "string"}, {"type": "integer"}], "required": True},
            "scope": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"region": {"type": "string", "required": True}},
                "required": True,
            },
        },
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: "found",
    )


def deep_object(depth: int) -> dict[str, Any]:
    """An object schema nesting ``depth`` required ``child`` objects."""
    schema: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"child": schema}, "required": ["child"]}
    return schema


def nesting(schema: dict[str, Any]) -> int:
    depth = 0
    while schema["properties"]:
        schema = schema["properties"]["child"]
        depth += 1
    return depth


def schema(name: str, parameters: Any, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": parameters}


# --- documented shapes -------------------------------------------------------------------------


def test_chat_completions_shape_wraps_each_schema_in_a_function(system: ToolSystem) -> None:
    system.tools.register(echo())
    assert to_openai_tools(system.tools.schemas()) == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "echo arguments back",
                "parameters": ECHO_PARAMETERS,
            },
        }
    ]


def test_responses_shape_is_flat_and_always_states_strict(system: ToolSystem) -> None:
    system.tools.register(echo())
    assert to_openai_tools(system.tools.schemas(), api="responses") == [
        {
            "type": "function",
            "name": "echo",
            "description": "echo arguments back",
            "parameters": ECHO_PARAMETERS,
            "strict": False,
        }
    ]


def test_anthropic_shape_names_the_schema_input_schema(system: ToolSystem) -> None:
    system.tools.register(echo())
    assert to_anthropic_tools(system.tools.schemas()) == [
        {
            "name": "echo",
            "description": "echo arguments back",
            "input_schema": ECHO_PARAMETERS,
        }
    ]


def test_anthropic_input_schema_has_no_union_at_its_root(system: ToolSystem) -> None:
    # The Messages API refuses the whole request when one tool's input_schema has oneOf, anyOf
    # or allOf at its root (MCP servers publish "one of these arguments" that way). They become
    # a note the model reads; the tool (its server) still checks the arguments it is sent.
    parameters = {
        "type": "object",
        "description": "Where to look.",
        "properties": {"id": {"type": "string"}, "path": {"type": "string"}},
        "oneOf": [{"required": ["id"]}, {"required": ["path"]}],
        "allOf": [{"not": {"required": ["both"]}}],
    }
    system.tools.register(fixture("find", parameters=parameters))
    [exported] = to_anthropic_tools(system.tools.schemas())
    assert exported["input_schema"] == {
        "type": "object",
        "description": 'Where to look. (oneOf=[{"required": ["id"]}, {"required": ["path"]}], '
        'allOf=[{"not": {"required": ["both"]}}])',
        "properties": {"id": {"type": "string"}, "path": {"type": "string"}},
    }
    assert system.tools.schemas()[0]["parameters"] == parameters


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("strict", [False, "auto"])
def test_openai_parameters_have_no_union_at_their_root(
    system: ToolSystem, api: Any, strict: Any
) -> None:
    # OpenAI refuses the whole request, strict or not, when one function's parameters have
    # oneOf, anyOf, allOf, enum or not at the root ("schema must have type 'object' and not
    # have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level"). They become a note.
    parameters = {
        "type": "object",
        "description": "Where to look.",
        "properties": {"id": {"type": "string"}, "path": {"type": "string"}},
        "required": ["id", "path"],
        "oneOf": [{"required": ["id"]}, {"required": ["path"]}],
        "not": {"required": ["both"]},
    }
    system.tools.register(fixture("find", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), api=api, strict=strict)
    sent = exported["parameters"] if api == "responses" else exported["function"]["parameters"]
    assert sent["description"] == (
        'Where to look. (oneOf=[{"required": ["id"]}, {"required": ["path"]}], '
        'not={"required": ["both"]})'
    )
    assert not {"oneOf", "anyOf", "allOf", "enum", "not"} & set(sent)
    assert system.tools.schemas()[0]["parameters"] == parameters


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("strict", [False, "auto"])
def test_openai_parameters_spell_out_properties_and_items(
    system: ToolSystem, api: Any, strict: Any
) -> None:
    # OpenAI refuses the whole request for a root without properties ("object schema missing
    # properties": an MCP tool of no arguments) or an array without items ("array schema
    # missing items": a list[Any]). Empty ones are the same schema in the spelling it takes.
    @tool
    def tag(names: list[Any], groups: list[list[Any]] | None = None) -> str:
        """Tag."""
        return "ok"

    system.tools.register(tag)
    system.tools.register(fixture("ping", parameters={"type": "object"}))
    closed = {"type": "object", "additionalProperties": False}  # may be strict as it is
    system.tools.register(fixture("pong", parameters=closed))
    exported = to_openai_tools(system.tools.schemas(), api=api, strict=strict)
    sent = {
        tool["name"]: tool["parameters"]
        for tool in (exported if api == "responses" else [t["function"] for t in exported])
    }
    if strict == "auto":
        # Both can be strict: closed, they take ``{}``, all a tool of no arguments takes.
        assert sent["ping"] == {**closed, "properties": {}, "required": []}
        assert sent["pong"] == {**closed, "properties": {}, "required": []}
    else:
        assert sent["ping"] == {"type": "object", "properties": {}}
        assert sent["pong"] == {**closed, "properties": {}}
    assert sent["tag"]["properties"] == {
        "names": {"type": "array", "items": {}},
        "groups": {
            "anyOf": [{"type": "array", "items": {"type": "array", "items": {}}}, {"type": "null"}],
            "default": None,
        },
    }
    # the registry keeps its own
    registered = {entry["name"]: entry["parameters"] for entry in system.tools.schemas()}
    assert registered["ping"] == {"type": "object"}


def test_assembled_prompt_tools_keep_their_final_order(system: ToolSystem) -> None:
    for name in ("zeta", "alpha", "mid"):
        system.tools.register(fixture(name))
    tools = system.assemble_prompt().tools
    assert [t["function"]["name"] for t in to_openai_tools(tools)] == ["alpha", "mid", "zeta"]
    assert [t["name"] for t in to_anthropic_tools(tools)] == ["alpha", "mid", "zeta"]


def test_an_agent_view_exports_that_agents_tools(system: ToolSystem) -> None:
    system.tools.register(echo())
    scope = system.agent("reviewer")
    scope.tools.register(fixture("review_only"))
    exported = to_anthropic_tools(system.assemble_prompt("reviewer").tools)
    assert [t["name"] for t in exported] == ["echo", "review_only"]
    assert [t["name"] for t in to_anthropic_tools(system.tools.schemas())] == ["echo"]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("strict", [False, "auto"])
def test_a_description_longer_than_openai_takes_continues_in_the_parameters(
    api: Any, strict: Any
) -> None:
    # The API refused the whole request ("Invalid 'tools[0].function.description': string too
    # long. Expected a string with maximum length 1024"), naming the tool only by its place.
    words = " ".join(f"word{i}" for i in range(400))  # 3,089 characters
    parameters = {
        "type": "object",
        "description": "What to look up.",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    }
    (exported,) = to_openai_tools([schema("lookup", parameters, words)], api=api, strict=strict)
    function = exported["function"] if api == "chat" else exported
    kept = function["description"]
    assert len(kept) <= 1024
    assert kept.endswith("word135 [continued in the parameters' description]")
    assert function["parameters"]["description"] == (
        "(The tool's description, continued:) "
        + words[len(kept) - len(" [continued in the parameters' description]") :].strip()
        + "\n\nWhat to look up."
    )
    short = to_openai_tools([schema("lookup", parameters, "x" * 1024)], api=api, strict=strict)
    assert (short[0]["function"] if api == "chat" else short[0])["description"] == "x" * 1024


def test_more_tools_than_openai_takes_are_refused_at_export() -> None:
    # The API refused the request ("Invalid 'tools': array too long. Expected an array with
    # maximum length 128").
    many = [schema(f"tool_{i}", ECHO_PARAMETERS) for i in range(129)]
    assert len(to_openai_tools(many[:128])) == 128
    with pytest.raises(ValueError, match="OpenAI takes at most 128 tools in one request, got 129"):
        to_openai_tools(many)
    with pytest.raises(ValueError, match="at most 128 tools"):
        to_openai_tools(many, api="responses")
    assert len(to_anthropic_tools(many)) == 129


def test_a_server_that_takes_more_tools_gets_them_all_without_the_cap() -> None:
    # Many OpenAI-compatible servers take more than OpenAI's 128 tools in a request.
    many = [schema(f"tool_{i}", ECHO_PARAMETERS) for i in range(300)]
    assert len(to_openai_tools(many, max_tools=None)) == 300
    assert len(to_openai_tools(many, api="responses", max_tools=None)) == 300
    with pytest.raises(ValueError, match="at most 20 tools in one request, got 300"):
        to_openai_tools(many, max_tools=20)


def test_an_empty_tool_list_exports_to_an_empty_list() -> None:
    assert to_openai_tools([]) == []
    assert to_openai_tools([], api="responses", strict=True) == []
    assert to_anthropic_tools([], cache_control={"type": "ephemeral"}) == []


def test_anthropic_cache_control_marks_only_the_last_tool() -> None:
    tools = to_anthropic_tools(
        [schema("a", {"type": "object"}), schema("b", {"type": "object"})],
        cache_control={"type": "ephemeral"},
    )
    assert "cache_control" not in tools[0]
    assert tools[1]["cache_control"] == {"type": "ephemeral"}


# --- detachment and JSON -----------------------------------------------------------------------


def test_exported_tools_are_detached_from_the_registry(system: ToolSystem) -> None:
    system.tools.register(echo())
    exported = to_openai_tools(system.tools.schemas())
    exported[0]["function"]["parameters"]["properties"]["text"]["type"] = "number"
    assert system.tools.schemas()[0]["parameters"] == ECHO_PARAMETERS


def test_exported_tools_share_nothing_with_their_input() -> None:
    source = [schema("t", {"type": "object", "properties": {"a": {"type": "string"}}})]
    openai = to_openai_tools(source)
    anthropic = to_anthropic_tools(source)
    source[0]["parameters"]["properties"]["a"]["type"] = "number"
    source[0]["name"] = "renamed"
    assert openai[0]["function"]["parameters"]["properties"]["a"] == {"type": "string"}
    assert anthropic[0]["input_schema"]["properties"]["a"] == {"type": "string"}
    assert anthropic[0]["name"] == "t"


def test_exported_tools_are_plain_dicts_and_lists() -> None:
    from dsh_tools import FrozenDict, FrozenList

    frozen = FrozenDict(
        {"type": "object", "properties": FrozenDict({"a": FrozenDict({"enum": FrozenList([1])})})}
    )
    exported = to_anthropic_tools([schema("t", frozen)])
    parameters = exported[0]["input_schema"]
    assert type(parameters) is dict
    assert type(parameters["properties"]["a"]) is dict
    assert type(parameters["properties"]["a"]["enum"]) is list


@pytest.mark.parametrize(
    "export",
    [
        to_openai_tools,
        lambda s: to_openai_tools(s, api="responses", strict="auto"),
        to_anthropic_tools,
    ],
    ids=["chat", "responses-auto-strict", "anthropic"],
)
def test_exported_tools_round_trip_through_json(system: ToolSystem, export: Any) -> None:
    system.tools.register(echo())
    system.tools.register(lookup_tool())
    exported = export(system.tools.schemas())
    assert json.loads(json.dumps(exported, allow_nan=False)) == exported


def test_deep_schemas_export_without_recursion_errors() -> None:
    deep = [schema("deep", deep_object(5_000))]
    chat = to_openai_tools(deep)
    anthropic = to_anthropic_tools(deep)
    assert nesting(chat[0]["function"]["parameters"]) == 5_000
    assert nesting(anthropic[0]["input_schema"]) == 5_000
    # Far deeper than strict mode takes, which the export says, briefly, without recursing.
    with pytest.raises(ValueError) as refused:
        to_openai_tools(deep, api="responses", strict=True)
    assert str(refused.value) == (
        'tools cannot be exported in strict mode: tool "deep": parameters'
        + ".properties.child" * 4
        + ".p...ies.child"
        + ".properties.child" * 3
        + " nests objects 5,001 levels deep; strict mode takes at most 10"
    )


# --- strict mode -------------------------------------------------------------------------------


def test_strict_closes_objects_and_spells_unions_any_of(system: ToolSystem) -> None:
    system.tools.register(lookup_tool())
    [tool] = to_openai_tools(system.tools.schemas(), strict=True)
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "key": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "scope": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"region": {"type": "string"}},
                "required": ["region"],
            },
        },
        "required": ["key", "scope"],
        "additionalProperties": False,
    }


def test_strict_leaves_the_registry_schema_as_it_was(system: ToolSystem) -> None:
    system.tools.register(lookup_tool())
    before = system.tools.schemas()
    to_openai_tools(before, strict=True)
    assert before == system.tools.schemas()
    assert "oneOf" in before[0]["parameters"]["properties"]["key"]


def open_bag() -> Any:
    return fixture(
        "bag",
        parameters={
            "type": "object",
            "properties": {"extra": {"type": "object", "additionalProperties": True}},
            "required": ["extra"],
        },
    )


def test_strict_true_names_every_tool_and_path_that_cannot_be_strict(system: ToolSystem) -> None:
    system.tools.register(echo())
    system.tools.register(open_bag())
    with pytest.raises(ValueError) as caught:
        to_openai_tools(system.tools.schemas(), strict=True)
    assert str(caught.value) == (
        'tools cannot be exported in strict mode: tool "bag": '
        "parameters.properties.extra.additionalProperties must be false in strict mode (open "
        "objects cannot be strict)"
    )


def test_strict_makes_optional_properties_required_and_nullable(system: ToolSystem) -> None:
    system.tools.register(echo())
    [tool] = to_openai_tools(system.tools.schemas(), strict=True)
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"] == {
        **ECHO_PARAMETERS,
        "properties": {"text": {"type": ["string", "null"]}},
        "required": ["text"],
        "additionalProperties": False,
    }


def test_strict_spells_openapis_nullable_as_a_null_type_where_the_registry_reads_it() -> None:
    # Servers generated from OpenAPI documents write "nullable: true"; strict mode reads only
    # JSON Schema's spelling. The registry reads the keyword beside a single type (and an
    # enum only when it lists null), so the export does just that, and drops the keyword.
    parameters = {
        "type": "object",
        "properties": {
            "after": {"type": "string", "nullable": True},
            "limit": {"type": "integer", "nullable": True, "description": "At most."},
            "mode": {"type": "string", "enum": ["a", "b"], "nullable": True},
            "either": {"type": "string", "enum": ["a", None], "nullable": True},
            "plain": {"type": "string", "nullable": False},
            "items": {
                "type": "array",
                "items": {"type": "object", "nullable": True, "properties": {}},
            },
            "optional": {"type": "boolean", "nullable": True},
        },
        "required": ["after", "limit", "mode", "either", "plain", "items"],
    }
    properties = to_openai_strict_schema(parameters)["properties"]
    assert properties == {
        "after": {"type": ["string", "null"]},
        "limit": {"type": ["integer", "null"], "description": "At most."},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "either": {"type": ["string", "null"], "enum": ["a", None]},
        "plain": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": ["object", "null"],
                "properties": {},
                "additionalProperties": False,
                "required": [],
            },
        },
        "optional": {"type": ["boolean", "null"]},
    }
    assert parameters["properties"]["after"] == {"type": "string", "nullable": True}


def test_strict_keeps_an_optional_described_refs_description_on_the_property(
    system: ToolSystem,
) -> None:
    class Unit(enum.Enum):
        C = "C"
        F = "F"

    @tool
    def temperature(city: str, unit: Unit = Unit.C) -> float:
        """The temperature.

        Args:
            city: Where.
            unit: In which unit.
        """
        return 1.0

    system.tools.register(temperature)
    [exported] = to_openai_tools(system.tools.schemas(), strict=True)
    assert exported["function"]["parameters"]["properties"]["unit"] == {
        "description": "In which unit. (default=C)",
        "anyOf": [{"$ref": "#/$defs/Unit"}, {"type": "null"}],
    }


def test_strict_auto_marks_only_the_tools_that_can_be_strict(system: ToolSystem) -> None:
    system.tools.register(open_bag())
    system.tools.register(lookup_tool())
    bag, lookup = to_openai_tools(system.tools.schemas(), api="responses", strict="auto")
    assert bag["strict"] is False
    assert bag["parameters"] == system.tools.schemas()[0]["parameters"]
    assert lookup["strict"] is True
    assert lookup["parameters"]["additionalProperties"] is False


def test_strict_chat_tools_that_cannot_be_strict_carry_no_flag(system: ToolSystem) -> None:
    system.tools.register(open_bag())
    [tool] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in tool["function"]


def test_strict_moves_the_keywords_strict_mode_refuses_into_notes(system: ToolSystem) -> None:
    # OpenAI refuses a strict schema carrying minLength, uniqueItems, an unknown format or a
    # lookaround pattern; the model still reads them as notes, and the registry still enforces
    # them against the tool's own schema.
    @tool
    def tag(name: Annotated[str, msgspec.Meta(min_length=3)], labels: set[str]) -> str:
        """Tag."""
        return name

    system.tools.register(tag)
    system.tools.register(
        fixture(
            "mail",
            parameters={
                "type": "object",
                "properties": {
                    "to": {"type": "string", "format": "email"},
                    "site": {"type": "string", "format": "uri", "description": "Home page"},
                    "code": {"type": "string", "pattern": "^(?!x)[a-z]+$"},
                    "plain": {"type": "string", "pattern": "^[a-z]+$"},
                },
                "required": ["to", "site", "code", "plain"],
            },
        )
    )
    tag_schema, mail_schema = (
        exported["function"]["parameters"]
        for exported in to_openai_tools(system.tools.schemas(), strict=True)
    )
    assert tag_schema["properties"] == {
        "name": {"type": "string", "description": "minLength=3"},
        "labels": {"type": "array", "items": {"type": "string"}, "description": "uniqueItems=true"},
    }
    assert mail_schema["properties"] == {
        "to": {"type": "string", "format": "email"},
        "site": {"type": "string", "description": "Home page (format=uri)"},
        "code": {"type": "string", "description": "pattern=^(?!x)[a-z]+$"},
        "plain": {"type": "string", "pattern": "^[a-z]+$"},
    }
    model_sent = json.dumps({"name": "ab", "labels": ["a", "a"]})
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "tag", model_sent)]))
    assert outcome.results[0].is_error


def strict_nodes(schema: Any) -> list[dict[str, Any]]:
    """Every schema dict of a strict export (any dict under a JSON Schema keyword)."""
    found: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            for key, value in node.items():
                if key in ("properties", "$defs"):
                    stack.extend(value.values())
                elif key in ("anyOf", "items", "additionalProperties"):
                    stack.extend(value if isinstance(value, list) else [value])
    return found


def test_strict_never_gives_a_ref_sibling_keywords(system: ToolSystem) -> None:
    # OpenAI's strict mode refuses a "$ref" beside other keywords, and a Struct or Enum
    # parameter with a description is generated as exactly that; "anyOf" takes siblings, and a
    # one-branch anyOf accepts what its branch accepts.
    @tool
    def plan(place: Window, later: Annotated[Window, "When to look again."] | None = None) -> str:
        """Plan.

        Args:
            place: Where to look.
        """
        return "ok"

    system.tools.register(plan)
    [exported] = to_openai_tools(system.tools.schemas(), strict=True)
    parameters = exported["function"]["parameters"]
    assert all(len(node) == 1 for node in strict_nodes(parameters) if "$ref" in node)
    assert parameters["properties"]["place"] == {
        "description": "Where to look.",
        "anyOf": [{"$ref": "#/$defs/Window"}],
    }
    raw = model_call(
        parameters, {"place": {"start": "a", "end": None, "limit": None}, "later": None}
    )
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "plan", raw)]))
    assert not outcome.results[0].is_error, outcome.results[0].content


class Mood(enum.Enum):
    CALM = "calm"
    LOUD = "loud"


def test_strict_gives_every_enum_and_const_its_type(system: ToolSystem) -> None:
    # Strict mode refuses a schema without a type, and msgspec writes a Literal or an Enum as
    # a bare enum: each gets the one JSON type of its values (nullable when null is one).
    @tool
    def say(
        mood: Mood,
        level: Literal[1, 2, 3] = 1,
        pace: Literal["slow", "fast"] | None = None,
    ) -> str:
        """Say."""
        return f"{mood.value} {level} {pace}"

    system.tools.register(say)
    system.tools.register(
        fixture(
            "fixed",
            parameters={
                "type": "object",
                "properties": {
                    "kind": {"const": "x"},
                    "mark": {"enum": ["a", None]},
                    "ratio": {"enum": [0.5, 1]},
                },
                "required": ["kind", "mark", "ratio"],
            },
        )
    )
    say_tool, fixed_tool = to_openai_tools(system.tools.schemas(), strict=True)
    parameters = say_tool["function"]["parameters"]
    assert parameters["$defs"]["Mood"] == {
        "title": "Mood",
        "type": "string",
        "enum": ["calm", "loud"],
    }
    assert parameters["properties"]["level"] == {
        "type": ["integer", "null"],
        "enum": [1, 2, 3, None],
        "description": "default=1",  # what the model's null will mean
    }
    assert fixed_tool["function"]["parameters"]["properties"] == {
        "kind": {"type": "string", "const": "x"},
        "mark": {"type": ["string", "null"], "enum": ["a", None]},
        "ratio": {"type": "number", "enum": [0.5, 1]},
    }
    for exported in (parameters, fixed_tool["function"]["parameters"]):
        assert all(
            "type" in node for node in strict_nodes(exported) if "enum" in node or "const" in node
        )
    raw = model_call(parameters, {"mood": "loud", "level": None, "pace": "fast"})
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "say", raw)]))
    assert outcome.results[0].content[0]["text"] == "loud 1 fast"


def test_a_nullable_property_with_a_default_says_its_null_is_no_stand_in_for_it() -> None:
    # Strict mode makes every property required; the "default=..." note tells the model what
    # its null will mean. For a property that takes null as a value of its own, null reaches
    # the body as None, not the default: the same note told the model null meant 5.
    @tool
    def search(query: str, limit: int | None = 5, sort: str = "new") -> str:
        return f"{query} {limit} {sort}"

    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(search)
        [exported] = to_openai_tools(system.tools.schemas(), strict=True)
        properties = exported["function"]["parameters"]["properties"]
        assert properties["sort"]["description"] == "default=new"
        assert properties["limit"]["description"] == (
            "default=5, which a null does not stand for: null is a value of its own here"
        )
        sent = json.dumps({"query": "x", "limit": None, "sort": None})
        outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "search", sent)]))
        assert outcome.results[0].content[0]["text"] == "x None new"


def test_an_enum_of_several_types_is_not_made_strict() -> None:
    mixed = {"type": "object", "properties": {"v": {"enum": [1, "one"]}}, "required": ["v"]}
    with pytest.raises(ValueError, match=r"properties\.v\.enum mixes integer and string"):
        to_openai_strict_schema(mixed)


def test_strict_moves_a_remaining_default_into_a_note() -> None:
    # Strict mode refuses "default"; an optional property loses it when it becomes nullable
    # (its null then means "absent"), and one anywhere else is kept for the model as a note.
    parameters = {
        "type": "object",
        "properties": {"mode": {"type": "string", "default": "fast"}},
        "required": ["mode"],
    }
    strict = to_openai_strict_schema(parameters)
    assert strict["properties"]["mode"] == {"type": "string", "description": "default=fast"}
    assert all("default" not in node for node in strict_nodes(strict))


@pytest.mark.parametrize(
    "opening",
    [
        {"patternProperties": {"^X-": {"type": "string"}}},
        {"unevaluatedProperties": {"type": "string"}},
        {"unevaluatedProperties": True},
        {"unevaluatedProperties": {}},
    ],
    ids=[
        "patternProperties",
        "unevaluatedProperties-schema",
        "unevaluatedProperties-true",
        "unevaluatedProperties-empty-schema",
    ],
)
def test_an_object_open_to_keys_it_does_not_list_is_not_made_strict(
    system: ToolSystem, opening: dict[str, Any]
) -> None:
    # Closed for strict mode, with the keyword only a note, such an object would take no key
    # at all from a model whose output strict mode constrains: every call the tool exists for
    # (headers named "X-..." here) could no longer be made. It is an open object.
    (keyword,) = opening
    headers = {"type": "object", "properties": {"Host": {"type": "string"}}, **opening}
    parameters = {"type": "object", "properties": {"headers": headers}, "required": ["headers"]}
    system.tools.register(fixture("headers", parameters=parameters))
    [tool] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in tool["function"]
    assert tool["function"]["parameters"]["properties"]["headers"] == headers
    with pytest.raises(ValueError, match=f"properties.headers.{keyword} admits keys"):
        to_openai_strict_schema(parameters)
    # one that admits nothing more may go: strict mode closes the object anyway
    closed = {"type": "object", "patternProperties": {}, "unevaluatedProperties": False}
    assert to_openai_strict_schema(closed)["additionalProperties"] is False


def test_a_parameter_of_any_value_is_not_made_strict(system: ToolSystem) -> None:
    # Strict mode cannot declare "any JSON value": a schema with no type is refused by the
    # API, and a closed object without properties, or an array whose items it had to invent,
    # would take nothing the tool exists for. Like dict[str, T], each is reported.
    @tool
    def note(meta: dict[str, Any], tags: list[Any], extra: Any = None) -> str:
        """Note."""
        return "ok"

    system.tools.register(note)
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    sent = exported["function"]["parameters"]
    assert {**sent, "properties": {**sent["properties"], "tags": {"type": "array"}}} == (
        note.parameters
    )
    with pytest.raises(ValueError) as raised:
        to_openai_tools(system.tools.schemas(), strict=True)
    assert str(raised.value) == (
        'tools cannot be exported in strict mode: tool "note": '
        "parameters.properties.meta declares no properties (an object of any keys cannot be "
        "strict); parameters.properties.tags declares no items (an array of any values cannot "
        "be strict); parameters.properties.extra declares no type (strict mode needs one for "
        "every value)"
    )


def test_a_boolean_schema_for_a_value_is_not_made_strict(system: ToolSystem) -> None:
    # Schema generators write "any value" as `true` (schemars for a serde_json::Value, which
    # Rust MCP servers use): it declares no type, as {} does, and `false` admits no value.
    parameters = {
        "type": "object",
        "properties": {
            "meta": True,
            "tags": {"type": "array", "items": True},
            "pick": {"anyOf": [{"type": "string"}, True]},
            "gone": False,
        },
        "required": ["meta"],
    }
    system.tools.register(fixture("annotate", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    assert exported["function"]["parameters"] == parameters
    with pytest.raises(ValueError) as raised:
        to_openai_strict_schema(parameters)
    assert str(raised.value) == (
        "schema cannot be used in strict mode: "
        "schema.properties.meta is true and declares no type (strict mode needs one for every "
        "value); schema.properties.tags.items is true and declares no type (strict mode needs "
        "one for every value); schema.properties.pick.anyOf[1] is true and declares no type "
        "(strict mode needs one for every value); schema.properties.gone is false and admits "
        "no value (strict mode cannot require it)"
    )


def test_a_tuple_in_the_older_items_spelling_is_not_made_strict(system: ToolSystem) -> None:
    # Draft-07 schemas (what most MCP servers send) spell a tuple as a list of items.
    point = {"type": "array", "items": [{"type": "number"}, {"type": "number"}]}
    parameters = {"type": "object", "properties": {"at": point}, "required": ["at"]}
    system.tools.register(fixture("goto", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError, match=r"properties\.at\.items \(a tuple\) cannot be strict"):
        to_openai_strict_schema(parameters)


def test_an_object_requiring_a_key_it_does_not_declare_is_not_made_strict(
    system: ToolSystem,
) -> None:
    # Open, the object takes the key as any value; closed for strict mode, it would take no
    # value at all, and the model could never call the tool.
    parameters = {
        "type": "object",
        "properties": {"filter": {"type": "object", "properties": {}, "required": ["id"]}},
        "required": ["filter"],
    }
    system.tools.register(fixture("find", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError) as raised:
        to_openai_strict_schema(parameters)
    assert str(raised.value) == (
        "schema cannot be used in strict mode: schema.properties.filter.required names 'id', "
        "which its properties do not declare"
    )


def test_an_object_built_from_all_of_parts_is_not_made_strict(system: ToolSystem) -> None:
    # A base and its extension (how schemas converted from OpenAPI spell inheritance): closed
    # for strict mode, each part would refuse the other's keys, and no value could be sent.
    base = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    extension = {"properties": {"size": {"type": "integer"}}, "required": ["size"]}
    parameters = {
        "type": "object",
        "properties": {"item": {"allOf": [{"$ref": "#/$defs/Base"}, extension]}},
        "required": ["item"],
        "$defs": {"Base": base},
    }
    system.tools.register(fixture("store", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError) as raised:
        to_openai_strict_schema(parameters)
    assert str(raised.value) == (
        "schema cannot be used in strict mode: schema.properties.item.allOf builds an object "
        "from parts, which strict mode would each close to the others' keys"
    )
    # one part that is the whole value is that value
    alone = {**parameters, "properties": {"item": {"allOf": [{"$ref": "#/$defs/Base"}]}}}
    assert to_openai_strict_schema(alone)["$defs"]["Base"]["additionalProperties"] is False


def test_a_root_built_from_all_of_parts_is_not_made_strict(system: ToolSystem) -> None:
    # The root's allOf becomes a note for the OpenAI APIs, which refuse it there; made strict,
    # the closed root would refuse the key its extension requires, and no call could be valid.
    parameters = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
        "allOf": [{"properties": {"size": {"type": "integer"}}, "required": ["size"]}],
    }
    system.tools.register(fixture("store", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError, match=r"parameters\.allOf builds an object from parts"):
        to_openai_tools(system.tools.schemas(), strict=True)


def test_an_object_whose_union_branches_are_objects_is_not_made_strict(
    system: ToolSystem,
) -> None:
    # "mode, and x or y" (as MCP servers spell it): closed for strict mode, the object refuses
    # the keys its branches require, and each branch refuses the object's own.
    parameters = {
        "type": "object",
        "properties": {"mode": {"type": "string"}},
        "required": ["mode"],
        "oneOf": [
            {"properties": {"x": {"type": "string"}}, "required": ["x"]},
            {"properties": {"y": {"type": "string"}}, "required": ["y"]},
        ],
    }
    system.tools.register(fixture("pick", parameters=parameters))
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError, match=r"parameters\.oneOf\[0\] is an object beside"):
        to_openai_tools(system.tools.schemas(), strict=True)
    nested = {"type": "object", "properties": {"item": parameters}, "required": ["item"]}
    with pytest.raises(ValueError, match=r"schema\.properties\.item\.oneOf\[0\] is an obj"):
        to_openai_strict_schema(nested)


def test_a_fixed_length_tuple_is_not_made_strict(system: ToolSystem) -> None:
    # Strict mode reads no prefixItems: the API refuses such an array as one without items.
    @tool
    def move(to: tuple[int, int], path: tuple[int, ...] = ()) -> str:
        """Move."""
        return "ok"

    system.tools.register(move)
    [exported] = to_openai_tools(system.tools.schemas(), strict="auto")
    assert "strict" not in exported["function"]
    with pytest.raises(ValueError, match=r"properties\.to\.prefixItems \(a tuple\) cannot be"):
        to_openai_strict_schema(move.parameters)
    assert to_openai_strict_schema(
        {"type": "object", "properties": {"path": move.parameters["properties"]["path"]}}
    )["properties"]["path"] == {
        "type": ["array", "null"],
        "items": {"type": "integer"},
        "description": "default=[]",
    }


def nested_objects(levels: int) -> dict[str, Any]:
    """An object schema whose objects nest ``levels`` deep, the root the first."""
    node: dict[str, Any] = {"type": "object", "properties": {"leaf": {"type": "string"}}}
    for _ in range(levels - 1):
        node = {"type": "object", "properties": {"inner": node}}
    return node


def test_a_schema_over_the_sizes_strict_mode_takes_is_not_made_strict() -> None:
    # The API refuses the whole request for one such schema, naming neither the tool nor the
    # place; the export marked it strict and sent it.
    deep = {"type": "object", "properties": {"a": nested_objects(10)}}
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(5001)}}
    long_enum = {
        "type": "object",
        "properties": {"e": {"enum": [f"{i:03d}" * 20 for i in range(300)]}},
    }
    schemas = [schema("deep", deep), schema("wide", wide), schema("long_enum", long_enum)]
    with pytest.raises(ValueError) as refused:
        to_openai_tools(schemas, strict=True)
    assert str(refused.value) == (
        'tools cannot be exported in strict mode: tool "deep": parameters.properties.a'
        + ".properties.inner" * 9
        + ' nests objects 11 levels deep; strict mode takes at most 10 | tool "wide": '
        "parameters has 5,001 object properties; strict mode takes at most 5,000 in one "
        'schema | tool "long_enum": parameters.properties.e.enum holds 300 strings of 18,000 '
        "characters; strict mode takes at most 15,000 in an enum of more than 250 values"
    )
    exported = to_openai_tools([*schemas, schema("fits", nested_objects(10))], strict="auto")
    assert [tool["function"].get("strict") for tool in exported] == [None, None, None, True]
    many = {"type": "object", "properties": {f"e{i}": {"enum": [1, 2, 3]} for i in range(334)}}
    # Each optional property's enum takes null as well: what is counted is what is sent.
    with pytest.raises(ValueError, match=r"schema has 1,336 enum values; strict mode takes at"):
        to_openai_strict_schema(many)
    names = {"type": "object", "properties": {"n" * 30_000 + str(i): {} for i in range(4)}}
    names["properties"] = {name: {"type": "string"} for name in names["properties"]}
    with pytest.raises(ValueError, match=r"schema has 120,004 characters of property names"):
        to_openai_strict_schema(names)


def test_strict_schema_helper_rewrites_a_copy() -> None:
    source = {
        "type": "object",
        "properties": {"n": {"oneOf": [{"type": "number"}, {"type": "null"}]}},
        "required": ["n"],
    }
    strict = to_openai_strict_schema(source)
    assert strict == {
        "type": "object",
        "properties": {"n": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert "additionalProperties" not in source


def test_strict_schema_helper_rejects_what_it_cannot_rewrite() -> None:
    with pytest.raises(ValueError, match=r"schema\.additionalProperties must be false"):
        to_openai_strict_schema({"type": "object", "additionalProperties": True})
    with pytest.raises(ValueError, match="object-rooted"):
        to_openai_strict_schema({"type": "string"})


# --- bad input ---------------------------------------------------------------------------------


def test_parameters_must_be_an_object_rooted_schema() -> None:
    with pytest.raises(ValueError, match=r'tool "s" parameters must be an object schema'):
        to_openai_tools([schema("s", {"type": "string"})])
    with pytest.raises(ValueError, match=r'tool "s" parameters must be an object schema'):
        to_anthropic_tools([schema("s", None)])


def test_parameters_must_be_lossless_json() -> None:
    with pytest.raises(ValueError, match=r"tools\[0\]\.parameters\.default is float \(NaN\)"):
        to_openai_tools([schema("s", {"type": "object", "default": float("nan")})])


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match='tool "a" appears twice'):
        to_anthropic_tools([schema("a", {"type": "object"}), schema("a", {"type": "object"})])


def test_entries_need_a_name_and_a_str_description() -> None:
    with pytest.raises(ValueError, match=r"tools\[0\]\.name must be a non-empty str"):
        to_openai_tools([{"description": "", "parameters": {"type": "object"}}])
    with pytest.raises(ValueError, match='tool "a" description must be a str'):
        to_openai_tools([{"name": "a", "description": 3, "parameters": {"type": "object"}}])


def test_a_single_schema_dict_is_not_a_tool_list() -> None:
    with pytest.raises(TypeError, match="takes a list of tool schemas"):
        to_openai_tools(schema("a", {"type": "object"}))  # type: ignore[arg-type]


def test_a_tool_definition_is_told_to_export_what_an_agent_sees() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    for export, name in ((to_openai_tools, "openai"), (to_anthropic_tools, "anthropic")):
        with pytest.raises(TypeError) as caught:
            export([lookup])  # type: ignore[list-item]
        assert str(caught.value) == (
            "tools[0] is a tool definition (TypedToolDefinition), not a tool schema dict: "
            f"export what an agent sees, e.g. to_{name}_tools(system.tools.schemas(agent))"
        )


def test_unknown_api_and_strict_values_are_rejected() -> None:
    with pytest.raises(ValueError, match='api must be "chat" or "responses"'):
        to_openai_tools([], api="assistants")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strict must be"):
        to_openai_tools([], strict=1)  # type: ignore[arg-type]


def test_the_schema_exports_do_not_load_the_mcp_sdk() -> None:
    probe = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "from dsh_tools.integrations import to_anthropic_tools, to_openai_tools\n"
        "schemas = [{'name': 't', 'description': '', 'parameters': {'type': 'object'}}]\n"
        "assert to_openai_tools(schemas) and to_anthropic_tools(schemas)\n"
        "try:\n"
        "    from dsh_tools.integrations import register_mcp_server\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == (
        "register_mcp_server needs the official MCP SDK: pip install 'dsh-tools[mcp]'"
    )


class Window(msgspec.Struct):
    start: str
    end: str | None = None
    limit: int = 10


def string_output() -> ToolOutput:
    return ToolOutput({"type": "string"}, lambda args, value: [{"type": "text", "text": value}])


def now_tool(name: str) -> Any:
    return define_tool(
        name=name,
        description="The time.",
        parameters={"zone": {"type": "string"}},
        output=string_output(),
        execute=lambda args, ctx: f"{name} in {args.get('zone', 'UTC')}",
    )


# --- provider names ----------------------------------------------------------------------------


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


def test_a_hashed_provider_name_that_another_tool_has_already_is_hashed_again(
    system: ToolSystem,
) -> None:
    # ``x.y`` collides with ``x_y``, and its hashed form is the name of a third tool.
    hashed = "x_y_" + hashlib.sha256(b"x.y").hexdigest()[:8]
    for name in ("x.y", "x_y", hashed):
        system.tools.register(now_tool(name))
    schemas = system.tools.schemas()
    exported = [entry["name"] for entry in to_anthropic_tools(schemas)]
    assert len(set(exported)) == 3 and all(is_provider_name(name) for name in exported)
    provider = dict(zip([schema["name"] for schema in schemas], exported, strict=True))
    assert provider["x_y"] == "x_y" and provider[hashed] == hashed
    assert provider["x.y"] not in ("x_y", hashed)
    names = ToolNameMap.from_schemas(schemas)
    assert [names.to_registry(name) for name in exported] == [s["name"] for s in schemas]
    # The map is a function of the set of names, whatever their order.
    for order in itertools.permutations(["x.y", "x_y", hashed, "x y"]):
        mapped = ToolNameMap(order)
        assert {n: mapped.to_provider(n) for n in sorted(order)} == {
            n: ToolNameMap(sorted(order)).to_provider(n) for n in sorted(order)
        }


def test_a_name_map_continued_across_turns_keeps_every_remaining_tools_provider_name() -> None:
    # Rebuilt from each turn's names alone, a removed tool freed a collision, so "x.y" moved
    # from its hashed form to "x_y"; an added "x_y" pushed "x.y" (shown as "x_y") to a hashed
    # form and took "x_y" itself: a name the model saw meant another tool.
    first = ToolNameMap(["x.y", "x/y", "a.b"])
    hashed = first.to_provider("x.y")
    assert hashed.startswith("x_y_") and first.to_provider("a.b") == "a_b"
    assert ToolNameMap(["x.y", "a.b"]).to_provider("x.y") == "x_y"  # what it moved to
    second = ToolNameMap(["x.y", "a.b", "a_b", "c.d"], earlier=first)
    assert second.to_provider("x.y") == hashed
    assert second.to_provider("a.b") == "a_b"
    assert second.to_provider("a_b").startswith("a_b_")  # a new tool never takes a seen name
    assert second.to_provider("c.d") == "c_d"
    # A removed tool's name still means it (the batch answers "unknown tool" naming it), and
    # it gets that name back when it returns.
    assert "x/y" not in second and second.to_registry(first.to_provider("x/y")) == "x/y"
    third = ToolNameMap(["x/y", "a_b"], earlier=second)
    assert third.to_provider("x/y") == first.to_provider("x/y")
    assert third.to_provider("a_b") == second.to_provider("a_b")
    assert len(third) == 2
    with pytest.raises(TypeError, match="earlier must be a ToolNameMap or None, got list"):
        ToolNameMap(["a"], earlier=["a"])  # type: ignore[arg-type]


def test_an_explicit_name_map_must_cover_every_exported_tool(system: ToolSystem) -> None:
    system.tools.register(now_tool("time.now"))
    schemas = system.tools.schemas()
    custom = ToolNameMap(["time.now", "other"])
    assert to_anthropic_tools(schemas, names=custom)[0]["name"] == "time_now"
    with pytest.raises(ValueError, match=r"names has no provider name for tool\(s\) time\.now"):
        to_openai_tools(schemas, names=ToolNameMap(["other"]))


# --- strict mode: what a strict-mode model sends runs ------------------------------------------


def model_call(strict_parameters: dict[str, Any], arguments: dict[str, Any]) -> str:
    """What a strict-mode model may send: every property present, nulls for the unused ones."""
    jsonschema.validate(arguments, strict_parameters)
    return json.dumps(arguments)


def test_a_tool_of_no_arguments_declared_as_a_bare_object_can_be_strict(
    system: ToolSystem,
) -> None:
    # ``{"type": "object"}`` is how MCP servers declare a tool of no arguments: strict=True
    # refused it, and with it the export of every tool listed beside it.
    system.tools.register(fixture("now", parameters={"type": "object"}))
    [exported] = to_openai_tools(system.tools.schemas(), strict=True)
    parameters = exported["function"]["parameters"]

    assert exported["function"]["strict"] is True
    assert parameters == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
        "required": [],
    }
    outcome = system.execute_batch(
        ExecuteBatch(calls=[ToolCall("c1", "now", model_call(parameters, {}))])
    )
    assert outcome.results[0].content == [{"type": "text", "text": "ran:now"}]


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
        output=string_output(),
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
    assert parameters["properties"]["kind"] == {
        "type": ["string", "null"],
        "description": "default=all",
    }
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


def test_strict_keeps_a_defaulted_union_tag_required_and_not_null(system: ToolSystem) -> None:
    # A pydantic tag has a default (``kind: Literal["cat"] = "cat"``): made nullable, a model
    # held to the schema could send ``kind: null``, and the union would have no branch to pick.
    pydantic = pytest.importorskip("pydantic")

    class Cat(pydantic.BaseModel):
        kind: Literal["cat"] = "cat"
        lives: int = 9

    class Dog(pydantic.BaseModel):
        kind: Literal["dog"] = "dog"
        good: bool = True

    @tool
    def adopt(pet: Annotated[Cat | Dog, pydantic.Field(discriminator="kind")]) -> str:
        """Adopt a pet."""
        return f"{type(pet).__name__} {pet.model_dump()}"

    system.tools.register(adopt)
    [exported] = to_openai_tools(system.tools.schemas(), strict=True)
    parameters = exported["function"]["parameters"]
    cat = parameters["$defs"]["Cat"]["properties"]
    assert cat["kind"] == {"const": "cat", "title": "Kind", "type": "string"}
    assert cat["lives"]["type"] == ["integer", "null"]
    with pytest.raises(jsonschema.ValidationError):
        model_call(parameters, {"pet": {"kind": None, "lives": None}})
    raw = model_call(parameters, {"pet": {"kind": "dog", "good": None}})
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "adopt", raw)]))
    assert outcome.results[0].value == "Dog {'kind': 'dog', 'good': True}"


class ById(msgspec.Struct, tag=True):
    id: int
    rev: int = 0


class ByPath(msgspec.Struct, tag=True):
    path: str
    ref: str = "main"


def test_strict_nulls_inside_the_branches_of_a_union_round_trip(system: ToolSystem) -> None:
    # Strict mode makes the optional properties of every branch required and nullable, so a
    # model picking a branch sends null for the ones it leaves out, there as anywhere else.
    seen: list[Any] = []
    branch = {"type": "object", "additionalProperties": False}
    pick = define_tool(
        name="pick",
        description="Pick.",
        parameters={
            "target": {
                "required": True,
                "oneOf": [
                    {
                        **branch,
                        "properties": {
                            "id": {"type": "integer", "required": True},
                            "rev": {"type": "integer"},
                        },
                    },
                    {
                        **branch,
                        "properties": {
                            "path": {"type": "string", "required": True},
                            "ref": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                        },
                    },
                ],
            }
        },
        output=string_output(),
        execute=lambda args, ctx: seen.append(args["target"]) or "ok",
    )

    @tool
    def find(target: ById | ByPath) -> str:
        seen.append(target)
        return "ok"

    system.tools.register(pick)
    system.tools.register(find)
    strict = {
        exported["function"]["name"]: exported["function"]["parameters"]
        for exported in to_openai_tools(system.tools.schemas(), strict=True)
    }
    sent = [
        ("pick", {"target": {"id": 1, "rev": None}}),
        ("pick", {"target": {"path": "a", "ref": None}}),
        ("find", {"target": {"type": "ById", "id": 1, "rev": None}}),
        ("find", {"target": {"type": "ByPath", "path": "a", "ref": None}}),
    ]
    calls = [
        ToolCall(f"c{index}", name, model_call(strict[name], arguments))
        for index, (name, arguments) in enumerate(sent)
    ]
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    assert [result.content[0]["text"] for result in outcome.results] == ["ok"] * 4
    # ``ref`` of the DSL branch accepts null, so there the model's null is a value.
    assert seen == [{"id": 1}, {"path": "a", "ref": None}, ById(1, 0), ByPath("a", "main")]


def test_a_null_for_a_required_property_is_still_an_error(system: ToolSystem) -> None:
    system.tools.register(now_tool("clock"))
    search = define_tool(
        name="need",
        description="Needs its argument.",
        parameters={"query": {"type": "string", "required": True}},
        output=string_output(),
        execute=lambda args, ctx: "ran",
    )
    system.tools.register(search)
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "need", '{"query": null}')]))
    assert outcome.results[0].content[0]["text"] == (
        'Error: invalid arguments: "query" must be a string'
    )
