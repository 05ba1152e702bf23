"""Cancellation as an asyncio harness drives it: ``asyncio.timeout``, ``TaskGroup`` and
``task.cancel()`` around ``execute_async`` / ``execute_batch_async``, the timeout policy and
batch aborts interrupting async bodies, and what an aborted call keeps for the harness."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, Logs, block, fixture, results_of, text

import dsh_tools._system as system_module
import dsh_tools.pipeline._core as pipeline_core
from dsh_tools import (
    AbortController,
    AbortError,
    Accept,
    Ask,
    ExecuteBatch,
    ExecuteCall,
    HarnessError,
    SessionLog,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolsConfig,
    ToolSystem,
    timeout_policy,
)
from dsh_tools.examples import bash_tool

FOREVER = 3600.0  # a body sleeping this long finishes only if it is interrupted


def code_of(result: Any) -> str | None:
    info = result.to_dict().get("error", {}).get("info")
    return info["code"] if info else None


class SleepyTool:
    """An ``async def`` tool that sleeps ``FOREVER`` without looking at its signal, noting
    when it starts and how it ended (``cancelled`` / ``returned``)."""

    def __init__(self, system: ToolSystem, name: str = "sleepy", cleanup: bool = False) -> None:
        self.started = threading.Event()
        self.ends: list[str] = []

        async def body(args: Any, ctx: Any) -> Any:
            self.started.set()
            try:
                await asyncio.sleep(FOREVER)
            except asyncio.CancelledError:
                if cleanup:
                    await asyncio.sleep(0.01)  # async cleanup is awaited to its end
                self.ends.append("cancelled")
                raise
            self.ends.append("returned")
            return [block("slept")]

        system.tools.register(fixture(name, body))


def sleepy_call(call_id: str = "c1") -> ExecuteCall:
    return ExecuteCall(call_id=call_id, name="sleepy", arguments={})


# --- the awaiting task's cancellation propagates ----------------------------------------------


def test_asyncio_timeout_raises_timeout_error_after_the_call_is_recorded(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system, cleanup=True)

    async def harness() -> None:
        async with asyncio.timeout(0.05):
            await system.execute_async(sleepy_call())

    with pytest.raises(TimeoutError):
        asyncio.run(harness())
    assert sleepy.ends == ["cancelled"]  # the body was cancelled and its cleanup awaited
    recorded = results_of(system)["c1"]
    assert recorded["error"]["code"] == "ABORTED"


def test_a_blocking_batch_that_outlasts_its_timeout_says_which_batch(system: ToolSystem) -> None:
    # The message said only "did not finish within 0.05 s", where execute()'s names its call.
    SleepyTool(system)
    calls = [ToolCall(f"c{i}", "sleepy", "{}") for i in range(1, 5)]
    with pytest.raises(
        TimeoutError,
        match=r"^the batch of 4 calls \('c1', 'c2', 'c3', \.\.\.\) did not finish within 0\.05 s$",
    ):
        system.execute_batch(ExecuteBatch(calls=calls), timeout=0.05)


def test_a_blocking_batch_that_outlasts_its_timeout_still_finishes_every_call(
    system: ToolSystem,
) -> None:
    # The timeout only stops the caller's wait: the batch is not aborted.
    gate = threading.Event()
    finished = threading.Event()
    system.tools.register(fixture("gated", lambda args, ctx: [block(f"opened {gate.wait(WAIT)}")]))
    system.tools.on_result(lambda exec, result: finished.set() if exec.call_id == "c2" else None)
    calls = [ToolCall("c1", "gated", "{}"), ToolCall("c2", "gated", "{}")]
    with pytest.raises(TimeoutError):
        system.execute_batch(ExecuteBatch(calls=calls), timeout=0.05)
    gate.set()
    assert finished.wait(WAIT)
    system.stop()  # waits for the calls in flight to record their results
    recorded = results_of(system)
    assert [recorded[c]["is_error"] for c in ("c1", "c2")] == [False, False]


def test_task_cancel_leaves_the_task_cancelled_and_one_aborted_result(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)
    seen: list[Any] = []
    system.tools.on_result(lambda exec, result: seen.append(result))

    async def harness() -> bool:
        task = asyncio.create_task(system.execute_async(sleepy_call()))
        await asyncio.to_thread(sleepy.started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(harness()) is True
    (result,) = seen
    assert isinstance(result, ToolExecutionFailure)
    assert code_of(result) == "ABORTED"
    assert result.abort_reason == "the awaiting task was cancelled"
    assert result.settled_with is None  # the body ended by its cancellation
    assert text(result) == "Error: tool call aborted"


@pytest.mark.parametrize("body", ["async", "plain", "hook"])
def test_the_callers_cancel_message_reaches_it(system: ToolSystem, body: str) -> None:
    # task.cancel(msg) gives the awaiter a CancelledError carrying msg, as execute_batch_async
    # did; execute_async put its own words in place of the harness's.
    started = threading.Event()

    async def sleeps(args: Any, ctx: Any) -> Any:
        started.set()
        await asyncio.sleep(FOREVER)

    def waits(args: Any, ctx: Any) -> Any:
        started.set()
        ctx.signal.wait(WAIT)
        return [block("stopped")]

    async def hook(exec: Any, next: Any) -> Any:
        started.set()
        await asyncio.sleep(FOREVER)

    system.tools.register(fixture("t", waits if body == "plain" else sleeps))
    if body == "hook":
        system.tools.on_pre_execute(hook)

    async def harness() -> tuple[Any, ...]:
        task = asyncio.create_task(
            system.execute_async(ExecuteCall(call_id="c1", name="t", arguments={}))
        )
        await asyncio.to_thread(started.wait, WAIT)
        task.cancel("the user pressed stop")
        try:
            await task
        except asyncio.CancelledError as exc:
            return exc.args
        return ()

    assert asyncio.run(harness()) == ("the user pressed stop",)
    assert results_of(system)["c1"]["error"]["code"] in ("ABORTED", "ABORTED_BEFORE_DISPATCH")


def stubborn_body(
    started: threading.Event, ends: list[str] | None = None
) -> Callable[[Any, Any], Awaitable[Any]]:
    """An ``async`` body that reads its signal (so it is trusted to watch it), sets
    ``started`` and then sleeps for ever, ignoring it; its cancellation is noted in ``ends``."""

    async def stubborn(args: Any, ctx: Any) -> Any:
        assert not ctx.signal.aborted  # reads its signal: trusted to watch it
        started.set()
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            if ends is not None:
                ends.append("cancelled")
            raise
        return [block("slept")]

    return stubborn


def cancelled_on_its_own_loop(
    awaited: Callable[[], Coroutine[Any, Any, Any]], started: threading.Event, cancellations: int
) -> list[str]:
    """Awaits ``awaited()`` in a task on a loop of its own thread, cancels that task
    ``cancellations`` times once ``started`` is set, and gives ``["cancelled"]`` if the task
    then ended by its cancellation within ``WAIT`` (``[]`` otherwise)."""
    outcome: list[str] = []

    async def harness() -> None:
        task = asyncio.create_task(awaited())
        await asyncio.to_thread(started.wait, WAIT)
        for _ in range(cancellations):
            task.cancel()
            await asyncio.sleep(0)
        try:
            await task
        except asyncio.CancelledError:
            outcome.append("cancelled")

    waiting = threading.Thread(target=asyncio.run, args=(harness(),), daemon=True)
    waiting.start()
    waiting.join(WAIT)  # else it waits until stop() cancels the body, past its grace
    return outcome


@pytest.mark.parametrize("cancellations", [1, 2], ids=["cancelled-once", "cancelled-again"])
def test_a_cancellation_does_not_wait_for_ever_on_a_body_that_reads_its_signal_then_ignores_it(
    system: ToolSystem, cancellations: int
) -> None:
    # A body that reads its signal is trusted to end itself once it aborts; one that never
    # does held the awaiting task's cancellation for ever, a second cancellation too (an
    # asyncio.timeout inside an asyncio.wait_for). It is cancelled once BODY_WIND_DOWN_S has
    # passed, or at once when the awaiting task is cancelled again.
    started = threading.Event()
    ends: list[str] = []

    system.tools.register(fixture("stubborn", stubborn_body(started, ends)))
    call = ExecuteCall(call_id="c1", name="stubborn", arguments={})
    outcome = cancelled_on_its_own_loop(lambda: system.execute_async(call), started, cancellations)
    assert (outcome, ends) == (["cancelled"], ["cancelled"])
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"


@pytest.mark.parametrize("cancellations", [1, 2], ids=["cancelled-once", "cancelled-again"])
def test_a_cancelled_batch_does_not_wait_for_ever_on_a_body_that_reads_its_signal(
    system: ToolSystem, cancellations: int
) -> None:
    # The batch's abort reaches such a body through its signal only; one that never ended held
    # execute_batch_async for good, and every later cancellation of its task was swallowed by
    # the wait for the batch to settle. Its body is cancelled as a single call's is.
    started = threading.Event()

    system.tools.register(fixture("stubborn", stubborn_body(started)))
    batch = ExecuteBatch(calls=[ToolCall("b1", "stubborn", "{}")])
    outcome = cancelled_on_its_own_loop(
        lambda: system.execute_batch_async(batch), started, cancellations
    )
    assert outcome == ["cancelled"]
    assert results_of(system)["b1"]["error"]["code"] == "ABORTED"


def cancel_a_run_calling(system: ToolSystem, tool: str, started: threading.Event) -> list[Any]:
    """Cancel, on a loop of its own, the task awaiting a run of ``return await tools.<tool>({})``
    once the tool's body has set ``started``; the call ids the pipeline still held after the
    cancelled task ended (none is right), and the run's ends in the session log."""
    left: list[str] = []

    async def harness() -> None:
        code = {"code": f"return await tools.{tool}({{}})", "description": "d"}
        task = asyncio.create_task(
            system.execute_async(ExecuteCall(call_id="r1", name="run_code", arguments=code))
        )
        await asyncio.to_thread(started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left.extend(r.call_id for r in system.pipeline.live)

    waiting = threading.Thread(target=asyncio.run, args=(harness(),), daemon=True)
    waiting.start()
    waiting.join(WAIT)
    assert not waiting.is_alive()
    assert left == []
    return [
        (e.type, e.data.get("sub_call_id") or e.data["call_id"])
        for e in system.session.events
        if e.type in ("tool/code-dispatch", "tool/result")
    ]


def test_a_cancelled_code_run_ends_its_sub_call_that_reads_its_signal_before_it_settles() -> None:
    # The run_code call gave up on its sub-calls once its own body was cancelled: the sub-call
    # (whose body reads its signal and never ends) was left running on the caller's loop, its
    # tool/code-dispatch recorded only when that loop's end cancelled it, after the run's
    # tool/result. Now the run interrupts it too, and settles once it has.
    started = threading.Event()

    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(fixture("stubborn", stubborn_body(started)))
        ends = cancel_a_run_calling(system, "stubborn", started)
        assert ends == [("tool/code-dispatch", "r1:code:1"), ("tool/result", "r1")]


def test_a_cancelled_code_run_gives_up_its_plain_sub_call_body_before_it_settles() -> None:
    # A plain body that ignores its signal cannot be cancelled: the cancelled run settled
    # without it, and its sub-call's tool/code-dispatch came after the run's tool/result, when
    # the body at last returned (never, for one that hangs). Now the run gives the body up,
    # as stop() does, and its sub-call settles ABORTED before the run does.
    started = threading.Event()
    release = threading.Event()

    def hangs(args: Any, ctx: Any) -> Any:
        started.set()
        release.wait(FOREVER)  # never looks at its signal
        return [block("late")]

    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(fixture("hangs", hangs))
        try:
            ends = cancel_a_run_calling(system, "hangs", started)
        finally:
            release.set()
        assert ends == [("tool/code-dispatch", "r1:code:1"), ("tool/result", "r1")]
        [dispatch] = [e for e in system.session.events if e.type == "tool/code-dispatch"]
        assert dispatch.data["is_error"] is True


def cancel_once_started(system: ToolSystem, call: ExecuteCall, started: threading.Event) -> None:
    """Cancel the task awaiting ``call`` once its body has set ``started``."""

    async def harness() -> None:
        task = asyncio.create_task(system.execute_async(call))
        await asyncio.to_thread(started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(harness())


def test_a_body_that_settles_its_own_way_on_the_callers_cancellation_logs_no_warning(
    system: ToolSystem, logs: Logs
) -> None:
    # A body that reads its signal is left to settle its own way, and raising its own error is
    # one: it was never cancelled, yet every such call logged a warning and a traceback
    # saying its "cleanup after its cancellation raised".
    started = threading.Event()

    async def watches(args: Any, ctx: Any) -> Any:
        started.set()
        while not ctx.signal.aborted:
            await asyncio.sleep(0.005)
        raise HarnessError(f"stopped: {ctx.signal.reason}", "STOPPED")

    system.tools.register(fixture("watches", watches))
    cancel_once_started(system, ExecuteCall(call_id="c1", name="watches", arguments={}), started)
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"
    assert logs.warnings == []


def test_a_body_whose_cleanup_fails_on_the_callers_cancellation_logs_it(
    system: ToolSystem, logs: Logs
) -> None:
    started = threading.Event()

    async def closes(args: Any, ctx: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            raise OSError("closing the connection failed") from None

    system.tools.register(fixture("closes", closes))
    cancel_once_started(system, ExecuteCall(call_id="c1", name="closes", arguments={}), started)
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"
    (warning,) = logs.wait_for_warnings(1)
    assert "closing the connection failed" in warning


def test_a_code_run_whose_caller_is_cancelled_logs_no_warning(logs: Logs) -> None:
    # A harness's stop button during a Code Mode run: the run settles on its abort, which is
    # no failed cleanup, and logged a warning with a traceback for every press.
    started = threading.Event()

    async def slow(args: Any, ctx: Any) -> Any:
        started.set()
        await asyncio.sleep(FOREVER)

    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(fixture("slow", slow))
        code = {"code": "return await tools.slow({})", "description": "d"}
        cancel_once_started(
            system, ExecuteCall(call_id="r1", name="run_code", arguments=code), started
        )
        assert results_of(system)["r1"]["error"]["code"] == "ABORTED"
    assert logs.warnings == []


def test_a_task_group_cancels_a_sibling_call_when_another_task_fails(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)

    async def fail_soon() -> None:
        await asyncio.to_thread(sleepy.started.wait, WAIT)
        raise LookupError("the harness gave up")

    async def harness() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(system.execute_async(sleepy_call()))
            group.create_task(fail_soon())

    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(harness())
    assert caught.group_contains(LookupError)  # type: ignore[attr-defined]
    assert not caught.group_contains(asyncio.CancelledError)  # type: ignore[attr-defined]
    assert sleepy.ends == ["cancelled"]
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"


def test_cancelling_before_dispatch_is_aborted_before_dispatch(system: ToolSystem) -> None:
    sleepy = SleepyTool(system)
    asked = threading.Event()

    async def slow_policy(exec: Any, next: Any) -> Any:
        asked.set()
        await asyncio.sleep(FOREVER)
        return await next()

    system.tools.on_pre_execute(slow_policy)

    async def harness() -> None:
        task = asyncio.create_task(system.execute_async(sleepy_call()))
        await asyncio.to_thread(asked.wait, WAIT)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(harness())
    assert not sleepy.started.is_set()
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"


def test_a_plain_body_sees_its_signal_abort_when_the_awaiting_task_is_cancelled(
    system: ToolSystem,
) -> None:
    started = threading.Event()
    saw: list[Any] = []

    def polling(args: Any, ctx: Any) -> Any:
        started.set()
        saw.append(ctx.signal.wait(WAIT))
        saw.append(ctx.signal.reason)
        return [block("noticed")]

    system.tools.register(fixture("polling", polling))

    async def harness() -> None:
        task = asyncio.create_task(
            system.execute_async(ExecuteCall(call_id="c1", name="polling", arguments={}))
        )
        await asyncio.to_thread(started.wait, WAIT)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(harness())
    assert saw == [True, "the awaiting task was cancelled"]
    recorded = results_of(system)["c1"]
    assert recorded["error"]["code"] == "ABORTED"


async def _cancel_the_caller_on_the_next_pass(exec: Any, next: Any) -> Any:
    """An execute wrapper standing for a harness that gives up right then: under execute_async
    it runs in the caller's task, whose cancellation lands on the loop's next pass, while a
    plain body is on its worker thread (and has returned, for a quick one)."""
    caller = asyncio.current_task()
    assert caller is not None
    asyncio.get_running_loop().call_soon(caller.cancel)
    return await next()


def _cancelled_call(system: ToolSystem, name: str) -> None:
    async def harness() -> None:
        await system.execute_async(ExecuteCall(call_id="c1", name=name, arguments={}))

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(asyncio.wait_for(harness(), WAIT))


def test_a_plain_body_that_returned_just_before_the_cancellation_keeps_what_it_settled_with(
    system: ToolSystem,
) -> None:
    # The body returned on its worker thread before the cancellation reached the task waiting
    # for it: as when the cancellation comes while it runs, the call is ABORTED and keeps the
    # success the body settled with (the read did happen), not a cancellation of the body.
    observed: list[Any] = []
    system.tools.register(fixture("read", lambda args, ctx: [block("file contents")]))
    system.tools.on_execute(_cancel_the_caller_on_the_next_pass)
    system.tools.on_result(lambda exec, result: observed.append(result))

    _cancelled_call(system, "read")

    (result,) = observed
    assert isinstance(result, ToolExecutionFailure)
    assert code_of(result) == "ABORTED"
    assert result.abort_reason == "the awaiting task was cancelled"
    assert isinstance(result.settled_with, ToolExecutionSuccess)
    assert result.settled_with.content[0]["text"] == "file contents"


def test_an_awaitable_a_plain_body_returned_just_before_the_cancellation_is_not_dropped(
    system: ToolSystem,
) -> None:
    # ``lambda args, ctx: fetch()`` returned its coroutine just before the cancellation came:
    # it runs as the body's rest and is cancelled there, as when the cancellation comes later,
    # rather than being dropped unstarted (for Python to warn "coroutine ... was never
    # awaited" about wherever it is collected).
    ran: list[str] = []
    returned: list[Coroutine[Any, Any, Any]] = []

    async def fetch() -> Any:
        ran.append("fetch")
        await asyncio.sleep(FOREVER)
        return [block("fetched")]

    def deferred(args: Any, ctx: Any) -> Any:
        returned.append(fetch())
        return returned[0]

    system.tools.register(fixture("deferred", deferred))
    system.tools.on_execute(_cancel_the_caller_on_the_next_pass)

    _cancelled_call(system, "deferred")

    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"
    (awaitable,) = returned
    assert ran == ["fetch"]
    assert awaitable.cr_frame is None  # it ended: nothing is left to warn "never awaited"


def test_a_body_raising_cancelled_error_of_its_own_accord_is_a_tool_failure(
    system: ToolSystem,
) -> None:
    async def gives_up(args: Any, ctx: Any) -> Any:
        raise asyncio.CancelledError("backend closed the stream")

    system.tools.register(fixture("gives_up", gives_up))
    call = ExecuteCall(call_id="c1", name="gives_up", arguments={})
    result = asyncio.run(system.execute_async(call))
    assert result.to_dict()["error"] == {"message": "backend closed the stream"}
    assert result.exception_type == "asyncio.exceptions.CancelledError"  # type: ignore[union-attr]
    assert system.execute(call).is_error


def test_cancelling_execute_batch_async_aborts_the_batch_and_keeps_every_result(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)
    system.tools.register(fixture("quick"))
    batch = ExecuteBatch(
        calls=[
            ToolCall("c1", "quick", "{}"),
            ToolCall("c2", "sleepy", "{}"),
            ToolCall("c3", "quick", "{}"),
        ]
    )

    async def harness() -> None:
        async with asyncio.timeout(WAIT):
            task = asyncio.create_task(system.execute_batch_async(batch))
            await asyncio.to_thread(sleepy.started.wait, WAIT)
            task.cancel()
            await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(harness())
    recorded = results_of(system)
    assert list(recorded) == ["c1", "c2", "c3"]
    assert "error" not in recorded["c1"]
    assert recorded["c2"]["error"]["code"] == "ABORTED"
    assert recorded["c3"]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert sleepy.ends == ["cancelled"]


# --- abort and timeout interrupt async bodies -------------------------------------------------


def test_the_timeout_policy_interrupts_an_async_body_that_never_polls(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)
    system.tools.on_execute(timeout_policy(default_ms=50))
    result = system.execute(sleepy_call())
    assert code_of(result) == "TOOL_TIMEOUT"
    assert sleepy.ends == ["cancelled"]


def test_a_batch_of_slow_async_calls_under_the_timeout_policy_all_time_out(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)
    system.tools.on_execute(timeout_policy(default_ms=50))
    batch = ExecuteBatch(calls=[ToolCall(f"c{i}", "sleepy", "{}") for i in range(10)])
    outcome = system.execute_batch(batch, timeout=WAIT)
    assert [code_of(r) for r in outcome.results] == ["TOOL_TIMEOUT"] * 10
    assert sleepy.ends == ["cancelled"] * 10


def test_a_batch_aborted_while_a_sibling_sleeps_keeps_what_finished(
    system: ToolSystem,
) -> None:
    sleepy = SleepyTool(system)
    controller = AbortController()

    async def quick_read(args: Any, ctx: Any) -> Any:
        return [block("file contents")]

    system.tools.register(fixture("read", quick_read, is_concurrency_safe=lambda a: True))
    system.tools.register(fixture("slow", sleepy_body(sleepy), is_concurrency_safe=lambda a: True))
    # The read finishes at once but commits after the slow call before it (model order).
    batch = ExecuteBatch(
        calls=[ToolCall("slow1", "slow", "{}"), ToolCall("read1", "read", "{}")],
        signal=controller.signal,
    )
    threading.Thread(target=lambda: (sleepy.started.wait(WAIT), controller.abort("stop"))).start()
    outcome = system.execute_batch(batch, timeout=WAIT)
    slow, read = outcome.results
    assert code_of(slow) == "ABORTED" and code_of(read) == "ABORTED"
    assert text(read) == "Error: tool call aborted"  # what the model sees is unchanged
    assert isinstance(read, ToolExecutionFailure)
    assert read.abort_reason == "stop"
    assert isinstance(read.settled_with, ToolExecutionSuccess)
    assert read.settled_with.value == [{"type": "text", "text": "file contents"}]
    assert "settled_with" not in read.to_dict() and "abort_reason" not in read.to_dict()
    assert slow.settled_with is None  # type: ignore[union-attr]
    assert sleepy.ends == ["cancelled"]


def sleepy_body(sleepy: SleepyTool) -> Any:
    async def body(args: Any, ctx: Any) -> Any:
        sleepy.started.set()
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            sleepy.ends.append("cancelled")
            raise
        return [block("slept")]

    return body


def test_a_body_that_ignores_its_signal_and_finishes_keeps_its_value_and_the_reason(
    system: ToolSystem,
) -> None:
    controller = AbortController()

    def stubborn(args: Any, ctx: Any) -> Any:
        controller.abort("user pressed stop")
        return [block("done anyway")]

    system.tools.register(fixture("stubborn", stubborn))
    result = system.execute(
        ExecuteCall(call_id="c1", name="stubborn", arguments={}, signal=controller.signal)
    )
    assert isinstance(result, ToolExecutionFailure)
    assert code_of(result) == "ABORTED"
    assert result.abort_reason == "user pressed stop"
    assert result.settled_with.value == [{"type": "text", "text": "done anyway"}]


def test_a_shielded_critical_section_finishes_despite_the_abort(system: ToolSystem) -> None:
    controller = AbortController()
    written: list[str] = []

    async def commit(args: Any, ctx: Any) -> Any:
        async def critical() -> None:
            controller.abort("user pressed stop")
            await asyncio.sleep(0.01)
            written.append("committed")

        section = asyncio.ensure_future(critical())
        try:
            await asyncio.shield(section)
        except asyncio.CancelledError:
            await section  # finish the critical section, then let the cancellation go on
            raise
        return [block("ok")]

    system.tools.register(fixture("commit", commit))
    result = system.execute(
        ExecuteCall(call_id="c1", name="commit", arguments={}, signal=controller.signal)
    )
    assert code_of(result) == "ABORTED"
    assert written == ["committed"]


def test_a_wrapper_that_swallows_the_callers_cancellation_does_not_start_the_body() -> None:
    ran: list[str] = []

    async def body(args: Any, ctx: Any) -> Any:
        ran.append("body")
        await asyncio.sleep(30)
        return [{"type": "text", "text": "late"}]

    async def swallowing(exec: Any, next: Any) -> Any:
        with contextlib.suppress(asyncio.CancelledError):  # careless code carries on
            await asyncio.sleep(30)
        return await next()

    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("slow", body))
        system.tools.on_execute(swallowing)

        async def caller() -> None:
            async with asyncio.timeout(0.2):
                await system.execute_async(ExecuteCall(call_id="c1", name="slow", arguments={}))

        with pytest.raises(TimeoutError):
            asyncio.run(caller())
        assert ran == []
        (result,) = [e.data for e in system.session.events if e.type == "tool/result"]
        assert result["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    finally:
        system.stop()


class StuckHook:
    """An async hook for one stage that waits ``FOREVER`` without looking at its signal (or,
    ``swallowing``, catches the cancellation once and carries on; ``raising``, fails its
    cleanup), noting how it ended."""

    def __init__(
        self, system: ToolSystem, stage: str, swallowing: bool = False, raising: bool = False
    ) -> None:
        self.waiting = threading.Event()
        self.ends: list[str] = []

        async def wait(rest: tuple[Any, ...]) -> Any:
            self.waiting.set()
            try:
                await asyncio.sleep(FOREVER)
            except asyncio.CancelledError:
                self.ends.append("cancelled")
                if raising:
                    raise RuntimeError("the policy service's connection was reset") from None
                if not swallowing:
                    raise
            return await rest[-1]()

        async def pre(exec: Any, next: Any) -> Any:
            return await wait((exec, next))

        async def post(exec: Any, result: Any, next: Any) -> Any:
            return await wait((exec, result, next))

        {
            "pre-execute": lambda: system.tools.on_pre_execute(pre),
            "execute wrapper": lambda: system.tools.on_execute(pre),
            "post-execute": lambda: system.tools.on_post_execute(post),
        }[stage]()


def call_t_once(system: ToolSystem, entry: str) -> Any:
    """The result of call ``c1`` of tool ``t`` through ``entry`` (a batch of that one call)."""
    one = ExecuteCall(call_id="c1", name="t", arguments={})
    if entry == "execute":
        return system.execute(one)
    if entry == "execute_async":
        return asyncio.run(system.execute_async(one))
    return system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "t", "{}")])).results[0]


