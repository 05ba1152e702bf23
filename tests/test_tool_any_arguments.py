"""A @tool parameter typed ``Any`` (or holding ``Any`` inside: ``dict[str, Any]``, a Struct
field) receives the plain ``list`` and ``dict`` JSON decodes to, as the parts typed ``list[T]``
and ``dict[str, T]`` do, never the registry's frozen snapshot of the arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolSystem, tool


class Patch(msgspec.Struct):
    path: str
    value: Any = None


@tool
def merge(base: dict[str, Any], patch: Patch, extra: Any = None) -> dict[str, Any]:
    """Merge a patch into a document, the way a body edits the JSON it was given."""
    base.setdefault(patch.path, []).append(patch.value)
    if isinstance(patch.value, dict):
        patch.value["seen"] = True
    if extra is not None:
        extra.append("touched")
        base["extra"] = extra
    kinds = {"base.tags": type(base["tags"]), "patch.value": type(patch.value)}
    if extra is not None:
        kinds["extra"] = type(extra)
    base["kinds"] = {key: kind.__name__ for key, kind in kinds.items()}
    return base


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(code_runtime=None) as started:
        started.tools.register(merge)
        yield started


def test_a_body_receives_and_may_change_plain_lists_and_dicts_where_its_type_says_any(
    system: ToolSystem,
) -> None:
    result = system.execute(
        ExecuteCall(
            call_id="c1",
            name="merge",
            arguments={
                "base": {"tags": ["a"]},
                "patch": {"path": "tags", "value": {"b": 1}},
                "extra": ["x"],
            },
        )
    )
    assert not result.is_error, result.content
    assert result.value == {
        "tags": ["a", {"b": 1, "seen": True}],
        "extra": ["x", "touched"],
        "kinds": {"base.tags": "list", "patch.value": "dict", "extra": "list"},
    }


def test_the_same_holds_for_arguments_sent_as_json_text_in_a_batch(system: ToolSystem) -> None:
    text = '{"base": {"tags": []}, "patch": {"path": "tags", "value": {"k": [1]}}}'
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "merge", text)]))
    (result,) = outcome.results
    assert not result.is_error, result.content
    assert result.value["kinds"] == {"base.tags": "list", "patch.value": "dict"}
