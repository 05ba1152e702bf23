"""Channel frames between the host and a worker.

A frame is an 8-byte unsigned big-endian length followed by one msgpack-encoded tagged struct
(``msgspec``; array-like, so the tag is the first element). msgpack carries integers exactly in
-2**63 .. 2**64-1, which is the integer range every boundary accepts. JSON values
travel as token lists (``_tokens``).

``FrameReader`` accumulates bytes as they arrive (it never allocates from a declared length) and
checks each length prefix against ``max_frame_bytes`` before reading the body: a larger frame
raises ``FrameTooLarge`` and the run fails with kind ``frame-limit``. A body that does not decode
into one of the expected frame types is skipped: the peer may be hostile. A reader may be given
a screen that sees each complete body first and decides, without decoding it, to decode it,
skip it or stand another frame in for it (the host's is ``_frame_screen``).

This module imports only the standard library and ``msgspec``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import Any, Final

import msgspec

from ._spill import SPILL_BYTES, SpilledBody
from ._tokens import Token

__all__ = [
    "GO",
    "HEAD_BYTES",
    "HELP_NAMESPACE",
    "PREFIX_BYTES",
    "SKIP_FRAME",
    "Boot",
    "Call",
    "Done",
    "DoneError",
    "ErrorClassWire",
    "FrameReader",
    "FrameScreen",
    "FrameTooLarge",
    "HostFrame",
    "Log",
    "NamespaceWire",
    "OutputLimit",
    "Reply",
    "WorkerFrame",
    "encode_frame",
    "encode_into",
    "host_frame_decoder",
    "worker_frame_decoder",
    "write_prefix",
]

PREFIX_BYTES: Final = 8
"""Width of the big-endian length prefix."""
_read_prefix: Final = struct.Struct(">Q").unpack_from
write_prefix: Final = struct.Struct(">Q").pack_into
"""``write_prefix(buffer, offset, size)``: a frame's length prefix, written in place."""


class ErrorClassWire(msgspec.Struct, frozen=True, array_like=True):
    """The error class a namespace's rejections use in the worker."""

    name: str
    member_attr: str


class NamespaceWire(msgspec.Struct, frozen=True, array_like=True):
    """One binding namespace as the worker sees it: a global name and its binding names."""

    global_name: str
    names: list[str]
    error_class: ErrorClassWire | None = None


