"""Code Mode programs on a Ray node (``RayCodeRuntime``) with their tool calls coming back.

The program runs in the node's own code runtime (the shipped subprocess runtime, under the
actor that hosts it), each tool call runs in this process's pipeline as a sub-call, and aborts,
budgets and a lost node settle the run as they would locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ray_support import cut_connections, ray_instance  # noqa: F401  (the session fixture)

from dsh_tools import (
    AbortController,
    ExecuteCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)
from dsh_tools.codebridge import (
    CodeRunRequest,
    CodeRuntimeConfig,
    CodeSandbox,
    SubprocessCodeRuntime,
)
from dsh_tools.distributed import RayCodeRuntime
from dsh_tools.distributed import _code_runtime as code_runtime_module

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_instance")]


def node_actor_pid(runtime: RayCodeRuntime) -> int:
    """The pid of the Ray actor that hosts ``runtime``'s programs, asked of the actor itself.

    (A sandboxed program cannot tell: it sees only its own PID namespace, where its parent is
    the namespace's init, pid 1.)"""
    import ray

    pid = ray.get(runtime._actor().__ray_call__.remote(lambda _host: os.getpid()))
    assert isinstance(pid, int) and pid > 1
    return pid


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def int_tool(name: str, execute: Any) -> Any:
    return define_tool(
        name=name,
        description=f"{name} test tool",
        parameters={"n": {"type": "integer"}},
        output=ToolOutput(schema={"type": "integer"}, render=lambda a, v: []),
        execute=execute,
        is_concurrency_safe=lambda args: True,
    )


def host_pid(args: Any, ctx: Any) -> int:
    return os.getpid()


def refuse(args: Any, ctx: Any) -> int:
    raise ValueError(f"refused {args['n']}")


@pytest.fixture
def node_runtime() -> Iterator[RayCodeRuntime]:
    runtime = RayCodeRuntime(CodeRuntimeConfig(compute_ms=500), num_cpus=0, cancel_grace_s=5)
    try:
        yield runtime
    finally:
        asyncio.run(runtime.dispose())


@pytest.fixture
def code_system(node_runtime: RayCodeRuntime) -> Iterator[ToolSystem]:
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=node_runtime)
    system.tools.register(int_tool("host_pid", host_pid))
    system.tools.register(int_tool("refuse", refuse))
    try:
        yield system
    finally:
        system.stop()


def run_code(system: ToolSystem, program: str, signal: Any = None, call_id: str = "c1") -> Any:
    arguments = {"code": program, "description": "test program"}
    return system.execute(
        ExecuteCall(call_id=call_id, name="run_code", arguments=arguments, signal=signal)
    )


def test_a_program_runs_under_the_node_actor_and_its_tool_calls_run_in_the_harness(
    code_system: ToolSystem, node_runtime: RayCodeRuntime
) -> None:
    program = (
        "import os\n"
        "pids = await asyncio.gather(*[tools.host_pid({'n': i}) for i in range(3)])\n"
        "print('fanned out')\n"
        "return {'tool_pids': pids, 'own_pid': os.getpid()}\n"
    )

    result = run_code(code_system, program)

    assert not result.is_error, result
    assert result.value["result"]["tool_pids"] == [os.getpid()] * 3
    # The node's runtime sandboxes the program (its own PID namespace) as it would locally.
    assert result.value["result"]["own_pid"] < 10
    assert "CodeRunHost" in command_of(node_actor_pid(node_runtime))
    assert result.value["logs"] == ["fanned out"]
    types = [e.type for e in code_system.session.events]
    assert types.count("tool/code-dispatch") == 3 and types[-1] == "tool/result"


def test_a_failed_tool_call_raises_its_message_in_the_program(code_system: ToolSystem) -> None:
    program = (
        "try:\n    await tools.refuse({'n': 7})\nexcept ToolCallError as e:\n    return str(e)\n"
    )

    result = run_code(code_system, program)

    assert result.value["result"] == "refused 7"


