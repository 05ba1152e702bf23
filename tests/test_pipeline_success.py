"""Successful execution and canonical output: the frozen value, rendered content, projection."""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest
from conftest import block, call, echo, fixture, text, value_of

from dsh_tools import (
    ExecuteBatch,
    ExecutionToken,
    HarnessError,
    ToolArgsError,
    ToolCall,
    ToolDefinition,
    ToolNotFoundError,
    ToolOutput,
    ToolSystem,
    define_tool,
)


def record_post(system: ToolSystem) -> list[Any]:
    seen: list[Any] = []

    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen.append(result)
        return await next()

    system.tools.on_post_execute(post)
    return seen


def raw_tool(
    name: str,
    execute: Any,
    *,
    schema: Any = None,
    render: Any = None,
    presentation_meta: Any = None,
    **extra: Any,
) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"{name} tool",
        parameters={"type": "object"},
        output=ToolOutput(
            schema=schema if schema is not None else {"type": "string"},
            render=render if render is not None else (lambda args, value: [block(str(value))]),
            presentation_meta=presentation_meta,
        ),
        execute=execute,
        **extra,
    )


DIFFS = {"diffs": [{"path": "a", "old_text": None, "new_text": "x"}]}


def test_rp29_echo_projects_exactly_and_observers_get_the_same_object(
    system: ToolSystem,
) -> None:
    system.tools.register(echo())
    observed: list[Any] = []
    system.tools.on_result(lambda exec, result: observed.append(result))
    result = system.execute(call("echo", {"text": "hi"}))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "hi"}],
        "is_error": False,
        "value": "hi",
    }
    assert len(observed) == 1
    assert observed[0] is result


def test_rp30_presentation_meta_is_the_projector_output(system: ToolSystem) -> None:
    system.tools.register(raw_tool("edit", lambda a, c: "ok", presentation_meta=lambda a, v: DIFFS))
    result = system.execute(call("edit"))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "ok"}],
        "is_error": False,
        "value": "ok",
        "meta": DIFFS,
    }


def test_rp30_no_projector_means_no_meta(system: ToolSystem) -> None:
    system.tools.register(echo())
    result = system.execute(call())
    assert "meta" not in result.to_dict()


def test_rp30_a_projector_returning_none_gives_a_present_null_meta(system: ToolSystem) -> None:
    system.tools.register(raw_tool("edit", lambda a, c: "ok", presentation_meta=lambda a, v: None))
    result = system.execute(call("edit"))
    assert "meta" in result.to_dict()
    assert result.meta is None


def test_rp30_a_nested_call_has_no_meta_but_keeps_its_value(system: ToolSystem) -> None:
    system.tools.register(raw_tool("edit", lambda a, c: "ok", presentation_meta=lambda a, v: DIFFS))
    result = system.execute(call("edit", parent=ExecutionToken()))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "ok"}],
        "is_error": False,
        "value": "ok",
    }


@pytest.mark.parametrize("returned", [lambda: None, {1, 2}], ids=["function", "set"])
def test_rp31_a_lossy_body_value_is_invalid_tool_output(system: ToolSystem, returned: Any) -> None:
    system.tools.register(raw_tool("lossy", lambda a, c: returned, schema={}))
    posts = record_post(system)
    result = system.execute(call("lossy"))
    assert result.is_error
    assert "not lossless JSON" in text(result)
    assert result.to_dict()["error"]["info"] == {
        "name": "ToolOutputError",
        "code": "INVALID_TOOL_OUTPUT",
    }
    assert posts == [result]


def test_rp31_a_schema_invalid_body_value_is_invalid_tool_output(system: ToolSystem) -> None:
    system.tools.register(echo(execute=lambda a, c: 42))
    posts = record_post(system)
    result = system.execute(call())
    assert result.is_error
    assert '"value" must be a string' in text(result)
    assert posts == [result]


