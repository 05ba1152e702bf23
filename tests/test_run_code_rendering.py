"""The reserved `run_code` transport's model-visible pieces: the schema texts, the call card,
the output rendering and the failure text."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools.actors import CodeRunFailedError, FrozenDict, FrozenList
from dsh_tools.codebridge._transport import (
    INVALID_DESCRIPTION_MESSAGE,
    RUN_CODE_CODE_DESCRIPTION,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_DESCRIPTION_DESCRIPTION,
    RUN_CODE_NO_OUTPUT,
    RUN_CODE_TOOL_NAME,
    present_run_code_call,
    pretty_json,
    render_run_code_output,
    run_code_output_dsl,
    run_code_output_schema,
    run_code_parameters_dsl,
    run_code_parameters_schema,
    runtime_language_message,
    runtime_required_message,
)
from dsh_tools.registry import (
    GenericCallView,
    assert_supported_json_schema,
    compile_parameters,
    compile_schema,
    encode_card,
)

ARGS = {"code": "return 1", "description": "Return the constant one"}


def content_text(value: Any) -> str:
    blocks = render_run_code_output(ARGS, value)
    assert len(blocks) == 1
    assert blocks[0]["type"] == "text"
    assert set(blocks[0]) == {"type", "text"}
    text = blocks[0]["text"]
    assert isinstance(text, str)
    return text


# --- the transport schema -------------------------------------------------------------------------


def test_transport_is_named_run_code() -> None:
    assert RUN_CODE_TOOL_NAME == "run_code"


def test_description_is_the_python_adaptation() -> None:
    assert RUN_CODE_DESCRIPTION.startswith("Execute a Python program")
    assert RUN_CODE_DESCRIPTION == (
        "Execute a Python program against the available tools. Write the BODY of an async "
        "function (top-level `await` and `return` work) and call tools as "
        "`await tools.name(args)` per the declarations in the system prompt. Only what you "
        "print or return comes back — curate it."
    )


def test_parameter_descriptions_are_exact() -> None:
    assert RUN_CODE_CODE_DESCRIPTION == "The program: the body of an async Python function."
    assert RUN_CODE_DESCRIPTION_DESCRIPTION == (
        "Clear, concise description of what this program does in active voice, 5-10 words "
        '(shown in the UI). Examples: "Count TODO markers across packages"; "Read failing '
        'test and its fixture"; "Rename config key in every cordis.yml".'
    )


def test_parameters_dsl_declares_two_required_strings() -> None:
    assert run_code_parameters_dsl() == {
        "code": {"type": "string", "description": RUN_CODE_CODE_DESCRIPTION, "required": True},
        "description": {
            "type": "string",
            "description": RUN_CODE_DESCRIPTION_DESCRIPTION,
            "required": True,
        },
    }


def test_parameters_schema_is_an_implicit_open_object_root() -> None:
    schema = run_code_parameters_schema()
    assert list(schema) == ["type", "properties", "required"]
    assert "additionalProperties" not in schema
    assert schema["required"] == ["code", "description"]
    assert_supported_json_schema(schema)
    jsonschema.validate({"code": "x", "description": "y", "extra": 1}, schema)


@pytest.mark.parametrize(
    "args",
    [
        {"description": "d"},
        {"code": "x"},
        {"code": 1, "description": "d"},
        {"code": "x", "description": None},
    ],
)
def test_parameters_schema_rejects_missing_or_non_string_fields(args: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(args, run_code_parameters_schema())


def test_output_schema_is_a_closed_object_with_required_logs_and_optional_result() -> None:
    schema = run_code_output_schema()
    assert schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"logs": {"type": "array", "items": {"type": "string"}}, "result": {}},
        "required": ["logs"],
    }
    assert_supported_json_schema(schema)


@pytest.mark.parametrize(
    "value",
    [{"logs": []}, {"logs": ["a"], "result": None}, {"logs": [], "result": {"deep": [1, "x"]}}],
)
def test_output_schema_accepts_canonical_values(value: dict[str, Any]) -> None:
    jsonschema.validate(value, run_code_output_schema())


@pytest.mark.parametrize(
    "value", [{}, {"logs": [1]}, {"logs": "x"}, {"logs": [], "extra": 1}, {"result": 1}]
)
def test_output_schema_rejects_other_shapes(value: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, run_code_output_schema())


def test_output_dsl_marks_logs_required_and_result_any_json() -> None:
    dsl = run_code_output_dsl()
    assert dsl["additionalProperties"] is False
    assert dsl["properties"]["logs"] == {
        "type": "array",
        "items": {"type": "string"},
        "required": True,
    }
    assert dsl["properties"]["result"] == {"type": "json"}


def test_the_dsl_forms_compile_to_the_raw_schemas_key_for_key() -> None:
    parameters = compile_parameters(run_code_parameters_dsl())
    output = compile_schema(run_code_output_dsl())
    assert parameters == run_code_parameters_schema()
    assert list(parameters) == list(run_code_parameters_schema())
    assert output == run_code_output_schema()
    assert list(output) == list(run_code_output_schema())


def test_schema_factories_return_fresh_dicts() -> None:
    first = run_code_parameters_schema()
    first["properties"]["code"]["type"] = "integer"
    assert run_code_parameters_schema()["properties"]["code"]["type"] == "string"
    assert run_code_output_schema() is not run_code_output_schema()


def test_precondition_and_runtime_messages_are_exact() -> None:
    assert INVALID_DESCRIPTION_MESSAGE == "invalid description: expected a non-empty string"
    assert runtime_required_message("code") == (
        'dsh-tools: mode "code" requires a code runtime — load a code runtime implementation '
        '(e.g. the subprocess code runtime) or set tools mode to "native"'
    )
    assert runtime_language_message("both", "typescript") == (
        'dsh-tools: mode "both" generates a Python SDK, but the loaded code runtime\'s '
        'language is "typescript"'
    )


# --- the call card --------------------------------------------------------------------------------


def test_call_card_is_generic_titled_by_description_with_the_program_as_raw_input() -> None:
    card = present_run_code_call(ARGS)
    assert card == GenericCallView(
        title="Return the constant one", kind="execute", raw_input="return 1"
    )
    assert json.loads(encode_card(card)) == {
        "card": "generic",
        "title": "Return the constant one",
        "kind": "execute",
        "raw_input": "return 1",
    }


def test_call_card_reads_frozen_arguments() -> None:
    card = present_run_code_call(FrozenDict(code="print(1)", description="Print one"))
    assert card is not None
    assert card.title == "Print one"
    assert card.raw_input == "print(1)"


@pytest.mark.parametrize(
    "args", [None, "return 1", {"code": "x"}, {"description": "d"}, {"code": 1, "description": "d"}]
)
def test_call_card_falls_back_for_arguments_without_both_strings(args: Any) -> None:
    assert present_run_code_call(args) is None


# --- the content table ----------------------------------------------------------------------------


def test_logs_only_render_the_logs() -> None:
    assert content_text({"logs": ["printed"]}) == "printed"


def test_string_result_only_renders_verbatim() -> None:
    assert content_text({"logs": [], "result": "returned"}) == "returned"


def test_logs_and_result_are_joined_by_a_newline() -> None:
    assert content_text({"logs": ["printed"], "result": "returned"}) == "printed\nreturned"


def test_neither_logs_nor_result_renders_the_no_output_marker() -> None:
    assert content_text({"logs": []}) == "(run_code completed with no output)"
    assert RUN_CODE_NO_OUTPUT == "(run_code completed with no output)"


def test_several_log_entries_are_joined_by_newlines() -> None:
    assert content_text({"logs": ["a", "b\n", "c"], "result": 3}) == "a\nb\n\nc\n3"


def test_empty_string_result_without_logs_renders_the_marker() -> None:
    assert content_text({"logs": [], "result": ""}) == RUN_CODE_NO_OUTPUT


def test_single_empty_log_without_result_renders_the_marker() -> None:
    assert content_text({"logs": [""]}) == RUN_CODE_NO_OUTPUT


def test_empty_string_result_after_logs_adds_nothing() -> None:
    assert content_text({"logs": ["a"], "result": ""}) == "a"


def test_frozen_canonical_values_render_like_plain_ones() -> None:
    value = FrozenDict(logs=FrozenList(["x"]), result=FrozenDict(a=FrozenList([1])))
    assert content_text(value) == 'x\n{\n  "a": [\n    1\n  ]\n}'


# --- pretty JSON ----------------------------------------------------------------------------------


def test_object_result_renders_pretty() -> None:
    assert content_text({"logs": [], "result": {"n": 42, "ok": True}}) == (
        '{\n  "n": 42,\n  "ok": true\n}'
    )


def test_empty_object_result_renders_braces() -> None:
    assert content_text({"logs": [], "result": {}}) == "{}"


def test_nested_result_matches_json_dumps_indent_2() -> None:
    value = {"outer": [{"inner": True}]}
    assert content_text({"logs": [], "result": value}) == json.dumps(value, indent=2)


def test_array_result_renders_one_item_per_line() -> None:
    assert content_text({"logs": [], "result": ["x", 2]}) == '[\n  "x",\n  2\n]'


def test_empty_array_result_renders_brackets() -> None:
    assert content_text({"logs": [], "result": []}) == "[]"


def test_explicit_none_result_renders_null() -> None:
    value = {"logs": [], "result": None}
    assert content_text(value) == "null"


def test_raw_string_result_is_not_quoted() -> None:
    assert content_text({"logs": [], "result": "raw"}) == "raw"


def test_absent_result_renders_the_marker() -> None:
    assert content_text({"logs": []}) == RUN_CODE_NO_OUTPUT


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (3, "3"), (1.0, "1.0"), (1e21, "1e21"), (-0.5, "-0.5")],
)
def test_scalar_results_use_json_text(value: Any, text: str) -> None:
    assert content_text({"logs": [], "result": value}) == text


def test_non_ascii_is_kept_raw_and_control_characters_escaped() -> None:
    assert pretty_json({"é": ["漢字", "a\nb", 'q"']}) == (
        '{\n  "é": [\n    "漢字",\n    "a\\nb",\n    "q\\""\n  ]\n}'
    )


def test_containers_five_levels_deep_render_compact() -> None:
    value = {"a": [[[{"b": [1, {"c": [2]}], "d": "x"}, []]]]}
    assert pretty_json(value) == (
        "{\n"
        '  "a": [\n'
        "    [\n"
        "      [\n"
        "        {\n"
        '          "b": [1,{"c":[2]}],\n'
        '          "d": "x"\n'
        "        },\n"
        "        []\n"
        "      ]\n"
        "    ]\n"
        "  ]\n"
        "}"
    )


# --- a 5000-deep result ---------------------------------------------------------------------------


def test_deep_result_renders_with_bounded_indentation() -> None:
    value: Any = {
        "emptyArray": [],
        "emptyObject": {},
        "pair": ["leaf", 2],
        "record": {"first": True, "second": None},
    }
    for _ in range(5000):
        value = [value]
    text = content_text({"logs": [], "result": value})
    assert text.startswith("[\n  [\n    [")
    assert '"leaf"' in text
    assert text.endswith("]")
    assert len(text) < 11_000
    assert (
        '{"emptyArray":[],"emptyObject":{},"pair":["leaf",2],"record":{"first":true,"second":null}}'
    ) in text
    assert max(len(line) - len(line.lstrip(" ")) for line in text.split("\n")) <= 10


def test_deep_object_result_renders_compact_below_depth_five() -> None:
    value: Any = "bottom"
    for _ in range(5000):
        value = {"k": value}
    text = pretty_json(value)
    assert text.startswith('{\n  "k": {\n    "k": {')
    assert '"k":{"k":"bottom"}' in text
    assert max(len(line) - len(line.lstrip(" ")) for line in text.split("\n")) <= 10


# --- property: pretty JSON ---------------------------------------------------------------------

_json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=6)
)
_json_values = st.recursive(
    _json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_pretty_json_round_trips_and_never_indents_past_ten(value: Any) -> None:
    text = pretty_json(value)
    assert json.loads(text) == value
    assert max(len(line) - len(line.lstrip(" ")) for line in text.split("\n")) <= 10


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_pretty_json_of_shallow_values_equals_json_dumps(value: Any) -> None:
    depth, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (list, dict)) and node:
            depth = max(depth, level)
            stack.extend(
                (child, level + 1) for child in (node.values() if isinstance(node, dict) else node)
            )
    if depth < 5:
        assert pretty_json(value) == json.dumps(value, indent=2, ensure_ascii=False)


# --- failure text (rendered by the pipeline as `Error: <message>`) --------------------------------


def test_output_limit_failure_text_carries_the_captured_output() -> None:
    error = CodeRunFailedError(
        "output-limit", "outer output exceeded 8 bytes", ["captured before failure"]
    )
    assert f"Error: {error}" == (
        "Error: code run failed (output-limit): outer output exceeded 8 bytes\n"
        "Captured output:\ncaptured before failure"
    )
    assert error.code == "CODE_RUN_FAILED"
    assert type(error).__name__ == "CodeRunFailedError"


def test_failure_with_one_empty_log_still_has_a_captured_output_section() -> None:
    error = CodeRunFailedError("exception", "ValueError: x", [""])
    assert str(error) == "code run failed (exception): ValueError: x\nCaptured output:\n"


def test_failure_without_logs_has_no_captured_output_section() -> None:
    error = CodeRunFailedError("timeout", "compute budget exhausted (300ms busy)")
    assert str(error) == "code run failed (timeout): compute budget exhausted (300ms busy)"
