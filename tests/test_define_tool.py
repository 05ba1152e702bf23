"""define_tool: a typed definition from the DSL, its definition-time checks, and its wrappers."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any, NotRequired, TypedDict

import msgspec
import pytest

from dsh_tools.actors import (
    FrozenDict,
    FrozenList,
    HarnessError,
    JsonSchemaError,
    ToolArgsError,
    ToolOutputError,
)
from dsh_tools.registry import (
    ToolDefinition,
    ToolOutput,
    check_registration,
    classify,
    define_tool,
    normalize_output,
    snapshot_json,
)


def text_output(schema: Any = None) -> ToolOutput:
    return ToolOutput(
        schema if schema is not None else {"type": "json"},
        lambda args, value: [{"type": "text", "text": str(value)}],
    )


def noop(args: Any, run_ctx: Any) -> Any:
    return None


# --- errors ------------------------------------------------------------------------------------


def test_sp79_tool_args_error() -> None:
    violations = ['missing required property "a"', '"b" must be a number']
    error = ToolArgsError(violations)
    assert isinstance(error, HarnessError)
    assert error.name == "ToolArgsError"
    assert error.code == "INVALID_ARGS"
    assert error.violations == violations
    assert str(error) == 'invalid arguments: missing required property "a"; "b" must be a number'


# --- definition-time checks --------------------------------------------------------------------


# 10**400: an int no float can hold, which the timeout policy could never turn into seconds.
@pytest.mark.parametrize(
    "timeout_ms", [0, -5, float("inf"), float("nan"), True, "100", pytest.param(10**400, id="huge")]
)
def test_sp83_define_tool_rejects_a_bad_timeout(timeout_ms: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        define_tool("slow", "d", {}, text_output(), noop, timeout_ms=timeout_ms)
    assert str(info.value) == "define_tool(slow): timeout_ms must be a positive finite number"


def test_sp83_timeout_is_kept_or_absent() -> None:
    assert define_tool("t", "d", {}, text_output(), noop, timeout_ms=30000).timeout_ms == 30000
    assert define_tool("t", "d", {}, text_output(), noop).timeout_ms is None


@pytest.mark.parametrize("timeout_ms", [0, float("inf"), pytest.param(10**400, id="huge")])
def test_sp83_raw_registration_rejects_a_bad_timeout(timeout_ms: float) -> None:
    definition = ToolDefinition(
        name="raw",
        description="d",
        parameters={"type": "object"},
        output=ToolOutput({}, lambda args, value: []),
        execute=noop,
        timeout_ms=timeout_ms,
    )
    with pytest.raises(TypeError) as info:
        check_registration(definition, reserve_run_code=False)
    assert str(info.value) == 'tool "raw" timeout_ms must be a positive finite number'


def test_sp84_malformed_schemas_fail_at_definition_time() -> None:
    with pytest.raises(JsonSchemaError) as info:
        define_tool("t", "d", {"x": {"type": "weird"}}, text_output(), noop)
    assert info.value.violations == [
        "parameters.x.type must be string/number/integer/boolean/null/array/object/json, "
        "or use oneOf"
    ]
    with pytest.raises(JsonSchemaError) as info:
        define_tool("t", "d", {}, text_output({"type": "object"}), noop)
    assert info.value.violations == ["schema.additionalProperties must be explicitly true or false"]


def test_a_whole_json_schema_given_as_the_dsl_says_what_the_dsl_takes() -> None:
    # It used to say "parameters.type must be a value schema object", as of a property named
    # "type": the author wrote the raw form a ToolDefinition takes.
    raw = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with pytest.raises(JsonSchemaError) as info:
        define_tool("weather", "d", raw, text_output(), noop)
    assert info.value.violations == [
        'parameters is a JSON Schema object ({"type": "object", "properties": ...}); the DSL '
        'takes the property map itself, {name: value schema} with "required": true on each '
        "required one (a raw JSON Schema goes to ToolDefinition(parameters=...))"
    ]
    assert info.value.__notes__ == ["define_tool(weather): in its parameters"]


def test_a_malformed_schema_error_names_the_tool_and_the_schema() -> None:
    # The violations keep their pinned text; a note says which tool and which schema, so that
    # a harness defining many tools in a loop learns which one is wrong.
    with pytest.raises(JsonSchemaError) as info:
        define_tool("weather", "d", {"city": {"type": "text"}}, text_output(), noop)
    assert info.value.__notes__ == ["define_tool(weather): in its parameters"]
    with pytest.raises(JsonSchemaError) as info:
        define_tool("weather", "d", {"city": {"type": "string", "enum": [1]}}, text_output(), noop)
    assert info.value.__notes__ == ["define_tool(weather): in its parameters"]
    with pytest.raises(JsonSchemaError) as info:
        define_tool("weather", "d", {}, text_output({"type": "object"}), noop)
    assert info.value.__notes__ == ["define_tool(weather): in its output.schema"]


def test_definition_holds_frozen_compiled_schemas_detached_from_the_author() -> None:
    parameters: dict[str, Any] = {"path": {"type": "string", "required": True}}
    output_schema: dict[str, Any] = {"type": "string", "enum": ["a"]}
    definition = define_tool("t", "d", parameters, text_output(output_schema), noop)
    parameters["extra"] = {"type": "number"}
    output_schema["enum"].append("b")
    assert definition.parameters == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    assert definition.output is not None
    assert definition.output.schema == {"type": "string", "enum": ["a"]}
    assert type(definition.parameters) is FrozenDict
    assert type(definition.output.schema) is FrozenDict
    check_registration(definition, reserve_run_code=True)


def minimal_tool_with(overrides: dict[str, Any]) -> dict[str, Any]:
    """``define_tool``'s arguments for a minimal tool ``t``, with ``overrides`` in place."""
    return {
        "name": "t",
        "description": "d",
        "parameters": {},
        "output": text_output(),
        "execute": noop,
        **overrides,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": b"t"}, "define_tool: name must be a non-empty str, got bytes"),
        ({"description": None}, "define_tool(t): description must be a str"),
        ({"output": {"schema": {"type": "json"}}}, "define_tool(t): must declare output as"),
        ({"output": None}, "define_tool(t): must declare output as ToolOutput"),
        ({"execute": "nope"}, "define_tool(t): execute must be callable"),
        ({"is_concurrency_safe": True}, "define_tool(t): is_concurrency_safe must be callable"),
    ],
)
def test_define_tool_rejects_malformed_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as info:
        define_tool(**minimal_tool_with(kwargs))
    assert str(info.value).startswith(message)


