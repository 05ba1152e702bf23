"""The author DSL compiler: every keyword, the JSON Schema it compiles to, and its errors."""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

import jsonschema
import pytest

from dsh_tools.actors import FrozenDict, FrozenList, JsonSchemaError
from dsh_tools.registry import (
    assert_supported_json_schema,
    compile_parameters,
    compile_schema,
    thaw,
    validate_args,
    validate_json_schema_value,
)

C = compile_schema
P = compile_parameters


def violations_of(fn: Any, *args: Any) -> list[str]:
    with pytest.raises(JsonSchemaError) as info:
        fn(*args)
    assert info.value.code == "UNSUPPORTED_SCHEMA"
    return info.value.violations


# --- DSL compilation ---------------------------------------------------------------------------


def test_sp01_scalar_schemas_compile_unchanged() -> None:
    schema = {"type": "string", "enum": ["a", "b"], "const": "a"}
    assert C(schema) == schema
    for kind in ("number", "integer", "boolean", "null"):
        assert C({"type": kind}) == {"type": kind}


def test_sp02_json_items_compile_to_an_empty_schema() -> None:
    assert C({"type": "array", "items": {"type": "json"}}) == {"type": "array", "items": {}}


def test_sp03_empty_properties_are_kept() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {}}
    compiled = C(schema)
    assert compiled == schema
    assert list(compiled) == ["type", "additionalProperties", "properties"]


def test_sp04_json_node_keeps_only_annotations() -> None:
    compiled = C(
        {
            "type": "json",
            "description": "anything",
            "title": "Any JSON",
            "default": None,
            "examples": [{"nested": True}],
        }
    )
    assert compiled == {
        "description": "anything",
        "title": "Any JSON",
        "default": None,
        "examples": [{"nested": True}],
    }


def test_sp05_union_compiles_unchanged() -> None:
    schema = {"oneOf": [{"type": "string"}, {"type": "null"}]}
    assert C(schema) == schema


def test_sp06_key_order_is_canonical() -> None:
    compiled = C(
        {
            "description": "d",
            "additionalProperties": True,
            "type": "object",
            "properties": {"a": {"type": "string", "required": True}},
        }
    )
    assert list(compiled) == [
        "type",
        "description",
        "additionalProperties",
        "properties",
        "required",
    ]
    union = C({"description": "either", "oneOf": [{"type": "string"}, {"type": "null"}]})
    assert list(union) == ["oneOf", "description"]
    scalar = C({"const": "a", "enum": ["a"], "examples": ["a"], "title": "t", "type": "string"})
    assert list(scalar) == ["type", "title", "examples", "enum", "const"]


def test_unique_items_compiles_after_the_items_and_is_enforced() -> None:
    tags = {"uniqueItems": True, "items": {"type": "string"}, "type": "array", "title": "Tags"}
    compiled = C(tags)
    assert list(compiled) == ["type", "title", "items", "uniqueItems"]
    assert compiled == {**tags}
    spec = {"tags": tags}
    assert validate_args(spec, {"tags": ["a", "b"]}) == []
    assert validate_args(spec, {"tags": ["a", "b", "a"]}) == [
        '"tags[2]" repeats "tags[0]" (uniqueItems: true)'
    ]
    assert violations_of(C, {"type": "array", "uniqueItems": "yes"}) == [
        "schema.uniqueItems must be a boolean"
    ]
    assert violations_of(C, {"type": "string", "uniqueItems": True}) == [
        "schema.uniqueItems is not supported by the value schema DSL"
    ]


def test_sp07_parameter_map_compiles_to_an_object_root() -> None:
    compiled = P(
        {
            "path": {"type": "string", "required": True, "description": "Absolute path"},
            "offset": {"type": "number"},
            "limit": {"type": "number", "description": "Max lines"},
        }
    )
    assert compiled == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path"},
            "offset": {"type": "number"},
            "limit": {"type": "number", "description": "Max lines"},
        },
        "required": ["path"],
    }
    assert list(compiled) == ["type", "properties", "required"]


