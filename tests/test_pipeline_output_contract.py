"""The output contract where it needs execution: output schemas, rendering, post-execute values."""

from __future__ import annotations

import datetime
from typing import Any

import msgspec
import pytest
from conftest import block, call, fixture, post_returning, projected, text, value_of

from dsh_tools import (
    Accept,
    ExecutionToken,
    JsonSchemaError,
    ToolDefinition,
    ToolOutput,
    ToolSystem,
    define_tool,
)


def deep_one_of(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "null"}]}
    return schema


def count_layers(schema: Any) -> int:
    layers = 0
    while "oneOf" in schema:
        layers += 1
        schema = schema["oneOf"][0]
    return layers


def typed(
    name: str,
    execute: Any,
    *,
    schema: Any = None,
    render: Any = None,
    presentation_meta: Any = None,
    parameters: Any = None,
) -> ToolDefinition:
    return define_tool(
        name=name,
        description=f"{name} tool",
        parameters=parameters if parameters is not None else {},
        output=ToolOutput(
            schema=schema if schema is not None else {"type": "string"},
            render=render if render is not None else (lambda args, value: [block(str(value))]),
            presentation_meta=presentation_meta,
        ),
        execute=execute,
    )


def test_sp35_a_5000_deep_parameter_schema_projects_as_a_detached_copy(
    system: ToolSystem,
) -> None:
    system.tools.register(
        fixture(
            "deep",
            parameters={"type": "object", "properties": {"nested": deep_one_of(5000)}},
        )
    )
    (first,) = system.tools.schemas()
    nested = first["parameters"]["properties"]["nested"]
    assert count_layers(nested) == 5000
    nested["oneOf"][0]["oneOf"][1]["type"] = "changed"
    nested["oneOf"].append({"type": "boolean"})
    (second,) = system.tools.schemas()
    again = second["parameters"]["properties"]["nested"]
    assert again["oneOf"][0]["oneOf"][1] == {"type": "null"}
    assert len(again["oneOf"]) == 2
    assert count_layers(again) == 5000


def test_sp80_a_typed_tool_rejects_missing_required_arguments_before_the_body(
    system: ToolSystem,
) -> None:
    ran: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        ran.append(args)
        return "read"

    system.tools.register(
        typed("reader", body, parameters={"path": {"type": "string", "required": True}})
    )
    result = system.execute(call("reader", {}))
    assert result.is_error
    assert result.to_dict() == {
        "content": [
            {"type": "text", "text": 'Error: invalid arguments: missing required property "path"'}
        ],
        "is_error": True,
        "error": {
            "message": 'invalid arguments: missing required property "path"',
            "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"},
        },
    }
    assert ran == []


def typed_echo() -> ToolDefinition:
    def body(args: Any, ctx: Any) -> str:
        value: str = args["text"]
        return value.upper() if args.get("uppercase") else value

    return define_tool(
        name="echo",
        description="echo the text back",
        parameters={
            "text": {"type": "string", "required": True},
            "uppercase": {"type": "boolean"},
        },
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [block(v)]),
        execute=body,
    )


def test_sp81_a_typed_echo_runs_and_projects_its_compiled_schema(system: ToolSystem) -> None:
    system.tools.register(typed_echo())
    result = system.execute(call("echo", {"text": "hello", "uppercase": True}))
    assert result.is_error is False
    assert value_of(result) == "HELLO"
    assert result.content == [{"type": "text", "text": "HELLO"}]
    assert system.tools.schemas() == [
        {
            "name": "echo",
            "description": "echo the text back",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "uppercase": {"type": "boolean"}},
                "required": ["text"],
            },
        }
    ]


def test_sp82_a_raw_registration_reaches_its_body_despite_required(system: ToolSystem) -> None:
    system.tools.register(
        fixture(
            "raw-reader",
            parameters={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        )
    )
    result = system.execute(call("raw-reader", {}))
    assert result.is_error is False
    assert text(result) == "ran:raw-reader"


def test_sp87_registration_without_output_is_refused(system: ToolSystem) -> None:
    raw = ToolDefinition(name="bare", description="d", parameters={}, execute=lambda a, c: 1)
    with pytest.raises(TypeError) as info:
        system.tools.register(raw)
    assert "must declare output { schema, render, presentation_meta? }" in str(info.value)


def test_sp87_an_unsupported_output_schema_is_refused_at_registration(
    system: ToolSystem,
) -> None:
    raw = ToolDefinition(
        name="odd",
        description="d",
        parameters={},
        output=ToolOutput(schema={"type": "object", "minimum": 1}, render=lambda a, v: []),
        execute=lambda a, c: {},
    )
    with pytest.raises(JsonSchemaError):
        system.tools.register(raw)
    assert system.tools.get("odd") is None


class Point(msgspec.Struct):
    x: int


def _cycle() -> Any:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "returned",
    [
        lambda: None,
        float("nan"),
        float("inf"),
        -0.0,
        {1: "a"},
        {1, 2},
        _cycle(),
        datetime.datetime(2024, 1, 1),
        Point(1),
    ],
    ids=["lambda", "nan", "inf", "neg-zero", "int-key", "set", "cycle", "datetime", "struct"],
)
def test_sp88_a_non_lossless_value_is_invalid_tool_output(
    system: ToolSystem, returned: Any
) -> None:
    system.tools.register(typed("lossy", lambda a, c: returned, schema={"type": "json"}))
    data = system.execute(call("lossy")).to_dict()
    assert data["error"]["info"] == {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}
    assert "not lossless JSON" in data["content"][0]["text"]
    assert "value" not in data


