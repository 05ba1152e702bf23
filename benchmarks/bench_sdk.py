"""Time to render the Code Mode SDK (`tools:sdk`) for 50 typical tools, and for 50 tools with
the real schemas of three MCP servers (recorded under tests/data/: mcp-server-time,
mcp-server-git and server-everything; `$defs`, `anyOf`, constraints, output schemas).

Run: .venv/bin/python benchmarks/bench_sdk.py [--tools N] [--repeat R]
Prints the median, best and worst milliseconds per full render, and the real-schema figure as a
ratio to the typical one measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from dsh_tools.codebridge._sdk import SdkTool, render_sdk


def typical_tool(index: int) -> SdkTool:
    """A tool shaped like the usual file/shell/search tools: a handful of described
    parameters, an enum, a nested options object, and an object or text output."""
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path of the file to read"},
            "offset": {"type": "integer", "description": "1-based line to start from"},
            "limit": {"type": "integer", "description": "Maximum number of lines"},
            "mode": {
                "type": "string",
                "enum": ["text", "binary", "auto"],
                "description": "How to decode the content",
            },
            "options": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "follow_symlinks": {"type": "boolean"},
                    "encoding": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                    "globs": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["follow_symlinks"],
            },
        },
        "required": ["path"],
    }
    output: dict[str, Any]
    if index % 2:
        output = {"type": "string"}
    else:
        output = {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "exitCode": {"type": "integer"},
                "stdout": {"type": "string"},
                "matches": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"line": {"type": "integer"}, "text": {"type": "string"}},
                        "required": ["line", "text"],
                    },
                },
            },
            "required": ["exitCode"],
        }
    name = f"tool_{index:02d}" if index % 5 else f"plugin-{index}.action"
    description = f"Tool number {index}: reads, searches or runs something useful.\nSecond line."
    return SdkTool(name, description, parameters, output)


DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
SERVERS = ("mcp_server_time", "mcp_server_git", "mcp_server_everything")


def real_tools(count: int) -> list[SdkTool]:
    """``count`` tools cycling through the recorded MCP tool lists (names made unique)."""
    recorded: list[dict[str, Any]] = []
    for server in SERVERS:
        recorded.extend(json.loads((DATA / f"{server}.tools.json").read_text())["tools"])
    tools = []
    for index in range(count):
        entry = recorded[index % len(recorded)]
        tools.append(
            SdkTool(
                f"{entry['name']}_{index // len(recorded)}",
                entry.get("description", ""),
                entry["inputSchema"],
                entry.get("outputSchema", {}),
            )
        )
    return tools


def measure(label: str, tools: list[SdkTool], repeat: int) -> float:
    text = render_sdk(tools)
    for _ in range(5):
        render_sdk(tools)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        render_sdk(tools)
        samples.append((time.perf_counter() - start) * 1000)
    median = statistics.median(samples)
    print(
        f"render_sdk, {len(tools)} {label} ({len(text)} chars): "
        f"median {median:.2f} ms, best {min(samples):.2f} ms, "
        f"worst {max(samples):.2f} ms over {repeat} runs"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=50)
    options = parser.parse_args()
    typical = measure(
        "typical tools", [typical_tool(index) for index in range(options.tools)], options.repeat
    )
    real = measure("real MCP-server tools", real_tools(options.tools), options.repeat)
    print(f"real MCP-server schemas / typical schemas: {real / typical:.2f} x")


if __name__ == "__main__":
    main()
