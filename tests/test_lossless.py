"""The lossless JSON walker: snapshot_json, thaw, is_json_value and compact_json."""

from __future__ import annotations

import enum
import sys
from collections import OrderedDict, defaultdict
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from uuid import UUID

import msgspec
import pytest

from dsh_tools.actors import FrozenDict, FrozenList
from dsh_tools.registry import (
    LosslessJsonError,
    compact_json,
    is_json_value,
    snapshot_json,
    thaw,
)

DEPTH = 5000


class Color(enum.IntEnum):
    RED = 1


class Name(enum.StrEnum):
    A = "a"


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class MyStr(str):
    __slots__ = ()


class Point(msgspec.Struct):
    x: int


def _nested_lists(depth: int, leaf: object = None) -> list[object]:
    root: list[object] = []
    cursor = root
    for _ in range(depth - 1):
        child: list[object] = []
        cursor.append(child)
        cursor = child
    cursor.append(leaf)
    return root


def _nested_dicts(depth: int, leaf: object = None) -> dict[str, object]:
    root: dict[str, object] = {}
    cursor = root
    for _ in range(depth - 1):
        child: dict[str, object] = {}
        cursor["a"] = child
        cursor = child
    cursor["a"] = leaf
    return root


def _depth_of_lists(value: object) -> tuple[int, object]:
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0]
    return depth, value


# --- accepted values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -1, 2**64 - 1, -(2**63), 1.5, 0.0, 1e300, "", "x", "é中", "\U0001f600"],
)
def test_accepted_scalars_are_returned_as_they_are(value: object) -> None:
    snapshot = snapshot_json(value)
    assert snapshot is value
    assert is_json_value(value)


def test_snapshot_freezes_every_container() -> None:
    snapshot = snapshot_json({"a": [1, {"b": [True, None]}], "c": {"d": "e"}})
    assert type(snapshot) is FrozenDict
    assert type(snapshot["a"]) is FrozenList
    assert type(snapshot["a"][1]) is FrozenDict
    assert type(snapshot["a"][1]["b"]) is FrozenList
    assert type(snapshot["c"]) is FrozenDict
    assert snapshot == {"a": [1, {"b": [True, None]}], "c": {"d": "e"}}


def test_snapshot_refuses_mutation_at_every_level() -> None:
    snapshot = snapshot_json({"a": [1, {"b": 2}]})
    with pytest.raises(TypeError):
        snapshot["x"] = 1
    with pytest.raises(TypeError):
        snapshot["a"].append(3)
    with pytest.raises(TypeError):
        snapshot["a"][1]["b"] = 3


def test_snapshot_keeps_insertion_order() -> None:
    snapshot = snapshot_json({"2": 1, "1": 2, "b": 3, "a": 4})
    assert list(snapshot) == ["2", "1", "b", "a"]


def test_snapshot_is_detached_from_the_callers_value() -> None:
    inner = [1, 2]
    value = {"inner": inner}
    snapshot = snapshot_json(value)
    inner.append(3)
    value["new"] = True
    assert snapshot == {"inner": [1, 2]}


def test_shared_containers_are_accepted_and_copied_independently() -> None:
    shared = {"x": [1]}
    snapshot = snapshot_json({"a": shared, "b": shared, "c": [shared, shared]})
    assert snapshot["a"] == snapshot["b"] == {"x": [1]}
    assert snapshot["a"] is not snapshot["b"]
    assert snapshot["c"][0] is not snapshot["c"][1]


def test_frozen_input_is_revalidated_and_copied() -> None:
    frozen = snapshot_json({"a": [1]})
    again = snapshot_json(frozen)
    assert again == frozen
    assert again is not frozen
    assert type(again["a"]) is FrozenList
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(FrozenList([1, float("nan")]))
    assert info.value.path == "value[1]"


