"""Aborts, timeouts and lost workers for bodies placed on a real local Ray instance.

An abort or a deadline cancels the Ray task (``ray.cancel``; forced after the grace when the
body does not stop) and the call settles as ``ABORTED`` / ``TOOL_TIMEOUT`` exactly as a local
call; a worker process that dies under a call settles it as ``REMOTE_WORKER_LOST``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, Logs, spawn
from ray_support import WAIT as WORKER_START
from ray_support import (  # noqa: F401
    cut_connections,
    json_tool,
    ray_instance,
    wait_for_file,
)

from dsh_tools import (
    AbortController,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolSystem,
    timeout_policy,
)
from dsh_tools.distributed import RayPlacement
from dsh_tools.distributed._ray_runners import ActorPool

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_instance")]

QUICK = RayPlacement(num_cpus=0.5, cancel_grace_s=5.0)
STUBBORN = RayPlacement(num_cpus=0.5, cancel_grace_s=0.2)
PATH = {"dir": {"type": "string", "required": True}}


def mark(folder: str, name: str, text: str) -> None:
    Path(folder, name).write_text(text)


def cooperative(args: Any, ctx: Any) -> Any:
    """Loops in Python (so Ray's interrupt lands) and records that it was interrupted."""
    mark(args["dir"], "started", str(os.getpid()))
    try:
        while True:
            time.sleep(0.01)
    except KeyboardInterrupt:
        mark(args["dir"], "interrupted", "yes")
        raise


def stuck(args: Any, ctx: Any) -> Any:
    """Blocks in one long C call: an interrupt cannot land, only forcing the worker ends it."""
    mark(args["dir"], "started", str(os.getpid()))
    time.sleep(60)


async def async_sleeper(args: Any, ctx: Any) -> Any:
    mark(args["dir"], "started", str(os.getpid()))
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        mark(args["dir"], "cancelled", "yes")
        raise


def request(name: str, folder: Path, signal: Any = None, call_id: str = "c1") -> ExecuteCall:
    return ExecuteCall(call_id=call_id, name=name, arguments={"dir": str(folder)}, signal=signal)


def gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_an_abort_interrupts_the_remote_body_and_the_call_settles_aborted(
    system: ToolSystem, tmp_path: Path, logs: Logs
) -> None:
    system.tools.register(json_tool("loop", cooperative, QUICK, parameters=PATH))
    controller = AbortController()

    pending = spawn(system, request("loop", tmp_path, controller.signal))
    wait_for_file(tmp_path / "started")
    controller.abort()
    result = pending.result(WAIT)

    assert result.error.info.code == "ABORTED" and result.error.message == "tool call aborted"
    assert (tmp_path / "interrupted").read_text() == "yes"  # stopped before the call settled
    assert not logs.warnings  # it stopped within the grace: nothing was forced
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


def test_a_deadline_forces_a_body_that_ignores_cancellation_and_settles_tool_timeout(
    system: ToolSystem, tmp_path: Path, logs: Logs
) -> None:
    system.tools.register(json_tool("stuck", stuck, STUBBORN, parameters=PATH, timeout_ms=500))
    system.tools.on_execute(timeout_policy())

    result = system.execute(request("stuck", tmp_path))

    assert result.error.info.code == "TOOL_TIMEOUT"
    assert result.error.message == "tool call timed out after 500ms"
    assert logs.warnings == ["remote body ignored cancellation; forcing its worker to exit"]
    assert gone(int((tmp_path / "started").read_text()))


def test_an_async_remote_body_is_cancelled_like_a_local_async_body(
    system: ToolSystem, tmp_path: Path
) -> None:
    system.tools.register(json_tool("nap", async_sleeper, QUICK, parameters=PATH))
    controller = AbortController()

    pending = spawn(system, request("nap", tmp_path, controller.signal))
    wait_for_file(tmp_path / "started")
    controller.abort("user pressed stop")
    result = pending.result(WAIT)

    assert result.error.info.code == "ABORTED"
    assert (tmp_path / "cancelled").read_text() == "yes"


def test_cancelling_the_awaiting_task_cancels_the_remote_body(
    system: ToolSystem, tmp_path: Path
) -> None:
    system.tools.register(json_tool("loop", cooperative, QUICK, parameters=PATH))

    async def scenario() -> None:
        task = asyncio.ensure_future(system.execute_async(request("loop", tmp_path)))
        while not (tmp_path / "started").exists():
            await asyncio.sleep(0.02)
        task.cancel()
        # Whether the task then re-raises CancelledError or returns the aborted result is the
        # pipeline's rule; here the remote body must have been stopped before it settles.
        done, _ = await asyncio.wait({task}, timeout=WAIT)
        assert done == {task}

    asyncio.run(scenario())

    assert (tmp_path / "interrupted").read_text() == "yes"
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


def test_an_aborted_batch_cancels_its_remote_calls_and_settles_every_one(
    system: ToolSystem, tmp_path: Path
) -> None:
    def loop_in(sub: str) -> str:
        (tmp_path / sub).mkdir()
        return '{"dir": "%s"}' % (tmp_path / sub)

    system.tools.register(json_tool("loop", cooperative, QUICK, parameters=PATH))
    controller = AbortController()
    batch = ExecuteBatch(
        calls=[ToolCall("a", "loop", loop_in("a")), ToolCall("b", "loop", loop_in("b"))],
        signal=controller.signal,
    )

    async def scenario() -> Any:
        running = asyncio.get_running_loop().run_in_executor(None, system.execute_batch, batch)
        while not all((tmp_path / s / "started").exists() for s in "ab"):
            await asyncio.sleep(0.02)
        controller.abort()
        return await asyncio.wait_for(running, WAIT)

    outcome = asyncio.run(scenario())

    assert [r.error.info.code for r in outcome.results] == ["ABORTED", "ABORTED"]
    assert all((tmp_path / s / "interrupted").exists() for s in "ab")


def shrugs_off(args: Any, ctx: Any) -> Any:
    """Ignores Ray's interrupts until the test releases it (a ``release`` file)."""
    mark(args["dir"], "started", str(os.getpid()))
    release = Path(args["dir"], "release")
    while True:
        try:
            while not release.exists():
                time.sleep(0.01)
            return None
        except KeyboardInterrupt:
            continue


def test_every_call_of_an_aborted_batch_is_cancelled_at_once_however_many_ignore_it(
    system: ToolSystem, tmp_path: Path
) -> None:
    # Eight calls wait out a long grace; the ninth, last in the batch, must be cancelled at
    # the abort too, not once a thread that waits for one of the eight comes free.
    patient = RayPlacement(num_cpus=0, cancel_grace_s=60.0)
    system.tools.register(json_tool("shrug", shrugs_off, patient, parameters=PATH))
    system.tools.register(json_tool("loop", cooperative, patient, parameters=PATH))
    folders = [tmp_path / f"f{n}" for n in range(9)]
    calls = []
    for n, folder in enumerate(folders):
        folder.mkdir()
        arguments = json.dumps({"dir": str(folder)})
        calls.append(ToolCall(f"c{n}", "loop" if n == 8 else "shrug", arguments))
    controller = AbortController()
    batch = ExecuteBatch(calls=calls, max_parallel=9, signal=controller.signal)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute_batch, batch)
        for folder in folders:
            wait_for_file(folder / "started")
        controller.abort()
        try:
            assert wait_for_file(folders[8] / "interrupted") == "yes"
        finally:
            for folder in folders[:8]:
                (folder / "release").write_text("go")
        outcome = pending.result(WAIT)

    assert [r.error.info.code for r in outcome.results] == ["ABORTED"] * 9


