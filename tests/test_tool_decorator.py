"""@tool: a tool from a type-hinted function, run through the real pipeline."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec
import pytest

from dsh_tools import (
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolDefinition,
    ToolExecutionResult,
    ToolResult,
    ToolRunContext,
    ToolSystem,
    assert_supported_json_schema,
    present_call_view,
    present_result_view,
    tool,
)
from dsh_tools.integrations import to_anthropic_tools, to_openai_tools


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(msgspec.Struct):
    x: float
    y: float


@dataclasses.dataclass
class Size:
    width: int
    height: int


class Filters(TypedDict):
    owner: str
    limit: NotRequired[int]


class Tree(msgspec.Struct):
    label: str
    children: list[Tree] = []


class Summary(msgspec.Struct):
    count: int
    names: list[str]


@pytest.fixture(scope="module")
def system() -> Iterator[ToolSystem]:
    started = ToolSystem.start(code_runtime=None)
    try:
        yield started
    finally:
        started.stop()


def run(system: ToolSystem, definition: ToolDefinition, arguments: Any) -> ToolExecutionResult:
    dispose = system.tools.register(definition)
    try:
        return system.execute(ExecuteCall(call_id="c1", name=definition.name, arguments=arguments))
    finally:
        dispose()


def text(result: ToolExecutionResult) -> str:
    (block,) = result.content
    return str(block["text"])


# --- parameters and values ---------------------------------------------------------------------


def test_scalars_reach_the_body_as_typed_values(system: ToolSystem) -> None:
    @tool
    def describe(name: str, count: int, ratio: float, on: bool, nothing: None) -> str:
        return f"{name!r} {count!r} {ratio!r} {on!r} {nothing!r}"

    assert describe.parameters == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "on": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        "required": ["name", "count", "ratio", "on", "nothing"],
        "additionalProperties": False,
    }
    arguments = {"name": "a", "count": 2, "ratio": 1, "on": True, "nothing": None}
    assert text(run(system, describe, arguments)) == "'a' 2 1.0 True None"


def test_structs_dataclasses_typeddicts_enums_and_literals_are_converted(
    system: ToolSystem,
) -> None:
    @tool
    def place(
        at: Point, size: Size, filters: Filters, color: Color, mode: Literal["fast", "slow"]
    ) -> str:
        return f"{at!r} {size!r} {filters!r} {color!r} {mode!r}"

    schema = place.parameters
    assert schema["properties"]["at"] == {"$ref": "#/$defs/Point"}
    assert schema["properties"]["mode"] == {"enum": ["fast", "slow"]}
    assert set(schema["$defs"]) == {"Point", "Size", "Filters", "Color"}
    assert schema["$defs"]["Filters"]["required"] == ["owner"]
    arguments = {
        "at": {"x": 1, "y": 2.5},
        "size": {"width": 3, "height": 4},
        "filters": {"owner": "me"},
        "color": "blue",
        "mode": "slow",
    }
    assert text(run(system, place, arguments)) == (
        "Point(x=1.0, y=2.5) Size(width=3, height=4) {'owner': 'me'} <Color.BLUE: 'blue'> 'slow'"
    )


@dataclasses.dataclass
class Item:
    name: str
    quantity: int = 1


@dataclasses.dataclass(frozen=True)
class Tag:
    label: str
    weight: float = 0.5


class Order(msgspec.Struct):
    items: list[Item]
    tags: frozenset[Tag] = frozenset()
    gift: Item | None = None


def test_a_dataclass_built_from_arguments_keeps_the_defaults_it_was_not_sent(
    system: ToolSystem,
) -> None:
    # The conversion builds dataclasses without their __init__; a plain default the model
    # left out must still be part of the instance (vars() and the result both show it).
    @tool
    def echo(order: Order, extra: Item) -> Order:
        assert vars(extra) == {"name": "pen", "quantity": 1}
        assert all("quantity" in vars(item) for item in order.items)
        return order

    arguments = {
        "order": {"items": [{"name": "ink"}], "tags": [{"label": "red"}], "gift": {"name": "a"}},
        "extra": {"name": "pen"},
    }
    result = run(system, echo, arguments)
    assert not result.is_error, text(result)
    assert result.value == {
        "items": [{"name": "ink", "quantity": 1}],
        "tags": [{"label": "red", "weight": 0.5}],
        "gift": {"name": "a", "quantity": 1},
    }


def test_containers_optionals_and_defaults(system: ToolSystem) -> None:
    @tool
    def collect(
        items: list[int],
        weights: dict[str, float],
        label: str | None = None,
        tags: list[str] = [],  # noqa: B006 - each call gets its own copy
        depth: int = 3,
    ) -> list[Any]:
        tags.append("seen")
        return [items, weights, label, tags, depth]

    schema = collect.parameters
    assert schema["required"] == ["items", "weights"]
    assert schema["properties"]["label"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "default": None,
    }
    assert schema["properties"]["weights"] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    first = run(system, collect, {"items": [1, 2], "weights": {"a": 1}})
    assert first.value == [[1, 2], {"a": 1.0}, None, ["seen"], 3]
    second = run(system, collect, {"items": [], "weights": {}, "label": "x", "depth": 0})
    assert second.value == [[], {}, "x", ["seen"], 0]


@dataclasses.dataclass
class Page:
    number: int
    seen: list[str] = dataclasses.field(default_factory=list)


def test_every_call_gets_its_own_copy_of_a_default_and_the_schema_shows_it(
    system: ToolSystem,
) -> None:
    @tool
    def visit(
        tags: list[str] = ["new"],  # noqa: B006 - each call gets its own copy
        place: Point = Point(x=1, y=2),  # noqa: B008 - each call gets its own copy
        page: Page = Page(number=1),  # noqa: B008 - each call gets its own copy
        color: Color = Color.RED,
    ) -> list[Any]:
        tags.append("seen")
        place.x += 1
        page.seen.append("me")
        return [tags, place.x, page.seen, color]

    properties = visit.parameters["properties"]
    # What the model may leave out, it is told the value of; lists included.
    assert properties["tags"]["default"] == ["new"]
    assert properties["place"]["default"] == {"x": 1, "y": 2}
    assert properties["page"]["default"] == {"number": 1, "seen": []}
    assert properties["color"]["default"] == "red"
    for _ in range(2):
        assert run(system, visit, {}).value == [["new", "seen"], 2.0, ["me"], "red"]


def test_nested_and_recursive_shapes(system: ToolSystem) -> None:
    @tool
    def count_nodes(tree: Tree, groups: list[dict[str, list[Point]]]) -> int:
        def size(node: Tree) -> int:
            return 1 + sum(size(child) for child in node.children)

        return size(tree) + sum(len(points) for group in groups for points in group.values())

    tree_schema = count_nodes.parameters["$defs"]["Tree"]
    assert tree_schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    arguments = {
        "tree": {"label": "a", "children": [{"label": "b"}, {"label": "c", "children": []}]},
        "groups": [{"g": [{"x": 0, "y": 0}, {"x": 1, "y": 1}]}],
    }
    assert run(system, count_nodes, arguments).value == 5


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Shelf(msgspec.Struct):
    slots: dict[int, str]


def test_dicts_with_number_keys_take_the_text_keys_json_objects_have(system: ToolSystem) -> None:
    @tool
    def label(
        names: dict[int, str],
        levels: dict[Level, float],
        shelves: list[Shelf],
        plain: dict[str, int],
    ) -> str:
        return f"{names!r} {levels!r} {shelves!r} {plain!r}"

    assert label.parameters["properties"]["names"] == {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"pattern": "^-?(0|[1-9][0-9]*)$"},
    }
    arguments = {
        "names": {"1": "one", "-2": "minus two"},
        "levels": {"2": 0.5},
        "shelves": [{"slots": {"3": "c"}}],
        "plain": {"7": 7},
    }
    assert text(run(system, label, arguments)) == (
        "{1: 'one', -2: 'minus two'} {<Level.HIGH: 2>: 0.5} [Shelf(slots={3: 'c'})] {'7': 7}"
    )
    bad = run(system, label, {**arguments, "names": {"x": "one"}})
    assert text(bad) == (
        "Error: invalid arguments: Expected `int`, got `str` - at `key` in `arguments.names`"
    )
    wrong_level = run(system, label, {**arguments, "levels": {"5": 1.0}})
    assert wrong_level.is_error
    assert "arguments.levels" in text(wrong_level)


INTEGER_KEYS = {"pattern": "^-?(0|[1-9][0-9]*)$"}


class Bin(msgspec.Struct, tag=True):
    counts: dict[int, int]


class Box(msgspec.Struct, tag=True):
    sizes: dict[Level, int]


@dataclasses.dataclass
class Rack:
    shelves: dict[int, Shelf]
    spare: Rack | None = None


class Ledger(TypedDict):
    rows: NotRequired[dict[Literal[1, 2, "total"], float]]


def test_number_keyed_dicts_say_in_their_schema_which_keys_they_take(system: ToolSystem) -> None:
    # JSON keys are text: without propertyNames a dict[int, T] reads as dict[str, T] and the
    # model cannot know "one" will be refused. Every place such a dict can sit says it.
    @tool
    def stock(
        rack: Rack,
        containers: list[Bin | Box],
        ledger: Ledger | None = None,
        grid: dict[int, dict[Annotated[int, msgspec.Meta(ge=0)], bool]] | None = None,
        named: dict[Annotated[str, msgspec.Meta(pattern="^[a-z]+$")], int] | None = None,
    ) -> int:
        return len(rack.shelves)

    params = stock.parameters
    defs = params["$defs"]
    assert defs["Rack"]["properties"]["shelves"]["propertyNames"] == INTEGER_KEYS
    assert defs["Shelf"]["properties"]["slots"]["propertyNames"] == INTEGER_KEYS
    assert defs["Bin"]["properties"]["counts"]["propertyNames"] == INTEGER_KEYS
    assert defs["Box"]["properties"]["sizes"]["propertyNames"] == {"enum": ["1", "2"]}
    assert defs["Ledger"]["properties"]["rows"]["propertyNames"] == {"enum": ["1", "2", "total"]}
    grid = params["properties"]["grid"]["anyOf"][0]
    assert grid["propertyNames"] == INTEGER_KEYS
    assert grid["additionalProperties"]["propertyNames"] == INTEGER_KEYS
    # msgspec's own propertyNames for string keys is kept as it is
    named = params["properties"]["named"]["anyOf"][0]
    assert named["propertyNames"] == {"pattern": "^[a-z]+$"}

    # what the pattern admits is exactly what validation takes
    pattern = re.compile(INTEGER_KEYS["pattern"])
    rack = {"shelves": {}}
    keys = ["0", "7", "-3", "-0", "12345678901234567890", "01", "+1", " 1", "1.0", "1e3", "x", ""]
    for key in keys:
        result = run(system, stock, {"rack": rack, "containers": [], "grid": {key: {}}})
        assert result.is_error is (pattern.fullmatch(key) is None), key
    arguments = {
        "rack": {"shelves": {"1": {"slots": {"2": "b"}}}},
        "containers": [{"type": "Bin", "counts": {"3": 4}}, {"type": "Box", "sizes": {"2": 1}}],
        "ledger": {"rows": {"1": 0.5, "total": 0.5}},
    }
    assert run(system, stock, arguments).value == 1

    # the providers get the keyword as it is; a map stays an open object, which OpenAI's
    # strict mode cannot take whatever its keys, so "auto" leaves the tool non-strict
    schema = {"name": "stock", "description": "", "parameters": params}
    (anthropic,) = to_anthropic_tools([schema])
    assert anthropic["input_schema"]["$defs"]["Rack"] == defs["Rack"]
    (openai,) = to_openai_tools([schema], strict="auto")
    assert "strict" not in openai["function"]
    assert openai["function"]["parameters"]["$defs"]["Bin"] == defs["Bin"]


class Crate(msgspec.Struct):
    labels: frozenset[str]
    slots: dict[int, str] = {}


@dataclasses.dataclass
class Badge:
    ids: set[uuid.UUID]


def test_repeated_items_of_a_set_are_refused_not_dropped(system: ToolSystem) -> None:
    calls: list[Any] = []

    @tool
    def pick(
        numbers: set[int],
        weights: frozenset[float] = frozenset(),
        crates: list[Crate] = [],  # noqa: B006 - each call gets its own copy
        badge: Badge | None = None,
    ) -> str:
        calls.append(numbers)
        return f"{sorted(numbers)} {sorted(weights)} {crates!r} {badge!r}"

    assert pick.parameters["properties"]["numbers"] == {
        "type": "array",
        "items": {"type": "integer"},
        "uniqueItems": True,
    }
    assert text(run(system, pick, {"numbers": [3, 1]})) == "[1, 3] [] [] None"
    u = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    cases = {
        "Expected `array` of unique items, items 0 and 2 are both `1` - at `arguments.numbers`": {
            "numbers": [1, 2, 1]
        },
        # JSON equality: 1 and 1.0 are the same number.
        "Expected `array` of unique items, items 0 and 1 are both `1` - at `arguments.weights`": {
            "numbers": [],
            "weights": [1, 1.0],
        },
        'Expected `array` of unique items, items 1 and 2 are both `"b"` '
        "- at `arguments.crates[1].labels`": {
            "numbers": [],
            "crates": [{"labels": ["a", "b"]}, {"labels": ["a", "b", "b"]}],
        },
        # Distinct as JSON text, one value once converted.
        f'Expected `array` of unique items, items 0 (`"{u}"`) and 1 (`"{u.upper()}"`) convert '
        "to the same value - at `arguments.badge.ids`": {
            "numbers": [],
            "badge": {"ids": [u, u.upper()]},
        },
    }
    for expected, arguments in cases.items():
        result = run(system, pick, arguments)
        assert result.is_error, arguments
        assert text(result) == f"Error: invalid arguments: {expected}"
    assert calls == [{1, 3}]


class Reading(msgspec.Struct):
    values: list[float]
    scale: float | None = None


def test_an_integer_a_float_cannot_hold_exactly_is_refused_not_rounded(system: ToolSystem) -> None:
    calls: list[Any] = []

    @tool
    def measure(
        x: float,
        readings: list[Reading] = [],  # noqa: B006 - each call gets its own copy
        by: dict[str, float] = {},  # noqa: B006
    ) -> str:
        calls.append(x)
        return repr(x)

    exact = [3, 2**53, -(2**53), 2**60, 2**63]  # a float holds each of these exactly
    assert [run(system, measure, {"x": x}).value for x in exact] == [repr(float(x)) for x in exact]
    long_digits = {"x": 0.5, "by": {"9007199254740993": 1234567890123456.5}}
    assert run(system, measure, long_digits).value == "0.5"
    cases = {
        "Expected `number` that a float holds exactly, got `9007199254740993` (a float would "
        "round it to 9007199254740992.0) - at `arguments.x`": {"x": 2**53 + 1},
        "Expected `number` that a float holds exactly, got `18446744073709551615` (a float "
        "would round it to 1.8446744073709552e+19) - at `arguments.x`": {"x": 2**64 - 1},
        "Expected `number` that a float holds exactly, got `9007199254740995` (a float would "
        "round it to 9007199254740996.0) - at `arguments.readings[1].scale`": {
            "x": 1,
            "readings": [{"values": [1, 2.5]}, {"values": [], "scale": 2**53 + 3}],
        },
        "Expected `number` that a float holds exactly, got `9007199254740993` (a float would "
        "round it to 9007199254740992.0) - at `arguments.readings[0].values[2]`": {
            "x": 1,
            "readings": [{"values": [1, 2.5, 2**53 + 1]}],
        },
        "Expected `number` that a float holds exactly, got `9007199254740993` (a float would "
        "round it to 9007199254740992.0) - at `arguments.by.b`": {
            "x": 1,
            "by": {"a": 1, "b": 2**53 + 1},
        },
    }
    for expected, arguments in cases.items():
        result = run(system, measure, arguments)
        assert result.is_error, arguments
        assert text(result) == f"Error: invalid arguments: {expected}"
    assert calls == [*map(float, exact), 0.5]

    @tool
    def place(at: dict[float, str]) -> list[float]:
        return sorted(at)

    keys = {"1": "a", "9007199254740992": "b", "-9007199254740993": "c"}
    assert text(run(system, place, {"at": keys})) == (
        "Error: invalid arguments: Expected object key that a float holds exactly, got "
        "`-9007199254740993` (a float would round it to -9007199254740992.0) - at `arguments.at`"
    )
    assert run(system, place, {"at": {"2.5": "a", "9007199254740992": "b"}}).value == [2.5, 2**53]


class Spot(msgspec.Struct):
    x: int
    y: int


def test_a_wrong_entry_of_a_dict_or_set_is_named_by_its_key_or_index(system: ToolSystem) -> None:
    # msgspec says only ``[...]`` where a dict's key or a set's item is: the model is told
    # which of its entries was wrong.
    @tool
    def place(
        points: dict[str, Spot] = {},  # noqa: B006 - each call gets its own copy
        nested: dict[str, dict[str, int]] = {},  # noqa: B006
        ids: set[int] = set(),  # noqa: B006
        by_id: dict[int, list[int]] = {},  # noqa: B006
        pair: Annotated[dict[str, int], msgspec.Meta(min_length=2)] = {"a": 1, "b": 2},  # noqa: B006
    ) -> str:
        return "placed"

    cases = {
        "Expected `int`, got `str` - at `arguments.points.far.y`": {
            "points": {"near": {"x": 1, "y": 2}, "far": {"x": 3, "y": "4"}}
        },
        'Expected `int`, got `str` - at `arguments.points["two words"].x`': {
            "points": {"two words": {"x": "1", "y": 2}}
        },
        "Expected `int`, got `str` - at `arguments.nested.outer.second`": {
            "nested": {"first": {"a": 1}, "outer": {"first": 1, "second": "2"}}
        },
        "Expected `int`, got `str` - at `arguments.ids[2]`": {"ids": [1, 2, "3"]},
        'Expected `int`, got `str` - at `arguments.by_id["7"][1]`': {"by_id": {"7": [1, "2"]}},
        # No one entry fails alone: the whole dict does.
        "Expected `object` of length >= 2 - at `arguments.pair`": {"pair": {"a": 1}},
    }
    for expected, arguments in cases.items():
        result = run(system, place, arguments)
        assert text(result) == f"Error: invalid arguments: {expected}", arguments


class Mark(msgspec.Struct, frozen=True):
    name: str
    marks: frozenset[int] = frozenset()


def test_repeats_inside_the_items_of_a_set_are_refused_too(system: ToolSystem) -> None:
    @tool
    def group(
        groups: set[frozenset[int]] = set(),  # noqa: B006 - each call gets its own copy
        pairs: frozenset[tuple[int, frozenset[str]]] = frozenset(),
        marked: set[Mark] = set(),  # noqa: B006 - each call gets its own copy
    ) -> list[int]:
        return [len(groups), len(pairs), len(marked)]

    fine = {"groups": [[1, 2], [3]], "pairs": [[1, ["a"]], [1, ["b"]]], "marked": [{"name": "a"}]}
    assert run(system, group, fine).value == [2, 2, 1]
    cases = {
        "Expected `array` of unique items, items 0 and 1 are both `3` - at `arguments.groups[1]`": {
            "groups": [[1, 2], [3, 3]]
        },
        # Distinct arrays, one frozenset: the set would keep one of them.
        "Expected `array` of unique items, items 0 (`[1,2]`) and 1 (`[2,1]`) convert to the "
        "same value - at `arguments.groups`": {"groups": [[1, 2], [2, 1]]},
        'Expected `array` of unique items, items 0 and 2 are both `"a"` '
        "- at `arguments.pairs[1][1]`": {"pairs": [[1, ["a"]], [2, ["a", "b", "a"]]]},
        "Expected `array` of unique items, items 0 and 1 are both `1` "
        "- at `arguments.marked[0].marks`": {"marked": [{"name": "a", "marks": [1, 1]}]},
    }
    for expected, arguments in cases.items():
        result = run(system, group, arguments)
        assert result.is_error, arguments
        assert text(result) == f"Error: invalid arguments: {expected}"


class Drawer(msgspec.Struct):
    # The recursion first: the part that holds a set is met only after it.
    folders: list[Drawer] = []
    labels: set[str] = set()


def test_repeats_are_found_at_any_depth_of_a_recursive_type(system: ToolSystem) -> None:
    @tool
    def count(root: Drawer) -> int:
        return len(root.folders)

    deep = {"folders": [{"folders": [{"labels": ["a"]}, {"labels": ["x", "y", "x"]}]}]}
    result = run(system, count, {"root": deep})
    assert text(result) == (
        'Error: invalid arguments: Expected `array` of unique items, items 0 and 2 are both `"x"` '
        "- at `arguments.root.folders[0].folders[1].labels`"
    )
    assert run(system, count, {"root": {"labels": ["a"], "folders": [{}]}}).value == 1


def test_object_keys_that_convert_to_one_key_are_refused(system: ToolSystem) -> None:
    calls: list[Any] = []

    @tool
    def tally(
        counts: dict[int, str],
        rates: dict[float, int] | None = None,
        levels: dict[Level, int] | None = None,
        crate: Crate | None = None,
    ) -> str:
        calls.append(counts)
        return f"{counts!r} {rates!r} {levels!r} {crate!r}"

    fine = {"counts": {"0": "a", "1": "b"}, "rates": {"1": 1, "1.5": 2}, "levels": {"2": 1}}
    assert text(run(system, tally, fine)) == (
        "{0: 'a', 1: 'b'} {1.0: 1, 1.5: 2} {<Level.HIGH: 2>: 1} None"
    )
    cases = {
        'Expected `object` with distinct keys, keys "0" and "-0" both convert to the key `0` '
        "- at `arguments.counts`": {"counts": {"0": "a", "1": "b", "-0": "c"}},
        'Expected `object` with distinct keys, keys "1" and "1.0" both convert to the key `1.0` '
        "- at `arguments.rates`": {"counts": {}, "rates": {"1": 1, "1.0": 2}},
        'Expected `object` with distinct keys, keys "0" and "-0.0" both convert to the key '
        "`-0.0` - at `arguments.rates`": {"counts": {}, "rates": {"0": 1, "-0.0": 2}},
        'Expected `object` with distinct keys, keys "0" and "-0" both convert to the key `0` '
        "- at `arguments.crate.slots`": {
            "counts": {},
            "crate": {"labels": [], "slots": {"0": "a", "1": "b", "-0": "c"}},
        },
    }
    for expected, arguments in cases.items():
        result = run(system, tally, arguments)
        assert result.is_error, arguments
        assert text(result) == f"Error: invalid arguments: {expected}"
    assert calls == [{0: "a", 1: "b"}]


def test_wrong_types_unknown_and_missing_arguments_fail_before_the_body(
    system: ToolSystem,
) -> None:
    calls: list[Any] = []

    @tool
    def strict(count: int, at: Point) -> None:
        calls.append(count)

    cases = {
        "Expected `int`, got `str` - at `arguments.count`": {"count": "1", "at": {"x": 0, "y": 0}},
        "Expected `int`, got `float` - at `arguments.count`": {
            "count": 1.5,
            "at": {"x": 0, "y": 0},
        },
        "Object missing required field `at`": {"count": 1},
        # The fields named: a key put one level off (``{"x": 0, "y": 0}`` beside ``count``).
        "Object contains unknown field `extra` (its fields are `count`, `at`)": {
            "count": 1,
            "at": {"x": 0, "y": 0},
            "extra": 1,
        },
        "Expected `float`, got `str` - at `arguments.at.y`": {"count": 1, "at": {"x": 0, "y": "0"}},
    }
    for expected, arguments in cases.items():
        result = run(system, strict, arguments)
        assert result.is_error, arguments
        assert text(result) == f"Error: invalid arguments: {expected}"
    assert calls == []


# --- constraints -------------------------------------------------------------------------------


def test_meta_constraints_are_in_the_schema_and_enforced(system: ToolSystem) -> None:
    @tool
    def constrained(
        level: Annotated[int, msgspec.Meta(ge=0, le=10)],
        code: Annotated[str, msgspec.Meta(min_length=2, max_length=4, pattern="^[A-Z]+$")],
        picks: Annotated[list[int], msgspec.Meta(min_length=1, max_length=2)],
    ) -> str:
        return f"{level} {code} {picks}"

    properties = constrained.parameters["properties"]
    assert properties["level"] == {"type": "integer", "minimum": 0, "maximum": 10}
    assert properties["code"] == {
        "type": "string",
        "minLength": 2,
        "maxLength": 4,
        "pattern": "^[A-Z]+$",
    }
    assert properties["picks"] == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": 2,
    }
    good = {"level": 10, "code": "AB", "picks": [1]}
    assert text(run(system, constrained, good)) == "10 AB [1]"
    failures = [
        ({**good, "level": 11}, "Expected `int` <= 10 - at `arguments.level`"),
        ({**good, "level": -1}, "Expected `int` >= 0 - at `arguments.level`"),
        ({**good, "code": "A"}, "Expected `str` of length >= 2 - at `arguments.code`"),
        ({**good, "code": "ABCDE"}, "Expected `str` of length <= 4 - at `arguments.code`"),
        ({**good, "code": "ab"}, "Expected `str` matching regex '^[A-Z]+$' - at `arguments.code`"),
        ({**good, "picks": []}, "Expected `array` of length >= 1 - at `arguments.picks`"),
        ({**good, "picks": [1, 2, 3]}, "Expected `array` of length <= 2 - at `arguments.picks`"),
    ]
    for arguments, message in failures:
        assert text(run(system, constrained, arguments)) == f"Error: invalid arguments: {message}"


# --- docstrings --------------------------------------------------------------------------------


def google(path: str, limit: int = 10) -> str:
    """Read a file.

    Returns at most ``limit`` lines.

    Args:
        path: Absolute path of the file.
        limit: Maximum number of lines.

    Returns:
        The lines, joined.
    """
    return path


def numpy(path: str, limit: int = 10) -> str:
    """Read a file.

    Returns at most ``limit`` lines.

    Parameters
    ----------
    path : str
        Absolute path of the file.
    limit : int
        Maximum number of lines.

    Returns
    -------
    str
        The lines, joined.
    """
    return path


def sphinx(path: str, limit: int = 10) -> str:
    """Read a file.

    Returns at most ``limit`` lines.

    :param path: Absolute path of the file.
    :param limit: Maximum number of lines.
    :returns: The lines, joined.
    """
    return path


@pytest.mark.parametrize("function", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_docstring_styles_give_the_descriptions(function: Any) -> None:
    definition = tool(function)
    assert definition.description == "Read a file.\n\nReturns at most ``limit`` lines."
    properties = definition.parameters["properties"]
    assert properties["path"] == {"description": "Absolute path of the file.", "type": "string"}
    assert properties["limit"]["description"] == "Maximum number of lines."
    assert definition.output.schema == {"type": "string", "description": "The lines, joined."}


def google_with_examples(path: str) -> str:
    """Read a file.

    Args:
        path: Absolute path of the file.

    Returns:
        The lines, joined.

    Raises:
        OSError: The file cannot be read.

    Example:
        read({"path": "/etc/hosts"})

    Note:
        Slow on network mounts.
    """
    return path


def numpy_with_examples(path: str) -> str:
    """Read a file.

    Parameters
    ----------
    path : str
        Absolute path of the file.

    Returns
    -------
    str
        The lines, joined.

    Examples
    --------
    >>> read({"path": "/etc/hosts"})

    Notes
    -----
    Slow on network mounts.
    """
    return path


def test_a_docstrings_examples_and_notes_reach_the_description() -> None:
    # The parser kept only the summary and the body: a call's example and a note on how the
    # tool behaves, what a model reads a description for, never reached it.
    assert tool(google_with_examples).description == (
        "Read a file.\n\n"
        'Example:\n    read({"path": "/etc/hosts"})\n\n'
        "Note:\n    Slow on network mounts."
    )
    assert tool(numpy_with_examples).description == (
        "Read a file.\n\n"
        'Examples\n--------\n>>> read({"path": "/etc/hosts"})\n\n'
        "Notes\n-----\nSlow on network mounts."
    )
    for function in (google_with_examples, numpy_with_examples):
        definition = tool(function)
        # The sections the parser reads stay where they were.
        path = definition.parameters["properties"]["path"]
        assert path["description"] == "Absolute path of the file."
        assert definition.output.schema["description"] == "The lines, joined."


def test_a_note_in_the_body_is_shown_once_and_other_sections_stay_out() -> None:
    @tool
    def read(path: str) -> str:
        """Read a file.

        Note:
            Before the arguments, part of the body.

        Args:
            path: Absolute path of the file.

        Todo:
            Not for the model.

        Examples:
            One call::

                read({"path": "/a"})
        """
        return path

    assert read.description == (
        "Read a file.\n\nNote:\n    Before the arguments, part of the body.\n\n"
        'Examples:\n    One call::\n\n        read({"path": "/a"})'
    )


def test_a_text_in_annotated_describes_its_parameter() -> None:
    @tool
    def find(
        query: Annotated[str, "What to look for."],
        limit: Annotated[int, msgspec.Meta(ge=1), "How many at most."] = 5,
        scope: Annotated[str, "Where.", msgspec.Meta(description="The scope.")] = "all",
        exact: Annotated[bool, "Match the whole word."] = False,
        after: Annotated[int, msgspec.Meta(ge=0), "Skip this many."] | None = None,
    ) -> str:
        """Find things.

        Args:
            exact: Ignored: the annotation says it.
        """
        return query

    properties = find.parameters["properties"]
    assert properties["query"] == {"description": "What to look for.", "type": "string"}
    assert properties["limit"] == {
        "description": "How many at most.",
        "type": "integer",
        "minimum": 1,
        "default": 5,
    }
    assert properties["scope"]["description"] == "The scope."
    assert properties["exact"]["description"] == "Match the whole word."
    # On the property, not on one branch of its union.
    assert properties["after"] == {
        "description": "Skip this many.",
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
        "default": None,
    }


def test_a_meta_description_in_an_optional_parameter_wins_over_the_docstring() -> None:
    @tool
    def page(
        after: Annotated[int, msgspec.Meta(ge=0, description="Skip this many.")] | None = None,
        limit: Annotated[int, msgspec.Meta(description="At most."), "Ignored text."] | None = None,
    ) -> str:
        """Page through results.

        Args:
            after: Ignored: the annotation says it.
            limit: Ignored too.
        """
        return ""

    properties = page.parameters["properties"]
    # On the property, where the model reads a parameter's description, as for a plain one.
    assert properties["after"] == {
        "description": "Skip this many.",
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
        "default": None,
    }
    assert properties["limit"] == {
        "description": "At most.",
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "default": None,
    }


def test_explicit_name_and_description_win_over_the_function() -> None:
    @tool(name="fs.read", description="Reads.")
    def read(path: str) -> str:
        """Something else."""
        return path

    assert (read.name, read.description) == ("fs.read", "Reads.")


# --- run context, async, output ----------------------------------------------------------------


def test_a_run_context_parameter_receives_the_context_and_is_not_in_the_schema(
    system: ToolSystem,
) -> None:
    @tool
    def who(ctx: ToolRunContext, word: str, *, loud: bool = False) -> str:
        aborted = ctx.signal.aborted
        text = f"{ctx.call_id}:{ctx.name}:{word}:{aborted}"
        return text.upper() if loud else text

    assert list(who.parameters["properties"]) == ["word", "loud"]
    assert text(run(system, who, {"word": "hi", "loud": True})) == "C1:WHO:HI:FALSE"

    @tool
    def maybe(word: str, context: ToolRunContext | None = None) -> str:
        return f"{word}:{context is not None and context.call_id}"

    assert list(maybe.parameters["properties"]) == ["word"]
    assert text(run(system, maybe, {"word": "hi"})) == "hi:c1"


def test_async_functions_are_async_tools(system: ToolSystem) -> None:
    @tool(concurrency_safe=True, timeout_ms=500)
    async def total(numbers: list[int], ctx: ToolRunContext) -> Summary:
        return Summary(count=sum(numbers), names=[ctx.call_id])

    assert total.timeout_ms == 500
    assert total.is_concurrency_safe is not None and total.is_concurrency_safe({}) is True
    assert total.output.schema == {
        "type": "object",
        "title": "Summary",
        "properties": {
            "count": {"type": "integer"},
            "names": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["count", "names"],
    }
    result = run(system, total, {"numbers": [1, 2, 3]})
    assert result.value == {"count": 6, "names": ["c1"]}
    assert text(result) == '{"count":6,"names":["c1"]}'


def test_output_schemas_stay_in_the_checked_subset() -> None:
    @tool
    def maybe(flag: bool) -> int | str | None:
        return 1 if flag else None

    @tool
    def tree(label: str) -> Tree:
        return Tree(label)

    @tool
    def anything(x: int):  # type: ignore[no-untyped-def]
        return x

    assert maybe.output.schema == {
        "oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]
    }
    for definition in (maybe, tree, anything):
        assert_supported_json_schema(definition.output.schema)
    children = tree.output.schema["properties"]["children"]
    assert children["items"] == {}  # where the shape recurs, any value
    assert anything.output.schema == {}


def test_the_output_contract_checks_the_returned_value(system: ToolSystem) -> None:
    @tool
    def liar(x: int) -> int:
        return "not a number"  # type: ignore[return-value]

    result = run(system, liar, {"x": 1})
    assert result.is_error
    assert '"value" must be an integer' in text(result)


class Pin(msgspec.Struct, frozen=True, eq=False):
    x: int


def test_a_set_the_annotation_allows_is_valid_output_though_alike_as_json(
    system: ToolSystem,
) -> None:
    # A set keeps items apart by Python equality: two eq=False Structs that look alike are two
    # items. The return annotation allows the value, so its output schema must not refuse it.
    @tool
    def pins() -> set[Pin]:
        return {Pin(1), Pin(1)}

    assert "uniqueItems" not in pins.output.schema
    result = run(system, pins, {})
    assert not result.is_error, text(result)
    assert text(result) == '[{"x":1},{"x":1}]'


def nested_lists(depth: int, innermost: Any = None) -> list[Any]:
    """``[[[...]]]``, ``depth`` lists inside the outer one, ``innermost`` in the last if given."""
    outer: list[Any] = []
    current = outer
    for _ in range(depth):
        inner: list[Any] = []
        current.append(inner)
        current = inner
    if innermost is not None:
        current.append(innermost)
    return outer


def invalid_output(name: str, detail: str) -> dict[str, Any]:
    message = f'tool "{name}" returned invalid output: value is not lossless JSON: {detail}'
    return {
        "content": [{"type": "text", "text": f"Error: {message}"}],
        "is_error": True,
        "error": {
            "message": message,
            "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"},
        },
    }


@dataclasses.dataclass
class Folder:
    entries: list[Any]


def test_a_value_that_contains_itself_is_invalid_output_naming_where(system: ToolSystem) -> None:
    # As from a define_tool body, never msgspec's RecursionError.
    loop: list[Any] = []
    loop.append(loop)
    root = Tree("root")
    root.children.append(Tree("child", [root]))
    folder = Folder([])
    folder.entries.append({"self": folder})

    @tool
    def cyclic() -> list[Any]:
        return loop

    @tool
    def in_a_tuple() -> tuple[Any, ...]:
        return ("first", loop)

    @tool
    def tree() -> Tree:
        return root

    @tool
    def folders() -> Folder:
        return folder

    for definition, detail in [
        (cyclic, "value[0] is cycle"),
        (in_a_tuple, "value[1][0] is cycle"),
        (tree, "value.children[0].children[0] is cycle"),
        (folders, "value.entries[0].self is cycle"),
    ]:
        result = run(system, definition, {})
        assert result.to_dict() == invalid_output(definition.name, detail)
        assert result.exception_type == "dsh_tools.ToolOutputError"


def test_invalid_output_names_the_tool_as_it_is_registered(system: ToolSystem) -> None:
    # The same tool offered under another name (an alias for one agent, say): its errors name
    # what the model called, not the function's name.
    loop: list[Any] = []
    loop.append(loop)

    @tool
    def cyclic() -> list[Any]:
        return loop

    alias = msgspec.structs.replace(cyclic, name="fs.cyclic")
    result = run(system, alias, {})
    assert result.to_dict() == invalid_output("fs.cyclic", "value[0] is cycle")


def test_a_plain_value_nested_deeper_than_msgspec_converts_is_kept_as_from_define_tool(
    system: ToolSystem,
) -> None:
    deep = nested_lists(100_000)

    @tool
    def deep_lists() -> list[Any]:
        return deep

    result = run(system, deep_lists, {})
    assert not result.is_error
    assert text(result) == "[" * 100_001 + "]" * 100_001


def test_a_deep_value_that_is_not_json_is_invalid_output(system: ToolSystem) -> None:
    with_nan = nested_lists(3_000, float("nan"))
    chain = Tree("0")
    link = chain
    for depth in range(1, 5_000):
        link.children.append(Tree(str(depth)))
        link = link.children[0]

    @tool
    def deep_nan() -> list[Any]:
        return with_nan

    @tool
    def deep_tree() -> Tree:
        return chain

    assert run(system, deep_nan, {}).to_dict() == invalid_output(
        "deep_nan", "value" + "[0]" * 3_001 + " is float (NaN)"
    )
    assert run(system, deep_tree, {}).to_dict() == invalid_output(
        "deep_tree", "value is nested too deep to convert"
    )


def test_render_overrides_the_default_text(system: ToolSystem) -> None:
    @tool(render=lambda args, value: [{"type": "text", "text": f"{args['city']}: {value} C"}])
    def weather(city: str) -> float:
        return 3.5

    assert text(run(system, weather, {"city": "Oslo"})) == "Oslo: 3.5 C"


def test_other_keywords_reach_the_definition(system: ToolSystem) -> None:
    @tool(present_call=lambda args: {"kind": "generic", "title": f"echo {args['word']}"})
    def echo(word: str) -> str:
        return word

    assert echo.present_call is not None
    assert echo.present_call({"word": "x"}) == {"kind": "generic", "title": "echo x"}
    with pytest.raises(
        TypeError,
        match=r"^@tool\(.*shout\) got an unexpected keyword argument 'colour'\. Its keywords: "
        r"name, description, concurrency_safe, timeout_ms, render, finalize_content, "
        r"present_call, present_result, placement$",
    ):

        @tool(colour="red")
        def shout(word: str) -> str:
            return word


def test_a_misspelt_option_names_the_one_most_likely_meant() -> None:
    with pytest.raises(
        TypeError,
        match=r"^@tool\(.*slow\) got an unexpected keyword argument 'timout_ms'\. "
        r"Did you mean 'timeout_ms'\?$",
    ):

        @tool(timout_ms=500)
        def slow(word: str) -> str:
            return word


class Brush(enum.IntEnum):
    SMALL = 1
    LARGE = 2


@dataclasses.dataclass
class Layer:
    color: Color
    blend: Literal["normal", "multiply"] = "normal"


def test_a_value_outside_an_enum_is_refused_naming_the_values_it_may_take(
    system: ToolSystem,
) -> None:
    # msgspec says which value it refused, not which it takes: a model that wrote "Red" for an
    # Enum had to guess again (a define_tool tool's message lists them).
    @tool
    def paint(
        color: Color,
        layers: list[Layer] | None = None,
        sizes: dict[Brush, str] | None = None,
    ) -> str:
        return color.value

    assert text(run(system, paint, {"color": "Red"})) == (
        "Error: invalid arguments: Invalid enum value 'Red' "
        '(expected one of "red", "blue") - at `arguments.color`'
    )
    layers = {"color": "red", "layers": [{"color": "blue", "blend": "screen"}]}
    assert text(run(system, paint, layers)) == (
        "Error: invalid arguments: Invalid enum value 'screen' "
        '(expected one of "multiply", "normal") - at `arguments.layers[0].blend`'
    )
    sizes = {"color": "red", "sizes": {"3": "huge"}}
    assert text(run(system, paint, sizes)) == (
        'Error: invalid arguments: Invalid enum value 3 (expected one of "1", "2") '
        "- at `key` in `arguments.sizes`"
    )


def test_a_member_name_sent_for_an_int_enum_is_refused_naming_its_values_and_names(
    system: ToolSystem,
) -> None:
    # The declarations show an IntEnum as Literal[1, 2]; a model that sent the name "LARGE"
    # read only "Expected `int`, got `str`", with neither the values nor which name is which.
    @tool
    def brush(size: Brush, blend: Literal["normal", "multiply"] = "normal") -> int:
        return int(size)

    assert text(run(system, brush, {"size": "LARGE"})) == (
        "Error: invalid arguments: Expected `int`, got `str` (expected one of 1 (SMALL),"
        " 2 (LARGE)) - at `arguments.size`"
    )
    assert text(run(system, brush, {"size": 1, "blend": 2})) == (
        "Error: invalid arguments: Expected `str`, got `int` (expected one of"
        ' "multiply", "normal") - at `arguments.blend`'
    )


def test_an_unknown_field_of_a_nested_object_names_that_objects_fields(
    system: ToolSystem,
) -> None:
    class Strict(msgspec.Struct, forbid_unknown_fields=True):
        street: str
        city: str

    @tool
    def ship(to: Strict) -> str:
        return to.city

    assert text(run(system, ship, {"to": {"street": "a", "town": "b"}})) == (
        "Error: invalid arguments: Object contains unknown field `town` (its fields are"
        " `street`, `city`) - at `arguments.to`"
    )


# --- what a body returns ------------------------------------------------------------------------


class Connection:
    """Not JSON data."""


def test_a_body_returning_an_object_that_is_not_json_fails_naming_where_it_is(
    system: ToolSystem,
) -> None:
    # The call failed as "Error: ", a NotImplementedError without a word, where a define_tool
    # body's value names what and where.
    @tool
    def connect(host: str) -> dict[str, Any]:
        return {"host": host, "pool": [Connection()]}

    result = run(system, connect, {"host": "db"})
    assert result.is_error
    assert text(result) == (
        'Error: tool "connect" returned invalid output: value is not lossless JSON: '
        "value.pool[0] is Connection"
    )
    assert result.to_dict()["error"]["info"]["code"] == "INVALID_TOOL_OUTPUT"


def logged(fn: Any) -> Any:
    """A decorator as many are written: a plain wrapper, whatever ``fn`` is."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@dataclasses.dataclass
