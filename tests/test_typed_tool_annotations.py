"""@tool and string annotations (this module postpones them) that name classes local to a
function: refused at definition with a ``TypeError`` naming the function and the name."""

from __future__ import annotations

import dataclasses

import pytest

from dsh_tools import tool


def test_a_local_recursive_class_is_refused_naming_the_function_and_the_unresolved_name() -> None:
    @dataclasses.dataclass
    class Local:
        value: int
        # Read by msgspec in this module's globals, where ``Local`` is not.
        following: Local | None = None

    def total(chain: Local) -> int:
        return chain.value

    with pytest.raises(TypeError) as raised:
        tool(total)

    message = str(raised.value)
    assert message.startswith("@tool(")
    assert "total): parameter 'chain'" in message
    assert "name 'Local' is not defined" in message


def test_a_return_annotation_naming_a_local_sibling_is_refused_the_same_way() -> None:
    @dataclasses.dataclass
    class Leaf:
        value: int

    @dataclasses.dataclass
    class Tree:
        leaves: list[Leaf]

    def grow(size: int) -> Tree:
        return Tree([Leaf(i) for i in range(size)])

    with pytest.raises(TypeError, match=r"grow\): the return annotation .*name 'Leaf' is not"):
        tool(grow)