def expected_code(stage: str) -> str:
    return "ABORTED" if stage == "post-execute" else "ABORTED_BEFORE_DISPATCH"


STAGES = ["pre-execute", "execute wrapper", "post-execute"]


@pytest.mark.parametrize("entry", ["execute", "execute_async", "execute_batch"])
@pytest.mark.parametrize("stage", STAGES)
def test_stop_cancels_a_hook_that_never_returns_and_the_call_keeps_its_one_result(
    entry: str, stage: str
) -> None:
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("t"))
    hook = StuckHook(system, stage)
    outcomes: list[Any] = []
    waiting = threading.Thread(target=lambda: outcomes.append(call_t_once(system, entry)))
    waiting.start()
    assert hook.waiting.wait(WAIT)
    system.stop()
    waiting.join(WAIT)
    assert not waiting.is_alive()
    (result,) = outcomes
    assert code_of(result) == expected_code(stage)
    assert result.abort_reason == "the tool system is stopping"
    assert hook.ends == ["cancelled"]
    assert list(results_of(system)) == ["c1"]


@pytest.mark.parametrize("stage", STAGES)
def test_cancelling_execute_batch_async_does_not_wait_for_a_stuck_hook(stage: str) -> None:
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("t"))
        hook = StuckHook(system, stage)

        async def caller() -> None:
            turn = ExecuteBatch(calls=[ToolCall("c1", "t", "{}"), ToolCall("c2", "t", "{}")])
            async with asyncio.timeout(0.3):
                await system.execute_batch_async(turn)

        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(caller(), WAIT))
        codes = {call_id: data["error"]["code"] for call_id, data in results_of(system).items()}
        assert codes == {"c1": expected_code(stage), "c2": "ABORTED_BEFORE_DISPATCH"}
        assert hook.ends == ["cancelled"]
    finally:
        system.stop()