class Fetched:
    url: str
    size: tuple[int, int]


def test_an_async_function_under_a_plain_decorator_is_awaited(system: ToolSystem) -> None:
    # Its coroutine was taken for the value and the call failed as "Error: ".
    @tool
    @logged
    async def fetch(url: str, width: int = 640) -> Fetched:
        """Fetch a page."""
        await asyncio.sleep(0)
        return Fetched(url, (width, 480))

    assert fetch.description == "Fetch a page."
    result = run(system, fetch, {"url": "a.b"})
    assert not result.is_error, result.content
    assert result.value == {"url": "a.b", "size": [640, 480]}


# --- strict-mode nulls -------------------------------------------------------------------------


def test_a_null_for_an_optional_parameter_means_absent(system: ToolSystem) -> None:
    @tool
    def greet(name: str, greeting: str = "hello", nickname: str | None = "bob") -> str:
        return f"{greeting} {name} {nickname}"

    arguments = {"name": "ann", "greeting": None, "nickname": None}
    assert text(run(system, greet, arguments)) == "hello ann None"
    assert run(system, greet, {"name": None}).is_error


def test_a_null_for_an_optional_parameter_is_absent_for_the_renderer_and_presenters() -> None:
    # A strict-mode model sends null for the limit it leaves out; the body got the default,
    # but the renderer read None and showed the model "None results".
    seen: list[tuple[str, dict[str, Any]]] = []

    def note(role: str, args: Any) -> None:
        seen.append((role, dict(args)))

    @tool(
        concurrency_safe=lambda args: note("classifier", args) or True,
        render=lambda args, value: (
            note("render", args) or [{"type": "text", "text": f"{args.get('limit', 10)} results"}]
        ),
        present_call=lambda args: note("present_call", args),
        present_result=lambda args, result: note("present_result", args),
    )
    def search(query: str, limit: int = 10) -> int:
        return limit

    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(search)
        model_sent = '{"query": "cats", "limit": null}'
        batch = ExecuteBatch(calls=[ToolCall("c1", "search", model_sent)])
        assert text(system.execute_batch(batch).results[0]) == "10 results"
        # A UI's cards of the call, from the session log, which keeps what the model sent.
        [logged] = [event.data for event in system.session.events if event.type == "tool/result"]
    present_call_view(search, "search", {"query": "cats", "limit": None})
    present_result_view(search, {"query": "cats", "limit": None}, ToolResult.from_event(logged))
    assert {role for role, _ in seen} == {
        "classifier",
        "render",
        "present_call",
        "present_result",
    }
    assert all(args == {"query": "cats"} for _, args in seen), seen