def test_help_in_a_program_on_the_node_shows_what_it_shows_locally(
    code_system: ToolSystem,
) -> None:
    # The node's runtime asks the harness's describer over the run's events, only for help().
    program = "help(tools.refuse)\nhelp(tools)\nreturn await tools.host_pid({'n': 1})\n"
    here = SubprocessCodeRuntime()
    local = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=here)
    try:
        local.tools.register(int_tool("host_pid", host_pid))
        local.tools.register(int_tool("refuse", refuse))
        expected = run_code(local, program).value["logs"]
    finally:
        local.stop()
        here.close()

    result = run_code(code_system, program)

    assert not result.is_error, result
    assert result.value["logs"] == expected
    assert "refuse test tool" in expected[0] and "host_pid" in expected[1]
    assert result.value["result"] == os.getpid()


def test_an_abort_settles_the_run_as_abort_and_budgets_hold_on_the_node(
    code_system: ToolSystem,
) -> None:
    controller = AbortController()
    program = "await tools.host_pid({'n': 0})\nwhile True:\n    pass\n"

    def abort_when_called(args: Any, ctx: Any) -> int:
        controller.abort("user pressed stop")
        return 0

    code_system.tools.register(int_tool("stop_me", abort_when_called))
    aborted = run_code(
        code_system, program.replace("host_pid", "stop_me"), controller.signal, call_id="a"
    )
    spinning = run_code(code_system, "while True:\n    pass\n", call_id="b")

    assert aborted.content[0]["text"] == "Error: code run failed (abort): user pressed stop"
    assert spinning.error.info.code == "CODE_RUN_FAILED"
    assert spinning.content[0]["text"].startswith("Error: code run failed (timeout)")


@pytest.mark.parametrize("body", ["plain", "async"])
def test_an_abort_settles_the_run_as_abort_even_when_the_program_ends_first_on_the_node(
    code_system: ToolSystem, body: str
) -> None:
    # The program catches its aborted call and returns at once: its end may reach the node
    # before the abort does (an async body's reply leaves in the same pass of the loop as
    # the abort), and the harness, which aborted first, still sees an abort.
    controller = AbortController()
    program = (
        "try:\n    await tools.stop_me({'n': 0})\nexcept ToolCallError:\n    pass\n"
        "return 'ended on its own'\n"
    )

    def abort_when_called(args: Any, ctx: Any) -> int:
        controller.abort("user pressed stop")
        return 0

    async def abort_when_called_async(args: Any, ctx: Any) -> int:
        return abort_when_called(args, ctx)

    execute = abort_when_called if body == "plain" else abort_when_called_async
    code_system.tools.register(int_tool("stop_me", execute))
    aborted = run_code(code_system, program, controller.signal)

    assert aborted.content[0]["text"] == "Error: code run failed (abort): user pressed stop"


def test_a_sandboxed_program_on_the_node_cannot_read_outside_its_scratch_dir(
    code_system: ToolSystem, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the harness's secret")
    program = (
        f"try:\n    return open({str(secret)!r}).read()\n"
        "except OSError as e:\n    return type(e).__name__\n"
    )

    result = run_code(code_system, program)

    assert result.value["result"] == "PermissionError"


def test_a_lost_node_actor_fails_the_run_as_worker_exit_and_the_next_run_starts_afresh(
    code_system: ToolSystem, node_runtime: RayCodeRuntime
) -> None:
    def kill_node_actor(args: Any, ctx: Any) -> int:
        os.kill(node_actor_pid(node_runtime), signal.SIGKILL)
        return 0

    code_system.tools.register(int_tool("kill_node", kill_node_actor))
    program = "await tools.kill_node({'n': 0})\nreturn 'survived'\n"

    lost = run_code(code_system, program, call_id="lost")
    again = run_code(code_system, "return 1 + 1\n", call_id="again")

    assert lost.content[0]["text"].startswith("Error: code run failed (worker-exit): ")
    assert again.value["result"] == 2


def test_a_node_actor_that_died_between_runs_is_replaced_before_the_next_run_reaches_it(
    code_system: ToolSystem, node_runtime: RayCodeRuntime
) -> None:
    first = run_code(code_system, "return 1\n", call_id="first")
    pid = node_actor_pid(node_runtime)
    os.kill(pid, signal.SIGKILL)  # no run is on it
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)

    # The node never took the next run, so the program has not run: it runs on a fresh actor.
    after = run_code(code_system, "return 2\n", call_id="after")

    assert first.value["result"] == 1
    assert not after.is_error, after.content
    assert after.value["result"] == 2 and node_actor_pid(node_runtime) != pid


