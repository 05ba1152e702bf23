"""A body that goes on after its cancellation: the task awaiting ``execute_async`` waits for it
to settle, however often it is cancelled, and the call records its one ``tool/result`` then;
only ``stop()``, its grace over, gives such a body up (it runs on in the background, what it
returns dropped) so that its call still gets its one result. Also what an execute wrapper
under ``execute_async`` sees of the caller's cancellation."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, Logs, block, context, fixture, results_of, sources

from dsh_tools import Block, ExecuteBatch, ExecuteCall, ToolCall, ToolSystem, _system
from dsh_tools.pipeline._epoll import mark_given_up, new_pool_loop


@pytest.fixture(autouse=True)
def short_stop_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop()'s grace (``STOP_GRACE_S``, 5 s) cut to one second: most of these tests wait it
    out, and what stop() does once it is over does not depend on its length."""
    monkeypatch.setattr(_system, "STOP_GRACE_S", 1.0)


REPO = Path(__file__).resolve().parents[1]

GIVEN_UP = (
    "the tool body went on after its cancellation; its call settles without it "
    "and what it returns is dropped"
)


def error_codes(system: ToolSystem) -> dict[str, str]:
    """Each recorded call's result's error code, by call id."""
    return {k: v["error"]["code"] for k, v in results_of(system).items()}


class Stubborn:
    """A body that goes on until ``release`` is set, whatever happens to it: an ``async def``
    one that swallows every cancellation (``reads_signal``: it looks at its signal first, so
    it is trusted to watch it), or a plain one that ignores its aborted signal. Its steps go
    to ``log``."""

    def __init__(self, kind: str, log: list[str]) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.log = log
        self.kind = kind

    def body(self) -> Callable[[Any, Any], Any]:
        if self.kind == "plain":
            return self._plain
        return self._swallows

    async def _swallows(self, args: Any, ctx: Any) -> Any:
        if self.kind == "reads its signal":
            assert not ctx.signal.aborted
        self.started.set()
        while not self.release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if "body cancelled" not in self.log:
                    self.log.append("body cancelled")
        self.log.append("body ended")
        self.ended.set()
        return [block("late")]

    def _plain(self, args: Any, ctx: Any) -> Any:
        self.started.set()
        self.release.wait(WAIT)
        self.log.append("body ended")
        self.ended.set()
        return [block("late")]

    async def outlast(self, task: asyncio.Task[Any], times: int) -> None:
        """Once the body has started, cancel ``task`` (its caller) ``times`` times; note whether
        the caller still waits a moment later, then let the body end and await the caller."""
        await asyncio.to_thread(self.started.wait, WAIT)
        await press_stop(task, times)
        await asyncio.sleep(0.1)
        self.log.append("caller still waits" if not task.done() else "caller gave up")
        self.release.set()
        await cancel_and_await(task, 0, self.log)


async def press_stop(task: asyncio.Task[Any], times: int) -> None:
    """Cancel ``task`` ``times`` times, a moment apart (each lands on its own)."""
    for n in range(times):
        if n:
            await asyncio.sleep(0.05)
        task.cancel("the user pressed stop")


async def cancel_and_await(task: asyncio.Task[Any], times: int, log: list[str]) -> None:
    """Cancel ``task`` ``times`` times (``press_stop``), then await it, noting in ``log`` how
    it ended."""
    await press_stop(task, times)
    try:
        await task
        log.append("caller returned")
    except asyncio.CancelledError as exc:
        log.append(f"caller cancelled: {exc.args[0]}")


