"""The errors an MCP tool call or an MCP server connection can end with."""

from __future__ import annotations

from ...actors import HarnessError

__all__ = ["McpConnectionError", "McpToolError"]


class McpToolError(HarnessError):
    """An MCP tool call that failed.

    Code ``MCP_TOOL_ERROR``: the server ran the tool and flagged the result ``isError`` (the
    message is the error's text). Code ``MCP_INVALID_OUTPUT``: the tool declared an output
    schema and its structured content does not match it (the message names the first violated
    path). Code ``MCP_REQUEST_FAILED``: the request itself failed (a protocol error, a method
    the server does not have, a malformed result).
    """


class McpConnectionError(HarnessError):
    """An MCP server that could not be used.

    Code ``MCP_CONNECT_FAILED``: starting, initializing, listing or registering failed.
    Code ``MCP_DISCONNECTED``: the connection is gone (the server died, the transport broke, or
    the plugin was closed) or is being re-established; calls fail fast with it meanwhile.
    """