def test_sp08_empty_parameter_map() -> None:
    compiled = P({})
    assert compiled == {"type": "object", "properties": {}}
    assert "required" not in compiled
    assert "additionalProperties" not in compiled


def test_sp09_implicit_root_is_open_and_explicit_objects_keep_their_openness() -> None:
    compiled = P(
        {
            "closed": {
                "type": "object",
                "additionalProperties": False,
                "required": True,
                "properties": {"id": {"type": "integer", "required": True}},
            },
            "open": {"type": "object", "additionalProperties": True},
        }
    )
    assert compiled["properties"]["closed"] == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
    }
    assert compiled["properties"]["open"] == {"type": "object", "additionalProperties": True}
    assert compiled["required"] == ["closed"]
    assert "additionalProperties" not in compiled


def test_sp10_all_optional_nested_object_has_no_required_key() -> None:
    compiled = P(
        {
            "opts": {
                "type": "object",
                "additionalProperties": True,
                "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
            }
        }
    )
    assert "required" not in compiled["properties"]["opts"]


def test_sp11_array_of_objects() -> None:
    compiled = P(
        {
            "servers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": True,
                    "properties": {
                        "host": {"type": "string", "required": True},
                        "port": {"type": "number"},
                    },
                },
            }
        }
    )
    assert compiled["properties"]["servers"]["items"] == {
        "type": "object",
        "additionalProperties": True,
        "properties": {"host": {"type": "string"}, "port": {"type": "number"}},
        "required": ["host"],
    }


def test_sp12_absent_keys_never_appear_and_given_ones_are_kept() -> None:
    assert C({"type": "array"}) == {"type": "array"}
    assert list(C({"type": "string"})) == ["type"]
    low_high = C({"type": "string", "enum": ["low", "high"], "default": "low"})
    assert low_high["enum"] == ["low", "high"]
    assert low_high["default"] == "low"
    assert C({"type": "number", "default": 25})["default"] == 25


def test_sp13_property_named_proto_is_ordinary_data() -> None:
    compiled = P({"__proto__": {"type": "string", "required": True}})
    assert compiled["properties"]["__proto__"] == {"type": "string"}
    assert compiled["required"] == ["__proto__"]


def test_sp14_compiled_output_is_detached_and_frozen() -> None:
    default = ["a", {"b": 1}]
    examples = [{"x": [1]}]
    source = {"type": "json", "default": default, "examples": examples}
    compiled = C(source)
    default.append("later")
    default[1]["b"] = 2  # type: ignore[index]
    examples[0]["x"].append(2)
    source["title"] = "later"
    assert compiled == {"default": ["a", {"b": 1}], "examples": [{"x": [1]}]}
    assert type(compiled) is FrozenDict
    assert type(compiled["default"]) is FrozenList
    with pytest.raises(TypeError):
        compiled["title"] = "x"


def test_compiled_enum_is_a_fresh_frozen_list() -> None:
    entries = ["a", "b"]
    compiled = C({"type": "string", "enum": entries})
    entries.append("c")
    assert compiled["enum"] == ["a", "b"]
    assert type(compiled["enum"]) is FrozenList


# --- DSL rejections ----------------------------------------------------------------------------


def test_sp15_object_needs_explicit_additional_properties() -> None:
    assert violations_of(C, {"type": "object"}) == [
        "schema.additionalProperties must be explicitly true or false"
    ]
    assert violations_of(C, {"type": "object", "additionalProperties": 1}) == [
        "schema.additionalProperties must be explicitly true or false"
    ]


def test_sp16_single_branch_union_is_reported_by_the_assertion() -> None:
    assert violations_of(C, {"oneOf": [{"type": "string"}]}) == [
        "schema.oneOf must be an array of at least two schemas"
    ]


def test_sp17_enum_entries_must_have_the_node_type() -> None:
    assert violations_of(C, {"type": "number", "enum": ["1"]}) == [
        "schema.enum must be a non-empty array of number values"
    ]