def test_a_killed_worker_process_settles_the_call_as_remote_worker_lost(
    system: ToolSystem, tmp_path: Path
) -> None:
    system.tools.register(json_tool("stuck", stuck, QUICK, parameters=PATH))

    pending = spawn(system, request("stuck", tmp_path))
    os.kill(int(wait_for_file(tmp_path / "started")), signal.SIGKILL)
    result = pending.result(WAIT)

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.info.name == "RemoteWorkerLostError"
    assert result.error.message.startswith(  # what happened, and what it means for the body
        'remote worker running tool "stuck" died before the call settled; the body may or may'
        " not have run, and is not run again: The worker died unexpectedly while executing"
        " this task."
    )


def worker_pid(args: Any, ctx: Any) -> Any:
    return os.getpid()


def idle_siblings(pid: int) -> list[int]:
    """The idle Ray worker processes started by the same parent (the raylet) as ``pid``."""

    def parent(of: str) -> str:
        return Path(f"/proc/{of}/stat").read_text().rpartition(")")[2].split()[1]

    found = []
    raylet = parent(str(pid))
    for entry in os.listdir("/proc"):
        try:
            idle = Path(f"/proc/{entry}/cmdline").read_bytes().startswith(b"ray::IDLE")
            if entry.isdigit() and idle and parent(entry) == raylet:
                found.append(int(entry))
        except OSError:  # not a process, or one that ended meanwhile
            continue
    return found


