"""The harness's callbacks for one connection, run off the session's way.

A callback (sampling, elicitation, roots, list changes, progress) is the harness's code: a
plain one runs on one of the connection's own callback threads, a coroutine function as a task
on its client loop. None of them holds the session's receive loop, so a slow one delays only
what waits for its answer, never the connection's other requests. Progress is delivered in
order, one notification after another, and at most ``MAX_PENDING_PROGRESS`` wait behind a slow
callback (later ones are dropped with a warning; the session events are bounded per call on
their own, ``_progress``). Closing
the connection waits for none of them: a plain callback still running then is left to its
thread, which ends when it returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Final

from ...actors import message_of, without_stop_iteration
from ...actors._logging import get_logger
from ._types import McpProgress, ProgressCallback

__all__ = ["MAX_PENDING_PROGRESS", "CallbackRunner"]

_log = get_logger("dsh_tools.mcp")

MAX_PENDING_PROGRESS: Final = 1_000
"""Progress notifications that may wait for a slow ``on_progress`` callback."""


class CallbackRunner:
    """Runs one connection's harness callbacks (call every method on its client loop, but
    ``close``)."""

    def __init__(self, label: str, loop: asyncio.AbstractEventLoop) -> None:
        self._label = label
        self._loop = loop
        self._threads = ThreadPoolExecutor(thread_name_prefix=f"mcp-callback[{label}]")
        self._background: set[asyncio.Task[None]] = set()
        self._progress: deque[tuple[ProgressCallback, McpProgress]] = deque()
        self._delivering = False
        self._dropping = False
        self._closed = False

    async def call(self, callback: Callable[..., Any], *args: Any) -> Any:
        """What ``callback(*args)`` returns: a coroutine function awaited here, anything else
        run on a callback thread (an awaitable it returns is awaited here)."""
        if inspect.iscoroutinefunction(callback):
            return await callback(*args)
        context = contextvars.copy_context()
        out = await self._loop.run_in_executor(
            self._threads,
            partial(context.run, without_stop_iteration, "the MCP callback", callback, *args),
        )
        if inspect.isawaitable(out):
            out = await out
        return out

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task of its own, held until it ends."""
        task = self._loop.create_task(work)
        self._background.add(task)  # a strong reference until it is done
        task.add_done_callback(self._background.discard)

    def progress(self, callback: ProgressCallback, progress: McpProgress) -> None:
        """Queue ``callback(progress)`` behind the progress already queued (none once the
        connection closed: its calls are over)."""
        if self._closed:
            return
        if len(self._progress) >= MAX_PENDING_PROGRESS:
            if not self._dropping:
                self._dropping = True
                _log.warning(
                    "MCP progress dropped: on_progress is behind",
                    server=self._label,
                    pending=len(self._progress),
                )
            return
        self._dropping = False
        self._progress.append((callback, progress))
        if not self._delivering:
            self._delivering = True
            self.in_background(self._deliver_progress())

    async def _deliver_progress(self) -> None:
        try:
            while self._progress and not self._closed:
                callback, progress = self._progress.popleft()
                try:
                    await self.call(callback, progress)
                except Exception as exc:
                    _log.warning(
                        "MCP on_progress callback failed", server=self._label, error=message_of(exc)
                    )
        finally:
            self._delivering = False

    def close(self) -> None:
        """Start no more callbacks (progress still queued is dropped: the connection and its
        calls are over); plain ones running are left to their threads."""
        self._closed = True
        self._progress.clear()
        self._threads.shutdown(wait=False, cancel_futures=True)
