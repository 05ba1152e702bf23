"""MCP servers as tool sources, through the official ``mcp`` SDK (the ``mcp`` extra).

One server is one plugin: ``register_mcp_server`` (``async``) or ``register_mcp_server_sync``
connects (stdio, Streamable HTTP or any transport factory), registers the server's tools and
returns the ``McpPlugin`` that keeps them in step with the server (list changes, disconnects
and reconnects) and reaches its resources and prompts. ``close()`` undoes it all.

Modules, one concern each: ``_client`` (the connection, its thread and supervisor),
``_server_requests`` (client capabilities: what the server asks of us), ``_transport``,
``_stdio`` (a stdio server's process group, ended with its connection),
``_listener`` (what a connection tells its plugin), ``_sdk`` (reading SDK values),
``_plugin`` (registrations that follow the server), ``_resources`` (the server's resources
and prompts), ``_tools`` (definitions and the call body), ``_content`` (model content and
output checks), ``_capabilities`` (elicitation through the approval seam), ``_policy``
(shipped hooks), ``_types`` (the public data types and callback shapes), ``_errors`` (how a
call or a connection fails), ``_register`` (the two entry points).
"""

from ._errors import McpConnectionError, McpToolError
from ._plugin import INSTRUCTIONS_ORDER, McpPlugin
from ._policy import ask_before_destructive_mcp_tools
from ._register import register_mcp_server, register_mcp_server_sync
from ._tools import MCP_OUTPUT_SCHEMA, mcp_tool_info
from ._types import (
    ElicitationCallback,
    ListChangedCallback,
    McpCallRef,
    McpProgress,
    McpRequestContext,
    McpState,
    McpToolInfo,
    ProgressCallback,
    ReconnectPolicy,
    SamplingCallback,
)

__all__ = [
    "INSTRUCTIONS_ORDER",
    "MCP_OUTPUT_SCHEMA",
    "ElicitationCallback",
    "ListChangedCallback",
    "McpCallRef",
    "McpConnectionError",
    "McpPlugin",
    "McpProgress",
    "McpRequestContext",
    "McpState",
    "McpToolError",
    "McpToolInfo",
    "ProgressCallback",
    "ReconnectPolicy",
    "SamplingCallback",
    "ask_before_destructive_mcp_tools",
    "mcp_tool_info",
    "register_mcp_server",
    "register_mcp_server_sync",
]