def test_a_task_whose_worker_died_just_before_the_call_says_the_body_may_not_have_begun(
    system: ToolSystem,
) -> None:
    # Ray leases the call an idle worker process that has just been killed, and reports it as
    # it reports a worker that died under the call: the message must not claim the body ran.
    system.tools.register(json_tool("worker_pid", worker_pid, QUICK))
    pid = system.execute(ExecuteCall(call_id="c1", name="worker_pid", arguments={})).value
    time.sleep(0.3)  # back among the idle workers
    killed = idle_siblings(pid)
    for idle in killed:
        os.kill(idle, signal.SIGKILL)
    result = system.execute(ExecuteCall(call_id="c2", name="worker_pid", arguments={}))

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message.startswith(
        'remote worker running tool "worker_pid" died before the call settled; the body may'
        " or may not have run, and is not run again: "
    )
    # The Ray instance is the session's: leave it with no dead worker among its idle ones, or
    # the next test's first call or actor may be leased one.
    deadline = time.monotonic() + WAIT
    while any(Path(f"/proc/{idle}").exists() for idle in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    for attempt in range(len(killed) + 3):
        after = ExecuteCall(call_id=f"after-{attempt}", name="worker_pid", arguments={})
        if not system.execute(after).is_error:
            break


def tally(args: Any, ctx: Any) -> Any:
    """A stateful body: counts its calls in its actor's process; may then wait to be stopped."""
    global _calls
    _calls = globals().get("_calls", 0) + 1
    if args.get("then") == "wait-for-abort":
        mark(args["dir"], "started", str(os.getpid()))
        while not ctx.signal.aborted:
            time.sleep(0.01)
        mark(args["dir"], "saw-abort", "yes")
    elif args.get("then") == "hang":
        mark(args["dir"], "started", str(os.getpid()))
        time.sleep(60)
    elif args.get("then") == "busy":
        mark(args["dir"], "started", str(os.getpid()))
        time.sleep(2)
    return {"calls": _calls, "pid": os.getpid()}


def test_a_stateful_actor_observes_aborts_and_a_lost_actor_is_replaced(
    system: ToolSystem, tmp_path: Path
) -> None:
    params = {"dir": {"type": "string"}, "then": {"type": "string"}}
    pool = RayPlacement(num_cpus=0, actor_pool=1, cancel_grace_s=5.0)
    system.tools.register(json_tool("tally", tally, pool, parameters=params))

    def tally_call(then: str, sub: str, signal: Any = None) -> ExecuteCall:
        (tmp_path / sub).mkdir()
        arguments = {"dir": str(tmp_path / sub), "then": then}
        return ExecuteCall(call_id=sub, name="tally", arguments=arguments, signal=signal)

    first = system.execute(tally_call("return", "first"))
    controller = AbortController()
    pending = spawn(system, tally_call("wait-for-abort", "aborted", controller.signal))
    wait_for_file(tmp_path / "aborted" / "started")
    controller.abort()
    aborted = pending.result(WAIT)
    after_abort = system.execute(tally_call("return", "after-abort"))

    pending = spawn(system, tally_call("hang", "killed"))
    actor_pid = int(wait_for_file(tmp_path / "killed" / "started"))
    os.kill(actor_pid, signal.SIGKILL)
    killed = pending.result(WAIT)
    replaced = system.execute(tally_call("return", "replaced"))

    assert first.value["calls"] == 1
    assert aborted.error.info.code == "ABORTED"
    assert (tmp_path / "aborted" / "saw-abort").exists()
    # the actor survived a cooperative abort with its state ...
    assert after_abort.value == {"calls": 3, "pid": first.value["pid"]}
    # ... and a dead actor is replaced by a fresh one (its state starts over)
    assert killed.error.info.code == "REMOTE_WORKER_LOST"
    assert killed.error.message.startswith(  # what happened, and to which process
        'remote worker running tool "tally" died before the call settled; the body may or may'
        " not have run, and is not run again: The actor died unexpectedly before finishing"
        f" this task (pid={actor_pid}, ip="
    )
    assert replaced.value["calls"] == 1 and replaced.value["pid"] != first.value["pid"]


def test_an_actor_that_died_while_idle_is_replaced_before_the_next_call_reaches_it(
    system: ToolSystem,
) -> None:
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("tally", tally, pool, parameters={"then": {"type": "string"}}))
    first = system.execute(ExecuteCall(call_id="c1", name="tally", arguments={}))
    os.kill(first.value["pid"], signal.SIGKILL)  # nothing runs on it: its slot is idle
    assert gone(first.value["pid"])

    # The call never reached the dead actor (however soon after its last call it died), so
    # the body has not run: it runs on a fresh one.
    after = system.execute(ExecuteCall(call_id="c2", name="tally", arguments={}))

    assert not after.is_error, after.content
    assert after.value["calls"] == 1 and after.value["pid"] != first.value["pid"]


