"""A call given up while Ray places it fails as "did not run" only where it provably did not.

A call that waited ``placement_wait_s`` is stopped: its task cancelled, or its pool's actor given
up and killed. Ray may place it just then and begin the body before the stop lands. Such a call
fails as one that may have run (``REMOTE_WORKER_LOST``), never as one that did not run
(``REMOTE_UNAVAILABLE``, which a harness may retry), and is not sent again.

The race is a few milliseconds wide on a real cluster (a node joins, or leaves, as the call is
given up). These tests make it certain: the body begins on the real local instance, and the
runner is then put in the state the race leaves it in (it has not yet seen Ray's placement, or
its last look at the cluster found no node for the call), so the give-up runs on a call that
has begun.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, spawn
from ray_support import json_tool, ray_instance, wait_for_file  # noqa: F401

from dsh_tools import ExecuteCall, ToolSystem
from dsh_tools.distributed import RayPlacement
from dsh_tools.distributed._ray_body import Body, remote_body
from dsh_tools.distributed._ray_runners import ActorPool, LazyRunner, TaskRunner

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_instance")]

PATH = {"dir": {"type": "string", "required": True}}
NO_NODE = "no node of the cluster (1 alive) has the resources one needs: nobody_offers=1"


class Reachable:
    """Places a body as ``RayPlacement`` does, keeping the runner where the test can reach it."""

    def __init__(self, placement: RayPlacement) -> None:
        self.placement = placement
        self.runner: LazyRunner | None = None

    def place(self, tool: str, execute: Any) -> Body:
        runner = self.runner = LazyRunner(tool, execute)
        return remote_body(tool, lambda: (self.placement, runner))

    def pool(self) -> ActorPool:
        assert self.runner is not None
        pool = self.runner.get(self.placement)
        assert isinstance(pool, ActorPool)
        return pool

    def tasks(self) -> TaskRunner:
        assert self.runner is not None
        tasks = self.runner.get(self.placement)
        assert isinstance(tasks, TaskRunner)
        return tasks


def begins_and_lingers(args: Any, ctx: Any) -> Any:
    """A side effect (a line in ``log`` each time the body begins), then a while before it
    returns: long enough to be given up while it runs."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(3)
    return os.getpid()


def runs(folder: Path) -> list[str]:
    log = folder / "log"
    return log.read_text().split() if log.exists() else []


def request(folder: Path) -> ExecuteCall:
    return ExecuteCall(call_id="c1", name="lingers", arguments={"dir": str(folder)})