@pytest.mark.parametrize("times", [1, 2, 3])
@pytest.mark.parametrize("kind", ["swallows", "reads its signal", "plain"])
def test_a_body_that_goes_on_after_its_cancellation_holds_the_caller_until_it_ends(
    system: ToolSystem, logs: Logs, kind: str, times: int
) -> None:
    # A started body is never abandoned for its caller's cancellation: each cancellation is
    # passed on to the body's task, and the caller gets its CancelledError once the body has
    # settled, its call recorded ABORTED with the one result.
    log: list[str] = []
    stubborn = Stubborn(kind, log)
    system.tools.register(fixture("stubborn", stubborn.body()))
    call = ExecuteCall(call_id="c1", name="stubborn", arguments={})

    async def harness() -> None:
        task = asyncio.create_task(system.execute_async(call))
        await stubborn.outlast(task, times)
        log.append(f"recorded: {results_of(system)['c1']['error']['code']}")

    asyncio.run(asyncio.wait_for(harness(), WAIT))
    # A body that reads its signal is trusted to watch it: cancelled once the caller is
    # cancelled again (or after BODY_WIND_DOWN_S, which the release comes before).
    cancelled = kind == "swallows" or (kind == "reads its signal" and times > 1)
    assert log == [
        *(["body cancelled"] if cancelled else []),
        "caller still waits",
        "body ended",
        "caller cancelled: the user pressed stop",
        "recorded: ABORTED",
    ]
    assert list(results_of(system)) == ["c1"]
    assert GIVEN_UP not in logs.warnings


def test_a_body_that_ends_in_its_cleanup_is_still_awaited(system: ToolSystem) -> None:
    # Only a body that goes on is given up: one that cleans up and ends is waited for, and
    # the caller's CancelledError comes after it.
    log: list[str] = []

    async def cleans_up(args: Any, ctx: Any) -> Any:
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            log.append("cleanup done")
            raise

    system.tools.register(fixture("cleans_up", cleans_up))

    async def harness() -> None:
        call = ExecuteCall(call_id="c1", name="cleans_up", arguments={})
        task = asyncio.create_task(system.execute_async(call))
        await asyncio.sleep(0.05)
        await cancel_and_await(task, 1, log)

    asyncio.run(asyncio.wait_for(harness(), WAIT))
    assert log == ["cleanup done", "caller cancelled: the user pressed stop"]
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"


def _system_with_a_swallowing_body() -> tuple[ToolSystem, Stubborn]:
    """A system of the test's own (it stops it) with a ``stubborn`` tool whose ``async def``
    body swallows every cancellation."""
    stubborn = Stubborn("swallows", [])
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("stubborn", stubborn.body()))
    return system, stubborn


def _stop_while_it_runs(system: ToolSystem, stubborn: Stubborn, caller: Callable[[], Any]) -> None:
    """Run ``caller`` on a thread of its own, stop ``system`` once the stubborn body has
    started, and wait for that thread."""
    waiting = threading.Thread(target=caller, daemon=True)
    waiting.start()
    try:
        assert stubborn.started.wait(WAIT)
    finally:
        system.stop()
        waiting.join(WAIT)


def test_stop_settles_a_call_whose_body_swallows_its_cancellation(logs: Logs) -> None:
    # stop() cancels such a body outright once its grace is over; it swallowed that too, and
    # the call never settled: its caller waited with no result.
    system, stubborn = _system_with_a_swallowing_body()
    outcome: list[Any] = []

    async def caller() -> None:
        call = ExecuteCall(call_id="c1", name="stubborn", arguments={})
        result = await system.execute_async(call)
        outcome.append(result.to_dict()["error"]["info"]["code"])
        stubborn.release.set()  # else asyncio.run, ending, would wait for the body for ever
        await asyncio.to_thread(stubborn.ended.wait, WAIT)

    _stop_while_it_runs(system, stubborn, lambda: asyncio.run(caller()))
    assert outcome == ["ABORTED"]
    assert results_of(system)["c1"]["error"]["code"] == "ABORTED"
    assert GIVEN_UP in logs.warnings


def test_a_given_up_body_collected_as_a_cancelled_task_runs_is_closed_quietly(logs: Logs) -> None:
    # The task of a body stop() gave up is collected with its system, its loop (the system
    # loop) closed. Closing its coroutine, the collector throws GeneratorExit into it: it took
    # a cancellation pending on whichever task of another loop ran the collection for its own
    # and waited for it, which a closing coroutine may not ("coroutine ignored GeneratorExit",
    # reported as unraisable).
    system, stubborn = _system_with_a_swallowing_body()
    call = ExecuteCall(call_id="c1", name="stubborn", arguments={})
    _stop_while_it_runs(system, stubborn, partial(system.execute, call, timeout=WAIT))
    assert GIVEN_UP in logs.warnings
    del system
    unraisable: list[Any] = []

    async def collects() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        gc.collect()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            task.uncancel()

    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        asyncio.run(collects())
    finally:
        sys.unraisablehook = previous
        stubborn.release.set()
    assert [str(u.exc_value) for u in unraisable] == []