def test_calls_queued_behind_a_call_whose_actor_dies_run_on_a_fresh_actor(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The actor runs one call at a time: the calls queued behind the one it dies under had
    # not begun, so they run on the actor that replaces it; only the call it died under is lost.
    params = {"dir": {"type": "string"}, "then": {"type": "string"}}
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("tally", tally, pool, parameters=params))
    hang = ExecuteCall(call_id="c1", name="tally", arguments={"dir": str(tmp_path), "then": "hang"})
    pending = spawn(system, hang)
    pid = int(wait_for_file(tmp_path / "started"))
    queued = [
        spawn(system, ExecuteCall(call_id=f"q{n}", name="tally", arguments={})) for n in range(3)
    ]
    time.sleep(0.5)  # submitted to the busy actor by now
    os.kill(pid, signal.SIGKILL)
    lost = pending.result(WAIT)
    # Before they run, the dead actor's record is read on its node and a fresh actor is made:
    # two Ray worker processes may start, one after the other, and each may take seconds on a
    # loaded machine.
    moved = [call.result(2 * WORKER_START) for call in queued]

    assert lost.error.info.code == "REMOTE_WORKER_LOST"
    assert all(not result.is_error for result in moved), [r.content for r in moved]
    assert sorted(result.value["calls"] for result in moved) == [1, 2, 3]  # one fresh actor
    assert {result.value["pid"] for result in moved} - {pid} == {moved[0].value["pid"]}