class Branch(msgspec.Struct):
    name: str
    children: list[Branch] = []
    weight: float = 1.0


def test_a_null_for_an_optional_field_means_absent_at_any_depth_of_a_recursive_type(
    system: ToolSystem,
) -> None:
    @tool
    def count(tree: Branch) -> int:
        return 1 + sum(count_all(child) for child in tree.children)

    def count_all(branch: Branch) -> int:
        assert branch.weight == 1.0
        return 1 + sum(count_all(child) for child in branch.children)

    deep = {"name": "c", "children": None, "weight": None}
    tree = {"name": "a", "weight": None, "children": [{"name": "b", "children": [deep]}]}
    assert text(run(system, count, {"tree": tree})) == "3"


class Number(msgspec.Struct, tag="num"):
    value: float
    label: str = ""


class Sum(msgspec.Struct, tag="add"):
    left: Number | Sum
    right: Number | Sum
    label: str = ""


def test_a_null_for_an_optional_field_means_absent_in_a_recursive_union(
    system: ToolSystem,
) -> None:
    @tool
    def evaluate(expression: Number | Sum) -> float:
        def value(node: Number | Sum) -> float:
            assert node.label == ""
            return node.value if isinstance(node, Number) else value(node.left) + value(node.right)

        return value(expression)

    def number(value: int) -> dict[str, Any]:
        return {"type": "num", "value": value, "label": None}

    inner = {"type": "add", "label": None, "left": number(2), "right": number(3)}
    expression = {"type": "add", "label": None, "left": number(1), "right": inner}
    assert run(system, evaluate, {"expression": expression}).value == 6


