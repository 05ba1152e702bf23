"""An MCP plugin against a server that sends what it must survive (``tests/mcp_hostile_server.py``,
a real process over stdio): a re-listing the SDK refuses, a reply whose result is not an
object, a tool with an empty name. Aborted calls and disconnects against the live server
(``tests/mcp_live_server.py``) carry their reasons.

Everything that waits is bounded: results through ``spawn(...).result(WAIT)``, log lines and
marker files through polling with the same bound.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

import pytest
from conftest import WAIT, Logs, spawn
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp_support import (
    Changes,
    failure,
    process_gone,
    registering,
    run,
    texts,
    wait_for_file,
    wait_until,
)

from dsh_tools import (
    AbortController,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolSystem,
)
from dsh_tools.integrations import (
    McpConnectionError,
    McpPlugin,
    McpToolError,
    ReconnectPolicy,
    register_mcp_server_sync,
)

HOSTILE_SERVER = str(Path(__file__).with_name("mcp_hostile_server.py"))
HOSTILE_TOOLS = [
    "echo",
    "publish_bad_schema",
    "publish_good_tool",
    "publish_twin",
    "malformed_reply",
    "stray_output",
    "binary_output",
    "banner_output",
    "wait",
    "logging_level",
    "endless_line",
    "odd_block",
]


def hostile_params(marks: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[HOSTILE_SERVER, *args],
        env={"MCP_FIXTURE_MARKS": str(marks)},
    )


@pytest.fixture
def hostile(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> Iterator[Callable[..., McpPlugin]]:
    """``hostile(*args)``: the hostile server registered into ``system``; closed after the test."""
    with registering(errlog) as register:

        def make(*args: str) -> McpPlugin:
            return register(system, "hostile", hostile_params(tmp_path, *args))

        yield make


def logged(logs: Logs, event: str) -> Any:
    """The first log entry named ``event``, waiting (bounded) for it."""

    def found() -> list[Any]:
        return [entry for entry in list(logs.entries) if entry["event"] == event]

    wait_until(lambda: bool(found()), f"the log line {event!r}")
    return found()[0]


def client_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"mcp[{name}]"]


# --- a re-listing the SDK refuses --------------------------------------------------------------


def test_a_relisting_the_sdk_refuses_keeps_the_tools_and_the_connection(
    system: ToolSystem, hostile: Callable[..., McpPlugin], logs: Logs
) -> None:
    plugin = hostile()
    changes = Changes(system)
    # The new listing names a tool whose input schema is {"type": "string"}: the SDK refuses
    # the whole listing. That is this one request's failure, not the connection's.
    assert texts(run(system, "publish_bad_schema", {})) == ["publish_bad_schema"]
    warning = logged(logs, "MCP tools/list failed")
    assert warning["server"] == "hostile"
    bad = len(HOSTILE_TOOLS)  # listed after the fixed tools
    assert warning["error"].startswith(
        f"ValidationError: malformed ListToolsResult at tools.{bad}.inputSchema.type: "
    )
    assert plugin.state == "connected"
    assert list(plugin.tool_names) == HOSTILE_TOOLS
    assert texts(run(system, "echo", {"text": "still here"})) == ["still here"]
    # The plugin goes on following the server: the next listing is applied.
    assert texts(run(system, "publish_good_tool", {})) == ["publish_good_tool"]
    changes.wait_for(lambda: "extra" in changes.names(), "the next listing to be applied")
    # The registry has the tool as it registers; the plugin lists it once the whole listing is.
    deadline = time.monotonic() + WAIT
    while "extra" not in plugin.tool_names and time.monotonic() < deadline:
        time.sleep(0.005)
    assert list(plugin.tool_names) == [*HOSTILE_TOOLS, "extra"]
    assert "MCP server disconnected; its tools are withdrawn" not in logs.warnings


# --- a reply whose result is not an object -----------------------------------------------------


def test_a_malformed_reply_fails_its_call_at_once_naming_what_was_wrong(
    system: ToolSystem, hostile: Callable[..., McpPlugin]
) -> None:
    plugin = hostile()
    # The reply has the call's id and "result": 12. Without a reply of its own the call would
    # wait for ever (the tool has no deadline): the bounded wait fails the test instead.
    call = ExecuteCall(call_id="m", name="malformed_reply", arguments={})
    result = spawn(system, call).result(WAIT)
    error = failure(result)["error"]
    assert error["info"] == {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"}
    assert error["message"].startswith(
        "MCP request failed: the server's reply is malformed (result: "
    )
    # One bad reply is that call's failure: the connection and the other calls go on.
    assert plugin.state == "connected"
    assert texts(run(system, "echo", {"text": "next"})) == ["next"]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        # A block of a type this protocol version does not have: every branch of the SDK's
        # content union refuses it, and the first branch's complaint (a text block's missing
        # "text") would send the reader after the wrong thing.
        (
            {"type": "hologram", "data": "x"},
            "content.0.type: 'hologram' is none of the types 'text', 'image', 'audio', "
            "'resource_link', 'resource'",
        ),
        # An image without its media type: what is wrong is in the image branch, not in the
        # text branch the union tried first.
        ({"type": "image", "data": "aGk="}, "content.0.mimeType: Field required"),
        (
            {"type": "resource", "resource": {"uri": "notes://a"}},
            "content.0.resource.TextResourceContents.text: Field required (and 1 more)",
        ),
    ],
)
def test_a_malformed_content_block_is_named_by_the_type_it_claims(
    system: ToolSystem, hostile: Callable[..., McpPlugin], block: dict[str, Any], message: str
) -> None:
    plugin = hostile()
    call = ExecuteCall(call_id="b", name="odd_block", arguments={"block": json.dumps(block)})
    error = failure(spawn(system, call).result(WAIT))["error"]
    assert error["info"] == {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"}
    assert error["message"] == f"MCP request failed: malformed CallToolResult at {message}"
    assert plugin.state == "connected"


DEEP_SERVER = """
from typing import Any
from mcp.server.mcpserver import MCPServer

