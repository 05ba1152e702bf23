"""The Code Mode SDK reads full JSON Schema: the vocabulary real MCP servers and ``@tool`` use,
and the recorded tool lists of three real MCP servers."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools import assert_supported_json_schema, tool
from dsh_tools.codebridge import SdkTool, render_sdk, render_sdk_declarations, sdk_type_expression
from dsh_tools.registry import to_subset_schema

DATA = Path(__file__).parent / "data"
SERVERS = ("mcp_server_time", "mcp_server_git", "mcp_server_everything")


def declarations(*tools: SdkTool) -> str:
    text = render_sdk_declarations(list(tools))
    ast.parse(text)
    return text


def output_of(schema: Any) -> str:
    """Everything rendered for a tool ``t`` whose output is ``schema`` (blocks before the
    ``ToolName`` line, without the shared ``JsonValue`` line and the ``TArgs`` root)."""
    text = declarations(SdkTool("t", "", {"type": "object", "properties": {}}, schema))
    body = text.split("\n\nToolName = ")[0]
    blocks = body.split("\n\n")[2:]
    return "\n\n".join(blocks)


# --- vocabulary --------------------------------------------------------------------------------

EXPRESSIONS = [
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "str | None"),
    ({"type": ["integer", "null"]}, "int | None"),
    ({"type": ["string", "array"], "items": {"type": "integer"}}, "str | list[int]"),
    ({"enum": ["a", 1, True, None]}, 'Literal["a", 1, True] | None'),
    ({"const": "fixed"}, 'Literal["fixed"]'),
    ({"enum": [{"an": "object"}]}, "JsonValue"),
    ({"type": "object", "additionalProperties": {"type": "number"}}, "dict[str, float]"),
    ({"additionalProperties": {"type": "array", "items": {}}}, "dict[str, list[JsonValue]]"),
    ({"type": "string", "nullable": True}, "str | None"),
    (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        "list[str | int]",
    ),
    ({"type": "array", "items": [{"type": "boolean"}, {"type": "null"}]}, "list[bool | None]"),
    ({"items": {"type": "string"}}, "list[str]"),
    ({"type": "string", "anyOf": [{"format": "date"}, {"format": "date-time"}]}, "str"),
    ({"allOf": [{"type": "integer"}]}, "int"),
    ({"not": {"type": "string"}}, "JsonValue"),
    (False, "Never"),
]


@pytest.mark.parametrize(("schema", "expected"), EXPRESSIONS, ids=[e for _, e in EXPRESSIONS])
def test_json_schema_keywords_render_as_python_types(schema: Any, expected: str) -> None:
    wrapped = {"type": "object", "properties": {"p": schema}, "required": ["p"]}
    assert sdk_type_expression(wrapped) == "Root"
    text = output_of(wrapped)
    assert f"    p: {expected}" in text, text


def test_refs_become_named_typed_dicts_and_schema_id_title_are_ignored() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.invalid/weather",
        "title": "ignored title",
        "type": "object",
        "properties": {
            "here": {"$ref": "#/$defs/place"},
            "there": {"$ref": "#/definitions/place"},
            "unit": {"$ref": "#/$defs/Unit"},
        },
        "required": ["here"],
        "$defs": {
            "place": {
                "title": "Place",
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
            },
            "Unit": {"enum": ["C", "F"]},
        },
        "definitions": {"place": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    assert output_of(schema) == (
        "class Place(TypedDict, extra_items=JsonValue):\n"
        "    lat: float\n"
        "    lon: float\n\n"
        "class Place_2(TypedDict, extra_items=JsonValue):\n"
        "    name: NotRequired[str]\n\n"
        'Unit = Literal["C", "F"]\n\n'
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    here: Place\n"
        "    there: NotRequired[Place_2]\n"
        "    unit: NotRequired[Unit]"
    )


def test_recursive_refs_refer_to_their_own_name() -> None:
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}, "again": {"$ref": "#"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["label"],
            }
        },
    }
    assert output_of(schema) == (
        "class Node(TypedDict, extra_items=JsonValue):\n"
        "    label: str\n"
        "    children: NotRequired[list[Node]]\n"
        "    parent: NotRequired[Node | None]\n\n"
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    root: NotRequired[Node]\n"
        "    again: NotRequired[TOutput]"
    )


class Contact(msgspec.Struct):
    name: str
    email: str


@tool
def save_contact(contact: Contact) -> Contact:
    """Save a contact and return it as stored."""
    return contact


@tool
def find_contact(name: str) -> Contact:
    """Find a contact by name."""
    return Contact(name=name, email="")


def test_a_class_used_as_argument_and_result_is_declared_once() -> None:
    # A typed tool's class is a ``$defs`` entry of its arguments' schema and of its result's:
    # each declared it again (``Contact``, ``Contact_2``, ``Contact_3``), which a model reads
    # as different types.
    text = declarations(
        *(
            SdkTool(t.name, t.description, t.parameters, t.declared_output_schema)
            for t in (save_contact, find_contact)
        )
    )
    assert text.count("class Contact(TypedDict") == 1
    assert "Contact_2" not in text
    assert "FindContactOutput = Contact\n" in text
    assert "class SaveContactArgs(TypedDict, closed=True):\n    contact: Contact\n" in text
    assert "SaveContactOutput = Contact\n" in text


def test_definitions_of_one_name_but_other_contents_are_declared_apart() -> None:
    def holding(kind: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "$defs": {
                "Item": {"type": "object", "properties": {"ref": {"$ref": "#/$defs/Key"}}},
                "Key": {"type": kind},
            },
        }

    text = declarations(
        SdkTool("a", "", holding("string"), holding("string")),
        SdkTool("b", "", holding("integer"), {"type": "string"}),
    )
    # ``Item`` reads the same in both tools, yet its ``Key`` does not: not shared.
    assert text.count("class Item(TypedDict") == 1
    assert "class Item_2(TypedDict" in text
    assert "Key = str" in text
    assert "Key_2 = int" in text
    assert "    item: NotRequired[Item_2]" in text


def test_a_recursive_definition_shared_by_two_roots_is_declared_once() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
    }
    text = declarations(SdkTool("t", "", tree, tree))
    assert text.count("class Node(TypedDict") == 1
    assert "    children: NotRequired[list[Node]]" in text
    assert "class TArgs(TypedDict, extra_items=JsonValue):\n    root: NotRequired[Node]" in text
    assert "class TOutput(TypedDict, extra_items=JsonValue):\n    root: NotRequired[Node]" in text


def test_sharing_reads_a_bounded_number_of_nodes_per_prompt_and_then_declares_again() -> None:
    # Each reference's key reads every definition it reaches: a chain of 3,000 definitions
    # would have been walked once per link (seconds of prompt assembly). Past the prompt's
    # budget the second root declares its own copies, as before any sharing.
    links = 3000
    chain = {
        f"D{i}": {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "next": {"$ref": f"#/$defs/D{i + 1}"}},
        }
        for i in range(links)
    }
    chain[f"D{links}"] = {"type": "object", "properties": {"v": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"head": {"$ref": "#/$defs/D0"}}, "$defs": chain}
    text = declarations(SdkTool("walk", "", schema, schema))
    assert text.count("class D0(TypedDict") == 1
    assert "class D0_2(TypedDict" in text
    assert f"class D{links}_2(TypedDict" in text


def test_all_of_object_shapes_merge_into_one_typed_dict() -> None:
    schema = {
        "allOf": [
            {"$ref": "#/$defs/Base"},
            {"type": "object", "properties": {"extra": {"type": "boolean"}}, "required": ["extra"]},
        ],
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }
    assert output_of(schema) == (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    id: NotRequired[int]\n"
        "    extra: bool"
    )


def test_a_single_ref_under_all_of_keeps_its_name() -> None:
    schema = {
        "type": "object",
        "properties": {
            "where": {"allOf": [{"$ref": "#/definitions/Place"}], "description": "Here."}
        },
        "definitions": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    assert output_of(schema) == (
        "class Place(TypedDict, extra_items=JsonValue):\n"
        "    city: NotRequired[str]\n\n"
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # Here.\n"
        "    where: NotRequired[Place]"
    )


def test_an_all_of_that_contains_itself_ends() -> None:
    schema: dict[str, Any] = {"description": "loop"}
    schema["allOf"] = [schema]
    wrapped = {"type": "object", "properties": {"p": schema, "q": {"$ref": 7}}}
    assert output_of(wrapped) == (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # loop\n"
        "    p: NotRequired[JsonValue]\n"
        "    q: NotRequired[JsonValue]"
    )


def test_constraints_and_formats_become_comments() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time", "description": "Start."},
            "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$", "minLength": 3},
            "ids": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 5},
        },
    }
    assert output_of(schema) == (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # Start. [format: date-time]\n"
        "    when: NotRequired[str]\n"
        "    # [minimum: 1; maximum: 10; default: 3]\n"
        "    count: NotRequired[int]\n"
        "    # [pattern: ^[A-Z]{3}$; minLength: 3]\n"
        "    code: NotRequired[str]\n"
        "    # [maxItems: 5; items minimum: 0]\n"
        "    ids: NotRequired[list[int]]"
    )


def test_which_keys_an_object_requires_together_becomes_a_comment() -> None:
    # "Give a path or a url": every key reads NotRequired, so a program written from the SDK
    # could leave out both, and nothing said it needed one (at the root, nothing said it at
    # all: only a property had a line for its notes).
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "url": {"type": "string"},
            "target": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                "oneOf": [{"required": ["id"]}, {"required": ["name"]}],
                "dependentRequired": {"name": ["id"]},
            },
        },
        "anyOf": [{"required": ["path"]}, {"required": ["url", "target"]}],
        "minProperties": 1,
    }
    assert output_of(schema) == (
        "class TOutputTarget(TypedDict, extra_items=JsonValue):\n"
        "    id: NotRequired[int]\n"
        "    name: NotRequired[str]\n"
        "\n"
        "# [minProperties: 1; requires: path or url and target]\n"
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    path: NotRequired[str]\n"
        "    url: NotRequired[str]\n"
        '    # [dependentRequired: {"name":["id"]}; requires exactly one of: id or name]\n'
        "    target: NotRequired[TOutputTarget]"
    )


def test_a_one_of_whose_types_can_share_a_value_says_that_only_one_may_match() -> None:
    # ``A | B`` reads as "either, or both"; a oneOf refuses a value that matches both of its
    # types, and nothing in the SDK said so. Where no value can match two types (str | None, a
    # tag telling objects apart) the comment stays as it was, as for every anyOf.
    schema = {
        "type": "object",
        "properties": {
            "target": {
                "description": "Where to read.",
                "oneOf": [
                    {"type": "object", "properties": {"path": {"type": "string"}}},
                    {"type": "object", "properties": {"url": {"type": "string"}}},
                ],
            },
            "size": {"oneOf": [{"type": "integer"}, {"type": "number", "multipleOf": 0.5}]},
            "names": {"type": "array", "items": {"oneOf": [{"const": "all"}, {"type": "string"}]}},
            "either": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
            "maybe": {"oneOf": [{"type": "string"}, {"type": "null"}]},
            "pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
            "mode": {"oneOf": [{"enum": ["r", "w"]}, {"const": "a"}, {"type": "integer"}]},
        },
        "required": ["target", "size", "names", "either", "maybe", "pet", "mode"],
        "additionalProperties": False,
        "$defs": {
            "Cat": {
                "type": "object",
                "properties": {"kind": {"const": "cat"}},
                "required": ["kind"],
            },
            "Dog": {
                "type": "object",
                "properties": {"kind": {"const": "dog"}, "barks": {"type": "boolean"}},
                "required": ["kind"],
            },
        },
    }
    text = output_of(schema)
    assert text.endswith(
        "class TOutput(TypedDict, closed=True):\n"
        "    # Where to read. [must match exactly one of the union's types]\n"
        "    target: TOutputTargetOption1 | TOutputTargetOption2\n"
        "    # [multipleOf: 0.5; must match exactly one of the union's types]\n"
        "    size: int | float\n"
        "    # [items must match exactly one of the union's types]\n"
        '    names: list[Literal["all"] | str]\n'
        "    either: int | float\n"
        "    maybe: str | None\n"
        "    pet: Cat | Dog\n"
        '    mode: Literal["r", "w"] | Literal["a"] | int'
    ), text


def test_a_root_one_of_says_it_above_the_declaration() -> None:
    schema = {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            {"type": "object", "properties": {"b": {"type": "integer"}}},
        ]
    }
    assert "# [must match exactly one of the union's types]\nTOutput = " in output_of(schema)


def test_what_a_tool_returns_as_its_docstring_says_is_a_comment_above_its_output() -> None:
    # A docstring's Returns section is the output schema's description, often all there is
    # on what the result holds: a model shown the tool natively reads it.
    @tool
    def count(word: str) -> dict[str, int]:
        """Count a word.

        Args:
            word: The word.

        Returns:
            Occurrences by file path.
        """
        return {}

    text = declarations(SdkTool("count", "Count a word.", count.parameters, count.output.schema))
    assert "\n\n# Occurrences by file path.\nCountOutput = dict[str, JsonValue]\n\n" in text
    raw = {"type": "object", "description": "A match.", "properties": {"at": {"type": "integer"}}}
    assert (
        output_of(raw)
        == "# A match.\nclass TOutput(TypedDict, extra_items=JsonValue):\n    at: NotRequired[int]"
    )


def test_a_bytes_parameter_says_its_text_is_base64() -> None:
    # msgspec declares bytes as a base64 string: a program passing plain text would be refused
    # (or its text decoded into other bytes), so the SDK says how the string is encoded.
    @tool
    def upload(data: bytes, kind: str = "raw") -> bytes:
        """Store a blob.

        Args:
            data: The blob.
            kind: What it is.
        """
        return data

    text = declarations(
        SdkTool("upload", "", upload.parameters, upload.output.schema if upload.output else None)
    )
    assert "    # The blob. [contentEncoding: base64]\n    data: str\n" in text
    assert "UploadOutput = str" in text
    media = {"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png"}
    assert output_of({"type": "object", "properties": {"png": media}}) == (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # [contentEncoding: base64; contentMediaType: image/png]\n"
        "    png: NotRequired[str]"
    )


def test_constraints_of_items_and_values_behind_a_union_become_comments_too() -> None:
    non_negative = {"type": "integer", "minimum": 0}
    schema = {
        "type": "object",
        "properties": {
            "maybe": {"anyOf": [{"type": "array", "items": non_negative}, {"type": "null"}]},
            "by_name": {"type": "object", "additionalProperties": non_negative},
        },
    }
    assert output_of(schema) == (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # [items minimum: 0]\n"
        "    maybe: NotRequired[list[int] | None]\n"
        "    # [values minimum: 0]\n"
        "    by_name: NotRequired[dict[str, int]]"
    )


def test_what_a_map_s_keys_must_be_becomes_a_comment() -> None:
    # The keys are typed str, so the comment is all that says a dict[int, T] wants numbers.
    @tool
    def shelve(slots: dict[int, str], rows: dict[Literal[1, 2], int] | None = None) -> None:
        """Store.

        Args:
            slots: Items by slot.
            rows: Counts by row.
        """

    text = declarations(SdkTool("shelve", "", shelve.parameters, None))
    assert (
        "    # Items by slot. [keys pattern: ^-?(0|[1-9][0-9]*)$]\n"
        "    slots: dict[str, str]\n"
        '    # Counts by row. [default: null; keys enum: ["1","2"]]\n'
        "    rows: NotRequired[dict[str, int] | None]\n"
    ) in text


def test_properties_beside_an_additional_properties_schema_type_the_extra_items() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert output_of(schema) == (
        "class TOutput(TypedDict, extra_items=int):\n    name: NotRequired[str]"
    )


def test_pattern_properties_type_the_keys_they_match() -> None:
    # A map whose keys are given by patterns (labels, headers, env) was rendered as taking no
    # key at all under additionalProperties: false, so a program written from the SDK passed
    # no labels; beside properties, the object read as closed to every other key.
    labels = {
        "type": "object",
        "patternProperties": {"^[a-z]+$": {"type": "string"}},
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "labels": labels,
            "env": {
                "type": "object",
                "patternProperties": {"^X_": {"type": "string"}, "^N_": {"type": "integer"}},
            },
            "spec": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "patternProperties": {"^x-": {"type": "integer"}},
                "additionalProperties": False,
            },
        },
        "required": ["labels"],
    }
    assert output_of(schema) == (
        "class TOutputSpec(TypedDict, extra_items=int):\n"
        "    name: NotRequired[str]\n"
        "\n"
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    # [keys pattern: ^[a-z]+$]\n"
        "    labels: dict[str, str]\n"
        "    env: NotRequired[dict[str, JsonValue]]\n"
        "    # [other keys pattern: ^x-]\n"
        "    spec: NotRequired[TOutputSpec]"
    )
    assert sdk_type_expression(labels) == "dict[str, str]"
    closed_two = {
        **labels,
        "patternProperties": {"^a": {"type": "string"}, "^b": {"type": "integer"}},
    }
    assert sdk_type_expression(closed_two) == "dict[str, str | int]"


def test_unevaluated_properties_false_closes_the_object() -> None:
    # The draft 2020-12 spelling of a closed object, also over an allOf of its parts.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "unevaluatedProperties": False,
    }
    merged = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"b": {"type": "integer"}}},
        ],
        "unevaluatedProperties": False,
    }
    assert output_of(schema) == "class TOutput(TypedDict, closed=True):\n    a: NotRequired[str]"
    assert output_of(merged) == (
        "class TOutput(TypedDict, closed=True):\n    a: NotRequired[str]\n    b: NotRequired[int]"
    )


def test_a_named_type_s_description_and_constraints_are_a_comment_above_its_declaration() -> None:
    # A model's or an enum's docstring is its $defs entry's description, often the only word
    # on what its values mean: the model reads it in a native tool schema, and read nothing of
    # it in the SDK, nor of the constraints of a $ref'd string.
    schema = {
        "type": "object",
        "properties": {
            "addr": {"$ref": "#/$defs/Addr"},
            "mode": {"$ref": "#/$defs/Mode"},
            "code": {"$ref": "#/$defs/Code", "description": "The office."},
        },
        "$defs": {
            "Addr": {
                "description": "A postal address.",
                "type": "object",
                "properties": {"street": {"type": "string"}},
            },
            "Mode": {"description": "How to ship:\n  fast costs double.", "enum": ["fast", "slow"]},
            "Code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
    }
    assert output_of(schema) == (
        "# A postal address.\n"
        "class Addr(TypedDict, extra_items=JsonValue):\n"
        "    street: NotRequired[str]\n"
        "\n"
        "# How to ship: fast costs double.\n"
        'Mode = Literal["fast", "slow"]\n'
        "\n"
        "# [pattern: ^[A-Z]{3}$]\n"
        "Code = str\n"
        "\n"
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    addr: NotRequired[Addr]\n"
        "    mode: NotRequired[Mode]\n"
        "    # The office.\n"
        "    code: NotRequired[Code]"
    )


def test_keyword_and_digit_def_names_stay_valid_python() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/none"}, "b": {"$ref": "#/$defs/1st"}},
        "$defs": {"none": {"type": "string"}, "1st": {"type": "integer"}},
    }
    text = output_of(schema)
    assert "DefNone = str" in text
    assert "Def1st = int" in text


class Window(msgspec.Struct):
    start: str
    end: str | None = None


def test_typed_tool_schemas_render_their_structs_by_name() -> None:
    @tool
    def events(window: Window, limit: int = 10) -> list[Window]:
        """List events."""
        return []

    text = declarations(
        SdkTool(events.name, events.description, events.parameters, events.output.schema)
    )
    assert "class Window(TypedDict, extra_items=JsonValue):\n    start: str\n" in text
    assert "class EventsArgs(TypedDict, closed=True):\n    window: Window\n" in text
    assert "async def events(self, args: EventsArgs, /) -> EventsOutput: ..." in text


# --- the real servers --------------------------------------------------------------------------


def recorded(server: str) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads((DATA / f"{server}.tools.json").read_text())["tools"]
    return tools


def sdk_tools(tools: list[dict[str, Any]]) -> list[SdkTool]:
    """The SDK inputs as the MCP adapter gives them: a tool's ``outputSchema`` (when it has
    one) types its binding's result."""
    return [
        SdkTool(t["name"], t.get("description", ""), t["inputSchema"], t.get("outputSchema", {}))
        for t in tools
    ]