# --- definition-time errors --------------------------------------------------------------------


class NotJson:
    pass


def missing(path) -> str:  # type: ignore[no-untyped-def]
    return str(path)


def unsupported(value: NotJson) -> str:
    return ""


def reserved(_secret: str) -> str:
    return _secret


def variadic(*paths: str) -> str:
    return ""


def bad_return(x: int) -> NotJson:
    return NotJson()


def none_default(limit: int = None) -> int:  # type: ignore[assignment]  # noqa: RUF013
    return limit


def outside_default(level: Annotated[int, msgspec.Meta(ge=0)] = -1) -> int:
    return level


def struct_default(at: Point = Point(x=0, y="0")) -> str:  # type: ignore[arg-type]  # noqa: B008
    return ""


def infinite_default(limit: float = float("inf")) -> str:
    return ""


def object_default(pool: Any = Connection()) -> str:  # noqa: B008
    return ""


class Toolbox:
    def search(self, query: str) -> str:
        return query


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (
            Toolbox.search,
            r"@tool\(Toolbox.search\): parameter 'self' has no type annotation \(for a method, "
            r"build the tool from the bound method: tool\(instance.method\)\)$",
        ),
        (
            none_default,
            r"@tool\(none_default\): parameter 'limit' has a default None that its annotation "
            r"refuses: Expected `int`, got `null`$",
        ),
        (
            outside_default,
            r"@tool\(outside_default\): parameter 'level' has a default -1 that its annotation "
            r"refuses: Expected `int` >= 0$",
        ),
        (
            struct_default,
            r"@tool\(struct_default\): parameter 'at' has a default .* that its annotation "
            r"refuses: Expected `float`, got `str` - at `default.y`$",
        ),
        (
            # A float allows infinity; JSON does not (it would be written null).
            infinite_default,
            r"@tool\(infinite_default\): a default or constraint is not JSON data: "
            r"parameters.properties.limit.default is float \(inf\)$",
        ),
        (
            # It raised a bare NotImplementedError, naming neither the function nor the parameter.
            object_default,
            r"@tool\(object_default\): cannot build the parameters: parameter 'pool' has a "
            r"default .*Connection object.* that is not JSON data: Encoding objects of type "
            r"Connection is unsupported$",
        ),
        (missing, r"@tool\(missing\): parameter 'path' has no type annotation"),
        (
            unsupported,
            r"@tool\(unsupported\): parameter 'value' has an unsupported annotation .* is not "
            r"supported \(a tool's types are JSON values, msgspec Structs, dataclasses, .*\)$",
        ),
        (reserved, r"@tool\(reserved\): parameter '_secret' uses a reserved name"),
        (variadic, r"@tool\(variadic\): parameter 'paths' is variadic"),
        (bad_return, r"@tool\(bad_return\): the return annotation has an unsupported annotation"),
    ],
)
def test_definition_errors_name_the_function(function: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tool(function)


def test_options_are_checked_at_definition() -> None:
    def body(x: int) -> int:
        return x

    with pytest.raises(ValueError, match=r"@tool\(.*body\): timeout_ms"):
        tool(timeout_ms=0)(body)
    with pytest.raises(ValueError, match=r"@tool\(.*body\): timeout_ms must be a positive finite"):
        tool(timeout_ms=10**400)(body)
    # A wrong type is a TypeError, as define_tool(timeout_ms="500") says it.
    with pytest.raises(TypeError, match=r"@tool\(.*body\): timeout_ms must be a positive finite"):
        tool(timeout_ms="500")(body)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"@tool\(.*body\): name must be a non-empty str, got ''$"):
        tool(name="")(body)
    with pytest.raises(
        TypeError, match=r"@tool\(.*body\): name must be a non-empty str .* got int$"
    ):
        tool(name=3)(body)
    with pytest.raises(TypeError, match="decorates a function"):
        tool(Point)


