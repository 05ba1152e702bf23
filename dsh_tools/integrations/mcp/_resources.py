"""The server's resources and prompts, reached over an ``McpPlugin``'s live connection, from
threads (``list_resources``...) and event loops (``alist_resources``...) alike."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from ._client import McpClient
from ._errors import McpConnectionError, McpToolError
from ._sdk import list_all, summarize, wire
from ._waits import checked_timeout

__all__ = ["ServerResources"]

_T = TypeVar("_T")


class ServerResources:
    """The resources and prompts part of ``McpPlugin``: requests sent over ``_client``."""

    name: str
    _client: McpClient

    def _run(self, method: str, coro: Coroutine[Any, Any, _T], timeout: float | None) -> _T:
        try:
            timeout = checked_timeout(timeout, method, zero=False)
        except ValueError:
            coro.close()
            raise
        if self._client.on_client_loop():
            # A coroutine callback runs on the loop that would carry the request: blocking it
            # stalls the whole connection and then reports that the server did not answer.
            coro.close()
            raise RuntimeError(
                f'a blocking request to MCP server "{self.name}" from a coroutine callback '
                "would stop the loop that answers it; await the a-prefixed form "
                "(await plugin.alist_resources(), ...) instead"
            )
        future = self._client.request(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f'MCP server "{self.name}" did not answer in {timeout} s') from None
        except concurrent.futures.CancelledError:
            raise McpConnectionError(
                f'MCP server "{self.name}" disconnected during the request', "MCP_DISCONNECTED"
            ) from None

    async def _arun(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future = self._client.request(coro)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    async def _request(self, method: str, **params: Any) -> Any:
        """On the client loop: one resources/prompts request, results in wire form."""
        from mcp import MCPError

        session = self._client.session()
        try:
            if method == "resources/list":
                return await list_all(session.list_resources, lambda page: page.resources, method)
            if method == "resources/templates/list":
                return await list_all(
                    session.list_resource_templates, lambda page: page.resource_templates, method
                )
            if method == "resources/read":
                read = await session.read_resource(params["uri"])
                return [wire(c) for c in read.contents]
            if method == "prompts/list":
                return await list_all(session.list_prompts, lambda page: page.prompts, method)
            got = wire(await session.get_prompt(params["name"], params["arguments"]))
            got.pop("resultType", None)  # protocol bookkeeping, not part of the prompt
            return got
        except MCPError as exc:
            raise await self._client.failure(exc, session) from None
        except ValidationError as exc:
            # A reply the SDK cannot read (as for a tool call): one line saying where.
            text = f"MCP request failed: {summarize(exc)}"
            raise McpToolError(text, "MCP_REQUEST_FAILED") from None

    def list_resources(self, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """The server's resources (wire form: ``uri``, ``name``, ``mimeType``...)."""
        out: list[dict[str, Any]] = self._run(
            "list_resources", self._request("resources/list"), timeout
        )
        return out

    def list_resource_templates(self, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """The server's resource templates (wire form: ``uriTemplate``, ``name``...)."""
        out: list[dict[str, Any]] = self._run(
            "list_resource_templates", self._request("resources/templates/list"), timeout
        )
        return out

    def read_resource(self, uri: str, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """Read one resource, for example the ``uri`` of a ``resource_link`` block in a
        result: its contents in wire form (``uri``, ``mimeType``, ``text`` or ``blob``)."""
        out: list[dict[str, Any]] = self._run(
            "read_resource", self._request("resources/read", uri=_uri(uri)), timeout
        )
        return out

    def list_prompts(self, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """The server's prompts (wire form: ``name``, ``description``, ``arguments``)."""
        out: list[dict[str, Any]] = self._run(
            "list_prompts", self._request("prompts/list"), timeout
        )
        return out

    def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        """One prompt rendered by the server: ``{"description"?, "messages": [{role,
        content}]}`` with content blocks in the MCP shapes."""
        call = self._request("prompts/get", name=name, arguments=_prompt_arguments(name, arguments))
        out: dict[str, Any] = self._run("get_prompt", call, timeout)
        return out

    async def alist_resources(self) -> list[dict[str, Any]]:
        """``list_resources()`` for callers on an event loop."""
        out: list[dict[str, Any]] = await self._arun(self._request("resources/list"))
        return out

    async def alist_resource_templates(self) -> list[dict[str, Any]]:
        """``list_resource_templates()`` for callers on an event loop."""
        out: list[dict[str, Any]] = await self._arun(self._request("resources/templates/list"))
        return out

    async def aread_resource(self, uri: str) -> list[dict[str, Any]]:
        """``read_resource(uri)`` for callers on an event loop."""
        out: list[dict[str, Any]] = await self._arun(self._request("resources/read", uri=_uri(uri)))
        return out

    async def alist_prompts(self) -> list[dict[str, Any]]:
        """``list_prompts()`` for callers on an event loop."""
        out: list[dict[str, Any]] = await self._arun(self._request("prompts/list"))
        return out

    async def aget_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """``get_prompt(name, arguments)`` for callers on an event loop."""
        call = self._request("prompts/get", name=name, arguments=_prompt_arguments(name, arguments))
        out: dict[str, Any] = await self._arun(call)
        return out


def _uri(uri: str) -> str:
    if type(uri) is not str or not uri:
        raise TypeError("uri must be a non-empty str")
    return uri


def _prompt_arguments(name: str, arguments: Mapping[str, str] | None) -> dict[str, str]:
    """``arguments`` as the protocol carries a prompt's: text by name. Anything else is refused
    here, naming the argument, rather than by the SDK's model of the request (a multi-line
    validation error about ``GetPromptRequestParams``)."""
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise TypeError(
            f"prompt {name!r}: arguments must be a mapping of names to text, "
            f"got {type(arguments).__name__}"
        )
    for key, value in arguments.items():
        if type(key) is not str:
            raise TypeError(f"prompt {name!r}: argument names must be text, got {key!r}")
        if type(value) is not str:
            raise TypeError(
                f"prompt {name!r}: argument {key!r} must be text (MCP prompt arguments are "
                f"strings), got {type(value).__name__}"
            )
    return dict(arguments)