def test_rp32_a_raising_render_is_invalid_tool_output(system: ToolSystem) -> None:
    def render(args: Any, value: Any) -> Any:
        raise RuntimeError("renderer exploded")

    system.tools.register(raw_tool("r", lambda a, c: "v", render=render))
    result = system.execute(call("r"))
    data = result.to_dict()
    assert "renderer exploded" in data["error"]["message"]
    assert data["error"]["info"] == {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}
    assert "value" not in data


def test_rp32_a_raising_presentation_meta_is_invalid_tool_output(system: ToolSystem) -> None:
    def meta(args: Any, value: Any) -> Any:
        raise RuntimeError("metadata exploded")

    system.tools.register(raw_tool("m", lambda a, c: "v", presentation_meta=meta))
    data = system.execute(call("m")).to_dict()
    assert "metadata exploded" in data["error"]["message"]
    assert data["error"]["info"] == {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}
    assert "value" not in data


def test_rp32_render_returning_a_function_is_non_lossless(system: ToolSystem) -> None:
    system.tools.register(raw_tool("r", lambda a, c: "v", render=lambda a, v: [print]))
    result = system.execute(call("r"))
    assert result.is_error
    assert "output.render returned non-lossless JSON" in text(result)


def test_rp33_the_finalizer_bounds_a_failure_content(system: ToolSystem) -> None:
    calls: list[Any] = []

    def truncate(exec: Any, result: Any) -> Any:
        calls.append(result)
        first = result.content[0]
        return [{"type": "text", "text": first["text"][:32]}]

    system.tools.register(
        raw_tool(
            "throwing-meta",
            lambda a, c: "v",
            presentation_meta=lambda a, v: {"bad": float("nan")},
            finalize_content=truncate,
        )
    )
    result = system.execute(call("throwing-meta"))
    assert result.is_error
    assert len(text(result)) == 32
    assert text(result).startswith('Error: tool "throwing-meta"')
    assert len(calls) == 1


def test_rp34_a_raising_finalizer_gives_its_error_once(system: ToolSystem) -> None:
    calls: list[int] = []

    def finalizer(exec: Any, result: Any) -> Any:
        calls.append(1)
        raise ValueError("finalizer violated its total contract")

    system.tools.register(echo(finalize_content=finalizer))
    result = system.execute(call())
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "Error: finalizer violated its total contract"}],
        "is_error": True,
        "error": {"message": "finalizer violated its total contract"},
    }
    assert calls == [1]


def test_rp34_an_async_finalizer_fails_without_a_never_awaited_warning(
    system: ToolSystem,
) -> None:
    calls: list[int] = []

    async def finalizer(exec: Any, result: Any) -> Any:
        return [block("never used")]

    def counting(exec: Any, result: Any) -> Any:
        calls.append(1)
        return finalizer(exec, result)

    system.tools.register(echo(finalize_content=counting))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = system.execute(call())
        gc.collect()
    assert result.is_error
    assert text(result).startswith("Error: ")
    assert calls == [1]
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_rp35_the_value_is_detached_and_frozen(system: ToolSystem) -> None:
    returned: list[dict[str, Any]] = []

    def body(args: Any, ctx: Any) -> Any:
        value = {"ok": True}
        returned.append(value)
        return value

    system.tools.register(raw_tool("obj", body, schema={"type": "object"}))
    result = system.execute(call("obj"))
    returned[0]["ok"] = False
    assert value_of(result) == {"ok": True}
    with pytest.raises(TypeError):
        value_of(result)["ok"] = False
    assert value_of(result) == {"ok": True}


