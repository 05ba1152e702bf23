"""Reading the ``mcp`` SDK's values: wire forms, paginated lists and failure outcomes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp import ClientSession, MCPError, types

__all__ = ["describe", "is_closed", "list_all", "list_all_tools", "wire"]


def wire(model: Any) -> dict[str, Any]:
    """An SDK model in its wire form (JSON names, absent fields left out)."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


async def list_all(
    fetch: Callable[..., Awaitable[Any]], items: Callable[[Any], Sequence[Any]]
) -> list[dict[str, Any]]:
    """Every item of a paginated list request, in wire form: ``fetch()`` then
    ``fetch(params=<next cursor>)`` until a page has no ``next_cursor``."""
    found: list[dict[str, Any]] = []
    page = await fetch()
    while True:
        found.extend(wire(item) for item in items(page))
        cursor = page.next_cursor
        if not cursor:
            return found
        page = await fetch(params=types.PaginatedRequestParams(cursor=cursor))


async def list_all_tools(session: ClientSession) -> list[dict[str, Any]]:
    return await list_all(session.list_tools, lambda page: page.tools)


def is_closed(exc: MCPError) -> bool:
    """The SDK's own "connection closed" outcome (servers may use the same code for others)."""
    return exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed"


def describe(exc: BaseException) -> str:
    """A readable cause, unwrapping the exception groups anyio task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
