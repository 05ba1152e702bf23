"""Code runtime, real subprocess: Python program semantics, misuse of the seam, and the
environment a program runs in."""

from __future__ import annotations

import asyncio
import difflib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

import dsh_tools.codebridge._runtime as runtime_module
import dsh_tools.codebridge._worker_api as worker_api
from dsh_tools.actors import AbortController, FrozenDict, FrozenList
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunFailure,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntime,
    CodeRuntimeConfig,
    CodeSandbox,
    ErrorClassSpec,
    SubprocessCodeRuntime,
    _prepared,
    runtime_config_from,
)
from dsh_tools.codebridge._ledger import MAX_LOG_ENTRIES
from dsh_tools.codebridge._run import CodeRun
from dsh_tools.codebridge._run_process import IGNORED_FRAMES_LIMIT
from dsh_tools.codebridge._runtime import HOST_PARSE_LIMIT, namespace_wire
from dsh_tools.codebridge._tokens import tokenize
from dsh_tools.codebridge._worker_api import _loose as loose_name
from dsh_tools.codebridge._worker_api import guard_nested_run

TOOL_CALL_ERROR = ErrorClassSpec("ToolCallError", "tool_name")


async def echo(value: Any) -> Any:
    return f"echo:{value['value']}"


async def identity(value: Any) -> Any:
    """A binding that returns the arguments it was called with."""
    return value


def tools(**functions: Any) -> list[BindingNamespace]:
    return [BindingNamespace("tools", functions, TOOL_CALL_ERROR)]


def run(
    runtime: SubprocessCodeRuntime, program: str, bindings: list[BindingNamespace] | None = None
) -> CodeRunResult:
    return asyncio.run(runtime.run(CodeRunRequest(program, bindings or [])))


def failure(result: CodeRunResult) -> tuple[str, str]:
    assert result.error is not None, result
    return result.error.kind, result.error.message


def without_carets(traceback: str) -> str:
    """``traceback`` without the lines that only mark a line's expression, which Python 3.13
    draws with ``~`` beside ``^`` where 3.11 and 3.12 draw ``^`` alone."""
    return "\n".join(
        line for line in traceback.split("\n") if not line.strip() or line.strip(" ^~") != ""
    )


def same_json(actual: Any, expected: Any) -> bool:
    """Deep equality without recursion (Python's == recurses on deep lists)."""
    frozen = tokenize(actual, (dict, FrozenDict), (list, FrozenList))
    return frozen is not None and frozen == tokenize(expected)


@pytest.fixture(scope="module")
def runtime() -> Iterator[SubprocessCodeRuntime]:
    shared = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=10_000, max_wall_ms=30_000))
    yield shared
    shared.close()


@pytest.fixture
def fresh_runtime() -> Iterator[SubprocessCodeRuntime]:
    own = SubprocessCodeRuntime()
    yield own
    own.close()


# --- Python program semantics ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("program", "value"),
    [
        ("x = 1", UNSET),
        ("return", UNSET),
        ("return None", None),
        ("if True:\n    return 5", 5),
        ("def f():\n    return\nreturn f()", None),
    ],
    ids=["falls-off", "bare-return", "return-none", "nested-block", "inner-bare-return"],
)
def test_return_none_is_a_result_and_bare_return_is_none(
    runtime: SubprocessCodeRuntime, program: str, value: Any
) -> None:
    result = run(runtime, program)
    assert result == CodeRunResult([], value=value)


def test_multiline_strings_keep_their_text_and_errors_keep_the_models_line(
    runtime: SubprocessCodeRuntime,
) -> None:
    text = run(runtime, 'text = """first\n    indented\n  back"""\nreturn text')
    assert text.value == "first\n    indented\n  back"
    kind, message = failure(run(runtime, "x = 1\ny = 2\nraise KeyError('third line')"))
    assert kind == "exception"
    assert 'File "<run_code>", line 3, in <module>' in message
    assert "raise KeyError('third line')" in message


def test_gather_create_task_and_task_group_work(runtime: SubprocessCodeRuntime) -> None:
    gathered = run(
        runtime,
        'return await asyncio.gather(tools.echo({"value": "a"}), tools.echo({"value": "b"}))',
        tools(echo=echo),
    )
    assert gathered.value == ["echo:a", "echo:b"]
    program = """
task = asyncio.create_task(tools.echo({"value": "t"}))
async with asyncio.TaskGroup() as group:
    first = group.create_task(tools.echo({"value": "g1"}))
    second = group.create_task(tools.echo({"value": "g2"}))
waited = await asyncio.wait_for(tools.echo({"value": "w"}), 10)
return [await task, first.result(), second.result(), waited]
"""
    assert run(runtime, program, tools(echo=echo)).value == [
        "echo:t",
        "echo:g1",
        "echo:g2",
        "echo:w",
    ]