def test_stopping_the_tool_system_ends_the_programs_on_the_node(
    node_runtime: RayCodeRuntime, tmp_path: Path
) -> None:
    # The runtime is the harness's own (stop() does not dispose it), so the cancelled run must
    # tell the node to end its program rather than leave it to run to its wall ceiling.
    beats = tmp_path / "beats"
    config = CodeRuntimeConfig(
        compute_ms=20_000, max_wall_ms=60_000, sandbox=CodeSandbox(write=[str(tmp_path)])
    )
    runtime = RayCodeRuntime(config, num_cpus=0, cancel_grace_s=5)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    program = (
        "import time\n"
        f"while True:\n    open({str(beats)!r}, 'a').write('.')\n    time.sleep(0.05)\n"
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(run_code, system, program)
            deadline = time.monotonic() + 60
            while not beats.exists() or beats.stat().st_size < 3:
                assert time.monotonic() < deadline, "the program never started"
                time.sleep(0.05)
            system.stop()
            result = pending.result(60)
        assert result.is_error
        # Every process of the run is killed once the node settles it; the node's run ends
        # well within its grace (5 s), far from the 60 s wall ceiling.
        deadline = time.monotonic() + 10
        while True:
            size = beats.stat().st_size
            time.sleep(1.0)
            if beats.stat().st_size == size:
                break
            assert time.monotonic() < deadline, "the program went on running on the node"
    finally:
        system.stop()
        asyncio.run(runtime.dispose())


def test_a_node_that_stops_answering_fails_the_run_as_worker_exit(
    code_system: ToolSystem, node_runtime: RayCodeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    # A hung or overloaded node (here: its actor's process stopped) must not hold the run for
    # ever: no sign of life within the grace (at least a second) ends it.
    frozen: list[int] = []

    def freeze_node(args: Any, ctx: Any) -> int:
        pid = node_actor_pid(node_runtime)
        frozen.append(pid)
        os.kill(pid, signal.SIGSTOP)
        return 0

    code_system.tools.register(int_tool("freeze_node", freeze_node))
    program = "await tools.freeze_node({'n': 0})\nimport time\ntime.sleep(30)\n"
    try:
        result = run_code(code_system, program, call_id="frozen")
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):  # killed as unresponsive by now
                os.kill(pid, signal.SIGCONT)
    assert result.content[0]["text"].startswith(
        "Error: code run failed (worker-exit): remote code runtime stopped answering"
    )
    again = run_code(code_system, "return 1 + 1\n", call_id="again")
    assert again.value["result"] == 2
    # The killed actor's unanswered requests are not logged as errors nobody retrieved.
    gc.collect()
    assert not [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def test_an_abort_ends_a_run_whose_node_actor_cannot_be_placed() -> None:
    # No node offers the actor's resources: the node never takes the run, and the abort
    # must still end it (after the grace) rather than leave it waiting for the actor.
    runtime = RayCodeRuntime(num_cpus=0, resources={"no_such_node": 1}, cancel_grace_s=0.2)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    controller = AbortController()
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(run_code, system, "return 1\n", controller.signal)
            time.sleep(0.5)  # the run is waiting for its actor
            controller.abort("user pressed stop")
            result = pending.result(30)
    finally:
        system.stop()
        asyncio.run(runtime.dispose())

    assert result.content[0]["text"] == "Error: code run failed (abort): user pressed stop"


def test_a_run_whose_node_actor_no_node_can_place_fails_once_placement_wait_s_has_passed() -> None:
    runtime = RayCodeRuntime(num_cpus=0, resources={"no_such_node": 1}, placement_wait_s=0.5)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    try:
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(run_code, system, "return 1\n").result(30)
    finally:
        system.stop()
        asyncio.run(runtime.dispose())

    assert result.content[0]["text"] == (
        "Error: code run failed (worker-exit): remote code runtime unavailable: Ray placed no"
        " actor for it within 0.5s (placement_wait_s) and no node of the cluster (1 alive) has"
        " the resources one needs: no_such_node=1"
    )


def test_a_runtime_factory_that_cannot_be_sent_fails_the_run_saying_what_and_where() -> None:
    lock = threading.Lock()

    def locked_factory() -> Any:
        with lock:
            return SubprocessCodeRuntime()

    runtime = RayCodeRuntime(runtime_factory=locked_factory, num_cpus=0)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    try:
        result = run_code(system, "return 1\n")
    finally:
        system.stop()
        asyncio.run(runtime.dispose())

    assert result.content[0]["text"] == (
        "Error: code run failed (worker-exit): remote code runtime unavailable: "
        "cannot pickle '_thread.lock' object (in locked_factory: lock)"
    )


def no_sandbox_here() -> Any:
    raise RuntimeError("no sandbox on this node")


def not_a_runtime() -> Any:
    return 5


@pytest.mark.parametrize(
    ("factory", "failure"),
    [
        (no_sandbox_here, "RuntimeError: no sandbox on this node"),
        (not_a_runtime, "TypeError: runtime_factory returned int, not a CodeRuntime"),
    ],
    ids=["raises", "not-a-runtime"],
)
def test_a_runtime_factory_that_fails_on_the_node_fails_the_run_saying_why(
    factory: Any, failure: str
) -> None:
    runtime = RayCodeRuntime(runtime_factory=factory, num_cpus=0)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    try:
        result = run_code(system, "return 1\n")
    finally:
        system.stop()
        asyncio.run(runtime.dispose())

    text = result.content[0]["text"]
    assert text.startswith(
        "Error: code run failed (worker-exit): remote code runtime unavailable: "
    )
    assert text.endswith(failure)


class DisposalFails(SubprocessCodeRuntime):
    async def dispose(self) -> None:
        await super().dispose()
        raise RuntimeError("disposal failed")


def test_a_node_runtime_whose_disposal_fails_leaves_no_unread_error_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = RayCodeRuntime(runtime_factory=DisposalFails, num_cpus=0)
    system = ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)
    try:
        assert run_code(system, "return 1\n").value["result"] == 1
    finally:
        system.stop()
    asyncio.run(runtime.dispose())
    gc.collect()

    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"config": {"compute_ms": 500}}, "config must be a CodeRuntimeConfig, got dict"),
        ({"runtime_factory": "python"}, "runtime_factory must be callable, got str"),
        ({"resources": ["gpu_box"]}, "resources must map str names to numbers >= 0"),
        ({"resources": {"gpu_box": -1}}, "resources must map str names to numbers >= 0"),
        ({"runtime_env": "venv"}, "runtime_env must be a dict"),
    ],
    ids=["config", "factory", "resources", "negative", "runtime_env"],
)
def test_options_the_node_would_refuse_are_refused_here_naming_them(
    options: dict[str, Any], message: str
) -> None:
    # Found at the first run on the cluster they would fail every run there.
    with pytest.raises((TypeError, ValueError)) as refused:
        RayCodeRuntime(**options)

    assert str(refused.value) == f"RayCodeRuntime: {message}"