@pytest.mark.parametrize("wrapped", [False, True], ids=["no wrapper", "a wrapper"])
def test_stop_settles_a_batch_call_whose_body_swallows_its_cancellation(
    logs: Logs, wrapped: bool
) -> None:
    # A batch's call with no execute wrapper runs its async body as the call's own task in
    # the batch: one that swallowed stop()'s cancellation left its call without a result, and
    # the batch's waiter got a RuntimeError as the system loop ended.
    system, stubborn = _system_with_a_swallowing_body()
    system.tools.register(fixture("quick"))
    if wrapped:

        async def passes(exec: Any, next: Any) -> Any:
            return await next()

        system.tools.on_execute(passes)
    outcome: list[Any] = []

    def waits() -> None:
        batch = ExecuteBatch(
            calls=[ToolCall("c1", "stubborn", "{}"), ToolCall("c2", "quick", "{}")]
        )
        outcome.append(system.execute_batch(batch, timeout=WAIT))

    try:
        _stop_while_it_runs(system, stubborn, waits)
    finally:
        stubborn.release.set()
    (batch,) = outcome
    assert [r.to_dict()["error"]["info"]["code"] for r in batch.results] == [
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
    ]
    codes = error_codes(system)
    assert codes == {"c1": "ABORTED", "c2": "ABORTED_BEFORE_DISPATCH"}
    assert GIVEN_UP in logs.warnings


def test_a_swallowing_body_of_a_call_made_in_a_cancelled_batch_settles_both(
    system: ToolSystem,
) -> None:
    # A batch's body that awaits execute_async: the batch's cancellation cancels that body,
    # whose task awaits the inner call; its body swallows every cancellation, and the batch's
    # awaiter waits for it, then both calls settle with their results.
    log: list[str] = []
    stubborn = Stubborn("swallows", log)
    system.tools.register(fixture("stubborn", stubborn.body()))

    async def delegates(args: Any, ctx: Any) -> Any:
        inner = ExecuteCall(call_id="inner", name="stubborn", arguments={})
        result = await system.execute_async(inner)
        return list(result.content)

    system.tools.register(fixture("delegates", delegates))

    async def harness() -> None:
        batch = ExecuteBatch(calls=[ToolCall("outer", "delegates", "{}")])
        task = asyncio.create_task(system.execute_batch_async(batch))
        await stubborn.outlast(task, 3)

    try:
        asyncio.run(asyncio.wait_for(harness(), WAIT))
        assert log == [
            "body cancelled",
            "caller still waits",
            "body ended",
            "caller cancelled: the user pressed stop",
        ]
        codes = error_codes(system)
        assert codes == {"inner": "ABORTED", "outer": "ABORTED"}
    finally:
        stubborn.release.set()


# --- a hook that goes on after stop()'s cancellation ------------------------------------------

HOOKS = {
    "pre-execute": "the pre-execute hook",
    "execute wrapper": "the execute wrapper",
    "post-execute": "the post-execute hook",
}


def hook_given_up(hook: str) -> str:
    """The warning a call whose ``hook`` went on after stop() cancelled it settles with."""
    return GIVEN_UP.replace("the tool body", HOOKS[hook])


def _system_with_a_swallowing_hook(
    hook: str, body: Callable[[Any, Any], Any] | None = None
) -> tuple[ToolSystem, Stubborn]:
    """A system of the test's own (it stops it) with a ``quick`` tool (``body`` its body, if
    given) and a ``hook`` that swallows every cancellation until released, then passes
    through (``next()``)."""
    stubborn = Stubborn("swallows", [])
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("quick", body))
    swallows = stubborn.body()

    async def goes_on(*args: Any) -> Any:
        await swallows(None, None)
        return await args[-1]()  # what a pass-through hook returns, dropped by then

    {
        "pre-execute": system.tools.on_pre_execute,
        "execute wrapper": system.tools.on_execute,
        "post-execute": system.tools.on_post_execute,
    }[hook](goes_on)
    return system, stubborn