def test_a_call_taken_off_an_actor_given_up_as_it_began_runs_once(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The pool gives up an actor it has not seen placed, and sends its calls to another; but
    # Ray placed it just then and it began the call. Ray reports that call cancelled (it was
    # cancelled, then its actor killed), as it reports one it never sent: sent again, the
    # body would run twice.
    placement = Reachable(RayPlacement(num_cpus=0, actor_pool=1))
    system.tools.register(json_tool("lingers", begins_and_lingers, placement, parameters=PATH))
    pending = spawn(system, request(tmp_path))
    wait_for_file(tmp_path / "log")
    pool = placement.pool()
    slot = pool._slots[0]
    pool.discard(slot, slot.actor, moving=True)  # what ``unplaced`` does as it gives it up
    result = pending.result(WAIT)
    time.sleep(0.5)  # a call sent again would have begun by now

    assert len(runs(tmp_path)) == 1
    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message.startswith(
        'remote worker running tool "lingers" was lost: its actor was replaced as the call may'
        " have begun on it (the body may have run, and is not run again): "
    )


def test_a_pool_call_given_up_for_placement_as_it_began_says_it_may_have_run(
    system: ToolSystem, tmp_path: Path
) -> None:
    # No actor of the pool seen placed, and the last look at the cluster found no node with
    # what the actor needs: the call is given up. But Ray had placed the actor and begun the
    # body: the call may have run, and must not say it did not.
    placement = Reachable(RayPlacement(num_cpus=0, actor_pool=1, placement_wait_s=0.2))
    system.tools.register(json_tool("lingers", begins_and_lingers, placement, parameters=PATH))
    pending = spawn(system, request(tmp_path))
    wait_for_file(tmp_path / "log")
    pool = placement.pool()
    pool._demand = {"nobody_offers": 1}  # the cluster as the last look saw it
    pool._slots[0].placed = False  # the placement not yet seen
    result = pending.result(WAIT)

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message.startswith(
        'remote worker running tool "lingers" was lost: Ray placed no actor of its pool within'
        f" 0.2s (placement_wait_s) and {NO_NODE}; but Ray may have placed it just then, and the"
        " body may have begun before it was stopped: "
    )
    assert len(runs(tmp_path)) == 1


def ignores_interrupts(args: Any, ctx: Any) -> Any:
    """Begins (a line in ``log``), then sleeps through Ray's interrupts: only forcing its
    worker to exit ends it."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            continue
    return os.getpid()


def dies_when_interrupted(args: Any, ctx: Any) -> Any:
    """Begins (a line in ``log``), then ends its worker process when Ray interrupts it."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    try:
        time.sleep(30)
    except KeyboardInterrupt:
        os._exit(1)
    return os.getpid()


@pytest.mark.parametrize(
    "body",
    [begins_and_lingers, ignores_interrupts, dies_when_interrupted],
    ids=["interrupted", "forced", "died-meanwhile"],
)
def test_a_task_given_up_for_placement_as_it_began_says_it_may_have_run(
    system: ToolSystem, tmp_path: Path, body: Any
) -> None:
    # The last look at the cluster found no node with what the task needs (the node it runs
    # on left the cluster's view, say): the call is given up, its task cancelled. Ray reports
    # a task it interrupted, whose worker it forced to exit, or whose worker died meanwhile,
    # cancelled too.
    placement = Reachable(RayPlacement(num_cpus=0.5, placement_wait_s=0.2, cancel_grace_s=0.5))
    system.tools.register(json_tool("lingers", body, placement, parameters=PATH))
    pending = spawn(system, request(tmp_path))
    wait_for_file(tmp_path / "log")
    placement.tasks()._checked = (time.monotonic() + 3600, f"Ray placed no worker: {NO_NODE}")
    result = pending.result(WAIT)

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message.startswith(
        f'remote worker running tool "lingers" was lost: Ray placed no worker: {NO_NODE}; but'
        " Ray may have placed it just then, and the body may have begun before it was stopped: "
    )
    assert len(runs(tmp_path)) == 1


class BlocksItsNode:
    """A node runtime whose program begins (writes ``marker``), then holds the node actor's
    loop for a while: the node's answer that it took the run waits behind it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    async def run(self, request: Any) -> Any:
        from dsh_tools.codebridge import CodeRunResult

        with open(self.marker, "a") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(4)
        return CodeRunResult([], value=1)

    async def dispose(self) -> None:
        return None


def test_a_code_run_given_up_for_placement_as_it_started_says_it_may_have_run(
    tmp_path: Path,
) -> None:
    # The node has not yet answered that it took the run, and the last look at the cluster
    # found no node with what its actor needs: the run is given up and its actor killed. But
    # Ray had placed the actor and the program had started: the run was lost, not unavailable.
    from dsh_tools.codebridge import CodeRunRequest
    from dsh_tools.distributed import RayCodeRuntime

    marker = tmp_path / "log"
    factory = functools.partial(BlocksItsNode, str(marker))
    runtime = RayCodeRuntime(runtime_factory=factory, num_cpus=0, placement_wait_s=0.2)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(asyncio.run, runtime.run(CodeRunRequest("return 1\n")))
        wait_for_file(marker)
        runtime._options = {"num_cpus": 0, "resources": {"nobody_offers": 1}}  # the last look
        result = pending.result(WAIT)
    asyncio.run(runtime.dispose())

    assert result.error is not None and result.error.kind == "worker-exit"
    assert result.error.message == (
        "remote code runtime lost: Ray placed no actor for it within 0.2s (placement_wait_s)"
        f" and {NO_NODE}; but Ray may have placed its actor just then, and the program may have"
        " started before it was stopped"
    )
    assert len(marker.read_text().split()) == 1
