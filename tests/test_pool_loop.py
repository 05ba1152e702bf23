"""The loop machinery under the pool: stages that start at once (in their own context) and
``new_pool_loop``, whose timed waits use a precise ``select()`` on the epoll descriptor."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import inspect
import os
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WAIT, arun, block, call, fixture
from pool_support import batch, in_background, safe

from dsh_tools import AbortController, ToolSystem
from dsh_tools.pipeline._epoll import PreciseEpoll, mark_wake_only
from dsh_tools.pipeline._loop import new_pool_loop

current_call: contextvars.ContextVar[str] = contextvars.ContextVar("current_call", default="-")


def test_each_dispatch_runs_in_its_own_context(system: ToolSystem) -> None:
    seen: dict[str, tuple[str, str]] = {}

    async def body(args: Any, ctx: Any) -> Any:
        before = current_call.get()
        current_call.set(ctx.call_id)
        await asyncio.sleep(0)
        seen[ctx.call_id] = (before, current_call.get())
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    outcome = system.execute_batch(batch("c1", "c2", "c3"))
    assert [r.is_error for r in outcome.results] == [False] * 3
    assert seen == {c: ("-", c) for c in ("c1", "c2", "c3")}


def test_a_body_that_finishes_without_suspending_is_committed(system: ToolSystem) -> None:
    async def body(args: Any, ctx: Any) -> Any:
        return [block(f"ran:{ctx.call_id}")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    outcome = system.execute_batch(batch("c1", "c2", max_parallel=1))
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:c1", "ran:c2"]


def test_a_body_awaiting_a_future_nobody_else_holds_is_not_collected(
    system: ToolSystem,
) -> None:
    parked = threading.Event()
    futures: list[weakref.ref[asyncio.Future[int]]] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def body(args: Any, ctx: Any) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        futures.append(weakref.ref(done))  # only the body's own frame holds it
        loops.append(loop)
        parked.set()
        return [block(f"woken with {await done}")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    with in_background(system, batch("c1")) as pending:
        assert parked.wait(WAIT)
        for _ in range(3):
            gc.collect()
        done = futures[0]()
        assert done is not None, "the pool let a running dispatch be garbage-collected"
        loops[0].call_soon_threadsafe(done.set_result, 7)
        del done
        outcome = pending.result()
    assert outcome.results[0].content[0]["text"] == "woken with 7"


def test_a_long_batch_lets_go_of_its_committed_calls_as_it_goes(system: ToolSystem) -> None:
    # A turn of thousands of calls (a Code Mode program's sub-calls, say) must not keep every
    # finished call's record until its end: the pool lets go of committed calls as it goes.
    tokens: list[weakref.ref[Any]] = []
    alive_at_end: list[int] = []

    def guard(exec: Any) -> None:
        tokens.append(weakref.ref(exec.token))
        if len(tokens) == 2000:
            alive_at_end.append(sum(ref() is not None for ref in tokens))

    system.tools.register(fixture("x", lambda args, ctx: [block("ok")], is_concurrency_safe=safe))
    system.tools.guard(guard)
    outcome = system.execute_batch(batch(*(f"c{i}" for i in range(2000)), max_parallel=4))
    assert not any(r.is_error for r in outcome.results)
    assert alive_at_end and alive_at_end[0] < 1000, alive_at_end


def test_a_freed_slot_starts_its_next_body_before_the_other_settled_calls_are_committed(
    system: ToolSystem,
) -> None:
    # Bodies that settle in the same loop pass (ten timers firing together) must not hold back
    # each other's successors: a successor's body takes its first step (and so starts its own
    # timer or request) before the pool commits the next settled call, as with eager tasks.
    order: list[str] = []
    woken: list[asyncio.Event] = []

    async def body(args: Any, ctx: Any) -> Any:
        order.append(f"start {ctx.call_id}")
        if ctx.call_id in ("c1", "c2"):
            if not woken:
                woken.append(asyncio.Event())
                asyncio.get_running_loop().call_later(0.02, woken[0].set)
            await woken[0].wait()  # c1 and c2 wake in the same pass
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.on_result(lambda exec, result: order.append(f"commit {exec.call_id}"))
    outcome = system.execute_batch(batch("c1", "c2", "c3", "c4", max_parallel=2))
    assert not any(r.is_error for r in outcome.results)
    assert order.index("commit c1") < order.index("start c3") < order.index("commit c2"), order


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    created = new_pool_loop()
    try:
        yield created
    finally:
        created.close()


@contextlib.contextmanager
def socket_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    reader, writer = socket.socketpair()
    try:
        yield reader, writer
    finally:
        reader.close()
        writer.close()


def test_timers_fire_in_due_order_and_never_early(loop: asyncio.AbstractEventLoop) -> None:
    fired: list[tuple[str, float, float]] = []

    def note(label: str, due: float) -> None:
        fired.append((label, due, loop.time()))
        if len(fired) == 3:
            loop.stop()

    now = loop.time()
    for label, delay in (("c", 0.0030), ("a", 0.0004), ("b", 0.0011)):
        loop.call_at(now + delay, note, label, now + delay)
    loop.run_forever()
    assert [label for label, _, _ in fired] == ["a", "b", "c"]
    assert all(at >= due for _, due, at in fired)


def test_a_timer_due_after_a_long_wait_fires_never_early(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # A long wait is one epoll_wait of whole milliseconds that ends a little before the
    # timer; the rest is waited precisely.
    fired: list[tuple[float, float]] = []

    def note(due: float) -> None:
        fired.append((due, loop.time()))
        loop.stop()

    for delay in (0.05, 0.0505, 0.0614):
        due = loop.time() + delay
        loop.call_at(due, note, due)
        loop.run_forever()
    assert len(fired) == 3
    assert all(at >= due for due, at in fired)


def test_a_thread_wakes_the_loop_during_a_long_timed_wait(
    loop: asyncio.AbstractEventLoop,
) -> None:
    loop.call_later(3600, loop.stop)  # the loop waits on this timer, not forever
    woken = threading.Event()
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    try:
        loop.call_soon_threadsafe(woken.set)
        assert woken.wait(WAIT)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(WAIT)


def test_a_readable_descriptor_wakes_the_loop_during_a_long_timed_wait(
    loop: asyncio.AbstractEventLoop,
) -> None:
    received: list[bytes] = []
    with socket_pair() as (reader, writer):
        loop.call_later(3600, loop.stop)

        def on_readable() -> None:
            received.append(reader.recv(16))
            loop.stop()

        loop.add_reader(reader.fileno(), on_readable)
        loop.call_later(0.001, writer.send, b"ping")
        loop.run_forever()
        loop.remove_reader(reader.fileno())
    assert received == [b"ping"]


def test_a_pass_with_callbacks_ready_still_sees_a_readable_descriptor(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # A zero wait skips its system call only while nothing but the loop's own wake-up socket
    # is registered: a descriptor of the caller's is always looked at.
    received: list[bytes] = []
    with socket_pair() as (reader, writer):
        loop.add_reader(reader.fileno(), lambda: received.append(reader.recv(16)))
        writer.send(b"ping")
        loop.call_soon(lambda: None)  # a callback ready: the pass does not block
        loop.stop()
        loop.run_forever()
        loop.remove_reader(reader.fileno())
    assert received == [b"ping"]


def test_callbacks_from_threads_run_while_the_loop_makes_passes_that_do_not_block(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # Passes with callbacks ready read nothing from the wake-up socket; what other threads
    # add still runs, and the bytes they left wake the next blocking wait without harm.
    ran: list[int] = []
    for i in range(200):
        thread = threading.Thread(target=loop.call_soon_threadsafe, args=(ran.append, i))
        thread.start()
        thread.join()
        loop.call_soon(lambda: None)
        loop.stop()
        loop.run_forever()
    assert ran == list(range(200))
    loop.call_later(0.01, loop.stop)
    started = loop.time()
    loop.run_forever()
    assert loop.time() - started >= 0.01


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals need the main thread"
)
def test_a_signal_handler_runs_while_the_loop_is_busy(loop: asyncio.AbstractEventLoop) -> None:
    # The wake-up socket carries the signal: a loop with callbacks ready on every pass must
    # still look at it.
    ran: list[str] = []
    loop.add_signal_handler(signal.SIGUSR1, ran.append, "sig")

    async def busy() -> int:
        os.kill(os.getpid(), signal.SIGUSR1)
        for passes in range(10_000):
            if ran:
                return passes
            await asyncio.sleep(0)
        return -1

    try:
        passes = loop.run_until_complete(busy())
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
    assert ran == ["sig"]
    assert 0 <= passes < 10


def test_a_zero_wait_skips_its_system_call_while_only_wake_descriptors_are_watched() -> None:
    # The main thread's private loop also watches its signal wake-up socket, which only wakes
    # a blocked wait as the loop's own wake-up socket does: the pass of a call whose hooks
    # merely pass through makes no epoll_wait for it. Any other descriptor needs the call.
    if PreciseEpoll is None:
        pytest.skip("no epoll on this platform")
    loop = new_pool_loop()
    try:
        selector: Any = loop._selector  # type: ignore[attr-defined]
        assert selector._only_wake
        signal_reader, signal_writer = socket.socketpair()
        other_reader, other_writer = socket.socketpair()
        loop.add_reader(signal_reader.fileno(), lambda: None)
        assert not selector._only_wake
        mark_wake_only(loop, signal_reader.fileno())
        assert selector._only_wake
        loop.add_reader(other_reader.fileno(), lambda: None)
        assert not selector._only_wake
        loop.remove_reader(other_reader.fileno())
        assert selector._only_wake
        loop.remove_reader(signal_reader.fileno())
        assert selector._only_wake
        for end in (signal_reader, signal_writer, other_reader, other_writer):
            end.close()
    finally:
        loop.close()


def test_a_descriptor_too_high_for_select_falls_back_to_plain_epoll() -> None:
    if PreciseEpoll is None:
        pytest.skip("no epoll on this platform")
    selector: Any = PreciseEpoll()
    selector._precise = False  # as when its epoll descriptor is beyond select()'s range
    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.call_later(0.001, loop.stop)
        loop.run_forever()
        assert selector.select(0.0005) == []
    finally:
        loop.close()


# --- user code runs in its own task, in a context of its own -----------------------------------


async def timing_out(args: Any, ctx: Any) -> Any:
    # asyncio.timeout() binds to the task running its first line: the body's own task, or the
    # timeout would cancel whoever happened to run that line (the caller, a batch).
    try:
        async with asyncio.timeout(0.02):
            await asyncio.sleep(5)
    except TimeoutError:
        return [block("timed out")]
    return [block("slept")]


async def grouping(args: Any, ctx: Any) -> Any:
    async with asyncio.TaskGroup() as group:
        child = group.create_task(asyncio.sleep(0.001, "child"))
    return [block(f"group {child.result()}")]


@pytest.mark.parametrize("body", [timing_out, grouping], ids=["timeout", "task-group"])
@pytest.mark.parametrize("entry", ["execute", "execute_async", "batch", "batch_async"])
def test_an_async_body_runs_in_its_own_task_from_its_first_line(
    system: ToolSystem, body: Any, entry: str
) -> None:
    tasks: list[tuple[Any, Any]] = []

    async def observed(args: Any, ctx: Any) -> Any:
        first = asyncio.current_task()
        out = await body(args, ctx)
        tasks.append((first, asyncio.current_task()))
        return out

    system.tools.register(fixture("x", observed, is_concurrency_safe=safe))
    expected = "timed out" if body is timing_out else "group child"
    if entry == "execute":
        results = [system.execute(call("x"))]
    elif entry == "execute_async":
        results = [arun(asyncio.wait_for(system.execute_async(call("x")), WAIT))]
    elif entry == "batch":
        results = list(system.execute_batch(batch("c1", "c2", "c3")).results)
    else:
        outcome = arun(asyncio.wait_for(system.execute_batch_async(batch("c1", "c2", "c3")), WAIT))
        results = list(outcome.results)
    assert [r.content[0]["text"] for r in results] == [expected] * len(results)
    assert all(first is not None and first is last for first, last in tasks), tasks


def test_what_an_async_body_schedules_before_it_returns_starts_before_execute_returns(
    system: ToolSystem,
) -> None:
    # The body's own task settles the call a pass of the loop after the body ends, so a task
    # the body started and a callback it scheduled have taken their first step by then: a
    # caller may wait for what they signal without a timeout.
    started = threading.Event()
    seen: list[str] = []

    async def child() -> None:
        seen.append("child")
        started.set()

    async def starts_work(args: Any, ctx: Any) -> Any:
        background = asyncio.create_task(child())
        asyncio.get_running_loop().call_soon(seen.append, "callback")
        if args.get("suspend"):
            await asyncio.sleep(0)
        del background
        return [{"type": "text", "text": "returned"}]

    system.tools.register(fixture("starts_work", starts_work, parameters={"suspend": "boolean"}))
    for suspend in (False, True):
        seen.clear()
        started.clear()
        result = system.execute(call("starts_work", {"suspend": suspend}))
        assert result.content[0]["text"] == "returned"
        assert started.wait(0) and sorted(seen) == ["callback", "child"]


@pytest.mark.parametrize("stage", ["pre", "wrapper", "post"])
def test_a_hook_in_a_batch_runs_in_its_own_task_from_its_first_line(
    system: ToolSystem, stage: str
) -> None:
    timed_out: list[str] = []

    async def bounded(exec: Any, *rest: Any) -> Any:
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(5)
        except TimeoutError:
            timed_out.append(exec.call_id)
        return await rest[-1]()

    system.tools.register(fixture("x", is_concurrency_safe=safe))
    if stage == "pre":
        system.tools.on_pre_execute(bounded)
    elif stage == "wrapper":
        system.tools.on_execute(bounded)
    else:
        system.tools.on_post_execute(bounded)
    outcome = system.execute_batch(batch("c1", "c2", "c3"))
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:x"] * 3
    assert sorted(timed_out) == ["c1", "c2", "c3"]


@pytest.mark.parametrize("stage", ["pre", "wrapper", "post"])
@pytest.mark.parametrize("entry", ["execute", "execute_async", "batch"])
def test_a_hook_that_handled_a_timeout_handles_nothing_after_it(
    system: ToolSystem, stage: str, entry: str
) -> None:
    # As in a task of its own: once the hook's own handler is done, no exception is being
    # handled, and what it raises next carries no context from the cancellation.
    after: list[tuple[Any, Any]] = []

    async def times_out(exec: Any, *rest: Any) -> Any:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        except TimeoutError:
            pass
        handled = sys.exc_info()[0]
        try:
            raise ValueError("next")
        except ValueError as raised:
            after.append((handled, raised.__context__))
        return await rest[-1]()

    system.tools.register(fixture("x", is_concurrency_safe=safe))
    {"pre": system.tools.on_pre_execute, "wrapper": system.tools.on_execute}.get(
        stage, system.tools.on_post_execute
    )(times_out)
    if entry == "execute":
        results = [system.execute(call("x"))]
    elif entry == "execute_async":
        results = [arun(asyncio.wait_for(system.execute_async(call("x")), WAIT))]
    else:
        results = list(system.execute_batch(batch("c1", "c2")).results)
    assert [r.content[0]["text"] for r in results] == ["ran:x"] * len(results)
    assert after == [(None, None)] * len(results)


def test_what_a_wrapper_sets_in_its_context_never_reaches_the_next_call(
    system: ToolSystem,
) -> None:
    # Each call of a pool starts in a copy of the submitter's context, not in the context of
    # whichever call's task happened to finish and start it.
    seen: list[tuple[str, str]] = []

    async def marking(exec: Any, next: Any) -> Any:
        seen.append((exec.call_id, current_call.get()))
        current_call.set(f"set by {exec.call_id}")
        await asyncio.sleep(0)
        return await next()

    async def waiting(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(0)
        return [block("ok")]

    system.tools.register(fixture("x", waiting, is_concurrency_safe=safe))
    system.tools.on_execute(marking)
    token = current_call.set("the submitter's")
    try:
        outcome = system.execute_batch(batch("c1", "c2", "c3", "c4", max_parallel=1))
    finally:
        current_call.reset(token)
    assert not any(r.is_error for r in outcome.results)
    assert seen == [(f"c{i}", "the submitter's") for i in range(1, 5)]


@pytest.mark.parametrize("max_parallel", [1, 3])
def test_what_a_guard_or_observer_sets_in_its_context_never_reaches_the_next_call(
    system: ToolSystem, max_parallel: int
) -> None:
    # Guards and result observers are synchronous: the pool runs them as it starts and
    # commits calls, in whichever task or thread drains it. Each still runs in a copy of the
    # submitter's context, as a hook does, never in what the previous call's left behind.
    seen: list[tuple[str, str, str]] = []

    def guard(exec: Any) -> None:
        seen.append(("guard", exec.call_id, current_call.get()))
        current_call.set(f"set by {exec.call_id}'s guard")

    def observer(exec: Any, result: Any) -> None:
        seen.append(("observer", exec.call_id, current_call.get()))
        current_call.set(f"set by {exec.call_id}'s observer")

    def body(args: Any, ctx: Any) -> Any:
        seen.append(("body", ctx.call_id, current_call.get()))
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.guard(guard)
    system.tools.on_result(observer)
    token = current_call.set("the submitter's")
    try:
        calls = [f"c{i}" for i in range(6)]
        outcome = system.execute_batch(batch(*calls, max_parallel=max_parallel))
    finally:
        current_call.reset(token)
    assert not any(r.is_error for r in outcome.results)
    assert sorted(seen) == sorted(
        (stage, c, "the submitter's") for c in calls for stage in ("guard", "body", "observer")
    )


def test_a_plain_body_on_a_worker_thread_runs_in_its_calls_context(system: ToolSystem) -> None:
    # Under an execute wrapper a plain body runs on a worker thread, as under execute_async:
    # there too it runs in its call's context (the submitter's, and what the wrapper set for
    # it, a tracing span say), as asyncio.to_thread runs a function, and as it does inline.
    seen: list[tuple[str, str]] = []

    async def marking(exec: Any, next: Any) -> Any:
        current_call.set(f"{current_call.get()}, then {exec.call_id}'s wrapper")
        return await next()

    def body(args: Any, ctx: Any) -> Any:
        seen.append((ctx.call_id, current_call.get()))
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.on_execute(marking)
    token = current_call.set("the submitter's")
    try:
        outcome = system.execute_batch(batch("c1", "c2", max_parallel=2))
        arun(system.execute_async(call("x", call_id="c3")))
    finally:
        current_call.reset(token)
    assert not any(r.is_error for r in outcome.results)
    assert sorted(seen) == [(f"c{i}", f"the submitter's, then c{i}'s wrapper") for i in range(1, 4)]


@pytest.mark.parametrize("max_parallel", [1, 3])
def test_what_a_body_sets_in_its_context_never_reaches_the_next_call(
    system: ToolSystem, max_parallel: int
) -> None:
    # A pool's dispatch task may go on with the next call once its own has settled: that call
    # still starts in a fresh copy of the submitter's context, in a task that is its own.
    seen: list[tuple[str, str]] = []
    tasks: dict[str, tuple[Any, Any]] = {}

    async def marking(args: Any, ctx: Any) -> Any:
        first = asyncio.current_task()
        seen.append((ctx.call_id, current_call.get()))
        current_call.set(f"set by {ctx.call_id}")
        await asyncio.sleep(0.001)
        tasks[ctx.call_id] = (first, asyncio.current_task())
        return [block("ok")]

    system.tools.register(fixture("x", marking, is_concurrency_safe=safe))
    token = current_call.set("the submitter's")
    try:
        calls = [f"c{i}" for i in range(12)]
        outcome = system.execute_batch(batch(*calls, max_parallel=max_parallel))
    finally:
        current_call.reset(token)
    assert not any(r.is_error for r in outcome.results)
    assert sorted(seen) == sorted((c, "the submitter's") for c in calls)
    assert all(first is last for first, last in tasks.values())
    # A task of its own each: what one body leaves on "its" task (a pending cancel, a timer
    # that cancels it later, state keyed by the task) can never reach another call.
    assert len({first for first, _last in tasks.values()}) == len(calls)


def test_timeouts_and_aborts_in_a_pool_leave_no_garbage_for_the_cyclic_collector(
    system: ToolSystem,
) -> None:
    async def sleeping(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(5)
        return [block("slept")]

    system.tools.register(fixture("x", timing_out, is_concurrency_safe=safe))
    system.tools.register(fixture("sleeping", sleeping, is_concurrency_safe=safe))

    def both() -> None:
        timed = system.execute_batch(batch("t1", "t2", "t3", max_parallel=2))
        assert [r.content[0]["text"] for r in timed.results] == ["timed out"] * 3
        control = AbortController()
        threading.Timer(0.05, control.abort, ("enough",)).start()
        aborted = system.execute_batch(
            batch("s1", "s2", "s3", name="sleeping", signal=control.signal, max_parallel=2)
        )
        assert all(r.is_error for r in aborted.results)
        system.session.clear()

    both()
    gc.collect()
    gc.disable()
    try:
        both()
        assert gc.collect() == 0
    finally:
        gc.enable()


class _CoroutineOnlyTask(asyncio.Task):  # type: ignore[type-arg]
    """``asyncio.Task`` as Python 3.12+ makes it: of a coroutine only, never of a generator
    (``@types.coroutine``), which 3.11 still accepts."""

    def __init__(self, coro: Any, **kwargs: Any) -> None:
        if not inspect.iscoroutine(coro):
            raise TypeError(f"a coroutine was expected, got {coro!r}")
        super().__init__(coro, **kwargs)


def test_a_call_that_suspends_finishes_in_a_task_python_3_12_would_make(
    system: ToolSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sys.version_info < (3, 12):
        monkeypatch.setattr(asyncio, "Task", _CoroutineOnlyTask)
        monkeypatch.setattr(asyncio.tasks, "Task", _CoroutineOnlyTask)

    async def body(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(0)
        return [block(f"ran:{ctx.call_id}")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    assert system.execute(call("x")).content[0]["text"] == "ran:c1"
    outcome = system.execute_batch(batch("c1", "c2", "c3"))
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:c1", "ran:c2", "ran:c3"]