def _noting(outcome: list[Any], wait: Callable[[], Any]) -> Callable[[], None]:
    """``wait`` as a caller for ``_stop_while_it_runs``: what it returns, or what it raises,
    appended to ``outcome``."""

    def waiting() -> None:
        try:
            outcome.append(wait())
        except BaseException as exc:  # noted, for the test to show
            outcome.append(exc)

    return waiting


def _caller(system: ToolSystem, stubborn: Stubborn, caller: str, outcome: list[Any]) -> Any:
    """What waits for call ``c1`` (to ``quick``) as ``caller`` would, noting its result's error
    code (or what it raised) in ``outcome``."""
    call = ExecuteCall(call_id="c1", name="quick", arguments={})

    async def awaits() -> Any:
        result = await system.execute_async(call)
        stubborn.release.set()  # else asyncio.run, ending, would wait for the hook for ever
        # The given-up hook runs on in a task of the caller's loop, to its end.
        if not await asyncio.to_thread(stubborn.ended.wait, WAIT):
            raise AssertionError("the given-up hook never ran on")
        return result

    waits: dict[str, Callable[[], Any]] = {
        "execute": lambda: system.execute(call),
        "execute(timeout=)": lambda: system.execute(call, timeout=WAIT),
        "execute_async": lambda: asyncio.run(awaits()),
        "ref.ask": lambda: system.ref.ask(call, timeout=WAIT),
        "execute_batch": lambda: system.execute_batch(
            ExecuteBatch(calls=[ToolCall("c1", "quick", "{}")]), timeout=WAIT
        ).results[0],
    }

    def code() -> Any:
        error = waits[caller]().to_dict()["error"]
        # A harness error's code; else (a hook's Block) its message.
        return error["info"]["code"] if "info" in error else error["message"]

    return _noting(outcome, code)


@pytest.mark.parametrize(
    "caller", ["execute", "execute(timeout=)", "execute_async", "execute_batch"]
)
@pytest.mark.parametrize("hook", list(HOOKS))
def test_stop_settles_a_call_whose_hook_swallows_its_cancellation(
    logs: Logs, hook: str, caller: str
) -> None:
    # A hook awaited in the call's own task: stop() cancelled it, and once more past its grace;
    # one that swallowed both held its call for good. A blocking execute waited for ever, the
    # timed one and a batch's waiter got a RuntimeError as the system loop ended, with no
    # result in the log. It is given up as a swallowing body is: its call settles with its
    # one result, what the hook answers later is dropped.
    system, stubborn = _system_with_a_swallowing_hook(hook)
    outcome: list[Any] = []
    try:
        _stop_while_it_runs(system, stubborn, _caller(system, stubborn, caller, outcome))
    finally:
        stubborn.release.set()
    # Cancelled before its body ran (a wrapper before next()), or after it returned.
    code = "ABORTED" if hook == "post-execute" else "ABORTED_BEFORE_DISPATCH"
    assert outcome == [code]
    assert error_codes(system) == {"c1": code}
    assert hook_given_up(hook) in logs.warnings
    assert GIVEN_UP not in logs.warnings


# What else a call whose async body swallows stop()'s cancellation has (stop() gives that body
# up, past its grace, and the call goes on without it): a post-execute hook or an execute
# wrapper (after its next()) that swallows every cancellation too, one that swallows it once
# and then answers, or a pre-execute hook that passes.
BODY_THEN = ["post-execute", "execute wrapper", "post-execute once", "pre-execute passes"]


def _system_with_a_swallowing_body_then(then: str) -> tuple[ToolSystem, Stubborn, Stubborn]:
    """A system of the test's own (it stops it) with a ``quick`` tool whose ``async def``
    body swallows every cancellation, and the hook ``then`` names (``BODY_THEN``); what
    swallows goes on until the body's ``release`` is set. Returns the system, the body's
    ``Stubborn``, and the one of what runs last (the swallowing hook's, else the body's)."""
    body = Stubborn("swallows", [])
    hook = Stubborn("swallows", [])
    hook.release = body.release
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("quick", body.body()))
    swallows = hook.body()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await swallows(None, None)
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        result = await next()
        await swallows(None, None)
        return result

    async def post_once(exec: Any, result: Any, next: Any) -> Any:
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            return Block([block("post-execute answered its cancellation")])
        return await next()

    async def passes(exec: Any, next: Any) -> Any:
        return await next()

    if then == "post-execute":
        system.tools.on_post_execute(post)
    elif then == "execute wrapper":
        system.tools.on_execute(wrapper)
    elif then == "post-execute once":
        system.tools.on_post_execute(post_once)
    else:
        system.tools.on_pre_execute(passes)
    return system, body, hook if then in HOOKS else body


