"""The outer-output ledger: exact JSON byte accounting with early exit.

What a run gives back to the model (its logs plus the completion value or the failure message)
is capped at ``max_output_bytes`` counted as compact JSON: the logs array (``2`` for ``[]``, each
entry's JSON string size, one byte per separating comma) plus either the value's JSON size or
the failure message's JSON string size.

Admission rules:

- Log entries are admitted in order while they fit. The first that does not fit ends the run as
  ``output-limit``.
- A completion value or failure message that does not fit what the logs left becomes
  ``output-limit`` (never a truncated substitute).
- An ``output-limit`` result reserves room for its message first (``outer output exceeded N
  bytes``, itself cut to a prefix when even that does not fit beside ``[]``), then keeps the logs
  that fit what is left, the first one that does not fit cut to its longest code-point-aligned
  prefix (kept only when non-empty). The counted total never exceeds the cap.

Sizes are measured from ``msgspec.json`` text in bounded chunks, so an over-budget string is never
encoded whole.

What is kept: the first ``MAX_LOG_ENTRIES - 1`` entries as they are; every later one is joined
to the last entry by a newline, held as UTF-8 bytes. Each entry still counts as an entry of its
own (so what fits is decided exactly as above), and the text a model is shown (the entries
joined by newlines) is the same; the joined entry only counts less (a newline escape, 2 bytes,
instead of a closing quote, a comma and an opening quote). A program printing millions of tiny
entries would otherwise make whoever holds the ledger keep one string object per entry, some
18 bytes per counted byte.

The worker mirrors this ledger before sending; the host repeats it for everything it receives.
This module imports only the standard library and ``msgspec``.
"""

from __future__ import annotations

import collections
import itertools
import operator
import re
from typing import Any, Final

import msgspec

from ._tokens import ArrayMarker, ObjectMarker

__all__ = [
    "MAX_LOG_ENTRIES",
    "OutputLedger",
    "clean_text",
    "json_prefix",
    "json_size_floor",
    "json_str_size",
    "limit_message",
    "over_room",
    "tokens_json_size",
]

