"""The transport a connection opens, and its read stream watched for the server going away and
for replies the SDK cannot read."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
from mcp import types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ._sdk import describe
from ._stdio_pipes import LineTooLongError

__all__ = [
    "SERVER_CLOSED",
    "SessionWatch",
    "TransportFactory",
    "WatchedReadStream",
    "error_reply_for",
]

SERVER_CLOSED = "the server closed the connection"
"""Why ``WatchedReadStream`` saw its stream end when the transport said no more."""

TransportFactory = Callable[[], AbstractAsyncContextManager[Any]]
"""A zero-argument callable returning an async context manager that yields ``(read, write)``
streams (extra items are ignored), for example ``lambda: streamable_http_client(url)``."""


class SessionWatch(Protocol):
    """What a transport saw of its session that its streams do not say (a URL's responses)."""

    def ended(self) -> str | None:
        """Why the server ended the session, or ``None`` while it has not."""
        ...

    def refused(self) -> str | None:
        """Why the server last refused a request of the session (taken: the next call says
        ``None`` until it refuses another), or ``None``."""
        ...


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
"""A JSON string (brackets inside it are text) or a bracket: all a shallow reading needs."""
_COLON = re.compile(r"\s*:")
_ID = re.compile(r'\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*[,}]')


def _shallow(text: str) -> dict[str, Any] | None:
    """The members a line that is no readable JSON holds at the top of its object, when it
    is an object: the ``id`` read, the others present with ``None``. Read without recursion, so
    that a reply nested deeper than the parser takes (a tool's structured content 200 levels
    deep, which the SDK's own server sends) or cut short still names the request it answers;
    ``None`` for a line that is no object."""
    if not text.lstrip().startswith("{"):
        return None
    members: dict[str, Any] = {}
    depth = 0
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in ("{", "["):
            depth += 1
        elif mark in ("}", "]"):
            depth -= 1
            if depth == 0:
                break
        elif depth == 1 and mark.startswith('"'):
            follows = _ID.match(text, token.end())
            with contextlib.suppress(ValueError):
                key = json.loads(mark)
                if key == "id" and follows is not None:
                    members[key] = json.loads(follows.group(1))
                elif _COLON.match(text, token.end()):  # a key, not a value
                    members.setdefault(key, None)
    return members


def _reply_of(exc: ValidationError) -> Mapping[str, Any] | None:
    """The JSON-RPC message a parse failure is about, when it was a JSON object: pydantic
    reports the object itself as the input of the errors about its own fields, and the one with
    the shortest location is the message (deeper ones are parts of it). A line the parser could
    not read at all is read shallowly (``_shallow``)."""
    found: Mapping[str, Any] | None = None
    depth = 0
    for error in exc.errors(include_url=False):
        value = error.get("input")
        if isinstance(value, Mapping) and (found is None or len(error["loc"]) < depth):
            found, depth = value, len(error["loc"])
        elif isinstance(value, str) and not error["loc"] and found is None:
            shallow = _shallow(value)
            # Only a reply: a request of the server's that is cut short names an id of its own.
            if shallow is not None and ("result" in shallow or "error" in shallow):
                return shallow
    return found


def error_reply_for(exc: ValidationError) -> SessionMessage | None:
    """An error reply standing in for a reply the transport could not parse, when that reply
    names the request it answers; ``None`` for anything else (a request or notification, a
    line that is not a JSON object, a reply without a usable id)."""
    message = _reply_of(exc)
    if message is None or "method" in message:
        return None
    request_id = message.get("id")
    if type(request_id) not in (int, str):  # bool is an int to isinstance, not to JSON-RPC
        return None
    part = "error" if "error" in message and "result" not in message else "result"
    what = "it is not a JSON-RPC 2.0 reply"
    for error in exc.errors(include_url=False, include_input=False):
        if not error["loc"]:  # no JSON the parser could read: it says why
            what = error["msg"]
            break
        where = [str(item) for item in error["loc"]]
        if part in where:
            path = ".".join(where[where.index(part) :])
            what = f"{path}: {error['msg']}"
            break
    failure = types.ErrorData(
        code=types.PARSE_ERROR, message=f"the server's reply is malformed ({what})"
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=failure))


class WatchedReadStream:
    """The transport's read stream, reporting when it ends (the server went away).

    A reply the transport could not parse (``"result": 12``, say) comes through as the
    exception it raised, which the SDK only logs and drops: the request it answers would wait
    out its whole timeout. When the reply names its request's id, it is passed on as an error
    reply to that request instead, as the SDK's own Streamable HTTP transport does, so that
    request fails at once with what was wrong. A ``LineTooLongError`` (a stdio server's line
    past the limit) ends the stream, its text the reason given to ``on_end``. Anything else
    passes through unchanged.
    """

    def __init__(self, inner: Any, on_end: Callable[[str], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end(SERVER_CLOSED)
            raise
        if isinstance(item, LineTooLongError):
            self._on_end(describe(item))
            raise anyio.EndOfStream
        if isinstance(item, ValidationError):
            return error_reply_for(item) or item
        return item

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, where the transport keeps one."""
        return getattr(self._inner, "last_context", None)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchedReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
