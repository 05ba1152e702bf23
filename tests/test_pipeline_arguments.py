"""Argument materialization and execution identity (call id, name, agent, token)."""

from __future__ import annotations

import collections
import pickle
from typing import Any

import msgspec
import pytest
from conftest import Recording, call, echo, fixture, not_lossless, text
from msgspec import UNSET
from pool_support import tool_call

from dsh_tools import (
    AbortController,
    AbortSignal,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    ExecutionToken,
    FrozenDict,
    FrozenList,
    ToolCall,
    ToolSystem,
)
from dsh_tools.registry._json_text import parse_arguments

ARGUMENTS = "tool execution arguments"


class Phases:
    """Installs a listener at every stage and records which ran."""

    def __init__(self, system: ToolSystem) -> None:
        self.log: list[str] = []
        self.observed: list[tuple[Any, Any]] = []
        self.scoped: list[Any] = []

        async def pre(exec: Any, next: Any) -> Any:
            self.log.append("pre")
            return await next()

        async def wrapper(exec: Any, next: Any) -> Any:
            self.log.append("wrapper")
            return await next()

        async def post(exec: Any, result: Any, next: Any) -> Any:
            self.log.append("post")
            return await next()

        def guard(exec: Any) -> None:
            self.log.append("guard")

        system.tools.on_pre_execute(pre)
        system.tools.on_execute(wrapper)
        system.tools.on_post_execute(post)
        system.tools.guard(guard)
        system.tools.on_result(lambda exec, result: self.observed.append((exec, result)))
        system.agent("A").tools.on_result(lambda exec, result: self.scoped.append(result))


class Opaque:
    pass


class SubDict(dict[str, Any]):
    pass


def _self_containing() -> dict[str, Any]:
    value: dict[str, Any] = {"name": "loop"}
    value["self"] = value
    return value


LOSSY = [
    ({"invalid": lambda: None}, "lambda", "arguments.invalid is function"),
    ({"invalid": {1, 2}}, "set", "arguments.invalid is set"),
    ({"invalid": (1, 2)}, "tuple", "arguments.invalid is tuple"),
    ({1: "x"}, "int-key", "arguments is dict with int key"),
    ({"x": float("nan")}, "nan", "arguments.x is float (NaN)"),
    (-0.0, "neg-zero", "arguments is float (-0.0)"),
    (SubDict(a=1), "dict-subclass", "arguments is SubDict"),
    (collections.OrderedDict(a=1), "ordered-dict", "arguments is OrderedDict"),
    ({"x": Opaque()}, "object", "arguments.x is Opaque"),
    (_self_containing(), "cycle", "arguments.self is cycle"),
]


@pytest.mark.parametrize(
    ("arguments", "detail"), [(a, d) for a, _, d in LOSSY], ids=[i for _, i, _ in LOSSY]
)
def test_rp40_lossy_arguments_finish_without_any_hook(
    system: ToolSystem, arguments: Any, detail: str
) -> None:
    body = Recording("x")
    system.tools.register(echo(execute=body))
    phases = Phases(system)
    parent = ExecutionToken()
    signal = AbortController().signal
    before = repr(arguments)
    original_type = type(arguments)

    result = system.execute(call("echo", arguments, agent="A", parent=parent, signal=signal))
    assert result.to_dict() == not_lossless(ARGUMENTS, detail)
    assert phases.log == []
    assert body.args == []
    assert len(phases.observed) == 1
    exec, observed = phases.observed[0]
    assert observed is result
    assert exec.arguments is UNSET
    assert exec.agent == "A"
    assert exec.parent is parent
    assert exec.signal is signal
    assert phases.scoped == [result]
    assert type(arguments) is original_type
    assert repr(arguments) == before


def test_rp40_the_callers_container_stays_mutable(system: ToolSystem) -> None:
    system.tools.register(echo())
    arguments: dict[str, Any] = {"text": "hi", "bad": {3}}
    system.execute(call("echo", arguments))
    arguments["text"] = "still mutable"
    assert type(arguments) is dict


def test_rp41_materialization_failure_beats_a_pre_aborted_signal(system: ToolSystem) -> None:
    system.tools.register(echo())
    phases = Phases(system)
    aborted = AbortSignal.aborted_signal("gone")
    result = system.execute(call("echo", {"invalid": {1}}, signal=aborted))
    assert result.to_dict() == not_lossless(ARGUMENTS, "arguments.invalid is set")
    assert len(phases.observed) == 1
    assert phases.log == []


