"""What MCP servers say about their tools is used: hints, titles, instructions, per-tool
timeouts, task-only tools, output schemas; against the live server and the published
``mcp-server-time`` package, each a real process."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytest
from conftest import WAIT, Logs, value_of
from mcp import StdioServerParameters
from mcp_support import (
    RecordingApproval,
    failure,
    live_params,
    run,
    texts,
)

from dsh_tools import ToolCall, ToolSystem
from dsh_tools.integrations import (
    INSTRUCTIONS_ORDER,
    McpPlugin,
    ask_before_destructive_mcp_tools,
    mcp_tool_info,
    register_mcp_server_sync,
    to_openai_tools,
)

# --- hints and titles --------------------------------------------------------------------------


def test_hooks_can_read_the_title_and_hints_of_an_mcp_tool(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    wipe = mcp_tool_info(system.tools.get("wipe"))
    assert wipe is not None
    assert (wipe.title, wipe.server, wipe.mcp_name) == ("Wipe a folder", "live", "wipe")
    assert wipe.annotations["destructiveHint"] is True
    assert wipe.destructive and not wipe.read_only
    peek = plugin.tool_info("peek")
    assert peek is not None and peek.read_only and not peek.destructive
    assert mcp_tool_info(None) is None


def test_read_only_tools_run_in_parallel_and_others_alone(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system)
    modes = [system.tools.execution_mode(ToolCall("m", n, "{}")) for n in ("peek", "wipe")]
    assert modes == ["parallel", "exclusive"]


def test_the_shipped_policy_asks_before_destructive_tools_only(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    approval = RecordingApproval("rejected")
    system = make_system(approval=approval)
    connect(system)
    system.tools.on_pre_execute(ask_before_destructive_mcp_tools(system.tools))
    denied = failure(run(system, "wipe", {"path": "/srv"}, agent="ops"))
    assert denied["error"]["message"] == 'the user rejected tool "wipe"'
    assert texts(run(system, "peek", {"path": "/srv"}, agent="ops")) == ["/srv looks fine"]
    [request] = approval.requests
    assert request["tool_name"] == "wipe"
    assert request["reason"] == (
        'MCP tool "Wipe a folder" of server "live" may make destructive changes'
    )


# --- instructions ------------------------------------------------------------------------------


def test_the_servers_instructions_are_a_prompt_section_until_close(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    [section] = system.assemble_prompt().sections
    assert (section.name, section.order) == ("mcp:live", INSTRUCTIONS_ORDER)
    assert section.text == (
        "## live (MCP server)\n\nGreet people by name. Never wipe a folder without asking.\n"
    )
    assert plugin.instructions == "Greet people by name. Never wipe a folder without asking."
    plugin.close()
    assert system.assemble_prompt().sections == []


def test_the_instructions_section_can_be_turned_off(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system, instructions_section=False)
    assert system.assemble_prompt().sections == []


# --- timeouts ----------------------------------------------------------------------------------


def test_a_per_tool_timeout_cancels_the_request_without_a_timeout_policy(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system, timeouts={"slow": 100})
    assert failure(run(system, "slow", {"seconds": 30}))["error"] == {
        "message": "tool call timed out after 100ms",
        "info": {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"},
    }
    slow, greet = system.tools.get("slow"), system.tools.get("greet")
    assert slow is not None and slow.timeout_ms == 100
    assert greet is not None and greet.timeout_ms is None


def test_timeouts_name_tools_by_their_registered_name_too(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system, tool_prefix="live_", timeout_ms=9000, timeouts={"live_greet": 500})
    greet, peek = system.tools.get("live_greet"), system.tools.get("live_peek")
    assert greet is not None and greet.timeout_ms == 500
    assert peek is not None and peek.timeout_ms == 9000


def test_a_timeouts_key_that_names_no_listed_tool_is_warned_about(
    system: ToolSystem, connect: Callable[..., McpPlugin], logs: Logs
) -> None:
    # A misspelled name would leave the tool it meant without a deadline, with no sign of it.
    connect(system, tool_prefix="live_", timeouts={"slwo": 100, "live_greet": 500, "slow": 200})
    [line] = [e for e in logs.entries if e["event"].startswith("MCP timeouts")]
    assert line["event"] == "MCP timeouts name no tool the server listed"
    assert line["server"] == "live"
    assert line["names"] == ["slwo"]
    assert line["log_level"] == "warning"


def test_a_non_positive_timeout_is_refused_before_connecting(system: ToolSystem) -> None:
    with pytest.raises(ValueError, match=r"timeouts\['slow'\] must be a positive number"):
        register_mcp_server_sync(system, "live", live_params(Path(".")), timeouts={"slow": 0})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout_ms", 0),
        ("timeout_ms", float("nan")),
        ("ping_interval", 0),
        ("ping_interval", -1.0),
        ("connect_timeout", -1),
        ("connect_timeout", float("inf")),
        ("close_timeout", 0),
    ],
)
def test_a_bound_that_is_no_positive_number_is_refused_before_the_server_starts(
    system: ToolSystem, tmp_path: Path, option: str, value: float
) -> None:
    # ping_interval=0 would ping without pause; a zero or negative timeout gives up at once.
    with pytest.raises(ValueError, match=rf"^{option} must be a positive number of"):
        register_mcp_server_sync(system, "live", live_params(tmp_path), **{option: value})
    assert not (tmp_path / "pid").exists()
    assert system.tools.names() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout_ms": True}, "timeout_ms must be a positive number of milliseconds, got bool"),
        (
            {"connect_timeout": "30"},
            "connect_timeout must be a positive number of seconds, got str",
        ),
        (
            {"timeouts": {"search": "500"}},
            "timeouts['search'] must be a positive number of milliseconds, got str",
        ),
        (
            {"max_message_bytes": 1.5},
            "max_message_bytes must be a positive whole number of bytes, got float",
        ),
    ],
    ids=["bool", "str", "per-tool-str", "float-bytes"],
)
def test_a_bound_of_the_wrong_type_is_a_type_error_naming_the_type(
    system: ToolSystem, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    # A bool or a setting read as a str is a wrong type, not a bad value; it was a ValueError
    # that showed the value (True, '30') as if its size were the problem.
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        register_mcp_server_sync(system, "live", live_params(tmp_path), **options)
    assert not (tmp_path / "pid").exists()
    assert system.tools.names() == []


# --- tasks and output schemas ------------------------------------------------------------------


def test_a_tool_that_only_runs_as_a_task_is_not_registered_and_says_so(
    system: ToolSystem, connect: Callable[..., McpPlugin], logs: Logs
) -> None:
    plugin = connect(system)
    assert "long_job" not in system.tools.names()
    assert plugin.unsupported_tools == ("long_job",)
    [line] = [e for e in logs.entries if e.get("tool") == "long_job"]
    assert line["log_level"] == "warning"
    assert "can only run as a task" in line["event"]


def test_output_that_violates_the_declared_schema_is_a_one_line_failure(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system)
    error = failure(run(system, "forecast", {"city": "Oslo"}))["error"]
    assert error == {
        "message": 'MCP tool "forecast" returned output that does not match its output schema '
        "at $.celsius: 'warm' is not of type 'number'",
        "info": {"name": "McpToolError", "code": "MCP_INVALID_OUTPUT"},
    }


# --- a published server ------------------------------------------------------------------------


def test_the_published_time_server_registers_and_answers(
    system: ToolSystem, errlog: TextIO
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    )
    with register_mcp_server_sync(
        system, "time", params, tool_prefix="time_", errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        assert sorted(plugin.tool_names) == ["time_convert_time", "time_get_current_time"]
        info = plugin.tool_info("time_get_current_time")
        assert info is not None and info.read_only
        result = run(system, "time_get_current_time", {"timezone": "Europe/Oslo"})
        [block] = result.content
        assert block["type"] == "text" and "Europe/Oslo" in block["text"]
        converted = run(
            system,
            "time_convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
        target = value_of(converted)["structured_content"]["target"]
        assert target["timezone"] == "Asia/Tokyo"
        assert target["datetime"].endswith("T21:00:00+09:00")
        bad = failure(run(system, "time_get_current_time", {"timezone": "Mars/Olympus"}))
        assert bad["error"]["info"] == {"name": "McpToolError", "code": "MCP_TOOL_ERROR"}
        assert "Mars/Olympus" in bad["error"]["message"]
    assert system.tools.names() == []


# --- strict-mode nulls and output types -----------------------------------------------------


def test_a_null_for_an_optional_parameter_reaches_the_server_as_absent(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A model under strict mode sends null for an optional property it leaves out; "tag" is
    # a plain string with a default, so the server itself would refuse the null.
    connect(system)
    result = run(system, "slow", {"seconds": 0, "tag": None})
    assert not result.is_error, result
    assert texts(result) == ["slept 0.0"]


OPENAPI_SERVER = str(Path(__file__).with_name("mcp_openapi_server.py"))


def test_an_openapi_nullable_property_exports_as_taking_null_in_strict_mode(
    system: ToolSystem, errlog: TextIO
) -> None:
    # A server generated from an OpenAPI document says "nullable: true", which strict mode
    # does not read: exported as it is, the model could never send the null the server takes.
    params = StdioServerParameters(command=sys.executable, args=[OPENAPI_SERVER])
    with register_mcp_server_sync(system, "api", params, errlog=errlog, connect_timeout=WAIT):
        (exported,) = to_openai_tools(system.tools.schemas(), strict=True)
        properties = exported["function"]["parameters"]["properties"]
        assert properties["after"] == {
            "type": ["string", "null"],
            "description": "A cursor, or null.",
        }
        assert properties["limit"] == {"type": ["integer", "null"]}
        assert exported["function"]["parameters"]["required"] == ["query", "after", "limit"]
        # What a model held to that schema sends reaches the server as it reads it: the null
        # it allows as null, the optional one's as null too (it takes null as a value).
        arguments = {"query": "x", "after": None, "limit": None}
        result = run(system, "find", arguments)
        assert texts(result) == ['{"after":null,"limit":null,"query":"x"}']


def test_an_output_schema_with_refs_types_the_result_of_the_code_mode_binding(
    system: ToolSystem, errlog: TextIO
) -> None:
    from dsh_tools.codebridge._sdk import SdkTool, render_sdk

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    )
    with register_mcp_server_sync(
        system, "time", params, errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        name = next(n for n in plugin.tool_names if n.endswith("convert_time"))
        definition = system.tools.get(name)
        assert definition is not None and definition.output is not None
        structured = definition.output.schema["properties"]["structured_content"]
        # "$ref": "#/$defs/TimeResult" is outside the enforced subset: its projection is
        # inlined, never narrower than what the server declared.
        assert structured["properties"]["target"]["properties"]["is_dst"] == {
            "type": "boolean",
            "title": "Is Dst",
        }
        sdk = render_sdk(
            [
                SdkTool(
                    name=name,
                    description=definition.description,
                    parameters=definition.parameters,
                    output_schema=definition.output.schema,
                )
            ]
        )
        assert "is_dst: bool" in sdk
        assert "time_difference: str" in sdk


def test_a_server_that_never_initializes_fails_naming_the_phase_and_the_limit(
    system: ToolSystem, errlog: TextIO
) -> None:
    from dsh_tools.integrations import McpConnectionError

    # A process that reads its stdin and never answers: started, but never initialized.
    silent = StdioServerParameters(
        command=sys.executable, args=["-c", "import sys, time; sys.stdin.read(); time.sleep(60)"]
    )
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "silent", silent, errlog=errlog, connect_timeout=0.5)
    assert str(caught.value) == (
        'MCP server "silent" started but did not initialize and list its tools within '
        "connect_timeout=0.5 s"
    )
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert system.tools.names() == []
