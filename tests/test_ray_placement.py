"""Tool bodies placed on a real local Ray instance: only the body leaves the process.

The same pipeline runs around a remote body (hooks, wrappers, post-hooks, the session log,
batch slots and barriers); arguments and values cross as lossless JSON; a remote exception
fails the call exactly as the same exception raised locally would.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import pytest
from ray_support import WAIT, all_cpus_free, json_tool, ray_instance  # noqa: F401  (the session fixture)

from dsh_tools import (
    AbortController,
    Accept,
    BatchOutcome,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    FrozenDict,
    HarnessError,
    ToolCall,
    ToolExecutionFailure,
    ToolOutput,
    ToolSystem,
    define_tool,
    timeout_policy,
)
from dsh_tools.distributed import RAY_DEFAULT, RayPlacement, set_ray_default

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_instance")]

REMOTE = RayPlacement(num_cpus=0.5)


def run(system: ToolSystem, name: str, arguments: Any = None, call_id: str = "c1") -> Any:
    return system.execute(
        ExecuteCall(call_id=call_id, name=name, arguments={} if arguments is None else arguments)
    )


def where(args: Any, ctx: Any) -> Any:
    return {"pid": os.getpid(), "call_id": ctx.call_id, "name": ctx.name, "echo": args["v"]}


def test_a_placed_body_runs_in_a_ray_worker_and_its_value_comes_back_through_the_output_contract(
    system: ToolSystem,
) -> None:
    system.tools.register(json_tool("where", where, REMOTE, parameters={"v": {"type": "json"}}))
    value = {"text": "žluť 🎈", "big": 2**64 - 1, "neg": -(2**63), "f": 1.5, "n": [None, True]}

    result = run(system, "where", {"v": value})

    assert not result.is_error, result
    assert result.value["pid"] != os.getpid()
    assert result.value["call_id"] == "c1" and result.value["name"] == "where"
    assert result.value["echo"] == value
    assert type(result.value["echo"]["big"]) is int and type(result.value["echo"]["f"]) is float
    assert result.content[0]["text"].startswith('{"pid":')
    events = [(e.type, e.data["call_id"]) for e in system.session.events]
    assert events == [("tool/call", "c1"), ("tool/result", "c1")]


def test_hooks_wrappers_and_post_hooks_run_locally_around_the_remote_body(
    system: ToolSystem,
) -> None:
    system.tools.register(json_tool("where", where, REMOTE, parameters={"v": {"type": "json"}}))
    seen: list[tuple[str, int]] = []

    async def pre(exec: Any, next: Any) -> Any:
        seen.append(("pre", os.getpid()))
        if exec.arguments["v"] == "forbidden":
            return Deny("not that one")
        return await next()

    async def wrapper(exec: Any, next: Any) -> Any:
        seen.append(("wrapper", os.getpid()))
        return await next()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen.append(("post", os.getpid()))
        if result.is_error:
            return await next()
        return Accept(value={**result.value, "checked": True})

    system.tools.on_pre_execute(pre)
    system.tools.on_execute(wrapper)
    system.tools.on_post_execute(post)

    allowed = run(system, "where", {"v": 1})
    denied = run(system, "where", {"v": "forbidden"}, call_id="c2")

    assert allowed.value["checked"] is True and allowed.value["pid"] != os.getpid()
    assert denied.is_error and denied.content[0]["text"] == "Error: not that one"
    here = os.getpid()
    assert seen == [("pre", here), ("wrapper", here), ("post", here), ("pre", here), ("post", here)]


class Point(TypedDict):
    x: int
    y: int


def squared_norm(p: Point, ctx: Any) -> Any:
    assert type(p) is dict  # the typed view, built on the worker
    return {"squared": p["x"] ** 2 + p["y"] ** 2, "pid": os.getpid()}


def test_arguments_are_validated_locally_and_typed_views_are_built_on_the_worker(
    system: ToolSystem,
) -> None:
    tool = define_tool(
        name="norm",
        description="squared norm",
        parameters={
            "x": {"type": "integer", "required": True},
            "y": {"type": "integer", "required": True},
        },
        output=ToolOutput(
            schema={"type": "json"},
            render=lambda p, v: [{"type": "text", "text": f"{p['x']},{p['y']} -> {v['squared']}"}],
        ),
        execute=squared_norm,
        args_type=Point,
        placement=REMOTE,
    )
    system.tools.register(tool)

    good = run(system, "norm", {"x": 3, "y": 4})
    bad = run(system, "norm", {"x": "3", "y": 4}, call_id="c2")

    assert good.content[0]["text"] == "3,4 -> 25" and good.value["pid"] != os.getpid()
    assert bad.error.info.code == "INVALID_ARGS" and '"x" must be an integer' in bad.error.message
    assert tool.placement is REMOTE


def raise_value_error(args: Any, ctx: Any) -> Any:
    raise ValueError(f"bad value {args['n']}")


class QuotaError(HarnessError):
    """A harness error whose constructor takes other arguments than its message."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"quota exceeded: {used}/{limit}", "QUOTA")
        self.used = used