@pytest.mark.parametrize("how", ["swallowing", "raising"])
@pytest.mark.parametrize("stage", STAGES)
def test_a_hook_that_swallows_the_stop_or_fails_its_cleanup_leaves_the_callers_task_as_it_was(
    stage: str, how: str, logs: Logs
) -> None:
    # The pipeline cancels the task its hooks wait in, under execute_async the caller's own. A
    # hook that swallows that cancellation, or turns it into an error of its own while cleaning
    # up, must not leave the caller's task cancelling; the call ends as the stop's.
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("t"))
    hook = StuckHook(system, stage, swallowing=how == "swallowing", raising=how == "raising")

    async def caller() -> tuple[Any, int]:
        stopper = threading.Thread(target=lambda: hook.waiting.wait(WAIT) and system.stop())
        stopper.start()
        result = await system.execute_async(ExecuteCall(call_id="c1", name="t", arguments={}))
        await asyncio.sleep(0)  # no cancellation is left pending for this task
        cancelling = asyncio.current_task().cancelling()  # type: ignore[union-attr]
        stopper.join(WAIT)
        return result, cancelling

    result, cancelling = asyncio.run(asyncio.wait_for(caller(), WAIT))
    assert hook.ends == ["cancelled"]
    assert code_of(result) == expected_code(stage)  # carried on: the body does not start
    assert result.abort_reason == "the tool system is stopping"
    assert cancelling == 0
    assert list(results_of(system)) == ["c1"]
    if how == "raising":
        assert any("connection was reset" in w for w in logs.warnings)