@pytest.mark.parametrize(
    "caller", ["execute", "execute(timeout=)", "execute_async", "ref.ask", "execute_batch"]
)
@pytest.mark.parametrize("then", BODY_THEN)
def test_stop_settles_a_call_whose_body_and_then_hook_swallow_its_cancellation(
    logs: Logs, then: str, caller: str
) -> None:
    # stop() gave the body up, past its grace; its call went on to its post-execute hook, or
    # to its wrapper's code after next(), which swallowed its cancellation too. That hook began
    # waiting after stop()'s one pass over the hooks still waiting, so nothing gave it up: the
    # blocking callers waited for it, those on the system loop got a RuntimeError as it ended,
    # with no result in the log. It is given up as one that waited at that pass was; one that
    # answers its cancellation still has its answer stand, as before.
    system, body, last = _system_with_a_swallowing_body_then(then)
    outcome: list[Any] = []
    try:
        _stop_while_it_runs(system, body, _caller(system, last, caller, outcome))
    finally:
        body.release.set()
    if then == "post-execute once":
        answer = "post-execute answered its cancellation"
        assert outcome == [answer]
        assert [v["content"][0]["text"] for v in results_of(system).values()] == [answer]
    else:
        assert outcome == ["ABORTED"]
        assert error_codes(system) == {"c1": "ABORTED"}
    assert GIVEN_UP in logs.warnings
    given_up = [hook for hook in HOOKS if hook_given_up(hook) in logs.warnings]
    assert given_up == ([then] if then in HOOKS else [])


def test_stop_settles_a_parallel_batch_whose_bodies_and_post_execute_hooks_swallow(
    logs: Logs,
) -> None:
    # A batch's calls commit in order, so each call's post-execute hook began only once the
    # call before it was settled: stop() gave up the first one's body, then that hook, then
    # the next call's hook, one after the other, BODY_GIVE_UP_S apart. stop() waited for the
    # give-up it knew of when its first wait ended, and no longer: the third call's hook, and
    # the batch with it, was cut short as the loop ended (a RuntimeError for the caller, no
    # result for that call). Every call settles, each with its one result.
    body = Stubborn("swallows", [])
    hook = Stubborn("swallows", [])
    hook.release = body.release
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("quick", body.body(), is_concurrency_safe=lambda args: True))
    swallows = hook.body()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        await swallows(None, None)
        return await next()

    system.tools.on_post_execute(post)
    calls = [ToolCall(f"c{n}", "quick", "{}") for n in range(3)]
    outcome: list[Any] = []

    def codes() -> list[str]:
        batch = system.execute_batch(ExecuteBatch(calls=calls, max_parallel=3), WAIT)
        return [r.to_dict()["error"]["info"]["code"] for r in batch.results]

    try:
        _stop_while_it_runs(system, body, _noting(outcome, codes))
    finally:
        body.release.set()
    assert outcome == [["ABORTED"] * 3]
    assert error_codes(system) == {"c0": "ABORTED", "c1": "ABORTED", "c2": "ABORTED"}
    assert hook_given_up("post-execute") in logs.warnings