def test_define_tool_refuses_a_name_or_description_no_prompt_could_carry() -> None:
    # Refused here, as register() would refuse it, not once the definition is registered.
    with pytest.raises(ValueError) as error:
        define_tool(
            name="t\ud800", description="d", parameters={}, output=text_output(), execute=noop
        )
    assert str(error.value) == (
        "define_tool: name 't\\ud800' holds a lone surrogate at index 1; it must be valid "
        "Unicode text"
    )
    with pytest.raises(ValueError, match=r"^define_tool\(t\): description holds a lone surr"):
        define_tool(
            name="t", description="\udc80", parameters={}, output=text_output(), execute=noop
        )


def test_define_tool_refuses_an_empty_name_as_a_bad_value() -> None:
    with pytest.raises(ValueError, match=r"^define_tool: name must be a non-empty str, got ''$"):
        define_tool(name="", description="d", parameters={}, output=text_output(), execute=noop)


def render_value(value: Any) -> list[dict[str, Any]]:  # forgot ``args``
    return [{"type": "text", "text": str(value)}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"output": ToolOutput({"type": "json"}, render_value)},
            "define_tool(t): output.render must accept two positional arguments (args, value)",
        ),
        (
            {"output": ToolOutput({"type": "json"}, lambda args, value: [], render_value)},
            "define_tool(t): output.presentation_meta must accept two positional arguments "
            "(args, value)",
        ),
        (
            {"is_concurrency_safe": lambda: True},
            "define_tool(t): is_concurrency_safe must accept one positional argument (args)",
        ),
        (
            {"finalize_content": lambda result: None},
            "define_tool(t): finalize_content must accept two positional arguments (exec, result)",
        ),
        (
            {"present_call": lambda args, extra: None},
            "define_tool(t): present_call must accept one positional argument (args)",
        ),
        (
            {"present_result": lambda result: None},
            "define_tool(t): present_result must accept two positional arguments (args, result)",
        ),
    ],
    ids=[
        "render",
        "presentation-meta",
        "classifier",
        "finalizer",
        "call-presenter",
        "result-presenter",
    ],
)
def test_a_callback_that_cannot_take_its_arguments_is_refused_when_defined(
    kwargs: dict[str, Any], message: str
) -> None:
    # Not every call failing (a renderer), nor every call running alone without a word (a
    # classifier that cannot be called reads as "not safe").
    with pytest.raises(TypeError) as info:
        define_tool(**minimal_tool_with(kwargs))
    assert str(info.value) == message


