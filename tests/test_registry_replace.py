"""``ToolsHandle.replace``: swapping a registered tool for a new definition of the same name
in one change, so that no reader ever sees the name missing."""

from __future__ import annotations

import pytest
from conftest import call, fixture, text, text_tool

from dsh_tools import ToolSystem


def test_replace_swaps_the_tool_in_one_change(system: ToolSystem) -> None:
    changes: list[None] = []
    system.tools.on_change(lambda: changes.append(None))
    old = system.tools.register(text_tool("greet", "hello"))
    changes.clear()
    new = system.tools.replace(old, text_tool("greet", "hi there"))
    assert len(changes) == 1
    assert text(system.execute(call("greet"))) == "hi there"
    assert old.disposed
    old()  # a no-op now: the replacement stays
    assert system.tools.names() == ["greet"]
    new()
    assert system.tools.names() == []


def test_replace_keeps_the_plugins_disposal_order(system: ToolSystem) -> None:
    plugin = system.plugin("p")
    first = plugin.tools.register(fixture("a"))
    plugin.tools.register(fixture("b"))
    plugin.tools.replace(first, fixture("a", description="a, replaced"))
    plugin.close()
    assert system.tools.names() == []


def test_replace_refuses_another_name_and_changes_nothing(system: ToolSystem) -> None:
    old = system.tools.register(text_tool("greet", "hello"))
    with pytest.raises(ValueError, match='tool "greet" can only be replaced by a tool of the same'):
        system.tools.replace(old, text_tool("wave", "hi"))
    assert not old.disposed
    assert text(system.execute(call("greet"))) == "hello"


def test_replace_refuses_a_disposed_tool_and_a_foreign_disposer(system: ToolSystem) -> None:
    old = system.tools.register(text_tool("greet", "hello"))
    old()
    with pytest.raises(ValueError, match="it was disposed"):
        system.tools.replace(old, text_tool("greet", "hi"))
    mine = system.plugin("p").tools.register(text_tool("wave", "hi"))
    with pytest.raises(ValueError, match="a disposer that this handle returned"):
        system.tools.replace(mine, text_tool("wave", "hello"))
    with pytest.raises(TypeError, match="takes a ToolDefinition"):
        system.tools.replace(mine, "wave")  # type: ignore[arg-type]


def test_replace_given_the_tools_name_says_it_takes_the_disposer(system: ToolSystem) -> None:
    system.tools.register(text_tool("greet", "hello"))
    with pytest.raises(TypeError) as raised:
        system.tools.replace("greet", text_tool("greet", "hi"))  # type: ignore[arg-type]
    assert str(raised.value) == (
        "replace() takes the Disposer that this handle's register() returned for the tool, got str"
    )


def test_registering_a_plain_function_says_how_to_make_a_tool_of_it(system: ToolSystem) -> None:
    def weather(city: str) -> float:
        return 3.5

    with pytest.raises(TypeError) as raised:
        system.tools.register(weather)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "register() takes a ToolDefinition (build one with define_tool), got function"
        " test_registering_a_plain_function_says_how_to_make_a_tool_of_it.<locals>.weather:"
        " decorate it with @tool to build one from its type hints and docstring"
    )
    with pytest.raises(TypeError, match=r"got str$"):
        system.tools.register("weather")  # type: ignore[arg-type]


def test_a_raising_change_observer_rolls_a_replace_back_to_the_old_tool(
    system: ToolSystem,
) -> None:
    old = system.tools.register(text_tool("greet", "hello"))
    failing = [True]

    def observer() -> None:
        if failing[0]:
            raise RuntimeError("observer down")

    system.tools.on_change(observer)
    with pytest.raises(RuntimeError, match="observer down"):
        system.tools.replace(old, text_tool("greet", "hi there"))
    failing[0] = False
    # The change is undone: the old tool answers again, and its disposer is its own again.
    assert system.tools.names() == ["greet"]
    assert text(system.execute(call("greet"))) == "hello"
    assert not old.disposed
    new = system.tools.replace(old, text_tool("greet", "hi there"))
    assert text(system.execute(call("greet"))) == "hi there"
    new()
    assert system.tools.names() == []


def test_a_rolled_back_replace_keeps_the_plugins_disposal_order(system: ToolSystem) -> None:
    plugin = system.plugin("p")
    first = plugin.tools.register(fixture("a"))
    plugin.tools.register(fixture("b"))
    failing = [True]

    def observer() -> None:
        if failing[0]:
            raise RuntimeError("observer down")

    system.tools.on_change(observer)
    with pytest.raises(RuntimeError):
        plugin.tools.replace(first, fixture("a", description="a, replaced"))
    failing[0] = False
    assert system.tools.get("a") is not None
    assert system.tools.get("a").description != "a, replaced"  # type: ignore[union-attr]
    plugin.close()
    assert system.tools.names() == []


def test_replace_given_the_disposer_of_a_guard_says_so(system: ToolSystem) -> None:
    system.tools.register(fixture("a"))
    guard = system.tools.guard(lambda exec: "no")
    with pytest.raises(ValueError) as error:
        system.tools.replace(guard, fixture("a"))
    assert str(error.value) == (
        'tool "a" cannot be replaced: replace() takes the disposer of a tool, and this one '
        "disposes a guard"
    )
    guard()  # still the guard's, and it still works
    assert not system.execute(call("a")).is_error