def test_rp36_a_harness_error_keeps_its_info(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise HarnessError("disk full", "ENOSPC")

    system.tools.register(echo(execute=body))
    result = system.execute(call())
    assert result.to_dict()["error"] == {
        "message": "disk full",
        "info": {"name": "HarnessError", "code": "ENOSPC"},
    }
    assert text(result) == "Error: disk full"


def test_rp36_a_plain_exception_has_no_info(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise ValueError("just a message")

    system.tools.register(echo(execute=body))
    assert system.execute(call()).to_dict()["error"] == {"message": "just a message"}


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


def test_rp36_an_unprintable_exception_has_a_placeholder_message(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise Unprintable()

    system.tools.register(echo(execute=body))
    assert text(system.execute(call())) == "Error: <unprintable thrown value>"


def test_rp37_tool_not_found_error_shape() -> None:
    error = ToolNotFoundError("ghost")
    assert isinstance(error, HarnessError)
    assert error.name == "ToolNotFoundError"
    assert error.code == "UNKNOWN_TOOL"
    assert str(error) == 'unknown tool "ghost"'


def test_rp37_an_unregistered_tool_is_unknown_after_pre_and_post(system: ToolSystem) -> None:
    pre: list[str] = []

    async def on_pre(exec: Any, next: Any) -> Any:
        pre.append(exec.name)
        return await next()

    system.tools.on_pre_execute(on_pre)
    posts = record_post(system)
    result = system.execute(call("nope"))
    assert text(result) == 'Error: unknown tool "nope"'
    assert result.to_dict()["error"]["info"] == {
        "name": "ToolNotFoundError",
        "code": "UNKNOWN_TOOL",
    }
    assert pre == ["nope"]
    assert posts == [result]


def reader() -> ToolDefinition:
    return define_tool(
        name="reader",
        description="read a path",
        parameters={"path": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [block(v)]),
        execute=lambda args, ctx: "read " + args["path"],
    )


def test_rp38_a_typed_tool_rejects_invalid_arguments_inside_the_body_slot(
    system: ToolSystem,
) -> None:
    system.tools.register(reader())
    log: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        log.append("pre")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        log.append("wrapper")
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    posts = record_post(system)
    result = system.execute(call("reader", {}))
    assert text(result) == 'Error: invalid arguments: missing required property "path"'
    assert result.to_dict()["error"]["info"] == {"name": "ToolArgsError", "code": "INVALID_ARGS"}
    assert log == ["pre", "wrapper"]
    assert posts == [result]


def test_rp38_a_typed_tool_runs_with_valid_arguments(system: ToolSystem) -> None:
    system.tools.register(reader())
    result = system.execute(call("reader", {"path": "/x"}))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "read /x"}],
        "is_error": False,
        "value": "read /x",
    }


def test_rp38_tool_args_error_shape() -> None:
    error = ToolArgsError(['missing required property "a"', '"b" must be a number'])
    assert error.code == "INVALID_ARGS"
    assert error.violations == ['missing required property "a"', '"b" must be a number']
    assert str(error) == 'invalid arguments: missing required property "a"; "b" must be a number'


def test_rp39_raw_tools_get_unvalidated_arguments(system: ToolSystem) -> None:
    seen: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        seen.append(args)
        return [block("raw ran")]

    system.tools.register(
        fixture(
            "raw",
            body,
            parameters={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        )
    )
    result = system.execute(call("raw", {}))
    assert not result.is_error
    assert text(result) == "raw ran"
    assert seen == [{}]


def test_calls_with_hooks_and_guards_leave_no_garbage_for_the_cyclic_collector(
    system: ToolSystem,
) -> None:
    # A call's record and the view its hooks see refer to each other while it runs; once the
    # call is over nothing of it may wait for the cyclic collector, single or in a batch.
    async def passing(exec: Any, next: Any) -> Any:
        return await next()

    system.tools.register(echo())
    system.tools.on_pre_execute(passing)
    system.tools.guard(lambda exec: None)
    batch = ExecuteBatch(
        calls=[ToolCall(f"c{i}", "echo", '{"text": "x"}') for i in range(50)], max_parallel=4
    )
    system.execute(call())
    system.execute_batch(batch)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            system.execute(call())
        system.execute_batch(batch)
        assert gc.collect() == 0
    finally:
        gc.enable()
