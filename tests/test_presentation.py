"""Tool-owned presentation cards: presenters, soft validation and the wire form."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from dsh_tools.actors import FrozenDict, FrozenList, ToolExecutionFailure, ToolExecutionSuccess
from dsh_tools.actors import ToolFailure as Failure
from dsh_tools.registry import ToolOutput, define_tool
from dsh_tools.registry._cards import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    TerminalCallView,
    TerminalResultView,
    ToolResult,
    card_to_builtins,
    decode_call_view,
    decode_result_view,
    encode_card,
)
from dsh_tools.registry._presentation import (
    fallback_call_view,
    fallback_result_view,
    present_call_view,
    present_result_view,
    safe_present_call,
    safe_present_result,
)

TEXT_X = {"type": "text", "text": "x"}


def _opener(**extra: Any) -> Any:
    """The presenting tool: a required ``path`` and presenters that pass it through."""
    return define_tool(
        name="open",
        description="Open a file.",
        parameters={"path": {"type": "string", "required": True}, "n": {"type": "integer"}},
        output=ToolOutput(
            schema={"type": "string"},
            render=lambda args, value: [{"type": "text", "text": value}],
        ),
        execute=lambda args, run_ctx: "opened",
        present_call=lambda args: GenericCallView(
            title=f"Open {args['path']}", kind="read", raw_input=args["path"]
        ),
        present_result=lambda args, result: GenericResultView(
            title=f"Opened {args['path']}", content=result.content
        ),
        **extra,
    )


# --- presenters receive the arguments -------------------------------------------------------------


def test_presenters_pass_arguments_through() -> None:
    tool = _opener()

    assert tool.present_call({"path": "/a", "n": 2}) == GenericCallView(
        title="Open /a", kind="read", raw_input="/a"
    )
    result = ToolResult(content=[TEXT_X], is_error=False)
    assert tool.present_result({"path": "/a"}, result) == GenericResultView(
        title="Opened /a", content=[TEXT_X]
    )


# --- soft validation ------------------------------------------------------------------------------


def test_presenters_soft_validate_arguments_to_none() -> None:
    tool = _opener()
    result = ToolResult(content=[TEXT_X], is_error=False)

    assert tool.present_call({}) is None
    assert tool.present_result({"wrong": 1}, result) is None


def test_tool_without_presenters_has_none_and_gets_the_generic_fallback() -> None:
    tool = define_tool(
        name="plain",
        description="No cards.",
        parameters={},
        output=ToolOutput(schema={"type": "null"}, render=lambda args, value: []),
        execute=lambda args, run_ctx: None,
    )
    result = ToolResult(content=[TEXT_X], is_error=False)

    assert tool.present_call is None
    assert tool.present_result is None
    assert present_call_view(tool, "plain", {"a": 1}) == GenericCallView(
        title="plain", raw_input={"a": 1}
    )
    assert present_result_view(tool, {"a": 1}, result) == GenericResultView(content=[TEXT_X])


# --- the wire form --------------------------------------------------------------------------------


def test_views_encode_with_card_tag_and_snake_case_names() -> None:
    """Cards encode with their tag and snake_case field names (``old_text``, ``new_text``,
    ``raw_input``, ``exit_code``), like every encoded or persisted field."""
    diff = DiffCallView(
        title="Write a.txt", diffs=[FileDiff(path="a.txt", old_text=None, new_text="hi\n")]
    )

    assert json.loads(encode_card(diff)) == {
        "card": "diff",
        "title": "Write a.txt",
        "diffs": [{"path": "a.txt", "old_text": None, "new_text": "hi\n"}],
    }
    assert encode_card(diff).startswith(b'{"card":"diff"')
    generic = GenericCallView(title="t", raw_input={"k": 1})
    assert json.loads(encode_card(generic)) == {
        "card": "generic",
        "title": "t",
        "raw_input": {"k": 1},
    }
    terminal = TerminalResultView(output="ok\n", exit_code=0)
    assert json.loads(encode_card(terminal)) == {
        "card": "terminal",
        "output": "ok\n",
        "exit_code": 0,
    }


def test_decoding_an_unknown_card_fails() -> None:
    with pytest.raises(msgspec.ValidationError, match="card"):
        decode_call_view(b'{"card":"hologram","title":"t"}')
    with pytest.raises(msgspec.ValidationError, match="card"):
        decode_result_view({"card": "hologram"})


def test_every_view_round_trips_through_json_and_builtins() -> None:
    calls = [
        GenericCallView(
            title="Read a",
            kind="read",
            raw_input="a",
            content=[TEXT_X],
            locations=[FileLocation(path="a", line=3)],
        ),
        TerminalCallView(title="ls -l", description="List files", cwd="src"),
        DiffCallView(
            title="Edit a",
            diffs=[FileDiff(path="a", old_text="x", new_text="y")],
            locations=[FileLocation(path="a")],
        ),
    ]
    results = [
        GenericResultView(title="done", content=[TEXT_X]),
        TerminalResultView(output="boom\n", signal="SIGKILL"),
        DiffResultView(diffs=[FileDiff(path="a", old_text=None, new_text="y")], title="t"),
    ]

    for call in calls:
        assert decode_call_view(encode_card(call)) == call
        assert decode_call_view(card_to_builtins(call)) == call
    for result in results:
        assert decode_result_view(encode_card(result)) == result
        assert decode_result_view(card_to_builtins(result)) == result


def test_absent_optional_fields_are_omitted_from_the_wire() -> None:
    assert card_to_builtins(GenericResultView()) == {"card": "generic"}
    assert card_to_builtins(TerminalCallView(title="pwd")) == {"card": "terminal", "title": "pwd"}
    assert card_to_builtins(FileLocation(path="a")) == {"path": "a"}


def test_decoding_checks_field_types_and_unknown_fields() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_call_view({"card": "generic", "title": 1})
    with pytest.raises(msgspec.ValidationError):
        decode_call_view({"card": "generic", "title": "t", "kind": "teleport"})
    with pytest.raises(msgspec.ValidationError):
        decode_call_view({"card": "generic", "title": "t", "rawInput": "camel"})
    with pytest.raises(msgspec.ValidationError):
        decode_result_view({"card": "diff", "diffs": [{"path": "a", "new_text": "x"}]})


# --- the card structs --------------------------------------------------------------------------


def test_views_are_frozen_and_their_payloads_deep_frozen() -> None:
    content = [{"type": "text", "text": "x", "extra": [1]}]
    view = GenericCallView(title="t", raw_input={"a": [1]}, content=content)
    content[0]["text"] = "changed"

    with pytest.raises(AttributeError):
        view.title = "other"  # type: ignore[misc]
    assert type(view.content) is FrozenList
    assert type(view.raw_input) is FrozenDict
    assert view.content[0]["text"] == "x"
    with pytest.raises(TypeError):
        view.raw_input["a"].append(2)


def test_locations_and_diffs_become_tuples() -> None:
    view = DiffResultView(diffs=[FileDiff(path="a", old_text=None, new_text="y")])

    assert view.diffs == (FileDiff(path="a", old_text=None, new_text="y"),)


def test_construction_rejects_malformed_fields() -> None:
    with pytest.raises(TypeError, match="title"):
        GenericCallView(title=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        GenericCallView(title="t", kind="teleport")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lossless"):
        GenericCallView(title="t", raw_input=float("nan"))
    with pytest.raises(TypeError, match="content block"):
        GenericResultView(content=["just text"])
    with pytest.raises(TypeError, match="FileDiff"):
        DiffCallView(title="t", diffs=[{"path": "a", "old_text": None, "new_text": "b"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="1-based"):
        FileLocation(path="a", line=0)
    with pytest.raises(TypeError, match="exit_code"):
        TerminalResultView(exit_code=True)


def test_terminal_exit_code_and_signal_are_mutually_exclusive() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        TerminalResultView(exit_code=1, signal="SIGTERM")
    with pytest.raises(msgspec.ValidationError, match="mutually exclusive"):
        decode_result_view({"card": "terminal", "exit_code": 1, "signal": "SIGTERM"})


# --- the durable result ------------------------------------------------------------------------


def test_durable_result_from_an_execution_drops_the_value() -> None:
    success = ToolExecutionSuccess(value={"secret": 1}, content=[TEXT_X], meta={"m": 1})
    failure = ToolExecutionFailure(error=Failure(message="no"), content=[TEXT_X])

    assert ToolResult.from_execution(success) == ToolResult(
        content=[TEXT_X], is_error=False, meta={"m": 1}
    )
    assert ToolResult.from_execution(failure).is_error is True
    assert ToolResult.from_execution(failure).meta is UNSET
    assert "value" not in card_to_builtins(ToolResult.from_execution(success))


def test_durable_result_reads_back_from_a_logged_event_keeping_null_meta() -> None:
    data = {"call_id": "c1", "content": [TEXT_X], "is_error": False, "meta": None}

    result = ToolResult.from_event(data)

    assert result == ToolResult(content=[TEXT_X], is_error=False, meta=None)
    assert result.meta is None
    assert ToolResult.from_event({"content": [], "is_error": True}).meta is UNSET


# --- fallbacks and safe invocation -------------------------------------------------------------


def test_call_fallback_titles_with_the_tool_name_and_shows_raw_arguments() -> None:
    assert fallback_call_view("grep", {"pattern": "x"}) == GenericCallView(
        title="grep", raw_input={"pattern": "x"}
    )


def test_call_fallback_survives_arguments_that_are_not_json() -> None:
    view = fallback_call_view("grep", {"pattern": {1, 2}})

    assert view.title == "grep"
    assert view.raw_input == repr({"pattern": {1, 2}})


def test_result_fallback_keeps_the_pending_title_and_shows_raw_content() -> None:
    result = ToolResult(content=[TEXT_X], is_error=True)

    view = fallback_result_view(result)

    assert view.title is UNSET
    assert view.content == [TEXT_X]


def test_safe_invocation_treats_a_raising_presenter_as_none() -> None:
    def explode(*args: Any) -> Any:
        raise RuntimeError("presenter exploded")

    result = ToolResult(content=[TEXT_X], is_error=False)

    assert safe_present_call(explode, {"a": 1}) is None
    assert safe_present_result(explode, {"a": 1}, result) is None


def test_safe_invocation_treats_a_non_view_as_none() -> None:
    result = ToolResult(content=[TEXT_X], is_error=False)

    assert safe_present_call(lambda args: {"card": "generic", "title": "t"}, {}) is None
    assert safe_present_call(lambda args: GenericResultView(), {}) is None
    assert safe_present_result(lambda args, r: GenericCallView(title="t"), {}, result) is None


def test_present_view_helpers_fall_back_when_the_presenter_declines_or_fails() -> None:
    class Definition:
        present_call = staticmethod(lambda args: None)

        @staticmethod
        def present_result(args: Any, result: ToolResult) -> Any:
            raise ValueError("bad meta")

    result = ToolResult(content=[TEXT_X], is_error=False)

    assert present_call_view(Definition(), "t", {"a": 1}) == fallback_call_view("t", {"a": 1})
    assert present_result_view(Definition(), {}, result) == fallback_result_view(result)
    assert present_call_view(None, "gone", {}) == fallback_call_view("gone", {})


@pytest.mark.parametrize("given", [3, {"card": "generic", "title": "t"}, None])
def test_encode_card_refuses_what_is_not_a_card(given: Any) -> None:
    # Not JSON that no decoder would take for a card.
    with pytest.raises(TypeError) as error:
        encode_card(given)
    assert str(error.value) == (
        "encode_card() takes a call or result view, a FileDiff, a FileLocation or a "
        f"ToolResult, got {type(given).__name__}"
    )


def test_result_cards_refuse_a_result_that_is_not_a_tool_result() -> None:
    # An execution result (or anything else) is refused naming what is taken, not an
    # AttributeError about ``content`` from inside, or a presenter given the wrong object.
    seen: list[Any] = []
    definition = define_tool(
        name="t",
        description="d",
        parameters={},
        output=ToolOutput({"type": "json"}, lambda args, value: []),
        execute=lambda args, ctx: None,
        present_result=lambda args, result: seen.append(result),
    )
    executed = ToolExecutionSuccess(value=1, content=[{"type": "text", "text": "1"}])
    with pytest.raises(TypeError) as error:
        present_result_view(definition, {}, executed)
    assert str(error.value) == (
        "present_result_view() takes a ToolResult as result, got ToolExecutionSuccess"
    )
    with pytest.raises(TypeError, match=r"^fallback_result_view\(\) takes a ToolResult as res"):
        fallback_result_view(3)  # type: ignore[arg-type]
    assert seen == []