def test_the_node_forgets_a_run_its_harness_dropped_whenever_the_drop_arrives() -> None:
    # The node actor lives for many runs: one whose harness task was cancelled (before or
    # after its start reached the node) must not stay in it, nor a late drop make one.
    from dsh_tools.codebridge import CodeRunResult
    from dsh_tools.distributed._code_host import CodeRunHost

    class UntilAborted:
        async def run(self, request: Any) -> CodeRunResult:
            while not request.signal.aborted:
                await asyncio.sleep(0.01)
            return CodeRunResult([])

        async def dispose(self) -> None:
            return None

    async def scenario() -> dict[str, Any]:
        host = CodeRunHost(UntilAborted)
        await host.drop("before", "cancelled", False)  # the start is still on its way
        await host.start("before", "return 1", [])
        await host.start("after", "return 1", [])
        await host.drop("after", "cancelled", True)
        await host.drop("long-gone", "cancelled", True)  # ended and collected long ago
        await asyncio.sleep(0.3)
        return dict(host._runs)

    assert asyncio.run(scenario()) == {}


class Pause:
    """A node runtime whose programs each take ``PAUSE_S`` and return 1 (no worker process)."""

    async def run(self, request: Any) -> Any:
        from dsh_tools.codebridge import CodeRunResult

        await asyncio.sleep(PAUSE_S)
        return CodeRunResult([], value=1)

    async def dispose(self) -> None:
        return None


