"""Reading the ``mcp`` SDK's values: wire forms, paginated lists and failure outcomes."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp import ClientSession, MCPError, types
from pydantic import ValidationError
from pydantic_core import ErrorDetails

__all__ = [
    "MAX_LIST_PAGES",
    "ListGivenUp",
    "RequestRefused",
    "UnsupportedProtocol",
    "describe",
    "initialize",
    "is_closed",
    "list_all",
    "list_all_tools",
    "one_line",
    "summarize",
    "wire",
]


def wire(model: Any) -> dict[str, Any]:
    """An SDK model in its wire form (JSON names, absent fields left out)."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


class ListGivenUp(MCPError):
    """A paginated list the client gave up on (its pages never end): the client's verdict,
    told apart from an error the server answered with (``RequestRefused``)."""


class RequestRefused(MCPError):
    """A request the server answered with a JSON-RPC error: ``method`` names the request,
    ``reply`` is the server's own message (``message`` is ``"<method>: <reply>"``)."""

    def __init__(self, method: str, refusal: MCPError) -> None:
        super().__init__(refusal.code, f"{method}: {refusal.message}", refusal.data)
        self.method = method
        self.reply = refusal.message


class UnsupportedProtocol(Exception):
    """The server answered ``initialize`` with a protocol ``version`` the installed SDK does
    not speak (a server newer than the SDK, say)."""

    def __init__(self, version: str) -> None:
        super().__init__(f'the server answered initialize with the protocol version "{version}"')
        self.version = version


_UNSUPPORTED = "Unsupported protocol version from the server: "


async def initialize(session: ClientSession) -> types.InitializeResult:
    """``session.initialize()``; a protocol version the SDK does not speak raises
    ``UnsupportedProtocol``, which the SDK says with a bare ``RuntimeError`` told by its text
    alone (any other text is raised as it is)."""
    try:
        return await session.initialize()
    except RuntimeError as exc:
        text = str(exc)
        if text.startswith(_UNSUPPORTED):
            raise UnsupportedProtocol(text[len(_UNSUPPORTED) :]) from exc
        raise


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
            raise ListGivenUp(
                types.INTERNAL_ERROR,
                f"{method}: the server sent the cursor {cursor[:100]!r} twice "
                "(its pages never end)",
            )
        if len(seen) + 1 >= MAX_LIST_PAGES:
            raise ListGivenUp(
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
    text = one_line(str(exc))
    # This module's own kinds of MCPError read as the SDK's: what they tell apart is for code.
    name = "MCPError" if isinstance(exc, MCPError) else type(exc).__name__
    return f"{name}: {text}" if text else name


# What a validation error's text holds after its first line: the first error's place, then
# its message with its type and the input it refused.
_FIRST_ERROR = re.compile(
    r"\n(?P<loc>[^\n]*)\n  (?P<msg>.*?) \[type=[^,\]]*"
    r"(?:, input_value=(?P<input>.*?), input_type=[^\]]*)?\]"
)
_MAX_INPUT = 120


def one_line(text: str) -> str:
    """``text`` on one line. The SDK puts a whole validation error's text in some of its
    messages (an HTTP answer that is no JSON-RPC message: some thirty lines, a link each),
    which a log line or a tool's error message cannot carry: its head line is kept with the
    first error's place, message and the input it refused."""
    if "\n" not in text:
        return text
    head = text.split("\n", 1)[0]
    first = _FIRST_ERROR.search(text)
    if first is None or "validation error" not in head:
        return " ".join(text.split())
    detail = f"{head}, the first at {first['loc']}: {first['msg']}"
    if first["input"] is not None:
        shown = first["input"]
        if len(shown) > _MAX_INPUT:
            shown = shown[: _MAX_INPUT - 3] + "..."
        detail += f" (input {shown})"
    return detail


def summarize(exc: ValidationError, what: str | None = None) -> str:
    """One line for what the SDK found malformed (``what``, by default the model's name), and
    where: its own text takes several lines per error, each with a link, which a log line or a
    tool's error message cannot carry."""
    what = exc.title if what is None else what
    errors = _claimed_branches(exc.errors(include_url=False))
    if not errors:
        return f"malformed {what}"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the top level"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"malformed {what} at {where}: {first['msg']}{more}"


_Loc = tuple[int | str, ...]


def _claimed_branches(details: Sequence[ErrorDetails]) -> list[dict[str, Any]]:
    """The errors of a union of ``type``-tagged models (MCP content blocks) as those of the
    branch the value claims to be, its tag left out of the place: pydantic reports every branch
    it tried, the text block's first, so an image without its ``mimeType`` would read as a text
    block missing its ``text``. A value every branch refuses by its ``type`` is one error
    naming the types there are."""
    errors: list[dict[str, Any]] = [dict(detail) for detail in details]
    refused: dict[_Loc, dict[str, Any]] = {}  # a branch's place -> its error on ``type``
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "literal_error" and len(loc) >= 3 and loc[-1] == "type":
            tag = loc[-2]
            # pydantic tags a union's members by their class names; a field is camelCase
            if isinstance(tag, str) and tag[:1].isupper():
                refused[loc[:-1]] = error
    unions = sorted({branch[:-1] for branch in refused}, key=len)
    out: list[dict[str, Any]] = []
    for error in errors:
        loc = tuple(error["loc"])
        union = next((u for u in unions if len(loc) > len(u) and loc[: len(u)] == u), None)
        if union is None:
            out.append(error)
            continue
        depth = len(union)
        branches = list(
            dict.fromkeys(
                tuple(e["loc"])[depth]
                for e in errors
                if len(e["loc"]) > depth and tuple(e["loc"])[:depth] == union
            )
        )
        claimed = [b for b in branches if (*union, b) not in refused]
        if claimed:
            if loc[depth] in claimed:
                out.append({**error, "loc": union + loc[depth + 1 :]})
        elif loc[depth] == branches[0] and error is refused.get(loc[:-1]):
            expected = ", ".join(str(refused[(*union, b)]["ctx"]["expected"]) for b in branches)
            value = repr(error.get("input"))[:60]
            message = f"{value} is none of the types {expected}"
            out.append({**error, "loc": (*union, "type"), "msg": message})
    return out