def test_rp42_the_body_gets_a_frozen_detached_copy(system: ToolSystem) -> None:
    received: list[Any] = []
    pre_seen: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        received.append(args)
        return [{"type": "text", "text": "ok"}]

    async def pre(exec: Any, next: Any) -> Any:
        pre_seen.append(exec.arguments)
        return await next()

    system.tools.register(fixture("t", body))
    system.tools.on_pre_execute(pre)
    arguments = {"source": True}
    system.execute(call("t", arguments))

    (got,) = received
    assert got == {"source": True}
    assert got is not arguments
    assert type(got) is FrozenDict
    with pytest.raises(TypeError):
        got["source"] = False
    arguments["source"] = False
    assert got == {"source": True}
    assert type(pre_seen[0]) is FrozenDict
    assert pre_seen[0] == {"source": True}


def test_rp43_shared_references_are_copied_independently(system: ToolSystem) -> None:
    body = Recording([{"type": "text", "text": "ok"}])
    system.tools.register(fixture("t", body))
    inner = {"k": [1, 2]}
    result = system.execute(call("t", {"a": inner, "b": inner}))
    assert not result.is_error
    (got,) = body.args
    assert got["a"] == inner
    assert got["b"] == inner
    assert got["a"] is not inner
    assert type(got["a"]) is FrozenDict
    assert type(got["b"]["k"]) is FrozenList


def test_rp43_arguments_5000_lists_deep_are_accepted(system: ToolSystem) -> None:
    depths: list[int] = []

    def body(args: Any, ctx: Any) -> Any:
        depth, node = 0, args
        while isinstance(node, list) and node:
            depth += 1
            node = node[0]
        depths.append(depth)
        return [{"type": "text", "text": "deep"}]

    system.tools.register(fixture("deep", body))
    nested: list[Any] = []
    for _ in range(4999):
        nested = [nested]
    result = system.execute(call("deep", nested))
    assert text(result) == "deep"
    assert depths == [4999]


def null_call(name: str) -> ExecuteCall:
    """A call whose arguments are JSON null (``call()`` would default them)."""
    return ExecuteCall(call_id="c1", name=name, arguments=None)


def test_rp43_null_arguments_reach_the_body(system: ToolSystem) -> None:
    body = Recording([{"type": "text", "text": "ok"}])
    system.tools.register(fixture("t", body))
    views: list[Any] = []

    async def pre(exec: Any, next: Any) -> Any:
        views.append(exec.arguments)
        return await next()

    system.tools.on_pre_execute(pre)
    result = system.execute(null_call("t"))
    assert not result.is_error
    assert body.args == [None]
    assert views == [None]
    assert views[0] is not UNSET


def test_rp44_each_execution_has_its_own_opaque_token(system: ToolSystem) -> None:
    system.tools.register(echo())
    tokens: list[Any] = []

    async def pre(exec: Any, next: Any) -> Any:
        tokens.append(exec.token)
        if exec.call_id == "denied":
            return Deny("no")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        tokens.append(exec.token)
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        tokens.append(exec.token)
        return await next()

    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    system.execute(call(call_id="denied"))
    system.execute(call(call_id="allowed"))

    distinct = {id(t) for t in tokens}
    assert len(distinct) == 2
    denied, allowed = tokens[0], tokens[-1]
    assert tokens == [denied, denied, allowed, allowed, allowed]
    assert denied is not allowed
    assert denied != allowed
    for token in (denied, allowed):
        assert isinstance(token, ExecutionToken)
        assert not isinstance(token, str)
        with pytest.raises(TypeError):
            msgspec.json.encode(token)
        with pytest.raises(TypeError):
            pickle.dumps(token)


def test_rp45_the_parent_is_seen_everywhere(system: ToolSystem) -> None:
    parent = ExecutionToken()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["body"] = ctx.parent
        return "ok"

    async def pre(exec: Any, next: Any) -> Any:
        seen["pre"] = exec.parent
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        seen["wrapper"] = exec.parent
        return await next()

    system.tools.register(echo(execute=body))
    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_result(lambda exec, result: seen.setdefault("result", exec.parent))
    system.execute(call(parent=parent))
    assert seen == {"pre": parent, "wrapper": parent, "body": parent, "result": parent}
    assert all(value is parent for value in seen.values())