@pytest.mark.parametrize("stage", STAGES)
def test_a_timeout_around_a_call_whose_hook_cleanup_fails_is_a_timeout_error(stage: str) -> None:
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("t"))
        StuckHook(system, stage, raising=True)

        async def caller() -> str:
            try:
                async with asyncio.timeout(0.2):
                    await system.execute_async(ExecuteCall(call_id="c1", name="t", arguments={}))
            except TimeoutError:
                return "TimeoutError"
            return "no timeout"

        assert asyncio.run(asyncio.wait_for(caller(), WAIT)) == "TimeoutError"
        assert results_of(system)["c1"]["error"]["code"] == expected_code(stage)
    finally:
        system.stop()


class FailingApprover:
    """An async approver that waits ``FOREVER`` and fails its cleanup when cancelled."""

    def __init__(self) -> None:
        self.waiting = threading.Event()

    async def request(self, **request: Any) -> str:
        self.waiting.set()
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            raise RuntimeError("the approval service's connection was reset") from None
        return "allowed-once"


@pytest.mark.parametrize("stage", [*STAGES, "approver"])
def test_the_callers_cancel_message_reaches_it_through_a_hook_whose_cleanup_fails(
    stage: str,
) -> None:
    # The hook turns the caller's cancellation into an error of its own while cleaning up:
    # the call still ends as that cancellation, and the caller's CancelledError still carries
    # the message its task was cancelled with, as when the hook lets the cancellation go.
    approver = FailingApprover()
    system = ToolSystem.start(code_runtime=None, approval=approver)
    try:
        system.tools.register(fixture("t"))
        if stage == "approver":
            waiting = approver.waiting

            async def ask(exec: Any, next: Any) -> Any:
                return Ask("the user decides")

            system.tools.on_pre_execute(ask)
        else:
            waiting = StuckHook(system, stage, raising=True).waiting

        async def harness() -> tuple[Any, ...]:
            call = ExecuteCall(call_id="c1", name="t", arguments={}, agent="A")
            task = asyncio.create_task(system.execute_async(call))
            await asyncio.to_thread(waiting.wait, WAIT)
            task.cancel("the user pressed stop")
            try:
                await task
            except asyncio.CancelledError as exc:
                return exc.args
            return ()

        assert asyncio.run(asyncio.wait_for(harness(), WAIT)) == ("the user pressed stop",)
        code = "ABORTED_BEFORE_DISPATCH" if stage == "approver" else expected_code(stage)
        assert results_of(system)["c1"]["error"]["code"] == code
    finally:
        system.stop()


