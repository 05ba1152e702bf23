"""Bursts of Code Mode sub-calls with plain-function bodies: the worker thread that settles a
body may commit it and start the next call itself, and hands what the program sees to the run's
loop in commit order. Values, submission order, the pool's bounds and barriers, the dispatch
events and aborts must come out as they do when every step runs on the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from code_mode_support import (
    WAIT,
    FakeProgram,
    FakeRuntime,
    code_system,
    dispatch_events,
    run_code,
    texts,
    value_of,
)

from dsh_tools import AbortController, CodeDispatchLog, ToolDefinition, ToolOutput, define_tool

BURST = 200


class Bodies:
    """Plain-function tools that record the thread each body ran on and how many ran at once;
    ``on_value`` runs inside the body of the call with that value."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: set[int] = set()
        self.values: list[str] = []
        self.live = 0
        self.peak = 0
        self.alone: list[bool] = []  # per exclusive body: nothing else ran beside it
        self.on_value: dict[str, Any] = {}

    def tool(self, name: str, *, safe: bool = True) -> ToolDefinition:
        def body(args: Any, ctx: Any) -> str:
            value = args["value"]
            with self.lock:
                self.live += 1
                self.peak = max(self.peak, self.live)
                self.threads.add(threading.get_ident())
                self.values.append(value)
                if not safe:
                    self.alone.append(self.live == 1)
            try:
                action = self.on_value.get(value)
                if action is not None:
                    action()
                return f"{name}:{value}"
            finally:
                with self.lock:
                    self.live -= 1

        return define_tool(
            name=name,
            description=f"Plain {name}.",
            parameters={"value": {"type": "string", "required": True}},
            output=ToolOutput(
                schema={"type": "string"},
                render=lambda args, value: [{"type": "text", "text": value}],
            ),
            execute=body,
            is_concurrency_safe=(lambda args: True) if safe else None,
        )


def gathered(tool_of: Any, count: int, loop_threads: list[int]) -> Any:
    async def program(p: FakeProgram) -> Any:
        loop_threads.append(threading.get_ident())
        calls = [p.call(tool_of(i), {"value": str(i)}) for i in range(count)]
        return await asyncio.gather(*calls)

    return program


def event_order(system: Any) -> list[tuple[str, str]]:
    return [
        (e.type, e.data["sub_call_id"])
        for e in system.session.events
        if e.type in ("tool/code-dispatch-start", "tool/code-dispatch")
    ]


def assert_paired_in_order(order: list[tuple[str, str]], count: int) -> None:
    """Each sub-call's start comes before its settle; starts and settles each follow
    submission order."""
    ids = [f"call-1:code:{n}" for n in range(1, count + 1)]
    starts = [sub for kind, sub in order if kind == "tool/code-dispatch-start"]
    settles = [sub for kind, sub in order if kind == "tool/code-dispatch"]
    assert starts == ids and settles == ids
    for sub in ids:
        assert order.index(("tool/code-dispatch-start", sub)) < order.index(
            ("tool/code-dispatch", sub)
        )


def test_a_burst_of_plain_bodies_keeps_values_order_and_bounds() -> None:
    bodies = Bodies()
    loop_threads: list[int] = []
    program = gathered(lambda i: "echo", BURST, loop_threads)
    with code_system(
        FakeRuntime(program), tools=[bodies.tool("echo")], max_parallel_sub_calls=4
    ) as system:
        result = system.execute(run_code())
        order = event_order(system)
        settles = dispatch_events(system)
    assert value_of(result)["result"] == [f"echo:{i}" for i in range(BURST)]
    assert sorted(bodies.values, key=int) == [str(i) for i in range(BURST)]
    assert bodies.peak <= 4
    assert loop_threads[0] not in bodies.threads
    assert_paired_in_order(order, BURST)
    assert [texts(e["content"]) for e in settles] == [[f"echo:{i}"] for i in range(BURST)]


def test_an_exclusive_call_in_a_burst_runs_alone_and_keeps_its_place() -> None:
    bodies = Bodies()
    loop_threads: list[int] = []
    program = gathered(lambda i: "solo" if i % 7 == 3 else "echo", 60, loop_threads)
    tools = [bodies.tool("echo"), bodies.tool("solo", safe=False)]
    with code_system(FakeRuntime(program), tools=tools, max_parallel_sub_calls=3) as system:
        result = system.execute(run_code())
        order = event_order(system)
    expected = [f"{'solo' if i % 7 == 3 else 'echo'}:{i}" for i in range(60)]
    assert value_of(result)["result"] == expected
    assert bodies.alone == [True] * len([i for i in range(60) if i % 7 == 3])
    assert bodies.peak <= 3
    assert_paired_in_order(order, 60)


def test_a_burst_with_a_dispatch_log_listener_commits_on_the_loop() -> None:
    bodies = Bodies()
    loop_threads: list[int] = []
    listener_threads: set[int] = set()

    async def listener(log: CodeDispatchLog, next: Any) -> Any:
        listener_threads.add(threading.get_ident())
        await next()
        return [{"type": "text", "text": f"logged {log.sub_call_id}"}]

    program = gathered(lambda i: "echo", 80, loop_threads)
    with code_system(
        FakeRuntime(program), tools=[bodies.tool("echo")], max_parallel_sub_calls=4
    ) as system:
        system.tools.on_code_dispatch_log(listener)
        result = system.execute(run_code())
        settles = dispatch_events(system)
    assert value_of(result)["result"] == [f"echo:{i}" for i in range(80)]
    assert listener_threads == {loop_threads[0]}
    assert sorted(texts(e["content"])[0] for e in settles) == sorted(
        f"logged call-1:code:{n}" for n in range(1, 81)
    )


def test_an_abort_mid_burst_stops_starting_and_pairs_every_started_call() -> None:
    bodies = Bodies()
    loop_threads: list[int] = []
    controller = AbortController()
    bodies.on_value["50"] = lambda: controller.abort("stop-mid-burst")

    def after_the_abort() -> None:
        # A body past "50" returns only once the abort is made: however late the body thread
        # of "50" runs on a loaded machine, the calls beside it hold their slots till then.
        controller.signal.wait(WAIT)

    for n in range(51, BURST):
        bodies.on_value[str(n)] = after_the_abort
    program = gathered(lambda i: "echo", BURST, loop_threads)
    with code_system(
        FakeRuntime(program), tools=[bodies.tool("echo")], max_parallel_sub_calls=4
    ) as system:
        result = system.execute(run_code(signal=controller.signal))
        order = event_order(system)
        settles = dispatch_events(system)
    # The runtime's abort or the program's discarded result, whichever reaches the run first.
    assert result.is_error
    assert "stop-mid-burst" in texts(result.content)[0]
    started = [sub for kind, sub in order if kind == "tool/code-dispatch-start"]
    # Nothing starts once the abort is seen: at most the calls in flight beside "50" follow it.
    assert 51 <= len(started) <= 51 + 4
    # A call started beside "50" may see the abort before its body: it never runs.
    assert "50" in bodies.values and len(bodies.values) <= len(started)
    assert_paired_in_order(order, len(started))
    aborted = [e for e in settles if int(e["sub_call_id"].rsplit(":", 1)[1]) > 51]
    assert all(e["is_error"] for e in aborted)
