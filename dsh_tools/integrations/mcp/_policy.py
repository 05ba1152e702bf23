"""Shipped, opt-in policies that read what MCP servers say about their tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ...actors import Ask
from ...registry import ToolsHandle
from ._tools import mcp_tool_info

__all__ = ["ask_before_destructive_mcp_tools"]


def ask_before_destructive_mcp_tools(
    tools: ToolsHandle, *, reason: str | None = None
) -> Callable[[Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]:
    """A pre-execute hook that answers ``Ask`` for every MCP tool its server marks
    destructive (``McpToolInfo.destructive``: not read-only and ``destructiveHint`` not
    ``false``), so the approval seam decides; other tools pass on. ``tools`` is the handle the
    hook reads definitions through (``system.tools``). Opt in with
    ``system.tools.on_pre_execute(ask_before_destructive_mcp_tools(system.tools))``."""

    async def hook(exec: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        info = mcp_tool_info(tools.get(exec.name, exec.agent))
        if info is not None and info.destructive:
            label = info.title or info.mcp_name
            return Ask(
                reason
                or f'MCP tool "{label}" of server "{info.server}" may make destructive changes'
            )
        return await next()

    return hook