def raise_quota(args: Any, ctx: Any) -> Any:
    raise QuotaError(args["n"], 3)


def return_a_set(args: Any, ctx: Any) -> Any:
    return {"items": {1, 2}}


def defer_then_fail(args: Any, ctx: Any) -> Any:
    ctx.defer_context({"type": "text", "text": "note from the body"})
    raise RuntimeError("after deferring")


class LibraryTimeout(BaseException):
    """A library's exception that is not an ``Exception`` (as ``gevent.Timeout`` is)."""


def raise_a_base_exception(args: Any, ctx: Any) -> Any:
    raise LibraryTimeout("gave up after 5 s")


def name_an_undecodable_file(args: Any, ctx: Any) -> Any:
    # os.listdir() and friends give such names for bytes that are not UTF-8
    name = b"report-\xff.txt".decode("utf-8", "surrogateescape")
    raise ValueError(f"not a report: {name}")


def open_a_missing_file(args: Any, ctx: Any) -> Any:
    with open(f"/nonexistent/report-{args['n']}.txt") as report:
        return report.read()


def decode_bad_bytes(args: Any, ctx: Any) -> Any:
    return b"caf\xe9".decode("utf-8")


def defer_a_set(args: Any, ctx: Any) -> Any:
    ctx.defer_context({"content": [{"type": "text", "text": "seen"}], "ids": {1, 2}})
    return 1


def defer_an_object(args: Any, ctx: Any) -> Any:
    ctx.defer_context({"content": [{"type": "text", "text": "seen"}], "handle": object()})
    return 1


def defer_a_lock(args: Any, ctx: Any) -> Any:
    # Neither JSON nor picklable: it cannot travel, yet the failure must name it and where.
    ctx.defer_context({"content": [{"type": "text", "text": "seen"}], "held": [threading.Lock()]})
    return 1


@pytest.mark.parametrize(
    "body",
    [
        raise_value_error,
        raise_quota,
        raise_a_base_exception,
        open_a_missing_file,
        name_an_undecodable_file,
        decode_bad_bytes,
        return_a_set,
        defer_then_fail,
        defer_a_set,
        defer_an_object,
        defer_a_lock,
    ],
    ids=lambda f: f.__name__,
)
def test_a_remote_failure_is_the_failure_the_same_body_gives_locally(
    system: ToolSystem, body: Any
) -> None:
    params = {"n": {"type": "integer"}}
    system.tools.register(json_tool("remote", body, REMOTE, parameters=params))
    system.tools.register(json_tool("local", body, None, parameters=params))

    remote = run(system, "remote", {"n": 5})
    local = run(system, "local", {"n": 5})

    assert isinstance(remote, ToolExecutionFailure)
    assert remote.error == local.error or remote.error.message == local.error.message.replace(
        '"local"', '"remote"'
    )
    assert remote.content == local.content or body is return_a_set
    assert remote.additional_contexts == local.additional_contexts


def interrupt_itself(args: Any, ctx: Any) -> Any:
    raise KeyboardInterrupt("the body gave up")


def cancel_itself(args: Any, ctx: Any) -> Any:
    raise asyncio.CancelledError("the body's own cancellation")


async def interrupt_itself_async(args: Any, ctx: Any) -> Any:
    raise KeyboardInterrupt("the async body gave up")


async def cancel_itself_async(args: Any, ctx: Any) -> Any:
    raise asyncio.CancelledError("the async body's own cancellation")


@pytest.mark.parametrize("actor_pool", [0, 1], ids=["task", "actor"])
@pytest.mark.parametrize(
    "body",
    [interrupt_itself, cancel_itself, interrupt_itself_async, cancel_itself_async],
    ids=lambda f: f.__name__,
)
def test_a_body_that_raises_a_cancellation_of_its_own_fails_as_it_does_locally(
    system: ToolSystem, body: Any, actor_pool: int
) -> None:
    # Only Ray's cancellation of the call is a cancellation: the same exception raised by the
    # body while nobody stopped it is the body's failure, with its message.
    placement = RayPlacement(num_cpus=0, actor_pool=actor_pool)
    system.tools.register(json_tool("remote", body, placement))
    system.tools.register(json_tool("local", body, None))
    turn = [ToolCall("r", "remote", "{}"), ToolCall("l", "local", "{}")]

    remote, local = system.execute_batch(ExecuteBatch(calls=turn)).results

    assert isinstance(remote, ToolExecutionFailure)
    assert (remote.content, remote.error) == (local.content, local.error)
    if body in (interrupt_itself, interrupt_itself_async):
        # under the blocking execute(), it reaches the caller once the result is recorded
        with pytest.raises(KeyboardInterrupt, match="gave up"):
            run(system, "remote", call_id="again")
        assert system.session.events[-1].data["call_id"] == "again"