@pytest.mark.parametrize("stage", STAGES)
def test_no_cancellation_reaches_the_callers_task_after_the_call_has_ended(stage: str) -> None:
    # The caller's timeout interrupts the call; its hook swallows that and carries on. The
    # cancellation the interrupt queues for the hook's task (the caller's own) must not land
    # once the hook is done: the caller awaits on, and its next call is its own.
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("t"))

        async def careless(*args: Any) -> Any:
            if args[0].call_id == "c1":
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(30)
            return await args[-1]()

        {
            "pre-execute": system.tools.on_pre_execute,
            "execute wrapper": system.tools.on_execute,
            "post-execute": system.tools.on_post_execute,
        }[stage](careless)

        async def caller() -> tuple[int, str]:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    await system.execute_async(ExecuteCall(call_id="c1", name="t", arguments={}))
            await asyncio.sleep(0.1)  # raised CancelledError when a late cancellation landed
            later = await system.execute_async(ExecuteCall(call_id="c2", name="t", arguments={}))
            return asyncio.current_task().cancelling(), text(later)  # type: ignore[union-attr]

        cancelling, later = asyncio.run(asyncio.wait_for(caller(), WAIT))
        assert cancelling == 0
        assert not later.startswith("Error")
    finally:
        system.stop()


@pytest.mark.parametrize("entry", ["execute", "execute_async", "execute_batch"])
@pytest.mark.parametrize("stage", ["execute wrapper", "post-execute"])
def test_a_hook_that_starts_waiting_after_the_interrupt_is_cancelled_after_a_while(
    monkeypatch: pytest.MonkeyPatch, entry: str, stage: str
) -> None:
    # stop() comes while the body runs; the wrapper (after its body) or the post-execute hook
    # only then starts to wait, and nothing else would ever end that wait.
    monkeypatch.setattr(pipeline_core, "HOOK_WIND_DOWN_S", 0.2)
    system = ToolSystem.start(code_runtime=None)
    running, release = threading.Event(), threading.Event()
    ends: list[str] = []

    def body(args: Any, ctx: Any) -> Any:
        running.set()
        release.wait(WAIT)
        return [block("done")]

    async def wait_forever() -> None:
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            ends.append("cancelled")
            raise

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        await wait_forever()
        return result

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await wait_forever()
        return await next()

    system.tools.register(fixture("t", body))
    if stage == "post-execute":
        system.tools.on_post_execute(post)
    else:
        system.tools.on_execute(wrapper)
    outcomes: list[Any] = []
    waiting = threading.Thread(target=lambda: outcomes.append(call_t_once(system, entry)))
    waiting.start()
    assert running.wait(WAIT)
    stopper = threading.Thread(target=system.stop)
    stopper.start()
    time.sleep(0.1)  # stop() interrupts the call as it starts; the body then returns
    release.set()
    waiting.join(WAIT)
    stopper.join(WAIT)
    assert not waiting.is_alive()
    (result,) = outcomes
    assert code_of(result) == "ABORTED"
    assert ends == ["cancelled"]
    assert list(results_of(system)) == ["c1"]


