"""Time to render the Code Mode SDK (`tools:sdk`) for 50 typical tools.

Run: .venv/bin/python benchmarks/bench_sdk.py [--tools N] [--repeat R]
Prints the median, best and worst milliseconds per full render (subset checks included).
"""

from __future__ import annotations

import argparse
import statistics
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=50)
    options = parser.parse_args()
    tools = [typical_tool(index) for index in range(options.tools)]
    text = render_sdk(tools)
    for _ in range(5):
        render_sdk(tools)
    samples = []
    for _ in range(options.repeat):
        start = time.perf_counter()
        render_sdk(tools)
        samples.append((time.perf_counter() - start) * 1000)
    print(
        f"render_sdk, {options.tools} typical tools ({len(text)} chars): "
        f"median {statistics.median(samples):.2f} ms, best {min(samples):.2f} ms, "
        f"worst {max(samples):.2f} ms over {options.repeat} runs"
    )


if __name__ == "__main__":
    main()
