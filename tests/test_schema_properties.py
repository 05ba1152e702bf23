"""Property tests: the validator against jsonschema as an oracle, snapshot/thaw round trips,
the lossless walker against an independent statement of the rules, and random DSL specs."""

from __future__ import annotations

import enum
import json
import math
import random
from collections import OrderedDict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from dsh_tools.actors import FrozenDict, FrozenList, JsonSchemaError
from dsh_tools.registry import (
    LosslessJsonError,
    assert_supported_json_schema,
    compact_json,
    compile_parameters,
    is_json_value,
    snapshot_json,
    thaw,
    validate_args,
    validate_json_schema_value,
)

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# --- an independent statement of the lossless rules --------------------------------------------


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _scalar_ok(value: Any) -> bool:
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return INT_MIN <= value <= INT_MAX
    if kind is float:
        return math.isfinite(value) and not (value == 0 and math.copysign(1.0, value) < 0)
    if kind is str:
        return _encodable(value)
    return False


def _key_problem(key: Any) -> str | None:
    if type(key) is str:
        return None if _encodable(key) else "dict with str (lone surrogate) key"
    return f"dict with {type(key).__name__} key"


def first_problem(value: Any, path: str = "value") -> tuple[str, str] | None:
    """The first offending (path, type name) in document order, or None when lossless."""
    kind = type(value)
    if kind in (dict, FrozenDict):
        for key, item in value.items():
            problem = _key_problem(key)
            if problem is not None:
                return path, problem
            found = first_problem(item, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if kind in (list, FrozenList):
        for index, item in enumerate(value):
            found = first_problem(item, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if _scalar_ok(value):
        return None
    if kind is float:
        if value != value:
            return path, "float (NaN)"
        if math.isinf(value):
            return path, "float (inf)" if value > 0 else "float (-inf)"
        return path, "float (-0.0)"
    if kind is int:
        return path, "int (out of range)"
    if kind is str:
        return path, "str (lone surrogate)"
    return path, kind.__name__


# --- strategies --------------------------------------------------------------------------------

SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
FINITE = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not (f == 0 and math.copysign(1.0, f) < 0)
)
LOSSLESS_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(INT_MIN, INT_MAX), FINITE, SAFE_TEXT
)
LOSSLESS = st.recursive(
    LOSSLESS_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(SAFE_TEXT, children, max_size=4),
        st.lists(children, max_size=3).map(FrozenList),
        st.dictionaries(SAFE_TEXT, children, max_size=3).map(FrozenDict),
    ),
    max_leaves=24,
)


class Small(enum.IntEnum):
    ONE = 1


class Tag(str):
    __slots__ = ()


BAD_LEAVES = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    2**64,
    INT_MIN - 1,
    "x\ud800",
    (1,),
    {1},
    frozenset(),
    b"x",
    Decimal("1.5"),
    Small.ONE,
    Tag("t"),
    msgspec.UNSET,
    object(),
    OrderedDict(a=1),
    range(2),
]
KEYS = st.sampled_from(["a", "b", "c", "k1", "z"])
BAD_KEYS = st.sampled_from([1, None, (1,), Tag("k"), "k\udc00"])
MIXED = st.recursive(
    st.one_of(LOSSLESS_SCALARS, st.sampled_from(BAD_LEAVES)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=4),
        st.dictionaries(st.one_of(KEYS, BAD_KEYS), children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(FrozenList),
        st.dictionaries(KEYS, children, max_size=3).map(FrozenDict),
    ),
    max_leaves=16,
)

# Small pools so that values often hit enums, consts and declared property names.
POOLS: dict[str, list[Any]] = {
    "string": ["a", "b", "c"],
    "number": [-1, 0, 1, 2, 0.5, 1.0, 2.5],
    "integer": [-1, 0, 1, 2, 1.0, 3.0],
    "boolean": [True, False],
    "null": [None],
}
NAMES = ["a", "b", "c"]


@st.composite
def scalar_schemas(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(list(POOLS)))
    schema: dict[str, Any] = {"type": kind}
    pool = POOLS[kind]
    entries = None
    if draw(st.booleans()):
        entries = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        schema["enum"] = entries
    if draw(st.integers(0, 3)) == 0:
        schema["const"] = draw(st.sampled_from(entries if entries else pool))
    if draw(st.integers(0, 4)) == 0:
        schema["description"] = "d"
    return schema


