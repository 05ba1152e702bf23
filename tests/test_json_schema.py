"""The enforced raw JSON Schema subset: what is accepted, what is refused and why."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pytest

from dsh_tools.actors import JsonSchemaError
from dsh_tools.registry import (
    assert_object_json_schema,
    assert_supported_json_schema,
    snapshot_json,
)

KEYWORD_HINT = (
    " is not a supported keyword (subset: type/oneOf/properties/required/"
    "additionalProperties/items/enum/const + annotations)"
)


def A(schema: Any) -> list[str]:
    try:
        assert_supported_json_schema(schema)
    except JsonSchemaError as error:
        assert error.code == "UNSUPPORTED_SCHEMA"
        assert str(error) == "unsupported JSON schema: " + "; ".join(error.violations)
        assert error.violations, "JsonSchemaError without violations"
        return error.violations
    return []


def AO(schema: Any) -> list[str]:
    try:
        assert_object_json_schema(schema)
    except JsonSchemaError as error:
        return error.violations
    return []


# --- acceptance and the object-root guard ------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "number"},
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"type": "string"}},
        {
            "type": "object",
            "properties": {
                "nested": {"type": "object", "properties": {}, "additionalProperties": False},
                "free": {},
            },
            "required": ["nested"],
            "additionalProperties": True,
        },
        {"oneOf": [{"type": "string"}, {"type": "number"}]},
        {"description": "any JSON", "title": "JSON", "default": None, "examples": [1, "x"]},
    ],
)
def test_sp37_subset_schemas_are_accepted(schema: dict[str, Any]) -> None:
    assert A(schema) == []
    assert A(snapshot_json(schema)) == []


def test_sp38_object_root_guard() -> None:
    assert AO({"type": "object"}) == []
    object_rooted = 'schema.type must be "object" (structured output is object-rooted)'
    for schema in (
        {},
        {"type": "string"},
        {"type": "array"},
        {"oneOf": [{"type": "object"}, {"type": "null"}]},
    ):
        assert AO(schema) == [object_rooted]
    assert AO({"type": "object", "minimum": 1}) == ["schema.minimum" + KEYWORD_HINT]


# --- rejections --------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [None, [], "no"])
def test_sp39_non_records_and_bad_types(schema: object) -> None:
    assert A(schema) == ["schema must be a schema object"]


def test_sp39_type_must_be_a_known_single_string() -> None:
    assert A({"type": "tuple"})[0].startswith("schema.type must be one of")
    assert A({"type": "tuple"}) == [
        "schema.type must be one of object/array/string/number/integer/boolean/null"
    ]
    assert A({"type": ["string", "null"]}) == [
        "schema.type must be a single type string (type arrays are not supported)"
    ]


@pytest.mark.parametrize("branches", [[], [{}], "x"])
def test_sp40_one_of_needs_two_branches(branches: object) -> None:
    assert A({"oneOf": branches}) == ["schema.oneOf must be an array of at least two schemas"]


def test_sp40_type_and_one_of_conflict() -> None:
    assert A({"type": "string", "oneOf": [{}, {}]}) == ["schema cannot declare both type and oneOf"]


def test_sp41_one_of_siblings_and_branch_paths() -> None:
    assert A({"oneOf": [{"type": "string"}, {"type": "number"}], "items": {}}) == [
        "schema.items is not supported beside oneOf"
    ]
    assert "schema.oneOf[1].type" in A({"oneOf": [{"type": "string"}, {"type": "weird"}]})[0]
    assert A({"oneOf": ({"type": "string"}, {"type": "null"})}) == [
        "schema.oneOf must be an array of at least two schemas"
    ]


def test_one_of_sibling_checks_come_after_the_branches() -> None:
    schema = {"oneOf": [{"type": "weird"}, {"type": "null"}], "const": 1, "enum": [1]}
    assert A(schema) == [
        "schema.oneOf[0].type must be one of object/array/string/number/integer/boolean/null",
        "schema.enum is not supported beside oneOf",
        "schema.const is not supported beside oneOf",
    ]


@pytest.mark.parametrize(
    "keyword", ["anyOf", "allOf", "not", "pattern", "minimum", "maxLength", "$ref"]
)
def test_sp42_unsupported_keywords(keyword: str) -> None:
    """A keyword outside the enforced subset is refused, named with its path."""
    assert f"schema.{keyword} is not a supported keyword" in A({"type": "object", keyword: []})[0]


def test_sp43_misplaced_keywords() -> None:
    """A keyword that does not apply to the declared type is refused for that type."""
    assert A({"type": "object", "items": {}}) == ['schema.items is not supported on type "object"']
    assert A({"type": "array", "properties": {}}) == [
        'schema.properties is not supported on type "array"'
    ]
    assert A({"type": "object", "enum": ["x"]}) == ['schema.enum is not supported on type "object"']
    assert A({"type": "array", "const": None}) == ['schema.const is not supported on type "array"']


def test_misplaced_subtrees_are_not_descended_into() -> None:
    assert A({"type": "string", "items": {"type": "weird"}}) == [
        'schema.items is not supported on type "string"'
    ]


def test_sp44_keywords_without_type_or_one_of() -> None:
    schema = {
        "properties": {},
        "required": [],
        "additionalProperties": True,
        "items": {},
        "enum": [],
        "const": None,
    }
    assert A(schema) == [
        f"schema.{key} requires type or oneOf"
        for key in ("properties", "required", "additionalProperties", "items", "enum", "const")
    ]


def test_sp45_every_violation_is_collected() -> None:
    schema = {
        "type": "object",
        "pattern": "x",
        "properties": {"a": {"type": "weird"}, "b": {"type": "string", "minimum": 1}},
    }
    assert A(schema) == [
        "schema.pattern" + KEYWORD_HINT,
        "schema.properties.a.type must be one of object/array/string/number/integer/boolean/null",
        "schema.properties.b.minimum" + KEYWORD_HINT,
    ]


def test_sp46_object_field_errors() -> None:
    assert A({"type": "object", "properties": []}) == [
        "schema.properties must be an object of schemas"
    ]
    assert A({"type": "object", "properties": {"a": "x"}}) == [
        "schema.properties.a must be a schema object"
    ]
    for required in ("a", [1]):
        assert A({"type": "object", "required": required}) == [
            "schema.required must be an array of strings"
        ]
    assert A({"type": "object", "properties": {}, "required": ["missing"]}) == [
        'schema.required names "missing" which is not in properties'
    ]
    for flag in ("yes", 1):
        assert A({"type": "object", "additionalProperties": flag}) == [
            "schema.additionalProperties must be a boolean"
        ]


def test_sp47_null_properties_and_required_order() -> None:
    assert A({"type": "object", "properties": None}) == [
        "schema.properties must be an object of schemas"
    ]
    assert A({"type": "object", "properties": None, "required": ["missing"]}) == [
        "schema.properties must be an object of schemas",
        'schema.required names "missing" which is not in properties',
    ]


def test_object_tail_checks_follow_the_property_subtree() -> None:
    schema = {
        "type": "object",
        "additionalProperties": "no",
        "required": ["zzz"],
        "properties": {"a": {"type": "weird"}},
    }
    assert A(schema) == [
        "schema.properties.a.type must be one of object/array/string/number/integer/boolean/null",
        'schema.required names "zzz" which is not in properties',
        "schema.additionalProperties must be a boolean",
    ]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "enum": ["a"], "const": "a"},
        {"type": "number", "enum": [1.5], "const": 1.5},
        {"type": "integer", "enum": [1], "const": 1},
        {"type": "boolean", "enum": [True], "const": True},
        {"type": "null", "enum": [None], "const": None},
    ],
)
def test_sp48_typed_enum_and_const_are_accepted(schema: dict[str, Any]) -> None:
    assert A(schema) == []


@pytest.mark.parametrize(
    ("schema", "violation"),
    [
        ({"type": "string", "enum": []}, "schema.enum must be a non-empty array of string values"),
        (
            {"type": "number", "enum": ["1"]},
            "schema.enum must be a non-empty array of number values",
        ),
        (
            {"type": "integer", "enum": [1.5]},
            "schema.enum must be a non-empty array of integer values",
        ),
        (
            {"type": "number", "enum": [float("nan")]},
            "schema.enum must be a non-empty array of number values",
        ),
        (
            {"type": "string", "enum": None},
            "schema.enum must be a non-empty array of string values",
        ),
    ],
)
def test_sp49_enum_rejections(schema: dict[str, Any], violation: str) -> None:
    """An enum that is empty, not an array, or holds values of another type is refused."""
    assert A(schema) == [violation]


def test_sp50_const_rejections() -> None:
    """A const that is not a lossless value of the declared type is refused."""
    assert A({"type": "number", "const": -0.0}) == ["schema.const must be a number value"]
    assert A({"type": "boolean", "const": 1}) == ["schema.const must be a boolean value"]


def test_out_of_range_integers_are_not_numbers_in_schemas() -> None:
    assert A({"type": "integer", "const": 2**64}) == ["schema.const must be a integer value"]
    assert A({"type": "number", "enum": [-(2**63) - 1]}) == [
        "schema.enum must be a non-empty array of number values"
    ]


def test_sp51_annotation_types_and_losslessness() -> None:
    assert A({"description": 1}) == ["schema.description must be a string"]
    assert A({"title": 1}) == ["schema.title must be a string"]
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    for key, payload in (
        ("default", float("inf")),
        ("examples", [set()]),
        ("examples", datetime(1970, 1, 1)),
        ("default", cyclic),
        ("default", {1: True}),
        ("default", OrderedDict()),
    ):
        assert A({key: payload}) == [f"schema.{key} annotation must be lossless JSON data"]


def test_sp51_a_nan_description_gives_both_violations() -> None:
    assert A({"description": float("nan")}) == [
        "schema.description annotation must be lossless JSON data",
        "schema.description must be a string",
    ]


def test_sp52_cycles_and_sharing() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["self"] = schema
    assert A(schema) == ["schema.properties.self is circular"]
    leaf = {"type": "string"}
    assert A({"type": "object", "properties": {"a": leaf, "b": leaf}}) == []


def test_sp53_non_record_containers_and_nodes() -> None:
    for properties in (MappingProxyType({}), OrderedDict()):
        assert A({"type": "object", "properties": properties}) == [
            "schema.properties must be an object of schemas"
        ]
    assert A({"type": "object", "properties": {"at": datetime(1970, 1, 1)}}) == [
        "schema.properties.at must be a schema object"
    ]
    assert A({"type": "string", 1: "x"}) == ["schema must be a schema object"]


def test_sp54_required_name_that_looks_like_a_js_builtin() -> None:
    assert A({"type": "object", "properties": {}, "required": ["toString"]}) == [
        'schema.required names "toString" which is not in properties'
    ]


def test_frozen_schemas_are_records() -> None:
    schema = snapshot_json(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "enum": ["x"]}},
            "required": ["a"],
        }
    )
    assert A(schema) == []


def test_a_5000_deep_assertion_reports_a_deep_violation_with_its_path() -> None:
    schema: dict[str, Any] = {"type": "weird"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    assert A(schema) == [
        "schema"
        + ".items" * 5000
        + ".type must be one of object/array/string/number/integer/boolean/null"
    ]
