"""The MCP adapter against a real MCP server process (``tests/mcp_server_fixture.py``).

Most call scenarios share one server (module scope); lifecycle scenarios start their own.
Everything that waits is bounded: results through ``spawn(...).result(WAIT)``, marker files the
server writes through ``wait_for_file``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import gc
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from conftest import WAIT, Logs, fixture, spawn, value_of
from mcp import StdioServerParameters, stdio_client
from mcp_support import (
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
    Accept,
    ExecuteBatch,
    ExecuteCall,
    SpillSource,
    ToolCall,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolSystem,
    spill_policy,
    timeout_policy,
)
from dsh_tools.integrations import (
    MCP_OUTPUT_SCHEMA,
    McpConnectionError,
    McpPlugin,
    register_mcp_server,
    register_mcp_server_sync,
    to_anthropic_tools,
    to_openai_tools,
)
from dsh_tools.integrations.mcp._client import McpClient

SERVER = str(Path(__file__).with_name("mcp_server_fixture.py"))
SERVER_TOOLS = ["echo", "fail", "sleep", "mixed", "add", "refuse", "snap_fail", "crash"]
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# --- helpers -----------------------------------------------------------------------------------


def server_params(marks: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[SERVER], env={"MCP_FIXTURE_MARKS": str(marks)}
    )


def mcp_threads() -> list[threading.Thread]:
    """Client threads of MCP plugins, except the module's shared one."""
    return [
        t for t in threading.enumerate() if t.name.startswith("mcp[") and t.name != "mcp[shared]"
    ]


def registering_threads() -> list[threading.Thread]:
    """The threads of ``await register_mcp_server(...)`` calls still registering."""
    return [t for t in threading.enumerate() if t.name.startswith("mcp-connect[")]


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def errlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextIO]:
    """Where the servers' stderr goes (kept out of the test output)."""
    with open(tmp_path_factory.mktemp("mcp-logs") / "stderr.txt", "w") as log:
        yield log


@pytest.fixture(scope="module")
def shared_marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-shared")


@pytest.fixture(scope="module")
def shared(shared_marks: Path, errlog: TextIO) -> Iterator[tuple[ToolSystem, McpPlugin]]:
    """One system with the fixture server registered as plugin ``shared``."""
    system = ToolSystem.start(code_runtime=None)
    try:
        plugin = register_mcp_server_sync(
            system, "shared", server_params(shared_marks), errlog=errlog, connect_timeout=WAIT
        )
        try:
            yield system, plugin
        finally:
            plugin.close()
    finally:
        system.stop()


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def connect(system: ToolSystem, marks: Path, errlog: TextIO) -> Iterator[Callable[..., McpPlugin]]:
    """``connect(**options)``: register a fresh fixture server into ``system``; closed after."""
    with registering(errlog) as register:

        def make(name: str = "fixture", **options: Any) -> McpPlugin:
            return register(system, name, server_params(marks), **options)

        yield make


# --- registration ------------------------------------------------------------------------------


