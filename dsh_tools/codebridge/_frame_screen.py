"""What a worker frame may cost the host to decode, judged from its first bytes.

Decoding a frame costs the host far more than its body: a one-byte token (``nil``, a small
integer) becomes a list slot and often an object, 16 to about 120 bytes each. A frame is
therefore screened before it is decoded, from its tag and the header of its token list (the
frames are array-like tagged structs, so the tag is the first element):

- ``Done`` and ``Log`` carry model-visible output, at most ``max_output_bytes`` of JSON text.
  Any value within that encodes to at most ``DONE_BYTES_PER_OUTPUT_BYTE`` (4.5) msgpack bytes
  per JSON byte (the worst is ``{}``: 2 bytes of JSON, ``["object", []]`` 9 bytes of tokens;
  ``[]`` costs 8, a float 9 against at least 3 such as ``0.0``; strings, integers, ``null`` and
  booleans encode smaller than their JSON) and holds at most one token per two JSON bytes
  plus one (a value's tokens each need a byte and, but for the first, a separator). A frame
  beyond that, or a ``Log`` longer than the cap, settles the run as ``output-limit``
  undecoded, as the worker's own ``OutputLimit`` does.
- ``Call`` carries binding arguments, which the host caps at ``MAX_INFLIGHT_ARGUMENT_BYTES``
  in flight: one call's frame may have a body of at most that plus ``_NAME_ROOM`` and at
  most ``MAX_CALL_TOKENS`` argument tokens; beyond either the run fails with ``frame-limit``.
- ``OutputLimit`` needs no decoding at all.

An object marker carries its keys in a list of its own, inside one token: the keys are counted
as values too (a call of one object with 22 million keys held 2 GB of the host). They are read
only when the frame is large enough to hold more values than its cap, and no further than the
cap, so the count costs at most one step per value a frame may have.

A body this screen cannot read (not a known tag, not msgpack the encoder writes) is skipped
undecoded: a frame the host would not understand anyway. A call frame it rejects is named by
the binding it calls. This module imports only the standard library, ``msgspec``, the frame
and argument definitions and how a program spells a binding.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._frames import SKIP_FRAME, FrameScreen, FrameTooLarge, OutputLimit
from ._inflight import BYTES_PER_TOKEN, MAX_INFLIGHT_ARGUMENT_BYTES
from ._worker_api import access_expression

__all__ = [
    "DONE_BYTES_PER_OUTPUT_BYTE",
    "MAX_CALL_FRAME_BYTES",
    "MAX_CALL_TOKENS",
    "FrameRejected",
    "oversize_message",
    "worker_frame_screen",
]

DONE_BYTES_PER_OUTPUT_BYTE: Final = 4.5
"""The most msgpack token bytes one byte of JSON output encodes to."""
_FRAME_ROOM: Final = 64
"""Room for what wraps a value in its frame: the array and token-list headers and the tag."""
_NAME_ROOM: Final = 64 * 1024
"""Room in a call frame for its binding names and headers."""
MAX_CALL_FRAME_BYTES: Final = MAX_INFLIGHT_ARGUMENT_BYTES + _NAME_ROOM
"""The largest body of one ``Call`` frame the host decodes."""
MAX_CALL_TOKENS: Final = MAX_INFLIGHT_ARGUMENT_BYTES // BYTES_PER_TOKEN
"""The most argument tokens (JSON values, containers included) one ``Call`` frame may hold:
as many as the arguments in flight may count (``_inflight``)."""


class FrameRejected(msgspec.Struct, frozen=True):
    """A worker frame the host did not decode: the run fails with ``kind`` and ``message``."""

    kind: str
    message: str


_OUTPUT_LIMIT: Final = OutputLimit()
_LOG_ROOM: Final = 16
"""``["Log", text]``: array header, tag and the string's header beyond its JSON size."""


_INTEGER_WIDTHS: Final = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
"""The bytes after the header byte of each integer wider than a fixed one."""
_SCALAR_WIDTHS: Final = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, **_INTEGER_WIDTHS}
"""The same for each scalar token but a string: nil, false, true, the floats, the integers."""
_STRING_WIDTHS: Final = {0xD9: 1, 0xDA: 2, 0xDB: 4}
"""The width of the length after each header byte of a string longer than a fixed one."""


class _Cursor:
    """Reads msgpack headers from the start of a body; ``ValueError`` on anything else."""

    __slots__ = ("_body", "_end", "at")

    def __init__(self, body: Any) -> None:
        self._body = body
        self._end = len(body)
        self.at = 0

    def _byte(self) -> int:
        if self.at >= self._end:
            raise ValueError("truncated")
        value: int = self._body[self.at]
        self.at += 1
        return value

    def _uint(self, width: int) -> int:
        start = self.at
        if start + width > self._end:
            raise ValueError("truncated")
        self.at = start + width
        return int.from_bytes(self._body[start : start + width], "big")

    def array(self) -> int | None:
        """An array's length; ``None`` for ``nil``."""
        head = self._byte()
        if 0x90 <= head <= 0x9F:
            return head & 0x0F
        if head == 0xDC:
            return self._uint(2)
        if head == 0xDD:
            return self._uint(4)
        if head == 0xC0:
            return None
        raise ValueError("not an array")

    def _skip(self, size: int) -> int:
        """Step over ``size`` bytes; return where they start."""
        start = self.at
        if start + size > self._end:
            raise ValueError("truncated")
        self.at = start + size
        return start

    def _string_size(self) -> int:
        head = self._byte()
        if 0xA0 <= head <= 0xBF:
            return head & 0x1F
        width = _STRING_WIDTHS.get(head)
        if width is None:
            raise ValueError("not a string")
        return self._uint(width)

    def string(self) -> bytes:
        size = self._string_size()
        start = self._skip(size)
        return bytes(self._body[start : start + size])

    def skip_string(self) -> None:
        self._skip(self._string_size())

    def object_keys(self, budget: int) -> int | None:
        """Step over one token; return how many keys it carries (0 but for an object marker),
        or None once that is more than ``budget`` (its keys are then left unread)."""
        head = self._byte()
        if head == 0x92:  # a marker: ["array", length] or ["object", [key, ...]]
            tag = self.string()
            if tag == b"array":
                self.skip_int()
                return 0
            if tag != b"object":
                raise ValueError("not a token")
            keys = self.array()
            if keys is None:
                raise ValueError("not a token")
            if keys > budget:
                return None
            for _ in range(keys):
                self.skip_string()
            return keys
        if head <= 0x7F or head >= 0xE0:  # a fixed integer
            return 0
        width = _SCALAR_WIDTHS.get(head)
        if width is None:
            self.at -= 1
            self.skip_string()
        else:
            self._skip(width)
        return 0

    def skip_int(self) -> None:
        head = self._byte()
        if head <= 0x7F or head >= 0xE0:
            return
        width = _INTEGER_WIDTHS.get(head)
        if width is None:
            raise ValueError("not an integer")
        self._skip(width)


