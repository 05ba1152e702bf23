"""How many code runs one runtime has in flight: real runs past ``max_parallel_runs`` wait their
turn in arrival order, and stop waiting when aborted, cancelled or disposed, holding nothing."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import ToolsConfig, ToolSystem
from dsh_tools.actors import AbortController, AbortSignal
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    CodeSandbox,
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


def serve_on_another_loop(
    runtime: SubprocessCodeRuntime, program: str, bindings: list[BindingNamespace]
) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """Start ``program`` on a new loop that runs forever on a thread of its own."""
    other = asyncio.new_event_loop()
    started: list[asyncio.Task[CodeRunResult]] = []

    def serve() -> None:
        started.append(other.create_task(runtime.run(CodeRunRequest(program, bindings))))
        other.run_forever()

    thread = threading.Thread(target=serve)
    thread.start()
    return other, thread


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
        gates.open(2)
        assert (await tasks[2]).value == 2
        await until(lambda: len(gates.entered) == 4)
        assert gates.entered[3] == 3  # then the next in line
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
    most = "max_parallel_runs must be a positive integer of at most 9007199254740991"
    with pytest.raises(TypeError, match=f"{most}, got '2'"):
        CodeRuntimeConfig(max_parallel_runs="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"{most}, got 0"):
        CodeRuntimeConfig(max_parallel_runs=0)
    with pytest.raises(ValueError, match=f"{most}, got 1{'0' * 30}$"):
        CodeRuntimeConfig(max_parallel_runs=10**30)


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


# --- runs whose loop goes away, and disposal racing them ----------------------------------------


def test_a_run_granted_its_slot_as_the_runtime_is_disposed_ends_aborted_not_raising() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))

    async def scenario() -> None:
        gates = Gates()
        holder = (await start_in_order(runtime, gates, 1))[0]
        await until(lambda: gates.entered == [0])
        waiting = asyncio.create_task(runtime.run(request(gates, 1)))
        await until(lambda: runtime.runs_waiting == 1)
        gates.open(0)
        await holder  # its slot has passed to the waiting run, which has not yet resumed
        await runtime.dispose()
        result = await waiting
        assert result.error is not None
        assert (result.error.kind, result.error.message) == ("abort", "runtime disposed")

    asyncio.run(scenario())


def test_a_slot_passed_to_a_run_whose_loop_has_closed_goes_on_to_the_next_run() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever)
    thread.start()
    signal = AbortController().signal  # held, never aborted: it keeps the waiter referenced

    async def scenario() -> None:
        gates = Gates()
        holder = (await start_in_order(runtime, gates, 1))[0]
        stranded = asyncio.run_coroutine_threadsafe(runtime.run(request(gates, 1, signal)), other)
        await until(lambda: runtime.runs_waiting == 1)
        other.call_soon_threadsafe(other.stop)
        await asyncio.to_thread(thread.join)
        other.close()  # the waiting run's loop is gone, its coroutine never resumed
        gates.open(0)
        assert (await holder).value == 0
        gates.open(2)
        later = await runtime.run(request(gates, 2))
        assert later.value == 2
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (0, 0)
        assert not stranded.done()

    try:
        asyncio.run(scenario())
    finally:
        runtime.close()


def test_a_signal_that_refuses_callbacks_leaves_no_waiter_behind() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))

    class RefusingSignal(AbortSignal):
        def add_callback(self, fn: Callable[[Any], object]) -> Callable[[], None]:
            raise RuntimeError("this signal takes no callbacks")

    async def scenario() -> None:
        gates = Gates()
        holder = (await start_in_order(runtime, gates, 1))[0]
        with pytest.raises(RuntimeError, match="takes no callbacks"):
            await runtime.run(request(gates, 1, RefusingSignal()))
        assert runtime.runs_waiting == 0
        gates.open(0)
        await holder
        gates.open(2)
        assert (await runtime.run(request(gates, 2))).value == 2

    try:
        asyncio.run(scenario())
    finally:
        runtime.close()


def test_a_run_whose_loop_closed_under_it_is_ended_by_the_next_run(tmp_path: Path) -> None:
    beat = tmp_path / "beat"
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_parallel_runs=1, sandbox=CodeSandbox(write=[str(tmp_path)]))
    )

    stranded: list[asyncio.Future[CodeRunResult]] = []

    def strand() -> None:
        loop = asyncio.new_event_loop()

        async def start() -> None:
            program = (
                "import time\nfor n in range(100_000):\n"
                f"    open({str(beat)!r}, 'w').write(str(n))\n    time.sleep(0.02)"
            )
            stranded.append(asyncio.ensure_future(runtime.run(CodeRunRequest(program, []))))
            await until(beat.exists)  # the program is running

        loop.run_until_complete(start())
        loop.close()  # neither the run's task nor its worker is told

    try:
        thread = threading.Thread(target=strand)
        thread.start()
        thread.join()
        assert runtime.runs_in_flight == 1
        later = asyncio.run(runtime.run(CodeRunRequest("return 'next'", [])))
        assert later.value == "next"
        assert runtime.runs_in_flight == 0
        last = beat.read_text()
        time.sleep(0.2)  # ten beats, had the stranded program lived on
        assert beat.read_text() == last
    finally:
        runtime.close()


def test_dispose_returns_when_a_runs_loop_stops_before_it_could_settle_the_run() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=2))
    entered = threading.Event()

    def stop_my_loop(value: Any) -> int:
        entered.set()
        time.sleep(0.5)  # dispose() is called meanwhile and queues the run's settlement here
        asyncio.get_running_loop().stop()  # and this loop never runs it
        return 1

    bindings = [BindingNamespace("tools", {"stop": stop_my_loop}, None)]
    other, thread = serve_on_another_loop(runtime, "return await tools.stop({})", bindings)
    try:
        assert entered.wait(30)
        runtime.close()  # returns: the run is torn down once its loop has stopped
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (0, 0)
    finally:
        thread.join()
        other.close()


def test_a_run_on_a_paused_loop_gets_the_disposal_once_its_loop_runs_again() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=2))
    gates = Gates()
    paused = threading.Event()
    resume = threading.Event()
    outcome: list[CodeRunResult] = []

    def caller() -> None:
        loop = asyncio.new_event_loop()
        task = loop.create_task(runtime.run(request(gates, 0)))
        loop.run_until_complete(until(lambda: gates.entered == [0]))
        paused.set()  # the loop stands still between two steps of its owner
        resume.wait(30)
        outcome.append(loop.run_until_complete(asyncio.wait_for(task, 30)))
        loop.close()

    thread = threading.Thread(target=caller)
    thread.start()
    assert paused.wait(30)
    runtime.close()
    resume.set()
    thread.join()
    assert outcome[0].error is not None
    assert (outcome[0].error.kind, outcome[0].error.message) == ("abort", "runtime disposed")


def test_runs_that_stop_waiting_do_not_pile_up_in_the_queue() -> None:
    slots = RunSlots(1)

    async def scenario() -> None:
        assert await slots.acquire(AbortController().signal)
        for _ in range(20):
            controllers = [AbortController() for _ in range(100)]
            waits = [asyncio.create_task(slots.acquire(c.signal)) for c in controllers]
            await until(lambda: slots.waiting == 100)
            for controller in controllers:
                controller.abort()
            assert await asyncio.gather(*waits) == [False] * 100
            assert slots.waiting == 0
            assert len(slots._waiters) <= 64  # compacted as they left
        slots.release()
        assert slots.taken == 0

    asyncio.run(scenario())


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="Python 3.12+ starts a collection at a safe point after the allocation that asked"
    " for it, which may lie inside the lock: the next test checks that it does no harm there",
)
def test_no_collection_can_start_while_the_slots_lock_is_held() -> None:
    # A collection that started under the lock could finalize an abandoned waiter: nothing is
    # allocated while it is held.
    slots = RunSlots(1)
    under_lock: list[bool] = []

    def on_collection(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            under_lock.append(slots._lock.locked())

    async def scenario() -> None:
        assert await slots.acquire(AbortController().signal)
        controllers = [AbortController() for _ in range(40)]
        waits = [asyncio.create_task(slots.acquire(c.signal)) for c in controllers]
        await until(lambda: slots.waiting == 40)
        for controller in controllers[:30]:
            controller.abort()
        slots.release()
        assert (await asyncio.gather(*waits[:31])) == [False] * 30 + [True]
        slots.release()
        await asyncio.sleep(0)
        slots.close()
        assert await asyncio.gather(*waits[31:]) in ([True] + [False] * 8, [False] * 9)

    threshold = gc.get_threshold()
    gc.callbacks.append(on_collection)
    gc.set_threshold(1)  # a collection at almost every allocation of a tracked object
    try:
        asyncio.run(scenario())
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(on_collection)
    assert under_lock and not any(under_lock)


def test_a_slot_given_to_a_run_whose_stopped_loop_then_closes_is_given_back() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))
    other = asyncio.new_event_loop()
    signal = AbortController().signal  # held, never aborted: it keeps the waiter referenced

    async def scenario() -> None:
        gates = Gates()
        holder = (await start_in_order(runtime, gates, 1))[0]

        def give_up_on_the_loop() -> None:
            task = other.create_task(runtime.run(request(gates, 1, signal)))
            other.run_until_complete(asyncio.wait({task}, timeout=0.3))  # stopped, still open

        await asyncio.to_thread(give_up_on_the_loop)
        assert runtime.runs_waiting == 1
        gates.open(0)
        await holder  # the slot goes to the stopped loop's run, which cannot take it yet
        other.close()  # and never will
        gates.open(2)
        later = await runtime.run(request(gates, 2))
        assert later.value == 2
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (0, 0)

    try:
        asyncio.run(scenario())
    finally:
        runtime.close()


def test_a_run_waiting_behind_a_run_whose_loop_closed_gets_its_slot_without_a_newcomer() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1))
    started = threading.Event()
    close_now = threading.Event()
    stranded: list[asyncio.Task[CodeRunResult]] = []

    def holder() -> None:
        loop = asyncio.new_event_loop()
        program = "import time\nwhile True:\n    time.sleep(0.01)"
        stranded.append(loop.create_task(runtime.run(CodeRunRequest(program, []))))
        loop.run_until_complete(until(lambda: runtime.runs_in_flight == 1))
        started.set()
        close_now.wait(30)
        loop.close()  # the holder's loop goes away under its run

    thread = threading.Thread(target=holder)
    thread.start()

    async def scenario() -> None:
        assert await asyncio.to_thread(started.wait, 30)
        waiting = asyncio.create_task(runtime.run(CodeRunRequest("return 'waited'", [])))
        await until(lambda: runtime.runs_waiting == 1)
        close_now.set()
        await asyncio.to_thread(thread.join)
        assert (await waiting).value == "waited"  # it looked again while it waited

    try:
        asyncio.run(scenario())
    finally:
        runtime.close()


def test_a_run_whose_loop_stops_for_good_gives_its_slot_back_after_its_wall_ceiling() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1, max_wall_ms=300))
    abandoned = asyncio.new_event_loop()
    program = "import time\nwhile True:\n    time.sleep(0.01)"

    def give_up() -> None:
        task = abandoned.create_task(runtime.run(CodeRunRequest(program, [])))
        abandoned.run_until_complete(asyncio.wait({task}, timeout=0.2))  # stopped, not closed

    try:
        thread = threading.Thread(target=give_up)
        thread.start()
        thread.join()
        assert runtime.runs_in_flight == 1
        later = asyncio.run(runtime.run(CodeRunRequest("return 'next'", [])))
        assert later.value == "next"
        (task,) = asyncio.all_tasks(abandoned)
        result = abandoned.run_until_complete(task)  # the loop runs again: it gets its outcome
        # The sandbox's init ended it, having asked the worker where the program was (which
        # a worker not scheduled in time leaves unsaid).
        kind, message = failure_of(result)
        assert kind == "timeout"
        assert re.fullmatch(
            r"wall-clock ceiling reached \(300ms\)(; the program was at line [23])?", message
        ), message
    finally:
        runtime.close()
        abandoned.close()


def failure_of(result: CodeRunResult) -> tuple[str, str]:
    assert result.error is not None, result
    return result.error.kind, result.error.message


def test_a_dispose_whose_caller_stops_waiting_still_stops_the_template() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=2))
    entered = threading.Event()

    def block_my_loop(value: Any) -> int:
        entered.set()
        time.sleep(1.5)  # the run cannot settle meanwhile: dispose() must wait for it
        return 1

    bindings = [BindingNamespace("tools", {"block": block_my_loop}, None)]
    other, thread = serve_on_another_loop(runtime, "return await tools.block({})", bindings)

    async def scenario() -> int:
        assert await asyncio.to_thread(entered.wait, 30)
        template = runtime.template_pid
        assert template is not None
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(runtime.dispose(), 0.3)  # the harness bounds its shutdown
        await runtime.dispose()
        return template

    try:
        template = asyncio.run(scenario())
        gone = False
        for _ in range(100):  # the template exits on its own once told to
            try:
                os.kill(template, 0)
            except ProcessLookupError:
                gone = True
                break
            time.sleep(0.05)
        assert gone
        assert runtime.template_pid is None
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join()
        other.close()


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_run_that_finished_in_time_keeps_its_result_though_its_slot_went_on(
    tmp_path: Path, isolation: str
) -> None:
    # Its loop stands still past the ceiling while another run waits for the only slot: the
    # slot goes on, and the program's completion, already sent, is still what the run reports.
    marker = tmp_path / "done"
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(
            isolation=isolation,
            max_wall_ms=500,
            max_parallel_runs=1,
            sandbox=CodeSandbox(write=[str(tmp_path)]),
        )
    )
    loop = asyncio.new_event_loop()
    program = f"import time\nopen({str(marker)!r}, 'w').write('x')\ntime.sleep(0.1)\nreturn 42"
    try:
        task = loop.create_task(runtime.run(CodeRunRequest(program, [])))
        loop.run_until_complete(until(marker.exists))
        # Meanwhile, on another thread, a run waits for the slot and gets it.
        other = asyncio.run(runtime.run(CodeRunRequest("return 'other'", [])))
        assert other.value == "other"
        result = loop.run_until_complete(task)
        assert result.error is None and result.value == 42
        assert (runtime.runs_in_flight, runtime.runs_waiting) == (0, 0)
    finally:
        runtime.close()
        loop.close()


def test_a_collection_under_the_slots_lock_finalizes_an_abandoned_waiter_without_a_hang() -> None:
    # A run that waited on a loop since closed is given up by the next release; its coroutine,
    # left in a cycle, is finalized by whichever collection comes next. On Python 3.12+ a
    # collection starts at the next safe point after the allocation that asked for it, which
    # may lie inside the lock even though nothing is allocated there. The waiter's cleanup must
    # not wait for that lock on the thread that holds it.
    slots = RunSlots(1)
    held = AbortController()
    assert asyncio.run(slots.acquire(held.signal))
    abandoned = asyncio.new_event_loop()
    gc.disable()
    try:
        waiting = abandoned.create_task(slots.acquire(AbortController().signal))
        abandoned.run_until_complete(until(lambda: slots.waiting == 1))
        abandoned.close()  # the waiting run's loop goes away under it
        del waiting
        slots.release()  # passes over the run whose loop is gone: no slot is held
        assert (slots.taken, slots.waiting) == (0, 0)

        def collect_under_the_lock() -> None:
            with slots._lock:
                gc.collect()

        collector = threading.Thread(target=collect_under_the_lock, daemon=True)
        collector.start()
        collector.join(10)
        assert not collector.is_alive(), "the abandoned waiter's cleanup waits for the lock"
    finally:
        gc.enable()
    assert asyncio.run(slots.acquire(held.signal))
