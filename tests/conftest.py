"""Shared fixtures for the registry, pipeline, timeout and session tests.

- ``system``: a native-mode ``ToolSystem`` without a code runtime, stopped after the test;
  ``make_system(...)`` starts more (other modes, an approval service) and stops them too.
- ``echo(...)``: the typed echo tool the pipeline tests share (parameters
  ``{text: string}``, output ``string``, rendered as one text block, body ``args.text or ""``).
- ``fixture(name, ...)``: a content-fixture tool whose canonical value is its content list
  (output schema: an array of JSON; ``render`` returns the value); by default it returns
  ``[text "ran:<name>"]``.
- ``call(name, args, ...)``: an ``ExecuteCall``; ``text(result)``: the single text block.
- ``ManualClock``: a timer source for ``timeout_policy(clock=...)`` advanced by hand.
- ``spawn(system, call)``: run ``system.execute`` in a fresh thread (for bodies gated on
  ``threading.Event``); ``arun(coro)``: ``asyncio.run`` for ``execute_async`` scenarios.
- ``results_of(system)``: ``call_id -> tool/result data`` of the session (one per call, checked).
- ``logs``: captures structlog events from every thread; ``logs.wait_for_warnings(n)``.
- ``errlog``, ``connect``: MCP server stderr per module, and ``connect(system, **options)``
  registering the live MCP test server (closed after the test).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import types
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec
import pytest
import structlog
from structlog.testing import LogCapture

# A local Ray instance started by the tests (or by the documentation examples they run) binds
# and talks on 127.0.0.1 only: Ray reads this before it is first imported, and its processes
# inherit it. Without it Ray picks the machine's outward interface address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from dsh_tools import (
    AbortSignal,
    ExecuteCall,
    ExecutionToken,
    ToolDefinition,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)

WAIT = 10.0
"""Upper bound for any ``Event.wait`` in the tests (a hang fails instead of blocking)."""


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    """A running native-mode system with no code runtime."""
    started = ToolSystem.start(code_runtime=None)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def make_system() -> Iterator[Callable[..., ToolSystem]]:
    """A factory ``make_system(mode="native", approval=None)``; every system is stopped."""
    started: list[ToolSystem] = []

    def make(mode: str = "native", approval: Any = None) -> ToolSystem:
        s = ToolSystem.start(ToolsConfig(mode=mode), approval=approval, code_runtime=None)
        started.append(s)
        return s

    try:
        yield make
    finally:
        for s in started:
            s.stop()


class Logs(LogCapture):
    """A structlog capture that lets a test wait (bounded) for log lines from other threads."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        with self._changed:
            try:
                return super().__call__(logger, method_name, event_dict)
            finally:
                self._changed.notify_all()

    @property
    def warnings(self) -> list[str]:
        """The text of every warning so far."""
        with self._changed:
            return [e["event"] for e in self.entries if e["log_level"] == "warning"]

    def wait_for_event(self, event: str) -> dict[str, Any]:
        """Wait until a line with this event text was logged; return its entry."""
        with self._changed:
            assert self._changed.wait_for(
                lambda: any(e["event"] == event for e in self.entries), WAIT
            ), f"expected {event!r}, got {self.entries}"
            return next(e for e in self.entries if e["event"] == event)

    def wait_for_warnings(self, count: int) -> list[str]:
        """Wait until at least ``count`` warnings were logged; return them all."""
        with self._changed:
            assert self._changed.wait_for(
                lambda: sum(e["log_level"] == "warning" for e in self.entries) >= count, WAIT
            ), f"expected {count} warnings, got {self.entries}"
        return self.warnings


@pytest.fixture
def logs() -> Iterator[Logs]:
    """Capture structlog output (every thread) for the duration of a test."""
    capture = Logs()
    previous = structlog.get_config()["processors"]
    structlog.configure(processors=[capture])
    try:
        yield capture
    finally:
        structlog.configure(processors=previous)


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def echo(**extra: Any) -> ToolDefinition:
    """The echo tool most tests use; ``extra`` goes to ``define_tool`` (execute, timeout_ms...)."""
    options: dict[str, Any] = {
        "name": "echo",
        "description": "echo arguments back",
        "parameters": {"text": {"type": "string"}},
        "output": ToolOutput(
            schema={"type": "string"}, render=lambda args, value: [_text_block(value)]
        ),
        "execute": lambda args, ctx: args.get("text") or "",
    }
    options.update(extra)
    return define_tool(**options)