class Boot(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """host -> worker, first frame: the program, its namespaces and the worker-side limits.

    ``held``: the run may not happen (its call has yet to pass its guards, hooks and
    approval): the worker compiles the program and then waits for an empty frame (``GO``)
    before it runs any of it; the host closes the channel instead when the run never comes.
    ``max_frame_bytes``: the host's cap on one worker frame, which the worker keeps to, so
    that a run over it fails naming what was too large (the host sees only the length)."""

    program: str
    namespaces: list[NamespaceWire]
    max_output_bytes: int
    max_memory_mb: float
    compute_ms: float
    max_frame_bytes: int
    held: bool = False


HELP_NAMESPACE: Final = "?help"
"""The namespace of the ``Call`` a program's ``help()`` makes: its ``name`` is the binding
namespace asked about and its one argument the binding's name (``None``: the namespace). No
binding global can be spelt so, and the host answers it as a binding call."""


GO: Final = bytes(PREFIX_BYTES)
"""host -> worker after a held ``Boot``: an empty frame, the run goes ahead."""


class Reply(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """host -> worker: the settlement of call ``id`` (``value`` tokens or a failure message)."""

    id: int
    ok: bool
    value: list[Token] | None = None
    message: str | None = None


class Call(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """worker -> host: binding ``global_name.name`` called with ``args`` tokens."""

    id: int
    global_name: str
    name: str
    args: list[Token]


class Log(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """worker -> host: one captured log entry."""

    text: str


class OutputLimit(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """worker -> host: the worker-side ledger overflowed (sent once)."""


class DoneError(msgspec.Struct, frozen=True, array_like=True):
    """The failure a ``Done`` frame reports."""

    kind: str
    message: str


class Done(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """worker -> host: the program settled with ``value`` tokens, an ``error``, or neither."""

    value: list[Token] | None = None
    error: DoneError | None = None


HostFrame = Boot | Reply
"""Frames the host sends."""
WorkerFrame = Call | Log | OutputLimit | Done
"""Frames the worker sends."""

_encoder = msgspec.msgpack.Encoder()
encode_into: Final = _encoder.encode_into
"""``encode_into(frame, buffer, offset)``: a frame's body, encoded into ``buffer`` at
``offset`` (see ``msgspec``); ``encode_frame`` adds the length prefix."""


def encode_frame(frame: Any) -> bytearray:
    """Length-prefixed encoding of one frame."""
    buffer = bytearray(PREFIX_BYTES)
    _encoder.encode_into(frame, buffer, PREFIX_BYTES)
    buffer[:PREFIX_BYTES] = (len(buffer) - PREFIX_BYTES).to_bytes(PREFIX_BYTES, "big")
    return buffer


def host_frame_decoder() -> msgspec.msgpack.Decoder[Any]:
    """A decoder for the frames a worker receives."""
    return msgspec.msgpack.Decoder(HostFrame)


def worker_frame_decoder() -> msgspec.msgpack.Decoder[Any]:
    """A decoder for the frames the host receives."""
    return msgspec.msgpack.Decoder(WorkerFrame)


class FrameTooLarge(Exception):
    """A length prefix above ``max_frame_bytes``; ``head``: what of the body came with it
    (up to ``HEAD_BYTES``), which may say what the frame carries."""

    def __init__(self, size: int, cap: int, head: bytes = b"") -> None:
        super().__init__(f"frame of {size} bytes exceeds max_frame_bytes ({cap})")
        self.size = size
        self.cap = cap
        self.head = head


HEAD_BYTES: Final = 4096
"""The most bytes of an oversized body a reader keeps (``FrameTooLarge.head``)."""


class _Skipped(Exception):
    """A body the screen dropped undecoded."""


class FrameScreen:
    """A frame screen (see ``FrameReader``) that lets any body of at most ``decodes_below``
    bytes be decoded without being asked about it: most bodies are, and asking costs a call
    per frame."""

    __slots__ = ("decodes_below", "screen")

    def __init__(self, screen: Callable[[Any], object | None], decodes_below: int) -> None:
        self.screen = screen
        self.decodes_below = decodes_below

    def __call__(self, body: Any) -> object | None:
        return self.screen(body)


def _screened(
    decode: Callable[[Any], Any], screen: Callable[[Any], object | None]
) -> Callable[[Any], Any]:
    if type(screen) is FrameScreen:
        screen = screen.screen

    def decode_screened(body: Any) -> Any:
        verdict = screen(body)
        if verdict is None:
            return decode(body)
        if verdict is SKIP_FRAME:
            raise _Skipped  # the reader drops it as it drops a body that does not decode
        return verdict

    return decode_screened


SKIP_FRAME: Final = object()
"""What a screen returns for a body to drop undecoded."""


class FrameReader:
    """Splits a byte stream into decoded frames; undecodable bodies are skipped.

    After a length prefix above the cap, ``oversize`` holds the ``FrameTooLarge`` and the reader
    accepts nothing more (the frames before it are still returned). A body above
    ``SPILL_BYTES`` is written to disk while it arrives (``_spill``), so the memory one reader
    holds stays below ``SPILL_BYTES`` plus one read, whatever ``max_frame_bytes`` is. A
    ``screen`` sees each complete body before it is decoded: ``None`` decodes it,
    ``SKIP_FRAME`` drops it, anything else stands in for the frame. ``dropped`` counts the
    bodies skipped; its owner adds the frames it drops after decoding, and bounds the sum (a
    hostile peer's junk costs a decode each).
    """

    __slots__ = (
        "_below",
        "_buffer",
        "_cap",
        "_decode",
        "_plain",
        "_spilled",
        "_start",
        "dropped",
        "oversize",
    )

    def __init__(
        self,
        decoder: msgspec.msgpack.Decoder[Any],
        max_frame_bytes: int,
        screen: Callable[[Any], object | None] | None = None,
    ) -> None:
        # A body of at most ``_below`` bytes is decoded by ``_plain``, without the screen (see
        # ``FrameScreen``): one call less for nearly every frame; a larger one by ``_decode``.
        self._plain = decoder.decode
        if screen is None:
            self._decode, self._below = decoder.decode, sys.maxsize
        else:
            self._decode = _screened(decoder.decode, screen)
            self._below = screen.decodes_below if type(screen) is FrameScreen else -1
        self._cap = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0
        self._spilled: SpilledBody | None = None
        self.oversize: FrameTooLarge | None = None
        self.dropped = 0

    def close(self) -> None:
        """Drop a partly received spilled body, if any."""
        if self._spilled is not None:
            self._spilled.close()
            self._spilled = None

    def _continue_spill(self, data: bytes, frames: list[Any]) -> bytes:
        spilled = self._spilled
        assert spilled is not None
        with memoryview(data) as view:
            taken = spilled.write(view)
        if spilled.remaining:
            return b""
        self._spilled = None
        try:
            frames.append(spilled.decode(self._decode))
        except Exception:  # hostile bytes: skip the frame, never raise
            self.dropped += 1
        return data[taken:]

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return the frames they complete, in order."""
        frames: list[Any] = []
        if self.oversize is not None:
            return frames
        if self._spilled is not None:
            data = self._continue_spill(data, frames)
            if not data:
                return frames
        buffer = self._buffer
        buffer += data
        start = self._start
        end = len(buffer)
        decode = self._decode
        plain = self._plain
        below = self._below
        cap = self._cap
        append = frames.append
        size = 0
        partial = False
        # One view for the whole read, each body a slice of it released at once (a live export
        # would keep the buffer from being resized): a read may hold thousands of frames.
        with memoryview(buffer) as view:
            while end - start >= PREFIX_BYTES:
                size = _read_prefix(buffer, start)[0]
                if size > cap:
                    break
                body_end = start + PREFIX_BYTES + size
                if body_end > end:
                    partial = True
                    break
                body = view[start + PREFIX_BYTES : body_end]
                try:
                    append(plain(body) if size <= below else decode(body))
                except Exception:  # hostile bytes: skip the frame, never raise
                    self.dropped += 1
                finally:
                    body.release()
                start = body_end
        if size > cap:
            head = bytes(buffer[start + PREFIX_BYTES : start + PREFIX_BYTES + HEAD_BYTES])
            self.oversize = FrameTooLarge(size, cap, head)
            buffer.clear()
            self._start = 0
            return frames
        if partial and size > SPILL_BYTES and self._spill(size, buffer, start + PREFIX_BYTES):
            start = end = 0
        if start == end:
            buffer.clear()
            start = 0
        elif start > (1 << 20) and start * 2 > end:
            del buffer[:start]
            start = 0
        self._start = start
        return frames

    def _spill(self, size: int, buffer: bytearray, body_start: int) -> bool:
        """Move the incomplete body at ``body_start`` to disk; ``False`` (kept in memory)
        when no temporary file can be made."""
        try:
            spilled = SpilledBody(size)
            with memoryview(buffer) as view, view[body_start:] as body:
                spilled.write(body)
        except OSError:
            return False
        buffer.clear()
        self._spilled = spilled
        return True
