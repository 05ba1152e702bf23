"""An MCP server whose tool list changes and that uses the client's capabilities, started as a
real process by the MCP tests (``MCPServer`` of the official SDK).

Run: ``python tests/mcp_live_server.py`` (stdio) or ``python tests/mcp_live_server.py http
PORT`` (Streamable HTTP on 127.0.0.1:PORT, path ``/mcp``; ``http-400`` instead of ``http``
answers an unknown session id with 400 where the SDK's server answers 404). With
``MCP_FIXTURE_MARKS`` naming a directory, it writes its process id to ``pid`` there and the
marker files described below.

Tools:
- ``greet(name)``: ``hello <name>`` (read-only); ``add_tool(name)`` / ``remove_tool(name)``:
  add a ``greet``-like tool / remove any tool, then send ``notifications/tools/list_changed``;
  ``change_greet()``: replace ``greet`` with one that also takes ``punctuation``, then notify;
- ``slow(seconds, tag="")``: sleeps; writes ``started<tag>`` as it begins; ``die()``: exits the
  process mid-call;
- ``count(steps)``: reports progress ``1..steps`` of ``steps`` with a message, then ``counted``;
  ``flood(times=0)``: reports progress ``1..times`` as fast as it can, then ``flooded``
  (``times=0``: without end);
- ``ask_model(question)``: asks the client to sample, returns the model's text;
- ``confirm(action)``: elicits ``{"sure": bool}`` (default true), returns the answer;
- ``ask_name()``: elicits a required ``name`` string, returns the answer;
- ``show_roots()``: the client's roots, one URI per line;
- ``chatty()``: sends two log messages (info and warning), returns ``logged``;
- ``wipe(path)``: destructive, titled ``Wipe a folder``; ``peek(path)``: read-only;
- ``forecast(city)``: declares an output schema ``{"celsius": number}`` but returns
  ``{"celsius": "warm"}``; ``long_job()``: can only run as a task;
- ``bulk(mebibytes)``: a text of that many MiB;
- ``link()``: a resource link to ``notes://today``; ``add_note(name, text)``: adds the resource
  ``notes://<name>``, then sends ``notifications/resources/list_changed``;
- resources ``notes://today`` (text) and ``notes://logo`` (a PNG blob), prompt ``review``.

The server has instructions (shown as a prompt section by the client). With
``MCP_FIXTURE_HELPER`` set, it first starts a helper process of its own (a sleeping Python,
as a server that runs a worker or a browser does) that shares its stdin and stdout, and writes
the helper's process id to ``helper``: ``setsid`` starts it in a session of its own,
``daemon`` as a daemon (in a session of its own, its parent exited), ``bare-daemon`` as a
daemon with an empty environment, anything else in the server's process group.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import TextResource
from pydantic import BaseModel

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _mark(name: str, text: str | None = None) -> None:
    folder = os.environ.get("MCP_FIXTURE_MARKS")
    if folder:
        draft = Path(folder, f".{name}.draft")
        draft.write_text(name if text is None else text)
        os.replace(draft, Path(folder, name))


class LiveServer(MCPServer):
    """Publishes what the decorator API cannot: a declared output schema the tool does not keep,
    and a tool that requires task-augmented execution."""

    async def list_tools(self) -> list[types.Tool]:
        tools = await super().list_tools()
        out = []
        for tool in tools:
            if tool.name == "forecast":
                tool = tool.model_copy(
                    update={
                        "output_schema": {
                            "type": "object",
                            "properties": {"celsius": {"type": "number"}},
                            "required": ["celsius"],
                        }
                    }
                )
            if tool.name == "long_job":
                tool = tool.model_copy(
                    update={"execution": types.ToolExecution(task_support="required")}
                )
            out.append(tool)
        return out


server = LiveServer(
    "dsh-tools-live",
    instructions="Greet people by name. Never wipe a folder without asking.",
)

READ_ONLY = types.ToolAnnotations(read_only_hint=True)


async def _changed(ctx: Context) -> None:
    # Request-scoped, so on Streamable HTTP it rides this call's response stream.
    await ctx.session.send_notification(
        types.ToolListChangedNotification(), related_request_id=ctx.request_id
    )


@server.tool(description="Say hello.", annotations=READ_ONLY)
def greet(name: str) -> str:
    return f"hello {name}"


@server.tool(description="Add a greeting tool with the given name.")
async def add_tool(name: str, ctx: Context) -> str:
    def extra(who: str) -> str:
        return f"{name} says hi to {who}"

    server.add_tool(extra, name=name, description=f"The {name} greeting.")
    await _changed(ctx)
    return f"added {name}"


@server.tool(description="Remove a tool by name.")
async def remove_tool(name: str, ctx: Context) -> str:
    server.remove_tool(name)
    await _changed(ctx)
    return f"removed {name}"


@server.tool(description="Give greet a punctuation parameter.")
async def change_greet(ctx: Context) -> str:
    def greet(name: str, punctuation: str = "!") -> str:
        return f"hello {name}{punctuation}"

    server.remove_tool("greet")
    server.add_tool(greet, description="Say hello, with punctuation.", annotations=READ_ONLY)
    await _changed(ctx)
    return "changed greet"


@server.tool(description="Sleep, then say so.")
async def slow(seconds: float, tag: str = "") -> str:
    _mark(f"started{tag}")
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="A text of the given number of MiB.", structured_output=False)
def bulk(mebibytes: int) -> str:
    return "x" * (mebibytes << 20)


@server.tool(description="Exit the server process in the middle of the call.")
async def die(tag: str = "") -> str:
    _mark(f"dying{tag}")
    await anyio.sleep(0.05)
    os._exit(3)


@server.tool(description="Count to steps, reporting progress.")
async def count(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "counted"


@server.tool(description="Report progress as fast as possible.")
async def flood(ctx: Context, times: int = 0) -> str:
    step = 0
    while times == 0 or step < times:
        step += 1
        await ctx.report_progress(step, times or None, f"step {step}")
    return "flooded"


@server.tool(description="Ask the client's model a question.")
async def ask_model(question: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        messages=[
            types.SamplingMessage(
                role="user", content=types.TextContent(type="text", text=question)
            )
        ],
        max_tokens=50,
        system_prompt="Answer briefly.",
        related_request_id=ctx.request_id,
    )
    content = result.content
    text = content.text if isinstance(content, types.TextContent) else str(content)
    return f"{result.model}: {text}"


class Sure(BaseModel):
    sure: bool = True


class Name(BaseModel):
    name: str


@server.tool(description="Ask the user to confirm an action.")
async def confirm(action: str, ctx: Context) -> str:
    answer = await ctx.elicit(f"Really {action}?", Sure)
    data = getattr(answer, "data", None)
    return f"{answer.action} {data.sure if data is not None else '-'}"


@server.tool(description="Ask the user for a name.")
async def ask_name(ctx: Context) -> str:
    answer = await ctx.elicit("What is your name?", Name)
    data = getattr(answer, "data", None)
    return f"{answer.action} {data.name if data is not None else '-'}"


@server.tool(description="List the client's roots.")
async def show_roots(ctx: Context) -> str:
    roots = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in roots.roots)


@server.tool(description="Log two messages.")
async def chatty(ctx: Context) -> str:
    await ctx.session.send_log_message(
        level="info", data="warming up", logger="chatty", related_request_id=ctx.request_id
    )
    await ctx.session.send_log_message(
        level="warning", data={"disk": "low"}, logger="chatty", related_request_id=ctx.request_id
    )
    return "logged"


@server.tool(
    title="Wipe a folder",
    description="Delete everything in a folder.",
    annotations=types.ToolAnnotations(destructive_hint=True),
)
def wipe(path: str) -> str:
    return f"pretended to wipe {path}"


@server.tool(description="Look at a folder.", annotations=READ_ONLY)
def peek(path: str) -> str:
    return f"{path} looks fine"


@server.tool(description="The weather in a city.")
def forecast(city: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{city}: warm")],
        structured_content={"celsius": "warm"},
    )


@server.tool(description="A job that only runs as a task.")
def long_job() -> str:
    return "done"


@server.tool(description="Point at today's notes.", structured_output=False)
def link() -> list[types.ResourceLink]:
    return [
        types.ResourceLink(
            type="resource_link", uri="notes://today", name="today", mime_type="text/plain"
        )
    ]


@server.tool(description="Add a note resource, then announce the change.")
async def add_note(name: str, text: str, ctx: Context) -> str:
    server.add_resource(
        TextResource(uri=f"notes://{name}", name=name, text=text, mime_type="text/plain")
    )
    await ctx.session.send_notification(
        types.ResourceListChangedNotification(), related_request_id=ctx.request_id
    )
    return f"noted {name}"


@server.resource("notes://today", name="today", mime_type="text/plain")
def today() -> str:
    return "buy milk"


@server.resource("notes://logo", name="logo", mime_type="image/png")
def logo() -> bytes:
    import base64

    return base64.b64decode(PIXEL)


@server.prompt(description="Review some code.")
def review(code: str) -> str:
    return f"Please review:\n{code}"


def _not_found_as_400(app: Any) -> Any:
    """``app`` answering 400 where it answers 404, as servers that refuse an unknown session
    id with "Bad Request" do."""

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        async def send_400(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] == 404:
                message = {**message, "status": 400}
            await send(message)

        await app(scope, receive, send_400)

    return answer


_DAEMON = """
import os, sys, time
from pathlib import Path
draft = Path(sys.argv[1], ".helper.draft")
draft.write_text(str(os.getpid()))
os.replace(draft, draft.with_name("helper"))
time.sleep(60)
"""


def _start_daemon(bare: bool) -> None:
    """Start the helper as a daemon does: in a session of its own, its parent gone. It marks
    itself once it runs (the program it was started with, not a fork on its way there).
    ``bare``: with an empty environment, as ``env -i`` starts a program."""
    marks = os.environ.get("MCP_FIXTURE_MARKS", "")
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            argv = [sys.executable, "-c", _DAEMON, marks]
            os.execve(sys.executable, argv, {} if bare else dict(os.environ))
        os._exit(0)
    os.waitpid(middle, 0)


def main(argv: list[str]) -> None:
    helping = os.environ.get("MCP_FIXTURE_HELPER")
    if helping in ("daemon", "bare-daemon"):
        _start_daemon(bare=helping == "bare-daemon")
    elif helping:
        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            start_new_session=helping == "setsid",
        )
        _mark("helper", str(helper.pid))
    _mark("pid", str(os.getpid()))
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    elif argv[:1] == ["http-400"]:
        import uvicorn

        app = _not_found_as_400(server.streamable_http_app(host="127.0.0.1"))
        uvicorn.run(app, host="127.0.0.1", port=int(argv[1]), log_level="warning")
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