def test_sp18_const_must_be_in_the_enum() -> None:
    assert violations_of(C, {"type": "string", "enum": ["a"], "const": "b"}) == [
        "schema.const must be one of schema.enum when both are declared"
    ]


def test_sp19_integer_const_must_be_integral() -> None:
    assert violations_of(C, {"type": "integer", "const": 1.5}) == [
        "schema.const must be a integer value"
    ]


@pytest.mark.parametrize("default", [float("nan"), set()])
def test_sp20_default_must_be_lossless(default: object) -> None:
    assert violations_of(C, {"type": "json", "default": default}) == [
        "schema.default annotation must be lossless JSON data"
    ]


def test_sp21_required_is_not_allowed_on_items() -> None:
    assert violations_of(C, {"type": "array", "items": {"type": "string", "required": True}}) == [
        "schema.items.required is not supported by the value schema DSL"
    ]


def test_sp22_items_must_be_a_value_schema() -> None:
    assert violations_of(C, {"type": "array", "items": 42}) == [
        "schema.items must be a value schema object"
    ]


def test_sp23_unknown_keys_are_author_errors() -> None:
    assert violations_of(C, {"type": "string", "extra": True}) == [
        "schema.extra is not supported by the value schema DSL"
    ]


def test_sp24_type_and_one_of_conflict() -> None:
    schema = {"type": "string", "oneOf": [{"type": "string"}, {"type": "null"}]}
    assert violations_of(C, schema) == ["schema cannot declare both type and oneOf"]


@pytest.mark.parametrize("branches", ["not-an-array", ({"type": "string"}, {"type": "null"})])
def test_sp25_one_of_must_be_a_list(branches: object) -> None:
    assert violations_of(C, {"oneOf": branches}) == [
        "schema.oneOf must be an array of at least two value schemas"
    ]


@pytest.mark.parametrize("entries", ["a", ("a",)])
def test_sp26_enum_must_be_a_list(entries: object) -> None:
    assert violations_of(C, {"type": "string", "enum": entries}) == [
        "schema.enum must be a non-empty array of scalar values"
    ]


def test_sp27_missing_type_and_non_dict_nodes() -> None:
    assert violations_of(C, {}) == [
        "schema.type must be string/number/integer/boolean/null/array/object/json, or use oneOf"
    ]
    assert violations_of(C, None) == ["schema must be a value schema object"]


@pytest.mark.parametrize("flag", [False, 1])
def test_sp28_required_must_be_exactly_true(flag: object) -> None:
    assert violations_of(P, {"value": {"type": "string", "required": flag}}) == [
        "parameters.value.required must be true when present"
    ]


def test_sp29_parameter_map_and_property_shapes() -> None:
    assert violations_of(P, None) == ["parameters must be an object of value schemas"]
    assert violations_of(P, {"bad": 42}) == ["parameters.bad must be a value schema object"]


def test_sp30_non_str_keys_and_dict_subclasses_are_rejected() -> None:
    assert violations_of(P, {"value": {"type": "string"}, 1: {"type": "number"}}) == [
        "parameters must be an object of value schemas"
    ]
    assert violations_of(P, OrderedDict(value={"type": "string"})) == [
        "parameters must be an object of value schemas"
    ]
    assert violations_of(P, {"value": OrderedDict(type="string")}) == [
        "parameters.value must be a value schema object"
    ]


def test_sp31_cycles_are_reported_where_they_close() -> None:
    array: dict[str, Any] = {"type": "array"}
    array["items"] = array
    assert violations_of(C, array) == ["schema.items is circular"]
    mapping: dict[str, Any] = {}
    mapping["self"] = {"type": "object", "additionalProperties": True, "properties": mapping}
    assert violations_of(P, mapping) == ["parameters.self.properties is circular"]