def content_output(presentation_meta: Any = None) -> ToolOutput:
    """The content-fixture output: the value is the content list, rendered as itself."""
    return ToolOutput(
        schema={"type": "array", "items": {}},
        render=lambda args, value: value,
        presentation_meta=presentation_meta,
    )


def fixture(
    name: str,
    execute: Callable[..., Any] | None = None,
    *,
    parameters: Any = None,
    description: str | None = None,
    **extra: Any,
) -> ToolDefinition:
    """A raw content-fixture tool; the default body returns ``[text "ran:<name>"]``."""
    if execute is None:

        def execute(args: Any, ctx: Any) -> Any:
            return [_text_block(f"ran:{name}")]

    return ToolDefinition(
        name=name,
        description=description if description is not None else f"{name} fixture",
        parameters=parameters if parameters is not None else {"type": "object"},
        output=content_output(),
        execute=execute,
        **extra,
    )


def text_tool(name: str, text: str) -> ToolDefinition:
    """A content fixture that always answers ``[text <text>]``."""
    return fixture(name, lambda args, ctx: [_text_block(text)])


def call(
    name: str = "echo",
    arguments: Any = None,
    *,
    call_id: str = "c1",
    signal: AbortSignal | None = None,
    agent: str | None = None,
    parent: ExecutionToken | None = None,
) -> ExecuteCall:
    """An ``ExecuteCall``; ``arguments`` defaults to ``{"text": "hi"}`` for echo, else ``{}``."""
    if arguments is None:
        arguments = {"text": "hi"} if name == "echo" else {}
    return ExecuteCall(
        call_id=call_id,
        name=name,
        arguments=arguments,
        signal=signal,  # type: ignore[arg-type]
        agent=agent,
        parent=parent,
    )


def text(result: ToolExecutionResult) -> str:
    """The text of the result's single text block."""
    content = list(result.content)
    assert len(content) == 1, content
    block = content[0]
    assert block["type"] == "text", block
    value: str = block["text"]
    return value


class Recording:
    """A tool body that records the arguments and run context of every run and returns
    ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.args: list[Any] = []
        self.contexts: list[Any] = []

    def __call__(self, args: Any, ctx: Any) -> Any:
        self.args.append(args)
        self.contexts.append(ctx)
        return self.value


def results_of(system: ToolSystem) -> dict[str, Any]:
    """``call_id -> tool/result data`` of the session, failing on a second result per call."""
    seen: dict[str, Any] = {}
    for event in system.session.events:
        if event.type == "tool/result":
            call_id = event.data["call_id"]
            assert call_id not in seen, f"two results for {call_id}"
            seen[call_id] = event.data
    return seen


def ask(system: ToolSystem, request: ExecuteCall) -> ToolExecutionResult:
    """``system.ref.ask(request)``, bounded."""
    result: ToolExecutionResult = system.ref.ask(request, block=True, timeout=WAIT)
    return result


def value_of(result: ToolExecutionResult) -> Any:
    """The value of a success (fails the test, showing the failure, otherwise)."""
    assert isinstance(result, ToolExecutionSuccess), result.to_dict()
    return result.value


def block(value: str) -> dict[str, Any]:
    """A text content block."""
    return _text_block(value)


def not_lossless(boundary: str, detail: str) -> dict[str, Any]:
    """The projection of a failure for data that is not lossless JSON: the boundary's pinned
    text (``"tool execution arguments"``, ``"tool result"``), then the path and what is
    there."""
    message = f"{boundary} must be losslessly JSON-serializable: {detail}"
    return {
        "content": [{"type": "text", "text": "Error: " + message}],
        "is_error": True,
        "error": {"message": message},
    }


def context(source: str, **extra: Any) -> dict[str, Any]:
    """A hook context tagged with ``source`` (a plugin name)."""
    out: dict[str, Any] = {
        "content": [_text_block(source)],
        "source": {"kind": "plugin", "plugin": source},
    }
    out.update(extra)
    return out


def sources(result: ToolExecutionResult) -> list[str]:
    """The plugin names of the result's additional contexts, in order."""
    return [c["source"]["plugin"] for c in result.additional_contexts]