def batch_of_waiting_post_hooks(
    system: ToolSystem, count: int
) -> tuple[ExecuteBatch, threading.Event, list[str]]:
    """A batch of ``count`` calls whose post-execute hooks wait until cancelled (each only
    once the call before it has committed), set when the first waits, and the ids of the
    hooks cancelled so far."""
    waiting = threading.Event()
    cancelled: list[str] = []

    async def post(exec: Any, result: Any, next: Any) -> Any:
        waiting.set()
        try:
            await asyncio.sleep(FOREVER)
        except asyncio.CancelledError:
            cancelled.append(exec.call_id)
            raise
        return await next()

    safe = {"is_concurrency_safe": lambda args: True}  # every call starts at once
    system.tools.register(fixture("t", lambda args, ctx: [block("done")], **safe))
    system.tools.on_post_execute(post)
    calls = [ToolCall(f"c{i}", "t", "{}") for i in range(1, count + 1)]
    return ExecuteBatch(calls=calls), waiting, cancelled


def assert_all_aborted(codes: list[str | None]) -> None:
    """Every call of ``batch_of_waiting_post_hooks`` ended aborted (c1 always started; a later
    one may not have yet)."""
    assert codes[0] == "ABORTED"
    assert set(codes) <= {"ABORTED", "ABORTED_BEFORE_DISPATCH"}


def test_stop_past_its_grace_cancels_the_hooks_of_a_batch_s_later_commits_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The batch commits in order: each call's post-execute hook starts waiting once the one
    # before it has been cancelled, after the interrupt, and was given the hooks' wind-down.
    # stop()'s grace ran out long before the last, the loop ended under them, and the batch's
    # waiter got a RuntimeError instead of its results.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    monkeypatch.setattr(pipeline_core, "HOOK_WIND_DOWN_S", FOREVER)
    system = ToolSystem.start(code_runtime=None)
    batch, hook_waits, cancelled = batch_of_waiting_post_hooks(system, 4)
    outcomes: list[Any] = []
    waiting = threading.Thread(target=lambda: outcomes.append(system.execute_batch(batch)))
    waiting.start()
    assert hook_waits.wait(WAIT)
    system.stop()
    waiting.join(WAIT)
    (outcome,) = outcomes
    assert list(results_of(system)) == ["c1", "c2", "c3", "c4"]
    assert_all_aborted([code_of(result) for result in outcome.results])
    assert cancelled[0] == "c1"


def test_a_batch_cancelled_twice_cancels_the_hooks_of_its_later_commits_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The second cancellation hurries the batch: the hook waiting then was cancelled, but each
    # later call's post-execute hook still had the hooks' wind-down, one after the other.
    monkeypatch.setattr(pipeline_core, "HOOK_WIND_DOWN_S", FOREVER)
    system = ToolSystem.start(code_runtime=None)
    try:
        batch, hook_waits, cancelled = batch_of_waiting_post_hooks(system, 4)

        async def harness() -> None:
            turn = asyncio.create_task(system.execute_batch_async(batch))
            await asyncio.to_thread(hook_waits.wait, WAIT)
            turn.cancel()
            while not cancelled:  # the first cancellation reached c1's hook
                await asyncio.sleep(0.001)
            turn.cancel()
            await asyncio.wait([turn], timeout=WAIT)
            assert turn.cancelled()

        asyncio.run(harness())
        recorded = results_of(system)
        assert list(recorded) == ["c1", "c2", "c3", "c4"]
        assert_all_aborted([data["error"]["code"] for data in recorded.values()])
    finally:
        system.stop()


def cancel_a_batch_that_stop_gives_up_on() -> tuple[bool, SessionLog]:
    """Cancel the task awaiting a batch whose post-execute hook swallows every cancellation,
    then stop the system, which gives the batch up (its loop ends under it). Whether that
    task ended cancelled, and the system's session; nothing of the system is left referenced
    here."""
    system = ToolSystem.start(code_runtime=None)
    hook_waits, released = threading.Event(), threading.Event()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        hook_waits.set()
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # swallowed, every time
                await asyncio.sleep(0.01)
        return await next()

    system.tools.register(fixture("t", lambda args, ctx: [block("done")]))
    system.tools.on_post_execute(post)

    async def harness() -> bool:
        turn = asyncio.create_task(
            system.execute_batch_async(ExecuteBatch(calls=[ToolCall("c1", "t", "{}")]))
        )
        await asyncio.to_thread(hook_waits.wait, WAIT)
        turn.cancel()
        await asyncio.to_thread(system.stop)
        await asyncio.wait([turn], timeout=WAIT)
        return turn.cancelled()

    try:
        return asyncio.run(harness()), system.session
    finally:
        released.set()
        system.stop()


def test_a_cancelled_batch_that_stop_gives_up_on_still_raises_the_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The batch's RuntimeError (the loop ended under it) replaced the caller's own
    # cancellation: asyncio.timeout raised it instead of TimeoutError, and a TaskGroup took it
    # for a failure of that task.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    monkeypatch.setattr(system_module, "ABANDONED_SETTLE_S", 0.1)
    cancelled, _session = cancel_a_batch_that_stop_gives_up_on()
    assert cancelled


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("collected_on", ["an event loop", "a plain thread"])
def test_a_stage_that_outlived_stop_is_collected_quietly(
    monkeypatch: pytest.MonkeyPatch, collected_on: str
) -> None:
    # The collector closes the pool's stage left on the closed loop. It took that close for
    # its call's failure and reported it: to the closed loop from a thread running an event
    # loop (an error from the collector), or drained right there from any other thread, which
    # recorded a late "Error: " result for a call stop() had left without one.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    monkeypatch.setattr(system_module, "ABANDONED_SETTLE_S", 0.1)
    _cancelled, session = cancel_a_batch_that_stop_gives_up_on()
    if collected_on == "an event loop":

        async def next_turn() -> None:
            gc.collect()

        asyncio.run(next_turn())
    else:
        gc.collect()
    assert [event.type for event in session.events] == ["tool/call"]


