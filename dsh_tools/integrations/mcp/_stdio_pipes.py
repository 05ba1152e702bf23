"""A stdio server's pipes as the session's streams: one JSON-RPC message a line each way.

The SDK's own ``stdio_client`` joins each 64 KiB read to what it holds of an unfinished line
and splits the whole again, so reading one line costs time in the square of its length (a
20 MB tool result about 5 s, 40 MB 15 s, on the connection's loop, where a keep-alive ping
waiting behind it times out and ends the connection). Here an unfinished line is kept as its
pieces, and only each new piece is searched for the line's end: linear in the line's length.

One line may hold at most ``LINE_LIMIT`` bytes unless told otherwise (characters, in an encoding
decoded before it is split): a server that writes on without ever ending its line would
otherwise grow the harness's memory without bound. Past it the connection ends, for the reason
``LineTooLongError`` gives.
"""

from __future__ import annotations

import codecs
import contextlib
from typing import AnyStr

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, ObjectReceiveStream, ObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage

__all__ = ["LINE_LIMIT", "LineTooLongError", "TextBeforeMessage", "read_lines", "write_lines"]

LINE_LIMIT = 256 * 1024 * 1024
"""The longest line a server may send by default: ample for a tool result of images or files
in base64."""

_ENDED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


class LineTooLongError(Exception):
    """A server's output held a line longer than its limit: its connection ends."""


class TextBeforeMessage(Exception):
    """A line held text before the message that ends it (a banner a server printed to stdout
    without a newline, mid-session or before its first answer): the message is read, and this
    is passed to the session's message handler first, which logs the text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


_SALVAGE_TRIES = 8
"""At how many of a bad line's ``{`` a message is looked for: each try reads to the line's end
at worst, and a banner has few."""


def _parsed(line: bytes | str, encoding: str, errors: str) -> list[SessionMessage | Exception]:
    """One line as a message, or the exception that says why it is none (the session hands it
    to the message handler, which logs it; ``WatchedReadStream`` turns a reply's into an error
    reply). A line that is no message but ends with one (text printed without a newline just
    before it) is that message, after a ``TextBeforeMessage`` naming the text: else the reply
    in it would be lost, and its request would wait for ever."""
    try:
        text = line if isinstance(line, str) else line.decode(encoding, errors)
        return [SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))]
    except ValueError as exc:  # UnicodeDecodeError and pydantic's ValidationError are too
        if isinstance(exc, UnicodeDecodeError):
            return [exc]
        start = 0
        for _ in range(_SALVAGE_TRIES):
            start = text.find("{", start + 1)
            if start < 0:
                break
            try:
                message = types.jsonrpc_message_adapter.validate_json(text[start:], by_name=False)
            except ValueError:
                continue
            return [TextBeforeMessage(text[:start]), SessionMessage(message)]
        return [exc]


def _lines(piece: AnyStr, newline: AnyStr, pending: list[AnyStr]) -> list[AnyStr]:
    """The lines ``piece`` ends, the first joined to the ``pending`` pieces before it; what
    follows the last line's end is left in ``pending``. Only ``piece`` is searched."""
    found: list[AnyStr] = []
    start = 0
    while (end := piece.find(newline, start)) >= 0:
        pending.append(piece[start:end])
        found.append(newline[:0].join(pending))
        pending.clear()
        start = end + len(newline)
    if start < len(piece):
        pending.append(piece[start:])
    return found


async def read_lines(
    stdout: ByteReceiveStream,
    messages: ObjectSendStream[SessionMessage | Exception],
    encoding: str,
    errors: str,
    limit: int,
) -> None:
    """Pass each line of ``stdout`` on to ``messages`` until the server closes it (then close
    ``messages``, which ends the session); once nobody takes them any more, read on and drop
    them, so that a server blocked writing its output can still exit. A line longer than
    ``limit`` ends the session (``LineTooLongError``)."""
    # An encoding whose newline is not the byte 0x0A (UTF-16, say) is split once decoded.
    decoder = (
        None if "\n".encode(encoding) == b"\n" else codecs.getincrementaldecoder(encoding)(errors)
    )
    raw: list[bytes] = []
    text: list[str] = []
    held = 0  # the length of the unfinished line's pieces
    taking = True
    # Output an encoding split once decoded cannot decode ends the session (its lines are lost).
    with contextlib.suppress(*_ENDED, UnicodeDecodeError):
        async with messages:
            async for chunk in stdout:
                if not taking:
                    continue
                lines: list[bytes] | list[str]
                if decoder is None:
                    lines, piece = _lines(chunk, b"\n", raw), len(chunk)
                else:
                    decoded = decoder.decode(chunk)
                    lines, piece = _lines(decoded, "\n", text), len(decoded)
                # Without a line's end the whole piece was kept; else at most its tail is.
                held = held + piece if not lines else sum(map(len, raw or text))
                if held > limit:
                    # Said as the stream's last item (``WatchedReadStream`` ends the session
                    # with it); the rest is read and dropped until the server is stopped.
                    raw.clear()
                    text.clear()
                    taking = False
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await messages.send(
                            LineTooLongError(
                                f"the server sent a line longer than {limit} bytes, the "
                                f"limit ({held} bytes so far, no end yet)"
                            )
                        )
                    await messages.aclose()
                    continue
                for line in lines:
                    try:
                        for item in _parsed(line, encoding, errors):
                            await messages.send(item)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        taking = False
                        break


async def write_lines(
    stdin: ByteSendStream,
    outgoing: ObjectReceiveStream[SessionMessage],
    messages: ObjectSendStream[SessionMessage | Exception],
    encoding: str,
    errors: str,
    written: anyio.Event,
) -> None:
    """Write each message to ``stdin`` as a line. A server that no longer reads its input
    (exited, or closed it) ends the session: ``messages`` is closed, so that a request does
    not wait for an answer that cannot come. ``written`` is set once it is done."""
    try:
        async with outgoing:
            async for message in outgoing:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send((text + "\n").encode(encoding, errors))
    except _ENDED:
        await messages.aclose()
    finally:
        written.set()
