"""JSON Schema: the enforced raw subset (what is accepted, what is refused and why), and
validating values against it (each keyword's violations, lossy values, validate_args, worked
examples)."""

from __future__ import annotations

import enum
from collections import OrderedDict
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import msgspec
import pytest

from dsh_tools.actors import JsonSchemaError
from dsh_tools.registry import (
    assert_object_json_schema,
    assert_supported_json_schema,
    compile_parameters,
    snapshot_json,
    validate_args,
    validate_json_schema_value,
)

KEYWORD_HINT = (
    " is not a supported keyword (subset: type/oneOf/properties/required/"
    "additionalProperties/items/uniqueItems/enum/const + annotations)"
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


# --- validating values --------------------------------------------------------------------------

V = validate_json_schema_value
VA = validate_args


class Name(enum.StrEnum):
    A = "a"


class HostileKey:
    """A key whose hash collides with "answer" and whose equality check raises."""

    def __hash__(self) -> int:
        return hash("answer")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("hostile __eq__")


def test_sp55_matching_values_are_valid() -> None:
    assert V({"type": "string"}, "x") == []
    assert V({"type": "number"}, 1.5) == []
    assert V({"type": "integer"}, 2) == []
    assert V({"type": "boolean"}, True) == []
    assert V({"type": "null"}, None) == []
    assert V({"type": "array", "items": {"type": "string"}}, ["x"]) == []
    assert V({"type": "object"}, {"x": 1}) == []


def test_sp56_wrong_types_and_lossy_numbers() -> None:
    assert V({"type": "string"}, 1) == ['"value" must be a string']
    assert V({"type": "number"}, "1") == ['"value" must be a number']
    assert V({"type": "number"}, float("nan")) == ['"value" must be a finite JSON number']
    assert V({"type": "number"}, -0.0) == ['"value" must be a finite JSON number']
    assert V({"type": "integer"}, 1.5) == ['"value" must be an integer']
    assert V({"type": "boolean"}, "true") == ['"value" must be a boolean']
    assert V({"type": "null"}, 0) == ['"value" must be null']


def test_sp57_python_type_traps() -> None:
    assert V({"type": "number"}, True) == ['"value" must be a number']
    assert V({"type": "integer"}, True) == ['"value" must be an integer']
    assert V({"type": "integer"}, float("inf")) == ['"value" must be an integer']
    assert V({"type": "boolean"}, 1) == ['"value" must be a boolean']
    assert V({"type": "integer"}, 1.0) == []
    assert V({"type": "integer"}, 2**63) == []
    assert V({"type": "number"}, 7) == []


def test_sp57_integers_outside_the_wire_range_fail() -> None:
    # Every boundary accepts -2**63 .. 2**64-1 only.
    assert V({"type": "integer"}, 2**70) == ['"value" must be an integer']
    assert V({"type": "integer"}, 2**64 - 1) == []
    assert V({"type": "number"}, -(2**63) - 1) == ['"value" must be a finite JSON number']
    # An integral float is an integer of the same range (1e300 used to pass, then overflow).
    for outside in (1e300, 2.0**64, -(2.0**63) * 2):
        assert V({"type": "integer"}, outside) == ['"value" must be an integer']
    assert V({"type": "integer"}, 2.0**63) == []
    assert V({"type": "integer"}, -(2.0**63)) == []
    assert V({"type": "integer", "enum": [1, 2]}, 1e300) == ['"value" must be an integer']


def test_sp58_enum_then_const() -> None:
    schema = {"type": "string", "enum": ["a", "b"], "const": "a"}
    assert V(schema, "a") == []
    assert V(schema, "c") == ['"value" must be one of ["a","b"]']
    assert V(schema, "b") == ['"value" must be "a"']


def test_sp59_enum_diagnostics_in_arguments() -> None:
    assert VA({"n": {"type": "number", "enum": [1, 2]}}, {"n": 3}) == ['"n" must be one of [1,2]']
    assert VA({"n": {"type": "number", "enum": [1, 2]}}, {"n": 1.0}) == []
    assert VA({"c": {"type": "string", "enum": ["red", "green"]}}, {"c": "blue"}) == [
        '"c" must be one of ["red","green"]'
    ]
    assert VA({"c": {"type": "string", "enum": ["é", "中"]}}, {"c": "x"}) == [
        '"c" must be one of ["é","中"]'
    ]


def test_enum_membership_is_type_aware() -> None:
    assert V({"type": "integer", "enum": [1.0, 2]}, 1) == []
    assert V({"oneOf": [{"type": "boolean"}, {"type": "integer", "enum": [1]}]}, True) == []
    assert V({"type": "integer", "const": 1}, 1.0) == []
    assert V({"type": "number", "enum": [1.5, 2]}, 2.0) == []
    assert V({"type": "number", "enum": [1.5, 2.0]}, 3) == ['"value" must be one of [1.5,2]']


S60: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file": {"type": "string"},
        "nested": {
            "type": "object",
            "properties": {"line": {"type": "integer"}},
            "required": ["line"],
            "additionalProperties": False,
        },
    },
    "required": ["file"],
}