def logged(args: Any, ctx: Any) -> Any:
    """Logs its ``tag`` as it starts, then takes ``seconds``: the log says what ran how often."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{args['tag']}\n")
    time.sleep(args.get("seconds", 0))
    return {"pid": os.getpid()}


def test_calls_on_an_actor_out_of_reach_for_a_moment_fail_as_lost_and_never_run_twice(
    system: ToolSystem, tmp_path: Path
) -> None:
    # A broken connection to the actor (its node's network hiccuping) is no death: Ray cannot
    # tell whether the calls it had sent ran, or run yet. They fail as lost, are never sent
    # again to a fresh actor (a side effect would happen twice), and the actor keeps its slot.
    params = {"dir": {"type": "string"}, "tag": {"type": "string"}, "seconds": {"type": "number"}}
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("logged", logged, pool, parameters=params))

    def logged_call(tag: str, seconds: float = 0) -> ExecuteCall:
        arguments = {"dir": str(tmp_path), "tag": tag, "seconds": seconds}
        return ExecuteCall(call_id=tag, name="logged", arguments=arguments)

    pid = system.execute(logged_call("first")).value["pid"]
    running = spawn(system, logged_call("running", 2.0))
    deadline = time.monotonic() + WAIT
    while "running" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    queued = [spawn(system, logged_call(f"queued{n}")) for n in range(2)]
    time.sleep(0.5)  # sent to the busy actor by now
    assert cut_connections(pid) > 0
    cut_off = running.result(WAIT)
    behind = [call.result(WAIT) for call in queued]
    after = system.execute(logged_call("after"))  # the actor runs it after all sent before

    assert cut_off.error.info.code == "REMOTE_WORKER_LOST"
    assert cut_off.error.message.startswith('remote worker running tool "logged" was lost: ')
    assert "unavailable" in cut_off.error.message
    assert all(r.error.info.code == "REMOTE_WORKER_LOST" for r in behind if r.is_error)
    runs = Counter((tmp_path / "log").read_text().split())
    assert max(runs.values()) == 1, runs
    assert after.value["pid"] == pid  # the same actor, still in its slot


def hang_on_one_actor(
    system: ToolSystem, folder: Path
) -> tuple[AbortController, concurrent.futures.Future[Any], int]:
    """``tally`` on a pool of one actor that is killed 0.2 s after an abort it ignores, and a
    call to it hanging there: its controller, its pending result and the actor's pid."""
    params = {"dir": {"type": "string"}, "then": {"type": "string"}}
    pool = RayPlacement(num_cpus=0, actor_pool=1, cancel_grace_s=0.2)
    system.tools.register(json_tool("tally", tally, pool, parameters=params))
    controller = AbortController()
    arguments = {"dir": str(folder), "then": "hang"}
    hang = ExecuteCall(call_id="c1", name="tally", arguments=arguments, signal=controller.signal)
    pending = spawn(system, hang)
    return controller, pending, int(wait_for_file(folder / "started"))


@pytest.mark.parametrize("placement_heard", ["at once", "late"])
def test_an_actor_that_ignores_an_abort_is_killed_after_the_grace_and_replaced(
    system: ToolSystem,
    tmp_path: Path,
    logs: Logs,
    monkeypatch: pytest.MonkeyPatch,
    placement_heard: str,
) -> None:
    if placement_heard == "late":
        # Under load the actor's body may begin (it answered ``ready`` first) before the
        # harness has taken that answer in: the call is running, not waiting to be placed.
        heard_placed = ActorPool.placed

        def heard_late(pool: ActorPool, index: int, made: int) -> None:
            time.sleep(1.0)
            heard_placed(pool, index, made)

        monkeypatch.setattr(ActorPool, "placed", heard_late)
    controller, pending, pid = hang_on_one_actor(system, tmp_path)
    controller.abort()
    result = pending.result(WAIT)
    fresh = system.execute(ExecuteCall(call_id="c2", name="tally", arguments={}))

    assert result.error.info.code == "ABORTED"
    assert logs.warnings == ["remote body on an actor ignored cancellation; replacing the actor"]
    assert gone(pid)
    assert fresh.value["calls"] == 1 and fresh.value["pid"] != pid