# --- the wrapped execute -----------------------------------------------------------------------


def test_invalid_arguments_raise_before_the_body_runs() -> None:
    calls: list[Any] = []

    def body(args: Any, run_ctx: Any) -> str:
        calls.append(args)
        return "ok"

    reader = define_tool(
        "reader", "d", {"path": {"type": "string", "required": True}}, text_output(), body
    )
    with pytest.raises(ToolArgsError) as info:
        reader.execute(snapshot_json({}), None)
    assert str(info.value) == 'invalid arguments: missing required property "path"'
    assert calls == []
    assert reader.execute(snapshot_json({"path": "/a"}), "ctx") == "ok"
    assert calls == [{"path": "/a"}]


def test_body_receives_the_frozen_arguments_and_run_context() -> None:
    seen: list[Any] = []

    def body(args: Any, run_ctx: Any) -> None:
        seen.extend([args, run_ctx])

    tool = define_tool("t", "d", {"a": {"type": "integer"}}, text_output(), body)
    args = snapshot_json({"a": 1, "extra": [1]})
    tool.execute(args, "the-context")
    assert seen[0] is args
    assert seen[1] == "the-context"


def test_async_body_gives_an_async_execute() -> None:
    async def body(args: Any, run_ctx: Any) -> str:
        await asyncio.sleep(0)
        return str(args["text"])

    tool = define_tool(
        "t", "d", {"text": {"type": "string", "required": True}}, text_output(), body
    )
    assert inspect.iscoroutinefunction(tool.execute)
    assert asyncio.run(tool.execute(snapshot_json({"text": "hi"}), None)) == "hi"

    async def invalid() -> None:
        await tool.execute(snapshot_json({}), None)

    with pytest.raises(ToolArgsError):
        asyncio.run(invalid())


def test_sync_body_gives_a_sync_execute() -> None:
    tool = define_tool("t", "d", {}, text_output(), noop)
    assert not inspect.iscoroutinefunction(tool.execute)


def test_async_callable_object_gives_an_async_execute() -> None:
    class Body:
        async def __call__(self, args: Any, run_ctx: Any) -> int:
            return 7

    tool = define_tool("t", "d", {}, text_output(), Body())
    assert inspect.iscoroutinefunction(tool.execute)
    assert asyncio.run(tool.execute(snapshot_json({}), None)) == 7


# --- the concurrency classifier ----------------------------------------------------------------


def test_sp85_invalid_arguments_are_exclusive_without_calling_the_classifier() -> None:
    calls: list[Any] = []

    def always(args: Any) -> bool:
        calls.append(args)
        return True

    tool = define_tool(
        "t",
        "d",
        {"mode": {"type": "string", "required": True}},
        text_output(),
        noop,
        is_concurrency_safe=always,
    )
    assert classify(tool, snapshot_json({})) is False
    assert calls == []


def test_sp85_the_classifier_sees_valid_arguments() -> None:
    tool = define_tool(
        "t",
        "d",
        {"mode": {"type": "string", "required": True}},
        text_output(),
        noop,
        is_concurrency_safe=lambda args: args["mode"] == "read",
    )
    assert classify(tool, snapshot_json({"mode": "read"})) is True
    assert classify(tool, snapshot_json({"mode": "write"})) is False


# --- typed views -------------------------------------------------------------------------------


class NArgs(TypedDict):
    n: int


class OptionalN(TypedDict):
    n: NotRequired[int]


class WrongName(TypedDict):
    m: int


class NStruct(msgspec.Struct):
    n: int


N_SPEC = {"n": {"type": "integer", "required": True}}


@pytest.mark.parametrize("args_type", [OptionalN, WrongName])
def test_sp86_args_type_must_match_the_dsl(args_type: Any) -> None:
    with pytest.raises(TypeError) as info:
        define_tool("t", "d", N_SPEC, text_output(), noop, args_type=args_type)
    assert "args_type" in str(info.value)
    assert "does not match parameters" in str(info.value)