def exit_as_a_cli_does(args: Any, ctx: Any) -> Any:
    """A body wrapping a command-line entry point: argparse exits with status 2 on bad input."""
    if args["argv"] == ["--bad"]:
        sys.exit(2)
    return {"pid": os.getpid()}


@pytest.mark.parametrize("actor_pool", [0, 1], ids=["task", "actor"])
def test_a_body_that_exits_fails_as_it_does_locally_and_its_worker_lives_on(
    system: ToolSystem, actor_pool: int
) -> None:
    placement = RayPlacement(num_cpus=0, actor_pool=actor_pool)
    params = {"argv": {"type": "json", "required": True}}
    system.tools.register(json_tool("remote", exit_as_a_cli_does, placement, parameters=params))
    system.tools.register(json_tool("local", exit_as_a_cli_does, None, parameters=params))
    before = run(system, "remote", {"argv": []}, call_id="before")
    turn = [
        ToolCall("r", "remote", '{"argv": ["--bad"]}'),
        ToolCall("l", "local", '{"argv": ["--bad"]}'),
    ]

    remote, local = system.execute_batch(ExecuteBatch(calls=turn)).results
    after = run(system, "remote", {"argv": []}, call_id="after")

    assert isinstance(remote, ToolExecutionFailure)
    assert (remote.content, remote.error) == (local.content, local.error)
    if actor_pool:  # the actor, and what it holds, survived the body's exit
        assert after.value["pid"] == before.value["pid"]
    # under the blocking execute(), the exit reaches the caller once the result is recorded
    with pytest.raises(SystemExit):
        run(system, "remote", {"argv": ["--bad"]}, call_id="again")
    assert system.session.events[-1].data["call_id"] == "again"


def test_a_remote_exception_is_raised_here_as_itself_with_its_attributes() -> None:
    placed = json_tool("quota", raise_quota, REMOTE, parameters={"n": {"type": "integer"}})

    class RunContext:  # the fields a placed body reads from the local run context
        call_id = "direct"
        name = "quota"
        agent = None
        signal = AbortController().signal

        def defer_context(self, context: Any) -> None:
            raise AssertionError("no contexts expected")

    with pytest.raises(QuotaError) as info:
        asyncio.run(placed.execute(FrozenDict(n=9), RunContext()))

    assert (info.value.used, info.value.code, str(info.value)) == (
        9,
        "QUOTA",
        "quota exceeded: 9/3",
    )


@pytest.mark.parametrize(
    ("body", "expected", "fields"),
    [
        (open_a_missing_file, FileNotFoundError, ("errno", "strerror", "filename")),
        (decode_bad_bytes, UnicodeDecodeError, ("encoding", "object", "start", "end", "reason")),
        (exit_as_a_cli_does, SystemExit, ("code",)),
    ],
    ids=lambda case: getattr(case, "__name__", ""),
)
def test_a_builtin_exception_is_raised_here_with_the_fields_python_keeps_for_it(
    body: Any, expected: type[BaseException], fields: tuple[str, ...]
) -> None:
    # Python keeps these fields outside the instance's __dict__ (an exit's status, a file
    # error's errno and file name): they come back too, and the exit status is the body's.
    params = {"n": {"type": "integer"}, "argv": {"type": "json"}}
    placed = json_tool("builtin", body, REMOTE, parameters=params)
    arguments = FrozenDict(n=7, argv=["--bad"])
    with pytest.raises(expected) as local:
        body(arguments, None)

    class RunContext:
        call_id = "direct"
        name = "builtin"
        agent = None
        signal = AbortController().signal

        def defer_context(self, context: Any) -> None:
            raise AssertionError("no contexts expected")

    with pytest.raises(expected) as remote:
        asyncio.run(placed.execute(arguments, RunContext()))

    assert type(remote.value) is expected
    assert [getattr(remote.value, f) for f in fields] == [getattr(local.value, f) for f in fields]
    assert str(remote.value) == str(local.value)


def timed(args: Any, ctx: Any) -> Any:
    start = time.time()
    time.sleep(args["ms"] / 1000)
    return {"start": start, "end": time.time(), "pid": os.getpid(), "call_id": ctx.call_id}