def test_calls_queued_behind_a_stubborn_call_run_on_the_actor_that_replaces_it(
    system: ToolSystem, tmp_path: Path, logs: Logs
) -> None:
    # The actor runs one call at a time: a call queued behind the stubborn one has not
    # started when the actor is killed, so it is moved to the fresh actor rather than lost.
    controller, pending, pid = hang_on_one_actor(system, tmp_path)
    queued = spawn(system, ExecuteCall(call_id="c2", name="tally", arguments={}))
    time.sleep(0.5)  # submitted to the busy actor by now
    controller.abort()
    result = pending.result(WAIT)
    moved = queued.result(WAIT)

    assert result.error.info.code == "ABORTED"
    assert not moved.is_error, moved.content
    assert moved.value["calls"] == 1 and moved.value["pid"] != pid  # a fresh actor ran it
    assert logs.warnings == ["remote body on an actor ignored cancellation; replacing the actor"]


def test_aborting_a_call_queued_behind_a_running_one_leaves_that_call_and_its_actor_alone(
    system: ToolSystem, tmp_path: Path, logs: Logs
) -> None:
    # The queued call has not begun: its abort must not kill the actor under the call ahead
    # of it, which would lose that call's state, or run it twice on a fresh actor.
    params = {"dir": {"type": "string"}, "then": {"type": "string"}}
    # The call ahead runs 2 s, past the grace after the abort.
    pool = RayPlacement(num_cpus=0, actor_pool=1, cancel_grace_s=1.0)
    system.tools.register(json_tool("tally", tally, pool, parameters=params))
    for sub in ("busy", "queued"):
        (tmp_path / sub).mkdir()
    busy_call = ExecuteCall(
        call_id="busy", name="tally", arguments={"dir": str(tmp_path / "busy"), "then": "busy"}
    )
    busy = spawn(system, busy_call)
    pid = int(wait_for_file(tmp_path / "busy" / "started"))
    controller = AbortController()
    arguments = {"dir": str(tmp_path / "queued"), "then": "wait-for-abort"}
    queued = spawn(
        system,
        ExecuteCall(call_id="queued", name="tally", arguments=arguments, signal=controller.signal),
    )
    time.sleep(0.5)  # submitted to the busy actor by now
    controller.abort()
    aborted = queued.result(WAIT)
    done = busy.result(WAIT)
    after = system.execute(ExecuteCall(call_id="after", name="tally", arguments={}))

    assert aborted.error.info.code == "ABORTED"
    assert done.value == {"calls": 1, "pid": pid}  # run once, on the actor it began on
    assert after.value["pid"] == pid
    assert logs.warnings == []


def test_a_call_aborted_while_queued_behind_a_running_one_never_runs_its_body(
    system: ToolSystem, tmp_path: Path, logs: Logs
) -> None:
    # Ray reports a queued actor call it was asked to cancel as cancelled, yet runs it when
    # its turn comes: the body must not begin, whatever it would do with its signal.
    params = {"dir": {"type": "string"}, "tag": {"type": "string"}, "seconds": {"type": "number"}}
    pool = RayPlacement(num_cpus=0, actor_pool=1, cancel_grace_s=1.0)
    system.tools.register(json_tool("logged", logged, pool, parameters=params))

    def logged_call(tag: str, seconds: float = 0, signal: Any = None) -> ExecuteCall:
        arguments = {"dir": str(tmp_path), "tag": tag, "seconds": seconds}
        return ExecuteCall(call_id=tag, name="logged", arguments=arguments, signal=signal)

    busy = spawn(system, logged_call("busy", 2.0))
    deadline = time.monotonic() + WAIT
    while not (tmp_path / "log").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    controller = AbortController()
    queued = spawn(system, logged_call("queued", signal=controller.signal))
    time.sleep(0.5)  # sent to the busy actor by now
    controller.abort()
    aborted = queued.result(WAIT)
    done = busy.result(WAIT)
    after = system.execute(logged_call("after"))  # the actor reaches it after the aborted one

    assert aborted.error.info.code == "ABORTED"
    assert not done.is_error and after.value["pid"] == done.value["pid"]
    assert (tmp_path / "log").read_text().split() == ["busy", "after"]
    assert logs.warnings == []