@pytest.mark.parametrize("hook", ["pre-execute", "execute wrapper"])
def test_a_call_given_up_under_execute_async_leaves_its_callers_task_alone(
    logs: Logs, hook: str
) -> None:
    # Given up before its body, the call runs on in the background: its post-execute hook ran
    # there once released, and, the call being hurried, its wind-down cancelled the task the
    # call had been awaited in, the caller's own, by then at work on something else (its next
    # sleep, another system's call) that nobody had cancelled.
    system, stubborn = _system_with_a_swallowing_hook(hook)
    post_ran = threading.Event()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        post_ran.set()
        await asyncio.sleep(0.05)
        return await next()

    system.tools.on_post_execute(post)
    other = ToolSystem.start(code_runtime=None)
    other.tools.register(fixture("quick"))
    log: list[Any] = []

    async def caller() -> None:
        call = ExecuteCall(call_id="c1", name="quick", arguments={})
        log.append((await system.execute_async(call)).to_dict()["error"]["info"]["code"])
        stubborn.release.set()
        assert await asyncio.to_thread(post_ran.wait, WAIT)
        await asyncio.sleep(0.2)  # the caller's own work, as the given-up call winds down
        log.append("slept")
        later = await other.execute_async(ExecuteCall(call_id="b1", name="quick", arguments={}))
        log.append(later.to_dict().get("error"))
        await asyncio.to_thread(stubborn.ended.wait, WAIT)

    try:
        _stop_while_it_runs(system, stubborn, lambda: asyncio.run(caller()))
    finally:
        stubborn.release.set()
        other.stop()
    assert log == ["ABORTED_BEFORE_DISPATCH", "slept", None]
    assert {k: v.get("error") for k, v in results_of(other).items()} == {"b1": None}


def test_the_callers_own_cancellation_is_raised_when_stop_gives_up_the_hook(logs: Logs) -> None:
    # The caller cancelled its task while a wrapper swallowed every cancellation, then stop()
    # gave the wrapper up: the caller got a plain result and its task went on, its
    # cancellation lost. It gets its CancelledError, as it does once a body is given up.
    system, stubborn = _system_with_a_swallowing_hook("execute wrapper")
    log: list[Any] = []

    async def main() -> None:
        async def caller() -> Any:
            return await system.execute_async(ExecuteCall(call_id="c1", name="quick", arguments={}))

        task = asyncio.create_task(caller())
        assert await asyncio.to_thread(stubborn.started.wait, WAIT)
        task.cancel("the user pressed stop")
        await asyncio.sleep(0.05)
        log.append(task.done())
        stopping = threading.Thread(target=system.stop, daemon=True)
        stopping.start()
        try:
            await task
        except asyncio.CancelledError:
            log.append("cancelled")
        else:
            log.append("returned")
        stubborn.release.set()
        await asyncio.to_thread(stopping.join, WAIT)
        await asyncio.to_thread(stubborn.ended.wait, WAIT)

    try:
        asyncio.run(main())
    finally:
        stubborn.release.set()
        system.stop()
    assert log == [False, "cancelled"]
    assert error_codes(system) == {"c1": "ABORTED_BEFORE_DISPATCH"}


@pytest.mark.parametrize("caller", ["execute(timeout=)", "ref.ask", "execute_async"])
def test_stop_settles_nested_calls_whose_inner_hook_swallows_its_cancellation(
    logs: Logs, caller: str
) -> None:
    # An execute wrapper that awaits execute_async of another call, whose own wrapper swallows
    # every cancellation: both calls run in one task. Each was left to the other, so neither
    # was given up: on the system loop the caller got a RuntimeError as it ended, and neither
    # call had a result. Both are given up together, each with its one result.
    stubborn = Stubborn("swallows", [])
    swallows = stubborn.body()
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("quick"))
    system.tools.register(fixture("outer"))
    seen: list[Any] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        if exec.name == "outer":
            inner = ExecuteCall(call_id="inner", name="quick", arguments={})
            seen.append((await system.execute_async(inner)).to_dict()["error"]["info"]["code"])
        else:
            await swallows(None, None)
        return await next()

    system.tools.on_execute(wrapper)
    call = ExecuteCall(call_id="outer", name="outer", arguments={})
    outcome: list[Any] = []

    async def awaits() -> Any:
        result = await system.execute_async(call)
        stubborn.release.set()  # else asyncio.run, ending, would wait for the hook for ever
        return result

    waits: dict[str, Callable[[], Any]] = {
        "execute(timeout=)": lambda: system.execute(call, timeout=WAIT),
        "ref.ask": lambda: system.ref.ask(call, timeout=WAIT),
        "execute_async": lambda: asyncio.run(awaits()),
    }

    try:
        _stop_while_it_runs(
            system,
            stubborn,
            _noting(outcome, lambda: waits[caller]().to_dict()["error"]["info"]["code"]),
        )
    finally:
        stubborn.release.set()
    assert outcome == ["ABORTED_BEFORE_DISPATCH"]
    codes = error_codes(system)
    assert codes == {"outer": "ABORTED_BEFORE_DISPATCH", "inner": "ABORTED_BEFORE_DISPATCH"}
    assert hook_given_up("execute wrapper") in logs.warnings


