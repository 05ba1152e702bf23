"""Faults a harness must be able to diagnose, and input that must never crash a batch: user
exceptions are logged once with their traceback and keep their type; a ``SystemExit`` from user
code never stops the system loop; any argument text gets a result."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from typing import Any

import pytest
from conftest import WAIT, Logs, block, call, echo, fixture, text
from structlog.testing import capture_logs

from dsh_tools import (
    MAX_ARGUMENTS_CHARS,
    ExecuteBatch,
    ToolCall,
    ToolExecutionFailure,
    ToolSystem,
    _system_loop,
)


def code_of(result: Any) -> str | None:
    info = result.to_dict().get("error", {}).get("info")
    return info["code"] if info else None


def batch(*calls: tuple[str, str, str], agent: str | None = None) -> ExecuteBatch:
    return ExecuteBatch(calls=[ToolCall(*c) for c in calls], agent=agent)


# --- failures are diagnosable ----------------------------------------------------------------


def test_a_key_error_body_is_logged_once_with_its_traceback_and_keeps_its_type(
    system: ToolSystem,
) -> None:
    def lookup(args: Any, ctx: Any) -> Any:
        return {}["secret_key"]

    system.tools.register(fixture("lookup", lookup))
    with capture_logs() as logs:
        result = system.execute(call("lookup", call_id="k1"))
    assert result.to_dict()["error"] == {"message": "'secret_key'"}  # the fixed shape
    assert isinstance(result, ToolExecutionFailure)
    assert result.exception_type == "KeyError"
    assert text(result) == "Error: 'secret_key'"
    (entry,) = [e for e in logs if e.get("call_id") == "k1"]
    assert entry["log_level"] == "warning"
    assert entry["tool"] == "lookup" and entry["stage"] == "body"
    assert entry["exception_type"] == "KeyError"
    assert isinstance(entry["exc_info"], KeyError)
    assert entry["exc_info"].__traceback__ is not None


def test_a_value_error_body_keeps_the_plain_error_shape(system: ToolSystem) -> None:
    def refuse(args: Any, ctx: Any) -> Any:
        raise ValueError("path escapes the workspace")

    system.tools.register(fixture("refuse", refuse))
    result = system.execute(call("refuse"))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "Error: path escapes the workspace"}],
        "is_error": True,
        "error": {"message": "path escapes the workspace"},
    }
    assert result.exception_type == "ValueError"  # type: ignore[union-attr]


@pytest.mark.parametrize("stage", ["pre-execute", "guard", "execute-wrapper", "post-execute"])
def test_hook_guard_and_wrapper_bugs_are_logged_with_their_stage(
    system: ToolSystem, stage: str
) -> None:
    system.tools.register(echo())

    def bug() -> Any:
        raise AttributeError("'NoneType' object has no attribute 'policy'")

    async def pre(exec: Any, next: Any) -> Any:
        bug()

    async def wrapper(exec: Any, next: Any) -> Any:
        bug()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        bug()

    install = {
        "pre-execute": lambda: system.tools.on_pre_execute(pre),
        "guard": lambda: system.tools.guard(lambda exec: bug()),
        "execute-wrapper": lambda: system.tools.on_execute(wrapper),
        "post-execute": lambda: system.tools.on_post_execute(post),
    }
    install[stage]()
    with capture_logs() as logs:
        result = system.execute(call())
    assert result.exception_type == "AttributeError"  # type: ignore[union-attr]
    (entry,) = [e for e in logs if e.get("call_id") == "c1"]
    assert entry["stage"] == stage
    assert isinstance(entry["exc_info"], AttributeError)


def test_a_failing_observer_and_finalizer_are_logged_with_their_traceback(
    system: ToolSystem,
) -> None:
    def finalize(exec: Any, result: Any) -> Any:
        raise RuntimeError("finalizer bug")

    system.tools.register(echo(finalize_content=finalize))
    system.tools.on_result(lambda exec, result: 1 / 0)
    with capture_logs() as logs:
        result = system.execute(call())
    assert result.exception_type == "RuntimeError"  # type: ignore[union-attr]
    stages = {e["stage"]: e for e in logs if e.get("call_id") == "c1"}
    assert set(stages) == {"finalizer", "observer"}
    assert isinstance(stages["observer"]["exc_info"], ZeroDivisionError)


# --- the system loop never dies of user code ---------------------------------------------------


def test_sys_exit_in_an_observer_during_a_batch_leaves_the_system_working() -> None:
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(fixture("a"))
    system.tools.on_result(lambda exec, result: sys.exit(3))
    with capture_logs() as logs:
        first = system.execute_batch(batch(("c1", "a", "{}"), ("c2", "a", "{}")), timeout=WAIT)
        second = system.execute_batch(batch(("c3", "a", "{}")), timeout=WAIT)
    assert [r.is_error for r in (*first.results, *second.results)] == [False] * 3
    assert [e["exception_type"] for e in logs if e.get("stage") == "observer"] == ["SystemExit"] * 3
    assert system.running
    system.stop()
    assert not system.running


def test_a_guard_that_blocks_the_system_loop_is_named_in_a_warning(
    system: ToolSystem, logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_system_loop, "STALL_WARNING_SECONDS", 0.2)
    release = threading.Event()

    def waits_for_a_lock(exec: Any) -> None:
        release.wait(WAIT)  # what a guard must not do: it holds the loop every batch runs on

    system.tools.register(fixture("a"))
    system.tools.guard(waits_for_a_lock)
    outcome: list[Any] = []
    caller = threading.Thread(
        target=lambda: outcome.append(system.execute_batch(batch(("c1", "a", "{}"))))
    )
    caller.start()
    try:
        (warning,) = logs.wait_for_warnings(1)
    finally:
        release.set()
        caller.join(WAIT)
    assert warning.startswith("the system loop is blocked")
    (entry,) = [e for e in logs.entries if e["event"] == warning]
    assert entry["running"].startswith("test_a_guard_that_blocks_the_system_loop")
    assert "waits_for_a_lock" in entry["running"] and __file__ in entry["running"]
    assert not outcome[0].results[0].is_error  # the call then ran as ever
    assert logs.wait_for_event("the system loop turns again")["blocked_for_s"] >= 0.2


def test_the_stall_watch_ends_with_the_loop_when_the_end_comes_as_it_looks() -> None:
    # The loop ends between the watch's look at it and its clearing of the probe's event:
    # the watch then probed a loop that would never turn again, took it for blocked, and
    # waited for it to turn for the process's life (a thread left per system).
    system_loop = _system_loop.SystemLoop()
    loop = system_loop.loop
    posted = threading.Event()

    class ClearedAfterTheEnd(threading.Event):
        def clear(self) -> None:
            while not system_loop._ended:
                threading.Event().wait(0.001)
            super().clear()

    post = loop.call_soon_threadsafe

    def probe(callback: Any, *args: Any) -> Any:
        if threading.current_thread() is system_loop._watch:
            posted.set()
        return post(callback, *args)

    close = loop.close

    def close_once_probed() -> None:  # a probe that comes at all comes before the close
        while not posted.is_set() and system_loop._watch and system_loop._watch.is_alive():
            threading.Event().wait(0.001)
        close()

    system_loop._turned = ClearedAfterTheEnd()
    loop.call_soon_threadsafe = probe  # type: ignore[method-assign]
    loop.close = close_once_probed  # type: ignore[method-assign]

    async def waits() -> None:
        await asyncio.sleep(3600)

    system_loop.submit(waits())  # starts the watch
    watch = system_loop._watch
    assert watch is not None
    system_loop.stop()
    watch.join(WAIT)
    assert not watch.is_alive()


def test_the_stall_watch_ends_with_the_loop_when_the_end_fails_the_work_still_pending() -> None:
    # The loop's end wakes the watch; failing the work still pending then marked the loop
    # idle again before the watch looked: it went back to wait for work that could never
    # come, a thread left per system (and each stop() waited a second for it).
    system_loop = _system_loop.SystemLoop()
    looking = threading.Event()

    class LooksOnceTheWorkFailed(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            looking.set()
            while not (system_loop._ended and not system_loop._pending):
                threading.Event().wait(0.001)
            return True

    system_loop._watch_ends = LooksOnceTheWorkFailed()

    async def waits() -> None:
        await asyncio.sleep(3600)

    system_loop.submit(waits())  # starts the watch
    watch = system_loop._watch
    assert watch is not None
    assert looking.wait(WAIT)  # the watch saw the loop turn, and waits for its next look
    system_loop.stop()
    watch.join(WAIT)
    assert not watch.is_alive()


def test_work_submitted_as_the_loop_stops_fails_its_waiter_and_leaves_no_pending_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A call submitted just as stop() ends the loop (an execute(timeout=...) past its check
    # of the stopping flag, a ref.ask): its task was made in the loop's last turn and never
    # took its first step. Its waiter got its RuntimeError, but the task was left pending
    # and asyncio reported it destroyed so when it was collected.
    gc.collect()  # what earlier tests left behind is reported now, not below
    caplog.clear()
    system_loop = _system_loop.SystemLoop()
    loop = system_loop.loop
    holding, release = threading.Event(), threading.Event()
    loop.call_soon_threadsafe(lambda: holding.set() or release.wait(WAIT))
    assert holding.wait(WAIT)
    loop.call_soon_threadsafe(loop.stop)  # what stop() asks of the loop first
    started: list[str] = []

    async def work() -> str:
        started.append("started")
        return "done"

    future = system_loop.submit(work())  # its task is made in the same turn as the stop
    release.set()
    system_loop.stop()
    with pytest.raises(RuntimeError, match="stopped before the call finished"):
        future.result(WAIT)
    del system_loop, loop, future  # and with them the last references to what the loop ran
    gc.collect()
    assert started == []
    assert "Task was destroyed but it is pending" not in caplog.text


@pytest.mark.parametrize("raised", [SystemExit(2), KeyboardInterrupt(), GeneratorExit()])
def test_base_exceptions_from_bodies_in_a_batch_are_that_call_s_failure(
    system: ToolSystem, raised: BaseException
) -> None:
    async def async_body(args: Any, ctx: Any) -> Any:
        raise raised

    def plain_body(args: Any, ctx: Any) -> Any:
        raise raised

    classifier = {"is_concurrency_safe": lambda args: True}
    system.tools.register(fixture("async_exit", async_body, **classifier))
    system.tools.register(fixture("plain_exit", plain_body, **classifier))
    system.tools.register(fixture("fine", **classifier))
    outcome = system.execute_batch(
        batch(("c1", "async_exit", "{}"), ("c2", "plain_exit", "{}"), ("c3", "fine", "{}")),
        timeout=WAIT,
    )
    assert [r.is_error for r in outcome.results] == [True, True, False]
    again = system.execute_batch(batch(("c4", "fine", "{}")), timeout=WAIT)
    assert not again.results[0].is_error


@pytest.mark.parametrize("how", ["execute_async", "execute_with_timeout"])
@pytest.mark.parametrize("raised", [KeyboardInterrupt("gave up"), SystemExit(2)], ids=type)
def test_a_base_exception_a_plain_body_raises_on_a_worker_thread_under_a_loop_is_its_failure(
    system: ToolSystem, raised: BaseException, how: str
) -> None:
    # The body runs on a worker thread, where no Ctrl-C lands: what it raises is its failure.
    # Raised into the task that waits for it instead, a KeyboardInterrupt went on out of that
    # task's event loop (asyncio re-raises it from the loop): the caller's, or, under
    # ``execute(timeout=)``, the system loop, which then ran no call any more.
    def interrupted(args: Any, ctx: Any) -> Any:
        raise raised

    system.tools.register(fixture("interrupted", interrupted))

    async def harness() -> Any:
        return await system.execute_async(call("interrupted"))

    if how == "execute_async":
        result = asyncio.run(harness())
    else:
        result = system.execute(call("interrupted"), timeout=WAIT)
    assert isinstance(result, ToolExecutionFailure)
    assert result.exception_type == type(raised).__name__
    recorded = system.session.events[-1].data
    assert recorded["content"] == [block(f"Error: {raised}")] and "error" not in recorded
    system.tools.register(echo())
    assert text(system.execute(call(call_id="c2"), timeout=WAIT)) == "hi"


def test_keyboard_interrupt_in_a_blocking_execute_propagates_after_the_result_is_recorded(
    system: ToolSystem,
) -> None:
    def interrupted(args: Any, ctx: Any) -> Any:
        raise KeyboardInterrupt

    system.tools.register(fixture("interrupted", interrupted))
    with pytest.raises(KeyboardInterrupt):
        system.execute(call("interrupted"))
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]
    # The caller was interrupted: the call says so, not "Error: " (a bare KeyboardInterrupt's
    # text) as a failure of its body.
    assert system.session.events[-1].data["error"] == {"name": "AbortError", "code": "ABORTED"}
    system.tools.register(echo())
    assert text(system.execute(call(call_id="c2"))) == "hi"


# --- every batch input gets results ----------------------------------------------------------


def test_a_lone_surrogate_in_a_batch_fails_that_call_only(system: ToolSystem) -> None:
    system.tools.register(echo())
    agent = system.agent("A")
    outcome = system.execute_batch(
        batch(
            ("c1", "echo", '{"text": "before"}'),
            ("c2", "echo", '{"text": "\ud800"}'),
            ("c3", "echo", '{"text": "after"}'),
            agent="A",
        ),
        timeout=WAIT,
    )
    first, bad, last = outcome.results
    assert first.value == "before" and last.value == "after"  # type: ignore[union-attr]
    assert code_of(bad) == "INVALID_ARGS"
    assert "lone surrogate U+D800 at line 1, column 11" in text(bad)
    # the batch is over: a context now goes straight to the session
    agent.inject_context({"type": "note", "content": [block("later")]})
    assert system.session.events[-1].type == "user/message"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("[" * 1_000_000, "nest deeper than 10,000 levels"),
        ('{"text": "a\x00b"}', "not valid JSON: Invalid control character at line 1, column 12"),
        ("\x00", "not valid JSON: unexpected character '\\x00' at line 1, column 1"),
        ('{"text": "' + "x" * MAX_ARGUMENTS_CHARS + '"}', "characters long; the limit is"),
    ],
    ids=["a million levels deep", "a NUL in a string", "a NUL byte", "longer than the limit"],
)
def test_pathological_argument_text_is_invalid_args_beside_a_working_call(
    system: ToolSystem, arguments: str, says: str
) -> None:
    system.tools.register(echo())
    outcome = system.execute_batch(
        batch(("bad", "echo", arguments), ("good", "echo", '{"text": "fine"}')), timeout=WAIT
    )
    bad, good = outcome.results
    assert code_of(bad) == "INVALID_ARGS"
    assert says in text(bad)
    assert good.value == "fine"  # type: ignore[union-attr]


def test_long_valid_argument_text_is_read_and_delivered(system: ToolSystem) -> None:
    system.tools.register(echo())
    long_text = "y" * (2 * 2**20)
    outcome = system.execute_batch(
        batch(("c1", "echo", '{"text": "' + long_text + '"}')), timeout=WAIT
    )
    assert outcome.results[0].value == long_text  # type: ignore[union-attr]


def test_a_duplicate_call_id_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="call_id 'c1' appears twice in the batch"):
        batch(("c1", "echo", "{}"), ("c2", "echo", "{}"), ("c1", "echo", "{}"))


@pytest.mark.parametrize(
    "calls",
    [ToolCall("c1", "echo", "{}"), "c1", {"c1": ToolCall("c1", "echo", "{}")}, 7],
    ids=["one-call", "text", "mapping", "number"],
)
def test_a_batch_of_something_other_than_a_sequence_of_calls_names_the_field(
    calls: Any,
) -> None:
    with pytest.raises(
        TypeError, match=r"ExecuteBatch\.calls must be a sequence of ToolCall, got "
    ):
        ExecuteBatch(calls=calls)


def test_a_batch_entry_that_is_no_tool_call_is_named_with_what_it_is() -> None:
    # A provider's call passed through as a tuple or a dict: the message says which entry
    # and what it was, not only what it should have been.
    with pytest.raises(
        TypeError, match=r"^ExecuteBatch\.calls\[1\] must be a ToolCall, got tuple$"
    ):
        ExecuteBatch(calls=[ToolCall("c1", "echo", "{}"), ("c2", "echo", "{}")])


class QuotaExceeded(Exception):
    """A harness-specific error class."""


def test_the_exception_type_names_user_classes_by_module_and_package_errors_by_package(
    system: ToolSystem,
) -> None:
    def over_quota(args: Any, ctx: Any) -> Any:
        raise QuotaExceeded("monthly quota used up")

    system.tools.register(fixture("quota", over_quota))
    system.tools.register(echo())
    quota = system.execute(call("quota"))
    invalid = system.execute(call("echo", {"text": 5}))
    assert quota.exception_type == f"{__name__}.QuotaExceeded"  # type: ignore[union-attr]
    assert code_of(invalid) == "INVALID_ARGS"
    assert invalid.exception_type == "dsh_tools.ToolArgsError"  # type: ignore[union-attr]
