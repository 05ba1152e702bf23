"""Regenerate the recorded ``tools/list`` answers of three real MCP servers.

The files beside this script are what these servers answered, started over stdio with the
official ``mcp`` SDK client (nothing leaves the machine):

- ``mcp_server_time.tools.json``: the ``mcp-server-time`` package (PyPI);
- ``mcp_server_git.tools.json``: the ``mcp-server-git`` package (PyPI);
- ``mcp_server_everything.tools.json``: ``@modelcontextprotocol/server-everything`` (npm).

Usage (each command as it starts the server, for example from a scratch venv and npm folder):

    python tests/data/dump_mcp_tool_lists.py \\
        --time "/venv/bin/mcp-server-time" --git "/venv/bin/mcp-server-git" \\
        --everything "node /npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

Each file holds ``{"server": ..., "version": ..., "tools": [...]}`` with the tools exactly as
listed (``name``, ``description``, ``inputSchema``, ``outputSchema``, ``annotations``...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types

HERE = Path(__file__).parent


async def list_tools(command: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    program, *args = shlex.split(command)
    params = StdioServerParameters(command=program, args=args)
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        initialized = await session.initialize()
        tools: list[dict[str, Any]] = []
        result = await session.list_tools()
        while True:
            tools.extend(
                tool.model_dump(mode="json", by_alias=True, exclude_none=True)
                for tool in result.tools
            )
            if not result.next_cursor:
                break
            params = mcp_types.PaginatedRequestParams(cursor=result.next_cursor)
            result = await session.list_tools(params=params)
        server = initialized.server_info.model_dump(mode="json", exclude_none=True)
        return server, tools


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time", required=True, help="command that starts mcp-server-time")
    parser.add_argument("--git", required=True, help="command that starts mcp-server-git")
    parser.add_argument("--everything", required=True, help="command that starts server-everything")
    options = parser.parse_args()
    for stem, command in (
        ("mcp_server_time", options.time),
        ("mcp_server_git", options.git),
        ("mcp_server_everything", options.everything),
    ):
        server, tools = await list_tools(command)
        record = {"server": server.get("name"), "version": server.get("version"), "tools": tools}
        path = HERE / f"{stem}.tools.json"
        path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(f"{path.name}: {len(tools)} tools from {record['server']} {record['version']}")


if __name__ == "__main__":
    asyncio.run(main())
