"""How many code runs one runtime has in flight: real runs past ``max_parallel_runs`` wait their
turn in arrival order, and stop waiting when aborted, cancelled or disposed, holding nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from dsh_tools import ToolsConfig, ToolSystem
from dsh_tools.actors import AbortController
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    ErrorClassSpec,
    SubprocessCodeRuntime,
    runtime_config_from,
)
from dsh_tools.codebridge._run_slots import RunSlots


class Gates:
    """Bindings a program calls to say it has started and then to wait until the test lets
    it end: ``entered`` lists the runs (by their number) in the order their programs started."""

    def __init__(self) -> None:
        self.entered: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}

    async def enter(self, value: Any) -> int:
        number: int = value["n"]
        self.gates.setdefault(number, asyncio.Event())
        self.entered.append(number)
        await self.gates[number].wait()
        return number

    def open(self, number: int) -> None:
        self.gates.setdefault(number, asyncio.Event()).set()

    def bindings(self) -> list[BindingNamespace]:
        return [
            BindingNamespace(
                "tools", {"enter": self.enter}, ErrorClassSpec("ToolCallError", "tool_name")
            )
        ]


def request(gates: Gates, number: int, signal: Any = None) -> CodeRunRequest:
    program = f'return await tools.enter({{"n": {number}}})'
    return CodeRunRequest(program, gates.bindings(), signal=signal)


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (the test's timeout bounds the wait)."""
    while not condition():
        await asyncio.sleep(0.005)


@pytest.fixture
def two_at_a_time() -> Iterator[SubprocessCodeRuntime]:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=2, max_wall_ms=60_000))
    yield runtime
    runtime.close()


def start_in_order(
    runtime: SubprocessCodeRuntime, gates: Gates, count: int
) -> Awaitable[list[asyncio.Task[CodeRunResult]]]:
    """Start runs 0..count-1, each only once the one before holds a slot or waits for one."""

    async def start() -> list[asyncio.Task[CodeRunResult]]:
        tasks: list[asyncio.Task[CodeRunResult]] = []
        for number in range(count):
            tasks.append(asyncio.create_task(runtime.run(request(gates, number))))
            await until(lambda: runtime.runs_in_flight + runtime.runs_waiting == len(tasks))
        return tasks

    return start()


def test_runs_past_the_bound_wait_and_start_in_arrival_order(
    two_at_a_time: SubprocessCodeRuntime,
) -> None:
    runtime = two_at_a_time

    async def scenario() -> None:
        gates = Gates()
        tasks = await start_in_order(runtime, gates, 5)
        await until(lambda: len(gates.entered) == 2)
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (2, 3)
        assert sorted(gates.entered) == [0, 1]  # the other three have not started
        gates.open(1)
        assert (await tasks[1]).value == 1
        await until(lambda: len(gates.entered) == 3)
        assert gates.entered[2] == 2  # the first in line, not a later one
        for number in range(5):
            gates.open(number)
        results = await asyncio.gather(*tasks)
        assert [result.value for result in results] == [0, 1, 2, 3, 4]
        assert gates.entered[2:] == [2, 3, 4]
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (0, 0)

    asyncio.run(scenario())


def test_a_run_aborted_while_it_waits_ends_at_once_and_takes_no_slot(
    two_at_a_time: SubprocessCodeRuntime,
) -> None:
    runtime = two_at_a_time

    async def scenario() -> None:
        gates = Gates()
        holders = await start_in_order(runtime, gates, 2)
        controller = AbortController()
        waiting = asyncio.create_task(runtime.run(request(gates, 7, controller.signal)))
        await until(lambda: runtime.runs_waiting == 1)
        controller.abort("the user went away")
        result = await waiting
        assert result.error is not None
        assert (result.error.kind, result.error.message) == ("abort", "the user went away")
        assert 7 not in gates.entered
        assert runtime.runs_waiting == 0
        gates.open(0)
        gates.open(1)
        assert [(await task).value for task in holders] == [0, 1]
        gates.open(8)
        gates.open(9)
        later = await asyncio.gather(*(runtime.run(request(gates, n)) for n in (8, 9)))
        assert [result.value for result in later] == [8, 9]

    asyncio.run(scenario())