def test_a_batch_mixing_remote_and_local_calls_keeps_model_order_and_barriers(
    system: ToolSystem,
) -> None:
    marks: dict[str, tuple[float, float]] = {}

    def local_barrier(args: Any, ctx: Any) -> Any:
        start = time.time()
        time.sleep(0.05)
        marks[ctx.call_id] = (start, time.time())
        return {"pid": os.getpid(), "call_id": ctx.call_id}

    params = {"ms": {"type": "integer"}}
    system.tools.register(json_tool("remote", timed, REMOTE, parameters=params))
    system.tools.register(
        json_tool("barrier", local_barrier, None, is_concurrency_safe=lambda args: False)
    )
    calls = [
        ToolCall("r1", "remote", '{"ms": 300}'),
        ToolCall("r2", "remote", '{"ms": 50}'),
        ToolCall("b1", "barrier", "{}"),
        ToolCall("r3", "remote", '{"ms": 50}'),
        ToolCall("r4", "remote", '{"ms": 50}'),
    ]

    outcome = system.execute_batch(ExecuteBatch(calls=calls))

    assert not any(r.is_error for r in outcome.results), outcome.results
    assert [r.value["call_id"] for r in outcome.results] == ["r1", "r2", "b1", "r3", "r4"]
    by_id = {r.value["call_id"]: r.value for r in outcome.results}
    barrier_start, barrier_end = marks["b1"]
    # the barrier starts after both earlier remote calls ended and before the later ones start
    assert max(by_id["r1"]["end"], by_id["r2"]["end"]) <= barrier_start
    assert barrier_end <= min(by_id["r3"]["start"], by_id["r4"]["start"])
    assert by_id["r1"]["pid"] != os.getpid() and by_id["b1"]["pid"] == os.getpid()
    results = [e.data["call_id"] for e in system.session.events if e.type == "tool/result"]
    assert results == ["r1", "r2", "b1", "r3", "r4"]


def gathered(args: Any, ctx: Any) -> Any:
    """Runs until a second body runs beside it (or every other call has finished, so none can
    come), then 0.2 s more so that a third one, were the bound broken, would be seen. How many
    bodies ran at once is counted from marker files, not from clocks."""
    running = Path(args["dir"]) / "running"
    finished = Path(args["dir"]) / "finished"
    mine = running / ctx.call_id
    mine.touch()
    try:
        at_start = seen = len(list(running.iterdir()))
        deadline = time.monotonic() + WAIT
        while seen < 2 and len(list(finished.iterdir())) < args["calls"] - 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
            seen = max(seen, len(list(running.iterdir())))
        linger = time.monotonic() + 0.2
        while time.monotonic() < linger:
            time.sleep(0.005)
            seen = max(seen, len(list(running.iterdir())))
        return {"at_start": at_start, "seen": seen}
    finally:
        mine.unlink()
        (finished / ctx.call_id).touch()


def test_remote_bodies_hold_the_batch_pool_bound(system: ToolSystem, tmp_path: Path) -> None:
    # Ray alone would run four at once (0.5 CPU each on 2 CPUs); the pool allows two.
    (tmp_path / "running").mkdir()
    (tmp_path / "finished").mkdir()
    system.tools.register(
        json_tool(
            "remote",
            gathered,
            REMOTE,
            parameters={"dir": {"type": "string"}, "calls": {"type": "integer"}},
        )
    )
    arguments = msgspec.json.encode({"dir": str(tmp_path), "calls": 6}).decode()
    calls = [ToolCall(f"r{i}", "remote", arguments) for i in range(6)]

    outcome = system.execute_batch(ExecuteBatch(calls=calls, max_parallel=2))

    counts = [r.value for r in outcome.results]
    assert all(c["at_start"] <= 2 and c["seen"] <= 2 for c in counts), counts
    assert max(c["seen"] for c in counts) == 2, counts


def counter(args: Any, ctx: Any) -> Any:
    # Module state of the actor's worker process: it persists between calls on one actor.
    global _count
    _count = globals().get("_count", 0) + 1
    return {"count": _count, "pid": os.getpid()}


def test_a_stateful_tool_on_an_actor_pool_keeps_its_state_between_calls(
    system: ToolSystem,
) -> None:
    system.tools.register(json_tool("counter", counter, RayPlacement(num_cpus=0, actor_pool=1)))

    values = [run(system, "counter", call_id=f"c{i}").value for i in range(3)]

    assert [v["count"] for v in values] == [1, 2, 3]
    assert len({v["pid"] for v in values}) == 1 and values[0]["pid"] != os.getpid()


def slow_pid(args: Any, ctx: Any) -> Any:
    with open(args["log"], "a") as log:
        log.write(ctx.call_id + "\n")
    time.sleep(0.3)  # long enough that the burst's calls queue up on their actors
    return os.getpid()


