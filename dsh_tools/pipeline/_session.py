"""``SessionLog``: the durable record of what happened, in the order it happened.

Every top-level call records ``tool/call`` then ``tool/result``; Code Mode sub-calls record
``tool/code-dispatch-start`` and ``tool/code-dispatch`` instead; drained batch contexts are
``user/message`` events after the batch's last result. Field names are snake_case and values are
frozen JSON (never the canonical ``value`` of a result).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any

import msgspec
from msgspec import UNSET

from ..actors import FrozenDict, FrozenList, ToolExecutionResult
from ..actors._agent_key import check_agent_key
from ..actors._config import number_text

__all__ = ["SessionEvent", "SessionLog"]


class SessionEvent(msgspec.Struct, frozen=True):
    """One logged event: ``type`` (``tool/result``...), snake_case ``data``, ``time``, ``agent``.

    Events are tracked by the cyclic garbage collector: ``SessionLog.append`` takes any data,
    which may lead back to whatever holds the log (a harness logging one of its own callbacks),
    and such a cycle must still be collected once the harness lets go of it."""

    type: str
    data: Any
    time: float = 0.0
    agent: str | None = None


class SessionLog:
    """An append-only, thread-safe event log with an optional ``max_events`` bound."""

    def __init__(self, max_events: int | None = None) -> None:
        if max_events is not None and (
            type(max_events) is not int or not 1 <= max_events <= sys.maxsize
        ):
            # The bound of a deque's length; a larger one is no bound at all: pass None. A
            # wrong type (a bool, a float, a str read from a setting) is a TypeError, as for
            # every other setting.
            raise (ValueError if type(max_events) is int else TypeError)(
                "SessionLog(max_events): max_events must be a positive integer of at most "
                f"{sys.maxsize}, or None for no bound; got {number_text(max_events)}"
            )
        self._events: deque[SessionEvent] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.max_events = max_events

    @property
    def events(self) -> list[SessionEvent]:
        """A copy of the events, oldest first."""
        with self._lock:
            return list(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def clear(self) -> None:
        """Forget every event."""
        with self._lock:
            self._events.clear()

    def append(self, type: str, data: Any, agent: str | None = None) -> SessionEvent:
        """Record one event now and return it."""
        with self._lock:  # stamped in the lock: the log's order is the order of its times
            event = SessionEvent(type, data, time.time(), agent)
            self._events.append(event)
        return event

    # --- the pipeline's records ----------------------------------------------------------------

    def record_call(self, call_id: str, name: str, arguments: Any, agent: str | None) -> None:
        """``tool/call``: ``arguments`` is the raw text (batch) or compact JSON (or None)."""
        self.append("tool/call", self.call_data(call_id, name, arguments), agent)

    def call_data(self, call_id: str, name: str, arguments: Any) -> FrozenDict:
        """The data of a ``tool/call`` event (``record_call`` appends one)."""
        return FrozenDict(call_id=call_id, name=name, arguments=arguments)

    def awaits_result(self, call_data: Any, agent: str | None) -> bool:
        """Whether the ``tool/call`` event holding ``call_data`` (this very object) is in the log
        with no ``tool/result`` of its call after it: for a call whose recording an
        interruption may have cut short, before or after an event was appended."""
        call_id = call_data["call_id"]
        with self._lock:
            answered = False
            for event in reversed(self._events):
                if event.data is call_data:
                    return not answered
                if (
                    event.type == "tool/result"
                    and event.agent == agent
                    and event.data["call_id"] == call_id
                ):
                    answered = True
        return False

    def record_result(self, call_id: str, result: ToolExecutionResult, agent: str | None) -> None:
        """``tool/result``: content, is_error, error info when present, meta when present."""
        is_error = result.is_error
        data: dict[str, Any] = {"call_id": call_id, "content": result.content, "is_error": is_error}
        if is_error:
            info = result.error.info  # type: ignore[union-attr]
            if info is not UNSET:
                data["error"] = FrozenDict(name=info.name, code=info.code)
        if result.meta is not UNSET:
            data["meta"] = result.meta
        self.append("tool/result", FrozenDict(data), agent)

    def record_context(self, context: Any, agent: str | None) -> None:
        """``user/message`` for one drained hook context (content, source, placement, meta)."""
        data: dict[str, Any] = {}
        if isinstance(context, dict):
            for key in ("content", "source", "placement", "meta"):
                if key in context:
                    data[key] = context[key]
        else:
            data["content"] = context
        self.append("user/message", FrozenDict(data), agent)

    def derive_messages(self, agent: str | None = None) -> list[dict[str, Any]]:
        """The model history: one user message per ``tool/result`` (a single ``tool-result``
        block) and per ``user/message``; dispatch and call events derive nothing. ``agent``
        keeps that agent's events only (``TypeError`` for a key that is not a ``str``)."""
        check_agent_key(agent)
        out: list[dict[str, Any]] = []
        for event in self.events:
            if agent is not None and event.agent != agent:
                continue
            data = event.data
            if event.type == "tool/result":
                block = {
                    "type": "tool-result",
                    "tool_call_id": data["call_id"],
                    "content": data["content"],
                    "is_error": data["is_error"],
                }
                out.append({"role": "user", "content": [block]})
            elif event.type == "user/message":
                content = data.get("content", FrozenList())
                out.append({"role": "user", "content": content})
        return out