def test_sp86_mismatch_names_the_differing_keys() -> None:
    with pytest.raises(TypeError) as info:
        define_tool("t", "d", N_SPEC, text_output(), noop, args_type=WrongName)
    assert str(info.value) == (
        "define_tool(t): args_type WrongName does not match parameters: "
        "only in parameters: n; only in WrongName: m"
    )
    with pytest.raises(TypeError) as info:
        define_tool("t", "d", N_SPEC, text_output(), noop, args_type=OptionalN)
    assert str(info.value) == (
        "define_tool(t): args_type OptionalN does not match parameters: "
        "required only in parameters: n"
    )


@pytest.mark.parametrize("args_type", [NArgs, NStruct])
def test_sp86_typed_view_converts_integral_floats_and_drops_extra_keys(args_type: Any) -> None:
    seen: list[Any] = []

    def body(args: Any, run_ctx: Any) -> None:
        seen.append(args)

    tool = define_tool("t", "d", N_SPEC, text_output(), body, args_type=args_type)
    arguments = snapshot_json({"n": 1.0, "extra": True})
    tool.execute(arguments, None)
    view = seen[0]
    if args_type is NArgs:
        assert view == {"n": 1}
        assert type(view["n"]) is int
    else:
        assert view == NStruct(n=1)
    assert arguments == {"n": 1.0, "extra": True}


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int = 1


class Basket(msgspec.Struct):
    lines: list[Line]


def test_a_typed_view_keeps_the_plain_defaults_of_the_dataclasses_it_holds() -> None:
    # Built without their __init__, the dataclasses inside a view must still hold every
    # default the arguments left out, as their own attributes.
    seen: list[Any] = []
    spec = {"lines": {"type": "array", "items": {"type": "json"}, "required": True}}
    tool = define_tool("t", "d", spec, text_output(), lambda a, c: seen.append(a), args_type=Basket)
    tool.execute(snapshot_json({"lines": [{"sku": "ink"}]}), None)
    (line,) = seen[0].lines
    assert vars(line) == {"sku": "ink", "quantity": 1}
    assert msgspec.to_builtins(seen[0]) == {"lines": [{"sku": "ink", "quantity": 1}]}


def test_args_type_must_be_a_typed_dict_or_struct() -> None:
    with pytest.raises(TypeError) as info:
        define_tool("t", "d", N_SPEC, text_output(), noop, args_type=dict)
    assert (
        str(info.value) == "define_tool(t): args_type must be a TypedDict or msgspec.Struct class"
    )


def test_typed_view_drift_is_an_args_error() -> None:
    class Drifted(TypedDict):
        n: str

    tool = define_tool("t", "d", N_SPEC, text_output(), noop, args_type=Drifted)
    with pytest.raises(ToolArgsError) as info:
        tool.execute(snapshot_json({"n": 1}), None)
    assert info.value.violations[0].startswith("arguments do not fit Drifted: ")


class Summary(msgspec.Struct):
    title: str
    count: int


SUMMARY_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "required": True},
        "count": {"type": "integer", "required": True},
    },
}


def test_output_type_struct_is_returned_as_builtins_and_rendered_as_a_view() -> None:
    rendered: list[Any] = []

    def render(args: Any, value: Any) -> list[dict[str, Any]]:
        rendered.append(value)
        return [{"type": "text", "text": f"{value.title}: {value.count}"}]

    tool = define_tool(
        "summ",
        "d",
        {},
        ToolOutput(SUMMARY_SCHEMA, render),
        lambda args, run_ctx: Summary("files", 3),
        output_type=Summary,
    )
    value = tool.execute(snapshot_json({}), None)
    assert value == {"title": "files", "count": 3}
    frozen, content, _ = normalize_output(tool, snapshot_json({}), value, nested=False)
    assert frozen == {"title": "files", "count": 3}
    assert content == [{"type": "text", "text": "files: 3"}]
    assert rendered == [Summary("files", 3)]


def test_output_type_struct_from_an_awaitable_of_a_sync_body() -> None:
    async def later() -> Summary:
        return Summary("x", 1)

    tool = define_tool(
        "summ",
        "d",
        {},
        ToolOutput(SUMMARY_SCHEMA, lambda a, v: []),
        lambda args, run_ctx: later(),
        output_type=Summary,
    )

    async def run() -> Any:
        pending = tool.execute(snapshot_json({}), None)
        return await pending

    assert asyncio.run(run()) == {"title": "x", "count": 1}