def held_until_killed(marker: str) -> str:
    """Rebuilt as an actor loads its body: the first actor to load it records its pid and
    waits to be killed, before it has begun any call; a later one loads it at once."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        time.sleep(60)
    return marker


class LoadsSlowly:
    """Held by a body: its actor is stuck loading it the first time (see ``held_until_killed``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return held_until_killed, (self.marker,)


def test_a_call_whose_fresh_actor_dies_as_it_loads_the_body_says_the_worker_died(
    system: ToolSystem, tmp_path: Path
) -> None:
    # Killed while it loads the body, the actor never began the call; but Ray reports that as
    # a death under the call, which it also is when the body ends its process at once. The
    # result says the worker died and that the body may or may not have run, and the next
    # call gets a fresh actor.
    held = LoadsSlowly(tmp_path / "loading")

    def pid_of_loaded(args: Any, ctx: Any) -> Any:
        assert held is not None
        return os.getpid()

    system.tools.register(json_tool("pid", pid_of_loaded, RayPlacement(num_cpus=0, actor_pool=1)))
    pending = spawn(system, ExecuteCall(call_id="c1", name="pid", arguments={}))
    killed = int(wait_for_file(tmp_path / "loading"))
    os.kill(killed, signal.SIGKILL)
    result = pending.result(WAIT)
    after = system.execute(ExecuteCall(call_id="c2", name="pid", arguments={}))

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message.startswith(
        'remote worker running tool "pid" died before the call settled; the body may or may'
        f" not have run, and is not run again: The actor died unexpectedly before finishing"
        f" this task (pid={killed}, ip="
    )
    assert not after.is_error, after.content
    assert after.value != killed


def exits_at_once(args: Any, ctx: Any) -> Any:
    """Logs that it began, then ends its process before Ray has sent anything more."""
    with Path(args["dir"], "log").open("a") as log:
        log.write("began\n")
    os._exit(0)


def test_a_body_that_ends_its_fresh_actor_at_once_runs_once(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The actor's death under its first call must not be taken for one before the call began
    # (an answer the actor sent just before, its ``ready``, can be lost with the process):
    # sent again to a fresh actor, the body would run twice.
    system.tools.register(
        json_tool("exits", exits_at_once, RayPlacement(num_cpus=0, actor_pool=1), parameters=PATH)
    )
    result = system.execute(request("exits", tmp_path))

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert (tmp_path / "log").read_text() == "began\n"


def beating(args: Any, ctx: Any) -> Any:
    """Appends a beat every 20 ms for a minute, heeding nothing: only Ray can end it."""
    beats = Path(args["dir"], "beats")
    for _ in range(3000):
        with beats.open("a") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(0.02)


def test_stopping_the_tool_system_leaves_none_of_its_calls_running_on_ray(tmp_path: Path) -> None:
    # One call as a task, one on an actor, each ignoring its abort: once stop() has returned,
    # neither body runs on (Ray interrupts the task; the actor is killed after the grace).
    system = ToolSystem.start(code_runtime=None)
    for name, placement in (
        ("as_task", STUBBORN),
        ("on_actor", RayPlacement(num_cpus=0, actor_pool=1, cancel_grace_s=0.2)),
    ):
        (tmp_path / name).mkdir()
        system.tools.register(json_tool(name, beating, placement, parameters=PATH))
    pending = [spawn(system, request(name, tmp_path / name)) for name in ("as_task", "on_actor")]
    wait_for_file(tmp_path / "as_task" / "beats")
    actor = int(wait_for_file(tmp_path / "on_actor" / "beats").split()[0])
    system.stop()
    results = [call.result(WAIT) for call in pending]

    assert [r.error.info.code for r in results] == ["ABORTED", "ABORTED"]
    # Ray ends a process asynchronously (and stop() waits a bounded time for the force, which
    # a loaded machine may outlast): the beats stop soon, not at the instant stop() returns.
    assert beats_stop(tmp_path / "as_task" / "beats", tmp_path / "on_actor" / "beats")
    assert gone(actor)


def beats_stop(*files: Path, within: float = 10.0) -> bool:
    """Whether the files stop growing for 0.5 s (a body still running beats 25 times in that
    time) within ``within`` seconds."""
    deadline = time.monotonic() + within
    sizes = [file.stat().st_size for file in files]
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = [file.stat().st_size for file in files]
        if now == sizes:
            return True
        sizes = now
    return False


def exits_when_told(args: Any, ctx: Any) -> Any:
    """Logs its ``tag`` as it begins; ends its process at once when told to, else returns."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{args['tag']}\n")
    if args.get("exit"):
        os._exit(0)
    time.sleep(args.get("seconds", 0))
    return os.getpid()


EXITS = {
    "dir": {"type": "string", "required": True},
    "tag": {"type": "string", "required": True},
    "exit": {"type": "boolean"},
    "seconds": {"type": "number"},
}


def exits_call(folder: Path, tag: str, **more: Any) -> ExecuteCall:
    return ExecuteCall(
        call_id=tag, name="exits", arguments={"dir": str(folder), "tag": tag, **more}
    )


def test_a_body_that_ends_its_idle_actor_at_once_runs_once(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The actor answered its ``ready`` just before the call began, and the body ended the
    # process at once: that answer can be lost with it, and the call must not then be taken
    # for one that never began (sent again to a fresh actor, the body would run twice).
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("exits", exits_when_told, pool, parameters=EXITS))
    results = []
    for round in range(5):  # the answer is lost in some rounds only
        warm = system.execute(exits_call(tmp_path, f"warm{round}"))
        assert not warm.is_error, warm.content
        results.append(system.execute(exits_call(tmp_path, f"exit{round}", exit=True)))

    assert [r.error.info.code for r in results] == ["REMOTE_WORKER_LOST"] * 5
    began = Counter((tmp_path / "log").read_text().split())
    assert {tag: count for tag, count in began.items() if count != 1} == {}


def test_a_body_queued_behind_another_that_ends_its_actor_at_once_runs_once(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The actor's reply to the call ahead can be lost with the process the queued body ends
    # at once: the queued call must not be taken for one that never began.
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("exits", exits_when_told, pool, parameters=EXITS))
    for round in range(6):  # the answer is lost in some rounds only
        ahead = spawn(system, exits_call(tmp_path, f"ahead{round}", seconds=0.5))
        wait_for_file(tmp_path / "log")
        queued = system.execute(exits_call(tmp_path, f"exit{round}", exit=True))
        ahead.result(WAIT)

        assert queued.error.info.code == "REMOTE_WORKER_LOST"
    began = Counter((tmp_path / "log").read_text().split())
    assert {tag: count for tag, count in began.items() if count != 1} == {}


def test_calls_that_never_reached_a_dead_actor_still_run_on_a_fresh_one(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The actor records the calls it began where its death leaves the record: a call it had
    # not begun (it was killed while idle) runs on a fresh actor, once.
    pool = RayPlacement(num_cpus=0, actor_pool=1)
    system.tools.register(json_tool("exits", exits_when_told, pool, parameters=EXITS))
    first = system.execute(exits_call(tmp_path, "first"))
    os.kill(first.value, signal.SIGKILL)
    assert gone(first.value)
    after = system.execute(exits_call(tmp_path, "after"))

    assert not after.is_error, after.content
    assert after.value != first.value
    assert (tmp_path / "log").read_text().split() == ["first", "after"]
