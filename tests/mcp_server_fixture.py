"""A small MCP server over stdio, started as a real process by the MCP adapter tests.

Tools:
- ``echo(text)``: returns the text (annotated read-only);
- ``fail(message)``: raises a tool error, so the call returns ``isError`` with the message;
- ``sleep(seconds, tag="")``: sleeps; if ``MCP_FIXTURE_MARKS`` names a directory it writes the
  file ``started<tag>`` there as it begins and ``cancelled<tag>`` when the client cancels the
  request, so a test can see that a call is running and that an abort reached the server;
- ``mixed()``: returns text, an image, audio, embedded resources (text, an image blob, a binary
  blob) and a resource link;
- ``add(a, b)``: returns an integer, which the server also sends as structured content;
- ``refuse(reason)``: an error result whose only detail is its structured content
  ``{"reason": <reason>}`` (no text block);
- ``snap_fail()``: an error result that holds more than text: the error's text, a screenshot
  (an image), a recording (audio) and the server's log (an embedded resource);
- ``crash()``: ends the server process without answering.

With ``MCP_FIXTURE_MARKS`` set, the server also writes its process id to ``pid`` there on start.

Run: ``python tests/mcp_server_fixture.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG, base64."""

server: MCPServer = MCPServer("dsh-tools-fixture")


def _mark(name: str, text: str | None = None) -> None:
    folder = os.environ.get("MCP_FIXTURE_MARKS")
    if folder:
        # Written aside and renamed, so a reader never sees a half-written file.
        draft = Path(folder, f".{name}.draft")
        draft.write_text(name if text is None else text)
        os.replace(draft, Path(folder, name))


@server.tool(
    description="Echo the text back.",
    annotations=types.ToolAnnotations.model_validate({"readOnlyHint": True}),
)
def echo(text: str) -> str:
    return text


@server.tool(description="Fail with the given message.")
def fail(message: str) -> str:
    raise ToolError(message)


@server.tool(description="Sleep for a number of seconds, then say so.")
async def sleep(seconds: float, tag: str = "") -> str:
    _mark(f"started{tag}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _mark(f"cancelled{tag}")
        raise
    return f"slept {seconds}"


def _resource(contents: dict[str, Any]) -> Any:
    return types.EmbeddedResource.model_validate({"type": "resource", "resource": contents})


@server.tool(description="Return one block of every content kind.", structured_output=False)
def mixed() -> list[Any]:
    return [
        types.TextContent.model_validate({"type": "text", "text": "caption"}),
        types.ImageContent.model_validate(
            {"type": "image", "data": PIXEL, "mimeType": "image/png"}
        ),
        types.AudioContent.model_validate(
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
        ),
        _resource({"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"}),
        _resource({"uri": "file:///dot.png", "mimeType": "image/png", "blob": PIXEL}),
        _resource(
            {"uri": "file:///data.bin", "mimeType": "application/octet-stream", "blob": "AAE="}
        ),
        types.ResourceLink.model_validate(
            {"type": "resource_link", "uri": "file:///big.log", "name": "big.log"}
        ),
    ]


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Refuse, saying why in structured content only.")
def refuse(reason: str) -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content={"reason": reason}, is_error=True)


@server.tool(description="Fail, showing a screenshot, a recording and the log of the failure.")
def snap_fail() -> types.CallToolResult:
    return types.CallToolResult(
        content=[
            types.TextContent.model_validate({"type": "text", "text": "the button was not found"}),
            types.ImageContent.model_validate(
                {"type": "image", "data": PIXEL, "mimeType": "image/png"}
            ),
            types.AudioContent.model_validate(
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
            ),
            _resource(
                {"uri": "file:///run.log", "mimeType": "text/plain", "text": "clicked at 3,4"}
            ),
        ],
        is_error=True,
    )


@server.tool(description="Exit the server process at once, without answering.")
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    _mark("pid", str(os.getpid()))
    server.run()
