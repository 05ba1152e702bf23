"""A ``@tool`` body on a real local Ray instance receives typed values of classes that travel
by value.

The parameter types are defined at this module's top level and the annotations are evaluated
(no ``from __future__ import annotations``), so the classes themselves travel with the body:
this module is pickled by value (see ``ray_support``), as ``__main__`` is for a script. They
are used here first (the local validation), which leaves msgspec's compiled type information
on them; and a ``msgspec.Struct`` class cannot be rebuilt the way cloudpickle rebuilds other
classes.
"""

import base64
import dataclasses
import enum
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Annotated, Any, Literal, TypedDict

import msgspec
import pydantic
import pytest
from ray_support import ray_instance  # noqa: F401  (the session fixture)

from dsh_tools import ExecuteCall, ToolDefinition, ToolSystem, tool
from dsh_tools.distributed import RayPlacement

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_instance")]


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclasses.dataclass
class Box:
    width: Annotated[int, msgspec.Meta(ge=0)]
    mode: Mode = Mode.FAST


class Labels(TypedDict):
    name: str
    box: Box


class Node(msgspec.Struct, kw_only=True, rename="camel"):
    node_value: int
    children: list[int] = []
    # A string annotation naming this module's class: the worker cannot import this module.
    next_node: "Node | None" = None

    def total(self) -> int:
        return self.node_value + (self.next_node.total() if self.next_node else 0)


def describe(
    box: Box,
    mode: Mode,
    labels: Labels,
    node: Node,
    count: Annotated[int, msgspec.Meta(ge=0)],
) -> dict[str, Any]:
    """What the body received, and where it ran."""
    return {
        "pid": os.getpid(),
        "box": [type(box) is Box, box.width, box.mode is Mode.SLOW],
        "mode": mode is Mode.SLOW,
        "labels": [type(labels["box"]) is Box, labels["name"]],
        "node": [type(node) is Node, type(node.next_node) is Node, node.total()],
        "count": count,
    }


def typed_tool(name: str, placement: RayPlacement) -> ToolDefinition:
    return tool(name=name, placement=placement)(describe)


ARGUMENTS = {
    "box": {"width": 2, "mode": "slow"},
    "mode": "slow",
    "labels": {"name": "l", "box": {"width": 3}},
    "node": {"nodeValue": 1, "nextNode": {"nodeValue": 5}},
    "count": 4,
}


@pytest.mark.parametrize(
    "placement",
    [RayPlacement(num_cpus=0.5), RayPlacement(num_cpus=0.5, actor_pool=1)],
    ids=["task", "actor"],
)
def test_a_typed_body_on_ray_receives_instances_of_classes_that_travel_by_value(
    system: ToolSystem, placement: RayPlacement
) -> None:
    system.tools.register(typed_tool("describe", placement))

    result = system.execute(ExecuteCall(call_id="c1", name="describe", arguments=ARGUMENTS))

    assert not result.is_error, result.content
    value = result.value
    assert value["pid"] != os.getpid()
    assert value["box"] == [True, 2, True]
    assert value["mode"] is True
    assert value["labels"] == [True, "l"]
    assert value["node"] == [True, True, 6]
    assert value["count"] == 4

    # The constraints still hold here, before anything is sent.
    bad = system.execute(
        ExecuteCall(call_id="c2", name="describe", arguments={**ARGUMENTS, "count": -1})
    )
    assert bad.error.info.code == "INVALID_ARGS" and "arguments.count" in bad.error.message


def test_a_struct_class_sent_twice_is_one_class_on_the_worker() -> None:
    # cloudpickle keeps one class for a class it sends by value again; a rebuilt Struct class
    # must too, or two tools (or two calls) sharing it would see two unrelated classes.
    from dsh_tools.distributed._ray_pickle import dumps

    def first(args: Any, ctx: Any) -> Any:
        return Node, Box

    def second(args: Any, ctx: Any) -> Any:
        return Node, Box

    shipped = [base64.b64encode(dumps(body)).decode() for body in (first, second)]
    program = textwrap.dedent(
        f"""
        import base64
        import msgspec
        from ray import cloudpickle
        one, two = [cloudpickle.loads(base64.b64decode(text))(None, None) for text in {shipped!r}]
        value = msgspec.convert({{"nodeValue": 1}}, one[0])
        print(one[0] is two[0], one[1] is two[1], isinstance(value, two[0]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["True", "True", "True"], done.stderr


def looping_node() -> Node:
    """A node that is its own next node."""
    node = Node(node_value=1)
    node.next_node = node
    return node


def test_a_typed_body_on_ray_returning_a_value_that_contains_itself_is_invalid_output(
    system: ToolSystem,
) -> None:
    system.tools.register(tool(placement=RayPlacement(num_cpus=0.5))(looping_node))

    result = system.execute(ExecuteCall(call_id="c1", name="looping_node", arguments={}))

    message = (
        'tool "looping_node" returned invalid output: value is not lossless JSON: '
        "value.nextNode is cycle"
    )
    assert result.to_dict()["error"] == {
        "message": message,
        "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"},
    }


class Cat(pydantic.BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = pydantic.Field(default=9, ge=0)


class Dog(pydantic.BaseModel):
    kind: Literal["dog"] = "dog"
    good: bool = True


def adopt(
    pet: Annotated[Cat | Dog, pydantic.Field(discriminator="kind")],
    home: pathlib.Path,
    friend: Cat | None = None,
) -> dict[str, Any]:
    """What the body received, and where it ran."""
    return {
        "pid": os.getpid(),
        "pet": type(pet).__name__,
        "home": type(home).__name__,
        "friend": type(friend).__name__,
    }


def test_a_body_on_ray_receives_pydantic_models_unions_of_them_and_paths(
    system: ToolSystem,
) -> None:
    system.tools.register(tool(placement=RayPlacement(num_cpus=0.5))(adopt))
    arguments = {"pet": {"kind": "dog"}, "home": "/srv/home", "friend": {"lives": 3}}

    result = system.execute(ExecuteCall(call_id="c1", name="adopt", arguments=arguments))

    assert not result.is_error, result.content
    assert result.value["pid"] != os.getpid()
    assert {k: v for k, v in result.value.items() if k != "pid"} == {
        "pet": "Dog",
        "home": "PosixPath",
        "friend": "Cat",
    }