def test_sp89_a_wrongly_typed_value_names_the_tool_and_the_violation(
    system: ToolSystem,
) -> None:
    system.tools.register(typed("wrong-output", lambda a, c: 42))
    result = system.execute(call("wrong-output"))
    assert result.to_dict()["error"]["message"] == (
        'tool "wrong-output" returned invalid output: "value" must be a string'
    )


def test_sp90_render_and_presentation_meta_failures_are_invalid_output(
    system: ToolSystem,
) -> None:
    def explode_render(args: Any, value: Any) -> Any:
        raise RuntimeError("renderer exploded")

    def explode_meta(args: Any, value: Any) -> Any:
        raise RuntimeError("metadata exploded")

    system.tools.register(typed("r", lambda a, c: "v", render=explode_render))
    system.tools.register(typed("m", lambda a, c: "v", presentation_meta=explode_meta))
    for name, message in (("r", "renderer exploded"), ("m", "metadata exploded")):
        data = system.execute(call(name)).to_dict()
        assert message in data["error"]["message"]
        assert data["error"]["info"]["code"] == "INVALID_TOOL_OUTPUT"
        assert "value" not in data


def test_sp91_presentation_meta_returning_a_function_is_invalid_output(
    system: ToolSystem,
) -> None:
    system.tools.register(typed("m", lambda a, c: "v", presentation_meta=lambda a, v: print))
    data = system.execute(call("m")).to_dict()
    assert data["error"]["info"] == {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}
    assert data["content"][0]["text"].startswith("Error:")


def test_sp91_presentation_meta_returning_nan_is_non_lossless(system: ToolSystem) -> None:
    system.tools.register(typed("m", lambda a, c: "v", presentation_meta=lambda a, v: float("nan")))
    result = system.execute(call("m"))
    assert "output.presentation_meta returned non-lossless JSON" in text(result)


DIFFS = {"diffs": [{"path": "a", "old_text": None, "new_text": "x"}]}


def test_sp92_meta_is_present_exactly_when_a_projector_exists(system: ToolSystem) -> None:
    system.tools.register(typed("with", lambda a, c: "ok", presentation_meta=lambda a, v: DIFFS))
    system.tools.register(typed("without", lambda a, c: "ok"))
    assert system.execute(call("with")).to_dict() == {
        "content": [{"type": "text", "text": "ok"}],
        "is_error": False,
        "meta": DIFFS,
        "value": "ok",
    }
    plain = system.execute(call("without"))
    assert "meta" not in plain.to_dict()
    assert msgspec.json.decode(msgspec.json.encode(plain)).get("meta", "absent") == "absent"


def test_sp93_a_none_meta_is_present_and_nested_calls_have_none(system: ToolSystem) -> None:
    system.tools.register(typed("m", lambda a, c: "ok", presentation_meta=lambda a, v: None))
    direct = system.execute(call("m")).to_dict()
    assert "meta" in direct
    assert direct["meta"] is None
    nested = system.execute(call("m", parent=ExecutionToken())).to_dict()
    assert "meta" not in nested
    assert nested["value"] == "ok"


def test_sp94_replacing_content_keeps_value_and_meta(system: ToolSystem) -> None:
    system.tools.register(projected())
    post_returning(system, Accept(content=[block("policy content")]))
    result = system.execute(call("projected"))
    assert value_of(result) == {"text": "body"}
    assert result.meta == {"projected": "body"}
    assert text(result) == "policy content"


def test_sp94_replacing_the_value_re_renders_content_and_meta(system: ToolSystem) -> None:
    system.tools.register(projected())
    post_returning(system, Accept(value={"text": "policy value"}))
    result = system.execute(call("projected"))
    assert value_of(result) == {"text": "policy value"}
    assert text(result) == "render:policy value"
    assert result.meta == {"projected": "policy value"}


def test_sp94_an_invalid_replacement_value_is_invalid_output(system: ToolSystem) -> None:
    system.tools.register(typed("echo", lambda a, c: "hi"))
    post_returning(system, Accept(value=1))
    data = system.execute(call("echo")).to_dict()
    assert data["error"]["info"]["code"] == "INVALID_TOOL_OUTPUT"
    assert "value" not in data


def test_sp95_schemas_are_detached_copies(system: ToolSystem) -> None:
    system.tools.register(typed_echo())
    first = system.tools.schemas()
    first[0]["parameters"]["properties"]["text"]["type"] = "number"
    first[0]["parameters"]["required"].append("uppercase")
    first[0]["description"] = "mutated"
    second = system.tools.schemas()
    assert second[0]["description"] == "echo the text back"
    assert second[0]["parameters"]["properties"]["text"] == {"type": "string"}
    assert second[0]["parameters"]["required"] == ["text"]


def test_sp95_lossy_parameters_fail_only_at_projection(system: ToolSystem) -> None:
    system.tools.register(
        fixture("lossy-schema", parameters={"type": "object", "default": float("nan")})
    )
    with pytest.raises(ValueError) as info:
        system.tools.schemas()
    assert str(info.value).startswith(
        'tool "lossy-schema" parameters must be lossless JSON before schema projection'
    )