def test_sp60_open_root_with_a_closed_nested_object() -> None:
    assert V(S60, {"file": "a", "extra": [1], "nested": {"line": 2}}) == []
    assert V(S60, {"nested": {"line": 1}}) == ['missing required property "value.file"']
    assert V(S60, {"file": 1, "nested": {}}) == [
        '"value.file" must be a string',
        'missing required property "value.nested.line"',
    ]
    assert V(S60, {"file": "a", "nested": {"line": 1, "extra": True}}) == [
        '"value.nested.extra" is not a declared property (additionalProperties: false)'
    ]
    assert V(S60, "x") == ['"value" must be an object']


def test_sp61_none_is_present_not_missing() -> None:
    assert V(S60, {"file": None}) == ['"value.file" must be a string']


def test_sp62_lossy_objects() -> None:
    """Objects holding sets, non-str keys or non-JSON values fail validation."""
    assert V({"type": "object"}, {"x": {1, 2}}) == ['"value" must be a lossless JSON object']
    assert V({"type": "object"}, {1: "a"}) == ['"value" must be a lossless JSON object']
    assert V({"type": "object"}, datetime(1970, 1, 1)) == ['"value" must be an object']


def test_sp63_hostile_key_is_contained() -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    assert V(schema, {HostileKey(): 1}) == ['"value" must be a lossless JSON value']


def test_hostile_key_in_a_nested_object_is_contained_by_that_object() -> None:
    schema = {
        "type": "object",
        "properties": {
            "inner": {
                "type": "object",
                "properties": {"answer": {"type": "integer"}},
                "required": ["answer"],
            },
            "n": {"type": "integer"},
        },
    }
    assert V(schema, {"inner": {HostileKey(): 1}, "n": "x"}) == [
        '"value.inner" must be a lossless JSON value',
        '"value.n" must be an integer',
    ]


def test_sp64_arrays() -> None:
    """Arrays: item types, NaN items and tuples (which are not arrays) are reported."""
    schema = {"type": "array", "items": {"type": "integer"}}
    assert V(schema, [1, 2]) == []
    assert V(schema, [1, 1.5]) == ['"value[1]" must be an integer']
    assert V(schema, "x") == ['"value" must be an array']
    assert V({"type": "array"}, [float("nan")]) == ['"value" must be a dense lossless JSON array']
    assert V({"type": "array"}, (1, 2)) == ['"value" must be an array']


def test_sp65_one_of_means_exactly_one() -> None:
    disjoint = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    assert V(disjoint, "x") == []
    assert V(disjoint, None) == ['"value" must match exactly one oneOf branch (matched 0)']
    overlapping = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    assert V(overlapping, 1) == ['"value" must match exactly one oneOf branch (matched 2)']
    assert V(overlapping, 1.5) == []


def test_one_of_with_container_branches() -> None:
    schema = {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "array", "items": {"type": "integer"}},
            {"type": "null"},
        ]
    }
    assert V(schema, {"a": "x"}) == []
    assert V(schema, [1, 2]) == []
    assert V(schema, None) == []
    assert V(schema, {"b": 1}) == ['"value" must match exactly one oneOf branch (matched 0)']


