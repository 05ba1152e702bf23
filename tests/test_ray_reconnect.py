"""After ``ray.shutdown()`` the next placed call, or Code Mode run, connects again and runs on
the new connection: the actors of the earlier one ended with it, and fresh ones take their
place (their state starts over, as the docs say of a lost actor).

Each case runs in a fresh interpreter: the process-wide Ray connection of the other Ray tests
must not be shut down under them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]

# Each line: a call's outcome before and after the connection was shut down and made again.
PROGRAM = """
import asyncio, os, sys
import ray
from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool
from dsh_tools.codebridge import CodeRuntimeConfig
from dsh_tools.distributed import RayCodeRuntime, RayPlacement, init_ray


def tally(args, ctx):
    global calls
    calls = globals().get("calls", 0) + 1
    return calls


counter = define_tool(
    name="tally",
    description="Counts its calls on its actor.",
    parameters={},
    output=ToolOutput(schema={"type": "integer"}, render=lambda a, v: []),
    execute=tally,
    placement=RayPlacement(num_cpus=0, actor_pool=1),
)
runtime = RayCodeRuntime(CodeRuntimeConfig(compute_ms=5_000), num_cpus=0)


def outcome(result):
    if result.is_error:
        return repr(result.content[0]["text"])
    return result.value["result"] if isinstance(result.value, dict) else result.value


def connect():
    init_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)


connect()
with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime) as system:
    system.tools.register(counter)
    arguments = {"code": "return (await tools.tally({})) * 10", "description": "test program"}
    for step in ("before", "after"):
        if step == "after":
            ray.shutdown()
            if sys.argv[1] == "init_ray":
                connect()  # else the next call connects
        direct = system.execute(ExecuteCall(call_id=step, name="tally", arguments={}))
        run = ExecuteCall(call_id="p-" + step, name="run_code", arguments=arguments)
        print(step, outcome(direct), outcome(system.execute(run)), flush=True)
asyncio.run(runtime.dispose())
ray.shutdown()
"""


@pytest.mark.parametrize("reconnect", ["init_ray", "first call"])
def test_tools_and_code_runs_work_again_after_ray_shutdown(reconnect: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, reconnect],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    # A fresh actor after the reconnection: the count starts over.
    assert done.stdout.splitlines() == ["before 1 20", "after 1 20"]


# A tool whose body marks that it started (in the directory argv[2]) and runs for a minute,
# on an actor pool of one or as a task (argv[1]): the scripts below share it.
LONG_TOOL = """started = Path(sys.argv[2], "started")


def wait_long(args, ctx):
    started.write_text("yes")
    time.sleep(60)


long_tool = define_tool(
    name="long",
    description="Runs for a minute.",
    parameters={},
    output=ToolOutput(schema={"type": "json"}, render=lambda a, v: []),
    execute=wait_long,
    placement=RayPlacement(num_cpus=0, actor_pool=1 if sys.argv[1] == "actor" else 0),
)
"""


# A call in flight when the harness shuts Ray down: its body dies with the connection.
IN_FLIGHT = (
    """
import os, sys, threading, time
from pathlib import Path
import ray
from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool
from dsh_tools.codebridge import CodeRuntimeConfig, CodeSandbox
from dsh_tools.distributed import RayCodeRuntime, RayPlacement, init_ray

"""
    + LONG_TOOL
    + """config = CodeRuntimeConfig(
    compute_ms=60_000, max_wall_ms=90_000, sandbox=CodeSandbox(write=[sys.argv[2]])
)
runtime = RayCodeRuntime(config, num_cpus=0)


def shut_down_once_started():
    while not started.exists():
        time.sleep(0.02)
    ray.shutdown()


init_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
threading.Thread(target=shut_down_once_started, daemon=True).start()
with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime) as system:
    system.tools.register(long_tool)
    if sys.argv[1] == "code":
        program = f"import time\\nopen({str(started)!r}, 'w').write('yes')\\ntime.sleep(60)\\n"
        arguments = {"code": program, "description": "test program"}
        result = system.execute(ExecuteCall(call_id="c", name="run_code", arguments=arguments))
    else:
        result = system.execute(ExecuteCall(call_id="c", name="long", arguments={}))
    print(result.content[0]["text"], flush=True)
"""
)


LOST = 'Error: remote worker running tool "long" was lost: '
SHUT_DOWN = "the Ray connection ended (ray.shutdown()) before the {} settled"


@pytest.mark.parametrize(
    ("where", "settled"),
    [
        ("task", LOST + SHUT_DOWN.format("call")),
        ("actor", LOST + SHUT_DOWN.format("call")),
        (
            "code",
            "Error: code run failed (worker-exit): remote code runtime lost: "
            + SHUT_DOWN.format("run"),
        ),
    ],
)
def test_a_call_in_flight_when_ray_is_shut_down_settles_as_lost(
    where: str, settled: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", IN_FLIGHT, where, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=45,
        )
    except subprocess.TimeoutExpired:
        done = None
    if done is None:
        pytest.fail("the call was still waiting 45 s after ray.shutdown()")

    assert done.returncode == 0, done.stderr[-3000:]
    # Not the body's death that Ray reports as the shutdown ends its process: the shutdown
    # explains it.
    assert done.stdout.strip() == settled


AFTER_SHUTDOWN = (
    """
import asyncio, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import ray
from dsh_tools import AbortController, ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool
from dsh_tools.codebridge import CodeRuntimeConfig
from dsh_tools.distributed import RayCodeRuntime, RayPlacement, init_ray

"""
    + LONG_TOOL
    + """runtime = RayCodeRuntime(CodeRuntimeConfig(compute_ms=5_000), num_cpus=0)

init_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime) as system:
    system.tools.register(long_tool)
    arguments = {"code": "return 1", "description": "test program"}
    system.execute(ExecuteCall(call_id="p", name="run_code", arguments=arguments))
    controller = AbortController()
    call = ExecuteCall(call_id="c", name="long", arguments={}, signal=controller.signal)
    with ThreadPoolExecutor(1) as caller:
        pending = caller.submit(system.execute, call)
        while not started.exists():
            time.sleep(0.02)
        ray.shutdown()
        controller.abort()  # stopping the call: there is nothing left to stop
        print(pending.result(60).content[0]["text"], flush=True)
    asyncio.run(runtime.dispose())  # nor a node actor to dispose of
    print("connected" if ray.is_initialized() else "not connected", flush=True)
"""
)


@pytest.mark.parametrize("where", ["task", "actor"])
def test_what_is_stopped_or_disposed_after_ray_shutdown_does_not_start_ray_again(
    where: str, tmp_path: Path
) -> None:
    # Ray connects anew on most calls made while disconnected (ray.cancel, ray.kill, an
    # actor's method): cleaning up after ray.shutdown() must not start a new local instance
    # from a passing thread, which would end with that thread (and Ray would then end the
    # harness process).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", AFTER_SHUTDOWN, where, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    settled, connected = done.stdout.strip().splitlines()
    assert settled in ("Error: tool call aborted", LOST + SHUT_DOWN.format("call")), settled
    assert connected == "not connected"