def test_shared_subschemas_are_not_cycles() -> None:
    leaf = {"type": "string"}
    compiled = P({"a": leaf, "b": leaf, "c": {"type": "array", "items": leaf}})
    assert compiled["properties"]["a"] == compiled["properties"]["b"] == {"type": "string"}
    assert compiled["properties"]["a"] is not compiled["properties"]["b"]


def test_sp32_validate_args_raises_for_a_malformed_spec() -> None:
    with pytest.raises(JsonSchemaError):
        validate_args({"x": {"type": "weird"}}, {"x": 1})
    with pytest.raises(JsonSchemaError):
        validate_args({"n": {"type": "number", "enum": ["1", "2"]}}, {"n": 1})


def test_sp33_enum_and_const_types_follow_python_traps() -> None:
    assert violations_of(C, {"type": "number", "enum": [True]}) == [
        "schema.enum must be a non-empty array of number values"
    ]
    assert violations_of(C, {"type": "boolean", "const": 1}) == [
        "schema.const must be a boolean value"
    ]
    assert C({"type": "integer", "enum": [1.0, 2]})["enum"] == [1.0, 2]


def test_compile_errors_are_fail_fast_in_document_order() -> None:
    spec = {
        "a": {"type": "string", "bogus": 1},
        "b": {"type": "object"},
    }
    assert violations_of(P, spec) == ["parameters.a.bogus is not supported by the value schema DSL"]


def test_assertion_after_compilation_is_exhaustive_and_rooted_at_schema() -> None:
    spec = {
        "n": {"type": "number", "enum": ["1"]},
        "s": {"type": "string", "const": 3},
    }
    assert violations_of(P, spec) == [
        "schema.properties.n.enum must be a non-empty array of number values",
        "schema.properties.s.const must be a string value",
    ]


def test_compiled_schemas_pass_the_draft_2020_12_meta_schema() -> None:
    compiled = P(
        {
            "path": {"type": "string", "required": True, "description": "p"},
            "mode": {"type": "string", "enum": ["r", "w"], "default": "r"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "any": {"type": "json", "examples": [1, "x"]},
            "either": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
            "cfg": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"host": {"type": "string", "required": True}},
            },
        }
    )
    jsonschema.Draft202012Validator.check_schema(thaw(compiled))


# --- deep schemas ------------------------------------------------------------------------------


def _one_of_chain(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "null"}]}
    return schema


def test_sp34_a_5000_deep_union_chain_compiles_asserts_and_validates() -> None:
    assert sys.getrecursionlimit() <= 1100
    schema = _one_of_chain(5000)
    compiled = C(schema)
    layers = 0
    cursor: Any = compiled
    while "oneOf" in cursor:
        assert type(cursor) is FrozenDict
        assert cursor["oneOf"][1] == {"type": "null"}
        cursor = cursor["oneOf"][0]
        layers += 1
    assert layers == 5000
    assert cursor == {"type": "string"}
    assert_supported_json_schema(schema)
    assert validate_json_schema_value(schema, "leaf") == []
    assert validate_json_schema_value(schema, 42) == [
        '"value" must match exactly one oneOf branch (matched 0)'
    ]


def test_a_5000_deep_object_parameter_schema_compiles_and_validates() -> None:
    leaf: dict[str, Any] = {"type": "integer", "required": True}
    node = leaf
    for _ in range(5000):
        node = {
            "type": "object",
            "additionalProperties": False,
            "required": True,
            "properties": {"a": node},
        }
    compiled = P({"a": node})
    cursor: Any = compiled
    depth = 0
    while cursor.get("type") == "object":
        assert cursor["required"] == ["a"]
        cursor = cursor["properties"]["a"]
        depth += 1
    assert depth == 5001
    assert cursor == {"type": "integer"}

    value: Any = 1
    for _ in range(5001):
        value = {"a": value}
    assert validate_json_schema_value(compiled, value, "") == []

    bad: Any = "x"
    for _ in range(5001):
        bad = {"a": bad}
    assert validate_json_schema_value(compiled, bad, "") == [
        '"' + ".".join(["a"] * 5001) + '" must be an integer'
    ]