_CHUNK: Final = 1 << 16
_NO_VALUE: Final[Any] = object()
MAX_LOG_ENTRIES: Final = 100_000
"""The most log entries a ledger keeps apart; later ones join the last (see the docstring)."""
_encode = msgspec.json.encode
_SURROGATES: Final = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by one U+FFFD: what enters a run's output
    (captured text, a traceback, a failure message) must encode as UTF-8 on the wire."""
    if text.isascii():
        return text
    return _SURROGATES.sub("\ufffd", text)


def limit_message(cap: int) -> str:
    """The ``output-limit`` message for a cap."""
    return f"outer output exceeded {cap} bytes"


def json_str_size(text: str, limit: int) -> int:
    """JSON string size of ``text`` (quotes included); any number above ``limit`` means "over".

    Every character costs at least one byte, so a string longer than the limit is over without
    encoding anything; otherwise it is encoded in bounded chunks with early exit.
    """
    length = len(text)
    if length + 2 > limit:
        return limit + 1
    if length <= _CHUNK:
        return len(_encode(text))
    total = 2
    for start in range(0, length, _CHUNK):
        total += len(_encode(text[start : start + _CHUNK])) - 2
        if total > limit:
            return limit + 1
    return total


def json_prefix(text: str, room: int) -> str | None:
    """The longest prefix of ``text`` whose JSON string size is at most ``room``.

    ``None`` when not even ``""`` fits.
    """
    if room < 2:
        return None
    budget = room - 2
    taken = 0
    length = len(text)
    start = 0
    while start < length:
        chunk = text[start : start + _CHUNK]
        size = len(_encode(chunk)) - 2
        if taken + size <= budget:
            taken += size
            start += len(chunk)
            continue
        low, high = 0, len(chunk)  # chunk[:low] fits, chunk[:high] does not
        while high - low > 1:
            middle = (low + high) // 2
            if taken + len(_encode(chunk[:middle])) - 2 <= budget:
                low = middle
            else:
                high = middle
        return text[: start + low]
    return text


_MAX_ESCAPE: Final = 6
"""The most JSON bytes one character can take (``\\u0000``)."""
_TEXT_KINDS: Final = frozenset({str, ObjectMarker})


def _text_length(tokens: list[Any]) -> int:
    """How many characters of text (strings and object keys) a token list holds; numbers,
    booleans and arrays are skipped at C speed (a completion can hold millions of them)."""
    if _TEXT_KINDS.isdisjoint(set(map(type, tokens))):
        return 0
    chars = 0
    for token in itertools.compress(tokens, map(_TEXT_KINDS.__contains__, map(type, tokens))):
        if type(token) is str:
            chars += len(token)
        else:
            chars += sum(map(len, token.keys))
    return chars


_keys_of = operator.attrgetter("keys")
_IS_OBJECT: Final = frozenset({ObjectMarker}).__contains__


def over_room(tokens: list[Any], room: int) -> bool:
    """Whether the value a (valid) token list describes cannot fit ``room`` bytes of compact
    JSON, as far as ``json_size_floor`` tells. That floor lies between ``2 * n - 1`` and
    ``5 * n`` for ``n`` tokens, so a list far enough from ``room`` either way is judged by its
    length alone (a million integers in a large room, at once)."""
    count = len(tokens)
    if 5 * count <= room:
        return False
    if 2 * count - 1 > room:
        return True
    return json_size_floor(tokens) > room


def json_size_floor(tokens: list[Any]) -> int:
    """A lower bound on the compact JSON size of the value a (valid) token list describes,
    counted at C speed from the kinds of its tokens: every value takes a byte (a container
    two), every value but the first a separator (a comma, or the colon after its key) but for
    the first item of each array, and every key its two quotes. Exact for an array of empty
    objects, the shape that costs the most to build per byte of JSON."""
    total = len(tokens)
    if not total:
        return 0
    kinds = collections.Counter(map(type, tokens))
    arrays = kinds[ArrayMarker]
    objects = kinds[ObjectMarker]
    keys = 0
    if objects:
        markers = itertools.compress(tokens, map(_IS_OBJECT, map(type, tokens)))
        keys = sum(map(len, map(_keys_of, markers)))
    return total + arrays + objects + max(total - 1 - arrays, 0) + 2 * keys


def tokens_json_size(tokens: list[Any], limit: int) -> int:
    """Compact JSON size of the value a (valid) token list describes; above ``limit`` = over."""
    total = 0
    for token in tokens:
        kind = type(token)
        if kind is str:
            total += json_str_size(token, limit - total)
        elif token is None or token is True:
            total += 4
        elif token is False:
            total += 5
        elif kind is int:
            total += len(str(token))
        elif kind is float:
            total += len(_encode(token))
        elif kind is ArrayMarker:
            length = token.length
            total += 2 + (length - 1 if length else 0)
        elif kind is ObjectMarker:
            keys = token.keys
            total += 2 + (len(keys) - 1 if keys else 0)
            for key in keys:
                total += json_str_size(key, limit - total) + 1
                if total > limit:
                    return limit + 1
        if total > limit:
            return limit + 1
    return total


class OutputLedger:
    """Admits log entries against a cap and decides whether a completion or failure fits."""

    __slots__ = ("_joined", "_kept", "cap", "overflow", "overflowed", "used")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        # The entries kept apart, then (once there are MAX_LOG_ENTRIES - 1 of them) the last
        # entry: every later admitted entry, UTF-8, joined by newlines.
        self._kept: list[str] = []
        self._joined: bytearray | None = None
        self.used = 2  # the counted size of the logs array; above 2 once an entry is admitted
        self.overflowed = False
        self.overflow: str | None = None

    @property
    def logs(self) -> list[str]:
        """The admitted entries (a new list; the joined last entry decoded)."""
        joined = self._joined
        if joined is None:
            return list(self._kept)
        return [*self._kept, joined.decode("utf-8", "surrogatepass")]

    @property
    def has_logs(self) -> bool:
        """Whether any entry was admitted."""
        return self.used > 2

    @property
    def room(self) -> int:
        """Bytes left for a completion value or failure message."""
        return self.cap - self.used

    def admit(self, entry: str) -> bool:
        """Admit one log entry; ``False`` (and the ledger is overflowed) when it does not fit."""
        if self.overflowed:
            return False
        comma = 1 if self.used > 2 else 0
        room = self.cap - self.used - comma
        size = json_str_size(entry, room)
        if size <= room:
            kept = self._kept
            if len(kept) < MAX_LOG_ENTRIES - 1:
                kept.append(entry)
            elif self._joined is None:
                self._joined = bytearray(entry.encode("utf-8", "surrogatepass"))
            else:
                self._joined += b"\n"
                self._joined += entry.encode("utf-8", "surrogatepass")
            self.used += comma + size
            return True
        self.overflowed = True
        self.overflow = entry
        return False

    def overflow_prefix(self) -> str:
        """The part of the overflowing entry that fits beside the limit message ("" if none)."""
        if self.overflow is None:
            return ""
        message = limit_message(self.cap)
        comma = 1 if self.used > 2 else 0
        room = self.cap - self.used - comma - json_str_size(message, self.cap)
        return json_prefix(self.overflow, room) or ""

    def fits_value(self, tokens: list[Any], value: Any = _NO_VALUE) -> bool:
        """Whether a completion value (as tokens) fits beside the admitted logs. ``value``, the
        value the tokens describe when the caller has it, is measured by the C encoder (its
        compact JSON is exactly what the tokens count) when that cannot cost much more than the
        cap: JSON escapes write up to six bytes per character, so a value whose text could
        grow past the room (or one nested deeper than the encoder goes) is counted token by
        token with early exit instead."""
        if self.overflowed:
            return False
        room = self.room
        if value is not _NO_VALUE and len(tokens) <= room:  # each token is at least one byte
            chars = _text_length(tokens)
            if chars > room:
                return False
            if chars * _MAX_ESCAPE <= room:
                try:
                    return len(_encode(value)) <= room
                except (RecursionError, TypeError):  # too deep, or not a value: count tokens
                    pass
        return tokens_json_size(tokens, room) <= room

    def fits_message(self, message: str) -> bool:
        """Whether a failure message fits beside the admitted logs."""
        if self.overflowed:
            return False
        room = self.room
        return json_str_size(message, room) <= room

    def limited(self) -> tuple[list[str], str]:
        """The logs and message of an ``output-limit`` result (total within the cap)."""
        cap = self.cap
        message = limit_message(cap)
        if json_str_size(message, cap - 2) > cap - 2:
            message = json_prefix(message, cap - 2) or ""
        budget = cap - json_str_size(message, cap)
        kept: list[str] = []
        used = 2
        logs = self.logs
        entries = logs if self.overflow is None else [*logs, self.overflow]
        for entry in entries:
            comma = 1 if kept else 0
            room = budget - used - comma
            size = json_str_size(entry, room)
            if size <= room:
                kept.append(entry)
                used += comma + size
                continue
            prefix = json_prefix(entry, room)
            if prefix:
                kept.append(prefix)
            break
        return kept, message