@pytest.mark.parametrize("entry", ["execute_async", "execute_batch"])
def test_a_post_execute_hook_of_an_aborted_call_may_wait_briefly_and_keeps_its_context(
    entry: str,
) -> None:
    system = ToolSystem.start(code_runtime=None)
    try:
        controller = AbortController()

        async def aborts(args: Any, ctx: Any) -> Any:
            controller.abort("the harness gave up")
            await asyncio.sleep(FOREVER)  # cancelled: its call is aborted

        async def post(exec: Any, result: Any, next: Any) -> Any:
            await asyncio.sleep(0.05)  # a short wait of its own, well within the wind-down
            await next()
            return Accept(additional_contexts=[{"content": [block("noted")]}])

        system.tools.register(fixture("t", aborts))
        system.tools.on_post_execute(post)
        if entry == "execute_async":
            one = ExecuteCall(call_id="c1", name="t", arguments={}, signal=controller.signal)
            result = asyncio.run(system.execute_async(one))
        else:
            turn = ExecuteBatch(calls=[ToolCall("c1", "t", "{}")], signal=controller.signal)
            result = system.execute_batch(turn).results[0]
        assert code_of(result) == "ABORTED"
        assert [c["content"][0]["text"] for c in result.additional_contexts] == ["noted"]
    finally:
        system.stop()


def test_a_body_that_answers_its_abort_with_abort_error_keeps_the_reason(
    system: ToolSystem,
) -> None:
    """A body that watches its signal and raises ``AbortError`` (as the shipped ``bash`` tool
    does) settles ``ABORTED`` as it said; the harness still learns why the call was aborted."""
    controller = AbortController()

    def watching(args: Any, ctx: Any) -> Any:
        controller.abort("user pressed stop")
        if ctx.signal.aborted:
            raise AbortError()
        return [block("not reached")]

    async def watching_async(args: Any, ctx: Any) -> Any:
        controller.abort("user pressed stop")
        await ctx.signal
        raise AbortError()

    system.tools.register(fixture("watching", watching))
    system.tools.register(fixture("watching_async", watching_async))
    for name in ("watching", "watching_async"):
        controller = AbortController()
        result = system.execute(
            ExecuteCall(call_id=name, name=name, arguments={}, signal=controller.signal)
        )
        assert isinstance(result, ToolExecutionFailure)
        assert text(result) == "Error: tool call aborted"  # the body's own error, unchanged
        assert code_of(result) == "ABORTED"
        assert result.abort_reason == "user pressed stop"
        assert result.settled_with is None


def test_a_body_raising_abort_error_unasked_has_no_abort_reason(system: ToolSystem) -> None:
    def gives_up(args: Any, ctx: Any) -> Any:
        raise AbortError()  # nothing aborted the call: there is no reason to report

    system.tools.register(fixture("gives_up", gives_up))
    result = system.execute(ExecuteCall(call_id="c1", name="gives_up", arguments={}))
    assert isinstance(result, ToolExecutionFailure)
    assert code_of(result) == "ABORTED"
    assert result.abort_reason is None


def test_the_bash_example_tool_stopped_mid_batch_reports_the_stop_reason(
    system: ToolSystem, tmp_path: Path
) -> None:
    system.tools.register(bash_tool(tmp_path))
    controller = AbortController()
    marker = tmp_path / "started"

    def stop_once_the_command_runs() -> None:
        deadline = time.monotonic() + WAIT
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        controller.abort("user pressed stop")

    stopper = threading.Thread(target=stop_once_the_command_runs)
    stopper.start()
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[ToolCall("b1", "bash", '{"command": "touch started; sleep 30"}')],
            signal=controller.signal,
        )
    )
    stopper.join()
    result = outcome.results[0]
    assert isinstance(result, ToolExecutionFailure)
    assert code_of(result) == "ABORTED"
    assert result.abort_reason == "user pressed stop"


# --- a wrapper's own asyncio scope around next() -----------------------------------------------


class DeadlineWrapper:
    """An execute wrapper that gives ``next()`` 50 ms under an ``asyncio.timeout`` of its own
    (or ``asyncio.wait_for``, which runs it in a task of its own on Python 3.11) and answers its
    own failure when that expires, noting its task's cancellation count."""

    def __init__(self, scope: str = "asyncio.timeout") -> None:
        self.cancelling: list[int] = []
        self.scope = scope

    async def __call__(self, exec: Any, next: Any) -> Any:
        if exec.name == "run_code":
            return await next()
        try:
            if self.scope == "asyncio.wait_for":
                return await asyncio.wait_for(next(), 0.05)
            async with asyncio.timeout(0.05):
                return await next()
        except TimeoutError:
            return ToolExecutionFailure(
                error=ToolFailure("the wrapper's deadline passed"),
                content=[block("Error: the wrapper's deadline passed")],
            )
        finally:
            self.cancelling.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]


