"""The output contract: the registry's per-definition checks (check_registration,
project_schema, normalize_output) and, where it needs execution, output schemas, rendering and
post-execute values through the pipeline."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import msgspec
import pytest
from conftest import block, call, fixture, post_returning, projected, text, value_of
from msgspec import UNSET

from dsh_tools import Accept, ExecutionToken, ToolSystem
from dsh_tools.actors import FrozenDict, FrozenList, JsonSchemaError, ToolOutputError
from dsh_tools.registry import (
    ToolDefinition,
    ToolOutput,
    check_registration,
    define_tool,
    normalize_output,
    project_schema,
    snapshot_json,
)


def noop(args: Any, run_ctx: Any) -> Any:
    return None


def render_text(args: Any, value: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": str(value)}]


def raw(**overrides: Any) -> ToolDefinition:
    fields: dict[str, Any] = {
        "name": "raw",
        "description": "a raw tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "output": ToolOutput({}, render_text),
        "execute": noop,
    }
    fields.update(overrides)
    return ToolDefinition(**fields)


def violations(
    defn: ToolDefinition, value: Any, *, args: Any = None, nested: bool = False
) -> list[str]:
    with pytest.raises(ToolOutputError) as info:
        normalize_output(
            defn, args if args is not None else snapshot_json({}), value, nested=nested
        )
    assert info.value.code == "INVALID_TOOL_OUTPUT"
    assert info.value.name == "ToolOutputError"
    assert str(info.value) == (
        f'tool "{defn.name}" returned invalid output: ' + "; ".join(info.value.violations)
    )
    return info.value.violations


# --- check_registration ------------------------------------------------------------------------


def test_register_accepts_only_tool_definitions() -> None:
    for candidate in ({"name": "x"}, None, "x"):
        with pytest.raises(TypeError) as info:
            check_registration(candidate, reserve_run_code=False)
        assert str(info.value).startswith("register() accepts only a ToolDefinition")


def test_a_missing_output_is_rejected_first() -> None:
    definition = raw(output=None, timeout_ms=0)
    with pytest.raises(TypeError) as info:
        check_registration(definition, reserve_run_code=False)
    assert (
        str(info.value) == 'tool "raw" must declare output { schema, render, presentation_meta? }'
    )


@pytest.mark.parametrize(
    "output",
    [
        ToolOutput({}, None),  # type: ignore[arg-type]
        ToolOutput({}, render_text, "not callable"),  # type: ignore[arg-type]
    ],
)
def test_output_needs_callable_render_and_projector(output: ToolOutput) -> None:
    with pytest.raises(TypeError, match="must declare output"):
        check_registration(raw(output=output), reserve_run_code=False)


def test_output_schema_must_be_in_the_subset_before_the_timeout_is_checked() -> None:
    definition = raw(output=ToolOutput({"type": "object", "minimum": 1}, render_text), timeout_ms=0)
    with pytest.raises(JsonSchemaError) as info:
        check_registration(definition, reserve_run_code=False)
    assert info.value.violations == [
        "schema.minimum is not a supported keyword (subset: type/oneOf/properties/required/"
        "additionalProperties/items/uniqueItems/enum/const + annotations)"
    ]


@pytest.mark.parametrize("timeout_ms", [0, -1, float("nan"), float("inf"), True, "5"])
def test_timeout_must_be_a_positive_finite_number(timeout_ms: Any) -> None:
    with pytest.raises(TypeError) as info:
        check_registration(raw(timeout_ms=timeout_ms), reserve_run_code=False)
    assert str(info.value) == 'tool "raw" timeout_ms must be a positive finite number'


def test_valid_timeouts_register() -> None:
    check_registration(raw(timeout_ms=1), reserve_run_code=False)
    check_registration(raw(timeout_ms=0.5), reserve_run_code=False)


def test_run_code_is_reserved_only_when_code_mode_presents_tools() -> None:
    check_registration(raw(name="run_code"), reserve_run_code=False)
    with pytest.raises(ValueError) as info:
        check_registration(raw(name="run_code"), reserve_run_code=True)
    assert str(info.value) == (
        'tool name "run_code" is reserved for the Code Mode presentation transport and cannot '
        "be registered or shadowed"
    )


def test_reservation_comes_after_the_timeout_check() -> None:
    with pytest.raises(TypeError, match="timeout_ms"):
        check_registration(raw(name="run_code", timeout_ms=0), reserve_run_code=True)


def test_raw_parameters_are_not_checked_at_registration() -> None:
    check_registration(
        raw(parameters={"type": "object", "default": float("nan"), "anyOf": []}),
        reserve_run_code=False,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": 3}, "tool name must be a non-empty str, got int"),
        ({"name": b"raw"}, "tool name must be a non-empty str, got bytes"),
        ({"description": None}, 'tool "raw" description must be a str'),
        (
            {"parameters": None},
            'tool "raw" parameters must be a JSON Schema object (a dict), got NoneType',
        ),
        (
            {"parameters": [{"type": "object"}]},
            'tool "raw" parameters must be a JSON Schema object (a dict), got list',
        ),
        ({"execute": None}, 'tool "raw" execute must be callable'),
        ({"present_call": 1}, 'tool "raw" present_call must be callable or None'),
    ],
)
def test_definition_fields_are_type_checked(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as info:
        check_registration(raw(**overrides), reserve_run_code=False)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"output": ToolOutput({}, lambda value: [])},
            'tool "raw" output.render must accept two positional arguments (args, value)',
        ),
        (
            {"output": ToolOutput({}, render_text, lambda value: None)},
            'tool "raw" output.presentation_meta must accept two positional arguments '
            "(args, value)",
        ),
        (
            {"is_concurrency_safe": lambda args, ctx: True},
            'tool "raw" is_concurrency_safe must accept one positional argument (args)',
        ),
    ],
    ids=["render", "presentation-meta", "classifier"],
)
def test_raw_callbacks_that_cannot_take_their_arguments_are_refused(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError) as info:
        check_registration(raw(**overrides), reserve_run_code=False)
    assert str(info.value) == message


def test_an_empty_tool_name_is_a_value_error() -> None:
    # A str, of the wrong value: ValueError, as for a duplicate or reserved name.
    with pytest.raises(ValueError, match=r"^tool name must be a non-empty str, got ''$"):
        check_registration(raw(name=""), reserve_run_code=False)


# --- project_schema ----------------------------------------------------------------------------


def test_projection_has_exactly_name_description_and_parameters() -> None:
    definition = define_tool(
        "echo",
        "echo arguments back",
        {"text": {"type": "string"}},
        ToolOutput({"type": "string"}, render_text),
        noop,
        timeout_ms=5000,
        is_concurrency_safe=lambda args: True,
        finalize_content=lambda exec_view, result: None,
        present_call=lambda args: None,
    )
    projection = project_schema(definition)
    assert projection == {
        "name": "echo",
        "description": "echo arguments back",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
    assert list(projection) == ["name", "description", "parameters"]


def test_projection_is_a_detached_plain_copy() -> None:
    definition = define_tool(
        "t",
        "d",
        {"a": {"type": "array", "items": {"type": "string"}}},
        ToolOutput({"type": "json"}, render_text),
        noop,
    )
    first = project_schema(definition)
    assert type(first["parameters"]) is dict
    assert type(first["parameters"]["properties"]["a"]) is dict
    first["parameters"]["properties"]["a"]["items"]["type"] = "number"
    first["description"] = "changed"
    second = project_schema(definition)
    assert second["parameters"]["properties"]["a"]["items"] == {"type": "string"}
    assert second["description"] == "d"


def test_projection_of_lossy_raw_parameters_raises() -> None:
    definition = raw(
        name="lossy-schema",
        parameters={
            "type": "object",
            "properties": {"n": {"type": "number", "default": float("nan")}},
        },
    )
    with pytest.raises(ValueError) as info:
        project_schema(definition)
    assert str(info.value) == (
        'tool "lossy-schema" parameters must be lossless JSON before schema projection: '
        "parameters.properties.n.default is float (NaN)"
    )


def test_projection_of_5000_deep_raw_parameters() -> None:
    nested: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        nested = {"oneOf": [nested, {"type": "null"}]}
    definition = raw(parameters={"type": "object", "properties": {"nested": nested}})
    projected = project_schema(definition)["parameters"]["properties"]["nested"]
    layers = 0
    while "oneOf" in projected:
        assert type(projected) is dict
        projected = projected["oneOf"][0]
        layers += 1
    assert layers == 5000


# --- normalize_output --------------------------------------------------------------------------


def echo_tool(**extra: Any) -> ToolDefinition:
    return define_tool(
        "echo",
        "d",
        {"text": {"type": "string", "required": True}},
        ToolOutput(
            {"type": "string"}, lambda args, value: [{"type": "text", "text": value}], **extra
        ),
        noop,
    )


def test_a_valid_value_is_frozen_rendered_and_has_no_meta_without_a_projector() -> None:
    value, content, meta = normalize_output(
        echo_tool(), snapshot_json({"text": "hello"}), "HELLO", nested=False
    )
    assert value == "HELLO"
    assert content == [{"type": "text", "text": "HELLO"}]
    assert type(content) is FrozenList
    assert type(content[0]) is FrozenDict
    assert meta is UNSET


def test_the_value_is_snapshotted_from_the_bodys_object() -> None:
    body_value = {"items": [1, 2]}
    definition = raw()
    value, _, _ = normalize_output(definition, {}, body_value, nested=False)
    body_value["items"].append(3)
    assert value == {"items": [1, 2]}
    assert type(value) is FrozenDict
    assert type(value["items"]) is FrozenList


def test_render_receives_the_arguments_and_the_frozen_value() -> None:
    seen: list[Any] = []

    def render(args: Any, value: Any) -> list[Any]:
        seen.append((args, value, type(value)))
        return []

    args = snapshot_json({"a": 1})
    normalize_output(raw(output=ToolOutput({}, render)), args, {"v": [1]}, nested=False)
    assert seen == [(args, {"v": [1]}, FrozenDict)]
    assert seen[0][0] is args


def _cycle() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


class Thing(msgspec.Struct):
    x: int


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (lambda: 1, "value is function"),
        (float("nan"), "value is float (NaN)"),
        (float("inf"), "value is float (inf)"),
        (-0.0, "value is float (-0.0)"),
        ({1: "a"}, "value is dict with int key"),
        ({1, 2}, "value is set"),
        (_cycle(), "value.self is cycle"),
        (datetime(1970, 1, 1), "value is datetime"),
        (Thing(1), "value is Thing"),
        (2**64, "value is int (out of range)"),
    ],
)
def test_lossy_values_are_invalid_output(value: Any, detail: str) -> None:
    assert violations(raw(), value) == [f"value is not lossless JSON: {detail}"]


def test_schema_violations_are_rooted_at_value() -> None:
    definition = raw(name="wrong-output", output=ToolOutput({"type": "string"}, render_text))
    assert violations(definition, 42) == ['"value" must be a string']
    assert str(ToolOutputError("wrong-output", ['"value" must be a string'])) == (
        'tool "wrong-output" returned invalid output: "value" must be a string'
    )


def test_render_failures_are_contained() -> None:
    def explode(args: Any, value: Any) -> Any:
        raise RuntimeError("renderer exploded")

    assert violations(raw(output=ToolOutput({}, explode)), "x") == [
        "output.render failed: renderer exploded"
    ]


def test_a_render_exception_that_cannot_be_printed() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    def explode(args: Any, value: Any) -> Any:
        raise Unprintable()

    assert violations(raw(output=ToolOutput({}, explode)), "x") == [
        "output.render failed: <unprintable thrown value>"
    ]


def test_render_cancellation_is_contained() -> None:
    def cancel(args: Any, value: Any) -> Any:
        raise asyncio.CancelledError()

    assert violations(raw(output=ToolOutput({}, cancel)), "x") == ["output.render failed: "]


@pytest.mark.parametrize(
    ("blocks", "detail"),
    [
        ([{"type": "text", "text": float("nan")}], "content[0].text is float (NaN)"),
        ([{"type": "text", "data": b"x"}], "content[0].data is bytes"),
        ({"type": "text", "text": "x"}, "content is dict (not a list of blocks)"),
        ("x", "content is str (not a list of blocks)"),
        (None, "content is NoneType (not a list of blocks)"),
    ],
)
def test_lossy_or_non_list_render_output(blocks: Any, detail: str) -> None:
    definition = raw(output=ToolOutput({}, lambda args, value: blocks))
    assert violations(definition, "x") == [f"output.render returned non-lossless JSON: {detail}"]


def test_an_async_render_is_not_content() -> None:
    async def render(args: Any, value: Any) -> list[Any]:
        return []

    definition = raw(output=ToolOutput({}, render))
    assert violations(definition, "x") == [
        "output.render returned non-lossless JSON: content is coroutine (not a list of blocks)"
    ]


def test_render_may_return_a_tuple_of_blocks() -> None:
    definition = raw(output=ToolOutput({}, lambda args, value: ({"type": "text", "text": "a"},)))
    _, content, _ = normalize_output(definition, {}, "x", nested=False)
    assert content == [{"type": "text", "text": "a"}]
    assert type(content) is FrozenList


def test_presentation_meta_is_present_for_direct_calls() -> None:
    def project(args: Any, value: Any) -> Any:
        return {"diffs": [{"path": "a", "old_text": None, "new_text": value}]}

    definition = echo_tool(presentation_meta=project)
    value, content, meta = normalize_output(
        definition, snapshot_json({"text": "x"}), "ok", nested=False
    )
    assert (value, content) == ("ok", [{"type": "text", "text": "ok"}])
    assert meta == {"diffs": [{"path": "a", "old_text": None, "new_text": "ok"}]}
    assert type(meta) is FrozenDict


def test_a_projector_returning_none_gives_a_present_null_meta() -> None:
    definition = echo_tool(presentation_meta=lambda args, value: None)
    _, _, meta = normalize_output(definition, snapshot_json({"text": "x"}), "ok", nested=False)
    assert meta is None


def test_nested_calls_never_compute_meta() -> None:
    calls: list[Any] = []

    def project(args: Any, value: Any) -> Any:
        calls.append(value)
        return None

    definition = echo_tool(presentation_meta=project)
    value, _, meta = normalize_output(definition, snapshot_json({"text": "x"}), "ok", nested=True)
    assert value == "ok"
    assert meta is UNSET
    assert calls == []


def test_projector_failures_are_contained() -> None:
    def explode(args: Any, value: Any) -> Any:
        raise ValueError("metadata exploded")

    assert violations(echo_tool(presentation_meta=explode), "ok") == [
        "output.presentation_meta failed: metadata exploded"
    ]
    assert violations(echo_tool(presentation_meta=lambda a, v: float("nan")), "ok") == [
        "output.presentation_meta returned non-lossless JSON: meta is float (NaN)"
    ]
    assert violations(echo_tool(presentation_meta=lambda a, v: lambda: 1), "ok") == [
        "output.presentation_meta returned non-lossless JSON: meta is function"
    ]


def test_steps_run_in_order_and_stop_at_the_first_failure() -> None:
    calls: list[str] = []

    def render(args: Any, value: Any) -> Any:
        calls.append("render")
        return []

    def project(args: Any, value: Any) -> Any:
        calls.append("meta")
        return None

    definition = raw(output=ToolOutput({"type": "string"}, render, project))
    violations(definition, 1)
    assert calls == []
    normalize_output(definition, {}, "x", nested=False)
    assert calls == ["render", "meta"]


def test_a_5000_deep_value_normalizes() -> None:
    value: Any = "leaf"
    for _ in range(5000):
        value = [value]
    definition = raw(output=ToolOutput({"type": "array"}, lambda args, value: [{"type": "text"}]))
    frozen, _, _ = normalize_output(definition, {}, value, nested=False)
    depth = 0
    while isinstance(frozen, list):
        assert type(frozen) is FrozenList
        frozen = frozen[0]
        depth += 1
    assert (depth, frozen) == (5000, "leaf")


# --- through the pipeline ----------------------------------------------------------------------


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
        datetime(2024, 1, 1),
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