def test_options_that_could_never_be_called_or_sent_are_refused_at_definition() -> None:
    # Not once every call fails, or once register() refuses the definition.
    def body(x: int) -> int:
        """Double it."""
        return x

    def unprintable(x: int) -> int:
        return x

    # Set, not written as a docstring: Python 3.13 cannot compile a docstring that holds one.
    unprintable.__doc__ = "Double \udc80 it."

    refusals: list[tuple[Any, str]] = [
        (lambda: tool(render=lambda value: [])(body), "render must accept two positional"),
        (lambda: tool(concurrency_safe=lambda: True)(body), "concurrency_safe must accept one"),
        (lambda: tool(present_call=lambda a, b: None)(body), "present_call must accept one"),
        (lambda: tool(finalize_content=lambda r: None)(body), "finalize_content must accept two"),
    ]
    for define, message in refusals:
        with pytest.raises(TypeError, match=r"^@tool\(.*body\): " + message):
            define()
    with pytest.raises(ValueError, match=r"^@tool\(.*body\): name 'b\\ud800' holds a lone"):
        tool(name="b\ud800")(body)
    with pytest.raises(ValueError, match=r"^@tool\(.*unprintable\): description holds a lone"):
        tool(unprintable)


def test_define_tool_keywords_that_tool_spells_otherwise_say_how() -> None:
    def body(x: int) -> int:
        return x

    cases = {
        "is_concurrency_safe": "concurrency_safe=",
        "output": "render=",
        "parameters": "signature",
        "execute": "function",
    }
    for keyword, hint in cases.items():
        with pytest.raises(TypeError) as info:
            tool(body, **{keyword: lambda args: True})
        message = str(info.value)
        assert message.startswith(f"@tool({body.__qualname__}): {keyword} ")
        assert hint in message
        assert "multiple values" not in message


