"""An MCP server that sends what a client must survive, started as a real process by the MCP
tests (the official SDK's low-level ``Server``, over stdio).

Tools:
- ``echo(text)``: returns the text;
- ``publish_bad_schema()``: from now on ``tools/list`` also names the tool ``bad``, whose input
  schema reaches the wire as ``{"type": "string"}`` (the protocol wants an object schema), then
  the server sends ``notifications/tools/list_changed``;
- ``publish_good_tool()``: from now on the listing names the well-formed tool ``extra`` instead
  of ``bad``, then the server notifies again;
- ``publish_twin()``: from now on the listing also names a second tool ``echo`` (described
  ``The twin.``) after ``extra``, then the server notifies again;
- ``malformed_reply()``: the server's answer reaches the wire with ``"result": 12`` in place of
  the result object (the right id, a result that is not an object);
- ``stray_output()``: its reply reaches the wire right after a line that is not JSON (as from
  a stray print to stdout);
- ``banner_output()``: its reply reaches the wire on the line of text written without a
  newline before it (``Loading model... ``, as a library's banner printed to stdout mid-session);
- ``binary_output()``: its reply reaches the wire right after a line that is not UTF-8 text
  (as from binary data written to stdout);
- ``wait()``: never answers;
- ``endless_line()``: writes to stdout on and on, never ending the line (never answers);
- ``logging_level()``: the level the client last set with ``logging/setLevel`` (the server
  declares the logging capability), or ``unset``;
- ``odd_block(block)``: its reply reaches the wire with ``block`` (JSON text) as its only
  content block, whatever that block is (one the protocol has no type for, say).

Resources: ``resources/list`` names ``notes://today``, whose ``uri`` reaches the wire as the
number 12.

Run: ``python tests/mcp_hostile_server.py [empty-name | twin-name]``; with ``empty-name`` the
listing also holds a tool whose name is empty, right after ``echo``; with ``twin-name`` a second
tool ``echo`` there; with ``endless-init`` its answer to ``initialize`` is a line that never
ends. With ``MCP_FIXTURE_MARKS`` naming a
directory, the server writes its process id to ``pid`` there on start.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_OBJECT: dict[str, Any] = {"type": "object"}
_ECHO = types.Tool(
    name="echo",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
)
_FIXED = [
    _ECHO,
    types.Tool(name="publish_bad_schema", input_schema=_OBJECT),
    types.Tool(name="publish_good_tool", input_schema=_OBJECT),
    types.Tool(name="publish_twin", input_schema=_OBJECT),
    types.Tool(name="malformed_reply", input_schema=_OBJECT),
    types.Tool(name="stray_output", input_schema=_OBJECT),
    types.Tool(name="binary_output", input_schema=_OBJECT),
    types.Tool(name="banner_output", input_schema=_OBJECT),
    types.Tool(name="wait", input_schema=_OBJECT),
    types.Tool(name="logging_level", input_schema=_OBJECT),
    types.Tool(name="endless_line", input_schema=_OBJECT),
    types.Tool(name="odd_block", input_schema=_OBJECT),
]

_TWIN = types.Tool(name="echo", description="The twin.", input_schema=_OBJECT)

_state: dict[str, Any] = {
    "extra": [],
    "empty_name": sys.argv[1:] == ["empty-name"],
    "twin_name": sys.argv[1:] == ["twin-name"],
    "endless_init": sys.argv[1:] == ["endless-init"],
    "doctored": set(),  # ids of the replies that go out malformed
    "after_stray": set(),  # ids of the replies that go out after a line that is not JSON
    "after_binary": set(),  # ids of the replies that go out after a line that is not text
    "after_banner": set(),  # ids of the replies that go out after text with no newline
    "logging_level": "unset",
    "odd_blocks": {},  # id -> the content block its reply goes out with
}


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tools = list(_FIXED)
    if _state["empty_name"]:
        tools.insert(1, types.Tool(name="", input_schema=_OBJECT))
    if _state["twin_name"]:
        tools.insert(1, _TWIN)
    return types.ListToolsResult(tools=tools + _state["extra"])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = params.name
    arguments = params.arguments or {}
    if name == "publish_bad_schema":
        _state["extra"] = [types.Tool(name="bad", input_schema=_OBJECT)]
        await ctx.session.send_tool_list_changed()
    elif name == "publish_good_tool":
        _state["extra"] = [types.Tool(name="extra", input_schema=_OBJECT)]
        await ctx.session.send_tool_list_changed()
    elif name == "publish_twin":
        _state["extra"] = [types.Tool(name="extra", input_schema=_OBJECT), _TWIN]
        await ctx.session.send_tool_list_changed()
    elif name == "malformed_reply":
        _state["doctored"].add(ctx.request_id)
    elif name == "stray_output":
        _state["after_stray"].add(ctx.request_id)
    elif name == "binary_output":
        _state["after_binary"].add(ctx.request_id)
    elif name == "banner_output":
        _state["after_banner"].add(ctx.request_id)
    elif name == "wait":
        await anyio.sleep_forever()
    elif name == "endless_line":
        while True:
            sys.stdout.buffer.write(b"x" * 65536)
            sys.stdout.buffer.flush()
            await anyio.sleep(0)
    elif name == "odd_block":
        _state["odd_blocks"][ctx.request_id] = json.loads(str(arguments["block"]))
    elif name == "logging_level":
        arguments = {"text": _state["logging_level"]}
    text = str(arguments.get("text", name))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


class DoctoredStdout:
    """The process's stdout, where the replies to ``malformed_reply`` lose their result object,
    those to ``odd_block`` carry the block they were given,
    those to ``stray_output`` follow a line that is not JSON, and the tool ``bad`` gets a
    string input schema: the SDK sends none of these, so they are made on their way out."""

    def __init__(self) -> None:
        self._out = anyio.wrap_file(sys.stdout)

    async def write(self, line: str) -> None:
        message = json.loads(line)
        if _state["endless_init"] and "serverInfo" in message.get("result", {}):
            while True:
                await self._out.write("x" * 65536)
                await self._out.flush()
        if "result" in message and message.get("id") in _state["odd_blocks"]:
            message["result"]["content"] = [_state["odd_blocks"].pop(message["id"])]
            line = json.dumps(message) + "\n"
        elif "result" in message and message.get("id") in _state["doctored"]:
            _state["doctored"].discard(message["id"])
            line = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": 12}) + "\n"
        elif "result" in message and message.get("id") in _state["after_binary"]:
            _state["after_binary"].discard(message["id"])
            await self._out.flush()
            sys.stdout.buffer.write(b"\x89PNG\xff\xfe\n")
            sys.stdout.buffer.flush()
        elif "result" in message and message.get("id") in _state["after_banner"]:
            _state["after_banner"].discard(message["id"])
            line = "Loading model... " + line
        elif "result" in message and message.get("id") in _state["after_stray"]:
            _state["after_stray"].discard(message["id"])
            line = "debug: replying now\n" + line
        elif isinstance(message.get("result"), dict) and "resources" in message["result"]:
            for resource in message["result"]["resources"]:
                resource["uri"] = 12
            line = json.dumps(message) + "\n"
        elif isinstance(message.get("result"), dict) and "tools" in message["result"]:
            for tool in message["result"]["tools"]:
                if tool.get("name") == "bad":
                    tool["inputSchema"] = {"type": "string"}
            line = json.dumps(message) + "\n"
        await self._out.write(line)

    async def flush(self) -> None:
        await self._out.flush()


async def list_resources(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(name="today", uri="notes://today")])


async def set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    _state["logging_level"] = params.level
    return types.EmptyResult()


with warnings.catch_warnings():
    # The SDK deprecates the logging capability for the next protocol version; clients of this
    # one still use it.
    warnings.simplefilter("ignore")
    server = Server(
        "hostile",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_set_logging_level=set_logging_level,
    )


async def main() -> None:
    folder = os.environ.get("MCP_FIXTURE_MARKS")
    if folder:
        Path(folder, ".pid.draft").write_text(str(os.getpid()))
        os.replace(Path(folder, ".pid.draft"), Path(folder, "pid"))  # never seen half-written
    async with stdio_server(stdout=DoctoredStdout()) as (read, write):  # type: ignore[arg-type]
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
