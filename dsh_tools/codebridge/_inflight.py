"""The arguments of a run's binding calls in flight, and their cap.

A program chooses how many binding calls it starts at once, and the host holds each call's
arguments until the call is answered: a program starting many calls of a slow or
approval-gated tool with large arguments would make the host hold all of them. A run may have
at most ``MAX_INFLIGHT_ARGUMENT_BYTES`` of them; the call that would go beyond fails the run
(``frame-limit``, as a host buffer over its bound does).

A call's size is what its argument tokens carry: the length of each string plus
``BYTES_PER_TOKEN`` per token, about what a decoded token costs the host (a list slot and,
for most values, an object: 16 bytes for ``None``, about 46 for an integer, 47 for an array
marker, 60 for a short string; an empty object marker, the worst, about 117), and an object
marker's keys as strings of their own (a key is held like any string value).
"""

from __future__ import annotations

from typing import Final

from ._tokens import ObjectMarker, Token

__all__ = [
    "BYTES_PER_TOKEN",
    "MAX_INFLIGHT_ARGUMENT_BYTES",
    "InflightArguments",
    "argument_bytes",
]

MAX_INFLIGHT_ARGUMENT_BYTES: Final = 64 * 2**20
BYTES_PER_TOKEN: Final = 64


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

    __slots__ = ("_held", "_sizes")

    def __init__(self) -> None:
        self._held = 0
        self._sizes: dict[int, int] = {}

    def admit(self, call_id: int, tokens: list[Token]) -> str | None:
        """Count call ``call_id``; the failure message when it would go beyond the cap."""
        size = argument_bytes(tokens)
        if self._held + size > MAX_INFLIGHT_ARGUMENT_BYTES:
            return (
                f"binding calls in flight would hold more than {MAX_INFLIGHT_ARGUMENT_BYTES} "
                f"bytes of arguments ({len(self._sizes)} calls unanswered)"
            )
        self._sizes[call_id] = size
        self._held += size
        return None

    def release(self, call_id: int) -> None:
        """Call ``call_id`` is answered (or never counted)."""
        self._held -= self._sizes.pop(call_id, 0)