@pytest.mark.parametrize("value", [None, True, 1, "x", [1], {"x": None}])
def test_sp66_annotation_only_accepts_lossless_values(value: object) -> None:
    assert V({}, value) == []


def _self_containing() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(
    "value",
    [
        lambda: 1,
        float("inf"),
        -0.0,
        set(),
        b"x",
        Decimal(1),
        Name.A,
        msgspec.UNSET,
        object(),
        _self_containing(),
        "\ud800",
    ],
)
def test_sp66_annotation_only_rejects_lossy_values(value: object) -> None:
    assert V({}, value) == ['"value" must be a lossless JSON value']


def test_sp67_plain_dict_key_semantics() -> None:
    assert V(
        {
            "type": "object",
            "properties": {"toString": {"type": "string"}},
            "required": ["toString"],
        },
        {},
    ) == ['missing required property "value.toString"']
    assert V({"type": "object", "additionalProperties": False}, {"toString": 1}) == [
        '"value.toString" is not a declared property (additionalProperties: false)'
    ]
    assert V({"type": "object", "properties": {"constructor": {"type": "string"}}}, {}) == []


def test_sp68_closed_object_without_properties() -> None:
    spec = {"cfg": {"type": "object", "additionalProperties": False}}
    assert VA(spec, {"cfg": {}}) == []
    assert VA(spec, {"cfg": {"a": 1}}) == [
        '"cfg.a" is not a declared property (additionalProperties: false)'
    ]


def test_sp69_forged_unasserted_schemas() -> None:
    assert V({"type": "object", "properties": None}, {}) == []
    assert V({"type": "object", "required": None}, {}) == []
    with pytest.raises(ValueError, match="tuple"):
        V({"type": "tuple"}, 1)


def test_an_unknown_type_below_a_container_is_contained_by_it() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "tuple"}}}
    assert V(schema, {"a": 1}) == ['"value" must be a lossless JSON value']


def test_sp70_frozen_forms_validate_like_plain_values() -> None:
    plain = {"a": [1, {"b": "c"}]}
    frozen = snapshot_json(plain)
    schema = {
        "type": "object",
        "properties": {
            "a": {
                "type": "array",
                "items": {
                    "oneOf": [
                        {"type": "integer"},
                        {"type": "object", "properties": {"b": {"type": "string"}}},
                    ]
                },
            }
        },
        "required": ["a"],
    }
    assert V(schema, frozen) == V(schema, plain) == []
    bad_schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
    }
    assert V(bad_schema, frozen) == V(bad_schema, plain) == ['"value.a[1]" must be an integer']
    assert V(snapshot_json(bad_schema), frozen) == ['"value.a[1]" must be an integer']


def test_validation_never_raises_for_arbitrary_objects() -> None:
    schema = compile_parameters(
        {
            "a": {"type": "string", "required": True},
            "b": {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "null"}]}},
            "c": {"type": "object", "additionalProperties": False},
            "d": {"type": "json"},
        }
    )
    weird: list[object] = [
        object(),
        {"a": object(), "b": object(), "c": object(), "d": object()},
        {"a": "x", "b": [object(), (1,)], "c": {1: 2}, "d": {1, 2}},
        {HostileKey(): 1},
        {"a": "x", "d": _self_containing()},
    ]
    for value in weird:
        assert isinstance(V(schema, value, ""), list)


def test_custom_root_label_and_empty_root_paths() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}}
    assert V(schema, {"x": [1]}, "output") == ['"output.x[0]" must be a string']
    assert V(schema, {"x": [1]}, "") == ['"x[0]" must be a string']
    assert V({"type": "array", "items": {"type": "string"}}, [1], "") == ['"[0]" must be a string']
    assert V({"type": "string"}, 1, "") == ['"arguments" must be a string']


# --- validate_args -----------------------------------------------------------------------------

READ_SPEC = {"path": {"type": "string", "required": True}, "limit": {"type": "number"}}


def test_sp71_arguments_must_be_an_object() -> None:
    assert VA(READ_SPEC, {"path": "/tmp"}) == []
    assert VA(READ_SPEC, {"path": "/tmp", "limit": 5}) == []
    for value in (None, "nope", []):
        assert VA(READ_SPEC, value) == ['"arguments" must be an object']


