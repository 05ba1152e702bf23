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

import os
import time
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


def begins_and_lingers(args: Any, ctx: Any, seconds: float = 3.0) -> Any:
    """A side effect (a line in ``log`` each time the body begins), then ``seconds`` before it
    returns: long enough to be given up while it runs."""
    with Path(args["dir"], "log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


def begins_and_lingers_long(args: Any, ctx: Any) -> Any:
    """``begins_and_lingers`` for a give-up on a loaded machine, where the look at the cluster
    (``ray.nodes()``) and the given-up actor's kill each take seconds (a kill took up to 6.5 s
    to end its call under two busy loops): the call given up ends with the kill, not this wait."""
    return begins_and_lingers(args, ctx, 15.0)


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
    system.tools.register(json_tool("lingers", begins_and_lingers_long, placement, parameters=PATH))
    pending = spawn(system, request(tmp_path))
    wait_for_file(tmp_path / "log")
    pool = placement.pool()
    slot = pool._slots[0]
    pool.discard(slot, slot.actor, moving=True)  # what ``unplaced`` does as it gives it up
    result = pending.result(3 * WAIT)
    time.sleep(0.5)  # a call sent again would have begun by now

    assert len(runs(tmp_path)) == 1
    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert result.error.message == (
        'remote worker running tool "lingers" was lost: its actor was given up before it was'
        " seen placed, and the call may have begun on it (the body may have run, and is not"
        " run again)"
    )


def test_a_pool_call_given_up_for_placement_as_it_began_says_it_may_have_run(
    system: ToolSystem, tmp_path: Path
) -> None:
    # No actor of the pool seen placed, and the last look at the cluster found no node with
    # what the actor needs: the call is given up. But Ray had placed the actor and begun the
    # body: the call may have run, and must not say it did not.
    placement = Reachable(RayPlacement(num_cpus=0, actor_pool=1, placement_wait_s=0.2))
    system.tools.register(json_tool("lingers", begins_and_lingers_long, placement, parameters=PATH))
    pending = spawn(system, request(tmp_path))
    wait_for_file(tmp_path / "log")
    pool = placement.pool()
    # The actor answers ``ready`` before it begins the body, but the pool may hear of it later
    # (under load, after the body began): the state is put in place once it has, so that the
    # placement it hears does not undo it.
    deadline = time.monotonic() + WAIT
    while not pool._slots[0].placed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool._slots[0].placed
    pool._demand = {"nobody_offers": 1}  # the cluster as the last look saw it
    pool._slots[0].placed = False  # the placement not yet seen
    result = pending.result(3 * WAIT)

    assert result.error.info.code == "REMOTE_WORKER_LOST"
    assert len(runs(tmp_path)) == 1


def test_a_call_on_an_actor_never_placed_is_still_given_up_as_not_run(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The usual give-up: no node offers what the actor needs, and it never began anything.
    needs = RayPlacement(
        num_cpus=0, actor_pool=1, placement_wait_s=0.2, resources={"nobody_offers": 1}
    )
    placement = Reachable(needs)
    system.tools.register(json_tool("lingers", begins_and_lingers, placement, parameters=PATH))
    result = system.execute(request(tmp_path))

    assert result.error.info.code == "REMOTE_UNAVAILABLE"
    assert result.error.message.startswith(
        'cannot run tool "lingers" on Ray: Ray placed no actor of its pool within 0.2s'
    )
    assert runs(tmp_path) == []