def schema_properties(schema: Any) -> int:
    """How many property declarations a schema document holds (each object node once)."""
    count = 0
    seen: set[int] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.get("properties"), dict):
            count += len(node["properties"])
        stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default"))
    return count


def rendered_fields(text: str) -> list[str]:
    """The annotation of every field of every TypedDict in the declarations."""
    annotations: list[str] = []
    for statement in ast.parse(text).body:
        if isinstance(statement, ast.ClassDef) and any(
            isinstance(base, ast.Name) and base.id == "TypedDict" for base in statement.bases
        ):
            for item in statement.body:
                if isinstance(item, ast.AnnAssign):
                    annotations.append(ast.unparse(item.annotation))
        elif (
            isinstance(statement, ast.Assign)
            and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name)
            and statement.value.func.id == "TypedDict"
        ):
            fields = statement.value.args[1]
            assert isinstance(fields, ast.Dict)
            annotations.extend(ast.unparse(value) for value in fields.values)
    return [
        a.removeprefix("NotRequired[").removesuffix("]") if a.startswith("NotRequired[") else a
        for a in annotations
    ]


@pytest.mark.parametrize("server", SERVERS)
def test_the_recorded_tool_lists_are_real_answers(server: str) -> None:
    tools = recorded(server)
    assert len(tools) >= 2
    for entry in tools:
        assert entry["name"] and entry["inputSchema"]["type"] == "object"


