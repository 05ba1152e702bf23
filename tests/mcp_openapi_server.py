"""An MCP server whose input schemas are written as servers generated from OpenAPI documents
write them (``nullable: true`` for a property that takes ``null``), started as a real process
by the MCP tests (the official SDK's low-level ``Server``, over stdio).

Tool: ``find(query, after=None, limit=None)``: ``after`` is ``{"type": "string", "nullable":
true}`` and required, ``limit`` an optional ``{"type": "integer", "nullable": true}``; the
tool answers with the arguments it received, as compact JSON.

Run: ``python tests/mcp_openapi_server.py``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

FIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "after": {"type": "string", "nullable": True, "description": "A cursor, or null."},
        "limit": {"type": "integer", "nullable": True},
    },
    "required": ["query", "after"],
}


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tool = types.Tool(name="find", description="Find items.", input_schema=FIND_SCHEMA)
    return types.ListToolsResult(tools=[tool])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    received = json.dumps(params.arguments, sort_keys=True, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=received)])


server = Server("openapi", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