@pytest.mark.parametrize("keyword", ["finalize_content", "present_call", "present_result"])
def test_a_presenter_or_finalizer_that_is_not_callable_is_refused_at_definition(
    keyword: str,
) -> None:
    def body(x: int) -> int:
        return x

    with pytest.raises(TypeError, match=rf"^@tool\(.*body\): {keyword} must be callable or None$"):
        tool(body, **{keyword: "not a function"})


# --- other callables ---------------------------------------------------------------------------


def repeat(times: int, word: str) -> str:
    return word * times


class Counter:
    """Count up."""

    def __init__(self) -> None:
        self.total = 0

    async def __call__(self, step: int) -> int:
        self.total += step
        return self.total


def test_partials_and_callable_objects_are_tools(system: ToolSystem) -> None:
    import functools

    echo_twice = tool(name="twice")(functools.partial(repeat, 2))
    assert list(echo_twice.parameters["properties"]) == ["word"]
    assert run(system, echo_twice, {"word": "ab"}).value == "abab"

    counter = tool(name="count")(Counter())
    assert counter.description == "Count up."
    assert run(system, counter, {"step": 2}).value == 2
    assert run(system, counter, {"step": 3}).value == 5

    with pytest.raises(TypeError, match="pass name= for a callable without __name__"):
        tool(functools.partial(repeat, 2))