def subset_schemas() -> st.SearchStrategy[dict[str, Any]]:
    leaves = st.one_of(
        scalar_schemas(),
        st.just({}),
        st.just({"type": "array"}),
        st.just({"type": "array", "uniqueItems": True}),
        st.builds(lambda closed: {"type": "object", "additionalProperties": closed}, st.booleans()),
    )

    def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        @st.composite
        def objects(draw: Any) -> dict[str, Any]:
            properties = draw(st.dictionaries(st.sampled_from(NAMES), children, max_size=3))
            schema: dict[str, Any] = {"type": "object", "properties": properties}
            required = [name for name in properties if draw(st.booleans())]
            if required:
                schema["required"] = required
            closed = draw(st.sampled_from([None, True, False]))
            if closed is not None:
                schema["additionalProperties"] = closed
            return schema

        return st.one_of(
            st.builds(
                lambda items, unique: {"type": "array", "items": items, "uniqueItems": unique},
                children,
                st.sampled_from([True, True, False]),
            ),
            st.builds(lambda items: {"type": "array", "items": items}, children),
            objects(),
            st.lists(children, min_size=2, max_size=3).map(lambda branches: {"oneOf": branches}),
        )

    return st.recursive(leaves, extend, max_leaves=8)


def values_for(schema: dict[str, Any], poison: bool = False) -> st.SearchStrategy[Any]:
    """Values shaped like the schema (often valid, sometimes not). With ``poison``, strings may
    hold a lone surrogate and undeclared keys may hold anything, lossy or not."""
    if "oneOf" in schema:
        return st.one_of([values_for(branch, poison) for branch in schema["oneOf"]])
    kind = schema.get("type")
    if kind in POOLS:
        extra = ["a\ud800"] if poison else []
        return st.sampled_from([*POOLS[kind], "a", 1, None, *extra])
    if kind == "array":
        items = values_for(schema["items"], poison) if "items" in schema else SMALL_VALUES
        return st.lists(items, max_size=3)
    if kind == "object":
        fields = {
            name: values_for(child, poison) for name, child in schema.get("properties", {}).items()
        }
        return st.fixed_dictionaries(
            {}, optional={**fields, "z": MIXED if poison else SMALL_VALUES}
        )
    return MIXED if poison else SMALL_VALUES


def _json_key(value: Any) -> Any:
    """A key equal for two values exactly when JSON Schema (draft 2020-12) calls them equal:
    1 and 1.0 are, true and 1 are not, an object's key order does not count."""
    if value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0, hashed alike
    if isinstance(value, list | tuple):
        return ("array", tuple(_json_key(item) for item in value))
    return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    if unique and validator.is_type(instance, "array"):
        keys = [_json_key(item) for item in instance]
        if len(set(keys)) != len(keys):
            yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")


Draft202012 = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"uniqueItems": _unique_items}
)
"""The oracle: jsonschema's draft 2020-12 validator with the draft's own uniqueItems. jsonschema
4.26 sorts the items with Python's ``==`` (where 0 == False) and compares only neighbours, so it
calls ``[[0, true, 0], [false, true, false], [0, true, 0]]`` unique."""


SMALL_VALUES = st.recursive(
    st.sampled_from([None, True, False, 0, 1, 1.0, 2.5, "a", "b"]),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from([*NAMES, "z"]), children, max_size=3),
    ),
    max_leaves=8,
)


# --- the validator agrees with jsonschema ------------------------------------------------------


@PROPERTY_SETTINGS
@given(st.data())
def test_validator_agrees_with_draft_2020_12(data: Any) -> None:
    schema = data.draw(subset_schemas(), label="schema")
    assert_supported_json_schema(schema)
    value = data.draw(st.one_of(values_for(schema), SMALL_VALUES, LOSSLESS), label="value")
    frozen = snapshot_json(value)
    oracle = Draft202012(thaw(schema)).is_valid(thaw(frozen))
    event(f"oracle says valid: {oracle}")
    assert (validate_json_schema_value(schema, value) == []) is oracle
    assert (validate_json_schema_value(snapshot_json(schema), frozen) == []) is oracle


