"""The ``tools/code-dispatch-log`` waterfall: the ``CodeDispatchLog``
payload, listener order, scope filtering, contained failures and the drain."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from code_mode_support import (
    FakeProgram,
    FakeRuntime,
    code_system,
    dispatch_events,
    echo_tool,
    run_code,
    value_of,
    wait_for,
)
from structlog.testing import capture_logs

from dsh_tools import (
    AbortController,
    CodeDispatchLog,
    ExecuteBatch,
    ToolCall,
    ToolOutput,
    define_tool,
)


async def until(predicate: Any) -> None:
    """Yield to the loop until ``predicate()`` holds (bounded)."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0)

    await wait_for(poll())


async def echo_program(p: FakeProgram) -> Any:
    return await p.call("echo", {"value": "x"})


def test_listeners_get_the_payload_and_next_returns_the_content_unchanged() -> None:
    payloads: list[CodeDispatchLog] = []
    downstream: list[Any] = []
    outer: list[Any] = []

    async def listener(log: CodeDispatchLog, next: Any) -> Any:
        payloads.append(log)
        content = await next()
        downstream.append(content)
        return content

    def observe(exec: Any, result: Any) -> None:
        if exec.name == "run_code":
            outer.append(exec.token)

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(listener)
        system.tools.on_result(observe)
        system.execute(run_code(agent="A"))
    (log,) = payloads
    assert log.exec.call_id == "call-1"
    assert log.exec.name == "run_code"
    assert log.exec.token is outer[0]
    assert log.agent == "A"
    assert log.sub_call_id == "call-1:code:1"
    assert log.name == "echo"
    assert log.is_error is False
    assert log.content == [{"type": "text", "text": "echo:x"}]
    assert downstream == [log.content]
    with pytest.raises(AttributeError):
        log.content = []  # type: ignore[misc]


def test_a_listener_reshapes_the_logged_content_but_not_the_programs_value() -> None:
    async def redact(log: CodeDispatchLog, next: Any) -> Any:
        await next()
        return [{"type": "text", "text": f"[{log.name} output redacted]"}]

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(redact)
        result = system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert value_of(result)["result"] == "echo:x"
    assert settle["content"] == [{"type": "text", "text": "[echo output redacted]"}]


def test_failed_sub_calls_are_shaped_with_is_error() -> None:
    flags: list[bool] = []

    async def listener(log: CodeDispatchLog, next: Any) -> Any:
        flags.append(log.is_error)
        return await next()

    async def program(p: FakeProgram) -> Any:
        return await p.attempt("missing_arg", {})

    with code_system(FakeRuntime(program), tools=[echo_tool("missing_arg")]) as system:
        system.tools.on_code_dispatch_log(listener)
        system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert flags == [True]
    assert settle["is_error"] is True
    assert settle["content"][0]["text"].startswith("Error: ")


def test_listeners_form_a_waterfall_outermost_first_and_prepend_goes_outside() -> None:
    order: list[str] = []

    def marker(name: str) -> Any:
        async def listener(log: CodeDispatchLog, next: Any) -> Any:
            order.append(f"enter {name}")
            content = await next()
            order.append(f"exit {name}")
            return [*content, {"type": "text", "text": name}]

        return listener

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(marker("first"))
        system.tools.on_code_dispatch_log(marker("second"))
        system.tools.on_code_dispatch_log(marker("outer"), prepend=True)
        system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert order == [
        "enter outer",
        "enter first",
        "enter second",
        "exit second",
        "exit first",
        "exit outer",
    ]
    assert [block["text"] for block in settle["content"]] == ["echo:x", "second", "first", "outer"]


def test_scoped_listeners_shape_only_their_agents_runs() -> None:
    seen: list[tuple[str, str | None]] = []

    def listener(label: str) -> Any:
        async def shape(log: CodeDispatchLog, next: Any) -> Any:
            seen.append((label, log.agent))
            return await next()

        return shape

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(listener("global"))
        system.agent("A").tools.on_code_dispatch_log(listener("scoped-A"))
        system.agent("B").tools.on_code_dispatch_log(listener("scoped-B"))
        system.execute(run_code(agent="A", call_id="a-1"))
        system.execute(run_code(agent="B", call_id="b-1"))
    assert seen == [
        ("global", "A"),
        ("scoped-A", "A"),
        ("global", "B"),
        ("scoped-B", "B"),
    ]