def test_calls_on_pool_actors_ray_cannot_place_go_to_the_placed_ones(tmp_path: Path) -> None:
    # Four actors of one CPU each on two CPUs: Ray places two. The calls first sent to the
    # other two have not begun there; they run on the placed ones, each once, and none waits
    # for ever.
    all_cpus_free()  # two, for the pool's first two actors
    log = tmp_path / "runs"
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(
            json_tool(
                "slow_pid",
                slow_pid,
                RayPlacement(num_cpus=1, actor_pool=4, placement_wait_s=1),
                parameters={"log": {"type": "string"}},
            )
        )
        arguments = msgspec.json.encode({"log": str(log)}).decode()
        calls = [ToolCall(f"c{i}", "slow_pid", arguments) for i in range(8)]

        outcome = system.execute_batch(ExecuteBatch(calls=calls, max_parallel=8))
    finally:
        system.stop()
        del system
        gc.collect()  # the pool's actors end with the tool's definition: the CPUs are free

    assert [r.is_error for r in outcome.results] == [False] * 8, outcome.results
    pids = {r.value for r in outcome.results}
    assert len(pids) <= 2 and os.getpid() not in pids
    assert sorted(log.read_text().split()) == sorted(call.call_id for call in calls)
    deadline = time.monotonic() + WAIT
    while any(os.path.exists(f"/proc/{pid}") for pid in pids):
        assert time.monotonic() < deadline, "the pool's actors are still alive"
        time.sleep(0.05)


def three_calls_of_too_big(
    system: ToolSystem, *, actor_pool: int, wait_s: float, timeout_ms: int
) -> BatchOutcome:
    """A batch of three calls of a tool whose pool actors need three CPUs, on the two-CPU
    instance (no node can place one), under a timeout that only bounds the test."""
    system.tools.register(
        json_tool(
            "too_big",
            worker_pid,
            RayPlacement(num_cpus=3, actor_pool=actor_pool, placement_wait_s=wait_s),
            timeout_ms=timeout_ms,
        )
    )
    system.tools.on_execute(timeout_policy())
    calls = [ToolCall(f"c{i}", "too_big", "{}") for i in range(3)]
    return system.execute_batch(ExecuteBatch(calls=calls, max_parallel=3))


def test_calls_on_a_pool_no_node_can_place_fail_once_placement_wait_s_has_passed(
    system: ToolSystem,
) -> None:
    # Three CPUs per actor on a two-CPU instance: no actor of the pool can ever be placed.
    # The timeout only bounds the test: the calls must not wait for it.
    outcome = three_calls_of_too_big(system, actor_pool=2, wait_s=0.5, timeout_ms=20_000)

    assert [r.error.info.code for r in outcome.results] == ["REMOTE_UNAVAILABLE"] * 3
    assert outcome.results[0].error.message == (
        'cannot run tool "too_big" on Ray: Ray placed no actor of its pool within 0.5s'
        " (placement_wait_s) and no node of the cluster (1 alive) has the resources one"
        " needs: CPU=3"
    )


def test_calls_queued_on_a_pool_no_node_can_place_fail_after_one_placement_wait(
    system: ToolSystem,
) -> None:
    # One actor of three CPUs on a two-CPU instance: the calls queue on it. The first that
    # gives up gives the actor up too; those queued behind it have waited as long, and must
    # not wait another ``placement_wait_s`` for a fresh actor no node can place either.
    # The timeout is past one wait, short of two.
    outcome = three_calls_of_too_big(system, actor_pool=1, wait_s=4, timeout_ms=7_000)

    assert [r.error.info.code for r in outcome.results] == ["REMOTE_UNAVAILABLE"] * 3
    assert {r.error.message for r in outcome.results} == {
        'cannot run tool "too_big" on Ray: Ray placed no actor of its pool within 4s'
        " (placement_wait_s) and no node of the cluster (1 alive) has the resources one"
        " needs: CPU=3"
    }


class CpuHolder:
    """Holds one CPU of the instance for as long as it lives."""

    def ready(self) -> bool:
        return True