def _values(cursor: _Cursor, tokens: int, cap: int) -> int | None:
    """The values of the token list ``cursor`` has just entered (``tokens`` long), object keys
    included, or None once they are more than ``cap``: reading stops there, so it costs at
    most one step per value the cap allows."""
    values = tokens
    if values > cap:
        return None
    for _ in range(tokens):
        keys = cursor.object_keys(cap - values)
        if keys is None:
            return None
        values += keys
    return values


_NAME_SHOWN: Final = 200
"""The most characters of a binding's name a message shows (the frame is the program's)."""


def _called(global_name: bytes, name: bytes) -> str:
    """What a rejected call frame is said to carry: the arguments of the binding it names."""
    shown = [part.decode("utf-8", "replace")[:_NAME_SHOWN] for part in (global_name, name)]
    return f"the arguments of {access_expression(*shown)}"


def oversize_message(oversize: FrameTooLarge) -> str:
    """The ``frame-limit`` message of a worker frame over ``max_frame_bytes``, naming what it
    carries when the bytes that came with its length prefix say (the worker sends them so)."""
    what = ""
    try:
        cursor = _Cursor(oversize.head)
        cursor.array()
        tag = cursor.string()
        if tag == b"Call":
            cursor.skip_int()
            what = f" ({_called(cursor.string(), cursor.string())})"
        elif tag == b"Log":
            what = " (one log entry: a print or a write to sys.stdout or sys.stderr)"
        elif tag == b"Done":
            # ``[tag, value, error]``: no value, the program failed.
            failed = cursor.array() is None
            what = " (the program's uncaught exception)" if failed else " (the program's result)"
    except ValueError:
        pass
    return f"worker frame of {oversize.size} bytes{what} exceeds max_frame_bytes ({oversize.cap})"


def worker_frame_screen(max_output_bytes: int) -> FrameScreen:
    """The screen for the frames a host receives from a worker of a run capped at
    ``max_output_bytes``: ``None`` (decode the body), ``SKIP_FRAME`` or the frame to act on
    instead."""
    done_bytes = int(DONE_BYTES_PER_OUTPUT_BYTE * max_output_bytes) + _FRAME_ROOM
    done_tokens = max_output_bytes // 2 + 1
    log_bytes = max_output_bytes + _LOG_ROOM

    # Each token takes at least one byte, so a body no larger than every kind's token cap and
    # no larger than its size cap is decoded without reading its headers (the common case).
    small = min(done_tokens, log_bytes, MAX_CALL_TOKENS)

    def screen(body: Any) -> object | None:
        # (``FrameReader`` decodes a body of at most ``decodes_below`` bytes without asking.)
        size = len(body)
        if size <= small:
            return None
        try:
            cursor = _Cursor(body)
            cursor.array()
            tag = cursor.string()  # a frame class name (``tag=True``)
            if tag == b"Call":
                cursor.skip_int()
                called = _called(cursor.string(), cursor.string())
                if size > MAX_CALL_FRAME_BYTES:
                    return FrameRejected(
                        "frame-limit",
                        f"worker call frame of {size} bytes ({called}) exceeds the host's "
                        f"cap on one call ({MAX_CALL_FRAME_BYTES} bytes)",
                    )
                tokens = cursor.array()
                # An object's keys are values too, each at least a byte: they are counted
                # unless the frame is too small to hold more than the cap allows.
                if (
                    tokens is not None
                    and tokens + size > MAX_CALL_TOKENS
                    and _values(cursor, tokens, MAX_CALL_TOKENS) is None
                ):
                    return FrameRejected(
                        "frame-limit",
                        f"worker call frame ({called}) holds more argument values (object "
                        f"keys included) than the host's cap on one call ({MAX_CALL_TOKENS} "
                        "values)",
                    )
                return None
            if tag == b"Done":
                if size > done_bytes:
                    return _OUTPUT_LIMIT
                tokens = cursor.array()
                if (  # object keys count too (see the call frame's case)
                    tokens is not None
                    and tokens + size > done_tokens
                    and _values(cursor, tokens, done_tokens) is None
                ):
                    return _OUTPUT_LIMIT
                return None
            if tag == b"Log":
                return _OUTPUT_LIMIT if size > log_bytes else None
            if tag == b"OutputLimit":
                return _OUTPUT_LIMIT
        except ValueError:
            return SKIP_FRAME
        return SKIP_FRAME

    return FrameScreen(screen, small)