PAUSE_S = 3.0


def test_runs_waiting_for_their_events_leave_the_node_free_to_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each live run keeps a long poll for its events waiting on the node. As many runs as the
    # node serves calls at once (1000; 8 here, to keep the test light) must not take every
    # slot: the node would answer no sign of life, and the runs would be ended as hung.
    monkeypatch.setattr(code_runtime_module, "_CALL_SLOTS", 8)
    runtime = RayCodeRuntime(runtime_factory=Pause, num_cpus=0, cancel_grace_s=1)
    runs = 12

    async def many() -> list[Any]:
        request = CodeRunRequest("return 1\n")
        return await asyncio.gather(*(runtime.run(request) for _ in range(runs)))

    try:
        results = asyncio.run(many())
    finally:
        asyncio.run(runtime.dispose())

    assert [result.error for result in results] == [None] * runs
    assert [result.value for result in results] == [1] * runs


def test_runs_on_a_node_that_stopped_and_then_died_leave_no_unread_error_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The node's process stops (its runs' signs of life go unanswered) and then dies: each
    # run settles as lost, and the sign of life it was still waiting for fails with the
    # actor's death after the run no longer reads it.
    runtime = RayCodeRuntime(runtime_factory=Pause, num_cpus=0, cancel_grace_s=2)
    runs = 8

    async def many() -> list[Any]:
        async def stop_then_kill() -> None:
            pid = await runtime._actor().__ray_call__.remote(lambda _host: os.getpid())
            await asyncio.sleep(0.5)  # the runs are waiting for their events by now
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(1.5)  # signs of life asked for meanwhile stay unanswered
            os.kill(pid, signal.SIGKILL)

        request = CodeRunRequest("return 1\n")
        killer = asyncio.ensure_future(stop_then_kill())
        results = await asyncio.gather(*(runtime.run(request) for _ in range(runs)))
        await killer
        return results

    try:
        results = asyncio.run(many())
    finally:
        asyncio.run(runtime.dispose())
    gc.collect()

    assert [result.error.kind for result in results] == ["worker-exit"] * runs
    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