def test_sp72_missing_required_and_open_root() -> None:
    assert VA(READ_SPEC, {}) == ['missing required property "path"']
    assert VA(READ_SPEC, {"path": "/tmp", "extra": 1}) == []


def test_sp73_defaults_are_never_applied() -> None:
    args: dict[str, Any] = {}
    assert VA({"limit": {"type": "number", "default": 25}}, args) == []
    assert args == {}


def test_sp74_scalar_property_types() -> None:
    spec = {"s": {"type": "string"}, "n": {"type": "number"}, "b": {"type": "boolean"}}
    assert VA(spec, {"s": 1}) == ['"s" must be a string']
    assert VA(spec, {"n": "x"}) == ['"n" must be a number']
    assert VA(spec, {"b": "x"}) == ['"b" must be a boolean']


CONFIG_SPEC = {
    "config": {
        "type": "object",
        "additionalProperties": True,
        "required": True,
        "properties": {"host": {"type": "string", "required": True}, "port": {"type": "number"}},
    },
    "bag": {"type": "object", "additionalProperties": True},
}


def test_sp75_worked_example() -> None:
    """validate_args on nested required properties and an open object."""
    assert VA(CONFIG_SPEC, {"config": {"host": "h"}, "bag": {"anything": True}}) == []
    assert VA(CONFIG_SPEC, {"config": {"port": 9}, "bag": 5}) == [
        'missing required property "config.host"',
        '"bag" must be an object',
    ]


def test_sp76_arrays_in_arguments() -> None:
    spec = {"tags": {"type": "array", "items": {"type": "string"}}, "raw": {"type": "array"}}
    assert VA(spec, {"tags": ["a", "b"], "raw": [1, {}, "x"]}) == []
    assert VA(spec, {"tags": ["a", 2]}) == ['"tags[1]" must be a string']
    assert VA(spec, {"tags": "nope"}) == ['"tags" must be an array']


def test_sp77_array_of_open_objects_with_a_required_host() -> None:
    spec = {
        "servers": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": True,
                "properties": {"host": {"type": "string", "required": True}},
            },
        }
    }
    assert VA(spec, {"servers": [{"host": "a"}, {}]}) == [
        'missing required property "servers[1].host"'
    ]


def test_violations_come_in_walk_order() -> None:
    spec = {
        "a": {"type": "string", "required": True},
        "b": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "c": {"type": "array", "items": {"type": "integer"}},
                "d": {"type": "boolean"},
            },
        },
        "e": {"type": "null"},
    }
    assert VA(spec, {"b": {"zz": 1, "c": [1, "x", 2.5], "d": 0}, "e": 1}) == [
        'missing required property "a"',
        '"b.c[1]" must be an integer',
        '"b.c[2]" must be an integer',
        '"b.d" must be a boolean',
        '"b.zz" is not a declared property (additionalProperties: false)',
        '"e" must be null',
    ]


def test_a_5000_deep_value_against_a_json_schema() -> None:
    value: Any = "leaf"
    for _ in range(5000):
        value = [value]
    assert V({}, value) == []
    assert V({"type": "array", "items": {}}, value) == []
    assert V({"type": "array", "items": {"type": "string"}}, value) == [
        '"value[0]" must be a string'
    ]


def test_accepted_strings_with_lone_surrogates_still_fail_the_container_check() -> None:
    obj = {"type": "object", "properties": {"s": {"type": "string"}}}
    assert V(obj, {"s": "a\ud800"}) == ['"value" must be a lossless JSON object']
    either = {
        "type": "object",
        "properties": {"s": {"oneOf": [{"type": "string"}, {"type": "null"}]}},
    }
    assert V(either, {"s": "a\ud800"}) == ['"value" must be a lossless JSON object']
    strings = {"type": "array", "items": {"type": "string"}}
    assert V(strings, ["ok", "a\ud800"]) == ['"value" must be a dense lossless JSON array']
    nested = {"type": "object", "properties": {"o": obj}}
    assert V(nested, {"o": {"s": "\udfff"}}) == ['"value.o" must be a lossless JSON object']
    assert V({"type": "string"}, "a\ud800") == []