def search_base(query: str, limit: int) -> str:
    """Search the index.

    Args:
        query: What to look for.
        limit: How many at most.
    """
    return query * limit


class Finder:
    def __call__(self, query: str) -> str:
        """Find a word.

        Args:
            query: The word.
        """
        return query


def test_a_partial_or_callable_object_is_described_by_the_function_it_calls() -> None:
    import functools

    searched = tool(name="search")(functools.partial(search_base, limit=3))
    # The wrapped function's docstring, not the one of functools.partial itself.
    assert searched.description == "Search the index."
    assert searched.parameters["properties"]["query"]["description"] == "What to look for."
    assert searched.parameters["properties"]["limit"]["description"] == "How many at most."

    found = tool(name="find")(Finder())
    assert found.description == "Find a word."
    assert found.parameters["properties"]["query"]["description"] == "The word."
    # A class docstring, when there is one, still describes the tool.
    assert tool(name="count")(Counter()).description == "Count up."


def test_a_static_method_decorated_in_its_class_body_is_a_tool(system: ToolSystem) -> None:
    class Toolbox:
        @tool
        @staticmethod
        def shout(word: str, times: int = 1) -> str:
            """Shout a word."""
            return word.upper() * times

    assert Toolbox.shout.description == "Shout a word."
    assert run(system, Toolbox.shout, {"word": "hi", "times": 2}).value == "HIHI"

    with pytest.raises(TypeError, match=r"@tool\(.*pick\): a classmethod .* tool\(Owner\.pick\)"):

        class Owner:
            @tool
            @classmethod
            def pick(cls, word: str) -> str:
                return word