@PROPERTY_SETTINGS
@given(st.data())
def test_an_accepted_container_is_always_lossless(data: Any) -> None:
    schema = data.draw(subset_schemas(), label="schema")
    value = data.draw(st.one_of(values_for(schema, poison=True), MIXED), label="value")
    found = validate_json_schema_value(schema, value)
    event(f"accepted: {found == []}, lossless: {is_json_value(value)}")
    if found == [] and type(value) in (dict, list, FrozenDict, FrozenList):
        assert is_json_value(value)
    if is_json_value(value):
        oracle = Draft202012(thaw(schema)).is_valid(thaw(value))
        assert (found == []) is oracle


@PROPERTY_SETTINGS
@given(st.lists(SMALL_VALUES, max_size=5))
@example([[0, True, 0], [False, True, False], [0, True, 0]])  # jsonschema's own uniq says unique
def test_unique_items_agrees_with_draft_2020_12(items: list[Any]) -> None:
    # Small values collide often: 1 and 1.0, true and 1, objects with their keys reordered.
    schema = {"type": "array", "uniqueItems": True}
    oracle = Draft202012(schema).is_valid(items)
    event(f"oracle says unique: {oracle}")
    assert (validate_json_schema_value(schema, items) == []) is oracle


@PROPERTY_SETTINGS
@given(subset_schemas())
def test_subset_schemas_are_valid_draft_2020_12_schemas(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)


# --- snapshot and thaw round trips -------------------------------------------------------------


def _all_containers(value: Any) -> list[Any]:
    found: list[Any] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            found.append(node)
            stack.extend(node)
    return found


def _same_json(parsed: Any, original: Any) -> bool:
    """Equality where a float printed like JavaScript (``1e16`` as digits) may parse as int."""
    if type(original) is float:
        return type(parsed) in (int, float) and float(parsed) == original
    if isinstance(original, dict):
        return (
            isinstance(parsed, dict)
            and list(parsed) == list(original)
            and all(_same_json(parsed[key], original[key]) for key in original)
        )
    if isinstance(original, list):
        return (
            isinstance(parsed, list)
            and len(parsed) == len(original)
            and all(_same_json(a, b) for a, b in zip(parsed, original, strict=True))
        )
    return type(parsed) is type(original) and parsed == original


@PROPERTY_SETTINGS
@given(LOSSLESS)
def test_snapshot_and_thaw_round_trip(value: Any) -> None:
    assert is_json_value(value)
    frozen = snapshot_json(value)
    assert frozen == value
    assert all(type(node) in (FrozenDict, FrozenList) for node in _all_containers(frozen))
    plain = thaw(frozen)
    assert plain == value
    assert all(type(node) in (dict, list) for node in _all_containers(plain))
    assert snapshot_json(frozen) == value
    assert thaw(value) == value
    assert msgspec.json.decode(msgspec.json.encode(frozen)) == value
    assert _same_json(json.loads(compact_json(value)), value)


# --- the walker rejects exactly what the rules reject ------------------------------------------


@PROPERTY_SETTINGS
@given(MIXED)
def test_walker_rejects_exactly_what_the_rules_reject(value: Any) -> None:
    expected = first_problem(value)
    event(f"lossless: {expected is None}")
    assert is_json_value(value) is (expected is None)
    if expected is None:
        assert snapshot_json(value) == value
        assert thaw(value) == value
        compact_json(value)
        return
    for walker in (snapshot_json, thaw, compact_json):
        with pytest.raises(LosslessJsonError) as info:
            walker(value)
        assert (info.value.path, info.value.type_name) == expected


# --- seeded random DSL specs ----------------------------------------------------------------------

SCALAR_KINDS = ["string", "number", "integer", "boolean", "null"]


