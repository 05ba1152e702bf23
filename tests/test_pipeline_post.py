"""Post-execute decisions (accept, replace, block), contexts and the captured finalizer."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import (
    block,
    call,
    changed_after,
    context,
    echo,
    fixture,
    not_lossless,
    post_returning,
    projected,
    sources,
    text,
    value_of,
)

from dsh_tools import (
    Accept,
    Block,
    HarnessError,
    ToolExecutionSuccess,
    ToolOutput,
    ToolSystem,
    define_tool,
    tool,
)


def raising(message: str, code: str | None = None) -> Any:
    def body(args: Any, ctx: Any) -> Any:
        if code is None:
            raise RuntimeError(message)
        raise HarnessError(message, code)

    return body


def test_rp58_accept_content_keeps_value_and_meta(system: ToolSystem) -> None:
    system.tools.register(projected())
    post_returning(system, Accept(content=[block("policy content")]))
    assert system.execute(call("projected")).to_dict() == {
        "is_error": False,
        "value": {"text": "body"},
        "content": [{"type": "text", "text": "policy content"}],
        "meta": {"projected": "body"},
    }


def test_rp58_accept_value_re_normalizes_and_adds_contexts(system: ToolSystem) -> None:
    system.tools.register(projected())
    post_returning(
        system, Accept(value={"text": "policy value"}, additional_contexts=[context("C")])
    )
    assert system.execute(call("projected")).to_dict() == {
        "is_error": False,
        "value": {"text": "policy value"},
        "content": [{"type": "text", "text": "render:policy value"}],
        "meta": {"projected": "policy value"},
        "additional_contexts": [context("C")],
    }


def test_rp59_accept_value_on_echo_has_no_contexts_field(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Accept(value="replacement"))
    assert system.execute(call()).to_dict() == {
        "is_error": False,
        "value": "replacement",
        "content": [{"type": "text", "text": "replacement"}],
    }


def test_rp60_accept_cannot_replace_both_value_and_content(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Accept(value="x", content=[block("c")]))
    assert system.execute(call()).to_dict()["error"] == {
        "message": "tools/post-execute accept decision cannot replace both value and content"
    }


def test_rp60_a_present_null_value_counts_as_set(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Accept(value=None, content=[block("c")]))
    assert text(system.execute(call())) == (
        "Error: tools/post-execute accept decision cannot replace both value and content"
    )


def test_rp61_an_invalid_replacement_value_is_invalid_output(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Accept(value=1))
    data = system.execute(call()).to_dict()
    assert data["error"]["info"] == {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}
    assert "value" not in data


def test_an_invalid_replacement_value_names_the_hook_not_the_tool(system: ToolSystem) -> None:
    # The tool's own value was fine: the error must send the reader to the hook.
    system.tools.register(echo())
    post_returning(system, Accept(value=1))
    assert system.execute(call()).to_dict()["error"]["message"] == (
        'tool "echo": the value a post-execute hook put in place with Accept(value=...) is '
        'invalid output: "value" must be a string'
    )


class Point(msgspec.Struct):
    x: int
    y: int


@tool
def locate(name: str) -> tuple[Point, str]:
    """Where a thing is, and on which map."""
    return Point(1, 2), "street"


def test_a_typed_tools_replacement_value_is_converted_as_its_bodys_own(
    system: ToolSystem,
) -> None:
    # The Struct (and the tuple) a @tool body returns became JSON data, but the same from a
    # hook failed the call: "value is not lossless JSON: value is tuple".
    system.tools.register(locate)
    post_returning(system, Accept(value=(Point(5, 6), "aerial")))
    result = system.execute(call("locate", {"name": "cafe"}))
    assert value_of(result) == [{"x": 5, "y": 6}, "aerial"]


def test_a_typed_tools_value_from_a_wrapper_is_converted_as_its_bodys_own(
    system: ToolSystem,
) -> None:
    system.tools.register(locate)

    async def cached(exec: Any, next: Any) -> Any:
        return ToolExecutionSuccess((Point(7, 8), "cached"), [block("cached")])

    system.tools.on_execute(cached)
    result = system.execute(call("locate", {"name": "cafe"}))
    assert value_of(result) == [{"x": 7, "y": 8}, "cached"]


@tool
def position(name: str) -> Point:
    """Where a thing is."""
    return Point(1, 2)


def test_a_typed_tools_replacement_value_still_meets_its_output_schema(
    system: ToolSystem,
) -> None:
    system.tools.register(position)
    post_returning(system, Accept(value=Point(5, "six")))  # type: ignore[arg-type]
    assert system.execute(call("position", {"name": "cafe"})).to_dict()["error"]["message"] == (
        'tool "position": the value a post-execute hook put in place with Accept(value=...) is '
        'invalid output: "value.y" must be an integer'
    )


def test_a_define_tool_output_type_struct_from_a_hook_is_taken_as_from_its_body(
    system: ToolSystem,
) -> None:
    # A body may return the tool's output_type Struct; a hook handing one back failed the
    # call: "value is not lossless JSON: value is Point".
    system.tools.register(
        define_tool(
            name="where",
            description="Where a thing is.",
            parameters={},
            output=ToolOutput(
                schema={
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "x": {"type": "integer", "required": True},
                        "y": {"type": "integer", "required": True},
                    },
                },
                render=lambda args, value: [block(f"{value.x},{value.y}")],
            ),
            execute=lambda args, ctx: Point(1, 2),
            output_type=Point,
        )
    )
    post_returning(system, Accept(value=Point(5, 6)))
    result = system.execute(call("where", {}))
    assert value_of(result) == {"x": 5, "y": 6}
    assert text(result) == "5,6"


def test_rp61_a_failed_result_value_cannot_be_replaced(system: ToolSystem) -> None:
    system.tools.register(echo(execute=raising("body failed")))
    post_returning(system, Accept(value="replacement"))
    assert system.execute(call()).to_dict()["error"] == {
        "message": "tools/post-execute cannot replace the value of a failed result"
    }


def test_rp61_replacing_the_value_of_a_vanished_tool_is_unknown_tool(system: ToolSystem) -> None:
    dispose = system.tools.register(echo())

    async def post(exec: Any, result: Any, next: Any) -> Any:
        dispose()
        return Accept(value="replacement")

    system.tools.on_post_execute(post)
    assert system.execute(call()).to_dict()["error"]["info"] == {
        "name": "ToolNotFoundError",
        "code": "UNKNOWN_TOOL",
    }


def test_rp62_block_replaces_the_result_with_its_feedback(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Block(feedback=[block("blocked by policy")]))
    assert system.execute(call("echo", {"text": "secret"})).to_dict() == {
        "is_error": True,
        "error": {"message": "blocked by policy"},
        "content": [{"type": "text", "text": "blocked by policy"}],
    }


def blocked(system: ToolSystem, feedback: list[Any]) -> Any:
    post_returning(system, Block(feedback=feedback))
    return system.execute(call())


def test_rp63_empty_block_feedback_has_the_default_message(system: ToolSystem) -> None:
    system.tools.register(echo())
    result = blocked(system, [])
    assert result.error.message == "tool result blocked by post-execute policy"
    assert result.content == []


def test_rp63_non_text_feedback_is_named_by_type(system: ToolSystem) -> None:
    system.tools.register(echo())
    feedback = [{"type": "reasoning", "text": "private rationale"}]
    result = blocked(system, feedback)
    assert result.error.message == "[reasoning content]"
    assert result.content == feedback


def test_rp63_mixed_feedback_joins_with_newlines(system: ToolSystem) -> None:
    system.tools.register(echo())
    feedback = [block("a"), {"type": "image", "data": "AAAA", "mime_type": "image/png"}, block("b")]
    result = blocked(system, feedback)
    assert result.error.message == "a\n[image content]\nb"
    assert result.content == feedback


def test_rp63_non_json_feedback_fails_materialization(system: ToolSystem) -> None:
    system.tools.register(echo())
    result = blocked(system, [{"type": "text", "text": "x", "bad": {1, 2}}])
    assert result.to_dict() == not_lossless("tool result", "content[0].bad is set")


def test_rp64_accept_content_on_a_failure_keeps_the_error(system: ToolSystem) -> None:
    system.tools.register(echo(execute=raising("disk full", "ENOSPC")))
    post_returning(system, Accept(content=[block("rewritten")]))
    result = system.execute(call())
    assert result.to_dict() == {
        "is_error": True,
        "error": {"message": "disk full", "info": {"name": "HarnessError", "code": "ENOSPC"}},
        "content": [{"type": "text", "text": "rewritten"}],
    }


def test_rp65_accept_contexts_are_attached(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Accept(additional_contexts=[context("fyi")]))
    result = system.execute(call())
    assert not result.is_error
    assert result.additional_contexts == [context("fyi")]


def test_rp65_block_contexts_are_attached_to_the_failure(system: ToolSystem) -> None:
    system.tools.register(echo())
    post_returning(system, Block(feedback=[block("no")], additional_contexts=[context("why")]))
    result = system.execute(call())
    assert result.is_error
    assert sources(result) == ["why"]


def test_rp66_contexts_order_body_then_wrapper_then_post(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(context("nested-1", meta={"n": 1}))
        ctx.defer_context(context("nested-2"))
        return "composite"

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        return msgspec.structs.replace(
            result,
            additional_contexts=[*result.additional_contexts, context("wrapper")],
        )

    async def post(exec: Any, result: Any, next: Any) -> Any:
        decision = await next()
        return Accept(additional_contexts=[context("post"), *decision.additional_contexts])

    system.tools.register(echo(execute=body))
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert not result.is_error
    assert sources(result) == ["nested-1", "nested-2", "wrapper", "post"]
    assert result.additional_contexts[0]["meta"] == {"n": 1}
    assert "meta" not in result.additional_contexts[1]


def deferring_then_raising(args: Any, ctx: Any) -> Any:
    ctx.defer_context(context("nested"))
    raise RuntimeError("body failed after deferring")


def test_rp67_deferred_contexts_survive_a_body_failure(system: ToolSystem) -> None:
    system.tools.register(echo(execute=deferring_then_raising))
    result = system.execute(call())
    assert result.is_error
    assert sources(result) == ["nested"]


def test_rp67_a_block_keeps_only_its_own_contexts(system: ToolSystem) -> None:
    system.tools.register(echo(execute=deferring_then_raising))
    post_returning(
        system, Block(feedback=[block("blocked")], additional_contexts=[context("block-only")])
    )
    result = system.execute(call())
    assert sources(result) == ["block-only"]


def test_rp68_a_lossy_deferred_context_fails_the_whole_result(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> str:
        ctx.defer_context(context("bad", meta={"when": object()}))
        ctx.defer_context(context("fine"))
        return "hi"

    system.tools.register(echo(execute=body))
    result = system.execute(call())
    assert result.to_dict() == not_lossless(
        "tool result", "additional_contexts[0].meta.when is object"
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Block("hidden"),  # type: ignore[arg-type]
            "Block.feedback must be a list or tuple of content blocks, got str",
        ),
        (
            lambda: Block([block("no")], additional_contexts=context("why")),  # type: ignore[arg-type]
            "Block.additional_contexts must be a list or tuple of contexts, got dict",
        ),
        (
            lambda: Accept(content="replaced"),
            "Accept.content must be a list or tuple of content blocks, got str",
        ),
        (
            lambda: Accept(content=None),
            "Accept.content must be a list or tuple of content blocks, got NoneType",
        ),
        (
            lambda: Accept(additional_contexts=5),  # type: ignore[arg-type]
            "Accept.additional_contexts must be a list or tuple of contexts, got int",
        ),
    ],
    ids=[
        "Block(str)",
        "Block(additional_contexts=dict)",
        "Accept(content=str)",
        "Accept(content=None)",
        "Accept(additional_contexts=int)",
    ],
)
def test_a_post_decision_refuses_a_field_that_is_not_a_list_when_built(
    system: ToolSystem, build: Any, message: str
) -> None:
    with pytest.raises(TypeError) as error:
        build()
    assert str(error.value) == message

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return build()  # the hook raises: the call fails closed, naming the field

    system.tools.register(echo())
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert result.to_dict() == {
        "content": [{"type": "text", "text": f"Error: {message}"}],
        "is_error": True,
        "error": {"message": message},
    }
    assert result.exception_type == "TypeError"


@pytest.mark.parametrize(
    "decision",
    [
        changed_after(Block([]), feedback="hidden"),
        changed_after(Accept(content=[]), content="replaced"),
    ],
    ids=["Block(str)", "Accept(content=str)"],
)
def test_content_that_is_not_a_list_of_blocks_is_named_as_such(
    system: ToolSystem, decision: Any
) -> None:
    # A decision changed after it was built is checked again when the pipeline applies it.
    system.tools.register(echo())
    post_returning(system, decision)
    result = system.execute(call())
    assert result.to_dict() == not_lossless(
        "tool result", "content must be a list of blocks, got str"
    )


def test_rp69_the_finalizer_captured_at_entry_runs_after_the_tool_is_gone(
    system: ToolSystem,
) -> None:
    seen: list[bool] = []

    def finalizer(exec: Any, result: Any) -> Any:
        assert result.is_error
        seen.append(result.is_error)
        return [block("bounded failure")]

    dispose = system.tools.register(echo(finalize_content=finalizer))

    async def pre(exec: Any, next: Any) -> Any:
        dispose()
        raise HarnessError("policy failed", "POLICY_FAILED")

    system.tools.on_pre_execute(pre)
    assert system.execute(call()).to_dict() == {
        "content": [{"type": "text", "text": "bounded failure"}],
        "is_error": True,
        "error": {
            "message": "policy failed",
            "info": {"name": "HarnessError", "code": "POLICY_FAILED"},
        },
    }
    assert seen == [True]
    assert system.tools.get("echo") is None


def test_rp70_a_tool_registered_mid_call_runs_without_its_finalizer(system: ToolSystem) -> None:
    finalized: list[Any] = []

    def finalizer(exec: Any, result: Any) -> Any:
        finalized.append(result)
        return [block("finalized")]

    async def pre(exec: Any, next: Any) -> Any:
        if system.tools.get("echo") is None:
            system.tools.register(
                echo(execute=lambda a, c: "late body", finalize_content=finalizer)
            )
        return await next()

    system.tools.on_pre_execute(pre)
    result = system.execute(call())
    assert value_of(result) == "late body"
    assert text(result) == "late body"
    assert finalized == []
    later = system.execute(call(call_id="c2"))
    assert value_of(later) == "late body"
    assert text(later) == "finalized"
    assert len(finalized) == 1


def test_contexts_given_as_a_single_dict_fail_instead_of_splicing_its_keys(
    system: ToolSystem,
) -> None:
    deferred = context("body")
    single = context("post")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(deferred)
        return [{"type": "text", "text": "ok"}]

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await next()
        # one context, not a list of them (set after it was built, past Accept's own check)
        return changed_after(Accept(), additional_contexts=single)

    system.tools.register(fixture("x", body))
    system.tools.on_post_execute(post)

    result = system.execute(call("x", {}))

    assert result.is_error
    assert "additional_contexts" in text(result)
    assert "source" not in result.additional_contexts


def test_a_pass_through_post_still_refuses_a_wrappers_single_dict_of_contexts(
    system: ToolSystem,
) -> None:
    # A post-execute chain that passes Accept() through keeps the result as it is, but only
    # once its contexts have passed the same check a rebuilt result would.
    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        return ToolExecutionSuccess(
            result.value, result.content, additional_contexts=context("wrapper")
        )

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return await next()

    system.tools.register(fixture("x", lambda args, ctx: [{"type": "text", "text": "ok"}]))
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)

    result = system.execute(call("x", {}))

    assert result.is_error
    assert "additional_contexts" in text(result)