def slow_bodies(system: ToolSystem) -> None:
    async def sleeps(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(FOREVER)

    async def watches(args: Any, ctx: Any) -> Any:
        await ctx.signal  # reads its signal, which no one aborts
        return [block("aborted")]

    def blocks(args: Any, ctx: Any) -> Any:
        time.sleep(0.3)
        return [block("late")]

    for name, body in (("sleeps", sleeps), ("watches", watches), ("blocks", blocks)):
        system.tools.register(fixture(name, body, is_concurrency_safe=lambda args: True))


@pytest.mark.parametrize("scope", ["asyncio.timeout", "asyncio.wait_for"])
@pytest.mark.parametrize(
    "entry", ["batch", "execute", "execute with timeout", "ref.ask", "execute_async"]
)
@pytest.mark.parametrize("body", ["sleeps", "watches", "blocks"])
def test_a_wrappers_own_timeout_around_next_is_its_timeout(
    body: str, entry: str, scope: str
) -> None:
    # The wrapper's asyncio.timeout cancels the task its chain runs in, where next() waits for
    # the body: the body is cancelled (a plain one waited for) and the wrapper gets its
    # TimeoutError. Taken for the blocking caller's Ctrl-C, the call ended ABORTED ("the
    # caller was interrupted", though nobody had), the wrapper's except never ran and its
    # task was left cancelling. Under execute_async, where the chain runs in the caller's own
    # task, it was taken for the caller's cancellation: next() answered ABORTED and the
    # wrapper's deadline never showed, though the same call under execute timed out.
    if entry == "execute" and body == "blocks":
        pytest.skip("a plain body runs inline in execute(): no timer fires while it blocks")
    system = ToolSystem.start(code_runtime=None)
    try:
        slow_bodies(system)
        wrapper = DeadlineWrapper(scope)
        system.tools.on_execute(wrapper)
        call = ExecuteCall(call_id="c1", name=body, arguments={})
        if entry == "execute_async":

            async def caller() -> Any:
                return await system.execute_async(call)

            result = asyncio.run(asyncio.wait_for(caller(), WAIT))
        elif entry == "batch":
            (result,) = system.execute_batch(
                ExecuteBatch(calls=[ToolCall("c1", body, "{}")]), timeout=WAIT
            ).results
        elif entry == "execute":
            result = system.execute(call)
        elif entry == "execute with timeout":
            result = system.execute(call, timeout=WAIT)
        else:
            result = system.ref.ask(call, timeout=WAIT)
        assert text(result) == "Error: the wrapper's deadline passed"
        assert wrapper.cancelling == [0]
    finally:
        system.stop()


def test_a_wrappers_own_timeout_around_next_in_a_code_mode_run_is_its_timeout() -> None:
    system = ToolSystem.start(ToolsConfig(mode="both"))
    try:
        slow_bodies(system)
        wrapper = DeadlineWrapper()
        system.tools.on_execute(wrapper)
        program = (
            "out = []\n"
            "for name in ['sleeps', 'watches', 'blocks']:\n"
            "    try:\n"
            "        await getattr(tools, name)({})\n"
            "    except Exception as exc:\n"
            "        out.append(str(exc))\n"
            "return out"
        )
        run = ExecuteCall(
            call_id="r1", name="run_code", arguments={"code": program, "description": "d"}
        )
        result = system.execute(run, timeout=WAIT)
        assert not result.is_error
        assert result.value["result"] == ["the wrapper's deadline passed"] * 3  # type: ignore[union-attr]
        assert wrapper.cancelling == [0, 0, 0]
    finally:
        system.stop()


@pytest.mark.parametrize("body", ["sleeps", "blocks"])
def test_a_wrappers_own_timeout_under_execute_async_never_cancels_the_caller(body: str) -> None:
    # Under execute_async the wrapper runs in the caller's own task, where its timeout's
    # cancellation reads as the caller's: the call ends ABORTED. But the timeout takes its
    # cancellation back, and the caller, which nobody cancelled, got a CancelledError all the
    # same: raised on through a harness's code, it ended a task that was never cancelled.
    system = ToolSystem.start(code_runtime=None)
    try:
        slow_bodies(system)
        system.tools.on_execute(DeadlineWrapper())

        async def harness() -> tuple[Any, int]:
            call = ExecuteCall(call_id="c1", name=body, arguments={})
            result = await system.execute_async(call)
            await asyncio.sleep(0)  # no cancellation is left pending for this task
            return result, asyncio.current_task().cancelling()  # type: ignore[union-attr]

        result, cancelling = asyncio.run(asyncio.wait_for(harness(), WAIT))
        assert result.is_error and cancelling == 0
        assert list(results_of(system)) == ["c1"]
    finally:
        system.stop()


@pytest.mark.parametrize("entry", ["execute", "execute_async"])
@pytest.mark.parametrize("answer", ["a fallback", "next() again", "a slow fallback"])
def test_a_wrapper_that_answers_its_own_timeout_gets_its_answer_under_execute_async(
    answer: str, entry: str
) -> None:
    # Under execute_async the wrapper's timeout cancels the caller's own task, which reads as
    # the caller's cancellation until the scope takes it back: the call was interrupted for
    # the caller, and stayed so once the wrapper had its TimeoutError. Its fallback success
    # became ABORTED ("the awaiting task was cancelled", though nobody had cancelled it), a
    # second next() answered ABORTED_BEFORE_DISPATCH, and a fallback taking longer than the
    # wind-down of an interrupted call's hooks was cancelled; under execute each was the
    # wrapper's answer.
    attempts: list[str] = []

    async def slow_once(args: Any, ctx: Any) -> Any:
        attempts.append(f"signal aborted: {ctx.signal.aborted}")
        if len(attempts) == 1:
            await asyncio.sleep(FOREVER)
        return [block("second attempt")]

    async def wrapper(exec: Any, next: Any) -> Any:
        try:
            async with asyncio.timeout(0.05):
                return await next()
        except TimeoutError:
            if answer == "next() again":
                return await next()
            if answer == "a slow fallback":
                await asyncio.sleep(pipeline_core.HOOK_WIND_DOWN_S * 1.5)
            return ToolExecutionSuccess([block("fallback")], [block("fallback")])

    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("slow", slow_once))
        system.tools.on_execute(wrapper)
        call = ExecuteCall(call_id="c1", name="slow", arguments={})
        if entry == "execute":
            result, cancelling = system.execute(call, timeout=WAIT), 0
        else:

            async def harness() -> tuple[Any, int]:
                result = await system.execute_async(call)
                await asyncio.sleep(0)  # no cancellation is left pending for this task
                return result, asyncio.current_task().cancelling()  # type: ignore[union-attr]

            result, cancelling = asyncio.run(asyncio.wait_for(harness(), WAIT))
        expected = "second attempt" if answer == "next() again" else "fallback"
        assert not result.is_error, result
        assert text(result) == expected
        assert cancelling == 0
        assert "error" not in results_of(system)["c1"]
        if answer == "next() again":
            assert attempts == ["signal aborted: False", "signal aborted: False"]
    finally:
        system.stop()


@pytest.mark.parametrize("cancels", [2, 3])
def test_more_cancels_during_a_runs_wind_down_still_settle_its_sub_calls_first(
    cancels: int,
) -> None:
    # The first cancellation lets the run (it watches its signal) wind down; the second
    # cancels its body, whose pool then gives a plain sub-call that ignores its signal up,
    # settling it ABORTED before the run's result. The first one's wind-down timer cancelled
    # the body once more meanwhile, which cut that wait short, and so did a third
    # cancellation: the run settled first, and the sub-call's tool/code-dispatch came after
    # its tool/result, once the plain body returned.
    release = threading.Event()
    watching, ignoring = threading.Event(), threading.Event()

    async def watches(args: Any, ctx: Any) -> Any:
        assert not ctx.signal.aborted  # reads its signal: trusted to watch it
        watching.set()
        await asyncio.sleep(FOREVER)

    def ignores(args: Any, ctx: Any) -> Any:
        ignoring.set()
        release.wait(WAIT)
        return [block("late")]

    system = ToolSystem.start(ToolsConfig(mode="both"))
    try:
        for name, body in (("watches", watches), ("ignores", ignores)):
            system.tools.register(fixture(name, body, is_concurrency_safe=lambda args: True))
        program = "await asyncio.gather(tools.watches({}), tools.ignores({}))"

        async def harness() -> tuple[Any, ...]:
            run = ExecuteCall(
                call_id="r1", name="run_code", arguments={"code": program, "description": "d"}
            )
            task = asyncio.create_task(system.execute_async(run))
            await asyncio.to_thread(lambda: watching.wait(WAIT) and ignoring.wait(WAIT))
            task.cancel("the user pressed stop")
            for _ in range(cancels - 1):
                await asyncio.sleep(0.05)
                task.cancel("the user pressed stop again")
            try:
                await task
            except asyncio.CancelledError as exc:
                return exc.args
            return ()

        assert asyncio.run(asyncio.wait_for(harness(), WAIT)) == ("the user pressed stop",)
        kinds = [(e.type, e.data.get("sub_call_id")) for e in system.session.events]
        assert kinds[-1] == ("tool/result", None)
        settled = {sub for kind, sub in kinds if kind == "tool/code-dispatch"}
        assert settled == {"r1:code:1", "r1:code:2"}
    finally:
        release.set()
        system.stop()
