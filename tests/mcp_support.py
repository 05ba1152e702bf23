"""Helpers for the tests that run ``tests/mcp_live_server.py`` as a real process.

- ``live_params(marks)``: stdio parameters for the live server (marker files in ``marks``);
- ``HttpServer``: the live server over Streamable HTTP on 127.0.0.1, started, killed and
  restarted on the same port;
- ``Changes``: counts ``change`` notifications and waits (bounded) for the registry to match;
- ``wait_for_file``, ``process_gone``, ``run``, ``failure``, ``texts``: as in the adapter tests;
- ``RecordingApproval(answer)``: answers every approval request and keeps them (the fixtures
  ``errlog`` and ``connect`` live in conftest).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from conftest import WAIT, spawn
from mcp import StdioServerParameters

from dsh_tools import (
    ExecuteCall,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolSystem,
)
from dsh_tools.integrations import McpPlugin, register_mcp_server_sync

LIVE_SERVER = str(Path(__file__).with_name("mcp_live_server.py"))


class RecordingApproval:
    """An approval service answering every request with ``answer`` and keeping the requests."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    def request(self, **kwargs: Any) -> str:
        self.requests.append(kwargs)
        return self.answer


@contextlib.contextmanager
def registering(errlog: TextIO) -> Iterator[Callable[..., McpPlugin]]:
    """``register(system, name, params, **options)``: a stdio server registered with the
    suite's connect timeout and ``errlog``; every one closed when the block ends."""
    plugins: list[McpPlugin] = []

    def register(
        system: ToolSystem, name: str, params: StdioServerParameters, **options: Any
    ) -> McpPlugin:
        plugin = register_mcp_server_sync(
            system, name, params, errlog=errlog, connect_timeout=WAIT, **options
        )
        plugins.append(plugin)
        return plugin

    try:
        yield register
    finally:
        for plugin in plugins:
            plugin.close()


def live_params(marks: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[LIVE_SERVER], env={"MCP_FIXTURE_MARKS": str(marks)}
    )


def wait_for_file(path: Path) -> str:
    """Wait (bounded) for a marker file the server process writes; return its text."""
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"the server never wrote {path.name}"
        time.sleep(0.005)
    return path.read_text()


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited and been reaped, waiting a bounded time."""
    deadline = time.monotonic() + WAIT
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def run(system: ToolSystem, name: str, arguments: Any, **extra: Any) -> ToolExecutionResult:
    """``system.execute`` in a fresh thread (its own loop), bounded."""
    call = ExecuteCall(call_id=f"call-{name}", name=name, arguments=arguments, **extra)
    result: ToolExecutionResult = spawn(system, call).result(WAIT)
    return result


def failure(result: ToolExecutionResult) -> dict[str, Any]:
    assert isinstance(result, ToolExecutionFailure), result.to_dict()
    projected: dict[str, Any] = result.to_dict()
    return projected


def texts(result: ToolExecutionResult) -> list[str]:
    return [block["text"] for block in result.content]


class Changes:
    """Counts ``change`` notifications of ``system`` and waits for the registry to settle."""

    def __init__(self, system: ToolSystem) -> None:
        self.system = system
        self.count = 0
        self._changed = threading.Condition()
        system.tools.on_change(self._seen)

    def _seen(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        with self._changed:
            assert self._changed.wait_for(condition, WAIT), f"timed out waiting for {what}"

    def names(self) -> list[str]:
        return self.system.tools.names()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class HttpServer:
    """The live server over Streamable HTTP on one 127.0.0.1 port, as a child process."""

    def __init__(self, marks: Path, log: Any, mode: str = "http") -> None:
        self.mode = mode  # "http", or "http-400": see tests/mcp_live_server.py
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._marks = marks
        self._log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "MCP_FIXTURE_MARKS": str(self._marks)}
        self.process = subprocess.Popen(
            [sys.executable, LIVE_SERVER, self.mode, str(self.port)],
            env=env,
            stdout=self._log,
            stderr=self._log,
        )
        deadline = time.monotonic() + WAIT
        while True:
            assert self.process.poll() is None, "the HTTP server exited at start"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server never listened"
                time.sleep(0.02)

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(WAIT)
        self.process = None
