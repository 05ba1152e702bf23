"""Integrations with model APIs and tool ecosystems.

- ``to_openai_tools`` / ``to_anthropic_tools`` / ``to_openai_strict_schema``: export projected
  tool schemas to the OpenAI (Chat Completions or Responses) and Anthropic function-calling
  formats.
- ``ToolNameMap``: the reversible mapping between registry names and provider function names.
- Provider adapters, one model turn each way (no provider SDK needed at import; SDK objects and
  plain dicts alike): ``openai_prompt`` / ``openai_tool_calls`` / ``openai_assistant_message`` /
  ``openai_tool_messages`` (Chat Completions), ``responses_prompt`` / ``responses_tool_calls`` /
  ``responses_tool_outputs`` (Responses API), ``anthropic_prompt`` / ``anthropic_tool_calls`` /
  ``anthropic_tool_results`` (Messages API); ``ProviderPrompt`` holds one request's system text,
  tools list and name map.
- ``register_mcp_server`` / ``register_mcp_server_sync``: register the tools of one MCP server
  (official ``mcp`` SDK, the ``mcp`` extra) as one plugin; ``McpPlugin.close()`` removes them and
  stops the server. These load the SDK on first use, so the exports above work without it.
"""

from typing import TYPE_CHECKING, Any

from ._anthropic import anthropic_prompt, anthropic_tool_calls, anthropic_tool_results
from ._names import ToolNameMap, is_provider_name
from ._openai import (
    openai_assistant_message,
    openai_prompt,
    openai_tool_calls,
    openai_tool_messages,
    responses_prompt,
    responses_tool_calls,
    responses_tool_outputs,
)
from ._prompt import ProviderPrompt
from ._schemas import to_anthropic_tools, to_openai_strict_schema, to_openai_tools

if TYPE_CHECKING:
    from ._mcp import (
        MCP_OUTPUT_SCHEMA,
        McpConnectionError,
        McpPlugin,
        McpToolError,
        register_mcp_server,
        register_mcp_server_sync,
    )

_MCP_NAMES = frozenset(
    {
        "MCP_OUTPUT_SCHEMA",
        "McpConnectionError",
        "McpPlugin",
        "McpToolError",
        "register_mcp_server",
        "register_mcp_server_sync",
    }
)


def __getattr__(name: str) -> Any:
    """Load the MCP adapter on first use, so the schema exports work without the ``mcp`` SDK."""
    if name not in _MCP_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from . import _mcp
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("mcp", "mcp_types", "anyio"):
            raise ImportError(
                f"{name} needs the official MCP SDK: pip install 'dsh-tools[mcp]'"
            ) from exc
        raise
    value = getattr(_mcp, name)
    globals()[name] = value
    return value


__all__ = [
    "MCP_OUTPUT_SCHEMA",
    "McpConnectionError",
    "McpPlugin",
    "McpToolError",
    "ProviderPrompt",
    "ToolNameMap",
    "anthropic_prompt",
    "anthropic_tool_calls",
    "anthropic_tool_results",
    "is_provider_name",
    "openai_assistant_message",
    "openai_prompt",
    "openai_tool_calls",
    "openai_tool_messages",
    "register_mcp_server",
    "register_mcp_server_sync",
    "responses_prompt",
    "responses_tool_calls",
    "responses_tool_outputs",
    "to_anthropic_tools",
    "to_openai_strict_schema",
    "to_openai_tools",
]