server = MCPServer("deep")

@server.tool(description="A tree as deep as asked.")
def tree(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"child": value}
    return value

server.run()
"""


def test_a_reply_nested_deeper_than_the_client_reads_fails_its_call_at_once(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # The SDK's server sends a result 220 levels deep; the SDK's client parser stops at 200
    # and sees no JSON at all, so nothing says which call the reply was for. Without the id
    # found in it, the call would wait for ever (the tool has no deadline).
    script = tmp_path / "deep_server.py"
    script.write_text(DEEP_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with registering(errlog) as register:
        plugin = register(system, "deep", params)
        call = ExecuteCall(call_id="t", name="tree", arguments={"depth": 220})
        error = failure(spawn(system, call).result(WAIT))["error"]
        assert error["info"] == {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"}
        assert error["message"].startswith(
            "MCP request failed: the server's reply is malformed (Invalid JSON: recursion limit "
            "exceeded at line 1 column "
        )
        assert plugin.state == "connected"
        assert run(system, "tree", {"depth": 2}).value["structured_content"] == {
            "child": {"child": {}}
        }


@pytest.mark.parametrize("form", ["blocking", "async"])
def test_a_malformed_resource_list_fails_as_a_request_naming_what_was_wrong(
    system: ToolSystem, hostile: Callable[..., McpPlugin], form: str
) -> None:
    # As a tool call's malformed reply does: one line saying where, not the SDK's multi-line
    # validation error, and the connection goes on.
    plugin = hostile()
    with pytest.raises(McpToolError) as caught:
        if form == "blocking":
            plugin.list_resources(timeout=WAIT)
        else:
            asyncio.run(asyncio.wait_for(plugin.alist_resources(), WAIT))
    assert caught.value.code == "MCP_REQUEST_FAILED"
    assert str(caught.value).startswith(
        "MCP request failed: malformed ListResourcesResult at resources.0.uri: "
    )
    assert "\n" not in str(caught.value)
    assert plugin.state == "connected"
    assert texts(run(system, "echo", {"text": "next"})) == ["next"]


def test_a_line_that_is_no_message_is_logged_and_the_calls_go_on(
    system: ToolSystem, hostile: Callable[..., McpPlugin], logs: Logs
) -> None:
    hostile()
    # Nothing ties such a line to a call, and the reply after it still comes: the call gets it.
    assert texts(run(system, "stray_output", {})) == ["stray_output"]
    warning = logged(logs, "MCP server sent a message that could not be read")
    assert warning["server"] == "hostile"
    assert warning["error"].startswith("malformed JSON-RPC message at the top level: ")


def test_a_reply_after_text_printed_without_a_newline_still_reaches_its_call(
    system: ToolSystem, hostile: Callable[..., McpPlugin], logs: Logs
) -> None:
    # A banner printed mid-session without a newline shares its line with the next reply: the
    # reply is still read, and the text before it is logged as what it is.
    plugin = hostile()
    assert texts(run(system, "banner_output", {})) == ["banner_output"]
    warning = logged(logs, "MCP server wrote text before a message on its line")
    assert warning["server"] == "hostile"
    assert warning["text"] == "'Loading model... '"
    assert plugin.state == "connected"
    assert texts(run(system, "echo", {"text": "next"})) == ["next"]


BANNER_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer

sys.stdout.write("Weather server v1.2 starting... ")  # no newline: its first answer joins it
sys.stdout.flush()
server = MCPServer("banner")

@server.tool(description="Echo the text.")
def echo(text: str) -> str:
    return text

server.run()
"""