def test_real_server_schemas_are_typed_parseable_and_stable() -> None:
    tools = [tool for server in SERVERS for tool in recorded(server)]
    assert len(tools) == 27
    text = declarations(*sdk_tools(tools))
    assert " = Any\n" not in text
    fields = rendered_fields(text)
    declared = sum(
        schema_properties(t["inputSchema"]) + schema_properties(t.get("outputSchema", {}))
        for t in tools
    )
    # ``TimeResult`` is shared by two properties of one output schema and rendered once.
    assert len(fields) == declared
    typed = [annotation for annotation in fields if "JsonValue" not in annotation]
    assert len(typed) / len(fields) >= 0.95, [a for a in fields if a not in typed]

    shuffled = sdk_tools(tools)
    random.Random(7).shuffle(shuffled)
    assert render_sdk(shuffled) == render_sdk(sdk_tools(tools))


def test_an_output_schema_types_the_binding_result() -> None:
    text = declarations(*sdk_tools(recorded("mcp_server_time")))
    assert (
        "class GetCurrentTimeOutput(TypedDict, extra_items=JsonValue):\n"
        "    timezone: str\n"
        "    datetime: str\n"
        "    day_of_week: str\n"
        "    is_dst: bool"
    ) in text
    assert (
        "class ConvertTimeOutput(TypedDict, extra_items=JsonValue):\n"
        "    source: TimeResult\n"
        "    target: TimeResult\n"
    ) in text
    assert "async def get_current_time(self, args: GetCurrentTimeArgs, /) -> " in text
    assert "-> GetCurrentTimeOutput: ..." in text