def test_a_pool_actor_ray_could_not_place_takes_calls_once_ray_places_it(tmp_path: Path) -> None:
    # One CPU held elsewhere: the pool's second actor waits, and its calls go to the first.
    # Once that CPU is free Ray places the slot's actor, and the slot takes calls again.
    import ray

    all_cpus_free()  # the layout below is the test's: one CPU held, one for the pool
    holder = ray.remote(CpuHolder).options(num_cpus=1).remote()
    ray.get(holder.ready.remote(), timeout=WAIT)
    log = tmp_path / "runs"
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(
            json_tool(
                "slow_pid",
                slow_pid,
                RayPlacement(num_cpus=1, actor_pool=2, placement_wait_s=0.5),
                parameters={"log": {"type": "string"}},
            )
        )
        arguments = msgspec.json.encode({"log": str(log)}).decode()
        calls = [ToolCall(f"c{i}", "slow_pid", arguments) for i in range(4)]
        crowded = system.execute_batch(ExecuteBatch(calls=calls, max_parallel=4)).results
        ray.kill(holder)

        pids: set[int] = set()
        deadline = time.monotonic() + WAIT
        while len(pids) < 2 and time.monotonic() < deadline:
            pair = system.execute_batch(ExecuteBatch(calls=calls[:2], max_parallel=2)).results
            assert not any(r.is_error for r in pair), [r.error.message for r in pair if r.is_error]
            pids = {r.value for r in pair}
    finally:
        ray.kill(holder)
        system.stop()
        del system
        gc.collect()  # the pool's actors end with the tool's definition: the CPUs are free

    assert not any(r.is_error for r in crowded) and len({r.value for r in crowded}) == 1
    assert len(pids) == 2


def test_a_call_aborted_while_its_actor_waits_to_be_placed_leaves_the_pool_usable(
    system: ToolSystem,
) -> None:
    # Ray runs no later call on an actor a call of which was cancelled before it was placed:
    # kept, that actor would hold every later call of the pool for ever.
    import ray

    all_cpus_free()  # the holder below takes both
    holder = ray.remote(CpuHolder).options(num_cpus=2).remote()
    ray.get(holder.ready.remote(), timeout=WAIT)
    system.tools.register(json_tool("pid", worker_pid, RayPlacement(num_cpus=1, actor_pool=1)))
    controller = AbortController()
    with ThreadPoolExecutor(1) as pool:
        try:
            waiting = pool.submit(
                system.execute,
                ExecuteCall(call_id="c1", name="pid", arguments={}, signal=controller.signal),
            )
            time.sleep(0.5)  # its actor waits for a CPU
            controller.abort()
            aborted = waiting.result(WAIT)
        finally:
            ray.kill(holder)
        after = pool.submit(run, system, "pid", None, "c2").result(WAIT)

    assert aborted.error.info.code == "ABORTED"
    assert not after.is_error, after.content


def test_tools_that_opt_into_the_default_use_the_options_set_at_call_time(
    system: ToolSystem,
) -> None:
    def cpus(args: Any, ctx: Any) -> Any:
        import ray

        return ray.get_runtime_context().get_assigned_resources().get("CPU", 0)

    system.tools.register(json_tool("cpus", cpus, RAY_DEFAULT))
    previous = set_ray_default(RayPlacement(num_cpus=0.25))
    try:
        first = run(system, "cpus")
        set_ray_default(RayPlacement(num_cpus=0.5))
        second = run(system, "cpus", call_id="c2")
    finally:
        set_ray_default(previous)

    assert (first.value, second.value) == (0.25, 0.5)


def worker_pid(args: Any, ctx: Any) -> Any:
    return os.getpid()


def test_a_new_default_releases_the_actors_of_the_default_it_replaces(
    system: ToolSystem,
) -> None:
    # Kept alive, the old default's actors would hold their resources for ever, and those of
    # the new default might never be placed.
    system.tools.register(json_tool("pid", worker_pid, RAY_DEFAULT))
    previous = set_ray_default(RayPlacement(num_cpus=0, actor_pool=1))
    try:
        first = run(system, "pid").value
        set_ray_default(RayPlacement(num_cpus=0, actor_pool=1))
        second = run(system, "pid", call_id="c2").value
    finally:
        set_ray_default(previous)

    assert first != second
    deadline = time.monotonic() + WAIT
    while os.path.exists(f"/proc/{first}"):
        assert time.monotonic() < deadline, "the replaced default's actor is still alive"
        time.sleep(0.05)


def test_a_body_that_cannot_be_sent_to_ray_fails_the_call_as_remote_unavailable(
    system: ToolSystem,
) -> None:
    lock = threading.Lock()  # a closure Ray cannot pickle

    def holds_a_lock(args: Any, ctx: Any) -> Any:
        with lock:
            return 1

    system.tools.register(json_tool("locked", holds_a_lock, REMOTE))

    result = run(system, "locked")

    assert result.error.info.code == "REMOTE_UNAVAILABLE"
    # What could not be pickled, and where the body holds it (not Ray's internal wrapper).
    assert result.error.message == (
        'cannot run tool "locked" on Ray: the body could not be sent to Ray: '
        "cannot pickle '_thread.lock' object (in holds_a_lock: lock)"
    )