def test_a_call_never_awaited_is_still_submitted_without_noise(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def scenario() -> tuple[CodeRunResult, list[Any]]:
        calls: list[Any] = []
        called = asyncio.Event()

        async def recording_echo(value: Any) -> Any:
            calls.append(value)
            called.set()
            return await echo(value)

        program = 'tools.echo({"value": "fire"})\nreturn "done"'
        result = await runtime.run(CodeRunRequest(program, tools(echo=recording_echo)))
        await asyncio.wait_for(called.wait(), 5)
        return result, calls

    result, calls = asyncio.run(scenario())
    assert result == CodeRunResult([], value="done")
    assert calls == [{"value": "fire"}]


def test_a_failed_call_in_a_task_never_awaited_leaves_no_noise(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Fire and forget through create_task: the task fails with the call, and nothing says
    # "Task exception was never retrieved" into the program's output; a task that is awaited
    # still raises the failure.
    async def fail(value: Any) -> Any:
        raise Exception("denied")

    program = """
asyncio.create_task(tools.fail({}))
awaited = asyncio.create_task(tools.fail({}))
await asyncio.sleep(0.1)
try:
    await awaited
except ToolCallError as error:
    return error.message
"""
    assert run(runtime, program, tools(fail=fail)) == CodeRunResult([], value="denied")


def test_raising_the_error_class_with_one_argument_names_the_class(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
try:
    raise ToolCallError("just a message")
except TypeError as error:
    return str(error)
"""
    assert run(runtime, program, tools(echo=echo)).value == (
        "ToolCallError.__init__() missing 1 required positional argument: 'message'"
    )


def test_a_caught_tool_call_error_copies_with_its_tool_name_and_message(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Programs copy what they collect (a deepcopy of gather(..., return_exceptions=True)'s
    # list, say); the class takes two arguments, so the default reduction of one fails.
    async def fail(value: Any) -> Any:
        raise Exception("denied")

    program = """
import copy
results = await asyncio.gather(tools.fail({}), return_exceptions=True)
error = results[0]
error.add_note("while fetching")
copies = [copy.copy(error), copy.deepcopy(results)[0]]
return [[type(c).__name__, c.tool_name, c.message, str(c), c.__notes__] for c in copies]
"""
    copied = ["ToolCallError", "fail", "denied", "denied", ["while fetching"]]
    assert run(runtime, program, tools(fail=fail)).value == [copied, copied]


def test_a_tool_call_error_s_repr_names_its_tool(runtime: SubprocessCodeRuntime) -> None:
    # gather(..., return_exceptions=True) printed as a list shows each failure's repr: with the
    # message alone, a program's output could not say which of its calls failed.
    async def fail(value: Any) -> Any:
        raise Exception(f"denied {value['n']}")

    program = """
results = await asyncio.gather(tools.a({"n": 1}), tools.b({"n": 2}), return_exceptions=True)
return [repr(results), repr(ToolCallError("c", "made"))]
"""
    assert run(runtime, program, tools(a=fail, b=fail)).value == [
        "[ToolCallError('a', 'denied 1'), ToolCallError('b', 'denied 2')]",
        "ToolCallError('c', 'made')",
    ]


def test_print_and_stream_writes_become_log_entries(runtime: SubprocessCodeRuntime) -> None:
    program = """
import sys
print("point", {"x": 1})
sys.stdout.write("raw-out\\n")
print("careful", file=sys.stderr)
print()
return 1 + 2
"""
    result = run(runtime, program)
    assert result == CodeRunResult(["point {'x': 1}", "raw-out\n", "careful", ""], value=3)


def test_reconfiguring_the_streams_as_scripts_do_keeps_capturing(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Scripts written to run anywhere start with this (a Windows console is not UTF-8).
    program = """
import sys
sys.stdout.reconfigure(encoding="utf-8", errors="replace")
sys.stderr.reconfigure(line_buffering=True)
print("caf\u00e9")
return [sys.stdout.mode, sys.stdout.line_buffering, sys.stdout.closed]
"""
    result = run(runtime, program)
    assert result == CodeRunResult(["caf\u00e9"], value=["w", False, False])


def test_bindings_round_trip_and_failures_raise_tool_call_error(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def echo_args(value: Any) -> Any:
        return {"echoed": value}

    async def fail(value: Any) -> Any:
        raise Exception("nope")

    program = """
echoed = await tools.echo({"a": [1, {"b": None}], "n": 2**64 - 1, "f": 1.5})
try:
    await tools.fail({})
except ToolCallError as e:
    caught = [isinstance(e, ToolCallError), e.tool_name, e.message, str(e), type(e).__name__]
return [echoed, caught]
"""
    result = run(runtime, program, tools(echo=echo_args, fail=fail))
    assert result.value == [
        {"echoed": {"a": [1, {"b": None}], "n": 2**64 - 1, "f": 1.5}},
        [True, "fail", "nope", "nope", "ToolCallError"],
    ]


def test_a_generic_error_class_descriptor_names_its_own_member(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def broken(value: Any) -> Any:
        raise RuntimeError("helper down")

    bindings = [
        BindingNamespace(
            "helpers", {"broken": broken}, ErrorClassSpec("HelperCallError", "helper_name")
        )
    ]
    program = """
try:
    await helpers.broken({})
except HelperCallError as e:
    return [type(e).__name__, e.helper_name, str(e), hasattr(e, "tool_name")]
"""
    assert run(runtime, program, bindings).value == [
        "HelperCallError",
        "broken",
        "helper down",
        False,
    ]


def test_non_lossless_arguments_are_rejected_in_the_worker(
    runtime: SubprocessCodeRuntime,
) -> None:
    calls: list[Any] = []

    async def recording(value: Any) -> Any:
        calls.append(value)
        return "sent"

    program = """
class Custom:
    pass
out = []
for arg in [(1, 2), {1: "x"}, float("inf"), -0.0, {"s": {1}}, Custom()]:
    try:
        await tools.echo(arg)
        out.append("sent")
    except ToolCallError as e:
        out.append([e.tool_name, e.message])
return out
"""
    result = run(runtime, program, tools(echo=recording))
    problems = [
        "arguments is tuple",
        "arguments is dict with int key",
        "arguments is float (infinite)",
        "arguments is float (-0.0)",
        "arguments.s is set",
        "arguments is Custom",
    ]
    assert result.value == [
        ["echo", f"binding arguments must be lossless JSON: {problem}"] for problem in problems
    ]
    assert calls == []


def test_a_rejected_argument_is_named_by_its_path_however_deep_or_cyclic(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
deep = "leaf"
for _ in range(3000):
    deep = [deep]
deep[0][0][0] = float("nan")
loop = {"items": [1]}
loop["items"].append(loop)
out = []
for arg in [{"deep": [0, deep]}, loop, {"text": "\\ud800"}, {"n": 2**70}]:
    try:
        await tools.echo(arg)
    except ToolCallError as e:
        out.append(e.message.removeprefix("binding arguments must be lossless JSON: "))
return out
"""
    result = run(runtime, program, tools(echo=lambda value: "sent"))
    assert result.value == [
        "arguments.deep[1][0][0][0] is float (NaN)",
        "arguments.items[1] is a cycle",
        "arguments.text is str (lone surrogate)",
        "arguments.n is int (out of range: JSON integers here are -2**63 to 2**64-1)",
    ]


def test_arguments_decoded_from_a_frame_go_to_the_snapshot_bindings_as_they_are(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The runtime builds each call's arguments afresh from checked tokens: a snapshot that
    # the bindings for snapshots may keep without copying. Without a snapshot binding for
    # every name, the plain bindings are called.
    received: list[tuple[str, Any]] = []

    def binding(kind: str) -> Any:
        async def call(value: Any) -> Any:
            received.append((kind, value))
            return "ok"

        return call

    program = "return await tools.echo({'a': [1, {'b': None}], 'c': 'x'})"
    both = BindingNamespace(
        "tools",
        {"echo": binding("plain")},
        TOOL_CALL_ERROR,
        snapshot_functions={"echo": binding("snapshot")},
    )
    partial = BindingNamespace(
        "tools",
        {"echo": binding("plain"), "other": binding("plain")},
        TOOL_CALL_ERROR,
        snapshot_functions={"echo": binding("snapshot")},
    )
    assert run(runtime, program, [both]).value == "ok"
    assert run(runtime, program, [partial]).value == "ok"
    (first_kind, first), (second_kind, _) = received
    assert (first_kind, second_kind) == ("snapshot", "plain")
    assert first == {"a": [1, {"b": None}], "c": "x"}
    assert type(first) is FrozenDict and type(first["a"]) is FrozenList
    assert type(first["a"][1]) is FrozenDict


def test_a_non_lossless_resolution_is_rejected(runtime: SubprocessCodeRuntime) -> None:
    async def returns_set(value: Any) -> Any:
        return {1, 2}

    program = """
try:
    await tools.odd({})
except ToolCallError as e:
    return e.message
"""
    result = run(runtime, program, tools(odd=returns_set))
    assert result.value == "binding resolution must be lossless JSON: value is set"


def test_a_binding_failure_text_holding_a_lone_surrogate_reaches_the_program_replaced(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def fails(value: Any) -> Any:
        raise ValueError("bad " + chr(0xD800) + "!")

    program = "try:\n    await tools.fails({})\nexcept ToolCallError as e:\n    return e.message"
    assert run(runtime, program, tools(fails=fails)).value == "bad \ufffd!"


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("(1, 2)", "value is tuple: return a list instead ([...] or list(...))"),
        ("{1: 2}", "value is dict with int key: use str keys instead (str(key))"),
        ('float("nan")', "value is float (NaN)"),
        ("-0.0", "value is float (-0.0)"),
        ("float('inf')", "value is float (infinite)"),
        ("{'s': {1}}", "value.s is set: return a list instead (sorted(...) or list(...))"),
        ("[10**30]", "value[0] is int (out of range: JSON integers here are -2**63 to 2**64-1)"),
    ],
)
def test_a_non_lossless_completion_is_invalid_output(
    runtime: SubprocessCodeRuntime, expression: str, problem: str
) -> None:
    result = run(runtime, f"return {expression}")
    message = f"program completion must be lossless JSON: {problem}"
    assert result == CodeRunResult([], error=CodeRunFailure("invalid-output", message))


@pytest.mark.parametrize(
    ("program", "problem"),
    [
        (
            'return tools.echo({"a": 1})',
            "value is a tool call that was not awaited: write await tools.echo(...)",
        ),
        (
            'return {"r": [tools.echo({})]}',
            "value.r[0] is a tool call that was not awaited: write await tools.echo(...)",
        ),
        (
            "async def helper():\n    return 1\nreturn helper()",
            "value is coroutine (an awaitable: use await on it)",
        ),
    ],
)
def test_an_awaitable_left_unawaited_is_named_as_one(
    runtime: SubprocessCodeRuntime, program: str, problem: str
) -> None:
    # A program that forgets `await` returns the call itself: the message says what to do,
    # naming the call as the program wrote it (not the worker's class for it).
    result = run(runtime, program, tools(echo=identity))
    message = f"program completion must be lossless JSON: {problem}"
    assert result == CodeRunResult([], error=CodeRunFailure("invalid-output", message))


def test_using_a_call_that_was_not_awaited_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # `r = tools.x(...)` then `r["key"]` or `r.method()`: the error names the call and the fix
    # rather than an internal class the program never wrote.
    program = """
out = []
r = tools.echo({"text": "a b"})
try:
    r["text"]
except TypeError as exc:
    out.append(str(exc))
try:
    r.split()
except AttributeError as exc:
    out.append(str(exc))
try:
    "text" in r
except TypeError as exc:
    out.append(str(exc))
out.append(hasattr(r, "__dsh_nothing__"))
out.append(hasattr(r, "keys"))  # a probe of a result's method is only False
out.append(hasattr(r, "_dsh_nothing"))
bare = type(r).__new__(type(r))  # no __init__: its own slots are unset
try:
    bare.split
except AttributeError as exc:
    out.append(type(exc).__name__)
out.append(await r)
return out
"""
    assert run(runtime, program, tools(echo=identity)).value == [
        "tools.echo(...) was not awaited: it is the pending call, not its result;"
        " write (await tools.echo(...))[...]",
        "tools.echo(...) was not awaited: it is the pending call, not its result;"
        " write (await tools.echo(...)).split",
        "tools.echo(...) was not awaited: it is the pending call, not its result;"
        " write ... in (await tools.echo(...))",
        False,
        False,
        False,
        "AttributeError",
        {"text": "a b"},
    ]


@pytest.mark.parametrize(
    ("awaited", "access"),
    [
        ("tools.echo", "tools.echo"),
        ('tools["echo"]', "tools.echo"),
        ("tools['a-b']", 'tools["a-b"]'),
    ],
)
def test_awaiting_a_binding_not_called_says_to_call_it(
    runtime: SubprocessCodeRuntime, awaited: str, access: str
) -> None:
    # Python's "object function can't be used in 'await' expression" named neither the
    # binding nor the call it lacked.
    program = f"""
print("before")
value = await {awaited}
"""
    result = run(runtime, program, tools(echo=identity, **{"a-b": identity}))
    assert result.logs == ["before"]
    kind, message = failure(result)
    assert kind == "exception"
    assert f'  File "<run_code>", line 3, in <module>\n    value = await {awaited}\n' in message
    assert message.endswith(
        f"\n{access} was not called: it is the binding, not a call of it; write"
        f" await {access}({{...}}), its one dict of arguments in the braces"
    )


@pytest.mark.parametrize(
    "program",
    [
        "await asyncio.gather(tools.echo({}), tools.echo)",
        "await asyncio.wait_for(tools.echo, 5)",
        "async with asyncio.TaskGroup() as group:\n    group.create_task(tools.echo)",
    ],
    ids=["gather", "wait_for", "task-group"],
)
def test_passing_a_binding_not_called_to_asyncio_says_to_call_it(
    runtime: SubprocessCodeRuntime, program: str
) -> None:
    # asyncio's "An asyncio.Future, a coroutine or an awaitable is required" (or "a coroutine
    # was expected, got <function echo at 0x...>") named neither the binding nor the call.
    kind, message = failure(run(runtime, program, tools(echo=identity)))
    assert kind == "exception"
    assert (
        "tools.echo was not called: it is the binding, not a call of it; write"
        " await tools.echo({...}), its one dict of arguments in the braces\n"
    ) in message + "\n"


def test_a_binding_called_wrongly_inside_asyncio_keeps_its_own_message(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = "import functools\nawait asyncio.gather(functools.partial(tools.echo, 1, 2)())"
    kind, message = failure(run(runtime, program, tools(echo=identity)))
    assert kind == "exception"
    assert message.endswith(
        "\nTypeError: tools.echo() takes one dict of arguments: await tools.echo({...})"
    )


def test_awaiting_something_else_that_is_not_awaitable_is_python_s_error_alone(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
def echo():
    pass
await tools.echo({})
await echo
"""
    kind, message = failure(run(runtime, program, tools(echo=identity)))
    assert kind == "exception"
    assert message.endswith(
        "\n    await echo\nTypeError: object function can't be used in 'await' expression"
    )


def test_iterating_a_call_that_was_not_awaited_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # `for x in r` on a handle once ran its body with the handle itself and then failed with
    # "await wasn't used with future", or, after the call had settled, ran zero times and
    # said nothing. `len` named an internal class. Truth and printing stay ordinary.
    program = """
out = []
r = tools.echo({"text": "a b"})
for attempt in ("pending", "settled"):
    try:
        for x in r:
            out.append(("looped", x))
    except TypeError as exc:
        out.append(str(exc))
    await asyncio.sleep(0)
    await r
try:
    list(r)
except TypeError as exc:
    out.append(str(exc))
try:
    len(r)
except TypeError as exc:
    out.append(str(exc))
out.append(bool(r))
out.append(str(r))
return out
"""
    again = (
        "tools.echo(...) was not awaited: it is the pending call, not its result;"
        " write for ... in (await tools.echo(...))"
    )
    assert run(runtime, program, tools(echo=identity)).value == [
        again,
        again,
        again,
        "tools.echo(...) was not awaited: it is the pending call, not its result;"
        " write len(await tools.echo(...))",
        True,
        "<tool call 'echo'>",
    ]


def test_arithmetic_or_ordering_on_a_call_that_was_not_awaited_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python would name the operand type CallHandle, which the program never wrote; equality,
    # hashing and %-formatting keep their ordinary meaning.
    program = """
out = []
r = tools.echo(3)
for attempt in (lambda: r + 1, lambda: 10 - r, lambda: [1] + r, lambda: r * 2, lambda: r > 0):
    try:
        attempt()
    except TypeError as exc:
        out.append(str(exc).split("; ")[1])
out.append([r == r, r != r, len({r, r}), "%s" % r])
out.append(await r)
return out
"""
    assert run(runtime, program, tools(echo=identity)).value == [
        "write (await tools.echo(...)) + ...",
        "write ... - (await tools.echo(...))",
        "write ... + (await tools.echo(...))",
        "write (await tools.echo(...)) * ...",
        "write (await tools.echo(...)) > ...",
        [True, False, 1, "<tool call 'echo'>"],
        3,
    ]


def test_encoding_formatting_or_copying_a_call_that_was_not_awaited_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # json, a format spec, pickle and copy named the handle's class, CallHandle, which the
    # program never wrote; an encoder's own default and a spec-less format keep their meaning.
    program = """
import copy, json, pickle
out = []
r = tools.echo(3)
class Encoder(json.JSONEncoder):
    def default(self, o):
        return super().default(o)
for attempt in (
    lambda: json.dumps({"rows": r}),
    lambda: json.dumps([r], cls=Encoder),
    lambda: f"{r:>10}",
    lambda: pickle.dumps(r),
    lambda: copy.deepcopy({"rows": r}),
):
    try:
        attempt()
    except TypeError as exc:
        out.append(str(exc).split("; ")[1])
out.append([json.dumps(r, default=str), f"{r}", json.dumps({"n": [1, 2.5, None]})])
try:
    json.dumps({1})
except TypeError as exc:
    out.append(str(exc))
out.append(await r)
return out
"""
    assert run(runtime, program, tools(echo=identity)).value == [
        "write (await tools.echo(...))",
        "write (await tools.echo(...))",
        'write f"{(await tools.echo(...)):>10}"',
        "write (await tools.echo(...))",
        "write (await tools.echo(...))",
        ["\"<tool call 'echo'>\"", "<tool call 'echo'>", '{"n": [1, 2.5, null]}'],
        "Object of type set is not JSON serializable",
        3,
    ]


def test_asyncio_wait_takes_call_handles_as_it_takes_tasks(
    runtime: SubprocessCodeRuntime,
) -> None:
    # asyncio.wait refuses whatever passes for a coroutine, and a handle does (so that
    # create_task takes it); a program waiting on its calls gets the handles it gave back.
    program = """
out = []
handles = [tools.echo(i) for i in range(3)]
done, pending = await asyncio.wait(handles)
out.append([sorted([h.result() for h in done]), len(pending), all(h in done for h in handles)])
sleeper = asyncio.create_task(asyncio.sleep(60))
first = tools.echo(5)
done, pending = await asyncio.wait([first, sleeper], return_when=asyncio.FIRST_COMPLETED)
out.append([done == {first}, pending == {sleeper}])
done, pending = await asyncio.wait({first, sleeper}, timeout=0.01)
out.append([done == {first}, pending == {sleeper}])
sleeper.cancel()
coroutine = asyncio.sleep(0)
for wrong in ([tools.echo(6), coroutine], tools.echo(7), [], ):
    try:
        await asyncio.wait(wrong)
    except (TypeError, ValueError) as exc:
        out.append(str(exc))
coroutine.close()
try:
    await asyncio.wait([tools.echo(8)], return_when="SOON")
except ValueError as exc:
    out.append(str(exc))
return out
"""
    result = run(runtime, program, tools(echo=identity))
    assert result.logs == []
    assert result.value == [
        [[0, 1, 2], 0, True],
        [True, True],
        [True, True],
        "Passing coroutines is forbidden, use tasks explicitly.",
        "expect a list of futures, not CallHandle",
        "Set of Tasks/Futures is empty.",
        "Invalid return_when value: SOON",
    ]


def test_a_script_s_asyncio_run_of_main_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A program is already the body of a coroutine on a running loop; a model that ends it
    # with a script's `asyncio.run(main())` is told what to write, and the coroutine it made
    # is closed rather than left to warn "never awaited" into the program's output.
    program = """
async def main():
    return await tools.echo({"a": 1})

if __name__ == "__main__":
    asyncio.run(main())
"""
    result = run(runtime, program, tools(echo=identity))
    assert result.logs == []
    kind, message = failure(result)
    assert (kind, without_carets(message)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 6, in <module>\n'
        "    asyncio.run(main())\n"
        "RuntimeError: asyncio.run() cannot be called from a running event loop: the program"
        " already runs in one, so await the coroutine instead (write `await main()`, not"
        " `asyncio.run(main())`)",
    )
    # off a running loop it is asyncio.run itself, and wrapping it twice changes nothing
    guarded = guard_nested_run(asyncio.run)
    assert guard_nested_run(guarded) is guarded

    async def main() -> str:
        return "ran"

    assert guarded(main()) == "ran"

    async def nested() -> None:
        inner = main()
        with pytest.raises(RuntimeError, match="await the coroutine instead"):
            guarded(inner)
        assert inner.cr_frame is None  # closed: nothing is left to warn "never awaited"

    asyncio.run(nested())


def test_a_programs_own_event_loop_and_default_selector_work_in_the_sandbox(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The sandbox refuses epoll, which selectors.DefaultSelector is: asyncio.run in a thread,
    # asyncio.new_event_loop() and DefaultSelector() failed with a bare PermissionError from
    # inside selectors (and a loop half made logged an error of its own as it was collected).
    program = """
import selectors, threading
out = []
def in_thread():
    async def pause():
        await asyncio.sleep(0)
        return "a thread's loop ran"
    out.append(asyncio.run(pause()))
thread = threading.Thread(target=in_thread)
thread.start()
thread.join()
loop = asyncio.new_event_loop()
loop.close()
with selectors.DefaultSelector() as selector:
    out.append(loop.is_closed())
return out
"""
    result = run(runtime, program)
    assert result.error is None, result.error
    assert result.logs == []
    assert result.value == ["a thread's loop ran", True]


def test_a_script_s_run_until_complete_of_main_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The older spelling of the same script ending: asyncio's "This event loop is already
    # running" said neither what to write nor kept "never awaited" out of the output.
    program = """
async def main():
    return await tools.echo({"a": 1})

loop = asyncio.get_event_loop()
return loop.run_until_complete(main())
"""
    result = run(runtime, program, tools(echo=identity))
    assert result.logs == []
    kind, message = failure(result)
    assert (kind, without_carets(message)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 6, in <module>\n'
        "    return loop.run_until_complete(main())\n"
        "RuntimeError: run_until_complete() cannot be called on the running event loop: the"
        " program already runs in it, so await the coroutine instead (write `await main()`,"
        " not `loop.run_until_complete(main())`)",
    )


def test_a_script_s_new_event_loop_running_main_says_to_await_it(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Another spelling: asyncio's "Cannot run the event loop while another loop is running"
    # said neither what to write nor kept "never awaited" out of the output. In a thread,
    # with no loop running there, another loop runs as ever.
    program = """
import threading
async def main():
    return await tools.echo({"a": 1})

async def pause():
    await asyncio.sleep(0)
    return "ran"

ran = []
def in_thread():
    ran.append(asyncio.new_event_loop().run_until_complete(pause()))
thread = threading.Thread(target=in_thread)
thread.start()
thread.join()
print(ran)
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
return loop.run_until_complete(main())
"""
    result = run(runtime, program, tools(echo=identity))
    assert result.logs == ["['ran']"]
    kind, message = failure(result)
    assert (kind, without_carets(message)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 19, in <module>\n'
        "    return loop.run_until_complete(main())\n"
        "RuntimeError: run_until_complete() cannot run another event loop while the program's"
        " runs: the program already runs in one, so await the coroutine instead (write"
        " `await main()`, not `loop.run_until_complete(main())`)",
    )


def test_an_awaitable_passed_as_an_argument_is_named_as_one(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
try:
    await tools.echo({"inner": tools.echo({})})
except ToolCallError as e:
    return e.message
"""
    assert run(runtime, program, tools(echo=identity)).value == (
        "binding arguments must be lossless JSON: arguments.inner is a tool call that was not"
        " awaited: write await tools.echo(...)"
    )


def test_an_awaitable_a_binding_resolves_to_is_not_the_program_s_to_await(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The program did await the call; what the host-side binding handed back is not something
    # it can await, so it is not told to.
    async def lazy(value: Any) -> Any:
        return asyncio.get_running_loop().create_future()

    program = """
try:
    await tools.lazy({})
except ToolCallError as e:
    return e.message
"""
    assert run(runtime, program, tools(lazy=lazy)).value == (
        "binding resolution must be lossless JSON: value is Future"
    )


def test_a_future_a_binding_hands_back_settled_answers_the_call_as_it_settled(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A binding that knows its answer at once hands back a future already done: its value,
    # its failure, its cancellation and a value that is no JSON each answer the call as a
    # future settled later does, for every call of a burst.
    def settled(value: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        how = value["how"]
        if how == "value":
            future.set_result({"n": value["n"]})
        elif how == "fail":
            future.set_exception(RuntimeError(f"failed {value['n']}"))
        elif how == "cancel":
            future.cancel()
        else:
            future.set_result({1, 2})
        return future

    program = """
hows = ["value", "fail", "cancel", "set"] * 25
answers = await asyncio.gather(
    *[tools.settled({"how": how, "n": n}) for n, how in enumerate(hows)],
    return_exceptions=True,
)
return [a["n"] if isinstance(a, dict) else a.message for a in answers]
"""
    result = run(runtime, program, tools(settled=settled))
    assert result.error is None, result.error
    expected: list[Any] = []
    for n in range(100):
        expected.append(
            [
                n,
                f"failed {n}",
                "binding call cancelled",
                "binding resolution must be lossless JSON: value is set",
            ][n % 4]
        )
    assert result.value == expected


def test_large_and_deep_values_cross_exactly(runtime: SubprocessCodeRuntime) -> None:
    assert run(runtime, "return [7] * 50000").value == [7] * 50000

    async def identity(value: Any) -> Any:
        return value

    program = """
value = "leaf"
for _ in range(3000):
    value = [value]
return await tools.identity(value)
"""
    expected: Any = "leaf"
    for _ in range(3000):
        expected = [expected]
    result = run(runtime, program, tools(identity=identity))
    assert result.error is None
    assert same_json(result.value, expected)


def test_values_nested_past_the_hosts_depth_are_refused_not_rebuilt(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each level costs the host's later steps a few hundred bytes: a 16 MB completion of nested
    # lists would otherwise take gigabytes of the host.
    seen: list[Any] = []

    async def identity(value: Any) -> Any:
        seen.append(value)
        return value

    program = """
value = []
for _ in range(10_001):
    value = [value]
try:
    await tools.identity(value)
except ToolCallError as error:
    print(error)
return value
"""
    result = run(runtime, program, tools(identity=identity))
    assert seen == []
    assert result.error is not None
    assert result.error.kind == "invalid-output"
    assert result.error.message.endswith("the value nests deeper than 10000 levels")
    assert result.logs == [
        "binding arguments must be lossless JSON: the value nests deeper than 10000 levels"
    ]


def test_deep_values_work_end_to_end(runtime: SubprocessCodeRuntime) -> None:
    seen: list[Any] = []

    async def identity(value: Any) -> Any:
        seen.append(value)
        return value

    program = """
value = {"leaf": [1, 2.5, None, True, "x"]}
for _ in range(5000):
    value = [value]
back = await tools.identity(value)
depth = 0
while isinstance(back, list):
    back = back[0]
    depth += 1
return {"depth": depth, "leaf": back, "again": value}
"""
    result = run(runtime, program, tools(identity=identity))
    expected: Any = {"leaf": [1, 2.5, None, True, "x"]}
    for _ in range(5000):
        expected = [expected]
    assert result.error is None
    assert result.value["depth"] == 5000
    assert result.value["leaf"] == {"leaf": [1, 2.5, None, True, "x"]}
    assert same_json(result.value["again"], expected)
    assert same_json(seen[0], expected)


def test_an_indented_program_with_a_global_helper_runs_in_the_worker(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = (
        "    total = 0\n"
        "    def add(n):\n"
        "        global total\n"
        "        total += n\n"
        "    for n in range(4):\n"
        "        add(n)\n"
        "    return total"
    )
    result = run(runtime, program)
    assert result.error is None, result
    assert result.value == 6


def test_what_the_program_defines_is_named_as_a_script_s_top_level_names_are(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The program is the body of a function, whose definitions Python names
    # ``<module>.<locals>.P``: a model read that in every repr of its dataclasses and
    # functions and in the last line of its own exception's traceback.
    program = """
from dataclasses import dataclass
@dataclass
class Point:
    x: int
def outer():
    def inner():
        pass
    return inner
class BadInput(Exception):
    pass
print(Point(1))
print(Point.__qualname__, outer.__qualname__, outer().__qualname__, (lambda: 0).__qualname__)
print([n for n in [Point]][0].__name__, repr(Point).split("'")[1])
raise BadInput("no rows")
"""
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert message.endswith("\nBadInput: no rows")
    assert run(runtime, program).logs == [
        "Point(x=1)",
        "Point outer outer.<locals>.inner <lambda>",
        "Point __main__.Point",
    ]


def test_a_program_that_assigns_a_given_global_reads_the_given_one_until_then(
    runtime: SubprocessCodeRuntime,
) -> None:
    # In a function an assignment anywhere makes the name local everywhere: the first line
    # failed with "cannot access local variable 'tools'", which a script's would not.
    program = """
first = await tools.echo({"value": "a"})
def helper():
    return tools
tools = ["mine"]
ToolCallError = None
return [first, helper(), ToolCallError]
"""
    result = run(runtime, program, tools(echo=echo))
    assert result.error is None, result.error
    assert result.value == ["echo:a", ["mine"], None]


def test_a_star_import_binds_the_module_s_names_as_in_a_script(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python refuses ``import *`` in a function ("only allowed at module level"), and the
    # program is the body of one: a model that writes it as at a script's top level gets the
    # names, in a block of the program too, and its helpers see them.
    program = """
from math import *
if True:
    from os.path import *
def area(r):
    return pi * r * r
return [sqrt(16), join("a", "b"), floor(area(1))]
"""
    result = run(runtime, program)
    assert result.error is None, result.error
    assert result.value == [4.0, "a/b", 3]


def test_future_imports_the_program_starts_with_apply_to_it_as_in_a_script(
    runtime: SubprocessCodeRuntime,
) -> None:
    # In a function Python refuses them ("must occur at the beginning of the file"), and the
    # program is the body of one; later in the program they are refused as in a script.
    program = '''"""Annotations stay text."""
from __future__ import annotations
def typed(x: NoSuchType) -> int:
    return x
return typed.__annotations__
'''
    result = run(runtime, program)
    assert result.error is None, result.error
    assert result.value == {"x": "NoSuchType", "return": "int"}
    kind, message = failure(run(runtime, "x = 1\nfrom __future__ import annotations"))
    assert kind == "exception"
    assert message.endswith(
        "SyntaxError: from __future__ imports must occur at the beginning of the file"
    )
    assert '  File "<run_code>", line 2' in message


def test_a_name_a_star_import_binds_is_the_one_the_program_assigns(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The import put its names in the program's globals while the program's own assignment
    # made the name a local of its function: ``mean = mean(values)`` failed with "cannot
    # access local variable 'mean'", and a name assigned before the import kept its value.
    program = """
pi = 3
from math import *
from statistics import *
values = [1, 2, 3]
mean = mean(values)
def circle():
    return pi
return [mean, circle(), pi]
"""
    result = run(runtime, program)
    assert result.error is None, result.error
    assert result.value == [2, math.pi, math.pi]


def test_a_star_import_that_fails_shows_the_program_s_line(runtime: SubprocessCodeRuntime) -> None:
    kind, message = failure(run(runtime, "x = 1\nfrom no_such_module import *"))
    assert kind == "exception"
    assert message == (
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 2, in <module>\n'
        "    from no_such_module import *\n"
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


def test_syntax_errors_and_yield_fail_before_any_process_starts(
    fresh_runtime: SubprocessCodeRuntime,
) -> None:
    kind, message = failure(run(fresh_runtime, "def f(:"))
    assert kind == "exception"
    assert message.startswith('  File "<run_code>", line 1')
    assert message.endswith("SyntaxError: invalid syntax")
    kind, message = failure(run(fresh_runtime, "x = 1\nyield x"))
    assert kind == "exception"
    assert "'yield' is not allowed in a run_code program body" in message
    assert fresh_runtime.template_pid is None  # nothing was spawned


def test_a_program_holding_a_lone_surrogate_fails_as_python_refuses_it(
    fresh_runtime: SubprocessCodeRuntime,
) -> None:
    # Not source text (it has no UTF-8 spelling): Python's compiler refuses it, and so does
    # the run, as a result rather than an encoding error raised from run().
    for program in ("return '\ud800'", "x = 1\n" + "y = 2\n" * 10_000 + "z = '\udfff'"):
        kind, message = failure(run(fresh_runtime, program))
        assert kind == "exception"
        assert message.startswith("UnicodeEncodeError: 'utf-8' codec can't encode character")
        assert message.endswith("surrogates not allowed")
    assert fresh_runtime.template_pid is None  # nothing was spawned


TOO_NESTED_TO_PARSE = (
    "MemoryError: Parser stack overflowed - Python source too complex to parse"
    if sys.version_info >= (3, 12)
    else "MemoryError: the program is too large or nested too deeply to compile"
)
"""How a run names the parser's limit: Python's own words where its parser has some (3.12+);
3.11's raises a bare ``MemoryError``, and the run says what it means."""


@pytest.mark.parametrize(
    ("program", "named"),
    [
        ("x = " + "-" * 10_000 + "1", TOO_NESTED_TO_PARSE),
        ("f = " + "lambda: " * 3_000 + "1", TOO_NESTED_TO_PARSE),
        ("x = " + "+".join(["1"] * 10_000), "RecursionError: maximum recursion depth exceeded"),
    ],
    ids=["unary-minus", "lambdas", "long-sum"],
)
def test_a_program_past_the_parsers_limits_fails_naming_the_limit_before_any_process_starts(
    fresh_runtime: SubprocessCodeRuntime, program: str, named: str
) -> None:
    assert len(program) <= HOST_PARSE_LIMIT
    kind, message = failure(run(fresh_runtime, program))
    assert kind == "exception"
    assert message.startswith(named)
    assert fresh_runtime.template_pid is None  # nothing was spawned
    assert failure(run(fresh_runtime, "x = (")) == (
        "exception",
        "  File \"<run_code>\", line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed",
    )


def test_a_program_longer_than_the_host_compiles_is_compiled_by_its_worker(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Parsing costs the host memory and time in proportion to the program, so a long one is
    # compiled inside its run's limits: it runs as any other, and its syntax error reads the
    # same, from the worker.
    body = "x = 1\n" * (HOST_PARSE_LIMIT // 6 + 1)
    assert run(runtime, body + "return 3").value == 3
    assert failure(run(runtime, body + "return (")) == (
        "exception",
        f'  File "<run_code>", line {body.count(chr(10)) + 1}\n    return (\n           ^\n'
        "SyntaxError: '(' was never closed",
    )
    assert failure(run(runtime, body + "x = " + "-" * 10_000 + "1"))[1] == TOO_NESTED_TO_PARSE


def test_a_program_longer_than_the_channels_buffer_reaches_its_worker_whole(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A pre-forked worker is sent what its channel takes of the program before the run is set
    # up around it; the rest follows through the run's own writer. Each run is its own worker.
    for size in (65_536 - 64, 300_000, 1_000_000):
        program = f"text = '{'a' * size}'\nreturn [len(text), text[-3:]]"
        assert run(runtime, program).value == [size, "aaa"], size


def test_a_short_program_that_would_cost_the_compiler_gigabytes_costs_only_its_own_run() -> None:
    # A finally block is emitted twice per nesting level: twenty levels in under a kilobyte
    # take the compiler seconds and gigabytes. Only the worker compiles, inside the run's
    # memory budget; the host merely parses.
    levels = 20
    bomb = "".join(f"{' ' * i}try:\n{' ' * i} x = 1\n{' ' * i}finally:\n" for i in range(levels))
    bomb += " " * levels + "x = 1\n"
    assert len(bomb) < 1024
    limited = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=20_000, max_memory_mb=256))
    try:
        kind, message = failure(run(limited, bomb + "return 1"))
        assert (kind, message.splitlines()[-1]) == (
            "exception",
            "MemoryError: the program is too large or nested too deeply to compile",
        )
        assert run(limited, "return 1").value == 1
    finally:
        limited.close()


def test_an_error_only_the_compiler_finds_fails_from_the_worker_as_a_syntax_error(
    runtime: SubprocessCodeRuntime,
) -> None:
    assert failure(run(runtime, "x = 1\nbreak")) == (
        "exception",
        "  File \"<run_code>\", line 2\n    break\n    ^^^^^\nSyntaxError: 'break' outside loop",
    )


def test_an_uncaught_exception_keeps_earlier_logs(runtime: SubprocessCodeRuntime) -> None:
    result = run(runtime, 'print("before")\nraise ValueError("kaboom")')
    assert result.logs == ["before"]
    kind, message = failure(result)
    assert kind == "exception"
    assert message.startswith("Traceback (most recent call last):")
    assert message.endswith("ValueError: kaboom")


def test_an_exception_whose_text_holds_a_lone_surrogate_is_still_an_exception(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Its text is replaced as a printed one is; sent as it was, it could not be encoded and
    # the run ended as a worker exit that says nothing of the error.
    result = run(runtime, 'print("before")\nraise ValueError("bad " + chr(0xD800))')
    kind, message = failure(result)
    assert kind == "exception"
    assert message.endswith("\nValueError: bad \ufffd")
    assert result.logs == ["before"]


def test_the_program_sees_an_empty_environment(runtime: SubprocessCodeRuntime) -> None:
    assert run(runtime, "import os\nreturn dict(os.environ)").value == {}


@pytest.mark.parametrize("program", ["import sys\nsys.exit(7)", "import os\nos._exit(7)"])
def test_exiting_is_a_worker_exit(runtime: SubprocessCodeRuntime, program: str) -> None:
    assert run(runtime, program) == CodeRunResult(
        [], error=CodeRunFailure("worker-exit", "worker exited with code 7 before completing")
    )


def test_what_a_program_wrote_to_the_real_streams_before_exiting_is_kept(
    runtime: SubprocessCodeRuntime,
) -> None:
    # An interpreter flushes its streams as it exits; so does the worker on sys.exit.
    program = 'import sys\nsys.__stdout__.write("before exit")\nsys.exit(7)'
    assert run(runtime, program) == CodeRunResult(
        ["before exit"],
        error=CodeRunFailure("worker-exit", "worker exited with code 7 before completing"),
    )


def test_no_state_survives_between_runs(runtime: SubprocessCodeRuntime) -> None:
    assert run(runtime, "import builtins\nbuiltins.leak = 1\nreturn 1").value == 1
    assert run(runtime, 'return hasattr(__import__("builtins"), "leak")').value is False


def marking(marks: Path, name: str) -> str:
    """A program that leaves a mark named ``name`` in ``marks`` (granted to it) and returns it."""
    return f"open({str(marks / name)!r}, 'a').write('ran')\nreturn {name!r}"


def wait_for_idle_workers(runtime: SubprocessCodeRuntime, count: int) -> None:
    deadline = time.monotonic() + 10
    while runtime.idle_workers < count:
        assert time.monotonic() < deadline, "the pool did not refill"
        time.sleep(0.01)


@pytest.fixture
def granting_runtime(tmp_path: Path) -> Iterator[SubprocessCodeRuntime]:
    own = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[str(tmp_path)])))
    assert run(own, "return 0").value == 0  # a first run starts the pool of idle workers
    wait_for_idle_workers(own, 2)
    yield own
    own.close()


def test_a_prepared_run_runs_nothing_of_its_program_until_the_run_comes(
    granting_runtime: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    runtime = granting_runtime
    runtime.prepare(marking(tmp_path, "never"), [])
    runtime.prepare(marking(tmp_path, "claimed"), [])
    assert runtime.prepared_runs == 2
    time.sleep(0.5)  # long enough for both workers to have compiled their programs
    assert sorted(os.listdir(tmp_path)) == []
    assert run(runtime, marking(tmp_path, "claimed")).value == "claimed"
    assert runtime.prepared_runs == 1
    assert (tmp_path / "claimed").read_text() == "ran"
    assert run(runtime, marking(tmp_path, "again")).value == "again"  # not prepared: as ever
    runtime.close()
    assert runtime.prepared_runs == 0
    assert sorted(os.listdir(tmp_path)) == ["again", "claimed"]


def test_a_prepared_run_is_claimed_only_by_the_same_program_and_bindings(
    granting_runtime: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    runtime = granting_runtime
    program = "return await tools.echo({'value': 1})"
    runtime.prepare(program, [namespace_wire("tools", ["echo", "other"], TOOL_CALL_ERROR)])
    assert run(runtime, program, tools(echo=echo)).value == "echo:1"
    assert runtime.prepared_runs == 1  # its bindings differ: the run took a fresh worker
    wait_for_idle_workers(runtime, 1)
    runtime.prepare(program, [namespace_wire("tools", ["echo"], TOOL_CALL_ERROR)])
    assert runtime.prepared_runs == 2
    assert run(runtime, program, tools(echo=echo)).value == "echo:1"
    assert runtime.prepared_runs == 1


def test_a_prepared_program_that_does_not_compile_fails_as_any_other_once_its_run_comes(
    granting_runtime: SubprocessCodeRuntime,
) -> None:
    runtime = granting_runtime
    runtime.prepare("x = (", [])
    assert runtime.prepared_runs == 1
    assert failure(run(runtime, "x = (")) == (
        "exception",
        "  File \"<run_code>\", line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed",
    )
    assert runtime.prepared_runs == 0


def test_a_prepared_run_is_released_unrun_when_its_call_ends_and_the_pool_refills(
    granting_runtime: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    runtime = granting_runtime
    release = runtime.prepare(marking(tmp_path, "released"), [])
    assert release is not None and runtime.prepared_runs == 1
    assert runtime.idle_workers == 1  # replaced once its call has ended, as a run's worker
    release()
    release()  # once is enough; again does nothing
    assert runtime.prepared_runs == 0
    wait_for_idle_workers(runtime, 2)  # the worker it took is replaced
    claimed = runtime.prepare(marking(tmp_path, "claimed"), [])
    assert claimed is not None and claimed.holds()
    assert run(runtime, marking(tmp_path, "claimed")).value == "claimed"
    assert not claimed.holds()  # its call's end skips the release and its Ctrl-C guard
    claimed()  # its run took it: nothing to release
    time.sleep(0.3)
    assert os.listdir(tmp_path) == ["claimed"]


def test_a_prepared_run_waiting_past_its_wall_ceiling_for_its_run_still_runs(
    tmp_path: Path,
) -> None:
    # Time a prepared worker waits for its run (guards, approval, a run slot) is not the run's:
    # its init starts the wall clock only at the go.
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_wall_ms=300, sandbox=CodeSandbox(write=[str(tmp_path)]))
    )
    try:
        # Not a first run: its wall clock would count the template's start, which a loaded
        # machine stretches past this ceiling.
        runtime.warm_up()
        wait_for_idle_workers(runtime, 2)
        ended: list[Any] = []
        end_unrun = runtime._end_unrun

        def ending(slot: Any) -> None:
            ended.append(slot)
            end_unrun(slot)

        runtime._end_unrun = ending  # type: ignore[method-assign]
        program = marking(tmp_path, "late")
        assert runtime.prepare(program, []) is not None
        time.sleep(1.6)  # past the ceiling and the init's second of backstop
        assert runtime.prepared_runs == 1
        assert run(runtime, program).value == "late"
        assert runtime.prepared_runs == 0
        assert ended == []  # its run took the prepared worker, alive and well
    finally:
        runtime.close()


def test_a_failure_while_preparing_ends_the_worker_it_took(
    granting_runtime: SubprocessCodeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = granting_runtime
    descriptors = len(os.listdir("/proc/self/fd"))

    def failing(self: Any, boot: bytes, slot: Any) -> Any:
        raise MemoryError("as a prepared run is kept")

    monkeypatch.setattr(_prepared.PreparedRuns, "add", failing)
    assert runtime.prepare("return 1", []) is None  # a hint only: never raises
    assert runtime.prepared_runs == 0
    wait_for_idle_workers(runtime, 2)  # the worker it took was ended and replaced
    time.sleep(0.1)
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert run(runtime, "return 2").value == 2


def slow_to_compile(functions: int, levels: int = 14) -> str:
    """A short program whose compilation takes seconds in little memory: the compiler emits
    each ``finally`` block twice per level of nesting, in each of ``functions`` functions."""
    nest = "".join(
        " " * (level + 1)
        + "try:\n"
        + " " * (level + 1)
        + " x = 1\n"
        + " " * (level + 1)
        + "finally:\n"
        for level in range(levels)
    )
    body = nest + " " * (levels + 1) + "y = 2\n"
    return "".join(f"def f{index}():\n{body}" for index in range(functions)) + "return 1"


def test_a_prepared_worker_still_compiling_is_killed_when_released_under_process_isolation() -> (
    None
):
    # Closing a held worker's channel ends it only once it reads again; a worker busy
    # compiling a costly program is killed instead.
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process"))
    try:
        assert run(runtime, "return 0").value == 0
        wait_for_idle_workers(runtime, 2)
        release = runtime.prepare(slow_to_compile(60), [])  # seconds to compile
        assert release is not None
        (held,) = runtime._prepared._held  # the worker's pid is in its slot's pid report
        deadline = time.monotonic() + 10
        while len(held.slot.status) < 5:  # a busy machine may not have sent it yet
            held.slot.alive()  # reads what has come
            assert time.monotonic() < deadline, "no pid report from the held worker"
            time.sleep(0.01)
        pid = int.from_bytes(held.slot.status[1:5], "big")
        time.sleep(0.2)
        assert _cpu_ticks(pid) is not None  # compiling
        release()
        deadline = time.monotonic() + 5
        while _cpu_ticks(pid) is not None:
            assert time.monotonic() < deadline, "the released worker still runs"
            time.sleep(0.02)
    finally:
        runtime.close()


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_a_run_that_ends_before_it_starts_ends_at_once_with_the_worker_it_took(
    isolation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime hands a pre-forked worker its program before it builds the run; a run that
    # ends before it starts must end that worker, which may be running the program already.
    beats = tmp_path / "beats"
    program = f"import time\nwhile True:\n    open({str(beats)!r}, 'a').write('.')\n"
    program += "    time.sleep(0.02)"
    config = CodeRuntimeConfig(isolation=isolation, sandbox=CodeSandbox(write=(str(tmp_path),)))
    runtime = SubprocessCodeRuntime(config)
    attached: list[int] = []
    ended: list[bool] = []

    class EndedBeforeStart(CodeRun):
        def start(self, signal_: Any) -> None:
            while not beats.exists():  # the worker, given its program, runs it meanwhile
                time.sleep(0.01)
            self.dispose_any_thread()
            ended.append(self._done)  # nothing of it to wait for: it ended its worker at once
            super().start(signal_)
            attached.append(len(self._fds))  # the host's ends of a worker it took

    try:
        assert run(runtime, "return 0").value == 0
        wait_for_idle_workers(runtime, 2)
        monkeypatch.setattr(runtime_module, "CodeRun", EndedBeforeStart)
        assert failure(run(runtime, program)) == ("abort", "runtime disposed")
        monkeypatch.undo()
        time.sleep(0.2)
        size = beats.stat().st_size
        time.sleep(0.3)
        assert beats.stat().st_size == size, "the ended run's worker still runs its program"
        assert ended == [True]
        assert attached == [0]  # an ended run starts nothing: it takes no other worker
        wait_for_idle_workers(runtime, 2)  # nothing else took a worker for it
        assert run(runtime, "return 2").value == 2
    finally:
        runtime.close()


def test_a_dispose_whose_caller_gives_up_still_lets_a_later_one_wait_for_the_template() -> None:
    async def scenario() -> None:
        runtime = SubprocessCodeRuntime()
        assert (await runtime.run(CodeRunRequest("return 1", []))).value == 1
        template = runtime._template._process
        assert template is not None
        first = asyncio.ensure_future(runtime.dispose())
        await asyncio.sleep(0)  # it waits for the template to be reaped
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await runtime.dispose()  # waits for the reaping, not cancelled by the first's caller
        assert template.returncode == 0

    asyncio.run(scenario())


def _cpu_ticks(pid: int) -> int | None:
    """The CPU ticks of live process ``pid``; ``None`` once it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[11]) + int(fields[12])


def test_a_run_cancelled_while_it_waits_for_a_slot_ends_the_worker_it_claimed(
    tmp_path: Path,
) -> None:
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_parallel_runs=1, sandbox=CodeSandbox(write=[str(tmp_path)]))
    )

    async def scenario() -> None:
        assert (await runtime.run(CodeRunRequest("return 0", []))).value == 0
        while runtime.idle_workers < 2:
            await asyncio.sleep(0.01)
        descriptors = len(os.listdir("/proc/self/fd"))
        holder = asyncio.ensure_future(runtime.run(CodeRunRequest("await asyncio.sleep(30)", [])))
        while runtime.runs_in_flight < 1:
            await asyncio.sleep(0.01)
        program = marking(tmp_path, "cancelled")
        assert runtime.prepare(program, []) is not None
        waiting = asyncio.ensure_future(runtime.run(CodeRunRequest(program, [])))
        while runtime.runs_waiting < 1:
            await asyncio.sleep(0.01)
        assert runtime.prepared_runs == 0  # claimed by the waiting run
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        while runtime.idle_workers < 2:  # the pool refills
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert len(os.listdir("/proc/self/fd")) == descriptors
        assert os.listdir(tmp_path) == []

    try:
        asyncio.run(scenario())
    finally:
        runtime.close()


def test_a_prepared_run_no_run_claims_in_time_is_closed_unrun(
    granting_runtime: SubprocessCodeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = granting_runtime
    monkeypatch.setattr(_prepared, "HELD_SECONDS", 0.0)
    runtime.prepare(marking(tmp_path, "expired"), [])
    assert runtime.prepared_runs == 1
    assert run(runtime, "return 1").value == 1  # each run closes the expired ones first
    assert runtime.prepared_runs == 0
    time.sleep(0.3)
    assert os.listdir(tmp_path) == []
    for _ in range(3):  # the pool is whole again
        assert run(runtime, "return 2").value == 2


# --- the program environment (11.6) ----------------------------------------------------------


def test_the_namespace_exposes_bindings_by_item_and_attribute(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def named(value: Any) -> Any:
        return "named"

    bindings = tools(**{"keys": named, "__class__": named, "my-tool": named, "echo": echo})
    program = """
out = {
    "dir": dir(tools),
    "list": list(tools),
    "len": len(tools),
    "in": ["echo" in tools, "nope" in tools],
    "keys": await tools.keys({}),
    "dunder": await tools["__class__"]({}),
    "exotic": await tools["my-tool"]({}),
}
try:
    tools.nope
except AttributeError as exc:
    out["attr_missing"] = str(exc)
try:
    tools["nope"]
except KeyError as exc:
    out["item_missing"] = exc.args[0]
try:
    tools.my_tool
except AttributeError as exc:
    out["near_miss"] = str(exc)
try:
    tools[["unhashable"]]
except KeyError as exc:
    out["unhashable"] = exc.args[0]
try:
    tools.echo()
except TypeError:
    out["arity"] = True
return out
"""
    # A miss like none of them lists the bindings there are.
    listing = 'its bindings are tools["__class__"], tools.echo, tools.keys, tools["my-tool"]'
    assert run(runtime, program, bindings).value == {
        "dir": ["__class__", "echo", "keys", "my-tool"],
        "list": ["__class__", "echo", "keys", "my-tool"],
        "len": 4,
        "in": [True, False],
        "keys": "named",
        "dunder": "named",
        "exotic": "named",
        "attr_missing": f"'tools' has no binding 'nope'; {listing}",
        "item_missing": f"'tools' has no binding 'nope'; {listing}",
        "near_miss": "'tools' has no binding 'my_tool'; call it as tools[\"my-tool\"]",
        "unhashable": f"'tools' has no binding ['unhashable']; {listing}",
        "arity": True,
    }


def test_calling_the_namespace_itself_says_to_call_a_binding(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python said "'Namespace' object is not callable", a class the program never wrote.
    program = """
out = []
for attempt in (
    lambda: tools("my-tool", {"x": 1}),
    lambda: tools("echo", {"x": 1}),
    lambda: tools(),
):
    try:
        attempt()
    except TypeError as exc:
        out.append(str(exc))
return out
"""
    bindings = tools(**{"my-tool": echo, "echo": echo})
    assert run(runtime, program, bindings).value == [
        "'tools' is not callable: call one of its bindings, as `await tools[\"my-tool\"]({...})`",
        "'tools' is not callable: call one of its bindings, as `await tools.echo({...})`",
        "'tools' is not callable: call one of its bindings, as `await tools.name({...})`",
    ]


def test_calling_a_binding_with_keywords_says_to_pass_one_dict(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python-style keyword arguments are the likeliest wrong shape a model writes: the error
    # shows the call as it should have been written.
    program = """
out = []
for attempt in (
    lambda: tools.read_file(path="a.txt", limit=3),
    lambda: tools.read_file(),
    lambda: tools.read_file({"path": "a.txt"}, 3),
    lambda: tools["my-tool"](x=1),
    lambda: tools.read_file({"path": "a.txt"}, limit=3),
):
    try:
        attempt()
    except TypeError as exc:
        out.append(str(exc))
return out
"""
    bindings = tools(read_file=identity, **{"my-tool": identity})
    assert run(runtime, program, bindings).value == [
        "tools.read_file() takes one dict of arguments, not keywords:"
        ' await tools.read_file({"path": ..., "limit": ...})',
        "tools.read_file() takes one dict of arguments: await tools.read_file({...})",
        "tools.read_file() takes one dict of arguments: await tools.read_file({...})",
        'tools["my-tool"]() takes one dict of arguments, not keywords:'
        ' await tools["my-tool"]({"x": ...})',
        # The dict it did pass is not dropped from the call shown.
        "tools.read_file() takes one dict of arguments, not keywords:"
        ' await tools.read_file({..., "limit": ...})',
    ]


def test_a_misspelt_binding_names_the_closest_one(runtime: SubprocessCodeRuntime) -> None:
    # A model that mistypes a tool name is told the name it most likely meant, as Python
    # suggests a misspelt attribute; a name like none of them gets no guess.
    program = """
out = []
for attempt in ("read_fiel", "raed_file", "list_dirs", "frobnicate"):
    try:
        getattr(tools, attempt)
    except AttributeError as exc:
        out.append(str(exc))
try:
    tools["write-fle"]
except KeyError as exc:
    out.append(exc.args[0])
return out
"""
    bindings = tools(read_file=identity, list_dir=identity, **{"write-file": identity})
    assert run(runtime, program, bindings).value == [
        "'tools' has no binding 'read_fiel'; did you mean tools.read_file?",
        "'tools' has no binding 'raed_file'; did you mean tools.read_file?",
        "'tools' has no binding 'list_dirs'; did you mean tools.list_dir?",
        # A name like none of them: the bindings there are.
        "'tools' has no binding 'frobnicate'; its bindings are tools.list_dir,"
        ' tools.read_file, tools["write-file"]',
        "'tools' has no binding 'write-fle'; did you mean tools[\"write-file\"]?",
    ]


def test_a_binding_written_in_another_case_style_names_the_binding(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Models write tool names in the case of the language they think in (``tools.readFile``,
    # ``tools.ListDir``); those are several edits from the binding, and got no guess.
    program = """
out = []
for attempt in ("readFile", "ReadFile", "LIST_DIR", "listDir", "read__file"):
    try:
        getattr(tools, attempt)
    except AttributeError as exc:
        out.append(str(exc))
return out
"""
    bindings = tools(read_file=identity, list_dir=identity)
    assert run(runtime, program, bindings).value == [
        "'tools' has no binding 'readFile'; did you mean tools.read_file?",
        "'tools' has no binding 'ReadFile'; did you mean tools.read_file?",
        "'tools' has no binding 'LIST_DIR'; did you mean tools.list_dir?",
        "'tools' has no binding 'listDir'; did you mean tools.list_dir?",
        "'tools' has no binding 'read__file'; did you mean tools.read_file?",
    ]


def test_a_binding_whose_name_python_would_normalize_is_shown_by_item_access(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python reads a non-ASCII attribute in its NFKC form: `tools.\ufb01le` asks for "file"
    # and `tools.\u017ftat` for "stat". The call forms a program is told to write must reach
    # the binding, so they are item access, as the SDK declares them.
    program = """
out = []
for attempt in (
    lambda: tools["\ufb01le"](x=1),
    lambda: tools.\ufb01le,
    lambda: tools.stat,
):
    try:
        attempt()
    except (AttributeError, TypeError) as exc:
        out.append(str(exc))
return out
"""
    bindings = tools(**{"\ufb01le": identity, "\u017ftat": identity})
    assert run(runtime, program, bindings).value == [
        'tools["\ufb01le"]() takes one dict of arguments, not keywords:'
        ' await tools["\ufb01le"]({"x": ...})',
        "'tools' has no binding 'file'; call it as tools[\"\ufb01le\"]",
        "'tools' has no binding 'stat'; call it as tools[\"\u017ftat\"]",
    ]


def test_a_binding_written_as_attributes_is_named_by_its_first_part(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A model writes a tool named "web.search" as it reads, tools.web.search(...), and one
    # named "my-tool" as tools.my-tool(...), which Python reads as tools.my - tool(...): both
    # ask for the name's first part, which was said to be missing with no word of the tool.
    program = """
out = []
for attempt in (
    lambda: tools.web.search({}),
    lambda: tools.my-tool({}),
    lambda: tools.fs.read({}),
    lambda: tools["fs"],
):
    try:
        attempt()
    except (AttributeError, KeyError) as exc:
        out.append(str(exc))
return out
"""
    names = ["web.search", "my-tool", "fs.read", "fs.write", "fs.list"]
    assert run(runtime, program, tools(**dict.fromkeys(names, identity))).value == [
        "'tools' has no binding 'web'; call it as tools[\"web.search\"]",
        "'tools' has no binding 'my'; call it as tools[\"my-tool\"]",
        "'tools' has no binding 'fs'; call one of tools[\"fs.list\"], tools[\"fs.read\"],"
        ' tools["fs.write"]',
        "'tools' has no binding 'fs'; call one of tools[\"fs.list\"], tools[\"fs.read\"],"
        ' tools["fs.write"]',
    ]


def test_a_first_part_shared_by_many_bindings_names_a_few_of_them() -> None:
    names = [f"github.tool_{index:02}" for index in range(12)]
    namespace = worker_api.Namespace("tools", dict.fromkeys(names, echo))
    with pytest.raises(AttributeError) as caught:
        namespace.github  # noqa: B018
    assert str(caught.value) == (
        "'tools' has no binding 'github'; call one of "
        + ", ".join(f'tools["github.tool_{index:02}"]' for index in range(5))
        + " and 7 more"
    )


@pytest.mark.parametrize(
    ("program", "last_line"),
    [
        (
            "count = 1\nreturn coutn + 1",
            "NameError: name 'coutn' is not defined. Did you mean: 'count'?",
        ),
        (
            "def total(values):\n    result = sum(values)\n    return reslut\nreturn total([1])",
            "NameError: name 'reslut' is not defined. Did you mean: 'result'?",
        ),
        (
            "import math\nreturn math.sqr(2)",
            "AttributeError: module 'math' has no attribute 'sqr'. Did you mean: 'sqrt'?",
        ),
        (
            "return 'a b'.splt()",
            "AttributeError: 'str' object has no attribute 'splt'. Did you mean: 'split'?",
        ),
    ],
    ids=["program-name", "function-local", "module-attribute", "method"],
)
def test_a_misspelt_name_s_failure_suggests_the_name_as_python_does(
    runtime: SubprocessCodeRuntime, program: str, last_line: str
) -> None:
    # The interpreter's "Did you mean" was missing: the traceback module makes none before
    # 3.12, and from 3.12 on it reads the frame's names, which the rendering had cleared.
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert message.endswith("\n" + last_line)


def test_a_misspelt_name_in_a_thread_is_suggested_while_other_threads_print_on(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
import threading
stop = threading.Event()
def chatter():
    n = 0
    while not stop.is_set() or n < 200:
        print(f"line {n}", file=__import__("sys").stderr)
        n += 1
def work():
    total = 1
    return totl
talker = threading.Thread(target=chatter)
talker.start()
for _ in range(20):
    failing = threading.Thread(target=work)
    failing.start()
    failing.join()
stop.set()
talker.join()
"""
    result = run(runtime, program)
    assert result.error is None, result.error
    failures = [entry for entry in result.logs if entry.startswith("Exception in thread")]
    lines = [entry for entry in result.logs if entry.startswith("line ")]
    assert len(failures) == 20
    assert all(
        entry.endswith("NameError: name 'totl' is not defined. Did you mean: 'total'?")
        for entry in failures
    )
    assert lines == [f"line {n}" for n in range(len(lines))]


def test_a_misspelt_binding_s_failure_suggests_the_binding_once(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The namespace's text names the binding; the interpreter's own suggestion from its dir()
    # repeated it: "...; did you mean tools.echo?. Did you mean: 'echo'?".
    program = """
import traceback
try:
    tools.ech
except AttributeError as exc:
    print(traceback.format_exc().splitlines()[-1], exc.name)
return await tools.ech({})
"""
    result = run(runtime, program, tools(echo=identity))
    missing = "AttributeError: 'tools' has no binding 'ech'; did you mean tools.echo?"
    assert result.logs == [f"{missing} ech"]
    kind, message = failure(result)
    assert kind == "exception"
    assert message.endswith(f"\n{missing}")


def test_a_missing_binding_by_item_reads_in_the_traceback_as_written(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A KeyError shows the repr of its argument, which escaped every quote of the message the
    # model reads; it is still a KeyError.
    program = 'try:\n    tools["write-fle"]\nexcept KeyError:\n    pass\n'
    program += 'await tools["write-fle"]({})'
    result = run(runtime, program, tools(**{"write-file": identity}))
    kind, message = failure(result)
    assert kind == "exception"
    assert message.endswith(
        "\nKeyError: 'tools' has no binding 'write-fle'; did you mean tools[\"write-file\"]?"
    )


def test_a_namespace_spells_the_bindings_out_once_for_all_its_misses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A program probing names (hasattr, getattr with a default) misses often: each miss
    # must not spell out every binding of a namespace of thousands again.
    spelt: list[str] = []

    def loose(name: str) -> str:
        spelt.append(name)
        return loose_name(name)

    monkeypatch.setattr(worker_api, "_loose", loose)
    names = [f"server.tool-{index}" for index in range(200)]
    namespace = worker_api.Namespace("tools", dict.fromkeys(names, echo))
    assert not any(hasattr(namespace, f"candidate_{index}") for index in range(100))
    with pytest.raises(AttributeError, match=r'call it as tools\["server.tool-7"\]$'):
        namespace.server_tool_7  # noqa: B018
    assert len(spelt) <= len(names) + 101


def test_a_miss_compares_itself_with_only_the_bindings_spelt_nearly_like_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each miss may look for the binding it most likely meant, but a program probing names
    # of a namespace of a thousand bindings must not measure each against all of them.
    compared: list[object] = []
    set_seq1 = difflib.SequenceMatcher.set_seq1

    def counted(self: difflib.SequenceMatcher[str], a: str) -> None:
        compared.append(a)
        set_seq1(self, a)

    monkeypatch.setattr(difflib.SequenceMatcher, "set_seq1", counted)
    names = [f"server_tool_{index}" for index in range(1000)]
    namespace = worker_api.Namespace("tools", dict.fromkeys(names, echo))
    assert not any(hasattr(namespace, f"candidate_{index}") for index in range(100))
    with pytest.raises(AttributeError, match=r"did you mean tools\.server_tool_7\?$"):
        namespace.server_tool_7_  # noqa: B018
    with pytest.raises(AttributeError, match=r"did you mean tools\.server_tool_12\?$"):
        namespace.sevrer_tool_12  # noqa: B018
    assert len(compared) <= 100 + 2 * 20


@pytest.mark.parametrize("name", ["my-tool", 'say"hi', "new\\nline", "it's", "line\nbreak"])
def test_the_spelling_a_miss_suggests_reaches_the_binding(name: str) -> None:
    namespace = worker_api.Namespace("tools", {name: echo})
    with pytest.raises(AttributeError) as caught:
        getattr(namespace, loose_name(name))
    suggestion = str(caught.value).split("; call it as ", 1)[1]
    assert eval(suggestion, {"tools": namespace}) is echo


def test_a_namespace_without_error_class_rejects_with_plain_exception(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def fail(value: Any) -> Any:
        raise ValueError("plain")

    program = """
try:
    await ToolCallError.fail({})
except Exception as e:
    return [type(e).__name__, str(e)]
"""
    bindings = [BindingNamespace("ToolCallError", {"fail": fail})]
    assert run(runtime, program, bindings).value == ["Exception", "plain"]


def test_bindings_refuse_calls_from_other_threads(runtime: SubprocessCodeRuntime) -> None:
    program = """
import threading
errors = []
def worker():
    try:
        tools.echo({"value": "x"})
    except RuntimeError as e:
        errors.append(str(e))
thread = threading.Thread(target=worker)
thread.start()
thread.join()
return errors
"""
    assert run(runtime, program, tools(echo=echo)).value == [
        "tools bindings must be called from the run_code event loop: await tools.echo(...) in"
        " the program itself, not in a thread (asyncio.gather runs several calls at once)"
    ]


def test_an_exception_in_a_programs_thread_is_logged_as_one_traceback_of_its_lines(
    runtime: SubprocessCodeRuntime,
) -> None:
    # As threading reports it (the thread's name, then the traceback), but as one log entry,
    # from the program's own frame down, with the program's lines shown as on the main thread.
    program = """
import threading

def work():
    raise ValueError("bad row")

thread = threading.Thread(target=work, name="loader")
thread.start()
thread.join()
exiting = threading.Thread(target=lambda: exit(3))
exiting.start()
exiting.join()
return "joined"
"""
    result = run(runtime, program)
    assert result.value == "joined"
    assert result.logs == [
        "Exception in thread loader:\n"
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 5, in work\n'
        '    raise ValueError("bad row")\n'
        "ValueError: bad row"
    ]


def test_a_child_the_program_forks_leaves_the_run_to_the_worker(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A forked child runs on through the program as in a script: what it prints reaches the
    # logs (through the worker's descriptors, whole lines of any length, never interleaved with
    # the worker's own frames), its binding calls are refused, and its return, its exception
    # or its end settles nothing: the run is the worker's.
    async def echo(value: Any) -> Any:
        return value["x"]

    program = """
import os
pid = os.fork()
for line in range(20):
    print(("CHILD:" if pid == 0 else "WORKER:") + "x" * 100_000)
if pid == 0:
    try:
        await tools.echo({"x": "from the child"})
    except RuntimeError as error:
        print(error)
    return "the child's value"
os.waitpid(pid, 0)
failing = os.fork()
if failing == 0:
    raise ValueError("the child failed")
os.waitpid(failing, 0)
return await tools.echo({"x": "the worker's value"})
"""
    result = run(runtime, program, tools(echo=echo))
    assert result.error is None, result.error
    assert result.value == "the worker's value"
    text = "\n".join(result.logs)  # the child's lines come in chunks of the pipe's reads
    assert text.count("WORKER:") == text.count("CHILD:") == 20
    assert text.count("x") == 40 * 100_000
    assert (
        "tools bindings must be called from the run_code worker, not a process it forked: call"
        " tools.echo(...) in the process the program started in"
    ) in text
    assert "ValueError: the child failed" in text


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_process_that_must_pickle_a_function_of_the_program_says_why_it_cannot(
    runtime: SubprocessCodeRuntime, method: str
) -> None:
    # Pickle's own refusal says only that ``square`` is not in ``__main__``: the failure says
    # why (the program is the body of a function, and no file another process can import)
    # and what runs the function instead.
    program = f"""
import multiprocessing
def square(n):
    print(n * n)
process = multiprocessing.get_context("{method}").Process(target=square, args=(3,))
process.start()
"""
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert "attribute lookup square on __main__ failed" in message
    assert message.endswith(
        "A function or class the program defines cannot be pickled: the program is the body of"
        " a function, so pickle does not find what it defines in __main__, and another process"
        " cannot import it (the program is no file). A multiprocessing pool, a"
        ' ProcessPoolExecutor or a process of the "spawn" or "forkserver" start method pickles'
        ' what it runs; a process of the "fork" start method'
        ' (multiprocessing.get_context("fork").Process(target=...)) runs it as it is, and so do'
        " threads (asyncio.to_thread)."
    )


def test_a_memory_error_says_how_much_memory_the_run_has(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A bare "MemoryError" said nothing of the run's limit, which a script's machine has not.
    kind, message = failure(run(runtime, "rows = bytearray(64 * 1024**3)"))
    assert kind == "exception"
    assert message.endswith(
        "MemoryError\n"
        f"A run_code program has at most {runtime.config.max_memory_mb:g}MB of memory for each"
        " of its processes: this allocation did not fit."
    )


def test_a_memory_error_with_a_text_of_its_own_is_not_said_to_be_the_runs_memory(
    runtime: SubprocessCodeRuntime,
) -> None:
    # As the parser's "Parser stack overflowed" (eval of a deeply nested string) is not.
    program = 'raise MemoryError("the cache holds at most 3 entries")'
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert message.endswith("MemoryError: the cache holds at most 3 entries")


@pytest.mark.parametrize("limit", [2, 5, 23, 25, 28])
def test_a_low_recursion_limit_counts_the_programs_own_frames_as_a_script_s_does(
    runtime: SubprocessCodeRuntime, limit: int
) -> None:
    # Counted from the worker's bottom frame, a limit a script runs well under left the
    # program nothing: it failed as "worker exited with code 0 before completing" or as
    # "program threw an unrenderable value" without running into its limit at all.
    program = f"""
import sys
sys.setrecursionlimit({limit})
print("set", sys.getrecursionlimit())
return sys.getrecursionlimit()
"""
    result = run(runtime, program)
    assert result == CodeRunResult([f"set {limit}"], value=limit)


def test_the_largest_recursion_limit_a_script_may_set_is_taken(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
import sys
sys.setrecursionlimit(2**31 - 1)
try:
    sys.setrecursionlimit(2**31)
except OverflowError as exc:
    return str(exc)
"""
    assert run(runtime, program).value == "Python int too large to convert to C int"


def test_recursing_past_a_lowered_recursion_limit_fails_on_the_programs_own_line(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
import sys
sys.setrecursionlimit(25)
def down(n):
    return down(n + 1)
print("start")
down(0)
"""
    result = run(runtime, program)
    assert result.logs == ["start"]
    kind, message = failure(result)
    assert kind == "exception"
    assert '  File "<run_code>", line 5, in down\n    return down(n + 1)' in message
    assert message.endswith("RecursionError: maximum recursion depth exceeded")
    assert "codebridge" not in message


def test_the_recursion_limit_a_program_reads_is_a_script_s(runtime: SubprocessCodeRuntime) -> None:
    program = """
import sys
default = sys.getrecursionlimit()
def down(n):
    return down(n - 1) if n else "bottom"
deep = down(default - 10)
def set_at_depth(n):
    if n:
        return set_at_depth(n - 1)
    sys.setrecursionlimit(3)
try:
    set_at_depth(100)
except RecursionError as exc:
    refused = str(exc)
return [default, deep, refused]
"""
    assert run(runtime, program).value == [
        1000,
        "bottom",
        "cannot set the recursion limit to 3 at the recursion depth 103: the limit is too low",
    ]


def test_the_stack_a_program_prints_or_formats_holds_its_own_frames_only(
    runtime: SubprocessCodeRuntime,
) -> None:
    # It held some twenty frames of the worker's and asyncio's beneath the program's,
    # naming the worker's files on the host, as no traceback of the program does.
    program = """
import threading, traceback
def inner():
    traceback.print_stack()
    return traceback.format_stack()
in_thread = []
thread = threading.Thread(target=lambda: in_thread.extend(traceback.format_stack()))
thread.start()
thread.join()
return [inner(), in_thread]
"""
    result = run(runtime, program)
    own = [
        '  File "<run_code>", line 10, in <module>\n    return [inner(), in_thread]\n',
        '  File "<run_code>", line 4, in inner\n    traceback.print_stack()\n',
    ]
    assert "\n".join(result.logs) + "\n" == "".join(own)
    assert result.value == [
        [own[0], '  File "<run_code>", line 5, in inner\n    return traceback.format_stack()\n'],
        [
            '  File "<run_code>", line 7, in <lambda>\n'
            "    thread = threading.Thread(target=lambda:"
            " in_thread.extend(traceback.format_stack()))\n"
        ],
    ]


def test_a_traceback_a_program_formats_itself_holds_its_own_frames_only(
    runtime: SubprocessCodeRuntime,
) -> None:
    # An error the worker raised at the program (a binding called with two arguments, a call
    # used unawaited, a binding the namespace lacks) ended in a frame of the worker's, naming
    # its file on the host, in what traceback.format_exc gave; the run's own failure never did.
    program = """
import logging, traceback
texts = []
try:
    tools.echo(1, 2)
except TypeError:
    texts.append(traceback.format_exc())
try:
    tools.echo({})["x"]
except TypeError as exc:
    texts.append("".join(traceback.format_exception(exc)))
try:
    tools.ecoh
except AttributeError:
    logging.exception("missing")
return texts
"""
    result = run(runtime, program, tools(echo=identity))
    texts = [*result.value, *result.logs]
    assert len(texts) == 3
    for text, line, error in zip(
        texts,
        [5, 9, 13],
        [
            "TypeError: tools.echo() takes one dict of arguments: await tools.echo({...})",
            "TypeError: tools.echo(...) was not awaited: it is the pending call, not its result;"
            " write (await tools.echo(...))[...]",
            "AttributeError: 'tools' has no binding 'ecoh'; did you mean tools.echo?",
        ],
        strict=True,
    ):
        assert f'Traceback (most recent call last):\n  File "<run_code>", line {line}, in' in text
        assert text.count('  File "') == 1, text
        assert text.endswith(f"\n{error}\n")


def test_a_crash_in_c_leaves_the_programs_line_in_the_logs(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A segmentation fault ended the run as "worker exited with signal SIGSEGV" and nothing
    # else: nothing said which line of the program crashed.
    program = """
import ctypes
print("reading")
ctypes.string_at(0)
"""
    result = run(runtime, program)
    assert failure(result) == ("worker-exit", "worker exited with signal SIGSEGV before completing")
    logs = "".join(result.logs)
    assert "Fatal Python error: Segmentation fault" in logs
    assert '  File "<run_code>", line 4 in <module>' in logs


def test_a_multiprocessing_lock_the_sandbox_cannot_make_says_why_and_what_works(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The sandbox grants no /dev/shm, where multiprocessing makes its semaphores: the failure
    # was only "OSError: [Errno 30] Read-only file system", from inside multiprocessing.
    program = """
from concurrent.futures import ProcessPoolExecutor
def square(n):
    return n * n
with ProcessPoolExecutor(2) as pool:
    return list(pool.map(square, range(3)))
"""
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert '  File "<run_code>", line 5, in <module>' in message
    assert message.endswith("OSError: [Errno 30] Read-only file system\n" + NO_SHARED_MEMORY)
    # A block of shared memory is made there too.
    program = (
        "from multiprocessing import shared_memory\nshared_memory.SharedMemory(create=True, size=8)"
    )
    kind, message = failure(run(runtime, program))
    assert "OSError: [Errno 30] Read-only file system: '/psm_" in message
    assert message.endswith(NO_SHARED_MEMORY)
    # Any other read-only file is only that.
    kind, message = failure(run(runtime, 'open("/usr/made-here", "w")'))
    assert message.endswith("OSError: [Errno 30] Read-only file system: '/usr/made-here'")


NO_SHARED_MEMORY = (
    "A run_code program has no POSIX shared memory (/dev/shm), where multiprocessing makes its"
    " semaphores and shared memory blocks: a multiprocessing lock, queue, pool or SharedMemory,"
    " or a ProcessPoolExecutor, cannot be made. Threads (asyncio.to_thread, a"
    ' ThreadPoolExecutor), subprocess and a process of the "fork" start method'
    ' (multiprocessing.get_context("fork").Process(target=...)) work.'
)
NO_NETWORK = (
    "A run_code program has no network: its sandbox refuses every socket but the pairs"
    " socket.socketpair() makes of type SOCK_STREAM (its default) or SOCK_SEQPACKET, and"
    " resolves no name. Reach what is outside through the tools."
)


def test_a_socket_the_sandbox_refuses_says_the_program_has_no_network(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The failure was only "PermissionError: [Errno 1] Operation not permitted", from inside
    # socket.py (or asyncio), naming neither the sandbox nor the tools.
    program = """
import socket
left, right = socket.socketpair()
left.close()
right.close()
await asyncio.open_connection("127.0.0.1", 80)
"""
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert '  File "<run_code>", line 6, in <module>' in message
    assert message.endswith("PermissionError: [Errno 1] Operation not permitted\n" + NO_NETWORK)
    # A name is no more resolved, which CPython calls a temporary failure.
    kind, message = failure(run(runtime, 'import socket\nsocket.getaddrinfo("tools.invalid", 80)'))
    assert message.endswith(
        "socket.gaierror: [Errno -3] Temporary failure in name resolution\n" + NO_NETWORK
    )
    # A datagram pair is refused too, which socketpair() makes when asked.
    program = "import socket\nsocket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)"
    kind, message = failure(run(runtime, program))
    assert message.endswith("PermissionError: [Errno 1] Operation not permitted\n" + NO_NETWORK)
    # gethostbyname fails in C, straight from the program's line, as an unknown name.
    kind, message = failure(run(runtime, 'import socket\nsocket.gethostbyname("tools.invalid")'))
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith("socket.gaierror: [Errno -2] Name or service not known\n" + NO_NETWORK)


def test_a_process_of_the_fork_start_method_runs_a_function_of_the_program(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
import multiprocessing
def square(n):
    print(n * n)
process = multiprocessing.get_context("fork").Process(target=square, args=(3,))
process.start()
process.join()
return process.exitcode
"""
    result = run(runtime, program)
    assert result.value == 0, result
    assert "".join(result.logs).strip() == "9"


def test_help_on_a_binding_or_its_namespace_shows_what_the_namespace_describes(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Python's own help would describe the worker's closure (``call(*args, **kwargs)``) and
    # namespace class. Replies to calls already in flight that arrive while help waits for its
    # text reach their calls as ever.
    asked: list[str | None] = []

    def describe(name: str | None) -> str | None:
        asked.append(name)
        return None if name == "quiet" else f"all about {name or 'every binding'}"

    program = """
pending = [tools.echo({"value": n}) for n in range(20)]
help(tools.echo)
help(tools["my-tool"])
help(tools)
help(tools.quiet)
values = await asyncio.gather(*pending)
print(len(values), values[-1])
"""
    bindings = [
        BindingNamespace(
            "tools",
            {"echo": echo, "my-tool": echo, "quiet": echo},
            TOOL_CALL_ERROR,
            describe=describe,
        )
    ]
    result = run(runtime, program, bindings)
    assert result.error is None, result.error
    assert list(result.logs) == [
        "Help on tools.echo (call it as `await tools.echo(args)`):\n\nall about echo",
        'Help on tools["my-tool"] (call it as `await tools["my-tool"](args)`):\n\n'
        "all about my-tool",
        "Help on tools, the binding namespace (call a binding as `await tools.name(args)`):"
        "\n\nall about every binding",
        "Help on tools.quiet (call it as `await tools.quiet(args)`):\n\n"
        "A binding: it takes one dict of arguments; await the call for its value.",
        "20 echo:19",
    ]
    assert asked == ["echo", "my-tool", None, "quiet"]


def test_help_on_a_call_says_it_is_a_pending_call_and_where_the_tool_is_described(
    runtime: SubprocessCodeRuntime,
) -> None:
    # help(tools.echo({...})) (help on the call instead of the binding) showed the worker's
    # own CallHandle class: a page of its internals and nothing of the tool.
    program = """
help(tools["my-tool"]({"value": 1}))
call = tools.echo({"value": 2})
help(call)
print(await call)
"""
    bindings = tools(echo=echo, **{"my-tool": echo})
    result = run(runtime, program, bindings)
    assert result.error is None, result.error
    assert list(result.logs) == [
        'Help on a call of tools["my-tool"]: it is the pending call, not its result; await'
        ' it for the tool\'s value. help(tools["my-tool"]) describes the tool.',
        "Help on a call of tools.echo: it is the pending call, not its result; await it for"
        " the tool's value. help(tools.echo) describes the tool.",
        "echo:2",
    ]


def test_help_on_print_and_help_describes_the_builtins_not_the_workers_methods(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Both are the worker's bound methods in the program: help(print) described
    # "method print in module _dsh_codebridge_worker._worker" of a "Worker instance".
    for program in ("help(print)\nhelp(help)", 'help("print")\nhelp("builtins.help")'):
        result = run(runtime, program)
        assert result.error is None, result.error
        text = "".join(result.logs)
        assert "Help on built-in function print in module builtins:" in text
        assert "Define the builtin 'help'." in text
        assert "_worker" not in text
        assert "Worker" not in text


def test_help_in_a_thread_of_the_program_says_where_the_description_is(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Only the program's own thread asks the host: a thread was shown the bare binding text
    # as if the tool had no description at all.
    program = """
import threading
thread = threading.Thread(target=help, args=(tools.echo,))
thread.start()
thread.join()
help(tools.echo)
"""
    bindings = [
        BindingNamespace("tools", {"echo": echo}, TOOL_CALL_ERROR, describe=lambda _: "all")
    ]
    result = run(runtime, program, bindings)
    assert result.error is None, result.error
    assert list(result.logs) == [
        "Help on tools.echo (call it as `await tools.echo(args)`):\n\n"
        "A binding: it takes one dict of arguments; await the call for its value.\n"
        "(help() in a thread shows only this: call it in the program itself, outside any"
        " thread, for the description the tools have)",
        "Help on tools.echo (call it as `await tools.echo(args)`):\n\nall",
    ]


def test_a_describer_is_asked_only_about_its_bindings_and_its_namespace(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A program can send the host a help request of its own through the worker it runs in,
    # naming anything: the describer was handed whatever it named.
    asked: list[object] = []

    def describe(name: str | None) -> str | None:
        asked.append(name)
        return f"all about {name}"

    program = """
ask = print.__self__.describe
return [ask("tools", 5), ask("tools", "no-such-binding"), ask("tools", "echo")]
"""
    bindings = [BindingNamespace("tools", {"echo": echo}, TOOL_CALL_ERROR, describe=describe)]
    result = run(runtime, program, bindings)
    assert result.error is None, result.error
    assert result.value == [None, None, "all about echo"]
    assert asked == ["echo"]


def test_help_text_larger_than_a_frame_says_so_instead_of_failing_the_run() -> None:
    # The reply carrying it was over max_frame_bytes: the run failed with frame-limit, naming
    # "the result of ?help.tools", a binding the program never called.
    own = SubprocessCodeRuntime(CodeRuntimeConfig(max_frame_bytes=2_000))
    try:
        bindings = [
            BindingNamespace(
                "tools", {"echo": echo}, TOOL_CALL_ERROR, describe=lambda _: "é" * 3_000
            )
        ]
        result = run(own, "help(tools.echo)\nhelp(tools)\nreturn 1", bindings)
    finally:
        own.close()
    assert result.error is None, result.error
    assert result.value == 1
    assert [entry.split("\n\n")[1] for entry in result.logs] == [
        "(The description is 6000 bytes, more than one frame of this run takes: max_frame_bytes"
        " is 2000.)",
        "(The description is 6000 bytes, more than one frame of this run takes: max_frame_bytes"
        " is 2000: help() on one binding shows less.)",
    ]


def test_help_asked_again_and_again_without_a_describer_is_no_misuse_of_the_channel(
    runtime: SubprocessCodeRuntime,
) -> None:
    # With no describer the host answered each help request as a call of no binding, a frame
    # it could not use: the 10,001st failed the run for sending too many of those.
    program = f"for _ in range({IGNORED_FRAMES_LIMIT + 1}):\n    help(tools.echo)\nreturn 1"
    result = run(runtime, program, tools(echo=echo))
    assert result.error is None, result.error
    assert result.value == 1


def test_a_bindings_signature_is_the_call_the_sdk_declares(
    runtime: SubprocessCodeRuntime,
) -> None:
    # It was the worker's closure's, ``(*args: 'Any', **kwargs: 'Any') -> 'CallHandle'``.
    program = """
import inspect
def scale(a, b=1):
    pass
return [
    str(inspect.signature(tools.echo)),
    str(inspect.signature(tools["read"])),
    str(inspect.signature(scale)),
    str(inspect.signature(len)),
]
"""
    result = run(runtime, program, tools(echo=echo, read=echo))
    assert result.value == ["(args: dict, /)", "(args: dict, /)", "(a, b=1)", "(obj, /)"]


def test_help_without_a_describer_names_the_bindings_and_leaves_other_objects_to_python(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = "help(tools)\nhelp(tools.echo)\nprint(tools.echo.__doc__)\nhelp(len)"
    result = run(runtime, program, tools(echo=echo, read=echo))
    assert result.error is None, result.error
    namespace, binding, doc, *python = result.logs
    assert namespace.endswith("\n\nBindings: echo, read")
    assert binding.endswith(
        "A binding: it takes one dict of arguments; await the call for its value."
    )
    assert doc == (
        "A binding: await it with one dict of arguments for its value; help() on it shows its"
        " description and parameters."
    )
    assert "len(obj, /)" in "".join(python)


def test_a_forked_child_writes_its_prints_and_stream_writes_as_a_script_s_child_does(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each print or write went out as a line of its own: ``print("a", end="")`` then
    # ``print("b")`` came out as two lines. The child's descriptors are files here, read back.
    program = """
import os, sys
out = os.open("out.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
err = os.open("err.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
pid = os.fork()
if pid == 0:
    os.dup2(out, 1)
    os.dup2(err, 2)
    print("progress", end="")
    sys.stdout.write(".")
    print(".", "done", sep="")
    print("warning: ", end="", file=sys.stderr)
    sys.stderr.write("late\\n")
    os._exit(0)
os.waitpid(pid, 0)
return [open("out.txt").read(), open("err.txt").read()]
"""
    result = run(runtime, program)
    assert result.value == ["progress..done\n", "warning: late\n"], result


def test_a_forked_child_keeps_its_stdout_and_stderr_apart_as_a_script_s_child_does(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The child silences its standard output, as a script's child may: what it writes to
    # ``sys.stderr`` (a print, a write, a thread's uncaught exception) still reaches the logs,
    # and what it writes to ``sys.stdout`` does not.
    program = """
import os, sys, threading
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    print("child stdout print")
    sys.stdout.write("child stdout write\\n")
    print("child stderr print", file=sys.stderr)
    sys.stderr.write("child stderr write\\n")
    def fail():
        raise ValueError("child thread failed")
    thread = threading.Thread(target=fail, name="helper")
    thread.start()
    thread.join()
    os._exit(0)
os.waitpid(pid, 0)
return "waited"
"""
    result = run(runtime, program)
    assert result.value == "waited", result
    text = "\n".join(result.logs)
    assert "child stdout" not in text
    assert "child stderr print" in text
    assert "child stderr write" in text
    assert "Exception in thread helper:" in text
    assert "ValueError: child thread failed" in text


def test_an_exception_a_finalizer_raises_is_logged_as_one_traceback_of_its_lines(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
class Handle:
    def __del__(self):
        raise OSError("close failed")
    def __repr__(self):
        return "<Handle>"

def drop(handle):
    del handle

drop(Handle())
return "dropped"
"""
    result = run(runtime, program)
    assert result.value == "dropped"
    [entry] = result.logs  # one entry, as the interpreter reports it
    heading, report = entry.split("\n", 1)
    assert heading.startswith("Exception ignored in: <function Handle.__del__")
    assert report == (
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 4, in __del__\n'
        '    raise OSError("close failed")\n'
        "OSError: close failed"
    )


def test_a_forked_child_waiting_on_the_loop_takes_none_of_the_workers_wake_ups(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The child's copy of the event loop shares the worker's wake-up socket pair: a child
    # waiting on it read the wake-ups of the worker's threads, and the worker slept through
    # the results of its ``asyncio.to_thread`` calls until the wall ceiling.
    program = """
import asyncio, os, time
if os.fork() == 0:
    await asyncio.Future()
for _ in range(200):
    await asyncio.to_thread(time.sleep, 0.001)
return "every thread's result came"
"""
    result = run(runtime, program)
    assert result.error is None, result.error
    assert result.value == "every thread's result came"


def test_tracebacks_show_only_the_programs_frames(runtime: SubprocessCodeRuntime) -> None:
    async def fail(value: Any) -> Any:
        raise Exception("denied")

    kind, message = failure(run(runtime, "await tools.fail({})", tools(fail=fail)))
    assert kind == "exception"
    assert message == (
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 1, in <module>\n'
        "    await tools.fail({})\n"
        "ToolCallError: denied"
    )


def test_a_keyboard_interrupt_raised_in_a_task_shows_the_tasks_lines(
    runtime: SubprocessCodeRuntime,
) -> None:
    # asyncio lets a ``KeyboardInterrupt`` out of its loop at once, from the task that raised
    # it, past the program's own frame, which awaits that task.
    program = """
async def work():
    raise KeyboardInterrupt("stop here")
await asyncio.create_task(work())
"""
    assert failure(run(runtime, program)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 3, in work\n'
        '    raise KeyboardInterrupt("stop here")\n'
        "KeyboardInterrupt: stop here",
    )


def test_a_stop_iteration_at_the_top_level_fails_as_in_a_script(
    runtime: SubprocessCodeRuntime,
) -> None:
    # It left the coroutine the program's body is, and failed the run as "RuntimeError:
    # coroutine raised StopIteration", a coroutine the program never wrote, with no line.
    kind, message = failure(run(runtime, "rows = []\nfirst = next(iter(rows))"))
    assert (kind, without_carets(message)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 2, in <module>\n'
        "    first = next(iter(rows))\n"
        "StopIteration",
    )
    # In a coroutine of the program's own it is Python's RuntimeError, on the program's line.
    program = "async def first():\n    return next(iter([]))\nawait first()"
    kind, message = failure(run(runtime, program))
    assert kind == "exception"
    assert message.splitlines()[-3:] == [
        '  File "<run_code>", line 3, in <module>',
        "    await first()",
        "RuntimeError: coroutine raised StopIteration",
    ]


def test_a_traceback_through_the_workers_print_shows_only_the_programs_frames(
    runtime: SubprocessCodeRuntime,
) -> None:
    # ``print`` is the worker's (a builtin has no frame): an exception raised in the program's
    # ``__str__`` under it shows the program's lines, not the worker's files between them.
    program = """
class Row:
    def __str__(self):
        raise ValueError("no text")
print("row:", Row())
"""
    kind, message = failure(run(runtime, program))
    assert (kind, without_carets(message)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 5, in <module>\n'
        '    print("row:", Row())\n'
        '  File "<run_code>", line 4, in __str__\n'
        '    raise ValueError("no text")\n'
        "ValueError: no text",
    )


def test_a_traceback_points_at_the_programs_own_line_and_columns(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The carets sit under the failing expression of a last line without a newline, and a form
    # feed or a line separator inside a string literal does not shift the lines shown.
    kind, message = failure(run(runtime, 'import json\nreturn json.loads("{bad")'))
    assert kind == "exception"
    # Python 3.13 draws the callee's part of the span with '~': the span is the same.
    assert [line.replace("~", "^") for line in message.splitlines()[1:4]] == [
        '  File "<run_code>", line 2, in <module>',
        '    return json.loads("{bad")',
        "           ^^^^^^^^^^^^^^^^^^",
    ]
    program = 'text = "a\u2028b\x0cc"\ncount = len(text)\nraise ValueError(count)\n'
    assert failure(run(runtime, program)) == (
        "exception",
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 3, in <module>\n'
        "    raise ValueError(count)\n"
        "ValueError: 5",
    )


def test_a_task_group_s_failures_show_only_the_programs_frames(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each member of the group was raised in a task of its own: a failed call awaited
    # directly by the group has no frame of the program at all, so a note names the call;
    # one awaited in the program's coroutine shows that coroutine's line; neither shows the
    # worker's own files.
    async def fail(value: Any) -> Any:
        raise Exception(f"denied {value['n']}")

    direct = """
async with asyncio.TaskGroup() as group:
    group.create_task(tools.echo({"value": 0}))
    group.create_task(tools["my-tool"]({"n": 1}))
"""
    kind, message = failure(run(runtime, direct, tools(echo=echo, **{"my-tool": fail})))
    assert kind == "exception"
    assert "codebridge" not in message
    assert message.split("\n")[-4:] == [
        "  +-+---------------- 1 ----------------",
        "    | ToolCallError: denied 1",
        '    | raised by a call of tools["my-tool"]',
        "    +------------------------------------",
    ]
    nested = """
async def one(n):
    return await tools.fail({"n": n})

async with asyncio.TaskGroup() as group:
    group.create_task(one(2))
"""
    kind, message = failure(run(runtime, nested, tools(fail=fail)))
    assert kind == "exception"
    assert "codebridge" not in message
    assert message.split("\n")[-7:] == [
        "  +-+---------------- 1 ----------------",
        "    | Traceback (most recent call last):",
        '    |   File "<run_code>", line 3, in one',
        '    |     return await tools.fail({"n": n})',
        "    |            ^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "    | ToolCallError: denied 2",
        "    +------------------------------------",
    ]


def test_an_unrenderable_exception_is_reported_as_such(runtime: SubprocessCodeRuntime) -> None:
    program = """
class Hostile(Exception):
    def __str__(self):
        raise RuntimeError("no")
raise Hostile()
"""
    assert failure(run(runtime, program)) == ("exception", "program threw an unrenderable value")


def test_lone_surrogates_in_logs_become_replacement_characters(
    runtime: SubprocessCodeRuntime,
) -> None:
    assert run(runtime, 'print("a\\ud800b")').logs == ["a\ufffdb"]


def test_a_programs_standard_streams_are_blocking_as_a_processs_are(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The host's ends of the worker's pipes are non-blocking; the program's never are: a
    # write to a full one would fail with BlockingIOError rather than wait for the host.
    program = "import os\nreturn [os.get_blocking(fd) for fd in (0, 1, 2)]"
    assert run(runtime, program).value == [True, True, True]


def test_native_output_of_child_processes_is_logged(runtime: SubprocessCodeRuntime) -> None:
    program = 'import subprocess\nsubprocess.run(["echo", "from-child"], check=True)\nreturn 1'
    assert run(runtime, program) == CodeRunResult(["from-child\n"], value=1)


def test_prints_to_other_streams_behave_normally(runtime: SubprocessCodeRuntime) -> None:
    program = """
import contextlib, io
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    print("captured")
print("logged")
return buffer.getvalue()
"""
    assert run(runtime, program) == CodeRunResult(["logged"], value="captured\n")


def test_each_run_has_its_own_session_and_process_group() -> None:
    # The process isolation on its own: under the sandbox the run's PID namespace hides the
    # session and the template (the sandbox tests check that instead).
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process"))
    try:
        program = "import os\nreturn [os.getpid(), os.getsid(0), os.getpgid(0), os.getppid()]"
        pid, session, group, parent = run(runtime, program).value
        assert session == pid
        assert group == pid
        assert parent == runtime.template_pid
        assert pid != run(runtime, "import os\nreturn os.getpid()").value
    finally:
        runtime.close()


def test_no_descriptor_is_inherited(runtime: SubprocessCodeRuntime, tmp_path: Any) -> None:
    marker = tmp_path / "host-only-file"
    held = os.open(marker, os.O_CREAT | os.O_RDWR)
    program = """
import os
out = {}
for fd in range(0, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    out[str(fd)] = os.readlink(f"/proc/self/fd/{fd}")
return out
"""
    try:
        opened = run(runtime, program).value
    finally:
        os.close(held)
    assert opened["0"] == "/dev/null"
    assert all(opened[fd].startswith("pipe:") for fd in ("1", "2", "3", "4"))
    # Under the sandbox, 5 is the notice socket to the run's own init (see _sandbox._init).
    assert runtime.isolation == "sandbox" and opened["5"].startswith("socket:")
    # 6 is the pipe the worker writes its stacks to when asked where the program is.
    assert opened["6"].startswith("pipe:")
    extra = {fd: target for fd, target in opened.items() if int(fd) > 6}
    # Beyond those, only what the worker's own event loop opened (epoll, its self-pipe).
    assert all(target.startswith(("anon_inode:", "socket:")) for target in extra.values()), extra
    assert str(marker) not in opened.values()


def test_channel_descriptors_are_not_inheritable(runtime: SubprocessCodeRuntime) -> None:
    # Nor is the where pipe (6): a program's subprocess never writes the worker's stacks.
    program = "import os\nreturn [os.get_inheritable(fd) for fd in (0, 1, 2, 3, 4, 6)]"
    assert run(runtime, program).value == [True, True, True, False, False, False]


def test_limits_are_applied_in_the_worker() -> None:
    limited = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=2500, max_memory_mb=300))
    try:
        program = """
import resource
return [list(resource.getrlimit(resource.RLIMIT_AS)), list(resource.getrlimit(resource.RLIMIT_CPU)),
        list(resource.getrlimit(resource.RLIMIT_CORE))]
"""
        memory, cpu, core = run(limited, program).value
    finally:
        limited.close()
    assert memory == [300 * 2**20, 300 * 2**20]
    assert cpu == [4, 5]
    assert core == [1, 1]  # the one limit at which no core is dumped, piped or not


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_pool_of_threads_fits_the_memory_budget_and_recurses_as_deep_as_the_main_thread(
    isolation: str,
) -> None:
    # RLIMIT_AS is max_memory_mb (the default here); each of these threads uses a few pages of
    # it, not a budget's share.
    limited = SubprocessCodeRuntime(
        CodeRuntimeConfig(isolation=isolation, compute_ms=20_000, max_wall_ms=60_000)
    )
    program = """
import concurrent.futures, functools, sys, threading

class Down:  # each level goes through C (the class's call) and back into Python
    def __init__(self, depth):
        try:
            self.depth = Down(depth + 1).depth
        except RecursionError:
            self.depth = depth

def nested_repr():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    try:
        return len(repr(deep))
    except RecursionError:
        return "RecursionError"

everyone = threading.Barrier(32)  # all 32 at once: no thread of the pool is reused early

def job(_):
    everyone.wait()
    return [Down(0).depth, nested_repr()]

pool = concurrent.futures.ThreadPoolExecutor(32)
try:
    in_threads = list(pool.map(job, range(64)))
finally:
    everyone.abort()  # a thread that could not start must not leave the others waiting
    pool.shutdown()
twenty = threading.Barrier(20)
asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(20))
try:
    await asyncio.gather(*(asyncio.to_thread(twenty.wait) for _ in range(20)))
finally:
    twenty.abort()
on_main_thread = Down(0).depth

# Models raise the recursion limit; a thread still takes a depth the main thread takes.
sys.setrecursionlimit(100_000)

def deepest(limit):  # how deep lru_cache's calls go, up to limit
    @functools.lru_cache(None)
    def down(depth):
        if depth == limit:
            return depth
        try:
            return down(depth + 1)
        except RecursionError:
            return depth
    return down(0)

deep_in_a_thread = []
thread = threading.Thread(target=lambda: deep_in_a_thread.append(deepest(5000)))
thread.start()
thread.join()
return [sorted({depth for depth, _ in in_threads}), {text for _, text in in_threads}.pop(),
        on_main_thread, deepest(5000), deep_in_a_thread]
"""
    try:
        result = run(limited, program)
    finally:
        limited.close()
    assert result.error is None, result.error
    depths, nested, on_main_thread, deep_on_main_thread, deep_in_a_thread = result.value
    assert nested == "RecursionError"
    # As deep as the recursion limit allows, less the frames each thread starts under (a frame
    # more or less on Python 3.13, whose first calls of a class take a longer path until its
    # interpreter has specialized them).
    assert depths and all(on_main_thread - 20 <= depth <= on_main_thread + 20 for depth in depths)
    # Where the recursion limit alone bounds C recursion (3.11), that is the whole depth asked
    # for; Python 3.12+ stops it at a depth of its own, the same in every thread.
    if sys.version_info < (3, 12):
        assert deep_on_main_thread == 5000
    assert len(deep_in_a_thread) == 1
    assert deep_on_main_thread - 20 <= deep_in_a_thread[0] <= deep_on_main_thread + 20


def test_runs_may_be_in_flight_at_once(runtime: SubprocessCodeRuntime) -> None:
    async def scenario() -> list[CodeRunResult]:
        gate = asyncio.Event()
        waiting = 0

        async def wait_for_all(value: Any) -> Any:
            nonlocal waiting
            waiting += 1
            if waiting == 3:
                gate.set()
            await gate.wait()
            return value["n"]

        bindings = tools(meet=wait_for_all)
        return await asyncio.gather(
            *[
                runtime.run(CodeRunRequest(f'return await tools.meet({{"n": {n}}})', bindings))
                for n in range(3)
            ]
        )

    assert [result.value for result in asyncio.run(scenario())] == [0, 1, 2]


def test_runs_from_another_threads_event_loop_work(runtime: SubprocessCodeRuntime) -> None:
    results: list[CodeRunResult] = []
    thread = threading.Thread(target=lambda: results.append(run(runtime, "return 'other'")))
    thread.start()
    thread.join()
    assert results[0].value == "other"


# --- the seam: misuse raises before anything starts -----------------------------------------------


def test_the_subprocess_runtime_is_a_code_runtime() -> None:
    runtime = SubprocessCodeRuntime()
    assert isinstance(runtime, CodeRuntime)
    assert (runtime.language, runtime.isolation) == ("python", "sandbox")
    assert runtime.config == CodeRuntimeConfig()


def _namespace(name: str, error: ErrorClassSpec | None = None) -> BindingNamespace:
    return BindingNamespace(name, {"echo": echo}, error)


@pytest.mark.parametrize(
    "bindings",
    [
        [_namespace("not valid!")],
        [_namespace("await")],
        [_namespace("print")],
        [_namespace("asyncio")],
        [_namespace("__builtins__")],
        [_namespace("tools"), _namespace("tools")],
        [_namespace("tools", ErrorClassSpec("not valid!", "tool_name"))],
        [_namespace("tools", ErrorClassSpec("print", "tool_name"))],
        [_namespace("tools", ErrorClassSpec("tools", "tool_name"))],
        [
            _namespace("tools", ErrorClassSpec("E", "a")),
            _namespace("more", ErrorClassSpec("E", "b")),
        ],
        [_namespace("tools", ErrorClassSpec("E", "x")), _namespace("E")],
        [_namespace("tools", ErrorClassSpec("ToolCallError", ""))],
        [_namespace("tools", ErrorClassSpec("ToolCallError", "args"))],
        [_namespace("tools", ErrorClassSpec("ToolCallError", "message"))],
        [_namespace("tools", ErrorClassSpec("ToolCallError", "with_traceback"))],
        [_namespace("tools", ErrorClassSpec("ToolCallError", "add_note"))],
        [_namespace("tools", ErrorClassSpec("ToolCallError", "_private"))],
    ],
    ids=lambda bindings: repr([(b.global_name, b.error_class) for b in bindings]),
)
def test_misused_bindings_raise_before_spawning(
    fresh_runtime: SubprocessCodeRuntime, bindings: list[BindingNamespace]
) -> None:
    with pytest.raises(ValueError, match=r"^code runtime: "):
        run(fresh_runtime, "return 1", bindings)
    assert fresh_runtime.template_pid is None


def test_a_namespace_named_like_an_error_class_is_allowed(
    runtime: SubprocessCodeRuntime,
) -> None:
    result = run(
        runtime, 'return await ToolCallError.echo({"value": "ok"})', [_namespace("ToolCallError")]
    )
    assert result.value == "echo:ok"


def _positive(key: str, got: str) -> str:
    return f"code runtime: config.{key} must be a positive number, got {got}"


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"compute_ms": -1}, ValueError, _positive("compute_ms", "-1")),
        ({"max_wall_ms": 0}, ValueError, _positive("max_wall_ms", "0")),
        ({"max_memory_mb": float("inf")}, ValueError, _positive("max_memory_mb", "inf")),
        ({"compute_ms": True}, TypeError, _positive("compute_ms", "True")),
        # An integer past what a float holds is no finite number: named, not an OverflowError.
        pytest.param(
            {"max_wall_ms": 10**400},
            ValueError,
            _positive("max_wall_ms", "1" + "0" * 400),
            id="max_wall_ms=10**400",
        ),
        pytest.param(
            {"compute_ms": 10**5000},
            ValueError,
            _positive("compute_ms", "an integer of 16610 bits"),
            id="compute_ms=10**5000",
        ),
        (
            {"max_output_bytes": 3},
            ValueError,
            "code runtime: config.max_output_bytes must be a safe integer of at least 4, got 3",
        ),
        (
            {"max_output_bytes": 4.5},
            ValueError,
            "code runtime: config.max_output_bytes must be a safe integer of at least 4, got 4.5",
        ),
        (
            {"max_frame_bytes": 0},
            ValueError,
            "code runtime: config.max_frame_bytes must be a positive safe integer, got 0",
        ),
    ],
)
def test_bad_config_values_are_rejected(
    settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        CodeRuntimeConfig(**settings)
    assert str(raised.value) == message


def test_runtime_config_from_copies_the_five_budgets() -> None:
    class Settings:
        compute_ms = 1500
        max_wall_ms = 9000
        max_output_bytes = 1024
        max_memory_mb = 128
        max_frame_bytes = 4096

    assert runtime_config_from(Settings()) == CodeRuntimeConfig(
        compute_ms=1500,
        max_wall_ms=9000,
        max_output_bytes=1024,
        max_memory_mb=128,
        max_frame_bytes=4096,
    )


def test_disposal_settles_live_runs_reaps_workers_and_refuses_later_runs() -> None:
    # The process isolation, whose worker pid is the host's (the sandbox tests cover disposal
    # under the sandbox).
    disposable = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process"))

    async def scenario() -> tuple[CodeRunResult, int]:
        started = asyncio.Event()

        async def ready(value: Any) -> Any:
            started.set()
            return None

        program = "import os\nprint(os.getpid())\nawait tools.ready({})\nwhile True:\n    pass"
        task = asyncio.create_task(disposable.run(CodeRunRequest(program, tools(ready=ready))))
        await asyncio.wait_for(started.wait(), 10)
        await disposable.dispose()
        result = await task
        return result, int(result.logs[0])

    result, pid = asyncio.run(scenario())
    assert result.error == CodeRunFailure("abort", "runtime disposed")
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped before dispose returned
    with pytest.raises(RuntimeError, match=r"^code runtime: run\(\) after disposal$"):
        run(disposable, "return 1")


def test_pre_aborted_and_misuse_paths_never_spawn(fresh_runtime: SubprocessCodeRuntime) -> None:
    signal = AbortController()
    signal.abort("too-late")
    request = CodeRunRequest("return 1", [], signal.signal)
    assert asyncio.run(fresh_runtime.run(request)) == CodeRunResult(
        [], error=CodeRunFailure("abort", "too-late")
    )
    with pytest.raises(TypeError):
        asyncio.run(fresh_runtime.run("return 1"))  # type: ignore[arg-type]
    assert fresh_runtime.template_pid is None


def test_a_program_that_breaks_the_workers_loop_shows_no_worker_frames(
    runtime: SubprocessCodeRuntime,
) -> None:
    result = run(runtime, "asyncio.get_running_loop().stop()\nawait asyncio.sleep(1)")
    assert result.error == CodeRunFailure(
        "exception", "RuntimeError: Event loop stopped before Future completed."
    )


def test_a_program_printing_more_entries_than_are_kept_apart_shows_every_line(
    runtime: SubprocessCodeRuntime,
) -> None:
    count = MAX_LOG_ENTRIES + 50_000
    result = run(runtime, f"for i in range({count}):\n    print(i)")
    assert result.error is None, result.error
    assert len(result.logs) == MAX_LOG_ENTRIES
    assert result.logs[:3] == ["0", "1", "2"]
    assert "\n".join(result.logs) == "\n".join(str(i) for i in range(count))


class _LoopOutOfWatches(asyncio.SelectorEventLoop):
    """A loop whose kernel refuses every new watch, as one out of descriptors or of epoll
    watches does."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
        raise OSError(28, "No space left on device")


def test_a_host_that_cannot_watch_its_worker_gets_a_failed_result_not_an_exception() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig())
    refusing = _LoopOutOfWatches()
    try:
        result = refusing.run_until_complete(runtime.run(CodeRunRequest("return 1", [])))
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert "cannot watch the worker" in result.error.message
        assert "No space left on device" in result.error.message
        later = asyncio.run(runtime.run(CodeRunRequest("return 2", [])))
        assert later.error is None and later.value == 2
    finally:
        refusing.close()
        runtime.close()
