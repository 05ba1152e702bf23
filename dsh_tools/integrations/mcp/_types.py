"""The public data types and callback shapes of the MCP adapter."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import msgspec

from ...actors._config import check_finite_number
from ...actors._keywords import KeywordChecked

__all__ = [
    "ElicitationCallback",
    "ListChangedCallback",
    "McpCallRef",
    "McpProgress",
    "McpRequestContext",
    "McpState",
    "McpToolInfo",
    "ProgressCallback",
    "ReconnectPolicy",
    "SamplingCallback",
]

McpState = Literal["connecting", "connected", "reconnecting", "disconnected", "closed"]
"""Where a plugin's connection is: ``connecting`` (the first time), ``connected``,
``reconnecting`` (lost; the tools stay registered and fail fast with ``MCP_DISCONNECTED``),
``disconnected`` (lost for good; the tools were withdrawn) or ``closed`` (by ``close()``)."""


class ReconnectPolicy(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """How a lost connection is re-established: up to ``max_attempts`` tries (``None``: no
    limit), the first after ``initial_delay`` seconds, each later one ``multiplier`` times the
    previous delay, never more than ``max_delay``. A successful connection resets the count."""

    max_attempts: int | None = 5
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        # Named as the struct's, since a policy is often built apart from the registration
        # that would otherwise be the only place to look; a wrong type (a bool, a str read
        # from a setting) is a TypeError, as for every other configuration.
        attempts = self.max_attempts
        if attempts is not None:
            if type(attempts) is not int:
                raise TypeError(
                    "ReconnectPolicy: max_attempts must be None or a positive int, got "
                    f"{type(attempts).__name__}"
                )
            if attempts < 1:
                raise ValueError(
                    f"ReconnectPolicy: max_attempts must be None or a positive int, got {attempts}"
                )
        for name in ("initial_delay", "max_delay", "multiplier"):
            minimum = 1 if name == "multiplier" else 0
            check_finite_number("ReconnectPolicy", name, getattr(self, name), minimum)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (1-based)."""
        grown = self.initial_delay * self.multiplier ** min(attempt - 1, 64)
        return float(min(grown, self.max_delay))


class McpToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the server said about one registered tool.

    ``name`` is the registered name, ``mcp_name`` the server's, ``title`` its display title
    (the tool's ``title``, else its annotations' ``title``), ``annotations`` the hints in wire
    form (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``),
    ``output_schema`` its declared output schema. ``read_only`` and ``destructive`` apply the
    protocol's defaults: a tool is destructive unless it is read-only or says
    ``destructiveHint: false``. Hints come from the server: trust them as far as you trust it.
    """

    name: str
    mcp_name: str
    server: str
    title: str | None = None
    description: str = ""
    annotations: Mapping[str, Any] = msgspec.field(default_factory=dict)
    input_schema: Mapping[str, Any] = msgspec.field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None
    timeout_ms: float | None = None

    @property
    def read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        return not self.read_only and self.annotations.get("destructiveHint") is not False


class McpCallRef(msgspec.Struct, frozen=True):
    """One tool call in flight on a server: its call id, registered tool name and agent."""

    call_id: str
    tool: str
    agent: str | None


class McpRequestContext(msgspec.Struct, frozen=True):
    """Where a server-initiated request (sampling, elicitation) comes from.

    ``server`` is the plugin name and ``calls`` the tool calls in flight on that server when
    the request arrived. The protocol does not say which call a request belongs to; with one
    call in flight it is ``call`` (``None`` otherwise).
    """

    server: str
    agent: str | None
    calls: tuple[McpCallRef, ...] = ()

    @property
    def call(self) -> McpCallRef | None:
        return self.calls[0] if len(self.calls) == 1 else None


class McpProgress(msgspec.Struct, frozen=True):
    """One progress notification of a running MCP tool call."""

    server: str
    call_id: str
    tool: str
    agent: str | None
    progress: float
    total: float | None = None
    message: str | None = None


SamplingCallback = Callable[
    [McpRequestContext, dict[str, Any]], Awaitable[Mapping[str, Any]] | Mapping[str, Any]
]
"""``sampling(ctx, params)``: ``params`` is the ``sampling/createMessage`` request in wire form
(``messages``, ``systemPrompt``, ``maxTokens``...); return the result in wire form (``role``,
``content``, ``model``, ``stopReason``). Plain functions run on a worker thread, coroutine
functions on the MCP client's loop. Raising declines the request with the error's text."""

ElicitationCallback = Callable[
    [McpRequestContext, dict[str, Any]], Awaitable[Mapping[str, Any]] | Mapping[str, Any]
]
"""``elicitation(ctx, params)``: ``params`` is the ``elicitation/create`` request in wire form
(``message``, ``requestedSchema`` or ``mode: "url"`` and ``url``); return
``{"action": "accept", "content": {...}}``, ``{"action": "decline"}`` or
``{"action": "cancel"}``. Runs like a sampling callback."""

ListChangedCallback = Callable[[Literal["resources", "prompts"]], Awaitable[None] | None]
"""``on_list_changed(kind)``: the server's resources or prompts changed (``"resources"`` or
``"prompts"``); runs on a worker thread, so it may call the plugin (``list_resources()``...).
What it returns is not used (an awaitable is awaited first)."""

ProgressCallback = Callable[[McpProgress], Awaitable[None] | None]
"""``on_progress(progress)``: called for every progress notification, in order, never holding
the connection: a plain function on one of the plugin's callback threads, a coroutine function
on the MCP client's loop (an awaitable a plain one returns is awaited there)."""
