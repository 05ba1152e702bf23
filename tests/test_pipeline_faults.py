"""Faults and re-entrancy: every call yields one result and one ``tool/result`` event whatever
fails; registry mutations from inside hooks, guards, bodies and observers are immediate and never
deadlock; the blocking entry points behave at their edges (timeouts, loops, stopping)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from typing import Any

import pykka
import pytest
from conftest import (
    WAIT,
    Logs,
    arun,
    ask,
    call,
    echo,
    fixture,
    spawn,
    text,
    wait,
)

from dsh_tools import (
    AbortController,
    Ask,
    ExecuteBatch,
    ExecuteCall,
    HarnessError,
    ToolCall,
    ToolOutput,
    ToolSystem,
    define_tool,
)

STAGES = ["pre", "guard", "wrapper", "post", "finalizer", "observer", "body"]


def events_for(system: ToolSystem, call_id: str) -> list[str]:
    return [e.type for e in system.session.events if e.data["call_id"] == call_id]


def install_raising(system: ToolSystem, stage: str, error: BaseException) -> None:
    """Make ``stage`` of every call of echo raise ``error``."""

    def fail(*args: Any) -> Any:
        raise error

    async def fail_async(*args: Any) -> Any:
        raise error

    if stage == "finalizer":
        system.tools.register(echo(finalize_content=fail))
        return
    if stage == "body":
        system.tools.register(echo(execute=fail))
        return
    system.tools.register(echo())
    if stage == "pre":
        system.tools.on_pre_execute(fail_async)
    elif stage == "guard":
        system.tools.guard(fail)
    elif stage == "wrapper":
        system.tools.on_execute(fail_async)
    elif stage == "post":
        system.tools.on_post_execute(fail_async)
    elif stage == "observer":
        system.tools.on_result(fail)


@pytest.mark.parametrize("stage", STAGES)
def test_a_raising_stage_gives_one_result_and_one_event(
    system: ToolSystem, logs: Logs, stage: str
) -> None:
    install_raising(system, stage, HarnessError(f"{stage} exploded", "STAGE_FAULT"))
    observed: list[Any] = []
    system.tools.on_result(lambda exec, result: observed.append(result))
    result = system.execute(call())
    assert observed == [result]
    assert events_for(system, "c1") == ["tool/call", "tool/result"]
    if stage == "observer":
        assert not result.is_error
        assert logs.wait_for_warnings(1) == [
            'tool "echo" (c1): tools/result observer failed: observer exploded'
        ]
    else:
        assert text(result) == f"Error: {stage} exploded"
        assert result.to_dict()["error"]["info"] == {"name": "HarnessError", "code": "STAGE_FAULT"}


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_raising_cancelled_error_is_a_result_not_a_crash(
    system: ToolSystem, logs: Logs, stage: str
) -> None:
    install_raising(system, stage, asyncio.CancelledError("user code cancelled"))
    result = system.execute(call())
    assert events_for(system, "c1") == ["tool/call", "tool/result"]
    if stage == "observer":
        assert not result.is_error
        assert len(logs.wait_for_warnings(1)) == 1
    else:
        assert text(result) == "Error: user code cancelled"


@pytest.mark.parametrize("entry", ["execute", "batch"])
@pytest.mark.parametrize("waits", [False, True], ids=["returns-at-once", "then-waits"])
@pytest.mark.parametrize("post_hook", [False, True], ids=["no-post-hook", "awaiting-post-hook"])
def test_a_body_that_cancels_its_own_task_fails_as_the_body_and_never_raises_out_of_execute(
    system: ToolSystem, entry: str, waits: bool, post_hook: bool
) -> None:
    # The body's task is the body's alone: a cancellation it asks for itself ends the body (a
    # tool failure), never the call's own steps after it (a post-execute hook's await) nor the
    # caller of ``execute``.
    async def cancels_itself(args: Any, ctx: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        if waits:
            await asyncio.sleep(0)
        return [{"type": "text", "text": "the body returned"}]

    seen: list[str] = []

    async def post(execution: Any, result: Any, next: Any) -> Any:
        await asyncio.sleep(0)
        seen.append("post")
        return await next()

    system.tools.register(fixture("cancels_itself", cancels_itself))
    if post_hook:
        system.tools.on_post_execute(post)
    if entry == "execute":
        result = system.execute(ExecuteCall(call_id="c1", name="cancels_itself", arguments={}))
    else:  # the pool runs the body in the task of the call's own steps
        calls = [ToolCall(call_id="c1", name="cancels_itself", arguments="{}")]
        (result,) = system.execute_batch(ExecuteBatch(calls=calls)).results
    assert result.is_error
    assert result.to_dict()["error"] == {"message": ""}  # the body's own bare CancelledError
    assert seen == (["post"] if post_hook else [])
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


@pytest.mark.parametrize("entry", ["execute", "batch"])
def test_a_body_that_cancels_its_own_task_then_raises_fails_with_what_it_raised(
    system: ToolSystem, entry: str
) -> None:
    # As an asyncio task would: the raise ends the body before the request reaches it.
    async def cancels_then_raises(args: Any, ctx: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        raise ValueError("the body's own error")

    system.tools.register(fixture("cancels_then_raises", cancels_then_raises))
    if entry == "execute":
        result = system.execute(ExecuteCall(call_id="c1", name="cancels_then_raises", arguments={}))
    else:
        calls = [ToolCall(call_id="c1", name="cancels_then_raises", arguments="{}")]
        (result,) = system.execute_batch(ExecuteBatch(calls=calls)).results
    assert text(result) == "Error: the body's own error"
    assert result.exception_type == "ValueError"  # type: ignore[union-attr]


@pytest.mark.parametrize("stage", STAGES)
def test_a_raising_stage_on_the_async_path_gives_one_result(system: ToolSystem, stage: str) -> None:
    install_raising(system, stage, RuntimeError(f"{stage} exploded"))
    result = arun(system.execute_async(call()))
    assert events_for(system, "c1") == ["tool/call", "tool/result"]
    assert result.is_error == (stage != "observer")


@pytest.mark.parametrize("suspends", [False, True], ids=["at-once", "after-suspending"])
def test_a_failing_async_body_leaves_no_garbage_for_the_cyclic_collector(
    system: ToolSystem, suspends: bool
) -> None:
    # The traceback keeps every frame the failure passed through; none of them may keep the
    # failure itself, or the call's record waits for the cyclic collector with it.
    async def failing(args: Any, ctx: Any) -> Any:
        if suspends:
            await asyncio.sleep(0)
        raise ValueError("the body fails")

    system.tools.register(echo(execute=failing))
    assert system.execute(call()).is_error
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            assert text(system.execute(call())) == "Error: the body fails"
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_body_ignoring_its_signal_finishes_once_when_released(system: ToolSystem) -> None:
    started = threading.Event()
    release = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        started.set()
        assert release.wait(WAIT)
        return "released"

    system.tools.register(echo(execute=body))
    observed: list[Any] = []
    system.tools.on_result(lambda exec, result: observed.append(result))
    controller = AbortController()
    future = spawn(system, call(signal=controller.signal))
    wait(started)
    controller.abort()
    controller.abort("again")
    assert events_for(system, "c1") == ["tool/call"]
    release.set()
    result = future.result(WAIT)
    assert text(result) == "Error: tool call aborted"
    assert observed == [result]
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


# --- re-entrant registry mutations --------------------------------------------------------------


class Mutator:
    """Registers a tool, a guard and a hook from wherever it is called, and checks each change
    is visible at once; then disposes them again."""

    def __init__(self, system: ToolSystem) -> None:
        self.system = system
        self.sites: list[str] = []

    def mutate(self, site: str) -> None:
        tools = self.system.tools
        name = f"made-in-{site}"
        dispose = tools.register(fixture(name))
        assert tools.get(name) is not None
        assert name in [s["name"] for s in tools.schemas()]
        unguard = tools.guard(lambda exec: None)
        unhook = tools.on_result(lambda exec, result: None)
        scope = self.system.agent(f"agent-of-{site}")
        unmask = scope.tools.restrict(deny=[name])
        assert scope.tools.get(name) is None
        unmask()
        assert scope.tools.get(name) is not None
        unhook()
        unguard()
        dispose()
        assert tools.get(name) is None
        self.sites.append(site)


SITES = ["pre", "guard", "body", "post", "observer", "change"]


def install_mutator(system: ToolSystem, site: str, mutator: Mutator, *, asynchronous: bool) -> None:
    def body(args: Any, ctx: Any) -> str:
        if site == "body":
            mutator.mutate("body")
        return "hi"

    async def async_body(args: Any, ctx: Any) -> str:
        return body(args, ctx)

    system.tools.register(echo(execute=async_body if asynchronous else body))

    async def pre(exec: Any, next: Any) -> Any:
        mutator.mutate("pre")
        return await next()

    def guard(exec: Any) -> None:
        mutator.mutate("guard")

    async def post(exec: Any, result: Any, next: Any) -> Any:
        mutator.mutate("post")
        return await next()

    def observer(exec: Any, result: Any) -> None:
        mutator.mutate("observer")

    changes: list[int] = []

    def on_change() -> None:
        if not changes:  # only once: the mutation below emits changes of its own
            changes.append(1)
            mutator.mutate("change")

    hooks = {
        "pre": lambda: system.tools.on_pre_execute(pre),
        "guard": lambda: system.tools.guard(guard),
        "post": lambda: system.tools.on_post_execute(post),
        "observer": lambda: system.tools.on_result(observer),
        "change": lambda: system.tools.on_change(on_change),
    }
    if site in hooks:
        hooks[site]()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync-body", "async-body"])
@pytest.mark.parametrize("site", SITES)
def test_mutations_from_inside_a_call_are_immediate_in_execute(
    system: ToolSystem, site: str, asynchronous: bool
) -> None:
    mutator = Mutator(system)
    install_mutator(system, site, mutator, asynchronous=asynchronous)
    if site == "change":
        system.tools.register(fixture("trigger"))
    result = system.execute(call())
    assert text(result) == "hi"
    assert mutator.sites == [site]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync-body", "async-body"])
@pytest.mark.parametrize("site", ["pre", "guard", "body", "post", "observer"])
def test_mutations_from_inside_a_call_are_immediate_on_the_system_loop(
    system: ToolSystem, site: str, asynchronous: bool
) -> None:
    mutator = Mutator(system)
    install_mutator(system, site, mutator, asynchronous=asynchronous)
    result = ask(system, call())
    assert text(result) == "hi"
    assert mutator.sites == [site]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync-body", "async-body"])
def test_mutations_from_inside_a_body_are_immediate_with_execute_async(
    system: ToolSystem, asynchronous: bool
) -> None:
    mutator = Mutator(system)
    install_mutator(system, "body", mutator, asynchronous=asynchronous)
    assert text(arun(system.execute_async(call()))) == "hi"
    assert mutator.sites == ["body"]


def test_closing_a_scope_from_inside_its_own_call(system: ToolSystem) -> None:
    scope = system.agent("A")

    def body(args: Any, ctx: Any) -> list[Any]:
        scope.close()
        return [{"type": "text", "text": "closed myself"}]

    scope.tools.register(fixture("local", body))
    assert text(system.execute(call("local", agent="A"))) == "closed myself"
    assert system.tools.get("local", "A") is None
    assert text(system.execute(call("local", agent="A", call_id="c2"))) == (
        'Error: unknown tool "local"'
    )


# --- entry points -------------------------------------------------------------------------------


def test_execute_inside_a_running_loop_raises_runtime_error(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="execute_async"):
            system.execute(call())

    arun(inside())
    assert system.session.events == []


def test_a_loop_that_installs_no_async_generator_hooks_is_still_a_running_loop(
    system: ToolSystem,
) -> None:
    # Not every loop installs them while it runs (QtAsyncio's does not).
    system.tools.register(echo())

    async def inside() -> None:
        installed = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=None, finalizer=None)
        try:
            with pytest.raises(RuntimeError, match="execute_async"):
                system.execute(call())
            assert text(await system.execute_async(call(call_id="c2"))) == "hi"
        finally:
            sys.set_asyncgen_hooks(*installed)

    arun(inside())
    assert [e.data["call_id"] for e in system.session.events] == ["c2", "c2"]


def test_a_plain_body_run_by_execute_may_execute_a_sub_call(system: ToolSystem) -> None:
    system.tools.register(echo())

    def delegate(args: Any, ctx: Any) -> Any:
        inner = system.execute(call("echo", {"text": "from inside"}, call_id="inner"))
        return [{"type": "text", "text": f"inner said {text(inner)}"}]

    system.tools.register(fixture("outer", delegate))
    assert text(system.execute(call("outer", call_id="outer"))) == "inner said from inside"
    assert kinds_of(system) == [
        ("tool/call", "outer"),
        ("tool/call", "inner"),
        ("tool/result", "inner"),
        ("tool/result", "outer"),
    ]


def test_an_async_body_on_the_system_loop_may_not_block_it(system: ToolSystem) -> None:
    system.tools.register(echo())

    async def blocking(args: Any, ctx: Any) -> Any:
        system.execute(call("echo", call_id="inner"))
        return []

    system.tools.register(fixture("outer", blocking))
    result = ask(system, call("outer"))
    assert result.is_error
    assert "use await system.execute_async(call)" in text(result)


def kinds_of(system: ToolSystem) -> list[tuple[str, str]]:
    return [(e.type, e.data["call_id"]) for e in system.session.events]


def test_execute_timeout_raises_while_the_call_still_finishes(system: ToolSystem) -> None:
    started = threading.Event()
    release = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        started.set()
        assert release.wait(WAIT)
        return "finished late"

    system.tools.register(echo(execute=body))
    finished = threading.Event()
    results: list[Any] = []

    def observe(exec: Any, result: Any) -> None:
        results.append(result)
        finished.set()

    system.tools.on_result(observe)
    with pytest.raises(TimeoutError):
        system.execute(call(), timeout=0.05)
    wait(started)
    release.set()
    wait(finished)
    assert len(results) == 1
    assert results[0].value == "finished late"
    # The call finishes on the system loop; its result event is recorded in the same loop step
    # as the observers ran, so one more call through that loop is a barrier behind it.
    system.ref.ask(call(call_id="barrier"), timeout=WAIT)
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


def test_execute_with_a_timeout_that_is_met_returns_the_result(system: ToolSystem) -> None:
    system.tools.register(echo())
    assert text(system.execute(call(), timeout=WAIT)) == "hi"
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


def test_ref_ask_runs_a_call(system: ToolSystem) -> None:
    system.tools.register(echo())
    result = ask(system, call())
    assert text(result) == "hi"
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


def test_many_ref_asks_overlap(system: ToolSystem) -> None:
    count = 16
    barrier = threading.Barrier(count, timeout=WAIT)

    def body(args: Any, ctx: Any) -> str:
        barrier.wait()  # passes only when every call is in its body at once
        value: str = args["text"]
        return value

    system.tools.register(echo(execute=body))
    futures = [
        system.ref.ask(call("echo", {"text": f"t{i}"}, call_id=f"c{i}"), block=False)
        for i in range(count)
    ]
    values = [f.get(timeout=WAIT).value for f in futures]
    assert values == [f"t{i}" for i in range(count)]


def test_many_async_ref_asks_overlap_on_the_system_loop(system: ToolSystem) -> None:
    count = 16
    arrived: list[int] = []
    everyone: dict[str, asyncio.Event] = {}

    async def body(args: Any, ctx: Any) -> str:
        gate = everyone.setdefault("gate", asyncio.Event())
        arrived.append(1)
        if len(arrived) == count:
            gate.set()
        await asyncio.wait_for(gate.wait(), WAIT)
        value: str = args["text"]
        return value

    system.tools.register(echo(execute=body))
    futures = [
        system.ref.ask(call("echo", {"text": f"t{i}"}, call_id=f"c{i}"), block=False)
        for i in range(count)
    ]
    assert [f.get(timeout=WAIT).value for f in futures] == [f"t{i}" for i in range(count)]


def test_a_non_call_message_to_ref_is_refused(system: ToolSystem) -> None:
    with pytest.raises(TypeError, match="ExecuteCall and ExecuteBatch"):
        system.ref.ask("hello", timeout=WAIT)
    system.tools.register(echo())
    assert text(ask(system, call())) == "hi"


def test_stop_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(echo())
    system.tools.register(echo(name="async-echo", execute=_async_echo))
    with system.plugin("p") as plugin:
        plugin.tools.register(fixture("plugged"))
    scope = system.agent("A")
    scope.tools.register(fixture("local"))
    system.execute(call())
    arun(system.execute_async(call(call_id="c2")))
    system.ref.ask(call("async-echo", call_id="c3"), timeout=WAIT)
    system.ref.ask(call(call_id="c4"), timeout=WAIT)
    system.execute(call(call_id="c5"), timeout=WAIT)
    system.stop()
    system.stop()
    leftover = [t for t in threading.enumerate() if t not in before]
    assert leftover == []
    with pytest.raises(RuntimeError, match="stopped"):
        system.execute(call(call_id="c6"))


async def _async_echo(args: Any, ctx: Any) -> str:
    return "async"


def test_a_stopped_system_refuses_asks() -> None:
    system = ToolSystem.start(code_runtime=None)
    ref = system.ref
    system.stop()
    with pytest.raises(pykka.ActorDeadError):
        ref.ask(ExecuteCall(call_id="c1", name="echo", arguments={}), timeout=WAIT)


def test_stop_settles_an_in_flight_ask_whose_body_outlasts_it() -> None:
    system = ToolSystem.start(code_runtime=None)
    started = threading.Event()
    release = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        started.set()
        release.wait(WAIT)
        return "too late"

    system.tools.register(echo(execute=body))
    future = system.ref.ask(call(), block=False)
    wait(started)
    stopper = threading.Thread(target=system.stop)
    stopper.start()
    try:
        result = future.get(timeout=WAIT)  # the body is left to its thread: the call settles
    finally:
        release.set()
        stopper.join(WAIT)
    assert not stopper.is_alive()
    assert text(result) == "Error: tool call aborted"
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


@pytest.mark.parametrize("entry", ["execute", "ref.ask-sync", "ref.ask-async"])
def test_stop_from_inside_a_body_does_not_hang(entry: str) -> None:
    before = set(threading.enumerate())
    system = ToolSystem.start(code_runtime=None)
    failures: list[BaseException] = []

    def body(args: Any, ctx: Any) -> str:
        try:
            system.stop()
        except BaseException as exc:
            failures.append(exc)
        return "stopped"

    async def async_body(args: Any, ctx: Any) -> str:
        return body(args, ctx)

    system.tools.register(echo(execute=async_body if entry == "ref.ask-async" else body))
    if entry == "execute":
        # stop() aborts every call in flight, this one included: what it returned is kept
        result = system.execute(call())
        assert text(result) == "Error: tool call aborted"
        assert result.abort_reason == "the tool system is stopping"  # type: ignore[union-attr]
        assert result.settled_with.value == "stopped"  # type: ignore[union-attr]
    else:
        future = system.ref.ask(call(), block=False)
        try:
            future.get(timeout=WAIT)
        except RuntimeError as exc:
            assert "stopped" in str(exc)
    assert failures == []
    assert not system.running
    for thread in [t for t in threading.enumerate() if t not in before]:
        thread.join(WAIT)
    assert [t for t in threading.enumerate() if t not in before] == []


@pytest.mark.parametrize("entry", ["execute", "execute_async", "batch"])
@pytest.mark.parametrize("stage", ["guard", "finalizer", "body"])
def test_user_code_raising_generatorexit_fails_its_call_and_nothing_else(
    system: ToolSystem, stage: str, entry: str
) -> None:
    # These are plain functions: a GeneratorExit out of them is theirs, never the pipeline's
    # coroutine being closed, so it must not end (or hang) the call as one would.
    def raises(*args: Any) -> Any:
        raise GeneratorExit

    extra: dict[str, Any] = {"finalize_content": raises} if stage == "finalizer" else {}
    system.tools.register(fixture("t", raises if stage == "body" else None, **extra))
    if stage == "guard":
        system.tools.guard(raises)
    for call_id in ("c1", "c2"):
        if entry == "execute":
            result = system.execute(call(call_id=call_id, name="t"))
        elif entry == "execute_async":
            result = arun(system.execute_async(call(call_id=call_id, name="t")))
        else:
            batch = ExecuteBatch(calls=[ToolCall(call_id, "t", "{}")])
            (result,) = system.execute_batch(batch, timeout=WAIT).results
        owner = {"guard": "a guard", "finalizer": "the finalizer", "body": "the tool body"}
        assert text(result) == f"Error: {owner[stage]} raised GeneratorExit"
        assert events_for(system, call_id) == ["tool/call", "tool/result"]


@pytest.mark.parametrize("entry", ["execute", "execute_async", "batch"])
@pytest.mark.parametrize("stage", ["pre-execute", "wrapper", "post-execute", "render", "approver"])
def test_a_hook_raising_generatorexit_fails_its_call_and_nothing_else(
    stage: str, entry: str
) -> None:
    # Hooks, renderers and approvers run inside the pipeline's coroutines; a GeneratorExit they
    # raise in a step is theirs, and must become the call's failure (one tool/result), not
    # escape execute() as if the coroutine were being closed. (Approval goes through an
    # agent.)
    def raise_in(where: str) -> None:
        if where == stage:
            raise GeneratorExit("misused")

    async def pre(exec: Any, next: Any) -> Any:
        raise_in("pre-execute")
        if stage == "approver":
            return Ask("may I?")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        raise_in("wrapper")
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        raise_in("post-execute")
        return await next()

    def render(args: Any, value: Any) -> list[dict[str, Any]]:
        raise_in("render")
        return [{"type": "text", "text": "rendered"}]

    def approver(**request: Any) -> str:
        raise_in("approver")
        return "allowed-once"

    with ToolSystem.start(code_runtime=None, approval=approver) as system:
        system.tools.register(
            define_tool(
                name="t",
                description="t",
                parameters={},
                output=ToolOutput(schema={"type": "integer"}, render=render),
                execute=lambda args, ctx: 1,
            )
        )
        system.tools.on_pre_execute(pre)
        system.tools.on_execute(wrapper)
        system.tools.on_post_execute(post)
        for call_id in ("c1", "c2"):
            if entry == "execute":
                result = system.execute(
                    ExecuteCall(call_id=call_id, name="t", arguments={}, agent="a")
                )
            elif entry == "execute_async":
                result = arun(
                    system.execute_async(
                        ExecuteCall(call_id=call_id, name="t", arguments={}, agent="a")
                    )
                )
            else:
                batch = ExecuteBatch(calls=[ToolCall(call_id, "t", "{}")], agent="a")
                (result,) = system.execute_batch(batch, timeout=WAIT).results
            assert result.is_error and text(result) == "Error: misused", result
            assert events_for(system, call_id) == ["tool/call", "tool/result"]


@pytest.mark.parametrize(
    ("timeout", "error", "text"),
    [
        (float("inf"), ValueError, r"^timeout must be a number of seconds above 0 and at most "),
        (1e12, ValueError, r"^timeout must be a number of seconds above 0 and at most "),
        (0, ValueError, r"^timeout must be a number of seconds above 0 and at most "),
        (float("nan"), ValueError, r"^timeout must be a number of seconds above 0 and at most "),
        ("1", TypeError, r"^timeout must be a number of seconds or None, got str$"),
        (True, TypeError, r"^timeout must be a number of seconds or None, got bool$"),
    ],
)
def test_a_bad_timeout_is_refused_before_the_call_or_batch_starts(
    system: ToolSystem, timeout: Any, error: type[Exception], text: str
) -> None:
    ran: list[str] = []
    system.tools.register(echo(execute=lambda args, ctx: ran.append("ran") or "ran"))
    with pytest.raises(error, match=text):
        system.execute(call(), timeout=timeout)
    with pytest.raises(error, match=text):
        system.execute_batch(ExecuteBatch(calls=[ToolCall("b1", "echo", "{}")]), timeout=timeout)
    assert ran == []
    assert system.session.events == []


def _next_of_nothing(args: Any, ctx: Any) -> Any:
    return next(iter([]))  # raises StopIteration


@pytest.mark.parametrize(
    "entry", ["execute", "execute-timeout", "execute_async", "execute_batch", "wrapped"]
)
def test_a_plain_body_raising_stop_iteration_fails_as_an_async_body_would(
    system: ToolSystem, entry: str
) -> None:
    # asyncio refuses StopIteration on the future a body on a worker thread settles, which
    # then never settled: the call hung (the timeout policy's deadline never fired either).
    system.tools.register(echo(execute=_next_of_nothing))
    if entry == "wrapped":  # a wrapper's own signal sends the body to a worker thread

        async def deadline(exec: Any, next: Any) -> Any:
            exec.signal = AbortController().signal
            return await next()

        system.tools.on_execute(deadline)
    one = call()
    if entry in ("execute", "wrapped"):
        result = system.execute(one)
    elif entry == "execute-timeout":
        result = system.execute(one, timeout=WAIT)
    elif entry == "execute_async":
        result = arun(system.execute_async(one))
    else:
        result = system.execute_batch(
            ExecuteBatch(calls=[ToolCall("c1", "echo", "{}")]), timeout=WAIT
        ).results[0]
    assert text(result) == "Error: the tool body raised StopIteration"
    assert result.exception_type == "RuntimeError"
    assert events_for(system, "c1") == ["tool/call", "tool/result"]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((404, "NOT_FOUND"), TypeError, "HarnessError message must be a str, got int"),
        (("not found", 404), TypeError, "HarnessError code must be a non-empty str, got int"),
        (("not found", None), TypeError, "HarnessError code must be a non-empty str, got NoneType"),
        (("not found", ""), ValueError, "HarnessError code must be a non-empty str, got ''"),
    ],
)
def test_a_harness_error_refuses_a_message_or_code_that_is_no_text_when_made(
    args: tuple[Any, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        HarnessError(*args)


def test_a_body_raising_a_harness_error_with_a_code_that_is_no_str_fails_naming_it(
    system: ToolSystem,
) -> None:
    # The code used to be dropped without a word: a failure without info, "Error: not found".
    def lookup(args: Any, run_ctx: Any) -> Any:
        raise HarnessError("not found", 404)  # type: ignore[arg-type]

    system.tools.register(echo(execute=lookup))
    result = system.execute(call())
    assert text(result) == "Error: HarnessError code must be a non-empty str, got int"
