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
  (official ``mcp`` SDK, the ``mcp`` extra) as one plugin that follows the server; the MCP names
  (the ``mcp`` sub-package) load the SDK on first use, so the exports above work without it.
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
    from .mcp import (
        INSTRUCTIONS_ORDER,
        MCP_OUTPUT_SCHEMA,
        ElicitationCallback,
        ListChangedCallback,
        McpCallRef,
        McpConnectionError,
        McpPlugin,
        McpProgress,
        McpRequestContext,
        McpState,
        McpToolError,
        McpToolInfo,
        ProgressCallback,
        ReconnectPolicy,
        SamplingCallback,
        ask_before_destructive_mcp_tools,
        mcp_tool_info,
        register_mcp_server,
        register_mcp_server_sync,
    )

_MCP_NAMES = frozenset(
    {
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
    }
)


def __getattr__(name: str) -> Any:
    """Load the MCP adapter on first use, so the schema exports work without the ``mcp`` SDK."""
    if name not in _MCP_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from . import mcp
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("mcp", "mcp_types", "anyio"):
            raise ImportError(
                f"{name} needs the official MCP SDK: pip install 'dsh-tools[mcp]'"
            ) from exc
        raise
    value = getattr(mcp, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, the lazily loaded MCP ones included."""
    return sorted(__all__)


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
    "ProviderPrompt",
    "ReconnectPolicy",
    "SamplingCallback",
    "ToolNameMap",
    "anthropic_prompt",
    "anthropic_tool_calls",
    "anthropic_tool_results",
    "ask_before_destructive_mcp_tools",
    "is_provider_name",
    "mcp_tool_info",
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