def test_server_everything_arguments_are_typed_with_their_constraints() -> None:
    text = declarations(*sdk_tools(recorded("mcp_server_everything")))
    assert (
        "class GetSumArgs(TypedDict, extra_items=JsonValue):\n    # First number\n    a: float\n"
    ) in text
    assert (
        "    # Number of resource links to return (1-10) [minimum: 1; maximum: 10; default: 3]\n"
        "    count: NotRequired[float]\n"
    ) in text
    assert '__getitem__(self, name: Literal["get-sum"]) -> Callable[[GetSumArgs]' in text


# --- any schema renders --------------------------------------------------------------------------

_names = st.sampled_from(["a", "b-c", "class", "1x", "ü", "__d"])
_leaves = st.one_of(
    st.sampled_from(
        [
            {"type": "string", "format": "uri"},
            {"type": "integer", "minimum": 0},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": ["string", "null"]},
            {"enum": ["x", 1, None, 2.5, True]},
            {"const": {"an": "object"}},
            {},
            {"$ref": "#/$defs/A"},
            {"$ref": "#/$defs/B"},
            {"$ref": "#"},
            {"$ref": "#/$defs/missing"},
            {"type": "widget"},
        ]
    ),
    st.just(True),
)


def _children(inner: Any) -> Any:
    # Every branch draws from ``inner`` (hypothesis checks that the extension recurses).
    return st.one_of(
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda x: {"type": "array", "items": x}, inner),
        st.builds(
            lambda xs: {"type": "array", "prefixItems": xs}, st.lists(inner, min_size=1, max_size=2)
        ),
        st.builds(lambda x: {"type": "object", "additionalProperties": x}, inner),
        st.builds(
            lambda props, req, extra: {
                "type": ["object", "null"] if extra is None else "object",
                "properties": props,
                "required": req,
                **({} if extra is None else {"additionalProperties": extra}),
            },
            st.dictionaries(_names, inner, min_size=1, max_size=3),
            st.lists(_names, max_size=2),
            st.one_of(st.none(), st.booleans(), inner),
        ),
    )