def test_the_servers_tools_appear_in_schemas_with_their_raw_input_schemas(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, plugin = shared
    schemas = {s["name"]: s for s in system.tools.schemas()}
    assert list(plugin.tool_names) == SERVER_TOOLS
    assert sorted(schemas) == sorted(SERVER_TOOLS)
    assert schemas["echo"]["description"] == "Echo the text back."
    assert schemas["echo"]["parameters"] == {
        "properties": {"text": {"title": "Text", "type": "string"}},
        "required": ["text"],
        "title": "echoArguments",
        "type": "object",
    }


def test_the_plugin_reports_the_servers_identity(shared: tuple[ToolSystem, McpPlugin]) -> None:
    _, plugin = shared
    assert plugin.name == "shared"
    assert plugin.agent is None
    assert plugin.server_info is not None
    assert plugin.server_info["name"] == "dsh-tools-fixture"
    assert not plugin.closed


def test_a_tool_without_an_output_schema_declares_the_shared_one(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    definition = system.tools.get("mixed")
    assert definition is not None and definition.output is not None
    assert definition.output.schema == MCP_OUTPUT_SCHEMA


def test_a_declared_output_schema_types_the_structured_content(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    definition = system.tools.get("add")
    assert definition is not None and definition.output is not None
    schema = definition.output.schema
    assert schema["properties"]["structured_content"] == {
        "properties": {"result": {"title": "Result", "type": "integer"}},
        "required": ["result"],
        "title": "addOutput",
        "type": "object",
    }
    assert schema["required"] == ["content", "is_error", "structured_content"]
    assert schema["properties"]["content"] == MCP_OUTPUT_SCHEMA["properties"]["content"]


def test_mcp_tools_export_to_openai_and_anthropic(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared
    schemas = system.tools.schemas()
    openai = {t["function"]["name"]: t["function"] for t in to_openai_tools(schemas)}
    anthropic = {t["name"]: t for t in to_anthropic_tools(schemas)}
    assert openai["add"]["parameters"]["required"] == ["a", "b"]
    assert anthropic["add"]["input_schema"]["properties"]["a"]["type"] == "integer"


# --- calls -------------------------------------------------------------------------------------


def test_a_call_through_execute_returns_the_tools_content(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    result = run(system, "echo", {"text": "hello"})
    assert isinstance(result, ToolExecutionSuccess)
    assert texts(result) == ["hello"]
    assert result.value == {
        "content": [{"type": "text", "text": "hello"}],
        "is_error": False,
        "structured_content": {"result": "hello"},
    }


def test_execute_in_the_callers_own_thread_works_too(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared
    result = system.execute(ExecuteCall(call_id="c", name="add", arguments={"a": 2, "b": 40}))
    assert texts(result) == ["42"]
    assert value_of(result)["structured_content"] == {"result": 42}


def test_execute_async_calls_from_another_event_loop(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared

    async def both() -> list[ToolExecutionResult]:
        calls = [
            ExecuteCall(call_id=f"c{i}", name="echo", arguments={"text": str(i)}) for i in range(3)
        ]
        return await asyncio.wait_for(
            asyncio.gather(*(system.execute_async(c) for c in calls)), WAIT
        )

    results = asyncio.run(both())
    assert [texts(r) for r in results] == [["0"], ["1"], ["2"]]


def test_a_batch_runs_mcp_calls_and_keeps_model_order(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[
                ToolCall("b1", "sleep", '{"seconds": 0.05}'),
                ToolCall("b2", "echo", '{"text": "second"}'),
                ToolCall("b3", "fail", '{"message": "third"}'),
            ]
        ),
        timeout=WAIT,
    )
    assert [r.is_error for r in outcome.results] == [False, False, True]
    assert texts(outcome.results[0]) == ["slept 0.05"]
    assert texts(outcome.results[1]) == ["second"]
    results = [e for e in system.session.events if e.type == "tool/result"]
    assert [e.data["call_id"] for e in results[-3:]] == ["b1", "b2", "b3"]


def test_an_mcp_tool_error_becomes_a_failed_result(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared
    assert failure(run(system, "fail", {"message": "disk full"})) == {
        "content": [{"type": "text", "text": "Error: Error executing tool fail: disk full"}],
        "is_error": True,
        "error": {
            "message": "Error executing tool fail: disk full",
            "info": {"name": "McpToolError", "code": "MCP_TOOL_ERROR"},
        },
    }


def test_an_error_result_with_only_structured_content_says_it_as_json(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    # As a successful result with only structured content is shown: the model learns why.
    system, _ = shared
    error = failure(run(system, "refuse", {"reason": "quota exceeded"}))["error"]
    assert error == {
        "message": 'MCP tool "refuse" reported an error: {"reason":"quota exceeded"}',
        "info": {"name": "McpToolError", "code": "MCP_TOOL_ERROR"},
    }


def test_an_error_result_keeps_its_images_audio_and_resources_after_its_text(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    # A harness shows the model the failure with the screenshot and the log the server sent:
    # the text stays what it was, the other blocks follow it in the server's order.
    system, _ = shared
    assert failure(run(system, "snap_fail", {})) == {
        "content": [
            {"type": "text", "text": "Error: the button was not found"},
            {"type": "image", "data": PIXEL, "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {
                "type": "resource",
                "resource": {
                    "uri": "file:///run.log",
                    "mimeType": "text/plain",
                    "text": "clicked at 3,4",
                },
            },
        ],
        "is_error": True,
        "error": {
            "message": "the button was not found",
            "info": {"name": "McpToolError", "code": "MCP_TOOL_ERROR"},
        },
    }


def test_an_error_result_in_a_batch_keeps_its_other_blocks_too(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[ToolCall("b1", "snap_fail", "{}"), ToolCall("b2", "fail", '{"message": "no"}')]
        ),
        timeout=WAIT,
    )
    assert [block["type"] for block in outcome.results[0].content] == [
        "text",
        "image",
        "audio",
        "resource",
    ]
    assert list(outcome.results[1].content) == [
        {"type": "text", "text": "Error: Error executing tool fail: no"}
    ]


def test_a_spilled_error_text_keeps_the_errors_images_audio_and_resources_after_it(
    connect: Callable[..., McpPlugin], system: ToolSystem
) -> None:
    # The spill policy shortens the error text the model reads; the screenshot, the recording
    # and the log the server sent with it were dropped with the text.
    connect()
    saved: dict[str, str] = {}

    class Store:
        def save(self, text: str, source: SpillSource) -> str:
            saved[source["call_id"]] = text
            return f"mem://{source['call_id']}"

    system.tools.on_post_execute(spill_policy(24, Store()), prepend=True)
    result = failure(run(system, "snap_fail", {}))
    assert saved == {"call-snap_fail": "Error: the button was not found"}
    assert result["content"] == [
        {
            "type": "text",
            "text": "[Output truncated: 31 bytes in total. Full formatted result stored at: "
            "mem://call-snap_fail]",
        },
        {"type": "image", "data": PIXEL, "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {
                "uri": "file:///run.log",
                "mimeType": "text/plain",
                "text": "clicked at 3,4",
            },
        },
    ]
    assert result["error"]["message"] == "the button was not found"


def test_a_post_execute_hook_that_replaces_a_failures_content_keeps_its_blocks_out(
    connect: Callable[..., McpPlugin], system: ToolSystem
) -> None:
    # The hook decided what the model sees of the failure: the server's screenshot does not
    # come back behind it.
    connect()

    async def redact(exec: Any, result: Any, next: Any) -> Any:
        if result.is_error:
            return Accept(content=[{"type": "text", "text": "Error: (redacted)"}])
        return await next()

    system.tools.on_post_execute(redact)
    result = failure(run(system, "snap_fail", {}))
    assert result["content"] == [{"type": "text", "text": "Error: (redacted)"}]
    assert result["error"]["message"] == "the button was not found"


def test_arguments_reach_the_server_unvalidated_and_it_reports_the_error(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    result = failure(run(system, "echo", {}))
    assert result["error"]["info"] == {"name": "McpToolError", "code": "MCP_TOOL_ERROR"}
    assert "validation error" in result["error"]["message"]


def test_arguments_that_are_not_an_object_fail_before_the_request(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    outcome = system.execute_batch(
        ExecuteBatch(calls=[ToolCall("x", "echo", "[1, 2]")]), timeout=WAIT
    )
    assert failure(outcome.results[0])["error"] == {
        "message": "invalid arguments: arguments must be a JSON object",
        "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"},
    }


def test_mcp_content_renders_to_content_blocks_in_the_mcp_shapes(
    shared: tuple[ToolSystem, McpPlugin],
) -> None:
    system, _ = shared
    result = run(system, "mixed", {})
    assert list(result.content) == [
        {"type": "text", "text": "caption"},
        {"type": "image", "data": PIXEL, "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"},
        },
        {
            "type": "resource",
            "resource": {"uri": "file:///dot.png", "mimeType": "image/png", "blob": PIXEL},
        },
        {
            "type": "resource",
            "resource": {
                "uri": "file:///data.bin",
                "mimeType": "application/octet-stream",
                "blob": "AAE=",
            },
        },
        {"type": "resource_link", "uri": "file:///big.log", "name": "big.log"},
    ]


def test_the_value_keeps_the_mcp_content_in_wire_form(shared: tuple[ToolSystem, McpPlugin]) -> None:
    system, _ = shared
    value = value_of(run(system, "mixed", {}))
    assert value["content"][1] == {"type": "image", "data": PIXEL, "mimeType": "image/png"}
    assert value["content"][3] == {
        "type": "resource",
        "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"},
    }
    assert "structured_content" not in value


# --- abort and timeout -------------------------------------------------------------------------


def test_aborting_a_slow_call_returns_promptly_and_cancels_the_request(
    shared: tuple[ToolSystem, McpPlugin], shared_marks: Path
) -> None:
    system, _ = shared
    controller = AbortController()
    call = ExecuteCall(
        call_id="slow",
        name="sleep",
        arguments={"seconds": 60, "tag": "-abort"},
        signal=controller.signal,
    )
    pending = spawn(system, call)
    wait_for_file(shared_marks / "started-abort")
    controller.abort()
    assert failure(pending.result(WAIT))["error"] == {
        "message": "tool call aborted",
        "info": {"name": "AbortError", "code": "ABORTED"},
    }
    wait_for_file(shared_marks / "cancelled-abort")


def test_aborting_a_batch_cancels_its_running_mcp_call(
    shared: tuple[ToolSystem, McpPlugin], shared_marks: Path
) -> None:
    system, _ = shared
    controller = AbortController()
    batch = ExecuteBatch(
        calls=[ToolCall("s", "sleep", '{"seconds": 60, "tag": "-batch"}')],
        signal=controller.signal,
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute_batch, batch, WAIT)
        wait_for_file(shared_marks / "started-batch")
        controller.abort()
        outcome = pending.result(WAIT)
    assert failure(outcome.results[0])["error"]["info"]["code"] == "ABORTED"
    wait_for_file(shared_marks / "cancelled-batch")


def test_an_already_aborted_signal_never_reaches_the_server(
    shared: tuple[ToolSystem, McpPlugin], shared_marks: Path
) -> None:
    system, _ = shared
    controller = AbortController()
    controller.abort()
    result = run(system, "sleep", {"seconds": 60, "tag": "-early"}, signal=controller.signal)
    assert failure(result)["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert not (shared_marks / "started-early").exists()


def test_timeout_ms_with_the_timeout_policy_cancels_the_request(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    connect(timeout_ms=50)
    system.tools.on_execute(timeout_policy())
    result = run(system, "sleep", {"seconds": 60, "tag": "-deadline"})
    assert failure(result)["error"] == {
        "message": "tool call timed out after 50ms",
        "info": {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"},
    }
    wait_for_file(marks / "cancelled-deadline")


# --- concurrency policy ------------------------------------------------------------------------


def modes(system: ToolSystem, *names: str) -> list[str]:
    return [system.tools.execution_mode(ToolCall(f"m-{n}", n, "{}")) for n in names]


def test_by_default_only_read_only_tools_run_in_parallel(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect()
    assert modes(system, "echo", "sleep", "fail") == ["parallel", "exclusive", "exclusive"]


def test_concurrency_safe_true_makes_every_tool_parallel(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(concurrency_safe=True)
    assert modes(system, "echo", "sleep", "fail") == ["parallel", "parallel", "parallel"]


def test_a_concurrency_callable_decides_per_tool(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    seen: list[str] = []

    def only_sleep(tool: Any) -> bool:
        seen.append(tool["name"])
        return bool(tool["name"] == "sleep")

    connect(concurrency_safe=only_sleep)
    assert seen == SERVER_TOOLS
    assert modes(system, "echo", "sleep") == ["exclusive", "parallel"]


def test_a_concurrency_callable_that_answers_no_bool_fails_registration_naming_the_tool(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A truthy answer that is no bool (a regex match, say) would otherwise read as False, and
    # a tool meant to run in parallel would run alone without a word.
    with pytest.raises(TypeError) as raised:
        connect(concurrency_safe=lambda tool: re.match("ec", tool["name"]))
    assert str(raised.value).startswith(
        'concurrency_safe must return a bool, got re.Match for MCP tool "echo"'
    )
    assert system.tools.names() == []


# --- scopes and names --------------------------------------------------------------------------


def test_a_tool_prefix_renames_the_tools_but_calls_the_mcp_names(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(tool_prefix="fx_")
    assert plugin.tool_names == tuple("fx_" + n for n in SERVER_TOOLS)
    assert texts(run(system, "fx_echo", {"text": "routed"})) == ["routed"]
    assert failure(run(system, "echo", {"text": "x"}))["error"]["info"]["code"] == "UNKNOWN_TOOL"


def test_an_agent_scoped_server_is_visible_to_that_agent_only(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    scope = system.agent("researcher")
    scope.tools.register(fixture("notes"))
    plugin = connect(agent="researcher")
    assert plugin.agent == "researcher"
    assert system.tools.schemas() == []
    assert sorted(s["name"] for s in scope.tools.schemas()) == sorted([*SERVER_TOOLS, "notes"])
    assert texts(run(system, "echo", {"text": "mine"}, agent="researcher")) == ["mine"]
    plugin.close()
    assert [s["name"] for s in scope.tools.schemas()] == ["notes"]


def test_closing_the_agents_scope_closes_its_servers(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    # The scope's close() disposes what was registered in it; a server whose tools are gone
    # must not live on behind them, nor keep its name from the agent's next scope.
    plugin = connect(agent="researcher")
    pid = int(wait_for_file(marks / "pid"))
    system.agent("researcher").close()
    assert plugin.state == "closed"
    assert process_gone(pid)
    assert mcp_threads() == []
    again = connect(agent="researcher")
    assert texts(run(system, "echo", {"text": "again"}, agent="researcher")) == ["again"]
    again.close()


# --- lifecycle ---------------------------------------------------------------------------------


def test_close_removes_the_tools_and_the_server_process_exits(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    plugin = connect()
    pid = int(wait_for_file(marks / "pid"))
    plugin.close()
    assert plugin.closed
    assert system.tools.schemas() == []
    assert process_gone(pid)
    assert mcp_threads() == []


def test_stopping_the_system_closes_its_plugins_and_their_servers(
    marks: Path, errlog: TextIO
) -> None:
    # A harness that starts a tool system per session must not collect server processes.
    system = ToolSystem.start(code_runtime=None)
    plugin = register_mcp_server_sync(
        system, "fixture", server_params(marks), errlog=errlog, connect_timeout=WAIT
    )
    pid = int(wait_for_file(marks / "pid"))
    system.stop()
    assert plugin.state == "closed"
    assert process_gone(pid)
    assert mcp_threads() == []


LINGERING_SERVER = """
import os, signal, sys, time
from pathlib import Path
from mcp.server.mcpserver import MCPServer

marks, me = Path(sys.argv[1]), sys.argv[2]
server = MCPServer(me)

@server.tool(description="Say hi.")
def hi() -> str:
    return "hi"

def on_term(signum, frame):
    # Which servers had their input closed by the time this one is told to terminate.
    ended = sorted(path.name for path in marks.glob("input-ended-*"))
    (marks / f"terminated-{me}").write_text(" ".join(ended))
    os._exit(0)

server.run()
# Lingers after its input ends, as many servers do, until the close terminates it.
signal.signal(signal.SIGTERM, on_term)
(marks / f"input-ended-{me}").write_text("")
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("closing", ["system", "agent scope"])
def test_stopping_the_system_or_closing_a_scope_closes_its_plugins_together(
    tmp_path: Path, errlog: TextIO, closing: str
) -> None:
    # Each close of a server that lingers after its input ends waits out the shutdown's grace
    # before it terminates it: one after another, stop() (or the scope's close) would take that
    # grace once per server.
    script = tmp_path / "lingering_server.py"
    script.write_text(LINGERING_SERVER)
    names = ["a", "b", "c"]
    agent = "planner" if closing == "agent scope" else None
    system = ToolSystem.start(code_runtime=None)
    try:
        for name in names:
            params = StdioServerParameters(
                command=sys.executable, args=[str(script), str(tmp_path), name]
            )
            register_mcp_server_sync(
                system,
                name,
                params,
                agent=agent,
                tool_prefix=f"{name}_",
                errlog=errlog,
                connect_timeout=WAIT,
            )
        if agent is not None:
            system.agent(agent).close()
    finally:
        system.stop()
    ended = " ".join(f"input-ended-{name}" for name in names)
    for name in names:
        assert (tmp_path / f"terminated-{name}").read_text() == ended
    assert mcp_threads() == []


@pytest.mark.parametrize("closing", ["system", "agent scope"])
def test_stopping_the_system_during_a_registration_stops_its_server_and_says_so(
    marks: Path, errlog: TextIO, closing: str
) -> None:
    # The server started and is still connecting (it never answers): stop() ends it at once,
    # and the registration says why it failed, rather than waiting out connect_timeout and
    # then naming a closed plugin handle.
    silent = StdioServerParameters(
        command=sys.executable,
        args=["-c", SILENT_SERVER, str(marks / "pid")],
    )
    system = ToolSystem.start(code_runtime=None)
    agent = "scout" if closing == "agent scope" else None
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            registering = pool.submit(
                register_mcp_server_sync,
                system,
                "slow",
                silent,
                agent=agent,
                errlog=errlog,
                connect_timeout=WAIT * 3,
            )
            pid = int(wait_for_file(marks / "pid"))
            if agent is None:
                system.stop()
            else:
                system.agent(agent).close()
            with pytest.raises(McpConnectionError) as caught:
                registering.result(WAIT)
    finally:
        system.stop()
    assert caught.value.code == "MCP_CONNECT_FAILED"
    why = "the tool system stopped" if agent is None else "its agent scope closed"
    assert str(caught.value) == f'MCP server "slow" was not registered: {why} while it connected'
    assert process_gone(pid)
    assert mcp_threads() == []


SILENT_SERVER = """
import os, pathlib, sys
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
sys.stdin.read()
"""


def test_a_plugin_closed_first_is_not_closed_again_by_stop(
    marks: Path, errlog: TextIO, logs: Logs
) -> None:
    system = ToolSystem.start(code_runtime=None)
    plugin = register_mcp_server_sync(
        system, "fixture", server_params(marks), errlog=errlog, connect_timeout=WAIT
    )
    plugin.close()
    system.stop()
    assert plugin.state == "closed"
    assert logs.warnings == []


def test_wait_for_state_refuses_what_is_no_state(connect: Callable[..., McpPlugin]) -> None:
    # A timeout given by position would be a state never reached, waited for without limit.
    plugin = connect()
    assert plugin.wait_for_state("connected", timeout=WAIT)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(plugin.wait_for_state, "closed", 5)
        try:
            with pytest.raises(ValueError, match=r"timeout= by keyword\), got 5"):
                waiting.result(WAIT)
        finally:
            plugin.close()  # ends a wait that was let through


def test_wait_for_state_refuses_to_wait_for_no_state(connect: Callable[..., McpPlugin]) -> None:
    # No state is ever among none: without a timeout that wait would never end.
    plugin = connect()
    outcome: concurrent.futures.Future[bool] = concurrent.futures.Future()

    def wait() -> None:
        try:
            outcome.set_result(plugin.wait_for_state())
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=wait, daemon=True).start()
    with pytest.raises(ValueError, match=r"^wait_for_state takes at least one state"):
        outcome.result(WAIT)


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "5"])
def test_wait_for_state_refuses_a_timeout_that_is_no_number_of_seconds(
    connect: Callable[..., McpPlugin], timeout: Any
) -> None:
    # A NaN wait would spin without end, an infinite one overflow the lock's wait.
    plugin = connect()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(plugin.wait_for_state, "closed", timeout=timeout)
        try:
            with pytest.raises(ValueError, match=r"^wait_for_state: timeout must be None or "):
                waiting.result(WAIT)
        finally:
            plugin.close()  # ends a wait that was let through


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5"])
def test_a_request_through_the_plugin_refuses_a_timeout_that_is_no_number_of_seconds(
    connect: Callable[..., McpPlugin], timeout: Any
) -> None:
    # Refused before the request goes out, not reported as the server not answering in time
    # ("did not answer in -1 s") or as an overflow deep in a lock's wait.
    plugin = connect()
    with pytest.raises(ValueError, match=r"^read_resource: timeout must be None or a positive"):
        plugin.read_resource("notes://today", timeout=timeout)
    with pytest.raises(ValueError, match=r"^list_prompts: timeout must be None or a positive"):
        plugin.list_prompts(timeout=timeout)


def test_close_is_idempotent(system: ToolSystem, connect: Callable[..., McpPlugin]) -> None:
    plugin = connect()
    plugin.close()
    plugin.close()
    assert system.tools.schemas() == []


def test_close_during_a_call_fails_that_call_as_disconnected(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    plugin = connect()
    pending = spawn(
        system,
        ExecuteCall(call_id="long", name="sleep", arguments={"seconds": 60, "tag": "-close"}),
    )
    wait_for_file(marks / "started-close")
    plugin.close()
    error = failure(pending.result(WAIT))["error"]
    assert error == {
        "message": 'MCP server "fixture" closed during the call',
        "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
    }


def test_a_stdio_server_that_dies_is_disconnected_and_its_tools_withdrawn(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    plugin = connect()
    pid = int(wait_for_file(marks / "pid"))
    crashed = failure(run(system, "crash", {}))["error"]
    assert crashed == {
        "message": 'MCP server "fixture" disconnected during the call',
        "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
    }
    assert plugin.wait_for_state("disconnected", timeout=WAIT)
    assert plugin.closed
    assert system.tools.schemas() == []
    after = failure(run(system, "echo", {"text": "anyone?"}))["error"]
    assert after["info"]["code"] == "UNKNOWN_TOOL"
    assert process_gone(pid)
    plugin.close()
    assert plugin.state == "closed"
    assert mcp_threads() == []


def test_a_call_the_disconnect_failed_finds_the_plugin_already_disconnected(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A harness that reads the state on seeing MCP_DISCONNECTED must not be told "connected"
    # (and then have its retry fail as "not connected" instead of UNKNOWN_TOOL).
    plugin = connect()
    crashed = failure(run(system, "crash", {}))["error"]
    assert crashed["info"]["code"] == "MCP_DISCONNECTED"
    assert plugin.state == "disconnected"
    assert system.tools.schemas() == []
    assert failure(run(system, "echo", {"text": "anyone?"}))["error"]["info"]["code"] == (
        "UNKNOWN_TOOL"
    )


def test_under_a_reconnect_policy_it_finds_the_plugin_reconnecting(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    from dsh_tools.integrations import ReconnectPolicy

    plugin = connect(reconnect=ReconnectPolicy(initial_delay=5.0, max_attempts=1))
    assert failure(run(system, "crash", {}))["error"]["info"]["code"] == "MCP_DISCONNECTED"
    assert plugin.state == "reconnecting"
    assert failure(run(system, "echo", {"text": "anyone?"}))["error"]["message"] == (
        'MCP server "fixture" is disconnected (reconnecting)'
    )


PAGING_SERVER = str(Path(__file__).with_name("mcp_paging_server.py"))


@pytest.mark.parametrize("fresh", [False, True], ids=["repeated cursor", "pages without end"])
def test_a_tool_list_whose_pages_never_end_fails_that_listing_not_the_connection(
    system: ToolSystem, errlog: TextIO, logs: Logs, fresh: bool
) -> None:
    # Told its tools changed, the plugin lists them again: a server that keeps naming a next
    # page (the same one, or a new one each time) must not keep it listing for ever.
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER])
    plugin = register_mcp_server_sync(system, "pager", params, errlog=errlog, connect_timeout=WAIT)
    try:
        run(system, "start_paging", {"fresh": fresh})
        deadline = time.monotonic() + WAIT
        while not [e for e in logs.entries if e["event"] == "MCP tools/list failed"]:
            assert time.monotonic() < deadline, "the endless listing never failed"
            time.sleep(0.02)
        (failed,) = [e for e in logs.entries if e["event"] == "MCP tools/list failed"]
        if fresh:
            assert failed["error"] == "tools/list: the server sent more than 1000 pages"
        else:
            assert failed["error"] == (
                "tools/list: the server sent the cursor 'again' twice (its pages never end)"
            )
        before = texts(run(system, "echo", {}))
        time.sleep(0.3)
        assert texts(run(system, "echo", {})) == before  # no more listing: the server is idle
        assert plugin.state == "connected"
        assert sorted(system.tools.names()) == ["echo", "start_paging"]
    finally:
        plugin.close()
    assert mcp_threads() == []


def test_resource_templates_are_listed_from_every_page(system: ToolSystem, errlog: TextIO) -> None:
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER])
    with register_mcp_server_sync(
        system, "pager", params, errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        templates = plugin.list_resource_templates(timeout=WAIT)
    assert [t["uriTemplate"] for t in templates] == ["notes://{name}", "logs://{day}"]


def test_a_server_without_tools_registers_none_and_serves_its_resources(
    system: ToolSystem, errlog: TextIO
) -> None:
    # It declares no tools capability, so tools/list is not its to answer (this one answers it
    # "Method not found"): asking would fail the registration of a server that works.
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER, "templates-only"])
    with register_mcp_server_sync(
        system, "pager", params, errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        assert plugin.tool_names == ()
        assert plugin.state == "connected"
        templates = plugin.list_resource_templates(timeout=WAIT)
    assert [t["uriTemplate"] for t in templates] == ["notes://{name}", "logs://{day}"]


def test_a_server_that_serves_tools_without_declaring_them_still_has_them_registered(
    system: ToolSystem, errlog: TextIO
) -> None:
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER, "undeclared"])
    with register_mcp_server_sync(
        system, "pager", params, errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        assert plugin.tool_names == ("echo", "start_paging")
        assert system.tools.names() == ["echo", "start_paging"]


def test_a_server_that_refuses_to_list_its_tools_fails_registration_saying_it_started(
    system: ToolSystem, errlog: TextIO
) -> None:
    # It started and initialized: "could not be started" would send its author after the
    # command line, while the server answered tools/list with an error, which is quoted.
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER, "refusing"])
    with pytest.raises(McpConnectionError) as raised:
        register_mcp_server_sync(system, "pager", params, errlog=errlog, connect_timeout=WAIT)
    assert raised.value.code == "MCP_CONNECT_FAILED"
    assert str(raised.value) == (
        'MCP server "pager" started but refused to list its tools: it answered tools/list '
        'with the error "the tool index is locked" (code 0)'
    )
    assert system.tools.names() == []


def test_a_server_behind_a_transport_factory_that_refuses_its_tools_is_said_to_have_initialized(
    system: ToolSystem, errlog: TextIO
) -> None:
    # Through a factory the plugin starts nothing itself; that the server initialized, it knows.
    params = StdioServerParameters(command=sys.executable, args=[PAGING_SERVER, "refusing"])
    with pytest.raises(McpConnectionError) as raised:
        register_mcp_server_sync(
            system, "pager", lambda: stdio_client(params, errlog=errlog), connect_timeout=WAIT
        )
    assert str(raised.value) == (
        'MCP server "pager" initialized but refused to list its tools: it answered tools/list '
        'with the error "the tool index is locked" (code 0)'
    )


def test_a_server_that_cannot_start_registers_nothing(system: ToolSystem, errlog: TextIO) -> None:
    # The process started and exited at once (a missing module, a bad argument): the failure
    # says so and where to look, not only that a connection closed.
    params = StdioServerParameters(command=sys.executable, args=["-c", "raise SystemExit(2)"])
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "broken", params, errlog=errlog, connect_timeout=WAIT)
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert str(caught.value) == (
        'MCP server "broken" could not be started: it exited with status 2 before it was '
        "initialized; its stderr (errlog) may say why"
    )
    assert system.tools.schemas() == []
    assert mcp_threads() == []


LISTING_CRASH_SERVER = """
import os
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
import anyio

async def list_tools(ctx, params):
    os._exit(4)

server = Server("lister", on_list_tools=list_tools)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def test_a_server_that_exits_while_listing_its_tools_fails_saying_it_was_initialized(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # It answered initialize and then died on tools/list: "before it was initialized" would
    # send its author after a startup problem (a missing module) that is not there.
    script = tmp_path / "lister.py"
    script.write_text(LISTING_CRASH_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "lister", params, errlog=errlog, connect_timeout=WAIT)
    assert str(caught.value) == (
        'MCP server "lister" could not be started: it exited with status 4 after it was '
        "initialized, while listing its tools; its stderr (errlog) may say why"
    )
    assert system.tools.schemas() == []


def test_a_server_killed_by_a_signal_before_it_initialized_fails_naming_the_signal(
    system: ToolSystem, errlog: TextIO
) -> None:
    # Killed as it starts (the kernel's OOM killer, a watchdog): the signal says what happened
    # where its stderr, cut off, says nothing.
    program = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    params = StdioServerParameters(command=sys.executable, args=["-c", program])
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "killed", params, errlog=errlog, connect_timeout=WAIT)
    assert str(caught.value) == (
        'MCP server "killed" could not be started: it was killed by SIGKILL before it was '
        "initialized; its stderr (errlog) may say why"
    )
    assert system.tools.schemas() == []


def test_a_command_the_system_cannot_run_fails_registration_saying_why(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # An executable file that is neither a program nor a script with a "#!" line: the spawn
    # itself fails, and the failure says how, as the spawn's own error does.
    command = tmp_path / "garbage"
    command.write_text("garbage\n")
    command.chmod(0o755)
    params = StdioServerParameters(command=str(command))
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(McpConnectionError) as caught:
            register_mcp_server_sync(system, "garbage", params, errlog=errlog, connect_timeout=WAIT)
        message = str(caught.value)
        del caught  # its traceback holds the connection's frames
        gc.collect()  # nothing of the connection is left unclosed for the collector to find
    assert message == (
        f'MCP server "garbage" could not be started: OSError: [Errno {errno.ENOEXEC}] '
        f"{os.strerror(errno.ENOEXEC)}: '{command}'"
    )
    assert [str(w.message) for w in caught_warnings if w.category is ResourceWarning] == []
    assert system.tools.schemas() == []
    assert mcp_threads() == []


CHATTY_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer

print("chatty server starting", file=sys.stderr, flush=True)
server = MCPServer("chatty")

@server.tool(description="Say hi.")
def hi() -> str:
    return "hi"

server.run()
"""


def test_an_errlog_without_a_file_descriptor_gets_the_servers_stderr(
    system: ToolSystem, tmp_path: Path
) -> None:
    # Notebooks, captured test output and redirected logs replace sys.stderr with a stream
    # that has no descriptor, which a child process cannot write to directly.
    import io

    script = tmp_path / "chatty_server.py"
    script.write_text(CHATTY_SERVER)
    errlog = io.StringIO()
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with register_mcp_server_sync(system, "chatty", params, errlog=errlog, connect_timeout=WAIT):
        assert texts(run(system, "hi", {})) == ["hi"]
    wait_until(lambda: "chatty server starting\n" in errlog.getvalue(), "the server's stderr")
    wait_until(lambda: not forwarding_threads(), "the stderr forwarding to end")


def forwarding_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcp-stderr[")]


def test_a_name_conflict_rolls_back_and_stops_the_server(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path
) -> None:
    system.tools.register(fixture("sleep"))
    with pytest.raises(Exception, match="sleep"):
        connect()
    assert [s["name"] for s in system.tools.schemas()] == ["sleep"]
    assert process_gone(int(wait_for_file(marks / "pid")))
    assert mcp_threads() == []


def test_a_name_conflict_names_the_server_and_the_way_out(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A tool of another server (or the harness) has the name: the error must say which server
    # and tool, and that a prefix keeps them apart (not the registry's per-agent hint).
    system.tools.register(fixture("sleep"))
    with pytest.raises(ValueError) as caught:
        connect()
    assert str(caught.value) == (
        'MCP server "fixture" lists tool "sleep", but a tool named "sleep" is registered '
        'already; give this server a tool_prefix (tool_prefix="fixture_", say) to keep its '
        "tools apart"
    )
    assert [s["name"] for s in system.tools.schemas()] == ["sleep"]
    assert mcp_threads() == []


def test_a_plugin_name_in_use_is_refused_before_the_server_starts(
    system: ToolSystem, connect: Callable[..., McpPlugin], marks: Path, errlog: TextIO
) -> None:
    # Its instructions section, log lines and progress events are known by the name: a second
    # plugin under it would silently replace the first one's instructions in the prompt.
    first = connect("docs")
    pid = wait_for_file(marks / "pid")
    with pytest.raises(ValueError, match=r'^an MCP plugin named "docs" is registered already '):
        connect("docs", tool_prefix="b_")
    assert (marks / "pid").read_text() == pid  # no second server was started
    assert first.state == "connected"
    other = connect("docs", agent="planner", tool_prefix="p_")  # another agent's names
    assert other.state == "connected"
    first.close()
    again = connect("docs", tool_prefix="c_")  # the name is free once its plugin closed
    assert again.state == "connected"


def test_the_async_form_registers_calls_and_closes(
    system: ToolSystem, marks: Path, errlog: TextIO
) -> None:
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        plugin = await register_mcp_server(
            system, "async-fixture", server_params(marks), errlog=errlog, connect_timeout=WAIT
        )
        async with plugin:
            names = [s["name"] for s in system.tools.schemas()]
            result = await asyncio.wait_for(
                system.execute_async(
                    ExecuteCall(call_id="a", name="echo", arguments={"text": "async"})
                ),
                WAIT,
            )
        return names, texts(result), [s["name"] for s in system.tools.schemas()]

    names, answer, after = asyncio.run(scenario())
    assert names == SERVER_TOOLS
    assert answer == ["async"]
    assert after == []
    assert process_gone(int(wait_for_file(marks / "pid")))


SILENT_SERVER = """
import os, sys, time
open(sys.argv[1] + ".draft", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".draft", sys.argv[1])
time.sleep(3600)  # started, but never answers initialize
"""


async def cancel_a_registration_under_way(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> int:
    """Registers a server that never answers initialize as "silent", cancels the registration
    once the server has started, and gives the server's pid once the cancellation raised."""
    pid_file = tmp_path / "pid"
    params = StdioServerParameters(
        command=sys.executable, args=["-c", SILENT_SERVER, str(pid_file)]
    )
    task = asyncio.create_task(
        register_mcp_server(system, "silent", params, errlog=errlog, connect_timeout=3600)
    )
    pid = int(await asyncio.to_thread(wait_for_file, pid_file))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return pid


def test_cancelling_an_async_registration_cuts_a_connection_under_way_short(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    pid = asyncio.run(cancel_a_registration_under_way(system, tmp_path, errlog))
    # Not left to run until connect_timeout: the server is stopped, and the connection's
    # threads end (the registering thread last, once the plugin is closed and its name free).
    assert process_gone(pid)
    wait_until(
        lambda: not mcp_threads() and not registering_threads(),
        "the abandoned connection's threads to end",
    )
    assert system.tools.schemas() == []
    # The name is free again: the next registration under it gets as far as connecting.
    exits = StdioServerParameters(command=sys.executable, args=["-c", "pass"])
    with pytest.raises(McpConnectionError):
        register_mcp_server_sync(system, "silent", exits, errlog=errlog, connect_timeout=WAIT)


def test_a_cancelled_async_registration_has_stopped_its_server_when_the_cancellation_arrives(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # As a batch's awaiting task, the registration's raises CancelledError once what it started
    # has ended: the server process, the connection's threads, the name. It returned at once
    # and left them to end later: a retry under the same name (after asyncio.timeout, say) was
    # refused as a duplicate, and the server outlived the cancellation.
    async def scenario() -> tuple[bool, list[str], str]:
        pid = await cancel_a_registration_under_way(system, tmp_path, errlog)
        left = [t.name for t in mcp_threads() + registering_threads()]
        exits = StdioServerParameters(command=sys.executable, args=["-c", "pass"])
        with pytest.raises(McpConnectionError) as retried:
            await register_mcp_server(system, "silent", exits, errlog=errlog, connect_timeout=WAIT)
        return os.path.exists(f"/proc/{pid}"), left, retried.value.code

    assert asyncio.run(scenario()) == (False, [], "MCP_CONNECT_FAILED")


def test_a_cancelled_aclose_returns_once_the_plugin_is_closed(
    system: ToolSystem, marks: Path, errlog: TextIO
) -> None:
    async def scenario() -> tuple[str, bool]:
        plugin = await register_mcp_server(
            system, "fixture", server_params(marks), errlog=errlog, connect_timeout=WAIT
        )
        closing = asyncio.create_task(plugin.aclose())
        await asyncio.sleep(0)  # the close has begun on its thread
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        return plugin.state, bool(mcp_threads())

    assert asyncio.run(scenario()) == ("closed", False)


def test_an_async_registration_waits_for_a_server_no_longer_than_a_sync_one(
    system: ToolSystem, errlog: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both forms give a server connect_timeout + close_timeout to be listed. The async one
    # waits that long for the listing or its cancellation; a server still not listed then has
    # had its time, and is not waited for a second time as long.
    released = threading.Event()

    @contextlib.asynccontextmanager
    async def stubborn() -> AsyncIterator[Any]:
        while not released.is_set():  # deaf to the connect timeout's cancellation
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)
        raise OSError("released")
        yield

    waits: list[float | None] = []
    start = McpClient.start

    def recording_start(client: McpClient) -> concurrent.futures.Future[Any]:
        ready = start(client)
        result = ready.result

        def timed_result(timeout: float | None = None) -> Any:
            waits.append(timeout)
            return result(timeout)

        ready.result = timed_result  # type: ignore[method-assign]
        return ready

    monkeypatch.setattr(McpClient, "start", recording_start)
    try:
        with pytest.raises(McpConnectionError, match="did not answer within"):
            asyncio.run(
                register_mcp_server(
                    system,
                    "deaf",
                    stubborn,
                    errlog=errlog,
                    connect_timeout=0.05,
                    close_timeout=0.05,
                )
            )
    finally:
        released.set()
    assert waits == [0]
    wait_until(lambda: not mcp_threads(), "the connection's thread to end")


def test_a_transport_factory_can_replace_stdio_parameters(
    system: ToolSystem, marks: Path, errlog: TextIO
) -> None:
    params = server_params(marks)
    with register_mcp_server_sync(
        system, "factory", lambda: stdio_client(params, errlog=errlog), connect_timeout=WAIT
    ) as plugin:
        assert texts(run(system, "echo", {"text": "via factory"})) == ["via factory"]
    assert plugin.closed
    assert system.tools.schemas() == []


def test_a_cancelled_async_registration_is_closed_again(
    system: ToolSystem, marks: Path, errlog: TextIO
) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(
            register_mcp_server(
                system, "abandoned", server_params(marks), errlog=errlog, connect_timeout=WAIT
            )
        )
        await asyncio.sleep(0)  # let the registration start
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    deadline = time.monotonic() + WAIT
    while mcp_threads() or system.tools.schemas():
        assert time.monotonic() < deadline, "the abandoned registration was never closed"
        time.sleep(0.005)
    # Cut short, the server may not have got as far as starting; if it did, it is gone.
    pid = marks / "pid"
    assert not pid.exists() or process_gone(int(pid.read_text()))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"name": ""}, ValueError, "name must be a non-empty str, got ''"),
        ({"name": None}, TypeError, "name must be a non-empty str, got NoneType"),
        # A root was read only when the server asked for the roots: a failure there, late.
        (
            {"roots": ["/srv/docs", 7]},
            TypeError,
            r"roots\[1\] must be a path \(a str or a pathlib.Path\), got int",
        ),
    ],
    ids=["empty-name", "no-name", "root-of-no-path"],
)
def test_a_bad_registration_option_is_refused_before_connecting(
    system: ToolSystem, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    given: dict[str, Any] = {"name": "docs", **options}
    with pytest.raises(error, match=f"^{message}$"):
        # Nothing listens on port 9: refused before any connection is tried.
        register_mcp_server_sync(system, server_params="http://127.0.0.1:9/mcp", **given)
    assert system.tools.names() == []


def test_the_blocking_registration_is_refused_on_a_running_loop_before_a_server_starts(
    marks: Path, errlog: TextIO
) -> None:
    # On a loop it would stall every task of that loop while the server starts; the error
    # names the form to await instead, and nothing is left started or registered.
    system = ToolSystem.start(code_runtime=None)
    try:

        async def register_on_the_loop() -> None:
            register_mcp_server_sync(
                system, "fixture", server_params(marks), errlog=errlog, connect_timeout=WAIT
            )

        with pytest.raises(RuntimeError, match=r"await register_mcp_server\(\.\.\.\)"):
            asyncio.run(register_on_the_loop())
        assert not (marks / "pid").exists()
        assert system.tools.names() == []
    finally:
        system.stop()
    assert mcp_threads() == []