# What the process below runs: for each kind its first argument names (a swallowing
# pre-execute hook, execute wrapper, post-execute hook or async body; or a swallowing async
# body, and then a post-execute hook or a wrapper's code after next() that swallows too), a
# call to a tool of that name by each kind of caller, all at once; then stop(), which gives
# them all up. It prints each caller's outcome.
_EVERY_KIND_GIVEN_UP = """
import asyncio, json, sys, threading, time
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolSystem, tool

KINDS = tuple(sys.argv[1].split(","))
CALLERS = ("execute", "timed", "async", "ask", "batch")
started = threading.Semaphore(0)
release = threading.Event()

async def swallow():
    started.release()
    while not release.is_set():
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            pass

async def released():
    while not release.is_set():
        await asyncio.sleep(0.01)

async def swallow_in_tasks():
    # Waiting in tasks of its own: the one asyncio.wait_for makes (Python 3.11), a group's.
    started.release()
    while not release.is_set():
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(asyncio.wait_for(released(), 3600))
        except asyncio.CancelledError:
            pass

system = ToolSystem.start(code_runtime=None)
def tool_named(kind):
    async def body() -> str:
        "A tool."
        if kind in ("body", "body_post", "body_wrap"):
            await swallow()
        return "ok"
    body.__name__ = body.__qualname__ = kind
    return tool(body)

for kind in KINDS:
    system.tools.register(tool_named(kind))

async def pre(exec, next):
    if exec.name == "pre":
        await swallow()
    return await next()

async def wrap(exec, next):
    if exec.name == "wrap":
        await swallow()
    result = await next()
    if exec.name == "body_wrap":
        await swallow()
    return result

async def post(exec, result, next):
    if exec.name in ("post", "body_post"):
        await swallow()
    if exec.name == "post_tasks":
        await swallow_in_tasks()
    return await next()

system.tools.on_pre_execute(pre)
system.tools.on_execute(wrap)
system.tools.on_post_execute(post)
outcome = {}

def waits(kind, caller):
    call_id = kind + "-" + caller
    call = ExecuteCall(call_id=call_id, name=kind, arguments={})
    async def awaits():
        result = await system.execute_async(call)
        # Noted now: a given-up body runs on, and asyncio.run, ending, waits for it.
        outcome[call_id] = result.to_dict()["error"]["info"]["code"]
        return result
    try:
        if caller == "execute":
            result = system.execute(call)
        elif caller == "timed":
            result = system.execute(call, timeout=30)
        elif caller == "async":
            asyncio.run(awaits())
            return
        elif caller == "ask":
            result = system.ref.ask(call, timeout=30)
        else:
            batch = ExecuteBatch(calls=[ToolCall(call_id, kind, "{}")])
            result = system.execute_batch(batch, timeout=30).results[0]
        outcome[call_id] = result.to_dict()["error"]["info"]["code"]
    except BaseException as exc:
        outcome[call_id] = repr(exc)

threads = [
    threading.Thread(target=waits, args=(kind, caller), daemon=True)
    for kind in KINDS
    for caller in CALLERS
]
for thread in threads:
    thread.start()
for _ in threads:
    assert started.acquire(timeout=30)
try:
    system.stop()
    deadline = time.monotonic() + 30
    while len(outcome) < len(threads) and time.monotonic() < deadline:
        time.sleep(0.01)
finally:
    release.set()
    for thread in threads:
        thread.join(30)
recorded = {}
for event in system.session.events:
    if event.type == "tool/result":
        recorded.setdefault(event.data["call_id"], []).append(event.data["error"]["code"])
print(json.dumps({"outcome": outcome, "recorded": recorded}))
"""