def test_output_type_must_match_the_output_schema() -> None:
    with pytest.raises(TypeError) as info:
        define_tool("t", "d", {}, text_output({"type": "string"}), noop, output_type=Summary)
    assert "needs an object-rooted output schema" in str(info.value)


def test_a_struct_without_output_type_is_not_lossless() -> None:
    tool = define_tool("t", "d", {}, text_output(), lambda args, run_ctx: Summary("x", 1))
    with pytest.raises(ToolOutputError) as info:
        normalize_output(
            tool, snapshot_json({}), tool.execute(snapshot_json({}), None), nested=False
        )
    assert info.value.violations == ["value is not lossless JSON: value is Summary"]


def test_render_view_conversion_failure_is_contained_as_a_render_failure() -> None:
    tool = define_tool(
        "t",
        "d",
        N_SPEC,
        text_output(),
        noop,
        args_type=NArgs,
    )
    with pytest.raises(ToolOutputError) as info:
        normalize_output(tool, snapshot_json({"n": "not a number"}), None, nested=False)
    assert len(info.value.violations) == 1
    assert info.value.violations[0].startswith(
        "output.render failed: invalid arguments: arguments do not fit NArgs: "
    )


# --- presenters and pass-through callbacks -----------------------------------------------------


def test_presenters_validate_softly() -> None:
    tool = define_tool(
        "open",
        "d",
        {"path": {"type": "string", "required": True}, "n": {"type": "integer"}},
        text_output(),
        noop,
        present_call=lambda args: ("call", args["path"]),
        present_result=lambda args, result: ("result", args["path"], result),
    )
    assert tool.present_call is not None and tool.present_result is not None
    assert tool.present_call(snapshot_json({"path": "/a", "n": 2})) == ("call", "/a")
    assert tool.present_result(snapshot_json({"path": "/a"}), "r") == ("result", "/a", "r")
    assert tool.present_call(snapshot_json({})) is None
    assert tool.present_result(snapshot_json({"wrong": 1}), "r") is None
    assert tool.present_call("not even an object") is None


def test_presenters_receive_the_typed_view() -> None:
    tool = define_tool(
        "t",
        "d",
        N_SPEC,
        text_output(),
        noop,
        args_type=NStruct,
        present_call=lambda args: args,
    )
    assert tool.present_call is not None
    assert tool.present_call(snapshot_json({"n": 2})) == NStruct(n=2)


def test_absent_presenters_and_classifier_stay_none() -> None:
    tool = define_tool("t", "d", {}, text_output(), noop)
    assert tool.present_call is None
    assert tool.present_result is None
    assert tool.is_concurrency_safe is None
    assert tool.finalize_content is None
    assert classify(tool, snapshot_json({})) is False


def test_finalize_content_passes_through_unchanged() -> None:
    def finalize(exec_view: Any, result: Any) -> None:
        return None

    tool = define_tool("t", "d", {}, text_output(), noop, finalize_content=finalize)
    assert tool.finalize_content is finalize


def test_render_without_typed_views_is_the_authors_function() -> None:
    output = text_output()
    tool = define_tool("t", "d", {}, output, noop)
    assert tool.output is not None
    assert tool.output.render is output.render


def test_definitions_compare_by_identity() -> None:
    first = define_tool("t", "d", {}, text_output(), noop)
    second = define_tool("t", "d", {}, text_output(), noop)
    assert first != second
    assert first == first
    assert len({first, second}) == 2


# --- execute signatures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "execute",
    [lambda args: "x", lambda: "x", lambda args, ctx, extra: "x", lambda *, args, ctx: "x"],
    ids=["one-argument", "no-argument", "three-required", "keyword-only"],
)
def test_define_tool_refuses_an_execute_that_cannot_take_args_and_context(execute: Any) -> None:
    with pytest.raises(TypeError, match=r"define_tool\(t\): execute must accept two positional"):
        define_tool(name="t", description="", parameters={}, output=text_output(), execute=execute)


@pytest.mark.parametrize(
    "execute",
    [lambda args, ctx: "x", lambda *args: "x", lambda args, ctx=None, more=1: "x", print],
    ids=["two", "variadic", "defaults", "builtin"],
)
def test_define_tool_accepts_every_execute_that_can_take_args_and_context(execute: Any) -> None:
    define_tool(name="t", description="", parameters={}, output=text_output(), execute=execute)


def test_a_raw_definition_whose_execute_cannot_take_args_and_context_is_refused() -> None:
    with pytest.raises(TypeError, match=r"tool 'raw': execute must accept two positional"):
        ToolDefinition(
            name="raw", description="", parameters={}, output=text_output(), execute=lambda a: a
        )