def test_a_run_cancelled_while_it_waits_raises_and_leaks_no_slot(
    two_at_a_time: SubprocessCodeRuntime,
) -> None:
    runtime = two_at_a_time

    async def scenario() -> None:
        gates = Gates()
        holders = await start_in_order(runtime, gates, 2)
        waiting = asyncio.create_task(runtime.run(request(gates, 5)))
        await until(lambda: runtime.runs_waiting == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert runtime.runs_waiting == 0
        for number in (0, 1):
            gates.open(number)
        await asyncio.gather(*holders)
        assert runtime.runs_in_flight == 0
        for number in (2, 3):
            gates.open(number)
        both = await asyncio.gather(*(runtime.run(request(gates, n)) for n in (2, 3)))
        assert [result.value for result in both] == [2, 3]
        assert 5 not in gates.entered

    asyncio.run(scenario())


def test_disposing_the_runtime_ends_the_waiting_runs_as_aborted() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))

    async def scenario() -> None:
        gates = Gates()
        holder = (await start_in_order(runtime, gates, 1))[0]
        waiting = asyncio.create_task(runtime.run(request(gates, 1)))
        await until(lambda: gates.entered == [0] and runtime.runs_waiting == 1)
        await runtime.dispose()
        for task in (holder, waiting):
            result = await task
            assert result.error is not None
            assert (result.error.kind, result.error.message) == ("abort", "runtime disposed")
        assert gates.entered == [0]

    asyncio.run(scenario())


def test_runs_from_many_threads_share_the_bound() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=2))
    lock = threading.Lock()
    running = 0
    most = 0
    results: list[CodeRunResult] = []

    async def count(value: Any) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        await asyncio.sleep(0.05)
        with lock:
            running -= 1
        return int(value["n"])

    bindings = [BindingNamespace("tools", {"count": count}, None)]

    def one(number: int) -> None:
        program = f'return await tools.count({{"n": {number}}})'
        result = asyncio.run(runtime.run(CodeRunRequest(program, bindings)))
        with lock:
            results.append(result)

    try:
        threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        runtime.close()
    assert sorted(result.value for result in results) == list(range(6))
    assert most == 2


def test_the_bound_comes_from_the_tools_config_and_is_validated() -> None:
    assert runtime_config_from(ToolsConfig()).max_parallel_runs == 8
    config = runtime_config_from(ToolsConfig(mode="code", max_parallel_code_runs=3))
    assert config.max_parallel_runs == 3
    with ToolSystem.start(ToolsConfig(mode="code", max_parallel_code_runs=1)) as system:
        runtime = system.code_runtime
        assert isinstance(runtime, SubprocessCodeRuntime)
        assert runtime.config.max_parallel_runs == 1
    with pytest.raises(ValueError, match="max_parallel_code_runs must be a positive integer"):
        ToolsConfig(max_parallel_code_runs=0)
    with pytest.raises(TypeError, match="max_parallel_runs must be a positive integer, got '2'"):
        CodeRuntimeConfig(max_parallel_runs="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_parallel_runs must be a positive integer, got 0"):
        CodeRuntimeConfig(max_parallel_runs=0)


# --- the slots alone, across threads -------------------------------------------------------------


def test_a_slot_freed_while_its_waiter_aborts_is_passed_on_not_lost() -> None:
    slots = RunSlots(1)

    async def scenario() -> None:
        assert await slots.acquire(AbortController().signal)
        controller = AbortController()
        first = asyncio.create_task(slots.acquire(controller.signal))
        second = asyncio.create_task(slots.acquire(AbortController().signal))
        await until(lambda: slots.waiting == 2)
        # The first waiter is aborted, and before it runs again the freed slot passes to it:
        # it must pass the slot on to the second, not keep it nor lose it.
        controller.abort()
        slots.release()
        assert await first is False
        assert await second is True
        assert slots.taken == 1
        slots.release()
        assert slots.taken == 0

    asyncio.run(scenario())


def test_slots_released_from_other_threads_wake_waiters_on_their_own_loops() -> None:
    slots = RunSlots(2)
    granted: list[bool] = []
    lock = threading.Lock()

    def take_and_give_back() -> None:
        async def once() -> None:
            for _ in range(200):
                ok = await slots.acquire(AbortController().signal)
                with lock:
                    granted.append(ok)
                await asyncio.sleep(0)
                slots.release()

        asyncio.run(once())

    threads = [threading.Thread(target=take_and_give_back) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted == [True] * 800
    assert (slots.taken, slots.waiting) == (0, 0)
