"""Reading the ``mcp`` SDK's values: wire forms, paginated lists and failure outcomes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp import ClientSession, MCPError, types
from pydantic import ValidationError

__all__ = [
    "MAX_LIST_PAGES",
    "describe",
    "is_closed",
    "list_all",
    "list_all_tools",
    "summarize",
    "wire",
]


def wire(model: Any) -> dict[str, Any]:
    """An SDK model in its wire form (JSON names, absent fields left out)."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


MAX_LIST_PAGES = 1_000
"""The most pages one list request may take: a server whose pages never end (a cursor that
keeps changing) would otherwise keep its client listing for ever."""


async def list_all(
    fetch: Callable[..., Awaitable[Any]], items: Callable[[Any], Sequence[Any]], method: str
) -> list[dict[str, Any]]:
    """Every item of a paginated list request, in wire form: ``fetch()`` then
    ``fetch(params=<next cursor>)`` until a page has no ``next_cursor``. A server that repeats
    a cursor, or has more than ``MAX_LIST_PAGES`` pages, fails the request (``MCPError``, as a
    failure the server sent would): its list has no end to wait for."""
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    page = await fetch()
    while True:
        found.extend(wire(item) for item in items(page))
        cursor = page.next_cursor
        if not cursor:
            return found
        if cursor in seen:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"{method}: the server sent the cursor {cursor[:100]!r} twice "
                "(its pages never end)",
            )
        if len(seen) + 1 >= MAX_LIST_PAGES:
            raise MCPError(
                types.INTERNAL_ERROR, f"{method}: the server sent more than {MAX_LIST_PAGES} pages"
            )
        seen.add(cursor)
        page = await fetch(params=types.PaginatedRequestParams(cursor=cursor))


async def list_all_tools(session: ClientSession) -> list[dict[str, Any]]:
    return await list_all(session.list_tools, lambda page: page.tools, "tools/list")


def is_closed(exc: MCPError) -> bool:
    """The SDK's own "connection closed" outcome (servers may use the same code for others)."""
    return exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed"


def describe(exc: BaseException) -> str:
    """A readable cause, unwrapping the exception groups anyio task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ValidationError):
        return f"ValidationError: {summarize(exc)}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def summarize(exc: ValidationError, what: str | None = None) -> str:
    """One line for what the SDK found malformed (``what``, by default the model's name), and
    where: its own text takes several lines per error, each with a link, which a log line or a
    tool's error message cannot carry."""
    what = exc.title if what is None else what
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return f"malformed {what}"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the top level"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"malformed {what} at {where}: {first['msg']}{more}"