def test_a_disposed_listener_no_longer_shapes() -> None:
    calls: list[str] = []

    async def listener(log: CodeDispatchLog, next: Any) -> Any:
        calls.append(log.sub_call_id)
        return await next()

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        dispose = system.tools.on_code_dispatch_log(listener)
        system.execute(run_code(call_id="first"))
        dispose()
        system.execute(run_code(call_id="second"))
    assert calls == ["first:code:1"]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (None, "a code-dispatch-log listener returned NoneType; expected a list of content blocks"),
        ("text", "a code-dispatch-log listener returned str; expected a list of content blocks"),
        (
            ["not a block"],
            "a code-dispatch-log listener returned a content block that is not a dict with a "
            '"type"',
        ),
        ([{"type": "text", "text": {1, 2}}], "value[0].text is set"),
    ],
    ids=["none", "str", "non-dict-block", "not-lossless"],
)
def test_a_listener_returning_no_content_list_is_a_contained_failure(
    returned: Any, message: str
) -> None:
    async def broken(log: CodeDispatchLog, next: Any) -> Any:
        await next()
        return returned

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(broken)
        with capture_logs() as logs:
            result = system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert value_of(result)["result"] == "echo:x"
    assert settle["content"] == [{"type": "text", "text": "echo:x"}]
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == (
        f"tools: code-dispatch-log listener failed for echo: {message}; "
        "logging the unshaped content"
    )


def test_an_unprintable_listener_error_is_still_formatted() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    async def broken(log: CodeDispatchLog, next: Any) -> Any:
        raise Unprintable

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(broken)
        with capture_logs() as logs:
            system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert settle["content"] == [{"type": "text", "text": "echo:x"}]
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == (
        "tools: code-dispatch-log listener failed for echo: <unprintable thrown value>; "
        "logging the unshaped content"
    )


def test_log_shaping_runs_off_the_program_path_and_is_drained_before_the_result() -> None:
    release = asyncio.Event()
    shaping = asyncio.Event()
    values: list[Any] = []

    async def slow(log: CodeDispatchLog, next: Any) -> Any:
        shaping.set()
        await release.wait()
        return await next()

    async def program(p: FakeProgram) -> Any:
        values.append(await p.call("echo", {"value": "a"}))
        values.append(await p.call("echo", {"value": "b"}))
        return values

    async def scenario() -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await wait_for(shaping.wait())
        await until(lambda: len(values) == 2)
        assert not task.done()
        assert dispatch_events(system) == []
        release.set()
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(slow)
        result = asyncio.run(scenario())
        kinds = [e.type for e in system.session.events]
    assert value_of(result)["result"] == ["echo:a", "echo:b"]
    assert kinds == [
        "tool/call",
        "tool/code-dispatch-start",
        "tool/code-dispatch-start",
        "tool/code-dispatch",
        "tool/code-dispatch",
        "tool/result",
    ]


def test_settles_pair_with_starts_by_sub_call_id_when_shaping_finishes_out_of_order() -> None:
    releases = {"call-1:code:1": asyncio.Event(), "call-1:code:2": asyncio.Event()}
    both = asyncio.Event()
    entered: list[str] = []

    async def shaper(log: CodeDispatchLog, next: Any) -> Any:
        entered.append(log.sub_call_id)
        if len(entered) == 2:
            both.set()
        await releases[log.sub_call_id].wait()
        return await next()

    async def program(p: FakeProgram) -> Any:
        return [await p.call("echo", {"value": "a"}), await p.call("echo", {"value": "b"})]

    async def scenario() -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await wait_for(both.wait())
        releases["call-1:code:2"].set()
        await until(lambda: dispatch_events(system))
        releases["call-1:code:1"].set()
        return await wait_for(task)

    with code_system(FakeRuntime(program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(shaper)
        asyncio.run(scenario())
        starts = dispatch_events(system, "tool/code-dispatch-start")
        settles = dispatch_events(system)
    assert [e["sub_call_id"] for e in starts] == ["call-1:code:1", "call-1:code:2"]
    assert [e["sub_call_id"] for e in settles] == ["call-1:code:2", "call-1:code:1"]
    assert [e["arguments"]["value"] for e in settles] == ["b", "a"]


def test_presentation_meta_is_not_computed_for_sub_calls() -> None:
    metas: list[Any] = []

    def meta(args: Any, value: Any) -> Any:
        metas.append(value)
        return {"length": len(value)}

    with_meta = define_tool(
        name="echo",
        description="Echo with presentation metadata.",
        parameters={"value": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"},
            render=lambda a, v: [{"type": "text", "text": v}],
            presentation_meta=meta,
        ),
        execute=lambda args, ctx: args["value"],
    )
    with code_system(FakeRuntime(echo_program), tools=[with_meta]) as system:
        system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert metas == []
    assert "meta" not in settle


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt], ids=lambda e: e.__name__)
def test_a_listener_raising_systemexit_logs_the_unshaped_content_and_the_loop_runs_on(
    raised: type[BaseException],
) -> None:
    # A batch runs the program on the system loop, and so the log task: what a listener raises
    # there must stay a contained failure, never stop that loop.
    async def broken(log: CodeDispatchLog, next: Any) -> Any:
        raise raised("listener bug")

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(broken)
        for call_id in ("c1", "c2"):
            arguments = '{"code": "return 1", "description": "Run the test program"}'
            batch = ExecuteBatch(calls=[ToolCall(call_id, "run_code", arguments)], agent="A")
            (result,) = system.execute_batch(batch, timeout=10).results
            assert value_of(result)["result"] == "echo:x"
        settles = dispatch_events(system)
    assert [settle["content"] for settle in settles] == [[{"type": "text", "text": "echo:x"}]] * 2