def test_undeclared_keys_are_still_checked_for_losslessness() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert V(schema, {"a": 1, "b": float("nan")}) == ['"value" must be a lossless JSON object']
    assert V(schema, {"a": 1, 2: "x"}) == ['"value" must be a lossless JSON object']
    assert V(schema, {"a": 1, "b": [1, {"c": {2}}]}) == ['"value" must be a lossless JSON object']


def test_a_cyclic_value_is_never_accepted_whatever_the_schema_depth() -> None:
    outer: dict[str, Any] = {}
    inner: dict[str, Any] = {"b": outer}
    outer["a"] = inner
    leaf: dict[str, Any] = {}
    for depth in range(6):
        schema: dict[str, Any] = leaf
        for level in range(depth):
            name = "b" if (depth - level) % 2 == 0 else "a"
            schema = {"type": "object", "properties": {name: schema}, "required": [name]}
        assert V(schema, outer) != [], depth


# --- uniqueItems -------------------------------------------------------------------------------


def test_unique_items_is_a_boolean_keyword_of_arrays() -> None:
    assert A({"type": "array", "uniqueItems": True}) == []
    assert A({"type": "array", "items": {"type": "integer"}, "uniqueItems": False}) == []
    assert A({"type": "array", "uniqueItems": 1}) == ["schema.uniqueItems must be a boolean"]
    assert A({"type": "string", "uniqueItems": True}) == [
        'schema.uniqueItems is not supported on type "string"'
    ]
    assert A({"uniqueItems": True}) == ["schema.uniqueItems requires type or oneOf"]


def test_repeated_items_are_refused_naming_both_places() -> None:
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    assert V(unique, [1, 2, 3]) == []
    assert V(unique, [1, 2, 1]) == ['"value[2]" repeats "value[0]" (uniqueItems: true)']
    # Rendered as every argument violation is: from the property, under an empty root label.
    arguments = {"type": "object", "properties": {"t": unique}}
    assert validate_json_schema_value(arguments, {"t": [5, "x", 5]}, "") == [
        '"t[2]" repeats "t[0]" (uniqueItems: true)',
        '"t[1]" must be an integer',
    ]
    nested = {
        "type": "object",
        "properties": {"tags": {"type": "array", "uniqueItems": True}},
    }
    assert V(nested, {"tags": ["a", "b", "b"]}) == [
        '"value.tags[2]" repeats "value.tags[1]" (uniqueItems: true)'
    ]
    assert V({**unique, "uniqueItems": False}, [1, 1]) == []
    # Repeats and the items' own violations are all reported, the repeat first.
    assert V(unique, [1, "x", 1]) == [
        '"value[2]" repeats "value[0]" (uniqueItems: true)',
        '"value[1]" must be an integer',
    ]


def test_repeats_are_judged_by_json_equality() -> None:
    unique = {"type": "array", "uniqueItems": True}
    assert V(unique, [1, 1.0]) == ['"value[1]" repeats "value[0]" (uniqueItems: true)']
    assert V(unique, [True, 1]) == []
    assert V(unique, [False, 0, None, "", [], {}]) == []
    assert V(unique, ["1", 1]) == []
    assert V(unique, [{"a": 1, "b": [2, {"c": True}]}, {"b": [2.0, {"c": True}], "a": 1}]) == [
        '"value[1]" repeats "value[0]" (uniqueItems: true)'
    ]
    assert V(unique, [{"a": [1]}, {"a": [True]}]) == []
    assert V(unique, [[1, [2]], [1, [2, 3]]]) == []
    assert V(unique, [[], {}]) == []
    frozen = snapshot_json({"list": [{"k": [1]}, {"k": [1.0]}]})["list"]
    assert V(unique, frozen) == ['"value[1]" repeats "value[0]" (uniqueItems: true)']


def test_repeats_of_deep_items_are_found_without_recursion_errors() -> None:
    first: list[Any] = []
    second: list[Any] = []
    other: list[Any] = [1]
    for _ in range(5000):
        first, second, other = [first], [second], [other]
    unique = {"type": "array", "uniqueItems": True}
    assert V(unique, [first, other]) == []
    assert V(unique, [first, other, second]) == [
        '"value[2]" repeats "value[0]" (uniqueItems: true)'
    ]
