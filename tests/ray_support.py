"""A real local Ray instance for the placement tests, and small tools to run on it.

``ray_instance`` starts Ray once per session (``ray.init(num_cpus=2)`` through ``init_ray``: two
worker CPUs, no dashboard, no usage reporting) and shuts it down at the end. Test bodies are
plain functions of the test modules; those modules are pickled by value so the workers need not
import them.
``json_tool(name, execute, placement)`` defines a tool whose value is any JSON, rendered as
compact JSON text. ``wait_for_file(path)`` waits (bounded) until a remote body wrote ``path``.
``cut_connections(pid)`` breaks this process's TCP connections to the Ray worker ``pid`` (a
network hiccup: the worker lives on, and Ray connects to it again). ``all_cpus_free()`` waits
(bounded) until no actor of an earlier test holds a CPU of the instance.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import ToolDefinition, ToolOutput, define_tool
from dsh_tools.distributed import init_ray

WAIT = 30.0
"""Upper bound for waiting on a remote body's marker file (worker start-up included)."""


def all_cpus_free(cpus: float = 2.0) -> None:
    """Wait (bounded) until the instance's ``cpus`` CPUs are all free: an actor pool ends with
    its tool's definition, which an earlier test's garbage may still hold, and Ray frees an
    ended actor's CPU a moment later. For a test that lays out the CPUs itself."""
    import gc

    import ray

    deadline = time.monotonic() + WAIT
    while True:
        gc.collect()
        free = ray.available_resources().get("CPU", 0.0)
        if free >= cpus:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{cpus - free} CPU of the Ray instance still held after {WAIT} s")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[Any]:
    """The session's local Ray instance (started here unless something already connected)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = False
    if not ray.is_initialized():
        # Started the way the library starts it (from a thread of its own), so the instance's
        # processes are not children of the test's main thread.
        init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
        started = True
    for name in list(sys.modules):
        if name == "ray_support" or name.startswith("test_ray_"):
            ray.cloudpickle.register_pickle_by_value(sys.modules[name])
    try:
        yield ray
    finally:
        if started and ray.is_initialized():
            ray.shutdown()


def json_tool(
    name: str, execute: Callable[..., Any], placement: Any, **extra: Any
) -> ToolDefinition:
    """A tool with a JSON value rendered as compact JSON text, placed by ``placement``."""
    options: dict[str, Any] = {
        "parameters": {},
        "output": ToolOutput(
            schema={"type": "json"},
            render=lambda args, value: [
                {"type": "text", "text": json.dumps(value, separators=(",", ":"))}
            ],
        ),
        "is_concurrency_safe": lambda args: True,
    }
    options.update(extra)
    return define_tool(
        name=name, description=f"{name} test tool", execute=execute, placement=placement, **options
    )


def wait_for_file(path: Path) -> str:
    """The file's text once a remote body wrote it (bounded wait)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text()
            if text:
                return text
        time.sleep(0.02)
    raise AssertionError(f"no remote body wrote {path}")


def _socket_inodes(pid: int | str) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def cut_connections(pid: int) -> int:
    """Shut down this process's TCP connections to the ports process ``pid`` listens on (its
    gRPC server, for a Ray worker); how many were cut. Shut down, not closed: the descriptors
    stay Ray's, the connections end as a network failure would end them."""
    own = _socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as listing:
            for line in listing.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in own:  # LISTEN, by that process
                    ports.add(int(fields[1].rpartition(":")[2], 16))
    cut = 0
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:["):
                continue
            copy = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with copy:
            if copy.type != socket.SOCK_STREAM or copy.family not in (
                socket.AF_INET,
                socket.AF_INET6,
            ):
                continue
            try:
                if copy.getpeername()[1] not in ports:
                    continue
                copy.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected
                continue
            cut += 1
    return cut