def test_a_banner_joined_to_the_first_answer_is_logged_and_the_server_registered(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, logs: Logs
) -> None:
    script = tmp_path / "banner_server.py"
    script.write_text(BANNER_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with register_mcp_server_sync(
        system, "banner", params, errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        assert plugin.tool_names == ("echo",)
        warning = logged(logs, "MCP server wrote text before a message on its line")
        assert warning["text"] == "'Weather server v1.2 starting... '"
        assert texts(run(system, "echo", {"text": "hi"})) == ["hi"]


PRETTY_SERVER = """
import json, sys

request = json.loads(sys.stdin.readline())
result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {},
          "serverInfo": {"name": "pretty", "version": "1"}}
# Indented JSON spans lines, none of which is a message: the answer never arrives whole.
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}, indent=2))
sys.stdout.flush()
sys.stdin.read()
"""


def test_a_first_answer_lost_in_lines_that_are_no_message_fails_registration_showing_them(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # The failure after connect_timeout says what the server sent instead of only that it
    # timed out.
    script = tmp_path / "pretty_server.py"
    script.write_text(PRETTY_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "pretty", params, errlog=errlog, connect_timeout=5)
    assert str(caught.value) == (
        'MCP server "pretty" started but did not initialize and list its tools within '
        "connect_timeout=5 s; it sent what is no message: malformed JSON-RPC message at the "
        "top level: Invalid JSON: expected value at line 1 column 1, in the line '}'"
    )


def test_a_line_that_is_not_text_is_logged_and_the_calls_go_on(
    system: ToolSystem, hostile: Callable[..., McpPlugin], logs: Logs
) -> None:
    plugin = hostile()
    assert texts(run(system, "binary_output", {})) == ["binary_output"]
    warning = logged(logs, "MCP server sent a message that could not be read")
    assert warning["server"] == "hostile"
    assert warning["error"] == "not utf-8 text: invalid start byte"
    assert plugin.state == "connected"


# --- a tool with an empty name -----------------------------------------------------------------


def test_a_line_past_the_limit_ends_the_connection_naming_the_limit(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, logs: Logs
) -> None:
    # The limit is lowered so that the test need not send hundreds of megabytes.
    params = hostile_params(tmp_path)
    with registering(errlog) as register:
        plugin = register(system, "hostile", params, max_message_bytes=1 << 20)
        assert texts(run(system, "echo", {"text": "before"})) == ["before"]
        result = run(system, "endless_line", {})
        assert failure(result)["error"]["info"]["code"] == "MCP_DISCONNECTED"
        warning = logged(logs, "MCP server disconnected; its tools are withdrawn")
        assert warning["server"] == "hostile"
        assert warning["reason"].startswith(
            "LineTooLongError: the server sent a line longer than 1048576 bytes, the limit ("
        )
        assert plugin.wait_for_state("disconnected", timeout=WAIT)


def test_an_initialize_answer_past_the_line_limit_fails_registration_naming_the_limit(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    params = hostile_params(tmp_path, "endless-init")
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(
            system,
            "hostile",
            params,
            errlog=errlog,
            connect_timeout=WAIT,
            max_message_bytes=1 << 20,
        )
    assert str(caught.value).startswith(
        'MCP server "hostile" could not be started: LineTooLongError: the server sent a line '
        "longer than 1048576 bytes, the limit ("
    )
    assert process_gone(int((tmp_path / "pid").read_text()))


def test_an_empty_tool_name_fails_registration_naming_the_server_and_the_entry(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    params = hostile_params(tmp_path, "empty-name")
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "hostile", params, errlog=errlog, connect_timeout=WAIT)
    assert str(caught.value) == (
        'MCP server "hostile" listed a tool that cannot be registered: tools[1] has an empty name'
    )
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert system.tools.names() == []
    assert process_gone(int(wait_for_file(tmp_path / "pid")))
    assert client_threads("hostile") == []


# --- two tools with one name -------------------------------------------------------------------


def test_a_tool_name_listed_twice_fails_registration_naming_both_entries(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # Only one of them can be registered, and which one the model would get is the server's
    # accident: registration says so rather than pick one behind the user's back.
    params = hostile_params(tmp_path, "twin-name")
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "hostile", params, errlog=errlog, connect_timeout=WAIT)
    assert str(caught.value) == (
        'MCP server "hostile" listed a tool that cannot be registered: tools[1] repeats the '
        'name "echo" of tools[0]'
    )
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert system.tools.names() == []
    assert process_gone(int(wait_for_file(tmp_path / "pid")))


def test_a_tool_name_a_later_listing_repeats_keeps_the_first_and_is_warned_about(
    system: ToolSystem, hostile: Callable[..., McpPlugin], logs: Logs
) -> None:
    plugin = hostile()
    changes = Changes(system)
    assert texts(run(system, "publish_twin", {})) == ["publish_twin"]
    changes.wait_for(lambda: "extra" in changes.names(), "the new listing to be applied")
    warning = logged(logs, "MCP tool could not be registered")
    assert warning["server"] == "hostile"
    assert warning["tool"] == "echo"
    assert warning["error"] == (
        f'tools[{len(HOSTILE_TOOLS) + 1}] repeats the name "echo" of tools[0]; the first is kept'
    )
    assert list(plugin.tool_names) == [*HOSTILE_TOOLS, "extra"]
    echo = system.tools.get("echo")
    assert echo is not None and echo.description != "The twin."
    assert texts(run(system, "echo", {"text": "the first"})) == ["the first"]


# --- reasons -----------------------------------------------------------------------------------


def in_batch(system: ToolSystem, tag: str, signal: Any = None) -> Future[ToolExecutionResult]:
    """The live server's ``slow`` as the one call of a batch, run on a thread of its own."""
    batch = ExecuteBatch(
        calls=[ToolCall(tag, "slow", json.dumps({"seconds": 60, "tag": tag}))], signal=signal
    )
    pending: Future[ToolExecutionResult] = Future()

    def run_batch() -> None:
        try:
            pending.set_result(system.execute_batch(batch, WAIT).results[0])
        except BaseException as exc:
            pending.set_exception(exc)

    threading.Thread(target=run_batch, name="test-batch", daemon=True).start()
    return pending


@pytest.mark.parametrize("how", ["call", "batch"])
def test_an_aborted_call_carries_the_abort_reason(
    how: str, system: ToolSystem, connect: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    connect(system)
    controller = AbortController()
    if how == "call":
        arguments = {"seconds": 60, "tag": "-abort"}
        call = ExecuteCall(
            call_id="-abort", name="slow", arguments=arguments, signal=controller.signal
        )
        pending = spawn(system, call)
    else:
        pending = in_batch(system, "-abort", controller.signal)
    wait_for_file(tmp_path / "started-abort")
    controller.abort("user pressed stop")
    result = pending.result(WAIT)
    assert isinstance(result, ToolExecutionFailure)
    assert failure(result)["error"]["info"]["code"] == "ABORTED"
    assert result.abort_reason == "user pressed stop"
    assert result.exception_type == ""  # ended by its cancellation, like a local tool


def test_a_batch_call_cut_short_by_stop_carries_the_stop_reason(
    connect: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    # A batch's calls share a signal the system owns, and stop() aborts it.
    system = ToolSystem.start(code_runtime=None)
    try:
        connect(system)
        pending = in_batch(system, "-stop")
        wait_for_file(tmp_path / "started-stop")
    finally:
        system.stop()
    result = pending.result(WAIT)
    assert isinstance(result, ToolExecutionFailure)
    assert failure(result)["error"]["info"]["code"] == "ABORTED"
    assert result.abort_reason == "the tool system is stopping"


def test_a_withdrawal_logs_why_the_server_disconnected(
    system: ToolSystem, connect: Callable[..., McpPlugin], logs: Logs
) -> None:
    plugin = connect(system)
    assert failure(run(system, "die", {}))["error"]["info"]["code"] == "MCP_DISCONNECTED"
    warning = logged(logs, "MCP server disconnected; its tools are withdrawn")
    assert warning["server"] == "live"
    # The end showed itself first either as the server's output ending or as the call's
    # request reporting the connection closed; which comes first is a race. How the server's
    # process ended follows (its "die" tool exits with status 3).
    assert warning["reason"] in (
        "the server closed the connection; it exited with status 3",
        "a request reported the connection closed (Connection closed); it exited with status 3",
    )
    assert plugin.wait_for_state("disconnected", timeout=WAIT)


BROKEN_ON_RESTART_SERVER = """
import os, sys
from pathlib import Path

started = Path(sys.argv[1])
if started.exists():
    sys.exit(5)  # as a server whose configuration broke while it ran
started.write_text("")

from mcp.server.mcpserver import MCPServer

server = MCPServer("once")

@server.tool(description="Exit at once.")
def die() -> str:
    os._exit(3)

server.run()
"""


def test_a_reconnect_whose_server_exits_at_once_logs_how_it_exited(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, logs: Logs
) -> None:
    script = tmp_path / "once_server.py"
    script.write_text(BROKEN_ON_RESTART_SERVER)
    params = StdioServerParameters(
        command=sys.executable, args=[str(script), str(tmp_path / "started")]
    )
    policy = ReconnectPolicy(initial_delay=0.05, max_attempts=1)
    with registering(errlog) as register:
        plugin = register(system, "once", params, reconnect=policy)
        assert failure(run(system, "die", {}))["error"]["info"]["code"] == "MCP_DISCONNECTED"
        assert plugin.wait_for_state("disconnected", timeout=WAIT)
    attempt = logged(logs, "MCP server connection failed")
    assert attempt["error"].endswith("; it exited with status 5")
    withdrawal = logged(logs, "MCP server disconnected; its tools are withdrawn")
    assert withdrawal["reason"] == "the server closed the connection; it exited with status 5"


def test_a_call_cut_short_by_the_disconnect_leaves_no_unretrieved_failure(
    system: ToolSystem, connect: Callable[..., McpPlugin], caplog: pytest.LogCaptureFixture
) -> None:
    # The withdrawal cancels the call's future while its request is failing on the client
    # loop: the request's own failure must not be left for the collector to report as
    # "Task exception was never retrieved" (in whatever thread and code it happens to run).
    plugin = connect(system)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        assert failure(run(system, "die", {}))["error"]["info"]["code"] == "MCP_DISCONNECTED"
        assert plugin.wait_for_state("disconnected", timeout=WAIT)
        plugin.close()  # its loop and thread end: nothing of the call is left but garbage
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


WEDGED_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("wedged")

@server.tool(description="A file name that is not text.")
def name() -> str:
    # The SDK cannot encode the reply: its server loop dies, while the thread reading stdin
    # keeps the process alive with its output open. It never answers again.
    return "report\\udcff.txt"

server.run()
"""


def test_a_stdio_server_that_stops_answering_without_exiting_is_found_out(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    script = tmp_path / "wedged_server.py"
    script.write_text(WEDGED_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    # Registered as the guide shows it, with no timeout: only the default keep-alive ping can
    # tell this server from a slow one.
    with register_mcp_server_sync(
        system, "wedged", params, errlog=errlog, connect_timeout=2
    ) as plugin:
        result = spawn(system, ExecuteCall(call_id="n", name="name", arguments={})).result(45)
        assert failure(result)["error"] == {
            "message": 'MCP server "wedged" disconnected during the call',
            "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
        }
        assert plugin.state == "disconnected"


PINGLESS_SERVER = """
import os
from pathlib import Path

import anyio
from mcp import MCPError, types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

MARKS = Path(os.environ["MCP_FIXTURE_MARKS"])


async def refuse_ping(ctx, params):
    # As a server that implements no ping answers one (the SDK's own, given on_ping=None).
    with open(MARKS / "pings", "a") as pings:
        pings.write("ping\\n")
    raise MCPError(types.METHOD_NOT_FOUND, "Method not found")


async def list_tools(ctx, params):
    return types.ListToolsResult(
        tools=[types.Tool(name="refuse", input_schema={"type": "object"})]
    )


async def call_tool(ctx, params):
    # -32000, the code the SDK also gives a closed connection: a server's own error here.
    raise MCPError(-32000, "license expired")


server = Server("pingless", on_ping=refuse_ping, on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


def test_a_server_that_refuses_pings_stays_connected_and_its_errors_are_its_own(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # The protocol asks every server to answer ping, but one that answers "Method not found"
    # is there all the same: neither the keep-alive nor a failed call may take it for gone.
    script = tmp_path / "pingless_server.py"
    script.write_text(PINGLESS_SERVER)
    env = {"MCP_FIXTURE_MARKS": str(tmp_path)}
    params = StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    with registering(errlog) as register:
        plugin = register(system, "pingless", params, ping_interval=0.05)
        pings = tmp_path / "pings"
        wait_until(lambda: pings.exists() and len(pings.read_text().split()) >= 3, "3 pings")
        assert failure(run(system, "refuse", {}))["error"] == {
            "message": "MCP request failed: license expired",
            "info": {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"},
        }
        assert plugin.state == "connected"
        assert system.tools.names() == ["refuse"]


PLAIN_SERVER = """
import contextlib
import os
from mcp.server.mcpserver import MCPServer

server = MCPServer("plain")

@server.tool(description="The names in the environment this process was started with.")
def environment() -> str:
    with open("/proc/self/environ", "rb") as started:
        entries = started.read().split(b"\\0")
    return " ".join(sorted(e.split(b"=", 1)[0].decode() for e in entries if b"=" in e))

@server.tool(description="Closes the server's output (the SDK serves it from a copy of fd 1).")
async def close_output() -> str:
    import anyio

    def link(fd: str) -> str:
        return os.readlink(f"/proc/self/fd/{fd}")

    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if link(fd).startswith("pipe:") and link(fd) != link("0"):
                os.close(int(fd))
    await anyio.sleep(3600)
    return "never"

server.run()
"""


def plain_params(tmp_path: Path) -> StdioServerParameters:
    script = tmp_path / "plain_server.py"
    script.write_text(PLAIN_SERVER)
    return StdioServerParameters(command=sys.executable, args=[str(script)], env={"MINE": "1"})


def test_a_stdio_server_starts_with_the_default_environment_and_its_own_entries_only(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # No locale entry is added on the way (a C locale, as the default environment has, stays
    # one): what the server would have been started with by the SDK, plus the tag it is
    # found by.
    with register_mcp_server_sync(
        system, "plain", plain_params(tmp_path), errlog=errlog, connect_timeout=WAIT
    ):
        names = texts(run(system, "environment", {}))[0].split()
    expected = {*get_default_environment(), "MINE", "DSH_TOOLS_MCP_SERVER"}
    assert sorted(names) == sorted(expected)


def test_a_stdio_server_that_closes_its_output_but_runs_on_is_lost_at_once(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    with register_mcp_server_sync(
        system, "plain", plain_params(tmp_path), errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        result = spawn(system, ExecuteCall(call_id="c", name="close_output", arguments={}))
        assert failure(result.result(WAIT))["error"] == {
            "message": 'MCP server "plain" disconnected during the call',
            "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
        }
        assert plugin.state == "disconnected"


FROZEN_SERVER = """
import os
import signal
from pathlib import Path

from mcp.server.mcpserver import MCPServer

MARKS = Path(os.environ["MCP_FIXTURE_MARKS"])
server = MCPServer("frozen")


def terminated(signum, frame):
    (MARKS / "terminated").write_text("cleaned up on SIGTERM")
    os._exit(0)


signal.signal(signal.SIGTERM, terminated)


@server.tool(description="Stop this process, as job control or a debugger would.")
async def freeze() -> str:
    (MARKS / "frozen").write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
    return "thawed"


server.run()
"""


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat.rsplit(b")", 1)[1].split()[0] in (b"T", b"t")


@pytest.mark.skipif(sys.platform != "linux", reason="the plugin signals the group on Linux")
def test_a_stopped_server_is_continued_so_that_its_sigterm_handler_runs(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # A stopped process acts on no signal but SIGKILL until it is continued: without a
    # SIGCONT the SIGTERM that ends the group stays pending, and the server is killed with
    # no chance to clean up (and only after the shutdown's second grace).
    script = tmp_path / "frozen_server.py"
    script.write_text(FROZEN_SERVER)
    params = StdioServerParameters(
        command=sys.executable, args=[str(script)], env={"MCP_FIXTURE_MARKS": str(tmp_path)}
    )
    plugin = register_mcp_server_sync(system, "frozen", params, errlog=errlog, connect_timeout=WAIT)
    try:
        controller = AbortController()
        call = ExecuteCall(call_id="f", name="freeze", arguments={}, signal=controller.signal)
        pending = spawn(system, call)
        pid = int(wait_for_file(tmp_path / "frozen"))
        wait_until(lambda: _stopped(pid), "the server stopped itself")
        controller.abort("the user gave up")
        result = pending.result(WAIT)
        assert failure(result)["error"]["info"]["code"] == "ABORTED"
    finally:
        plugin.close()
    assert process_gone(pid)
    assert (tmp_path / "terminated").read_text() == "cleaned up on SIGTERM"


FUTURE_SERVER = """
import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        answer = {
            "protocolVersion": "2099-01-01",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "future", "version": "9"},
        }
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": answer}), flush=True)
"""


def test_a_server_that_speaks_a_protocol_version_the_sdk_does_not_fails_naming_the_versions(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # A server newer than the installed SDK: it started and answered, so "could not be
    # started" would send its author looking in the wrong place.
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    script = tmp_path / "future_server.py"
    script.write_text(FUTURE_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with pytest.raises(McpConnectionError) as raised:
        register_mcp_server_sync(system, "future", params, errlog=errlog, connect_timeout=WAIT)
    speaks = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
    assert str(raised.value) == (
        'MCP server "future" started but answered initialize with the protocol version '
        f'"2099-01-01", which the installed mcp SDK does not speak (it speaks {speaks}); '
        "a newer mcp release may speak it"
    )
    assert raised.value.code == "MCP_CONNECT_FAILED"
    assert system.tools.names() == []