def test_rp45_the_execution_is_sealed_when_observers_run(system: ToolSystem) -> None:
    system.tools.register(echo())
    dispatch_views: list[Any] = []
    refusals: list[str] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        dispatch_views.append(exec)
        return await next()

    def observer(exec: Any, result: Any) -> None:
        for name, value in (
            ("signal", AbortController().signal),
            ("name", "other"),
            ("call_id", "other"),
            ("arguments", {}),
            ("token", ExecutionToken()),
            ("parent", None),
            ("agent", "B"),
        ):
            try:
                setattr(exec, name, value)
            except (AttributeError, TypeError):
                refusals.append(name)
        try:
            dispatch_views[0].signal = AbortController().signal
        except (AttributeError, TypeError):
            refusals.append("dispatch.signal")

    system.tools.on_execute(wrapper)
    system.tools.on_result(observer)
    result = system.execute(call())
    assert not result.is_error
    assert refusals == [
        "signal",
        "name",
        "call_id",
        "arguments",
        "token",
        "parent",
        "agent",
        "dispatch.signal",
    ]
    with pytest.raises(AttributeError):
        del dispatch_views[0].signal


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"call_id": ""}, ValueError, "ExecuteCall.call_id must be a non-empty str, got ''"),
        ({"call_id": 1}, TypeError, "ExecuteCall.call_id must be a non-empty str, got int"),
        ({"name": None}, TypeError, "ExecuteCall.name must be a str, got NoneType"),
        (
            {"signal": "not a signal"},
            TypeError,
            "ExecuteCall.signal must be an AbortSignal or None, got str",
        ),
        ({"agent": object()}, TypeError, "ExecuteCall.agent must be a str or None, got object"),
        (
            {"parent": "token"},
            TypeError,
            "ExecuteCall.parent must be an ExecutionToken or None, got str",
        ),
    ],
    ids=["empty-id", "int-id", "no-name", "bad-signal", "bad-agent", "bad-parent"],
)
def test_execute_call_validates_its_fields(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    # Each names the field and what it got, as the message is made: a wrong type is a
    # TypeError, the empty id (a str) a bad value.
    base: dict[str, Any] = {"call_id": "c1", "name": "echo", "arguments": {}}
    base.update(fields)
    with pytest.raises(error) as raised:
        ExecuteCall(**base)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"call_id": ""}, ValueError, "ToolCall.call_id must be a non-empty str, got ''"),
        ({"call_id": None}, TypeError, "ToolCall.call_id must be a non-empty str, got NoneType"),
        ({"name": 3}, TypeError, "ToolCall.name must be a str, got int"),
        (
            {"arguments": {}},
            TypeError,
            "ToolCall.arguments must be a str (the raw JSON text), got dict",
        ),
    ],
    ids=["empty-id", "no-id", "int-name", "parsed-arguments"],
)
def test_tool_call_validates_its_fields(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    base: dict[str, Any] = {"call_id": "c1", "name": "echo", "arguments": "{}"}
    base.update(fields)
    with pytest.raises(error) as raised:
        ToolCall(**base)
    assert str(raised.value) == message


def test_an_omitted_signal_is_one_shared_never_aborting_signal(system: ToolSystem) -> None:
    body = Recording("hi")
    system.tools.register(echo(execute=body))
    system.execute(ExecuteCall(call_id="c1", name="echo", arguments={}))
    system.execute(
        ExecuteCall(call_id="c2", name="echo", arguments={}, signal=None)  # type: ignore[arg-type]
    )
    seen = [ctx.signal for ctx in body.contexts]
    assert seen[0] is seen[1]
    assert isinstance(seen[0], AbortSignal)
    assert not seen[0].aborted


def test_execute_takes_only_execute_calls(system: ToolSystem) -> None:
    with pytest.raises(TypeError):
        system.execute({"call_id": "c1"})  # type: ignore[arg-type]


def test_an_integer_too_long_for_int_parsing_is_invalid_args_naming_it(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("x"))
    long_int = "1" + "0" * 5000  # valid JSON, beyond Python's default int-from-text limit

    assert parse_arguments(long_int) != long_int
    assert parse_arguments("[" * 3000 + long_int + "]" * 3000) != "[" * 3000 + long_int
    outcome = system.execute_batch(
        ExecuteBatch(calls=[tool_call("c1", "x", '{"n": ' + long_int + "}")]), timeout=10
    )

    assert text(outcome.results[0]) == (
        "Error: invalid arguments: arguments are not lossless JSON: arguments.n is int "
        "(out of range)"
    )