def test_thaw_returns_plain_mutable_copies() -> None:
    frozen = snapshot_json({"a": [1, {"b": None}]})
    plain = thaw(frozen)
    assert type(plain) is dict
    assert type(plain["a"]) is list
    assert type(plain["a"][1]) is dict
    plain["a"].append(2)
    assert frozen == {"a": [1, {"b": None}]}


def test_thaw_of_a_plain_value_is_a_fresh_copy() -> None:
    value = {"a": [1]}
    plain = thaw(value)
    assert plain == value
    assert plain is not value
    assert plain["a"] is not value["a"]


def test_snapshot_encodes_like_the_plain_value() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": {}}
    assert msgspec.json.encode(snapshot_json(value)) == msgspec.json.encode(value)


# --- rejected values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (float("nan"), "float (NaN)"),
        (float("inf"), "float (inf)"),
        (float("-inf"), "float (-inf)"),
        (-0.0, "float (-0.0)"),
        (2**64, "int (out of range)"),
        (-(2**63) - 1, "int (out of range)"),
        ("a\ud800b", "str (lone surrogate)"),
        ((1, 2), "tuple"),
        ({1, 2}, "set"),
        (frozenset(), "frozenset"),
        (b"x", "bytes"),
        (bytearray(b"x"), "bytearray"),
        (memoryview(b"x"), "memoryview"),
        (range(3), "range"),
        (iter([1]), "list_iterator"),
        (Decimal(1), "Decimal"),
        (Fraction(1, 2), "Fraction"),
        (1j, "complex"),
        (Color.RED, "Color"),
        (Name.A, "Name"),
        (MyStr("x"), "MyStr"),
        (OrderedDict(), "OrderedDict"),
        (defaultdict(list), "defaultdict"),
        (MappingProxyType({}), "mappingproxy"),
        (MyDict(), "MyDict"),
        (MyList(), "MyList"),
        (Point(1), "Point"),
        (datetime(1970, 1, 1), "datetime"),
        (UUID(int=0), "UUID"),
        (Path("/tmp"), "PosixPath"),
        (object(), "object"),
        (Ellipsis, "ellipsis"),
        (msgspec.UNSET, "UnsetType"),
        (len, "builtin_function_or_method"),
        (lambda: 1, "function"),
        (int, "type"),
        (sys, "module"),
    ],
)
def test_rejected_values_name_path_and_type(value: object, type_name: str) -> None:
    assert not is_json_value(value)
    assert not is_json_value({"k": [value]})
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json({"k": [value]})
    assert info.value.path == "value.k[0]"
    assert info.value.type_name == type_name
    assert str(info.value) == f"value.k[0] is {type_name}"
    assert isinstance(info.value, ValueError)


def test_root_rejection_uses_the_root_label() -> None:
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json((1,), root="arguments")
    assert info.value.path == "arguments"
    assert str(info.value) == "arguments is tuple"


@pytest.mark.parametrize(
    ("key", "type_name"),
    [
        (1, "dict with int key"),
        (None, "dict with NoneType key"),
        (("a",), "dict with tuple key"),
        (MyStr("k"), "dict with MyStr key"),
        ("\udc00", "dict with str (lone surrogate) key"),
    ],
)
def test_non_str_keys_are_rejected(key: object, type_name: str) -> None:
    value = {"outer": {"ok": 1, key: 2}}
    assert not is_json_value(value)
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.path == "value.outer"
    assert info.value.type_name == type_name


def test_a_self_containing_list_is_a_cycle() -> None:
    value: list[object] = [1]
    value.append(value)
    assert not is_json_value(value)
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.path == "value[1]"
    assert info.value.type_name == "cycle"


def test_an_indirect_cycle_is_reported_where_it_closes() -> None:
    a: dict[str, object] = {}
    b: dict[str, object] = {"back": a}
    a["b"] = {"list": [b]}
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(a)
    assert info.value.path == "value.b.list[0].back"
    assert info.value.type_name == "cycle"
    with pytest.raises(LosslessJsonError):
        thaw(a)
    with pytest.raises(LosslessJsonError):
        compact_json(a)


