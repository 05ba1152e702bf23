"""The arguments of a run's binding calls in flight, and their cap (with the binding each call
reached, for the message of a reply over max_frame_bytes).

A program chooses how many binding calls it starts at once, and the host holds each call's
arguments until the call is answered: a program starting many calls of a slow or
approval-gated tool with large arguments would make the host hold all of them. A run may have
at most ``MAX_INFLIGHT_ARGUMENT_BYTES`` of them; the call that would go beyond fails the run
(``frame-limit``, as a host buffer over its bound does).

A call's size is what its argument tokens carry: the length of each string plus
``BYTES_PER_TOKEN`` per token, about what a decoded token costs the host (a list slot and,
for most values, an object: 16 bytes for ``None``, about 46 for an integer, 47 for an array
marker, 60 for a short string; an empty object marker, the worst, about 117), and an object
marker's keys as strings of their own (a key is held like any string value). Each call also
counts ``CALL_BYTES`` for what the host holds for any call in flight, whatever its arguments:
its task or callback and, through a tool system, its place in the pipeline (measured: about
1.3 KB a call through ``ToolSystem``, 2.8 KB a call of a binding that awaits). Without it a
program's calls of empty arguments counted 64 bytes each: a million of them fitted the cap and
held 1.3 GB of the host (2.8 GB through a bare runtime); with it at most 16,131 calls of
empty arguments are in flight at once, about 45 MB.
"""

from __future__ import annotations

from typing import Final

from ._tokens import ObjectMarker, Token
from ._worker_api import access_expression

__all__ = [
    "BYTES_PER_TOKEN",
    "CALL_BYTES",
    "MAX_INFLIGHT_ARGUMENT_BYTES",
    "InflightArguments",
    "argument_bytes",
]

MAX_INFLIGHT_ARGUMENT_BYTES: Final = 64 * 2**20
BYTES_PER_TOKEN: Final = 64
CALL_BYTES: Final = 4096
"""What each call in flight counts besides its arguments (rounded up from the host's cost)."""
_NAMED_BINDINGS: Final = 5
"""The most bindings ``unanswered`` names."""


def argument_bytes(tokens: list[Token]) -> int:
    """The size a call's argument tokens are counted as."""
    size = BYTES_PER_TOKEN * len(tokens)
    for token in tokens:
        if type(token) is str:
            size += len(token)
        elif type(token) is ObjectMarker:
            size += BYTES_PER_TOKEN * len(token.keys) + sum(map(len, token.keys))
    return size


class InflightArguments:
    """One run's count of the argument bytes of its unanswered binding calls."""

    __slots__ = ("_calls", "_held")

    def __init__(self) -> None:
        self._held = 0
        # Each call in flight by id: its counted size and the binding it reached (namespace
        # and name), which only a reply over max_frame_bytes spells out.
        self._calls: dict[int, tuple[int, str, str]] = {}

    def admit(self, call_id: int, tokens: list[Token], global_name: str, name: str) -> str | None:
        """Count call ``call_id`` of binding ``global_name.name``; the failure message when it
        would go beyond the cap."""
        # ``argument_bytes``, inline: every binding call passes here.
        size = BYTES_PER_TOKEN * len(tokens) + CALL_BYTES
        for token in tokens:
            if type(token) is str:
                size += len(token)
            elif type(token) is ObjectMarker:
                size += BYTES_PER_TOKEN * len(token.keys) + sum(map(len, token.keys))
        if self._held + size > MAX_INFLIGHT_ARGUMENT_BYTES:
            return (
                f"a call of {access_expression(global_name, name)} ({size} bytes) would make "
                f"binding calls in flight hold more than {MAX_INFLIGHT_ARGUMENT_BYTES} bytes "
                f"of arguments ({len(self._calls)} calls unanswered, each counted as "
                f"{CALL_BYTES} bytes besides its arguments)"
            )
        self._calls[call_id] = (size, global_name, name)
        self._held += size
        return None

    def release(self, call_id: int) -> tuple[str, str] | None:
        """Call ``call_id`` is answered (or never counted); the binding it reached, if it was
        counted."""
        counted = self._calls.pop(call_id, None)
        if counted is None:
            return None
        size, global_name, name = counted
        self._held -= size
        return global_name, name

    def unanswered(self) -> str | None:
        """The calls in flight, for a failure that ends them: how many, and of which bindings
        (``2 calls unanswered: tools.fetch (2)``); ``None`` when there are none."""
        if not self._calls:
            return None
        counts: dict[tuple[str, str], int] = {}
        for _size, global_name, name in self._calls.values():
            counts[global_name, name] = counts.get((global_name, name), 0) + 1
        shown = sorted(counts.items(), key=lambda item: -item[1])[:_NAMED_BINDINGS]
        names = ", ".join(
            access_expression(*binding) + (f" ({count})" if count > 1 else "")
            for binding, count in shown
        )
        if len(counts) > _NAMED_BINDINGS:
            names += f" and {len(counts) - _NAMED_BINDINGS} more bindings"
        total = len(self._calls)
        return f"{total} call{'s' if total > 1 else ''} unanswered: {names}"
