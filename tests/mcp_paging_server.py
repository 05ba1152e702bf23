"""An MCP server whose ``tools/list`` pages never end once asked to, started as a real process
by the MCP tests (the official SDK's low-level ``Server``, over stdio).

Tools: ``echo()``: how many ``tools/list`` requests the server has answered so far;
``start_paging(fresh=False)``: from now on every page of ``tools/list`` names a next page (the
same cursor again, or with ``fresh`` a new one each time), then the server sends
``notifications/tools/list_changed``.

Resource templates come in two pages: ``notes://{name}`` on the first, ``logs://{day}`` on
the second.

Run: ``python tests/mcp_paging_server.py [templates-only | refusing | undeclared]``; with
``templates-only`` the server has no tools at all (it declares no tools capability), only the
resource templates; with ``refusing`` it answers every ``tools/list`` with the error ``the tool
index is locked``; with ``undeclared`` it serves its tools but leaves the tools capability out
of its initialize answer.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_state: dict[str, Any] = {"paging": None, "lists": 0}

_TOOLS = [
    types.Tool(name="echo", input_schema={"type": "object"}),
    types.Tool(
        name="start_paging",
        input_schema={"type": "object", "properties": {"fresh": {"type": "boolean"}}},
    ),
]


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    _state["lists"] += 1
    if sys.argv[1:] == ["refusing"]:
        raise RuntimeError("the tool index is locked")
    cursor = None
    if _state["paging"] == "repeat":
        cursor = "again"
    elif _state["paging"] == "fresh":
        cursor = f"page-{_state['lists']}"
    return types.ListToolsResult(tools=_TOOLS, next_cursor=cursor)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "start_paging":
        _state["paging"] = "fresh" if (params.arguments or {}).get("fresh") else "repeat"
        await ctx.session.send_tool_list_changed()
    text = f"tools/list requests so far: {_state['lists']}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


_TEMPLATE_PAGES = {
    None: (types.ResourceTemplate(name="note", uri_template="notes://{name}"), "second"),
    "second": (types.ResourceTemplate(name="log", uri_template="logs://{day}"), None),
}


async def list_resource_templates(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    template, cursor = _TEMPLATE_PAGES[params.cursor if params is not None else None]
    return types.ListResourceTemplatesResult(resource_templates=[template], next_cursor=cursor)


if sys.argv[1:] == ["templates-only"]:
    server = Server("pager", on_list_resource_templates=list_resource_templates)
else:
    server = Server(
        "pager",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resource_templates=list_resource_templates,
    )


async def main() -> None:
    options = server.create_initialization_options()
    if sys.argv[1:] == ["undeclared"]:
        capabilities = options.capabilities.model_copy(update={"tools": None})
        options = options.model_copy(update={"capabilities": capabilities})
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