class _Timer:
    __slots__ = ("callback", "cancelled", "due")

    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A ``call_later`` source that only moves when ``advance(ms)`` is called."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[_Timer] = []
        self._lock = threading.Lock()

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        with self._lock:
            timer = _Timer(self.now + delay, callback)
            self._timers.append(timer)
            return timer

    @property
    def pending(self) -> int:
        """Timers neither fired nor cancelled."""
        with self._lock:
            return sum(1 for t in self._timers if not t.cancelled)

    def advance(self, ms: float) -> None:
        """Move time forward and fire every due timer, earliest first."""
        with self._lock:
            self.now += ms / 1000
            due = sorted((t for t in self._timers if t.due <= self.now), key=lambda t: t.due)
            self._timers = [t for t in self._timers if t.due > self.now]
        for timer in due:
            if not timer.cancelled:
                timer.callback()


def spawn(system: ToolSystem, request: ExecuteCall) -> concurrent.futures.Future[Any]:
    """Run ``system.execute(request)`` in a new thread; the future gets its result."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(system.execute(request))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="test-execute", daemon=True).start()
    return future


def arun(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a test coroutine on a fresh event loop."""
    return asyncio.run(coro)


def wait(event: threading.Event) -> None:
    """Wait (bounded) for a thread gate; fail the test if it never opens."""
    assert event.wait(WAIT), "timed out waiting for an event"


async def await_event(event: asyncio.Event) -> None:
    """Await an asyncio gate, bounded."""
    await asyncio.wait_for(event.wait(), WAIT)


async def next_of(next: Callable[[], Any]) -> Any:
    """``await next()`` (a readable pass-through for hook bodies)."""
    return await next()


def projected() -> ToolDefinition:
    """A tool with an object output, a renderer and a presentation projector."""
    return define_tool(
        name="projected",
        description="projected tool",
        parameters={},
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {"text": {"type": "string", "required": True}},
            },
            render=lambda a, v: [block("render:" + v["text"])],
            presentation_meta=lambda a, v: {"projected": v["text"]},
        ),
        execute=lambda a, c: {"text": "body"},
    )


def changed_after(decision: Any, **fields: Any) -> Any:
    """``decision`` with ``fields`` set after it was built, past its own checks: what the
    pipeline checks again at call time."""
    for name, value in fields.items():
        msgspec.structs.force_setattr(decision, name, value)
    return decision


def post_returning(system: ToolSystem, decision: Any) -> None:
    """Install a post-execute listener that returns ``decision`` without calling next."""

    async def post(exec: Any, result: Any, next: Any) -> Any:
        return decision

    system.tools.on_post_execute(post)


# --- MCP servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def errlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextIO]:
    """Where a test module's MCP server processes write their stderr."""
    with open(tmp_path_factory.mktemp("mcp-logs") / "stderr.txt", "w") as log:
        yield log


@pytest.fixture
def connect(tmp_path: Path, errlog: TextIO) -> Iterator[Callable[..., Any]]:
    """``connect(system, **options)``: the live MCP test server (``mcp_live_server.py``, over
    stdio) registered into ``system``; closed after the test."""
    from mcp_support import live_params, registering

    with registering(errlog) as register:
        yield lambda system, **options: register(system, "live", live_params(tmp_path), **options)


class PausedAtLine:
    """Runs ``work()`` on a thread of its own that stops at line ``line`` of ``code`` (the first
    time it gets there) until ``resume()``: a way to put another thread's step at exactly that
    point of a race. ``reached`` says whether it got there; if not, the thread has finished."""

    def __init__(self, code: types.CodeType, line: int, work: Callable[[], object]) -> None:
        self._code, self._line, self._work = code, line, work
        self._paused, self._resume = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()
        while not self._paused.wait(0.01) and self._thread.is_alive():
            pass
        self.reached = self._paused.is_set()

    def _on_line(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == self._line and not self._paused.is_set():
            self._paused.set()
            self._resume.wait(WAIT)
        return self._on_line

    def _trace(self, frame: types.FrameType, event: str, arg: object) -> Any:
        return self._on_line if frame.f_code is self._code else None

    def _run(self) -> None:
        sys.settrace(self._trace)
        try:
            self._work()
        finally:
            sys.settrace(None)

    def resume(self) -> None:
        """Let the thread go on, and wait for it to finish."""
        self._resume.set()
        self._thread.join(WAIT)


def lines_of(code: types.CodeType) -> list[int]:
    """The line numbers of ``code``'s body (its first line, the ``def``, left out)."""
    return sorted({line for _, _, line in code.co_lines() if line})[1:]