def test_a_deep_problem_reports_its_full_path() -> None:
    value = {"a": [{"b": {"c": [0, 1, {"d": float("inf")}]}}]}
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.path == "value.a[0].b.c[2].d"


def test_walker_never_calls_user_code() -> None:
    class Loud:
        calls = 0

        def __eq__(self, other: object) -> bool:
            Loud.calls += 1
            raise AssertionError("__eq__ called")

        def __hash__(self) -> int:
            Loud.calls += 1
            raise AssertionError("__hash__ called")

        def __repr__(self) -> str:
            Loud.calls += 1
            raise AssertionError("__repr__ called")

    value = {"a": [Loud()]}
    assert not is_json_value(value)
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.type_name == "Loud"
    assert Loud.calls == 0


def test_a_metaclass_name_property_is_not_invoked() -> None:
    class Meta(type):
        @property
        def __name__(cls) -> str:  # type: ignore[override]
            raise AssertionError("metaclass __name__ called")

    class Odd(metaclass=Meta):
        pass

    with pytest.raises(LosslessJsonError) as info:
        snapshot_json([Odd()])
    assert info.value.type_name == "Odd"


def test_lossless_error_survives_pickling() -> None:
    import pickle

    error = LosslessJsonError("value.a", "tuple")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.type_name, str(copy)) == ("value.a", "tuple", "value.a is tuple")


# --- deep values (default recursion limit) -----------------------------------------------------


def test_sp36_a_5000_deep_list_is_json_and_snapshots() -> None:
    assert sys.getrecursionlimit() <= 1000 + 100
    value = _nested_lists(DEPTH, "leaf")
    assert is_json_value(value)
    snapshot = snapshot_json(value)
    depth, leaf = _depth_of_lists(snapshot)
    assert (depth, leaf) == (DEPTH, "leaf")
    cursor: object = snapshot
    while isinstance(cursor, list):
        assert type(cursor) is FrozenList
        cursor = cursor[0]


def test_a_5000_deep_object_thaws_and_encodes_compactly() -> None:
    value = _nested_dicts(DEPTH, 1.0)
    plain = thaw(snapshot_json(value))
    cursor: object = plain
    levels = 0
    while isinstance(cursor, dict):
        assert type(cursor) is dict
        cursor = cursor["a"]
        levels += 1
    assert (levels, cursor) == (DEPTH, 1.0)
    text = compact_json(value)
    assert text == '{"a":' * DEPTH + "1" + "}" * DEPTH


def test_a_problem_5000_levels_down_is_found_with_its_path() -> None:
    value = _nested_lists(DEPTH, float("nan"))
    assert not is_json_value(value)
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.path == "value" + "[0]" * DEPTH
    assert info.value.type_name == "float (NaN)"


def test_a_5000_deep_cycle_is_detected() -> None:
    value = _nested_lists(DEPTH)
    cursor: list[object] = value
    while cursor and isinstance(cursor[0], list):
        cursor = cursor[0]
    cursor[0] = value
    assert not is_json_value(value)
    with pytest.raises(LosslessJsonError) as info:
        snapshot_json(value)
    assert info.value.type_name == "cycle"


# --- compact JSON ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (["a", "b"], '["a","b"]'),
        ([1, 2], "[1,2]"),
        ("a", '"a"'),
        (None, "null"),
        (True, "true"),
        ({"k": [1.0, 2.5]}, '{"k":[1,2.5]}'),
        (["é", "中"], '["é","中"]'),
        ('q"\n', '"q\\"\\n"'),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-2.0, "-2"),
        (123.456, "123.456"),
        (2**64 - 1, "18446744073709551615"),
        ({}, "{}"),
        ([], "[]"),
    ],
)
def test_compact_json_matches_the_reference_text(value: object, text: str) -> None:
    assert compact_json(value) == text


def test_compact_json_rejects_lossy_values() -> None:
    with pytest.raises(LosslessJsonError) as info:
        compact_json({"a": float("nan")})
    assert info.value.path == "value.a"
