"""Hook ordering and composition."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any

import pytest
from conftest import (
    Recording,
    arun,
    block,
    call,
    changed_after,
    context,
    echo,
    fixture,
    sources,
    text,
    value_of,
)

from dsh_tools import (
    AbortController,
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    FrozenList,
    HarnessError,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolOutput,
    ToolSystem,
    define_tool,
    event_loop,
    timeout_policy,
)


class BodyLog:
    def __init__(self, value: str = "hi") -> None:
        self.log: list[str] = []
        self.value = value

    def __call__(self, args: Any, ctx: Any) -> str:
        self.log.append("dispatch")
        return self.value


def test_rp46_pre_and_post_wrap_their_next(system: ToolSystem) -> None:
    system.tools.register(echo())
    log: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        log.append("pre:before")
        decision = await next()
        log.append("pre:after")
        return decision

    async def post(exec: Any, result: Any, next: Any) -> Any:
        log.append("post:before")
        decision = await next()
        log.append("post:after")
        return decision

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    system.execute(call())
    assert log == ["pre:before", "pre:after", "post:before", "post:after"]


def test_rp47_stages_run_pre_wrapper_body_post(system: ToolSystem) -> None:
    log: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        log.append("dispatch")
        return "hi"

    async def pre(exec: Any, next: Any) -> Any:
        log.append("pre")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        log.append("execute:before")
        result = await next()
        log.append("execute:after")
        return result

    async def post(exec: Any, result: Any, next: Any) -> Any:
        log.append("post")
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert not result.is_error
    assert log == ["pre", "execute:before", "dispatch", "execute:after", "post"]


def test_rp48_a_pre_denial_skips_wrappers_and_post_gets_an_immutable_failure(
    system: ToolSystem,
) -> None:
    system.tools.register(echo())
    entered: list[str] = []
    refusals: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        return Deny("denied by policy")

    async def wrapper(exec: Any, next: Any) -> Any:
        entered.append("wrapper")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        try:
            result.content = []
        except AttributeError:
            refusals.append("attribute")
        try:
            result.content.append(block("more"))
        except TypeError:
            refusals.append("content")
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert text(result) == "Error: denied by policy"
    assert entered == []
    assert refusals == ["attribute", "content"]


def test_rp49_a_raising_pre_hook_is_the_final_error_without_post(system: ToolSystem) -> None:
    system.tools.register(echo())
    posts: list[Any] = []

    async def pre(exec: Any, next: Any) -> Any:
        raise RuntimeError("permission hook broke")

    async def post(exec: Any, result: Any, next: Any) -> Any:
        posts.append(result)
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    assert system.execute(call()).to_dict() == {
        "content": [{"type": "text", "text": "Error: permission hook broke"}],
        "error": {"message": "permission hook broke"},
        "is_error": True,
    }
    assert posts == []


def test_rp49_a_harness_error_from_pre_keeps_its_info(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def pre(exec: Any, next: Any) -> Any:
        raise HarnessError("denied", "DENIED")

    system.tools.on_pre_execute(pre)
    assert system.execute(call()).to_dict()["error"] == {
        "message": "denied",
        "info": {"name": "HarnessError", "code": "DENIED"},
    }


def test_rp50_a_raising_wrapper_is_the_final_error_without_post(system: ToolSystem) -> None:
    system.tools.register(echo())
    posts: list[Any] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        raise RuntimeError("wrapper broke")

    async def post(exec: Any, result: Any, next: Any) -> Any:
        posts.append(result)
        return await next()

    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    assert system.execute(call()).to_dict() == {
        "content": [{"type": "text", "text": "Error: wrapper broke"}],
        "error": {"message": "wrapper broke"},
        "is_error": True,
    }
    assert posts == []


def test_rp50_a_raising_post_hook_is_the_final_error(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def post(exec: Any, result: Any, next: Any) -> Any:
        raise RuntimeError("post hook broke")

    system.tools.on_post_execute(post)
    assert system.execute(call()).to_dict() == {
        "content": [{"type": "text", "text": "Error: post hook broke"}],
        "error": {"message": "post hook broke"},
        "is_error": True,
    }


def test_rp51_a_body_failure_reaches_the_wrapper_as_a_result(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise HarnessError("kaboom", "BOOM")

    seen: list[Any] = []
    posts: list[bool] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        seen.append(result)
        return result

    async def post(exec: Any, result: Any, next: Any) -> Any:
        posts.append(result.is_error)
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    system.execute(call())
    assert seen[0].to_dict()["error"] == {
        "message": "kaboom",
        "info": {"name": "HarnessError", "code": "BOOM"},
    }
    assert posts == [True]


def test_rp52_results_cannot_be_mutated_by_wrappers_or_post(system: ToolSystem) -> None:
    system.tools.register(echo(execute=lambda a, c: "original"))
    refusals: list[str] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        try:
            result.value = "tampered"
        except AttributeError:
            refusals.append("wrapper")
        return result

    async def post(exec: Any, result: Any, next: Any) -> Any:
        try:
            result.value = "tampered"
        except AttributeError:
            refusals.append("post")
        return await next()

    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert refusals == ["wrapper", "post"]
    assert value_of(result) == "original"


def test_rp53_a_short_circuit_success_is_re_rendered_from_its_value(system: ToolSystem) -> None:
    body = BodyLog()
    system.tools.register(echo(execute=body))

    async def wrapper(exec: Any, next: Any) -> Any:
        return ToolExecutionSuccess("short-circuited", [block("ignored authored content")])

    system.tools.on_execute(wrapper)
    result = system.execute(call())
    assert body.log == []
    assert text(result) == "short-circuited"
    assert value_of(result) == "short-circuited"


def test_rp54_a_cached_result_cannot_launder_a_value_into_another_tool(
    system: ToolSystem,
) -> None:
    ran: list[str] = []

    def string_body(args: Any, ctx: Any) -> str:
        ran.append("string-output")
        return "cached"

    def object_body(args: Any, ctx: Any) -> Any:
        ran.append("object-output")
        return {"ok": True}

    system.tools.register(
        define_tool(
            name="string-output",
            description="a string",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [block(v)]),
            execute=string_body,
        )
    )
    system.tools.register(
        define_tool(
            name="object-output",
            description="an object",
            parameters={},
            output=ToolOutput(
                schema={
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"ok": {"type": "boolean", "required": True}},
                },
                render=lambda a, v: [block(str(v))],
            ),
            execute=object_body,
        )
    )
    cache: list[Any] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        if cache:
            return cache[0]
        result = await next()
        cache.append(result)
        return result

    system.tools.on_execute(wrapper)
    first = system.execute(call("string-output"))
    assert value_of(first) == "cached"
    second = system.execute(call("object-output", call_id="c2"))
    assert second.to_dict()["error"]["info"]["code"] == "INVALID_TOOL_OUTPUT"
    assert "value" not in second.to_dict()
    assert ran == ["string-output"]


def test_rp55_a_wrapper_failure_keeps_its_meta_and_contexts(system: ToolSystem) -> None:
    system.tools.register(echo())
    authored = ToolExecutionFailure(
        ToolFailure("wrapped failure", ToolErrorInfo("HarnessError", "WRAPPED")),
        [block("Error: wrapped failure")],
        {"wrapped": True},
        [context("wrapper")],
    )

    async def wrapper(exec: Any, next: Any) -> Any:
        return authored

    system.tools.on_execute(wrapper)
    result = system.execute(call())
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "Error: wrapped failure"}],
        "is_error": True,
        "error": {
            "message": "wrapped failure",
            "info": {"name": "HarnessError", "code": "WRAPPED"},
        },
        "meta": {"wrapped": True},
        "additional_contexts": [context("wrapper")],
    }


def test_rp55_a_short_circuit_success_keeps_exactly_its_contexts(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def wrapper(exec: Any, next: Any) -> Any:
        return ToolExecutionSuccess("done", [block("done")], additional_contexts=[context("w")])

    system.tools.on_execute(wrapper)
    result = system.execute(call())
    assert result.additional_contexts == [context("w")]
    assert sources(result) == ["w"]


def test_rp56_a_success_for_a_vanished_tool_is_unknown_tool(system: ToolSystem) -> None:
    dispose = system.tools.register(echo())

    async def wrapper(exec: Any, next: Any) -> Any:
        dispose()
        return ToolExecutionSuccess("hi", [block("hi")])

    system.tools.on_execute(wrapper)
    assert system.execute(call()).to_dict()["error"] == {
        "message": 'unknown tool "echo"',
        "info": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
    }


def test_rp57_prepend_puts_a_wrapper_outermost(system: ToolSystem) -> None:
    log: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        log.append("base")
        return "hi"

    def wrapper(label: str) -> Any:
        async def wrap(exec: Any, next: Any) -> Any:
            log.append(label)
            return await next()

        return wrap

    system.tools.register(echo(execute=body))
    system.tools.on_execute(wrapper("W1"))
    system.tools.on_execute(wrapper("W2"))
    system.tools.on_execute(wrapper("W0"), prepend=True)
    system.execute(call())
    assert log == ["W0", "W1", "W2", "base"]


@pytest.mark.parametrize("returned", [None, "not a result", {"is_error": False}])
def test_rp57_a_wrapper_returning_a_non_result_fails_closed(
    system: ToolSystem, returned: Any
) -> None:
    system.tools.register(echo())

    async def wrapper(exec: Any, next: Any) -> Any:
        await next()
        return returned

    system.tools.on_execute(wrapper)
    result = system.execute(call())
    assert result.is_error
    assert "tools/execute wrapper returned" in text(result)


def test_a_wrapper_returning_a_non_result_is_named_in_the_failure(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def timing(exec: Any, next: Any) -> Any:
        return await next()

    async def unwrapped(exec: Any, next: Any) -> Any:
        return (await next()).value  # the value, not the result

    system.tools.on_execute(timing)
    system.tools.on_execute(unwrapped)
    result = system.execute(call())
    assert text(result).startswith("Error: tools/execute wrapper returned str; ")
    assert text(result).endswith(
        "(the wrappers, outermost first: "
        "test_a_wrapper_returning_a_non_result_is_named_in_the_failure.<locals>.timing, "
        "test_a_wrapper_returning_a_non_result_is_named_in_the_failure.<locals>.unwrapped)"
    )


def test_rp57_next_may_be_awaited_again_to_retry(system: ToolSystem) -> None:
    attempts: list[int] = []

    def flaky(args: Any, ctx: Any) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise HarnessError("try again", "FLAKY")
        return "third time"

    async def retry(exec: Any, next: Any) -> Any:
        for _ in range(5):
            result = await next()
            if not result.is_error:
                return result
        return result

    system.tools.register(echo(execute=flaky))
    system.tools.on_execute(retry)
    result = system.execute(call())
    assert value_of(result) == "third time"
    assert len(attempts) == 3


@pytest.mark.parametrize(
    "decision", [None, "allow", True, Accept()], ids=["none", "str", "bool", "accept"]
)
def test_an_unknown_pre_decision_fails_closed(system: ToolSystem, decision: Any) -> None:
    body = Recording("hi")
    system.tools.register(echo(execute=body))
    posts: list[Any] = []

    async def pre(exec: Any, next: Any) -> Any:
        return decision

    async def post(exec: Any, result: Any, next: Any) -> Any:
        posts.append(result)
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert result.is_error
    assert "tools/pre-execute returned" in text(result)
    assert body.args == []
    assert posts == []


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Deny(42), "Deny.reason must be a str, got int"),
        (lambda: Deny(None), "Deny.reason must be a str, got NoneType"),
        (lambda: Ask(5), "Ask.reason must be a str or None, got int"),
        (lambda: Ask(b"why"), "Ask.reason must be a str or None, got bytes"),
    ],
    ids=["Deny(42)", "Deny(None)", "Ask(5)", "Ask(bytes)"],
)
def test_a_pre_decision_refuses_a_reason_that_is_not_a_str_when_built(
    system: ToolSystem, build: Any, message: str
) -> None:
    with pytest.raises(TypeError) as error:
        build()
    assert str(error.value) == message
    body = Recording("hi")
    system.tools.register(echo(execute=body))

    async def pre(exec: Any, next: Any) -> Any:
        return build()  # the hook raises: the call fails closed, naming the decision

    system.tools.on_pre_execute(pre)
    result = system.execute(call())
    assert result.is_error
    assert text(result) == f"Error: {message}"
    assert result.exception_type == "TypeError"
    assert body.args == []


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (changed_after(Deny("no"), reason=42), "Deny.reason must be a str, got int"),
        (changed_after(Ask("why"), reason=5), "Ask.reason must be a str or None, got int"),
    ],
    ids=["Deny", "Ask"],
)
def test_a_decision_whose_reason_was_changed_after_it_was_built_fails_closed(
    system: ToolSystem, decision: Any, message: str
) -> None:
    body = Recording("hi")
    system.tools.register(echo(execute=body))

    async def pre(exec: Any, next: Any) -> Any:
        return decision

    system.tools.on_pre_execute(pre)
    result = system.execute(call())
    assert result.is_error
    assert text(result) == f"Error: {message}"
    assert body.args == []


@pytest.mark.parametrize("decision", [None, Allow(), "accept"], ids=["none", "allow", "str"])
def test_an_unknown_post_decision_is_the_final_error(system: ToolSystem, decision: Any) -> None:
    system.tools.register(echo())

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return decision

    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert result.is_error
    assert "tools/post-execute returned" in text(result)


def test_an_unknown_pre_decision_names_the_pre_hooks(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def yes(exec: Any, next: Any) -> Any:
        return True  # a decision written as a predicate

    system.tools.on_pre_execute(yes)
    result = system.execute(call())
    assert text(result) == (
        "Error: tools/pre-execute returned bool; expected Allow(), Deny(reason) or Ask(reason) "
        "(the hooks, outermost first: "
        "test_an_unknown_pre_decision_names_the_pre_hooks.<locals>.yes)"
    )


def test_an_unknown_post_decision_names_the_post_hooks(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def redact(exec: Any, result: Any, next: Any) -> Any:
        return "[redacted]"  # content, not a decision

    system.tools.on_post_execute(redact)
    result = system.execute(call())
    assert text(result) == (
        "Error: tools/post-execute returned str; expected Accept(...) or Block(...) "
        "(the hooks, outermost first: "
        "test_an_unknown_post_decision_names_the_post_hooks.<locals>.redact)"
    )


def test_decision_sequences_may_be_tuples(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return Accept(content=(block("from a tuple"),), additional_contexts=(context("t"),))

    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert type(result.content) is FrozenList
    assert text(result) == "from a tuple"
    assert type(result.additional_contexts) is FrozenList
    assert sources(result) == ["t"]


def test_plain_function_hooks_work_like_async_ones(system: ToolSystem) -> None:
    system.tools.register(echo())
    log: list[str] = []

    def pre(exec: Any, next: Any) -> Any:
        log.append("pre")
        return Allow()

    def post(exec: Any, result: Any, next: Any) -> Any:
        log.append("post")
        return Accept(content=[block("sync post")])

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    assert text(system.execute(call())) == "sync post"
    assert log == ["pre", "post"]


def test_returning_next_without_await_resolves_like_the_reference(system: ToolSystem) -> None:
    log: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        log.append("body")
        return "hi"

    async def pre(exec: Any, next: Any) -> Any:
        return next()

    async def wrapper(exec: Any, next: Any) -> Any:
        return next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return next()

    system.tools.register(echo(execute=body))
    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    result = system.execute(call())
    assert value_of(result) == "hi"
    assert log == ["body"]


def test_global_and_scoped_listeners_form_one_ordered_list(system: ToolSystem) -> None:
    system.tools.register(echo())
    log: list[str] = []

    def listener(label: str) -> Any:
        async def pre(exec: Any, next: Any) -> Any:
            log.append(f"{label}:{exec.agent}")
            return await next()

        return pre

    scope = system.agent("A")
    system.tools.on_pre_execute(listener("g1"))
    scope.tools.on_pre_execute(listener("a2"))
    system.tools.on_pre_execute(listener("g3"))
    scope.tools.on_pre_execute(listener("a0"), prepend=True)
    system.execute(call(agent="A"))
    system.execute(call(agent="B"))
    system.execute(call())
    assert log == [
        "a0:A", "g1:A", "a2:A", "g3:A",
        "g1:B", "g3:B",
        "g1:None", "g3:None",
    ]  # fmt: skip


def test_only_the_dispatch_signal_is_assignable(system: ToolSystem) -> None:
    system.tools.register(echo())
    refusals: list[str] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        for value in (None, "signal", 1):
            try:
                exec.signal = value
            except TypeError:
                refusals.append(f"signal={value!r}")
        for name in ("name", "call_id", "arguments", "agent", "parent", "token"):
            try:
                setattr(exec, name, None)
            except AttributeError:
                refusals.append(name)
        for name in ("signal", "name"):
            try:
                delattr(exec, name)
            except AttributeError:
                refusals.append(f"del {name}")
        return await next()

    system.tools.on_execute(wrapper)
    assert not system.execute(call()).is_error
    assert refusals == [
        "signal=None",
        "signal='signal'",
        "signal=1",
        "name",
        "call_id",
        "arguments",
        "agent",
        "parent",
        "token",
        "del signal",
        "del name",
    ]


def test_pre_and_post_views_and_the_run_context_are_read_only(system: ToolSystem) -> None:
    refusals: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        try:
            ctx.signal = AbortController().signal
        except AttributeError:
            refusals.append("body")
        return "hi"

    async def pre(exec: Any, next: Any) -> Any:
        try:
            exec.signal = AbortController().signal
        except AttributeError:
            refusals.append("pre")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        try:
            exec.signal = AbortController().signal
        except AttributeError:
            refusals.append("post")
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    system.execute(call())
    assert refusals == ["pre", "body", "post"]


def test_the_listener_list_is_captured_when_a_stage_starts(system: ToolSystem) -> None:
    system.tools.register(echo())
    log: list[str] = []

    async def late(exec: Any, next: Any) -> Any:
        log.append(f"late:{exec.call_id}")
        return await next()

    async def first(exec: Any, next: Any) -> Any:
        log.append(f"first:{exec.call_id}")
        if exec.call_id == "c1":
            system.tools.on_pre_execute(late)
        return await next()

    system.tools.on_pre_execute(first)
    system.execute(call(call_id="c1"))
    system.execute(call(call_id="c2"))
    assert log == ["first:c1", "first:c2", "late:c2"]


def test_defer_context_after_the_dispatch_settled_is_ignored(system: ToolSystem) -> None:
    contexts: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        contexts.append(ctx)
        ctx.defer_context(context("in-time"))
        return "hi"

    async def post(exec: Any, result: Any, next: Any) -> Any:
        contexts[0].defer_context(context("too-late"))
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.on_post_execute(post)
    assert sources(system.execute(call())) == ["in-time"]


def test_signal_fusion_leaves_no_listener_on_the_callers_signal(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def wrapper(exec: Any, next: Any) -> Any:
        exec.signal = AbortController().signal
        return await next()

    system.tools.on_execute(wrapper)
    controller = AbortController()
    for n in range(50):
        assert not system.execute(call(call_id=f"c{n}", signal=controller.signal)).is_error
    assert not controller.signal._callbacks


def test_a_blocking_execute_runs_a_hook_free_plain_call_without_an_event_loop(
    system: ToolSystem,
) -> None:
    seen: list[bool] = []

    def body(args: Any, ctx: Any) -> str:
        seen.append(_loop_running())
        return "plain"

    system.tools.register(
        define_tool(
            name="plain",
            description="A plain-function body.",
            parameters={},
            output=ToolOutput(
                schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
            ),
            execute=body,
        )
    )
    assert text(system.execute(call("plain", {}))) == "plain"
    assert seen == [False]


def test_hooks_under_a_blocking_execute_run_on_a_loop_and_may_await_asyncio(
    system: ToolSystem,
) -> None:
    system.tools.register(echo())
    seen: list[Any] = []

    async def sleepy(exec: Any, next: Any) -> Any:
        await asyncio.sleep(0.001)  # a hook is async code: anything asyncio works in it
        seen.append(_loop_running())
        return await next()

    async def after(exec: Any, result: Any, next: Any) -> Any:
        loop = await event_loop()
        seen.append(loop is asyncio.get_running_loop())
        return await next()

    system.tools.on_pre_execute(sleepy)
    system.tools.on_execute(sleepy)
    system.tools.on_post_execute(after)
    result = system.execute(call("echo", {"text": "hi"}))
    assert text(result) == "hi"
    assert seen == [True, True, True]
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


@pytest.mark.parametrize("stage", ["pre", "wrapper", "post"])
def test_a_lone_hook_of_any_stage_may_await_asyncio_under_a_blocking_execute(
    system: ToolSystem, stage: str
) -> None:
    # The call finds its loop at whichever stage first has a hook (and only once): a hook of a
    # later stage alone must still get one.
    system.tools.register(echo())
    log: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        await asyncio.sleep(0.001)
        log.append("pre")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        await asyncio.sleep(0.001)
        log.append("wrapper")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await asyncio.sleep(0.001)
        log.append("post")
        return await next()

    system.tools.guard(lambda exec: log.append("guard"))
    {"pre": system.tools.on_pre_execute, "wrapper": system.tools.on_execute}.get(
        stage, system.tools.on_post_execute
    )({"pre": pre, "wrapper": wrapper, "post": post}[stage])
    for _ in range(2):  # the second call starts on the thread's loop as it was left
        log.clear()
        assert text(system.execute(call("echo", {"text": "hi"}))) == "hi"
        assert log == (["pre", "guard"] if stage == "pre" else ["guard", stage])


def test_event_loop_on_a_running_loop_returns_it_at_once(system: ToolSystem) -> None:
    async def main() -> bool:
        return await event_loop() is asyncio.get_running_loop()

    assert asyncio.run(main())


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize(
    ("register", "wrong_shape", "expected"),
    [
        ("on_pre_execute", lambda exec: None, "pre_execute listener .* 2 positional arguments"),
        ("on_execute", lambda exec: None, r"execute listener .* \(exec, next\)"),
        ("on_post_execute", lambda exec, next: None, r"\(exec, result, next\)"),
        ("on_result", lambda exec: None, r"result listener .* \(exec, result\)"),
        ("guard", lambda: None, r"guard listener .* 1 positional argument \(exec\)"),
        ("on_change", lambda changed: None, "change listener .* 0 positional arguments"),
    ],
)
def test_a_listener_that_cannot_take_its_arguments_is_refused_when_registered(
    system: ToolSystem, register: str, wrong_shape: Any, expected: str
) -> None:
    system.tools.register(echo())
    with pytest.raises(TypeError, match=expected):
        getattr(system.tools, register)(wrong_shape)
    # Nothing was registered: calls run as before.
    assert text(system.execute(call("echo", {"text": "hi"}))) == "hi"


async def _async_generator_hook(*args: Any) -> Any:
    yield Allow()  # a slip: a generator never runs its body when called


def _generator_hook(*args: Any) -> Any:
    yield Allow()


@pytest.mark.parametrize("hook", [_async_generator_hook, _generator_hook], ids=["async", "plain"])
@pytest.mark.parametrize(
    "register",
    ["on_pre_execute", "on_execute", "on_post_execute", "on_result", "guard", "on_change"],
)
def test_a_generator_function_listener_is_refused_when_registered(
    system: ToolSystem, register: str, hook: Any
) -> None:
    """Calling a generator function runs none of its body: as a hook it could only fail every
    call, and as an observer it would never observe anything, silently."""
    system.tools.register(echo())
    with pytest.raises(TypeError, match=r"generator_hook is a generator function"):
        getattr(system.tools, register)(hook)
    assert text(system.execute(call("echo", {"text": "hi"}))) == "hi"


@pytest.mark.parametrize("register", ["on_pre_execute", "on_result", "on_code_dispatch_log"])
def test_the_timeout_policy_registered_as_another_kind_of_listener_is_refused(
    system: ToolSystem, register: str
) -> None:
    """It takes (exec, next) as a pre-execute hook does, so only its kind tells them apart:
    registered elsewhere it would fail every call (or every observation) with an
    AttributeError that does not say what was wrong."""
    system.tools.register(echo())
    with pytest.raises(TypeError, match=r"an execute wrapper: register it with tools.on_execute"):
        getattr(system.tools, register)(timeout_policy(default_ms=1000))
    assert text(system.execute(call("echo", {"text": "hi"}))) == "hi"
    system.tools.on_execute(timeout_policy(default_ms=1000))  # where it belongs
    assert text(system.execute(call("echo", {"text": "hi"}, call_id="c2"))) == "hi"


def test_listeners_of_any_callable_shape_that_takes_the_arguments_are_accepted(
    system: ToolSystem,
) -> None:
    class Observer:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, exec: Any, result: Any, *rest: Any) -> None:
            self.seen.append(exec.call_id)

    def adapted(fn: Any) -> Any:
        @functools.wraps(fn)  # says it wraps a one-argument function; takes what it is given
        async def hook(exec: Any, next: Any) -> Any:
            fn(exec)
            return await next()

        return hook

    observer = Observer()
    system.tools.register(echo())
    system.tools.on_pre_execute(adapted(lambda exec: None))
    system.tools.on_result(observer)
    system.tools.guard(lambda *args, **kwargs: None)
    system.tools.on_change(print)  # a builtin whose signature cannot be read
    assert text(system.execute(call("echo", {"text": "hi"}, call_id="c1"))) == "hi"
    assert observer.seen == ["c1"]


@pytest.mark.parametrize("forgetful_is_outermost", [True, False], ids=["outermost", "inner"])
@pytest.mark.parametrize("point", ["pre-execute", "execute", "post-execute"])
def test_a_hook_that_forgets_to_return_next_s_answer_is_among_those_named(
    system: ToolSystem, point: str, forgetful_is_outermost: bool
) -> None:
    # The usual slip: the hook awaits next() and returns nothing. An outer hook passes on what
    # next() answered, so the failure names the stage's hooks, outermost first.
    body = Recording("hi")
    system.tools.register(echo(execute=body))

    async def forgetful(*args: Any) -> None:
        await args[-1]()

    async def passing(*args: Any) -> Any:
        return await args[-1]()

    register = {
        "pre-execute": system.tools.on_pre_execute,
        "execute": system.tools.on_execute,
        "post-execute": system.tools.on_post_execute,
    }[point]
    register(passing)
    register(forgetful, prepend=forgetful_is_outermost)
    result = system.execute(call())
    assert result.is_error
    local = "test_a_hook_that_forgets_to_return_next_s_answer_is_among_those_named.<locals>"
    order = ["forgetful", "passing"] if forgetful_is_outermost else ["passing", "forgetful"]
    assert text(result).endswith(
        " returned NoneType; "
        + {
            "pre-execute": "expected Allow(), Deny(reason) or Ask(reason)",
            "execute": "expected ToolExecutionSuccess or ToolExecutionFailure",
            "post-execute": "expected Accept(...) or Block(...)",
        }[point]
        + " (a hook returns its own decision or what next() answers (return await next()); "
        f"the hooks, outermost first: {local}.{order[0]}, {local}.{order[1]})"
    )


def test_an_outer_hook_may_answer_for_an_inner_one_that_returned_none(system: ToolSystem) -> None:
    # What an outer hook does with next()'s answer is its own business: its own decision
    # stands.
    system.tools.register(echo(execute=Recording("hi")))

    async def inner(exec: Any, next: Any) -> None:
        await next()

    async def outer(exec: Any, next: Any) -> Any:
        await next()
        return Allow()

    system.tools.on_pre_execute(outer)
    system.tools.on_pre_execute(inner)
    assert not system.execute(call()).is_error


traced_call: contextvars.ContextVar[str] = contextvars.ContextVar("traced_call", default="-")


@pytest.mark.parametrize("stage", ["pre-execute", "execute-wrapper", "post-execute"])
def test_what_a_hook_sets_in_its_context_stays_with_its_call_under_execute_async(
    system: ToolSystem, stage: str
) -> None:
    # As under the blocking execute() and in a batch: the call's steps run in a copy of the
    # caller's context, so a hook that marks the call it traces (and never resets the mark)
    # leaves the harness's own task, and the next call's hooks, as they were.
    system.tools.register(echo())
    seen: list[tuple[str, str]] = []

    def trace(exec: Any) -> None:
        seen.append((exec.call_id, traced_call.get()))
        traced_call.set(exec.call_id)

    async def pre(exec: Any, next: Any) -> Any:
        trace(exec)
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        trace(exec)
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        trace(exec)
        return await next()

    if stage == "pre-execute":
        system.tools.on_pre_execute(pre)
    elif stage == "execute-wrapper":
        system.tools.on_execute(wrapper)
    else:
        system.tools.on_post_execute(post)

    async def harness() -> str:
        traced_call.set("the harness's")
        await system.execute_async(call(call_id="c1"))
        await system.execute_async(call(call_id="c2"))
        return traced_call.get()

    assert arun(harness()) == "the harness's"
    assert seen == [("c1", "the harness's"), ("c2", "the harness's")]


def test_a_pre_execute_hooks_context_reaches_the_body_under_execute_async(
    system: ToolSystem,
) -> None:
    seen: list[str] = []

    async def body(args: Any, ctx: Any) -> str:
        seen.append(traced_call.get())
        return "ok"

    system.tools.register(echo(execute=body))

    async def pre(exec: Any, next: Any) -> Any:
        traced_call.set(exec.call_id)
        return await next()

    system.tools.on_pre_execute(pre)
    arun(system.execute_async(call(call_id="c1")))
    assert seen == ["c1"]


def test_a_refused_call_says_which_stage_refused_it(system: ToolSystem) -> None:
    """A tracer (or a harness's UI) learns from the result which policy stage refused a
    call, which the model-visible text and the error's shape (no code for a denial) do not
    say; a fault or a body's failure is no refusal."""

    def broken(args: Any, ctx: Any) -> Any:
        raise ValueError("the body broke")

    system.tools.register(echo())
    system.tools.register(fixture("broken", broken))
    system.approval = lambda *, agent, tool_name, call_id, signal: "rejected"

    async def policy(exec: Any, next: Any) -> Any:
        target = exec.arguments.get("text")
        if target == "deny":
            return Deny("the policy says no")
        if target == "ask":
            return Ask("a person decides")
        if target == "raise":
            raise RuntimeError("the policy broke")
        return await next()

    async def redact(exec: Any, result: Any, next: Any) -> Any:
        decision = await next()
        if exec.arguments.get("text") == "block":
            return Block([{"type": "text", "text": "redacted"}])
        return decision

    seen: dict[str, Any] = {}
    system.tools.on_pre_execute(policy)
    system.tools.guard(lambda exec: "guarded" if exec.arguments.get("text") == "guard" else None)
    system.tools.on_post_execute(redact)
    system.tools.on_result(lambda exec, result: seen.update({exec.call_id: result}))
    expected = {
        "deny": "pre-execute",
        "ask": "approval",
        "guard": "guard",
        "block": "post-execute",
        "raise": None,
        "hi": None,
    }
    for target, stage in expected.items():
        result = system.execute(call("echo", {"text": target}, call_id=target, agent="A"))
        assert result.is_error == (target != "hi"), target
        assert getattr(result, "refused_by", None) == stage, target
        assert seen[target] == result
        assert "refused_by" not in result.to_dict()
    broken_result = system.execute(call("broken", call_id="b"))
    assert isinstance(broken_result, ToolExecutionFailure)
    assert broken_result.refused_by is None
