"""Full-vocabulary JSON Schema helpers: the projection into the checked subset and the
optional-null dropper."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from dsh_tools import FrozenDict, assert_supported_json_schema, snapshot_json
from dsh_tools.registry import (
    accepts_null,
    optional_null_dropper,
    to_subset_schema,
    validate_json_schema_value,
)

# --- to_subset_schema --------------------------------------------------------------------------

PROJECTIONS = [
    ({"type": "integer", "minimum": 0, "format": "int32"}, {"type": "integer"}),
    (
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"oneOf": [{"type": "string"}, {"type": "null"}]},
    ),
    (
        {"type": ["string", "null"], "maxLength": 3},
        {"oneOf": [{"type": "string"}, {"type": "null"}]},
    ),
    ({"anyOf": [{"type": "integer"}, {"type": "number"}]}, {"type": "number"}),
    ({"anyOf": [{"type": "string"}, {"type": "string", "format": "date"}]}, {}),
    ({"anyOf": [{"type": "string"}, {}]}, {}),
    (
        {"enum": ["a", "b"], "title": "Letter"},
        {"type": "string", "enum": ["a", "b"], "title": "Letter"},
    ),
    (
        {"enum": ["a", 1, None]},
        {
            "oneOf": [
                {"type": "string", "enum": ["a"]},
                {"type": "integer", "enum": [1]},
                {"type": "null"},
            ]
        },
    ),
    ({"enum": [1, 2.5]}, {"type": "number", "enum": [1, 2.5]}),
    ({"const": True}, {"type": "boolean", "enum": [True]}),
    ({"enum": [{"a": 1}]}, {}),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"type": "object"}),
    (
        {
            "$schema": "x",
            "$id": "y",
            "properties": {"a": {"type": "string"}},
            "required": ["a", "zz"],
        },
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    ),
    (
        {"type": "array", "items": {"$ref": "#/$defs/N"}, "$defs": {"N": {"type": "number"}}},
        {"type": "array", "items": {"type": "number"}},
    ),
    ({"$ref": "#/$defs/missing"}, {}),
    ({"type": "widget"}, {}),
    (
        {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True},
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    ),
    ({"type": "array", "uniqueItems": False, "minItems": 1}, {"type": "array"}),
]


@pytest.mark.parametrize(
    ("schema", "expected"), PROJECTIONS, ids=[str(i) for i in range(len(PROJECTIONS))]
)
def test_projection_into_the_subset(schema: Any, expected: Any) -> None:
    projected = to_subset_schema(schema)
    assert projected == expected
    assert_supported_json_schema(projected)


def test_recursive_refs_are_inlined_until_they_recur() -> None:
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["label"],
                "additionalProperties": False,
            }
        },
    }
    projected = to_subset_schema(schema)
    assert projected == {
        "type": "object",
        "properties": {"label": {"type": "string"}, "next": {}},
        "required": ["label"],
        "additionalProperties": False,
    }


WIDENING = [
    (
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "maximum": 3}},
            "required": ["n"],
        },
        [{"n": 1}, {"n": 3, "extra": [1]}],
    ),
    ({"anyOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}, [1, 2.5, -1]),
    ({"type": ["array", "null"], "items": {"enum": ["x", 2]}}, [None, ["x", 2], []]),
    ({"allOf": [{"type": "string"}, {"minLength": 2}]}, ["ab"]),
    (
        {"type": "array", "uniqueItems": True},
        [[1, True], [{"a": 1, "b": 2}, {"a": 2, "b": 1}], [[1], [1, 1]], ["1", 1]],
    ),
]


@pytest.mark.parametrize(("schema", "values"), WIDENING, ids=[str(i) for i in range(len(WIDENING))])
def test_the_projection_accepts_everything_the_original_accepts(
    schema: Any, values: list[Any]
) -> None:
    projected = to_subset_schema(schema)
    for value in values:
        jsonschema.validate(value, schema)
        assert validate_json_schema_value(projected, snapshot_json(value)) == [], value


def test_deep_schemas_project_without_recursion_errors() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5_000):
        schema = {"type": "array", "items": schema}
    projected = to_subset_schema(schema)
    assert_supported_json_schema(projected)


# --- optional_null_dropper ---------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "need": {"type": "string"},
        "opt": {"type": "integer"},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "window": {"$ref": "#/$defs/Window"},
        "windows": {"type": "array", "items": {"$ref": "#/$defs/Window"}},
        "anything": {},
    },
    "required": ["need"],
    "$defs": {
        "Window": {
            "type": "object",
            "properties": {"start": {"type": "string"}, "end": {"type": "string"}},
            "required": ["start"],
        }
    },
}


def test_nulls_for_optional_properties_that_do_not_accept_null_are_dropped() -> None:
    drop = optional_null_dropper(SCHEMA)
    assert drop is not None
    value = {
        "need": None,
        "opt": None,
        "maybe": None,
        "window": {"start": None, "end": None},
        "windows": [{"start": "a", "end": None}, {"start": "b"}],
        "anything": None,
    }
    assert drop(value) == {
        "need": None,
        "maybe": None,
        "window": {"start": None},
        "windows": [{"start": "a"}, {"start": "b"}],
        "anything": None,
    }
    assert value["opt"] is None  # the input is not changed


TREE = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/Node"}},
    "required": ["root"],
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "weight": {"type": "number"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["name"],
        }
    },
}


def test_nulls_are_dropped_at_every_level_of_a_recursive_shape() -> None:
    # Strict mode makes "children" and "weight" nullable in the one Node definition, so a
    # model may send null at any depth, not only at the first.
    drop = optional_null_dropper(TREE)
    assert drop is not None
    leaf = {"name": "c", "weight": None, "children": None}
    value = {"root": {"name": "a", "weight": None, "children": [{"name": "b", "children": [leaf]}]}}
    assert drop(value) == {
        "root": {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    }


def test_frozen_values_stay_frozen_and_unchanged_values_are_the_same_object() -> None:
    drop = optional_null_dropper(snapshot_json(SCHEMA))
    assert drop is not None
    frozen = snapshot_json({"need": "x", "window": {"start": "a", "end": None}})
    dropped = drop(frozen)
    assert type(dropped) is FrozenDict and type(dropped["window"]) is FrozenDict
    assert dropped == {"need": "x", "window": {"start": "a"}}
    clean = snapshot_json({"need": "x", "opt": 1})
    assert drop(clean) is clean
    assert drop("not an object") == "not an object"


def test_no_dropper_when_nothing_can_be_dropped() -> None:
    assert (
        optional_null_dropper(
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
        )
        is None
    )
    assert (
        optional_null_dropper({"type": "object", "properties": {"a": {"type": ["string", "null"]}}})
        is None
    )
    assert optional_null_dropper({"type": "string"}) is None


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "null"}, True),
        ({"type": ["integer", "null"]}, True),
        ({"enum": ["a", None]}, True),
        ({"const": None}, True),
        ({"type": "string", "nullable": True}, True),
        ({}, True),
        ({"type": "string"}, False),
        ({"enum": ["a"]}, False),
        ({"properties": {}}, False),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, False),
    ],
)
def test_accepts_null(schema: Any, expected: bool) -> None:
    assert accepts_null(schema, schema) is expected


def test_no_dropper_for_a_recursive_shape_with_nothing_to_drop() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name", "children"],
            }
        },
    }
    assert optional_null_dropper(tree) is None
