"""Code Mode: run failures, settlement, preconditions and the model-visible result
(run failures and the model-visible result)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from typing import Any

import pytest
from code_mode_support import (
    FakeProgram,
    FakeRuntime,
    Gates,
    code_system,
    dispatch_events,
    echo_tool,
    failure_of,
    run_code,
    texts,
    value_of,
    wait_for,
)
from msgspec import UNSET

from dsh_tools import (
    DEFAULT,
    AbortController,
    AbortSignal,
    CodeRunFailedError,
    FrozenDict,
    FrozenList,
    GenericCallView,
    HarnessError,
    SessionLog,
    ToolDefinition,
    ToolErrorInfo,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)
from dsh_tools.codebridge import (
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    SubprocessCodeRuntime,
)
from dsh_tools.pipeline import spill_policy
from dsh_tools.pipeline._spill import preview_text

NO_OUTPUT = "(run_code completed with no output)"


def run(system: ToolSystem, scenario: Any) -> Any:
    """Run ``scenario(system)`` (a coroutine function) on a fresh event loop."""
    return asyncio.run(scenario(system))


def returning(value: Any, logs: tuple[str, ...] = ()) -> FakeRuntime:
    """A runtime whose program prints ``logs`` and returns ``value`` (UNSET = no result)."""

    async def program(p: FakeProgram) -> Any:
        for entry in logs:
            p.print(entry)
        return value

    return FakeRuntime(program)


def failing(kind: str, message: str, logs: tuple[str, ...] = ()) -> FakeRuntime:
    """A runtime whose run fails with ``kind`` / ``message`` after printing ``logs``."""

    async def program(p: FakeProgram) -> Any:
        for entry in logs:
            p.print(entry)
        return p.fail(kind, message)

    return FakeRuntime(program)


class MemoryStore:
    """A spill store keeping what it saved."""

    def __init__(self) -> None:
        self.saved: list[tuple[str, dict[str, Any]]] = []

    def save(self, text: str, source: Any) -> str:
        self.saved.append((text, dict(source)))
        return f"mem://{len(self.saved)}"


# --- failures and settlement ---------------------------------------------------------------------


def test_a_failed_run_is_a_code_run_failed_error_result_with_its_logs() -> None:
    runtime = failing("timeout", "compute budget exhausted (300ms busy)", ("got this far",))
    with code_system(runtime) as system:
        result = system.execute(run_code())
    assert result.is_error
    assert failure_of(result).info == ToolErrorInfo("CodeRunFailedError", "CODE_RUN_FAILED")
    (text,) = texts(result.content)
    assert "code run failed (timeout)" in text
    assert "compute budget exhausted (300ms busy)" in text
    assert "got this far" in text


def test_code_run_failed_error_has_its_code_and_class_name() -> None:
    error = CodeRunFailedError("exception", "boom")
    assert isinstance(error, HarnessError)
    assert error.code == "CODE_RUN_FAILED"
    assert type(error).__name__ == "CodeRunFailedError"
    assert str(error) == "code run failed (exception): boom"


def test_an_outer_cancel_aborts_the_running_call_and_abandons_the_queued_one() -> None:
    gates = Gates()
    controller = AbortController()
    both_submitted = asyncio.Event()

    async def program(p: FakeProgram) -> Any:
        calls = [
            await p.fire("slow", {"value": "first"}),
            await p.fire("slow", {"value": "second"}),
        ]
        both_submitted.set()  # the second waits in the queue behind the first (not safe)
        return await asyncio.gather(*calls)

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code(signal=controller.signal)))
        await gates.entered("first")
        await wait_for(both_submitted.wait())
        controller.abort("user-cancel")
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[gates.tool("slow", safe=False)]) as system:
        result = run(system, scenario)
        starts = dispatch_events(system, "tool/code-dispatch-start")
    assert gates.started == ["first"]
    assert gates.aborted == ["first"]
    assert [e["arguments"]["value"] for e in starts] == ["first"]
    assert result.is_error
    assert "code run failed (abort)" in texts(result.content)[0]


def test_a_raising_runtime_still_drains_and_its_message_is_the_error() -> None:
    gates = Gates()

    async def program(p: FakeProgram) -> Any:
        await p.fire("slow", {"value": "slow"})
        await gates.entered("slow")
        raise RuntimeError("backend exploded")

    with code_system(FakeRuntime(program), tools=[gates.tool("slow")]) as system:
        result = system.execute(run_code())
        events = system.session.events
    assert result.is_error
    assert texts(result.content) == ["Error: backend exploded"]
    assert failure_of(result).info is UNSET
    assert gates.aborted == ["slow"]
    kinds = [e.type for e in events]
    assert kinds.index("tool/code-dispatch") < kinds.index("tool/result")


def test_without_an_agent_sub_calls_run_and_are_logged_without_one() -> None:
    """Dispatch events are recorded with or without an agent; global listeners shape
    them."""
    seen: list[Any] = []
    shaped: list[Any] = []

    async def shaper(log: Any, next: Any) -> Any:
        shaped.append(log.agent)
        return await next()

    async def program(p: FakeProgram) -> Any:
        return await p.call("echo", {"value": "x"})

    with code_system(FakeRuntime(program), tools=[echo_tool(seen=seen)]) as system:
        system.tools.on_code_dispatch_log(shaper)
        system.agent("A").tools.on_code_dispatch_log(shaper)
        result = system.execute(run_code(agent=None))
        events = system.session.events
    assert value_of(result)["result"] == "echo:x"
    assert seen == [{"value": "x"}]
    assert [e.type for e in events] == [
        "tool/call",
        "tool/code-dispatch-start",
        "tool/code-dispatch",
        "tool/result",
    ]
    assert {e.agent for e in events} == {None}
    assert shaped == [None]


def test_executing_run_code_without_a_runtime_is_an_error_result() -> None:
    with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=None) as system:
        result = system.execute(run_code())
    assert result.is_error
    assert "requires a code runtime" in texts(result.content)[0]


# --- the transport's card, preconditions and content ---------------------------------------------


def test_the_call_card_is_titled_by_the_description() -> None:
    with code_system() as system:
        transport = system.tools.get("run_code")
    assert transport is not None
    assert transport.present_call is not None
    card = transport.present_call({"code": "return 1", "description": "Return the constant one"})
    assert card == GenericCallView(
        title="Return the constant one", kind="execute", raw_input="return 1"
    )
    assert transport.present_result is None


def test_a_blank_description_is_an_error_before_the_runtime_runs() -> None:
    runtime = FakeRuntime()
    with code_system(runtime) as system:
        result = system.execute(run_code(description="   "))
    assert result.is_error
    assert texts(result.content) == ["Error: invalid description: expected a non-empty string"]
    assert runtime.runs == 0


@pytest.mark.parametrize(
    ("logs", "value", "content"),
    [
        (("printed",), UNSET, "printed"),
        ((), "returned", "returned"),
        (("printed",), "returned", "printed\nreturned"),
        ((), UNSET, NO_OUTPUT),
    ],
    ids=["logs", "result", "both", "neither"],
)
def test_the_content_joins_logs_and_result(logs: tuple[str, ...], value: Any, content: str) -> None:
    with code_system(returning(value, logs)) as system:
        result = system.execute(run_code())
    assert texts(result.content) == [content]


def test_a_post_execute_spill_preview_is_the_final_content() -> None:
    store = MemoryStore()
    full = "\n".join(f"line {n}" for n in range(400))
    with code_system(returning(full)) as system:
        system.tools.on_post_execute(spill_policy(200, store), prepend=True)
        result = system.execute(run_code())
    source = {"tool_name": "run_code", "call_id": "call-1", "label": "result"}
    assert store.saved == [(full, source)]
    assert texts(result.content) == [preview_text(full, "mem://1", 200)]
    assert value_of(result) == {"logs": [], "result": full}


def test_an_output_limit_failure_shows_the_captured_output() -> None:
    runtime = failing("output-limit", "outer output exceeded 8 bytes", ("captured before failure",))
    with code_system(runtime) as system:
        result = system.execute(run_code())
    assert texts(result.content) == [
        "Error: code run failed (output-limit): outer output exceeded 8 bytes\n"
        "Captured output:\ncaptured before failure"
    ]


# --- what crosses to the program -----------------------------------------------------------------


def test_the_program_gets_the_value_and_the_log_keeps_every_content_block() -> None:
    blocks = [{"type": "text", "text": "x" * 300}, {"type": "reasoning", "text": "hidden"}]
    mixed = define_tool(
        name="mixed",
        description="Renders text and reasoning.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: blocks),
        execute=lambda args, ctx: "mixed-value",
    )

    async def program(p: FakeProgram) -> Any:
        return await p.call("mixed", {})

    with code_system(FakeRuntime(program), tools=[mixed]) as system:
        result = system.execute(run_code())
        (settle_event,) = dispatch_events(system)
    assert value_of(result)["result"] == "mixed-value"
    assert settle_event["content"] == blocks


def dunder_tools(seen: list[str]) -> list[ToolDefinition]:
    """Tools named ``__class__`` and ``keys`` that record being reached."""

    def make(name: str) -> ToolDefinition:
        def body(args: Any, ctx: Any) -> str:
            seen.append(name)
            return f"reached {name}"

        return define_tool(
            name=name,
            description=f"The {name} tool.",
            parameters={},
            output=ToolOutput(
                schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
            ),
            execute=body,
        )

    return [make("__class__"), make("keys")]


def test_exotic_tool_names_are_bindings_keyed_exactly() -> None:
    seen: list[str] = []

    async def program(p: FakeProgram) -> Any:
        return [await p.call("__class__", {}), await p.call("keys", {})]

    with code_system(FakeRuntime(program), tools=dunder_tools(seen)) as system:
        result = system.execute(run_code())
    assert seen == ["__class__", "keys"]
    assert value_of(result)["result"] == ["reached __class__", "reached keys"]


def test_exotic_tool_names_reach_their_tools_from_the_real_worker() -> None:
    seen: list[str] = []
    program = 'return [await tools["__class__"]({}), await tools.keys({})]'
    with code_system(DEFAULT, tools=dunder_tools(seen)) as system:
        result = system.execute(run_code(program))
    assert not result.is_error, result.content
    assert seen == ["__class__", "keys"]
    assert value_of(result)["result"] == ["reached __class__", "reached keys"]


def test_a_program_starting_with_a_byte_order_mark_runs_as_written_after_it() -> None:
    # Some models start their text with U+FEFF, as an editor saving "UTF-8 with signature"
    # does; Python drops it from a file, and so does run_code, keeping the model's line
    # numbers.
    program = "\ufeffprint('first line')\nraise ValueError('on line two')"
    with code_system(DEFAULT) as system:
        ran = system.execute(run_code("\ufeffreturn 1"))
        failed = system.execute(run_code(program))
    assert value_of(ran) == {"logs": [], "result": 1}
    assert failure_of(failed).info is not None
    (text,) = texts(failed.content)
    assert 'File "<run_code>", line 2' in text
    assert "ValueError: on line two" in text
    assert text.endswith("Captured output:\nfirst line")


# --- rendering through the system ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"n": 42, "ok": True}, '{\n  "n": 42,\n  "ok": true\n}'),
        ({}, "{}"),
        ({"outer": [{"inner": True}]}, json.dumps({"outer": [{"inner": True}]}, indent=2)),
        (["x", 2], '[\n  "x",\n  2\n]'),
        ([], "[]"),
        (None, "null"),
        ("raw", "raw"),
        (UNSET, NO_OUTPUT),
    ],
    ids=["object", "empty-object", "nested", "array", "empty-array", "null", "string", "absent"],
)
def test_results_render_as_pretty_json_or_raw_text(value: Any, text: str) -> None:
    with code_system(returning(value)) as system:
        result = system.execute(run_code())
    assert texts(result.content) == [text]
    if value is UNSET:
        assert value_of(result) == {"logs": []}
        assert "result" not in value_of(result)
    else:
        assert value_of(result) == {"logs": [], "result": value}


def test_a_5000_deep_result_renders_with_bounded_indentation() -> None:
    value: Any = {
        "emptyArray": [],
        "emptyObject": {},
        "pair": ["leaf", 2],
        "record": {"first": True, "second": None},
    }
    for _ in range(5000):
        value = [value]
    with code_system(returning(value)) as system:
        result = system.execute(run_code())
    assert not result.is_error
    (text,) = texts(result.content)
    assert text.startswith("[\n  [\n    [")
    assert '"leaf"' in text
    assert text.endswith("]")
    assert len(text) < 11_000
    assert '[{"emptyArray":[],"emptyObject":{},"pair":["leaf",2],' in text


# --- cancellation and the session ----------------------------------------------------------------


def test_a_pre_aborted_outer_signal_never_reaches_the_runtime() -> None:
    ran: list[Any] = []
    runtime = FakeRuntime()
    with code_system(runtime, tools=[echo_tool(seen=ran)]) as system:
        result = system.execute(run_code(signal=AbortSignal.aborted_signal("too-late")))
    assert texts(result.content) == ["Error: tool call aborted before dispatch"]
    assert failure_of(result).info == ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH")
    assert runtime.runs == 0
    assert ran == []


def test_an_outer_cancel_seen_by_a_program_that_ignores_it() -> None:
    ran: list[Any] = []
    caught: list[str] = []
    controller = AbortController()

    async def program(p: FakeProgram) -> Any:
        controller.abort("cancelled-mid-run")
        caught.append(await p.attempt("echo", {"value": "x"}))
        return caught[0]

    runtime = FakeRuntime(program, honor_signal=False)
    with code_system(runtime, tools=[echo_tool(seen=ran)]) as system:
        result = system.execute(run_code(signal=controller.signal))
    assert ran == []
    assert caught == ["run_code run is over (cancelled-mid-run); echo not dispatched"]
    assert texts(result.content) == ["Error: tool call aborted"]
    assert failure_of(result).info == ToolErrorInfo("AbortError", "ABORTED")


def test_session_derivation_hides_dispatch_events() -> None:
    log = SessionLog()
    log.append("user/message", FrozenDict(content=[{"type": "text", "text": "hello"}]), "A")
    dispatch = FrozenDict(
        parent_call_id="call-1", sub_call_id="call-1:code:1", name="echo", arguments={}
    )
    log.append("tool/code-dispatch-start", dispatch, "A")
    log.append(
        "tool/code-dispatch",
        FrozenDict(dispatch, is_error=False, content=[{"type": "text", "text": "echo:x"}]),
        "A",
    )
    assert log.derive_messages() == [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    ]


def test_a_real_run_derives_only_its_outer_result() -> None:
    async def program(p: FakeProgram) -> Any:
        return await p.call("echo", {"value": "x"})

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.execute(run_code())
        kinds = [e.type for e in system.session.events]
        messages = system.session.derive_messages()
    assert "tool/code-dispatch" in kinds
    assert [m["content"][0]["type"] for m in messages] == ["tool-result"]
    assert messages[0]["content"][0]["tool_call_id"] == "call-1"


def test_runtime_results_keep_their_frozen_logs() -> None:
    """A runtime may hand back frozen logs; the canonical value carries them as a list."""

    class FrozenLogs(FakeRuntime):
        async def run(self, request: Any) -> CodeRunResult:
            self.requests.append(request)
            return CodeRunResult(FrozenList(["a", "b"]), value="v")

    with code_system(FrozenLogs()) as system:
        result = system.execute(run_code())
    assert value_of(result) == {"logs": ["a", "b"], "result": "v"}
    assert texts(result.content) == ["a\nb\nv"]


def test_a_program_that_stops_the_template_still_settles_and_the_next_run_works() -> None:
    # The worker's parent is the template process; a program can freeze it (SIGSTOP), so the
    # worker's exit report never comes. The run must still settle (faults become results,
    # never hangs), and later runs must get a working template. Under the process isolation,
    # where the template is reachable (the sandbox refuses the signal; its tests check that).
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=10_000, max_wall_ms=20_000, isolation="process")
    )
    freeze_parent = (
        "import os, signal\nparent = os.getppid()\nos.kill(parent, signal.SIGSTOP)\nreturn parent\n"
    )

    async def scenario() -> tuple[CodeRunResult, CodeRunResult]:
        frozen = await runtime.run(CodeRunRequest(freeze_parent, []))
        after = await runtime.run(CodeRunRequest("return 2\n", []))
        return frozen, after

    try:
        frozen, after = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        runtime.close()
    assert frozen.error is None, frozen
    assert after.error is None and after.value == 2, after
    with pytest.raises(ProcessLookupError):  # the frozen template was killed and reaped
        os.kill(frozen.value, 0)


def test_real_runs_leave_no_garbage_for_the_cyclic_collector() -> None:
    # A run's parts refer to each other while it runs (the bridge and its pool, the run and its
    # binding calls); once it is over, reference counting must free all of it, and every
    # sub-call's record with it: a burst of sub-calls otherwise lives on until a collection,
    # and the collections of a busy host cost more than the sub-calls.
    async def twice(args: Any, ctx: Any) -> Any:
        return str(args["value"]) * 2

    def rejecting(args: Any, ctx: Any) -> Any:
        raise ValueError("refused")

    tools = [
        define_tool(
            name="twice",
            description="Double a string.",
            parameters={"value": {"type": "string", "required": True}},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: []),
            execute=twice,
        ),
        define_tool(
            name="rejecting",
            description="Always fails.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: []),
            execute=rejecting,
        ),
    ]
    programs = [
        "values = await asyncio.gather(*[tools.twice({'value': str(i)}) for i in range(50)])\n"
        "return len(values)",
        "try:\n    await tools.rejecting({})\nexcept ToolCallError as error:\n    print(error)\n"
        "return 1",
        "print('partial')\nraise ValueError('the program fails')",
    ]
    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        for tool in tools:
            system.tools.register(tool)

        def run_all() -> list[bool]:
            outcomes = [system.execute(run_code(program)).is_error for program in programs]
            system.session.clear()
            return outcomes

        assert run_all() == [False, False, True]
        gc.collect()
        gc.disable()
        try:
            assert run_all() == [False, False, True]
            assert gc.collect() == 0
        finally:
            gc.enable()
