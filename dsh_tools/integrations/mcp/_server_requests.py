"""The client capabilities one connection advertises, and the answers to what its server sends:
sampling and elicitation requests, roots, log messages and list-changed notifications."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from mcp import types
from mcp.client.session import ClientRequestContext
from pydantic import ValidationError

from ...actors import message_of
from ...actors._logging import get_logger
from ._callbacks import CallbackRunner
from ._sdk import describe, summarize, wire
from ._stdio_pipes import TextBeforeMessage
from ._types import (
    ElicitationCallback,
    ListChangedCallback,
    McpRequestContext,
    SamplingCallback,
)

__all__ = ["ClientOptions", "ServerRequests"]

_log = get_logger("dsh_tools.mcp")

# MCP log levels -> structlog method names.
_LOG_METHODS = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warning",
    "error": "error",
    "critical": "error",
    "alert": "error",
    "emergency": "error",
}


def _why(exc: Exception) -> str:
    """A callback's failure as the server is told it: its message, or for a result the SDK
    refused, one line naming the wrong field (the server may pass it on to a model)."""
    return summarize(exc) if isinstance(exc, ValidationError) else str(exc)


_LINE_SHOWN = 80
"""How much of a line that is no message a log line or an error shows: enough to know it."""


def _line_of(exc: ValidationError) -> str | None:
    """The text of a line that is not JSON, as the parse failure holds it."""
    for error in exc.errors(include_url=False):
        if not error["loc"] and isinstance(error.get("input"), str):
            text: str = error["input"]
            return text
    return None


class ClientOptions:
    """The client capabilities one connection advertises, and what answers them."""

    __slots__ = ("elicitation", "log_level", "on_list_changed", "roots", "sampling")

    def __init__(
        self,
        *,
        sampling: SamplingCallback | None = None,
        elicitation: ElicitationCallback | None = None,
        roots: Sequence[str | Path] | None = None,
        log_level: str | None = None,
        on_list_changed: ListChangedCallback | None = None,
    ) -> None:
        self.sampling = sampling
        self.elicitation = elicitation
        self.roots = tuple(Path(p) for p in roots) if roots is not None else None
        self.log_level = log_level
        self.on_list_changed = on_list_changed


class ServerRequests:
    """The session callbacks of one connection; they all run on its client loop.

    ``context`` gives the request context (the calls in flight) a harness callback sees;
    ``tools_changed`` is told of ``notifications/tools/list_changed``.
    """

    def __init__(
        self,
        label: str,
        options: ClientOptions,
        *,
        callbacks: CallbackRunner,
        context: Callable[[], McpRequestContext],
        tools_changed: Callable[[], None],
    ) -> None:
        self._label = label
        self._options = options
        self._callbacks = callbacks
        self._context = context
        self._tools_changed = tools_changed
        self.unreadable: str | None = None
        """What was wrong with the last line of the server's output that was no message, and
        how it began: a first connection that times out says so (a banner the server printed
        without a newline, say, holds the answer to ``initialize`` in its line)."""

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        callback = self._options.sampling
        assert callback is not None
        try:
            out = await self._callbacks.call(callback, self._context(), wire(params))
            if isinstance(out, Mapping) and isinstance(out.get("content"), list):
                return types.CreateMessageResultWithTools.model_validate(out)
            return types.CreateMessageResult.model_validate(out)
        except Exception as exc:
            _log.warning("MCP sampling callback failed", server=self._label, error=describe(exc))
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"sampling failed: {_why(exc)}"
            )

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        callback = self._options.elicitation
        assert callback is not None
        try:
            out = await self._callbacks.call(callback, self._context(), wire(params))
            return types.ElicitResult.model_validate(out)
        except Exception as exc:
            _log.warning("MCP elicitation callback failed", server=self._label, error=describe(exc))
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"elicitation failed: {_why(exc)}"
            )

    async def list_roots(
        self, context: ClientRequestContext
    ) -> types.ListRootsResult | types.ErrorData:
        roots = self._options.roots or ()
        listed = [
            {"uri": path.resolve().as_uri(), "name": path.name or str(path)} for path in roots
        ]
        return types.ListRootsResult.model_validate({"roots": listed})

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        method = _LOG_METHODS.get(str(params.level), "info")
        getattr(_log, method)(
            "MCP server log",
            server=self._label,
            level=params.level,
            server_logger=params.logger,
            data=params.data,
        )

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, types.ResourceListChangedNotification):
            self._list_changed("resources")
        elif isinstance(message, types.PromptListChangedNotification):
            self._list_changed("prompts")
        elif isinstance(message, ValidationError):
            # A message the transport could not parse that names no request it answers (a
            # reply that does was passed on as an error reply to it: see WatchedReadStream).
            # Calls in flight are left to go on: such a line is most often stray output (a
            # print to stdout), and the replies around it still arrive, so failing every call
            # would turn working calls into failures. A reply that lost its id too cannot be
            # told from such a line: its call waits for its deadline or its abort.
            self._unreadable(summarize(message, "JSON-RPC message"), _line_of(message))
        elif isinstance(message, TextBeforeMessage):  # the message itself comes next (stdio)
            _log.warning(
                "MCP server wrote text before a message on its line",
                server=self._label,
                text=repr(message.text[:_LINE_SHOWN]),
            )
        elif isinstance(message, UnicodeDecodeError):  # a line that is not text (stdio)
            self._unreadable(f"not {message.encoding} text: {message.reason}", None)
        elif isinstance(message, Exception):
            _log.debug("MCP transport reported an error", server=self._label, error=str(message))

    def _unreadable(self, error: str, line: str | None) -> None:
        start = None if line is None else repr(line[:_LINE_SHOWN])
        self.unreadable = error if start is None else f"{error}, in the line {start}"
        _log.warning(
            "MCP server sent a message that could not be read",
            server=self._label,
            error=error,
            line=start,
        )

    def _list_changed(self, kind: Literal["resources", "prompts"]) -> None:
        """On the client loop: tell the harness, on a worker thread (it may well re-list
        through the plugin, which waits on this loop)."""
        _log.info(f"MCP server {kind} changed", server=self._label)
        callback = self._options.on_list_changed
        if callback is None:
            return

        async def tell() -> None:
            try:
                await self._callbacks.call(callback, kind)
            except Exception as exc:
                _log.warning(
                    "MCP on_list_changed callback failed", server=self._label, error=message_of(exc)
                )

        self._callbacks.in_background(tell())