def random_value_spec(rng: random.Random, depth: int) -> dict[str, Any]:
    choice = rng.randrange(8 if depth > 0 else 5)
    if choice < 5:
        kind = SCALAR_KINDS[choice]
        spec: dict[str, Any] = {"type": kind}
        if kind in ("string", "integer") and rng.random() < 0.3:
            spec["enum"] = POOLS[kind][:2]
        return spec
    if choice == 5:
        spec = {"type": "array"}
        if rng.random() < 0.7:
            spec["items"] = random_value_spec(rng, depth - 1)
        return spec
    if choice == 6:
        spec = {"type": "object", "additionalProperties": rng.random() < 0.5}
        if rng.random() < 0.8:
            spec["properties"] = random_property_map(rng, depth - 1)
        return spec
    return {"type": "json"}


def random_property_map(rng: random.Random, depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for index in range(rng.randrange(4)):
        prop = random_value_spec(rng, depth)
        if rng.random() < 0.5:
            prop["required"] = True
        spec[f"p{index}"] = prop
    return spec


def satisfying_value(spec: dict[str, Any], rng: random.Random) -> Any:
    kind = spec["type"]
    if "enum" in spec:
        return rng.choice(spec["enum"])
    if kind == "string":
        return rng.choice(["", "x", "é"])
    if kind == "number":
        return rng.choice([0, -3, 2.5])
    if kind == "integer":
        return rng.choice([0, 7, 2.0])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        items = spec.get("items")
        return [
            satisfying_value(items, rng) if items else rng.choice([1, "a", None])
            for _ in range(rng.randrange(3))
        ]
    if kind == "object":
        return satisfying_args(
            spec.get("properties", {}), rng, open_root=spec["additionalProperties"]
        )
    return rng.choice([None, 1, "x", [1, {"k": False}]])


def satisfying_args(
    spec: dict[str, Any], rng: random.Random, *, open_root: bool = True
) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for name, prop in spec.items():
        if prop.get("required") is True or rng.random() < 0.5:
            args[name] = satisfying_value(prop, rng)
    if open_root and rng.random() < 0.3:
        args["extra"] = 1
    return args


def required_names_everywhere(spec: dict[str, Any], compiled: Any) -> None:
    """Compare ``required: True`` flags with the compiled ``required`` at every object level."""
    pending = [(spec, compiled)]
    while pending:
        property_map, node = pending.pop()
        expected = [name for name, prop in property_map.items() if prop.get("required") is True]
        assert list(node.get("required", [])) == expected
        for name, prop in property_map.items():
            child = node["properties"][name]
            while prop.get("type") == "array" and "items" in prop:
                prop, child = prop["items"], child["items"]
            if prop.get("type") == "object" and "properties" in prop:
                pending.append((prop["properties"], child))


WEIRD_ARGUMENTS: list[Any] = [
    None,
    1,
    "x",
    [1],
    (1,),
    {1, 2},
    object(),
    {"p0": object()},
    {1: "a"},
    {"p0": float("nan")},
    OrderedDict(p0=1),
    FrozenDict(p0=[1]),
]


def test_sp78_seeded_random_specs_and_arguments() -> None:
    rng = random.Random(78)
    for _ in range(240):
        spec = random_property_map(rng, 2)
        compiled = compile_parameters(spec)
        jsonschema.Draft202012Validator.check_schema(thaw(compiled))
        required_names_everywhere(spec, compiled)

        args = satisfying_args(spec, rng)
        assert validate_args(spec, args) == [], (spec, args)
        assert validate_args(spec, snapshot_json(args)) == []

        for name, prop in spec.items():
            if prop.get("required") is True:
                reduced = {key: value for key, value in args.items() if key != name}
                found = validate_args(spec, reduced)
                assert any(f'"{name}"' in violation for violation in found), (spec, reduced)

        for top in (None, 1, "x", [args], True):
            assert validate_args(spec, top) == ['"arguments" must be an object']

        for weird in WEIRD_ARGUMENTS:
            assert isinstance(validate_args(spec, weird), list)


def test_sp78_compiling_generated_specs_never_raises_and_bad_ones_always_do() -> None:
    rng = random.Random(7)
    for _ in range(200):
        spec = random_property_map(rng, 2)
        compile_parameters(spec)
        if spec:
            broken = dict(spec)
            broken[next(iter(spec))] = {**spec[next(iter(spec))], "minimum": 1}
            with pytest.raises(JsonSchemaError):
                compile_parameters(broken)
