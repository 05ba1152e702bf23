"""Helpers for the dispatcher pool tests.

- ``Gates``: a tool body that blocks until the test releases it, keyed by call id. ``"async"``
  bodies are coroutines on the system loop, gated by an ``asyncio.Event`` created inside the
  body; ``"thread"`` bodies are plain functions on the worker threads, gated by a
  ``threading.Event``. It records start and end order and the peak of bodies running at once.
- ``batch(...)`` / ``tool_call(...)``: an ``ExecuteBatch`` of raw-text tool calls.
- ``in_background(system, batch, *gates)``: run ``execute_batch`` on a helper thread while the
  test opens gates; on exit every gate opens, so a failing test never leaves a body blocked.
- ``quiesce(system)``: let the system loop run everything already scheduled. The pool's state
  changes happen on that loop, or on the worker thread of a plain body that has just returned;
  so once the loop is quiet and every body is gated, nothing can start until the test opens a
  gate: "X did not start" is then a fact, not a race.
- ``trace(system)``: the session log as ``(type, call_id or context text)`` pairs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from conftest import WAIT, block, fixture

from dsh_tools import (
    AbortSignal,
    BatchOutcome,
    ExecuteBatch,
    ToolCall,
    ToolDefinition,
    ToolExecutionResult,
    ToolSystem,
)


def tool_call(call_id: str, name: str = "x", arguments: str = "{}") -> ToolCall:
    """One model tool call with raw argument text."""
    return ToolCall(call_id, name, arguments)


def batch(
    *calls: ToolCall | str,
    name: str = "x",
    agent: str | None = None,
    signal: AbortSignal | None = None,
    max_parallel: int | None = None,
) -> ExecuteBatch:
    """A batch; a bare string is the call id of a call to ``name`` with ``{}`` arguments."""
    items = [c if isinstance(c, ToolCall) else tool_call(c, name) for c in calls]
    return ExecuteBatch(
        calls=items,
        agent=agent,
        signal=signal,  # type: ignore[arg-type]
        max_parallel=max_parallel,
    )


def safe(args: Any) -> bool:
    """A classifier that makes every call concurrency-safe."""
    return True


class Gates:
    """Gated tool bodies keyed by call id; see the module docstring."""

    def __init__(self, kind: str = "async") -> None:
        if kind not in ("async", "thread"):
            raise ValueError(kind)
        self.kind = kind
        self._cond = threading.Condition()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.running = 0
        self.peak = 0
        self._open: set[str] = set()
        self._all_open = False
        self._thread_gates: dict[str, threading.Event] = {}
        self._async_gates: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}

    # --- the body ------------------------------------------------------------------------------

    def _enter(self, call_id: str) -> bool:
        """Record a start; True when the gate is already open."""
        with self._cond:
            self.started.append(call_id)
            self.running += 1
            self.peak = max(self.peak, self.running)
            self._cond.notify_all()
            return self._all_open or call_id in self._open

    def _leave(self, call_id: str) -> None:
        with self._cond:
            self.running -= 1
            self.finished.append(call_id)
            self._cond.notify_all()

    def body(self, tag: str = "done") -> Callable[..., Any]:
        """A body that waits for its gate, then returns ``[text "<tag>:<call_id>"]``."""
        if self.kind == "async":

            async def gated_async(args: Any, ctx: Any) -> Any:
                call_id = ctx.call_id
                event = asyncio.Event()
                with self._cond:
                    self._async_gates[call_id] = (asyncio.get_running_loop(), event)
                if self._enter(call_id):
                    event.set()
                try:
                    await asyncio.wait_for(event.wait(), WAIT)
                finally:
                    self._leave(call_id)
                return [block(f"{tag}:{call_id}")]

            return gated_async

        def gated_thread(args: Any, ctx: Any) -> Any:
            call_id = ctx.call_id
            with self._cond:
                event = self._thread_gates.setdefault(call_id, threading.Event())
            if self._enter(call_id):
                event.set()
            try:
                assert event.wait(WAIT), f"gate {call_id} never opened"
            finally:
                self._leave(call_id)
            return [block(f"{tag}:{call_id}")]

        return gated_thread

    def tool(self, name: str = "x", *, parallel: bool = True, tag: str = "done") -> ToolDefinition:
        """A content-fixture tool with this gated body (concurrency-safe unless told)."""
        return fixture(name, self.body(tag), is_concurrency_safe=safe if parallel else None)

    # --- the test's side -----------------------------------------------------------------------

    def release(self, *call_ids: str) -> None:
        """Open the gates of ``call_ids`` (a body that has not started yet will not wait)."""
        for call_id in call_ids:
            with self._cond:
                self._open.add(call_id)
                thread_gate = self._thread_gates.get(call_id)
                async_gate = self._async_gates.get(call_id)
            if thread_gate is not None:
                thread_gate.set()
            if async_gate is not None:
                loop, event = async_gate
                # A closed loop means the body is gone already.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(event.set)

    def release_all(self) -> None:
        """Open every gate, now and for bodies that start later."""
        with self._cond:
            self._all_open = True
            known = set(self.started) | set(self._thread_gates) | set(self._async_gates)
        self.release(*known)

    def wait_started(self, *call_ids: str) -> None:
        """Wait (bounded) until every body in ``call_ids`` has started."""
        with self._cond:
            assert self._cond.wait_for(lambda: set(call_ids) <= set(self.started), WAIT), (
                f"expected {call_ids} to start, started {self.started}"
            )

    def wait_finished(self, *call_ids: str) -> None:
        """Wait (bounded) until every body in ``call_ids`` has returned."""
        with self._cond:
            assert self._cond.wait_for(lambda: set(call_ids) <= set(self.finished), WAIT), (
                f"expected {call_ids} to finish, finished {self.finished}"
            )


@contextmanager
def in_background(
    system: ToolSystem, request: ExecuteBatch, *gates: Gates
) -> Iterator[concurrent.futures.Future[BatchOutcome]]:
    """Run ``system.execute_batch(request)`` on a helper thread for the ``with`` block."""
    helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-batch")
    try:
        yield helper.submit(system.execute_batch, request, WAIT)
    finally:
        for gate in gates:
            gate.release_all()
        helper.shutdown(wait=True)


def quiesce(system: ToolSystem, rounds: int = 20) -> None:
    """Let the system loop run every callback already scheduled (and what those schedule)."""

    async def spin() -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)

    loop: asyncio.AbstractEventLoop = system._loop
    asyncio.run_coroutine_threadsafe(spin(), loop).result(WAIT)


def context_text(context: Any) -> str:
    """The text of a hook context's first content block."""
    return str(context["content"][0]["text"])


def trace(system: ToolSystem, agent: Any = ...) -> list[tuple[str, str]]:
    """The session as ``(type, call_id)`` pairs; contexts as ``("user/message", text)``.

    With ``agent``, only that agent's events.
    """
    out: list[tuple[str, str]] = []
    for event in system.session.events:
        if agent is not ... and event.agent != agent:
            continue
        if event.type == "user/message":
            out.append((event.type, context_text(event.data)))
        else:
            out.append((event.type, event.data["call_id"]))
    return out


def of_type(system: ToolSystem, kind: str) -> list[str]:
    """The call ids (or context texts) of the session events of type ``kind``."""
    return [label for event_type, label in trace(system) if event_type == kind]


def code(result: ToolExecutionResult) -> str | None:
    """The error code of a failure (None for a success or a failure without info)."""
    if not result.is_error:
        return None
    info = result.error.info  # type: ignore[union-attr]
    return getattr(info, "code", None)


def plugin_context(text: str) -> dict[str, Any]:
    """A hook context whose one text block is ``text``."""
    return {"content": [block(text)], "source": {"kind": "plugin", "plugin": "test"}}