_schemas = st.recursive(_leaves, _children, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(root=_schemas, a=_schemas, b=_schemas, output=_schemas)
def test_any_json_schema_renders_parseable_and_stable_declarations(
    root: Any, a: Any, b: Any, output: Any
) -> None:
    parameters = {"type": "object", "properties": {"p": root}, "$defs": {"A": a, "B": b}}
    tools = [SdkTool("t.one", "", parameters, output), SdkTool("two", "", output, parameters)]
    text = declarations(*tools)
    assert "TOneArgs = Any" not in text and "TwoOutput = Any" not in text
    assert declarations(*reversed(tools)) == text


def test_real_output_schemas_projected_into_the_checked_subset_stay_typed() -> None:
    """An adapter whose output contract must be in the checked subset registers the projection
    of the server's ``outputSchema``; the binding's result is still fully typed."""
    with_output = [t for server in SERVERS for t in recorded(server) if "outputSchema" in t]
    assert {t["name"] for t in with_output} >= {"get_current_time", "convert_time"}
    tools = []
    for entry in with_output:
        projected = to_subset_schema(entry["outputSchema"])
        assert_supported_json_schema(projected)
        tools.append(SdkTool(entry["name"], "", {"type": "object"}, projected))
    text = declarations(*tools)
    fields = rendered_fields(text)
    assert fields and all("JsonValue" not in annotation for annotation in fields)
    assert (
        "class ConvertTimeOutput(TypedDict, extra_items=JsonValue):\n"
        "    source: ConvertTimeOutputSource\n"
    ) in text