@pytest.mark.parametrize("actor_pool", [0, 1])
def test_a_body_its_worker_cannot_load_fails_the_call_naming_what_is_missing_and_where(
    system: ToolSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, actor_pool: int
) -> None:
    # A body of a module only this process can import (not installed on the nodes, not sent
    # by value): the worker cannot unpickle it, and the body never runs.
    (tmp_path / "only_here.py").write_text("def body(args, ctx):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "only_here", raising=False)
    import only_here

    placement = RayPlacement(num_cpus=0, actor_pool=actor_pool)
    system.tools.register(json_tool("elsewhere", only_here.body, placement))

    results = [run(system, "elsewhere", call_id=f"c{n}") for n in range(2)]

    for result in results:  # the next call tries again (a fresh actor), and fails the same way
        assert result.error.info.code == "REMOTE_UNAVAILABLE"
        message = result.error.message
        assert message.startswith('cannot run tool "elsewhere" on Ray: ')
        assert message.endswith(": ModuleNotFoundError: No module named 'only_here'")
        assert "pid=" in message and "\x1b" not in message
    monkeypatch.delitem(sys.modules, "only_here")


def test_a_placement_must_return_an_async_body() -> None:
    class Inline:
        def place(self, tool: str, execute: Any) -> Any:
            return execute

    with pytest.raises(TypeError, match="must return an async def body"):
        json_tool("inline", where, Inline())
    with pytest.raises(ValueError, match="actor_pool must be an int >= 0"):
        RayPlacement(actor_pool=-1)
    with pytest.raises(ValueError, match="resources must map str names to numbers >= 0"):
        RayPlacement(resources=["gpu_box"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"num_cpus": True}, TypeError, "num_cpus must be a finite number >= 0, got bool"),
        ({"settle_s": "10"}, TypeError, "settle_s must be a finite number >= 0, got str"),
        ({"num_gpus": -1}, ValueError, "num_gpus must be a finite number >= 0, got -1"),
        ({"actor_pool": 2.0}, TypeError, "actor_pool must be an int >= 0, got float"),
    ],
    ids=["bool", "str", "negative", "float-pool"],
)
def test_a_bad_placement_option_says_what_it_got(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^RayPlacement: {message}$"):
        RayPlacement(**options)


def test_a_misspelt_placement_option_names_the_one_most_likely_meant() -> None:
    with pytest.raises(
        TypeError,
        match=r"^RayPlacement\(\) got an unexpected keyword argument 'num_cpu'\. "
        r"Did you mean 'num_cpus'\?$",
    ):
        RayPlacement(num_cpu=2)  # type: ignore[call-arg]


def test_a_placement_is_data_that_cannot_change_after_its_check() -> None:
    given = {"big_memory": 1}
    env = {"env_vars": {"MODE": "fast"}, "pip": ["requests"]}
    placement = RayPlacement(resources=given, runtime_env=env)
    with pytest.raises(TypeError, match="immutable"):
        placement.resources["big_memory"] = -5  # type: ignore[index]
    with pytest.raises(TypeError, match="immutable"):
        placement.runtime_env["env_vars"]["MODE"] = "slow"  # type: ignore[index]
    with pytest.raises(TypeError, match="immutable"):
        placement.runtime_env["pip"].append("evil")  # type: ignore[index]
    given["big_memory"] = -5  # the caller's own dicts are not held
    env["env_vars"]["MODE"] = "slow"
    assert placement.resources == {"big_memory": 1}
    assert placement.runtime_env == {"env_vars": {"MODE": "fast"}, "pip": ["requests"]}

    # Hashable by value, as it compares: usable as a key, in a set, as a cache key.
    same = RayPlacement(
        resources={"big_memory": 1.0},
        runtime_env={"pip": ["requests"], "env_vars": {"MODE": "fast"}},
    )
    assert same == placement and hash(same) == hash(placement)
    assert {placement: "big"}[same] == "big"
    assert len({RayPlacement(), RayPlacement(), RayPlacement(num_cpus=2)}) == 2
    # Ray gets plain copies of its options, in the types it was given them.
    options = placement._options()
    assert type(options["runtime_env"]["pip"]) is list
    assert type(options["runtime_env"]["env_vars"]) is dict


async def woken_from_another_thread(args: Any, ctx: Any) -> Any:
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[str] = loop.create_future()
    threading.Timer(0.01, loop.call_soon_threadsafe, (woken.set_result, "woken")).start()
    return await woken


def test_a_threads_loop_still_wakes_after_another_thread_forked_a_child(
    system: ToolSystem,
) -> None:
    # Ray starts its processes from a thread of its own; the child of such a fork must not
    # close the other threads' private loops, whose epoll instances it shares with us.
    system.tools.register(json_tool("wake", woken_from_another_thread, None))
    call = ExecuteCall(call_id="c1", name="wake", arguments={})
    caller = ThreadPoolExecutor(max_workers=1)  # one thread, so one private loop
    try:
        assert caller.submit(system.execute, call).result(WAIT).value == "woken"
        forker = threading.Thread(
            target=subprocess.run,
            args=([sys.executable, "-c", "pass"],),
            kwargs={"preexec_fn": lambda: None, "check": True},
        )
        forker.start()
        forker.join()
        assert caller.submit(system.execute, call).result(WAIT).value == "woken"
    finally:
        caller.shutdown(wait=False)


def test_a_typed_tool_runs_its_function_on_ray_with_typed_arguments_validated_here(
    system: ToolSystem,
) -> None:
    from dsh_tools import tool

    # The function travels as Ray pickles it (this module by value); its annotations are
    # strings here, read again on the worker, where the constraint is rebuilt.
    @tool(placement=REMOTE, concurrency_safe=True)
    def norm(point: dict[str, int], scale: Annotated[int, msgspec.Meta(ge=1)] = 1) -> Any:
        """Manhattan norm of a point, scaled, and where it was computed."""
        return {"norm": (abs(point["x"]) + abs(point["y"])) * scale, "pid": os.getpid()}

    system.tools.register(norm)

    result = run(system, "norm", {"point": {"x": 3, "y": -4}, "scale": 2})
    assert not result.is_error, result
    assert result.value["norm"] == 14
    assert result.value["pid"] != os.getpid()

    # A bad call is refused by the local validation: it never reaches a worker.
    bad = run(system, "norm", {"point": {"x": 3, "y": 0}, "scale": 0}, call_id="c2")
    assert bad.is_error
    assert bad.error.info.code == "INVALID_ARGS"
    assert "arguments.scale" in bad.error.message


def leave_a_mark(args: Any, ctx: Any) -> Any:
    """A side effect: writes the file ``path`` (it must never run where no node can place it)."""
    Path(args["path"]).write_text(str(os.getpid()))
    return os.getpid()


@pytest.mark.parametrize(
    ("placement", "needs"),
    [
        (RayPlacement(num_cpus=3, placement_wait_s=0.5), "CPU=3"),
        (
            RayPlacement(num_cpus=0, resources={"nobody_offers": 1}, placement_wait_s=0.5),
            "nobody_offers=1",
        ),
    ],
    ids=["more-cpus-than-any-node", "a-resource-no-node-offers"],
)
def test_a_task_no_node_can_place_fails_once_placement_wait_s_has_passed_and_never_runs(
    system: ToolSystem, tmp_path: Path, placement: RayPlacement, needs: str
) -> None:
    # Ray would keep such a task in its queue for ever. The timeout only bounds the test: the
    # call must not wait for it.
    marker = tmp_path / "ran"
    system.tools.register(
        json_tool(
            "too_big",
            leave_a_mark,
            placement,
            parameters={"path": {"type": "string", "required": True}},
            timeout_ms=20_000,
        )
    )
    system.tools.on_execute(timeout_policy())
    result = run(system, "too_big", {"path": str(marker)})

    assert result.error.info.code == "REMOTE_UNAVAILABLE"
    assert result.error.message == (
        'cannot run tool "too_big" on Ray: Ray placed no worker for the call within 0.5s'
        " (placement_wait_s) and no node of the cluster (1 alive) has the resources one"
        f" needs: {needs}"
    )
    assert not marker.exists()


def test_a_task_queued_behind_others_on_a_cluster_that_can_place_it_keeps_waiting(
    system: ToolSystem, tmp_path: Path
) -> None:
    # Both CPUs held elsewhere for longer than placement_wait_s: the node could place the
    # task, so it waits (as Ray would), and runs once a CPU is free.
    import ray

    all_cpus_free()  # the holder below takes both
    holder = ray.remote(CpuHolder).options(num_cpus=2).remote()
    ray.get(holder.ready.remote(), timeout=WAIT)
    marker = tmp_path / "ran"
    system.tools.register(
        json_tool(
            "queued",
            leave_a_mark,
            RayPlacement(num_cpus=1, placement_wait_s=0.2),
            parameters={"path": {"type": "string", "required": True}},
        )
    )
    with ThreadPoolExecutor(1) as pool:
        try:
            waiting = pool.submit(run, system, "queued", {"path": str(marker)})
            time.sleep(2.5)  # several checks past placement_wait_s, the CPUs still held
            held_back = not waiting.done() and not marker.exists()
        finally:
            ray.kill(holder)
        result = waiting.result(WAIT)

    assert held_back
    assert not result.is_error, result.content
    assert result.value == int(marker.read_text())
