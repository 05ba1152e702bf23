"""The transport a connection opens, and its read stream watched for the server going away."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

__all__ = ["TransportFactory", "WatchedReadStream"]

TransportFactory = Callable[[], AbstractAsyncContextManager[Any]]
"""A zero-argument callable returning an async context manager that yields ``(read, write)``
streams (extra items are ignored), for example ``lambda: streamable_http_client(url)``."""


class WatchedReadStream:
    """The transport's read stream, reporting when it ends (the server went away)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

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