@pytest.mark.parametrize(
    "kinds",
    ["pre,wrap,post,body", "body_post,body_wrap", "post_tasks"],
    ids=["each alone", "a body, then a hook", "a hook waiting in tasks of its own"],
)
def test_no_task_is_reported_destroyed_pending_once_stop_gave_up_hooks_and_bodies(
    kinds: str,
) -> None:
    # What stop() gave up ran on in tasks of loops that then stopped or closed (the system
    # loop, a blocking caller's own): the interpreter, exiting, reported each task destroyed
    # while pending, a swallowing body's too. Nothing waits for them: they are not reported.
    # A call whose body and then its post-execute hook (or its wrapper, after next())
    # swallowed it had that hook reported so, never given up, and its caller on the system
    # loop a RuntimeError as that loop ended. A given-up hook's own tasks (a task group's,
    # the one wait_for makes) were reported as the loop they were left on ended.
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_KIND_GIVEN_UP, kinds],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    for noise in ("Task was destroyed", "never awaited", "Exception ignored", "Traceback"):
        assert noise not in done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    codes = {"pre": "ABORTED_BEFORE_DISPATCH", "wrap": "ABORTED_BEFORE_DISPATCH"}
    expected = {
        f"{kind}-{caller}": codes.get(kind, "ABORTED")
        for kind in kinds.split(",")
        for caller in ("execute", "timed", "async", "ask", "batch")
    }
    assert report["outcome"] == expected
    assert report["recorded"] == {call_id: [code] for call_id, code in expected.items()}


def test_a_package_loop_reports_all_but_a_given_up_task_destroyed_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The handler that keeps given-up tasks out of asyncio's reports (``mark_given_up``)
    # drops that one report only: a failing callback, a task nobody gave up collected while
    # pending, are reported by the loop's default handler as on any loop.
    loop = new_pool_loop()

    async def forever() -> None:
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        given_up = loop.create_task(forever(), name="given up")
        mark_given_up(given_up)
        loop.create_task(forever(), name="left")
        loop.call_soon(lambda: 1 / 0)
        loop.run_until_complete(asyncio.sleep(0.01))
        loop.close()
        del given_up
        gc.collect()
    reports = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Exception in callback") for m in reports)
    destroyed = [m for m in reports if m.startswith("Task was destroyed but it is pending!")]
    assert len(destroyed) == 1
    assert "name='left'" in destroyed[0]


# --- an execute wrapper under execute_async ----------------------------------------------------


@pytest.mark.parametrize("body", ["async", "plain"])
def test_the_callers_cancellation_reaches_a_wrapper_waiting_for_next(
    system: ToolSystem, body: str
) -> None:
    # Under execute_async a wrapper runs in the caller's own task: once the body has settled,
    # next() raises the caller's CancelledError into it, as asyncio raises a task's
    # cancellation where it waits (a timeout of the wrapper's own, which cancels the same task,
    # then takes its own back). Passed on, it ends the call ABORTED as before, keeping what
    # the body deferred, and post-execute still runs.
    log: list[str] = []
    started, release = threading.Event(), threading.Event()

    async def sleeps(args: Any, ctx: Any) -> Any:
        ctx.defer_context(context("deferred"))
        started.set()
        await asyncio.sleep(WAIT)

    def blocks(args: Any, ctx: Any) -> Any:
        ctx.defer_context(context("deferred"))
        started.set()
        release.wait(WAIT)
        return [block("late")]

    async def wrapper(exec: Any, next: Any) -> Any:
        try:
            return await next()
        except asyncio.CancelledError as exc:
            log.append(f"wrapper got CancelledError: {exc.args[0]}")
            raise

    async def post(exec: Any, result: Any, next: Any) -> Any:
        log.append(f"post-execute saw {result.to_dict()['error']['info']['code']}")
        return await next()

    system.tools.register(fixture("slow", sleeps if body == "async" else blocks))
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)
    observed: list[Any] = []
    system.tools.on_result(lambda exec, result: observed.append(result))

    async def harness() -> None:
        task = asyncio.create_task(
            system.execute_async(ExecuteCall(call_id="c1", name="slow", arguments={}))
        )
        await asyncio.to_thread(started.wait, WAIT)
        task.cancel("the user pressed stop")
        await asyncio.sleep(0.05)
        release.set()
        await cancel_and_await(task, 0, log)

    asyncio.run(asyncio.wait_for(harness(), WAIT))
    assert log == [
        "wrapper got CancelledError: the user pressed stop",
        "post-execute saw ABORTED",
        "caller cancelled: the user pressed stop",
    ]
    (result,) = observed
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED"
    assert result.abort_reason == "the awaiting task was cancelled"
    assert sources(result) == ["deferred"]
