"""One MCP tool call's progress notifications, kept within a bound in the session log.

A server may send progress without pause (thousands a second) for as long as a call runs, and
every ``tool/progress`` event stays in the session log, which most harnesses leave unbounded.
So one call records at most ``MAX_PROGRESS_EVENTS`` events: the first notifications each as
it comes, up to one fewer than the bound; later ones are held, only the latest, and recorded
as the call ends (however it ends) as its last progress event, carrying ``dropped``, how many
notifications after the last one recorded were left out. A notification that arrives once the
call is over is recorded no more (the call's result is in the log already). The bound is one
run of the tool's body, one request: an execute wrapper that retries the call runs it again,
with a bound of its own.

The ``on_progress`` callback is another matter: it gets every notification, under its own
back-pressure (``CallbackRunner.progress``), whether recorded or not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

import msgspec

from ._types import McpProgress

__all__ = ["MAX_PROGRESS_EVENTS", "CallProgress", "ProgressSink"]

MAX_PROGRESS_EVENTS: Final = 1_000
"""The ``tool/progress`` session events one MCP tool call records at most."""


class ProgressSink(msgspec.Struct, frozen=True):
    """Where a call's progress goes: ``record(progress, dropped)`` appends the session event
    (``dropped`` is ``None`` but for the coalesced last one), ``deliver(progress)`` hands it to
    the ``on_progress`` callback."""

    record: Callable[[McpProgress, int | None], None]
    deliver: Callable[[McpProgress], None]


class CallProgress:
    """The progress of one call: ``add`` on the client loop for each notification, ``end``
    once, from the call's own thread, when it is over. The lock orders those two threads: no
    event is recorded after ``end`` has recorded the coalesced one."""

    __slots__ = ("_dropped", "_latest", "_lock", "_over", "_recorded", "_sink")

    def __init__(self, sink: ProgressSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._recorded = 0
        self._latest: McpProgress | None = None
        self._dropped = 0
        self._over = False

    def add(self, progress: McpProgress) -> None:
        with self._lock:
            if not self._over:
                if self._recorded < MAX_PROGRESS_EVENTS - 1:
                    self._recorded += 1
                    self._sink.record(progress, None)
                else:
                    if self._latest is not None:
                        self._dropped += 1
                    self._latest = progress
        self._sink.deliver(progress)

    def end(self) -> None:
        with self._lock:
            if self._over:
                return
            self._over = True
            latest, self._latest = self._latest, None
            if latest is not None:
                self._sink.record(latest, self._dropped)