class LoggedRuns:
    """A node runtime that logs each program it is given, as it starts it, to ``path`` (one
    line each); the program ``hold`` then holds the node's loop (its next calls wait)."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def run(self, request: Any) -> Any:
        from dsh_tools.codebridge import CodeRunResult

        with open(self.path, "a") as log:
            log.write(f"{request.program}\n")
        if request.program == "hold":
            time.sleep(HOLD_S)
        return CodeRunResult([], value=1)

    async def dispose(self) -> None:
        return None


HOLD_S = 2.0


def test_a_run_whose_node_was_out_of_reach_as_it_was_sent_never_runs_twice(
    tmp_path: Path,
) -> None:
    # A broken connection to the node's actor (a network hiccup) is no death: a run sent to
    # it may have started there, or start yet. It must not be sent again to a fresh actor.
    log = tmp_path / "log"
    runtime = RayCodeRuntime(
        runtime_factory=functools.partial(LoggedRuns, str(log)), num_cpus=0, cancel_grace_s=5
    )

    async def scenario() -> list[Any]:
        await runtime.run(CodeRunRequest("first"))
        pid = await runtime._actor().__ray_call__.remote(lambda _host: os.getpid())
        holding = asyncio.ensure_future(runtime.run(CodeRunRequest("hold")))
        while "hold" not in log.read_text():
            await asyncio.sleep(0.02)
        sent = asyncio.ensure_future(runtime.run(CodeRunRequest("sent")))
        await asyncio.sleep(0.5)  # on its way to the held node by now
        assert cut_connections(pid) > 0
        results = await asyncio.gather(holding, sent)
        await runtime.run(CodeRunRequest("after"))
        await asyncio.sleep(HOLD_S)  # the held node has taken what it was sent by now
        return results

    try:
        results = asyncio.run(scenario())
    finally:
        asyncio.run(runtime.dispose())

    assert all(r.error is None or r.error.kind == "worker-exit" for r in results)
    unreachable = [r.error.message for r in results if r.error is not None]
    assert all(m.startswith("remote code runtime unreachable: ") for m in unreachable)
    runs = log.read_text().split()
    assert runs.count("hold") == 1 and runs.count("sent") <= 1, runs


def test_a_node_that_answers_late_is_slow_not_hung_and_its_run_goes_on() -> None:
    # A loaded machine answers a sign of life late, a second or more. Here the node's process
    # is stopped a little longer than the grace, then goes on: its run is not ended as hung.
    runtime = RayCodeRuntime(runtime_factory=Pause, num_cpus=0, cancel_grace_s=2)

    async def scenario() -> Any:
        await runtime.run(CodeRunRequest("warm up"))
        pid = await runtime._actor().__ray_call__.remote(lambda _host: os.getpid())
        running = asyncio.ensure_future(runtime.run(CodeRunRequest("pause")))
        await asyncio.sleep(1.0)
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(4.0)  # its first sign of life is asked for meanwhile
        finally:
            os.kill(pid, signal.SIGCONT)
        return await running

    try:
        result = asyncio.run(scenario())
    finally:
        asyncio.run(runtime.dispose())

    assert result.error is None, result.error
    assert result.value == 1


def test_a_run_sent_to_a_node_that_stopped_answering_between_runs_does_not_wait_for_ever() -> None:
    # The node's process stopped after its last run: it never takes the next one, which must
    # end as its runs would while they wait for their events.
    runtime = RayCodeRuntime(runtime_factory=Pause, num_cpus=0, cancel_grace_s=1)

    async def scenario() -> Any:
        await runtime.run(CodeRunRequest("warm up"))
        pid = await runtime._actor().__ray_call__.remote(lambda _host: os.getpid())
        os.kill(pid, signal.SIGSTOP)
        try:
            return await asyncio.wait_for(runtime.run(CodeRunRequest("never taken")), 30)
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed as unresponsive by now
                os.kill(pid, signal.SIGCONT)

    try:
        result = asyncio.run(scenario())
        again = asyncio.run(runtime.run(CodeRunRequest("on a fresh actor")))
    finally:
        asyncio.run(runtime.dispose())

    assert result.error.kind == "worker-exit"
    assert result.error.message.startswith("remote code runtime stopped answering")
    assert again.error is None and again.value == 1