class StuckListener:
    """A dispatch-log listener that never returns; ``reached`` is set once it is waiting."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()

    async def __call__(self, log: CodeDispatchLog, next: Any) -> Any:
        self.reached.set()
        await asyncio.Event().wait()


def run_aborted_while_stuck(system: Any, listener: StuckListener) -> Any:
    """Run a program whose sub-call's log waits in ``listener``; abort the call once it does."""
    controller = AbortController()

    async def scenario() -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code(signal=controller.signal)))
        await wait_for(listener.reached.wait())
        controller.abort("user pressed stop")
        return await wait_for(task)

    return asyncio.run(scenario())


def test_a_listener_that_never_returns_is_cancelled_once_the_run_is_aborted() -> None:
    # Listeners are hooks of the dispatch log: once the run_code call is aborted, one still
    # waiting gets the wind-down an interrupted call's hooks get, then is cancelled, and the
    # sub-call's settle event lands with the unshaped content. Before, the aborted call waited
    # for it until stop() gave up on it.
    stuck = StuckListener()
    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(stuck)
        with capture_logs() as logs:
            run_aborted_while_stuck(system, stuck)
        (settle,) = dispatch_events(system)
        assert [e.type for e in system.session.events][-1] == "tool/result"
    assert settle["content"] == [{"type": "text", "text": "echo:x"}]
    (warning,) = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert "listener failed for echo: cancelled" in warning


def test_a_cancelled_call_records_the_settle_event_of_a_stuck_listener_before_its_result() -> None:
    # Cancelling the awaiting task interrupts the run_code call while it waits for the dispatch
    # log: the stuck listener gets the wind-down, is cancelled, and its sub-call's settle event
    # lands before the call's tool/result (the wait used to leave it running, recorded later).
    stuck = StuckListener()

    async def scenario(system: Any) -> None:
        task = asyncio.ensure_future(
            system.execute_async(run_code(signal=AbortController().signal))
        )
        await wait_for(stuck.reached.wait())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait_for(task)

    with code_system(FakeRuntime(echo_program), tools=[echo_tool()]) as system:
        system.tools.on_code_dispatch_log(stuck)
        asyncio.run(scenario(system))
        types = [e.type for e in system.session.events]
    assert types == ["tool/call", "tool/code-dispatch-start", "tool/code-dispatch", "tool/result"]


def test_a_stuck_listener_then_a_stuck_spill_store_still_let_an_aborted_call_settle() -> None:
    # The wind-down cancels again while a log task goes on waiting: a task that took the
    # listener's cancellation waits in the spill store next, and is cancelled there too.
    stuck = StuckListener()

    class StuckStore:
        async def save(self, text: str, source: Any) -> str:
            await asyncio.Event().wait()
            return "never"

    tools = [echo_tool()]
    with code_system(FakeRuntime(echo_program), tools=tools, max_inline_bytes=4) as system:
        system.dispatch_spill.store = StuckStore()
        system.tools.on_code_dispatch_log(stuck)
        run_aborted_while_stuck(system, stuck)
        (settle,) = dispatch_events(system)
        assert [e.type for e in system.session.events][-1] == "tool/result"
    assert settle["content"] == [{"type": "text", "text": "echo:x"}]
