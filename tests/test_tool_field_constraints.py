"""@tool parameters constrained as pydantic users write them (``Annotated[int, Field(ge=1)]``,
``annotated_types.MaxLen(3)``, ``n: int = Field(default=3, ge=1)``): each constraint reaches the
schema and holds for every call, and one that cannot hold is refused at definition, never
dropped without a word."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Annotated, Any

import annotated_types
import pytest
from pydantic import Field

from dsh_tools import ExecuteCall, ToolSystem, tool
from dsh_tools.registry import thaw


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(code_runtime=None) as started:
        yield started


def _call(system: ToolSystem, name: str, arguments: dict[str, Any]) -> Any:
    return system.execute(ExecuteCall(call_id="c1", name=name, arguments=arguments))


@tool
def pick(
    count: Annotated[int, Field(ge=1, le=5, description="How many to pick.")],
    word: Annotated[str, Field(min_length=2, pattern="^[a-z]+$")] = "ab",
) -> int:
    """Pick some."""
    return count


@tool
def scores(
    values: list[Annotated[int, annotated_types.Gt(0)]],
    code: Annotated[str, annotated_types.MaxLen(3)] | None = None,
) -> int:
    """Add scores."""
    return sum(values)


def test_a_pydantic_field_in_annotated_reaches_the_schema() -> None:
    properties = thaw(pick.parameters)["properties"]
    assert properties["count"] == {
        "description": "How many to pick.",
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }
    assert properties["word"] == {
        "type": "string",
        "minLength": 2,
        "pattern": "^[a-z]+$",
        "default": "ab",
    }


def test_a_pydantic_field_constraint_holds_for_every_call(system: ToolSystem) -> None:
    system.tools.register(pick)
    assert _call(system, "pick", {"count": 3}).value == 3
    too_many = _call(system, "pick", {"count": 9})
    assert too_many.is_error
    assert too_many.error.message == "invalid arguments: Expected `int` <= 5 - at `arguments.count`"
    shouted = _call(system, "pick", {"count": 1, "word": "AB"})
    assert shouted.is_error
    assert "at `arguments.word`" in shouted.error.message


def test_annotated_types_constraints_hold_inside_a_list_and_an_optional(
    system: ToolSystem,
) -> None:
    properties = thaw(scores.parameters)["properties"]
    assert properties["values"]["items"] == {"type": "integer", "exclusiveMinimum": 0}
    assert {"type": "string", "maxLength": 3} in properties["code"]["anyOf"]
    system.tools.register(scores)
    assert _call(system, "scores", {"values": [1, 2], "code": "abc"}).value == 3
    zero = _call(system, "scores", {"values": [1, 0]})
    assert zero.is_error and zero.error.message.endswith("- at `arguments.values[1]`")
    long = _call(system, "scores", {"values": [1], "code": "abcd"})
    assert long.is_error and long.error.message.endswith("- at `arguments.code`")


def test_a_pydantic_field_as_the_default_gives_its_default_and_its_constraints(
    system: ToolSystem,
) -> None:
    @tool
    def page(size: int = Field(default=10, ge=1, le=100, description="Rows a page.")) -> int:
        """One page."""
        return size

    assert thaw(page.parameters)["properties"]["size"] == {
        "description": "Rows a page.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 10,
    }
    system.tools.register(page)
    assert _call(system, "page", {}).value == 10
    assert _call(system, "page", {"size": 0}).is_error


def test_a_constraint_msgspec_cannot_hold_is_refused_naming_the_parameter() -> None:
    def even(n: Annotated[int, annotated_types.Predicate(lambda n: n % 2 == 0)]) -> int:
        return n

    with pytest.raises(TypeError, match=r"@tool\(.*even\): parameter 'n' has Predicate\("):
        tool(even)


def test_a_field_alias_is_refused_rather_than_dropped() -> None:
    def search(query: Annotated[str, Field(alias="q")]) -> str:
        return query

    with pytest.raises(TypeError, match=r"parameter 'query' .*no equivalent of alias="):
        tool(search)


@dataclasses.dataclass
class Window:
    width: Annotated[int, Field(gt=0)]


def test_a_constraint_on_a_class_field_is_refused_naming_the_field_and_the_meta() -> None:
    def resize(window: Window) -> int:
        return window.width

    with pytest.raises(TypeError) as raised:
        tool(resize)
    message = str(raised.value)
    assert "parameter 'window': field 'width' of Window" in message
    assert "write it as msgspec.Meta(gt=0)" in message


def test_strict_and_finite_settings_every_call_meets_anyway_are_accepted() -> None:
    @tool
    def ratio(value: Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]) -> float:
        """A ratio."""
        return value

    assert thaw(ratio.parameters)["properties"]["value"] == {
        "type": "number",
        "exclusiveMinimum": 0,
    }


def test_a_doc_in_annotated_describes_the_parameter() -> None:
    from typing_extensions import Doc

    @tool
    def find(query: Annotated[str, Doc("What to look for.")]) -> str:
        """Find."""
        return query

    assert thaw(find.parameters)["properties"]["query"] == {
        "description": "What to look for.",
        "type": "string",
    }


@dataclasses.dataclass
class Query:
    text: Annotated[str, Field(description="Asked.")] = ""


def test_a_class_field_constraint_is_refused_even_when_it_only_describes() -> None:
    # Field(description=...) is pydantic's: msgspec would drop it in a class's fields too.
    def ask(query: Query) -> str:
        return query.text

    with pytest.raises(TypeError, match=r"write it as msgspec.Meta\(description='Asked.'\)"):
        tool(ask)


def test_a_field_default_of_none_is_a_default(system: ToolSystem) -> None:
    @tool
    def label(text: str | None = Field(default=None, max_length=8)) -> str:
        """Label."""
        return text or "none"

    schema = thaw(label.parameters)
    assert "required" not in schema
    assert schema["properties"]["text"]["default"] is None
    system.tools.register(label)
    assert _call(system, "label", {}).value == "none"


def test_a_default_inside_annotated_is_refused_for_the_signature_to_give() -> None:
    def label(text: Annotated[str | None, Field(default=None)]) -> str:
        return text or "none"

    with pytest.raises(TypeError, match=r"parameter 'text' .*give the default in the signature"):
        tool(label)


def test_a_field_on_an_optional_parameter_constrains_its_value_and_describes_it(
    system: ToolSystem,
) -> None:
    @tool
    def tag(name: Annotated[str | None, Field(max_length=3, description="Short.")] = None) -> str:
        """Tag."""
        return name or "-"

    assert thaw(tag.parameters)["properties"]["name"] == {
        "description": "Short.",
        "anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}],
        "default": None,
    }
    system.tools.register(tag)
    assert _call(system, "tag", {"name": None}).value == "-"
    assert _call(system, "tag", {"name": "abcd"}).is_error