def test_a_json_parameter_called_directly_is_checked_in_full_however_the_call_looks() -> None:
    # Through the pipeline a body gets the call's own snapshot, proven lossless already; a
    # direct call of execute proves nothing, even with frozen containers, and is walked.
    received: list[Any] = []
    tool = define_tool(
        name="take",
        description="Take any JSON.",
        parameters={"v": {"type": "json", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: received.append(args) or "ok",
    )
    forged = FrozenDict(v=FrozenList([1, FrozenList([float("nan")])]))
    with pytest.raises(ToolArgsError, match='"v"'):
        tool.execute(forged, None)
    assert received == []
    assert tool.execute(FrozenDict(v=FrozenList([1, 2])), None) == "ok"


class Limits(msgspec.Struct):
    word: str
    unit: str = "C"


LIMITS_SPEC = {"word": {"type": "string", "required": True}, "unit": {"type": "string"}}


def test_a_strict_mode_null_is_absent_for_the_renderer_as_for_the_body() -> None:
    # OpenAI's strict mode sends null for an optional argument it leaves out; the body
    # receives it absent, and so must the renderers: with an args_type view, a null where the
    # view wants a str failed the call after the body had run.
    seen: list[Any] = []
    viewed = define_tool(
        "viewed",
        "d",
        LIMITS_SPEC,
        ToolOutput(
            {"type": "string"},
            lambda args, value: [{"type": "text", "text": f"{value} {args.unit}"}],
            lambda args, value: {"unit": args.unit},
        ),
        lambda args, run_ctx: seen.append(args) or args.word,
        args_type=Limits,
    )
    plain = define_tool(
        "plain",
        "d",
        LIMITS_SPEC,
        ToolOutput(
            {"type": "string"},
            lambda args, value: [{"type": "text", "text": f"{value} {args.get('unit', 'C')}"}],
        ),
        lambda args, run_ctx: args["word"],
    )
    model_sent = snapshot_json({"word": "hot", "unit": None})
    for tool in (viewed, plain):
        value = tool.execute(model_sent, None)
        assert tool.output.render(model_sent, value) == [{"type": "text", "text": "hot C"}]
    assert viewed.output.presentation_meta is not None
    assert viewed.output.presentation_meta(model_sent, "hot") == {"unit": "C"}
    assert seen == [Limits("hot", "C")]


class InProcess:
    """A placement that runs the body right here, as an async body."""

    def place(self, tool: str, execute: Any) -> Any:
        async def run(args: Any, run_ctx: Any) -> Any:
            return execute(args, run_ctx)

        return run


@pytest.mark.parametrize("args_type", [None, Limits])
def test_a_placed_body_takes_a_strict_mode_null_as_absent(args_type: Any) -> None:
    seen: list[Any] = []
    tool = define_tool(
        "placed",
        "d",
        LIMITS_SPEC,
        text_output(),
        lambda args, run_ctx: seen.append(args) or "ok",
        args_type=args_type,
        placement=InProcess(),
    )
    assert asyncio.run(tool.execute(snapshot_json({"word": "w", "unit": None}), None)) == "ok"
    assert seen == [{"word": "w"} if args_type is None else Limits("w", "C")]
    with pytest.raises(ToolArgsError, match='"word" must be a string'):
        asyncio.run(tool.execute(snapshot_json({"word": None, "unit": None}), None))


def test_the_renderer_sees_a_null_the_arguments_were_valid_with() -> None:
    # Only arguments that do not validate lose their nulls: here the second branch takes any
    # extra key, so {"x": null} is valid as sent, and the body and the renderer both see it.
    seen: list[Any] = []
    parameters = {
        "target": {
            "required": True,
            "oneOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"x": {"type": "integer"}},
                },
                {
                    "type": "object",
                    "additionalProperties": True,
                    "properties": {"y": {"type": "string", "required": True}},
                },
            ],
        }
    }
    tool = define_tool(
        "open",
        "d",
        parameters,
        ToolOutput({"type": "string"}, lambda args, value: seen.append(args) or []),
        lambda args, run_ctx: seen.append(args) or "ok",
    )
    sent = snapshot_json({"target": {"y": "a", "x": None}})
    tool.output.render(sent, tool.execute(sent, None))
    assert seen == [sent, sent]