def test_string_annotations_may_name_classes_local_to_the_defining_function(
    system: ToolSystem,
) -> None:
    class Local(msgspec.Struct):
        value: int

    @tool
    def bare(item: Local) -> int:
        return item.value

    @tool(name="configured")
    def configured(item: Local) -> int:
        return item.value * 2

    assert run(system, bare, {"item": {"value": 2}}).value == 2
    assert run(system, configured, {"item": {"value": 2}}).value == 4

    with pytest.raises(TypeError, match=r"cannot resolve the type annotations: name 'Nowhere'"):

        @tool
        def broken(item: Nowhere) -> int:  # type: ignore[name-defined]  # noqa: F821
            return 0


class Span(msgspec.Struct):
    bounds: tuple[int, int]


def test_tuples_in_the_return_type_come_back_as_the_arrays_their_schema_declares(
    system: ToolSystem,
) -> None:
    @tool
    def pair() -> tuple[int, str]:
        """A pair."""
        return 1, "a"

    @tool
    def pairs() -> list[tuple[int, int]]:
        """Pairs."""
        return [(1, 2), (3, 4)]

    @tool
    def span() -> Span:
        """A span."""
        return Span((2, 5))

    assert run(system, pair, {}).value == [1, "a"]
    assert run(system, pairs, {}).value == [[1, 2], [3, 4]]
    assert run(system, span, {}).value == {"bounds": [2, 5]}


@dataclasses.dataclass
class Window:
    bounds: tuple[int, int] = (0, 10)


def test_a_tuple_default_is_shown_as_the_array_it_is(system: ToolSystem) -> None:
    # A tuple is the natural default of a tuple parameter (a mutable list would be shared);
    # the schema shows the model a JSON array for it, in a nested dataclass too.
    @tool
    def crop(
        size: tuple[int, int] = (640, 480),
        path: tuple[str, ...] = (),
        window: Window = Window(),  # noqa: B008 - each call gets its own copy
    ) -> Window:
        """Crop."""
        return Window((size[0], len(path)))

    properties = crop.parameters["properties"]
    assert properties["size"]["default"] == [640, 480]
    assert properties["path"]["default"] == []
    assert properties["window"]["default"] == {"bounds": [0, 10]}
    assert crop.parameters["$defs"]["Window"]["properties"]["bounds"]["default"] == [0, 10]
    assert crop.output.schema["properties"]["bounds"]["default"] == [0, 10]
    assert run(system, crop, {}).value == {"bounds": [640, 0]}


def test_a_parameter_defaulting_to_unset_is_optional_and_its_absence_reaches_the_body(
    system: ToolSystem,
) -> None:
    # As a Struct's field: UNSET is no value the model could send, but "not given".
    @tool
    def page(cursor: str | msgspec.UnsetType = msgspec.UNSET) -> str:
        """Read a page."""
        return "first page" if cursor is msgspec.UNSET else f"after {cursor}"

    assert page.parameters["properties"]["cursor"] == {"type": "string"}
    assert "required" not in page.parameters
    assert text(run(system, page, {})) == "first page"
    assert text(run(system, page, {"cursor": None})) == "first page"  # strict mode's "absent"
    assert text(run(system, page, {"cursor": "c7"})) == "after c7"
    schema = {"name": "page", "description": page.description, "parameters": page.parameters}
    (exported,) = to_openai_tools([schema], strict=True)
    assert exported["function"]["parameters"]["properties"]["cursor"]["type"] == [
        "string",
        "null",
    ]
