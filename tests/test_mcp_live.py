"""An MCP plugin follows its server: tool-list changes, disconnects and reconnects, against the
live server (``tests/mcp_live_server.py``) as a real process over stdio and Streamable HTTP."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

import anyio
import openai
import pytest
from conftest import WAIT, Logs, spawn
from mcp import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import (
    LIVE_SERVER,
    Changes,
    HttpServer,
    failure,
    free_port,
    live_params,
    process_gone,
    registering,
    run,
    texts,
    wait_for_file,
    wait_until,
)
from provider_server import recording_server

from dsh_tools import ExecuteBatch, ExecuteCall, ToolOutput, ToolSystem, define_tool
from dsh_tools.integrations import (
    McpConnectionError,
    McpPlugin,
    ReconnectPolicy,
    openai_assistant_message,
    openai_prompt,
    openai_tool_calls,
    openai_tool_messages,
    register_mcp_server_sync,
)

QUICK = ReconnectPolicy(initial_delay=0.05, max_delay=0.2, max_attempts=None)


@pytest.fixture
def live(system: ToolSystem, tmp_path: Path, errlog: TextIO) -> Iterator[Callable[..., McpPlugin]]:
    """``live(**options)``: the live server over stdio, registered into ``system``."""
    with registering(errlog) as register:

        def make(**options: Any) -> McpPlugin:
            return register(system, "live", live_params(tmp_path), **options)

        yield make


def harness_howdy() -> Any:
    """The harness's own tool "howdy", whose name the live server's added tool takes too."""
    text = ToolOutput(schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}])
    return define_tool(
        name="howdy", description="Mine.", parameters={}, output=text, execute=lambda a, c: "mine"
    )


# --- the tool list follows the server ----------------------------------------------------------


def test_a_tool_the_server_adds_is_registered_with_one_change(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    plugin = live()
    changes = Changes(system)
    assert texts(run(system, "add_tool", {"name": "howdy"})) == ["added howdy"]
    # The snapshot is published before observers run: wait for both.
    changes.wait_for(
        lambda: changes.count >= 1 and "howdy" in changes.names(), "howdy to be registered"
    )
    assert changes.count == 1
    assert plugin.tool_names[-1] == "howdy"
    assert texts(run(system, "howdy", {"who": "you"})) == ["howdy says hi to you"]


def chat_turn(calls: list[tuple[str, str, str]], text: str | None = None) -> dict[str, Any]:
    """A Chat Completions response making ``calls`` (id, function name, arguments text)."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-test",
        "choices": [choice],
    }


def test_a_provider_name_the_model_saw_keeps_meaning_its_tool_after_the_list_changes(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    # The model calls add_tool twice: "hi.there" is offered as "hi_there", then a tool that is
    # itself called "hi_there" arrives. Rebuilt from the new set alone, the map gave the new
    # tool "hi_there" and moved "hi.there" to a hashed name, so the model's next call of
    # "hi_there", the tool it was shown, ran the other one.
    live()
    changes = Changes(system)
    path = "/v1/chat/completions"
    with recording_server() as server:
        server.answer(path, chat_turn([("c1", "add_tool", '{"name": "hi.there"}')]))
        server.answer(path, chat_turn([("c2", "add_tool", '{"name": "hi_there"}')]))
        server.answer(path, chat_turn([("c3", "hi_there", '{"who": "you"}')]))
        server.answer(path, chat_turn([], "Done."))
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="test", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Add greetings, then greet me."}]
        prompt = openai_prompt(system.assemble_prompt())
        waits = [
            lambda: "hi.there" in changes.names(),
            lambda: "hi_there" in changes.names(),
            lambda: True,
        ]
        for settled in waits:
            completion = client.chat.completions.create(
                model="gpt-test", messages=messages, tools=prompt.tools
            )
            calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
            messages.append(openai_assistant_message(completion))
            outcome = system.execute_batch(ExecuteBatch(calls=calls), timeout=WAIT)
            messages.extend(openai_tool_messages(outcome))
            changes.wait_for(settled, "the server's tool list change")
            prompt = openai_prompt(system.assemble_prompt(), earlier=prompt.names)
        client.chat.completions.create(model="gpt-test", messages=messages, tools=prompt.tools)
        offered = [
            [tool["function"]["name"] for tool in body["tools"]] for body in server.bodies(path)
        ]

    assert "hi_there" in offered[1]
    assert "hi_there" in offered[2] and len([n for n in offered[2] if "hi_there" in n]) == 2
    assert prompt.names.to_provider("hi.there") == "hi_there"
    assert messages[-1] == {
        "role": "tool",
        "tool_call_id": "c3",
        "content": "hi.there says hi to you",
    }


def test_a_tool_a_later_listing_adds_under_a_taken_name_is_warned_about_naming_the_way_out(
    system: ToolSystem, live: Callable[..., McpPlugin], logs: Logs
) -> None:
    # As at the first listing: the server, the tool and the way out, not the registry's own
    # advice about per-agent variants, which has nothing to do with a server's tools.
    mine = harness_howdy()
    system.tools.register(mine)
    plugin = live()
    assert texts(run(system, "add_tool", {"name": "howdy"})) == ["added howdy"]
    warning = logs.wait_for_event("MCP tool could not be registered")
    assert (warning["server"], warning["tool"]) == ("live", "howdy")
    assert warning["error"] == (
        'MCP server "live" lists tool "howdy", but a tool named "howdy" is registered already; '
        'give this server a tool_prefix (tool_prefix="live_", say) to keep its tools apart'
    )
    assert "howdy" not in plugin.tool_names
    assert texts(run(system, "howdy", {})) == ["mine"]


@pytest.mark.parametrize("agent", [None, "scout"])
def test_a_tool_left_out_for_a_taken_name_is_registered_once_the_name_is_free(
    system: ToolSystem, live: Callable[..., McpPlugin], logs: Logs, agent: str | None
) -> None:
    # The harness unregisters its own "howdy": the server's, listed meanwhile, takes its
    # place then, without waiting for the server to list its tools again.
    mine = harness_howdy()
    holder = system.tools if agent is None else system.agent(agent).tools
    dispose = holder.register(mine)
    plugin = live(agent=agent)
    assert texts(run(system, "add_tool", {"name": "howdy"}, agent=agent)) == ["added howdy"]
    logs.wait_for_event("MCP tool could not be registered")
    assert "howdy" not in plugin.tool_names
    dispose()
    wait_until(lambda: "howdy" in plugin.tool_names, "the server's howdy to be registered")
    assert plugin.tool_names[-1] == "howdy"  # in the server's order
    assert texts(run(system, "howdy", {"who": "you"}, agent=agent)) == ["howdy says hi to you"]
    registered = logs.wait_for_event("MCP tool registered: its name is free again")
    assert (registered["server"], registered["tool"]) == ("live", "howdy")


def test_a_tool_left_out_for_a_taken_name_waits_while_the_name_stays_taken(
    system: ToolSystem, live: Callable[..., McpPlugin], logs: Logs
) -> None:
    # Other changes of the registry do not take the name from its holder.
    mine = harness_howdy()
    system.tools.register(mine)
    plugin = live()
    assert texts(run(system, "add_tool", {"name": "howdy"})) == ["added howdy"]
    logs.wait_for_event("MCP tool could not be registered")
    assert texts(run(system, "add_tool", {"name": "hiya"})) == ["added hiya"]
    wait_until(lambda: "hiya" in plugin.tool_names, "hiya to be registered")
    assert "howdy" not in plugin.tool_names
    assert texts(run(system, "howdy", {})) == ["mine"]


def test_a_change_observer_may_wait_for_a_thread_that_reads_the_plugins_tools(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    # A harness's observer hands the change to its UI thread and waits for it, and the UI
    # thread reads what the plugin has: the observer runs while the plugin registers.
    plugin = live()
    seen: list[tuple[tuple[str, ...], Any]] = []

    def observer() -> None:
        if seen or "howdy" not in system.tools.names():
            return
        ui = threading.Thread(
            target=lambda: seen.append((plugin.tool_names, plugin.tool_info("greet")))
        )
        ui.start()
        ui.join(WAIT)
        if not seen:
            seen.append(((), "the UI thread was still waiting for the plugin"))

    system.tools.on_change(observer)
    assert texts(run(system, "add_tool", {"name": "howdy"})) == ["added howdy"]
    wait_until(lambda: bool(seen), "the observer to hear back from its UI thread")
    names, info = seen[0]
    assert "greet" in names
    assert info is not None and info.name == "greet"


@pytest.mark.parametrize("agent", [None, "scout"])
def test_a_change_observer_may_close_the_plugin_whose_tools_changed(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, logs: Logs, agent: str | None
) -> None:
    # Observers run on the thread that applies the server's change, which the connection
    # waits for: a close from there must not wait for the connection in turn, and what that
    # change was registering is undone with the rest.
    plugin = register_mcp_server_sync(
        system, "live", live_params(tmp_path), agent=agent, errlog=errlog, connect_timeout=WAIT
    )
    pid = int(wait_for_file(tmp_path / "pid"))
    closed = threading.Event()

    def refuse_intruders() -> None:
        if "intruder" in system.tools.names(agent):
            plugin.close()
            closed.set()

    system.tools.on_change(refuse_intruders)
    run(system, "add_tool", {"name": "intruder"}, agent=agent)
    assert closed.wait(WAIT)
    plugin.close()  # waits for the close under way
    assert plugin.state == "closed"
    assert system.tools.names(agent) == []
    assert plugin.tool_names == ()
    assert process_gone(pid)
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("mcp")],
        "the connection's threads to end",
    )
    assert not [e for e in logs.entries if e["event"] == "MCP session did not close in time"]


def test_a_tool_the_server_removes_is_unregistered_and_calls_are_unknown(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    plugin = live()
    changes = Changes(system)
    run(system, "remove_tool", {"name": "peek"})
    changes.wait_for(
        lambda: changes.count >= 1 and "peek" not in changes.names(), "peek to be withdrawn"
    )
    assert changes.count == 1
    assert "peek" not in plugin.tool_names
    assert failure(run(system, "peek", {"path": "."}))["error"]["info"]["code"] == "UNKNOWN_TOOL"


def _count_tools_seen(system: ToolSystem, names: set[str]) -> list[int]:
    """How many of ``names`` each later ``change`` notification finds registered."""
    seen: list[int] = []
    system.tools.on_change(lambda: seen.append(len(names & set(system.tools.names()))))
    return seen


def test_a_registration_adds_all_the_servers_tools_in_one_change(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # As a withdrawal: a harness that assembles its prompt again on each change did so once
    # per tool, time in the cube of their number (70 s for a server of 2,000 tools).
    seen: list[int] = []
    system.tools.on_change(lambda: seen.append(len(system.tools.names())))
    with registering(errlog) as register:
        plugin = register(system, "live", live_params(tmp_path))
        assert len(plugin.tool_names) > 10
        assert seen == [len(plugin.tool_names)]


@pytest.mark.parametrize("how", ["close", "server exit"])
def test_a_withdrawal_takes_all_the_servers_tools_away_in_one_change(
    how: str, system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    # One change, as one registry step: an observer (a harness that assembles its prompt again
    # on each) sees the server's tools all there or all gone, never some of them, and is told
    # once, not once per tool, which for a server of thousands of tools was thousands of
    # prompts and a registry copied once per tool.
    plugin = live()
    names = set(plugin.tool_names)
    assert len(names) > 10
    seen = _count_tools_seen(system, names)
    if how == "close":
        plugin.close()
    else:
        failure(run(system, "die", {}))
        assert plugin.wait_for_state("disconnected", timeout=WAIT)
    assert seen == [0]
    assert not names & set(system.tools.names())


PRUNING_SERVER = """
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("pruning")
for name in ("a", "b", "c"):
    server.add_tool(lambda: "x", name=name, description=f"Tool {name}.")


@server.tool(description="Remove the tools a and b.")
async def prune(ctx: Context) -> str:
    server.remove_tool("a")
    server.remove_tool("b")
    await ctx.session.send_tool_list_changed()
    return "pruned"


server.run()
"""


def test_the_tools_a_listing_removes_go_in_one_change(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    script = tmp_path / "pruning_server.py"
    script.write_text(PRUNING_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    with registering(errlog) as register:
        register(system, "pruning", params)
        changes = Changes(system)
        seen = _count_tools_seen(system, {"a", "b"})
        run(system, "prune", {})
        changes.wait_for(lambda: changes.count >= 1, "the pruning to be applied")
        assert seen == [0]
        assert changes.names() == ["c", "prune"]


def test_a_changed_tool_is_replaced_in_one_change(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    live()
    changes = Changes(system)

    def greet_parameters() -> Any:
        definition = system.tools.get("greet")
        return definition.parameters["properties"] if definition is not None else {}

    run(system, "change_greet", {})
    changes.wait_for(
        lambda: changes.count >= 1 and "punctuation" in greet_parameters(), "greet to be replaced"
    )
    assert changes.count == 1
    definition = system.tools.get("greet")
    assert definition is not None
    assert definition.description == "Say hello, with punctuation."
    assert texts(run(system, "greet", {"name": "Ada", "punctuation": "?"})) == ["hello Ada?"]


def test_a_running_call_finishes_when_its_tool_is_removed(
    system: ToolSystem, live: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    live()
    changes = Changes(system)
    pending = spawn(
        system, ExecuteCall(call_id="s", name="slow", arguments={"seconds": 0.3, "tag": "-rm"})
    )
    wait_for_file(tmp_path / "started-rm")
    run(system, "remove_tool", {"name": "slow"})
    changes.wait_for(lambda: "slow" not in changes.names(), "slow to be withdrawn")
    assert texts(pending.result(WAIT)) == ["slept 0.3"]
    later = failure(run(system, "slow", {"seconds": 0}))["error"]["info"]["code"]
    assert later == "UNKNOWN_TOOL"


def test_an_agent_scoped_plugin_follows_the_server_inside_its_scope(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    live(agent="ops")
    scope = system.agent("ops").tools
    changes = Changes(system)
    run(system, "change_greet", {}, agent="ops")
    run(system, "add_tool", {"name": "howdy"}, agent="ops")
    changes.wait_for(
        lambda: changes.count >= 2 and "howdy" in scope.names(), "the scope to follow the server"
    )
    assert system.tools.names() == []
    assert texts(run(system, "greet", {"name": "ops", "punctuation": "."}, agent="ops")) == [
        "hello ops."
    ]


def test_a_reconnect_policy_backs_off_exponentially_up_to_its_cap() -> None:
    policy = ReconnectPolicy(initial_delay=0.5, multiplier=2.0, max_delay=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="max_attempts must be None or a positive int"):
        ReconnectPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="multiplier must be a finite number >= 1"):
        ReconnectPolicy(multiplier=0.5)
    with pytest.raises(ValueError, match="initial_delay must be a finite number >= 0"):
        ReconnectPolicy(initial_delay=float("nan"))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"max_attempts": True},
            TypeError,
            "max_attempts must be None or a positive int, got bool",
        ),
        ({"max_delay": "30"}, TypeError, "max_delay must be a finite number >= 0, got str"),
        # 0 x inf is NaN: a policy starting at no delay would wait NaN seconds the next time.
        ({"multiplier": float("inf")}, ValueError, "multiplier must be a finite number >= 1"),
    ],
)
def test_a_bad_reconnect_policy_names_itself_and_says_what_was_given(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^ReconnectPolicy: {message}"):
        ReconnectPolicy(**options)


# --- disconnects -------------------------------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_stdio_server_reconnects_under_a_policy_and_its_tools_work_again(
    system: ToolSystem, live: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    plugin = live(reconnect=ReconnectPolicy(initial_delay=0.5, max_attempts=3))
    first_pid = int(wait_for_file(tmp_path / "pid"))
    (tmp_path / "pid").unlink()
    died = failure(run(system, "die", {"tag": "-1"}))["error"]
    assert died["info"] == {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"}
    # The first attempt waits half a second: registered but failing fast meanwhile.
    assert plugin.wait_for_state("reconnecting", timeout=WAIT)
    assert "greet" in system.tools.names()
    waiting = failure(run(system, "greet", {"name": "x"}))["error"]
    assert waiting["info"]["code"] == "MCP_DISCONNECTED"
    assert plugin.wait_for_state("connected", timeout=WAIT)
    assert int(wait_for_file(tmp_path / "pid")) != first_pid
    assert process_gone(first_pid)
    assert texts(run(system, "greet", {"name": "again"})) == ["hello again"]
    assert not plugin.closed


def test_a_reconnect_whose_transport_never_opens_is_given_up_within_connect_timeout(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # The first connection is the live server; every later one hangs in its opening, as a
    # gateway that takes the connection and never completes its handshake. Each attempt ends
    # at connect_timeout, so the policy's attempts run out and the tools are withdrawn.
    opened: list[int] = []

    @contextlib.asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        opened.append(len(opened))
        if len(opened) > 1:
            await anyio.sleep_forever()
        async with stdio_client(live_params(tmp_path), errlog=errlog) as streams:
            yield streams

    policy = ReconnectPolicy(initial_delay=0.05, max_attempts=1)
    with register_mcp_server_sync(
        system, "gated", transport, reconnect=policy, connect_timeout=5
    ) as plugin:
        failure(run(system, "die", {}))
        assert plugin.wait_for_state("disconnected", timeout=3 * WAIT)
        assert system.tools.names() == []
        assert len(opened) == 2


def test_closing_after_a_death_leaks_no_process_thread_or_descriptor(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    before = open_descriptors()
    plugin = register_mcp_server_sync(
        system, "leaky", live_params(tmp_path), errlog=errlog, connect_timeout=WAIT
    )
    pid = int(wait_for_file(tmp_path / "pid"))
    failure(run(system, "die", {}))
    assert plugin.wait_for_state("disconnected", timeout=WAIT)
    plugin.close()
    assert process_gone(pid)
    assert not [t for t in threading.enumerate() if t.name == "mcp[leaky]"]
    wait_until(lambda: open_descriptors() <= before, "descriptors to be released")


def helper_params(marks: Path, how: str = "group") -> StdioServerParameters:
    """The live server with a helper process of its own (see ``tests/mcp_live_server.py``)."""
    params = live_params(marks)
    return params.model_copy(update={"env": {**(params.env or {}), "MCP_FIXTURE_HELPER": how}})


@pytest.mark.parametrize("how", ["group", "setsid", "daemon", "bare-daemon"])
def test_closing_ends_the_processes_the_server_started_too(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, how: str
) -> None:
    # The server exits as soon as its input closes; the helper it started would live on, in
    # the server's process group, in a session of its own, or as a daemon whose parent exited.
    with register_mcp_server_sync(
        system, "helped", helper_params(tmp_path, how), errlog=errlog, connect_timeout=WAIT
    ):
        pid = int(wait_for_file(tmp_path / "pid"))
        helper = int(wait_for_file(tmp_path / "helper"))
        assert texts(run(system, "greet", {"name": "x"})) == ["hello x"]
    assert process_gone(pid)
    assert process_gone(helper)


@pytest.mark.parametrize("how", ["group", "setsid", "daemon", "bare-daemon"])
def test_a_server_that_dies_while_its_helper_holds_its_output_is_lost_at_once(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, how: str
) -> None:
    # The helper keeps the server's stdout open, so its end never shows there: the server's
    # own exit is what says the connection is gone. The call fails as disconnected (not after
    # a keep-alive ping, 15 s on), the tools are withdrawn and the helper is ended too.
    with register_mcp_server_sync(
        system, "helped", helper_params(tmp_path, how), errlog=errlog, connect_timeout=WAIT
    ) as plugin:
        helper = int(wait_for_file(tmp_path / "helper"))
        died = failure(run(system, "die", {}))["error"]
        assert died == {
            "message": 'MCP server "helped" disconnected during the call',
            "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
        }
        assert plugin.state == "disconnected"
        assert system.tools.names() == []
        assert process_gone(helper)


HOST = """
import sys, time
from mcp import StdioServerParameters
from dsh_tools import ToolSystem
from dsh_tools.integrations import register_mcp_server_sync

system = ToolSystem.start(code_runtime=None)
params = StdioServerParameters(
    command="/bin/sh", args=["-c", sys.argv[1]], env={"MCP_FIXTURE_MARKS": sys.argv[2]}
)
register_mcp_server_sync(system, "wrapped", params, connect_timeout=float(sys.argv[3]))
print("registered", flush=True)
time.sleep(60)
"""


def test_a_server_left_behind_by_a_host_that_died_is_ended(tmp_path: Path) -> None:
    # The host is killed without closing anything. The server's input ends, but the shell
    # that wraps it ignores SIGTERM and does not exit when its input ends: it must not live on
    # with nobody left to end it.
    script = (
        f'trap "" TERM; echo $$ > "$MCP_FIXTURE_MARKS/shell"; '
        f"{shlex.quote(sys.executable)} {shlex.quote(LIVE_SERVER)}; sleep 60"
    )
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, script, str(tmp_path), str(WAIT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline() == "registered\n"
        shell = int(wait_for_file(tmp_path / "shell"))
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
    assert process_gone(shell)  # its supervisor, reparented, ended it


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


def _parent_command_line(pid: int) -> list[str]:
    with open(f"/proc/{_parent(pid)}/cmdline", "rb") as cmdline:
        return [arg.decode() for arg in cmdline.read().split(b"\0")[:-1]]


NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")


def _may_choose_the_next_pid() -> bool:
    try:
        NEXT_PID.write_text(NEXT_PID.read_text())
    except OSError:
        return False
    return True


def _state(pid: int) -> str | None:
    """The process's state letter (``Z`` for one not reaped yet), ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return None


@pytest.mark.skipif(not _may_choose_the_next_pid(), reason="needs to choose the next process id")
def test_a_group_id_freed_by_the_servers_end_is_never_signalled_once_another_group_has_it(
    system: ToolSystem, tmp_path: Path, errlog: TextIO
) -> None:
    # The server dies while the connection's loop is held up (a coroutine callback that blocks
    # it, as a careless one does). Its supervisor, which led the server's process group, exits
    # too. A stranger started meanwhile as the leader of a group of its own is given the
    # supervisor's number, where the system lets it: once the loop runs on, ending what is left
    # of the server's group must not end the stranger's.
    strangers: list[subprocess.Popen[bytes]] = []

    async def sample(ctx: Any, params: Any) -> dict[str, Any]:
        server = int(wait_for_file(tmp_path / "pid"))
        supervisor = _parent(server)
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: _state(supervisor) in (None, "Z"), "the supervisor to exit")
        NEXT_PID.write_text(str(supervisor - 1))
        strangers.append(
            subprocess.Popen(["sleep", "60"], start_new_session=True, stderr=subprocess.DEVNULL)
        )
        return {"role": "assistant", "content": {"type": "text", "text": "-"}, "model": "m"}

    with register_mcp_server_sync(
        system,
        "reused",
        live_params(tmp_path),
        errlog=errlog,
        connect_timeout=WAIT,
        sampling=sample,
    ) as plugin:
        failure(run(system, "ask_model", {"question": "?"}))
        assert plugin.wait_for_state("disconnected", timeout=WAIT)
    (stranger,) = strangers
    try:
        assert stranger.poll() is None, "the stranger was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_kernel_without_pidfds_still_serves_and_stops_a_stdio_server(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open is refused here")

    monkeypatch.setattr(os, "pidfd_open", refused)
    with register_mcp_server_sync(
        system, "old", live_params(tmp_path), errlog=errlog, connect_timeout=WAIT
    ):
        pid = int(wait_for_file(tmp_path / "pid"))
        assert texts(run(system, "greet", {"name": "x"})) == ["hello x"]
    assert process_gone(pid)


def test_ps_shows_the_servers_command_after_its_supervisor_not_the_supervisors_source(
    system: ToolSystem, live: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    live()
    above = _parent_command_line(int(wait_for_file(tmp_path / "pid")))
    assert above[:3] == [sys.executable, "-I", "-S"]
    assert above[-2:] == [sys.executable, LIVE_SERVER]
    assert not any("\n" in arg for arg in above), above


UNSUPERVISED = (
    "MCP stdio servers run without their supervisor: sys.executable is not a Python "
    "interpreter that runs it"
)
NOT_PYTHON = """#!/bin/sh
echo ran >> "{marks}/not-python"
exit 2
"""


@pytest.mark.parametrize(
    ("program_name", "frozen", "runs"),
    [
        ("uwsgi", False, False),  # an application that embeds Python: never started
        ("app", True, False),  # a frozen application: never started either
        ("python3", False, True),  # named as an interpreter, it is tried once, and said so
    ],
)
def test_a_sys_executable_that_is_no_python_runs_the_server_without_its_supervisor(
    system: ToolSystem,
    tmp_path: Path,
    errlog: TextIO,
    logs: Logs,
    monkeypatch: pytest.MonkeyPatch,
    program_name: str,
    frozen: bool,
    runs: bool,
) -> None:
    # Where sys.executable names a program that cannot run the supervisor, the server is
    # registered all the same, without one, and that program is started at most once.
    params = live_params(tmp_path)
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / program_name
    program.write_text(NOT_PYTHON.format(marks=tmp_path))
    program.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(program))
    if frozen:
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    with registering(errlog) as register:
        for name in ("first", "second"):
            (tmp_path / "pid").unlink(missing_ok=True)
            register(system, name, params, tool_prefix=f"{name}_")
            assert texts(run(system, f"{name}_greet", {"name": "x"})) == ["hello x"]
            assert _parent(int(wait_for_file(tmp_path / "pid"))) == os.getpid()
    ran = (tmp_path / "not-python").read_text() if (tmp_path / "not-python").exists() else ""
    assert ran == ("ran\n" if runs else "")
    warned = [text for text in logs.warnings if "supervisor" in text]
    assert warned == ([UNSUPERVISED] if runs else [])


def test_a_result_of_tens_of_megabytes_arrives_whole_with_the_connection_kept(
    system: ToolSystem, live: Callable[..., McpPlugin]
) -> None:
    # The keep-alive pings throughout, and its answers wait behind the result on the server's
    # output: a client whose reading of one line grows with its square (15 s for 40 MiB) takes
    # longer than the ping's deadline, and drops a connection that was answering all along.
    plugin = live(ping_interval=0.1)
    text = texts(run(system, "bulk", {"mebibytes": 40}))
    assert [len(part) for part in text] == [40 << 20]
    assert plugin.state == "connected"
    assert texts(run(system, "greet", {"name": "x"})) == ["hello x"]


@pytest.mark.parametrize(
    ("limit", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("1MiB", TypeError)],
)
def test_a_message_bound_that_is_no_positive_whole_number_is_refused_before_the_server_starts(
    system: ToolSystem, tmp_path: Path, limit: object, error: type[Exception]
) -> None:
    # A bound that is no int at all is a wrong type; an int that is not positive a bad value.
    with pytest.raises(error, match=r"^max_message_bytes must be a positive whole number"):
        register_mcp_server_sync(
            system,
            "live",
            live_params(tmp_path),
            max_message_bytes=limit,  # type: ignore[arg-type]
        )
    assert not (tmp_path / "pid").exists()


def test_a_transport_factory_sets_its_own_message_bound(system: ToolSystem) -> None:
    with pytest.raises(ValueError, match=r"a transport factory sets its own bound"):
        register_mcp_server_sync(
            system,
            "live",
            lambda: streamable_http_client("http://127.0.0.1:9/mcp"),
            max_message_bytes=1 << 20,
        )


# --- Streamable HTTP ---------------------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path: Path, errlog: TextIO) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path, errlog)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_an_http_server_follows_list_changes_and_reconnects_after_a_restart(
    system: ToolSystem, http_server: HttpServer, errlog: TextIO
) -> None:
    changes = Changes(system)
    with register_mcp_server_sync(
        system, "web", http_server.url, reconnect=QUICK, ping_interval=0.1, connect_timeout=WAIT
    ) as plugin:
        assert plugin.state == "connected"
        assert texts(run(system, "greet", {"name": "web"})) == ["hello web"]
        run(system, "add_tool", {"name": "salut"})
        changes.wait_for(lambda: "salut" in changes.names(), "salut to be registered")

        http_server.kill()
        assert plugin.wait_for_state("reconnecting", timeout=WAIT)
        gone = failure(run(system, "greet", {"name": "x"}))["error"]
        assert gone == {
            "message": 'MCP server "web" is disconnected (reconnecting)',
            "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
        }
        assert "greet" in system.tools.names()

        http_server.start()  # a fresh process: "salut" is gone from it
        assert plugin.wait_for_state("connected", timeout=WAIT)
        changes.wait_for(lambda: "salut" not in changes.names(), "salut to be withdrawn")
        assert texts(run(system, "greet", {"name": "back"})) == ["hello back"]
    assert plugin.state == "closed"
    assert system.tools.names() == []


@pytest.mark.parametrize("given_as", ["url", "factory"])
@pytest.mark.parametrize("refusal", ["http", "http-400"], ids=["404", "400"])
def test_a_session_the_http_server_no_longer_knows_is_a_lost_connection(
    system: ToolSystem, tmp_path: Path, errlog: TextIO, refusal: str, given_as: str
) -> None:
    # A server restarted between two calls answers the old session id with 404 (or, some
    # servers, 400 and a ping too): the session is gone (the client must start a new one), so
    # the call fails as disconnected and the plugin reconnects, rather than every later call
    # failing on the dead session. A factory (the documented way to lift the SDK's bound on
    # one event) hides the HTTP status: the refused ping alone tells.
    http_server = HttpServer(tmp_path, errlog, refusal)
    http_server.start()
    url = http_server.url
    params: Any = url if given_as == "url" else lambda: streamable_http_client(url)
    try:
        with register_mcp_server_sync(
            system, "web", params, reconnect=QUICK, connect_timeout=WAIT
        ) as plugin:
            assert texts(run(system, "greet", {"name": "web"})) == ["hello web"]
            http_server.kill()
            http_server.start()
            gone = failure(run(system, "greet", {"name": "x"}))["error"]
            assert gone["info"]["code"] == "MCP_DISCONNECTED"
            assert plugin.wait_for_state("connected", timeout=WAIT)
            assert texts(run(system, "greet", {"name": "again"})) == ["hello again"]
    finally:
        http_server.kill()


def test_server_requests_and_progress_ride_the_http_response_streams(
    system: ToolSystem, http_server: HttpServer
) -> None:
    def sample(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "over http"},
            "model": "scripted-model",
            "stopReason": "endTurn",
        }

    def elicit(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"sure": False}}

    with register_mcp_server_sync(
        system, "web", http_server.url, sampling=sample, elicitation=elicit, connect_timeout=WAIT
    ):
        assert texts(run(system, "ask_model", {"question": "?"})) == ["scripted-model: over http"]
        assert texts(run(system, "confirm", {"action": "go"})) == ["accept False"]
        assert texts(run(system, "count", {"steps": 2})) == ["counted"]
    progress = [e.data["progress"] for e in system.session.events if e.type == "tool/progress"]
    assert progress == [1.0, 2.0]


def test_an_http_call_in_flight_fails_as_disconnected_when_the_server_dies(
    system: ToolSystem, http_server: HttpServer, tmp_path: Path
) -> None:
    with register_mcp_server_sync(
        system, "web", http_server.url, reconnect=False, connect_timeout=WAIT
    ) as plugin:
        pending = spawn(
            system,
            ExecuteCall(call_id="h", name="slow", arguments={"seconds": 30, "tag": "-http"}),
        )
        wait_for_file(tmp_path / "started-http")
        http_server.kill()
        assert failure(pending.result(WAIT))["error"] == {
            "message": 'MCP server "web" disconnected during the call',
            "info": {"name": "McpConnectionError", "code": "MCP_DISCONNECTED"},
        }
        assert plugin.wait_for_state("disconnected", timeout=WAIT)
        assert system.tools.names() == []


def test_closing_a_url_whose_server_answers_nothing_gives_up_its_goodbye_and_closes(
    system: ToolSystem, http_server: HttpServer, logs: Logs
) -> None:
    # A server that holds every request unanswered (stopped here; a wedged process, or a proxy
    # that keeps the connection, does the same): the session's goodbye, its DELETE, waited for
    # the 300 s the SDK gives a response, so the close abandoned the session at close_timeout.
    plugin = register_mcp_server_sync(
        system, "web", http_server.url, connect_timeout=WAIT, close_timeout=WAIT
    )
    process = http_server.process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    plugin.close()
    assert "MCP session did not close in time" not in logs.warnings
    assert plugin.state == "closed"


def test_a_url_whose_server_stops_answering_is_found_out_by_the_keep_alive(
    system: ToolSystem, http_server: HttpServer
) -> None:
    # The unanswered ping ends the session, whose goodbye (its DELETE) the stopped server
    # never answers either: the session's end waited for it, 300 s, "connected" all along.
    plugin = register_mcp_server_sync(
        system, "web", http_server.url, connect_timeout=1, ping_interval=0.1
    )
    try:
        process = http_server.process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        assert plugin.wait_for_state("reconnecting", timeout=WAIT)
    finally:
        plugin.close()


def test_http_reconnects_by_default_and_stdio_does_not(
    system: ToolSystem, http_server: HttpServer, live: Callable[..., McpPlugin]
) -> None:
    stdio = live()
    with register_mcp_server_sync(
        system, "web", http_server.url, tool_prefix="web_", ping_interval=0.1
    ) as web:
        http_server.kill()
        assert web.wait_for_state("reconnecting", timeout=WAIT)
        failure(run(system, "die", {}))
        assert stdio.wait_for_state("disconnected", timeout=WAIT)
        assert web.state == "reconnecting"
        assert not web.closed
        assert stdio.closed


# --- a URL that is not a Streamable HTTP endpoint ----------------------------------------------


def test_a_url_takes_results_up_to_the_message_bound_it_is_given(
    system: ToolSystem, http_server: HttpServer
) -> None:
    # The SDK's bound for one server-sent event is 1 MiB: a 2 MiB result fails under it.
    with register_mcp_server_sync(
        system, "small", http_server.url, connect_timeout=WAIT, tool_prefix="small_"
    ):
        refused = failure(run(system, "small_bulk", {"mebibytes": 2}))["error"]
        assert refused["info"]["code"] == "MCP_REQUEST_FAILED"
        assert "exceeded the 1048576 byte limit" in refused["message"]
    with register_mcp_server_sync(
        system, "large", http_server.url, connect_timeout=WAIT, max_message_bytes=4 << 20
    ):
        assert [len(part) for part in texts(run(system, "bulk", {"mebibytes": 2}))] == [2 << 20]


def test_a_url_without_an_mcp_endpoint_fails_naming_the_url_and_the_http_status(
    system: ToolSystem, http_server: HttpServer
) -> None:
    wrong = http_server.url.removesuffix("/mcp") + "/elsewhere"
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "web", wrong, connect_timeout=WAIT)
    assert str(caught.value) == (
        f'MCP server "web" could not be connected at {wrong}: MCPError: Not Found '
        "(HTTP 404 Not Found)"
    )
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert system.tools.names() == []
    assert [t.name for t in threading.enumerate() if t.name == "mcp[web]"] == []


class _RestApi(BaseHTTPRequestHandler):
    """A JSON API that is no MCP server: every POST is answered 200 with its own error object."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"error": "no such route"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return


def test_a_url_that_answers_json_that_is_no_mcp_message_fails_in_one_line(
    system: ToolSystem,
) -> None:
    # The SDK puts the whole validation error in its message, some thirty lines with a link
    # each; the failure says in one line what came back and what was wrong with it.
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RestApi)
    serving = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
        with pytest.raises(McpConnectionError) as caught:
            register_mcp_server_sync(system, "web", url, connect_timeout=WAIT)
    finally:
        httpd.shutdown()
        httpd.server_close()
        serving.join()
    assert str(caught.value) == (
        f'MCP server "web" could not be connected at {url}: MCPError: Failed to parse JSON '
        "response: 11 validation errors for union[JSONRPCRequest,JSONRPCNotification,"
        "JSONRPCResponse,JSONRPCError], the first at JSONRPCRequest.jsonrpc: Field required "
        "(input {'error': 'no such route'})"
    )


class _FailingCalls(BaseHTTPRequestHandler):
    """An MCP endpoint that initializes, lists one tool (``echo``) and answers pings, but
    answers every ``tools/call`` with HTTP 500 (a crashed handler behind a web framework)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.respond(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))

    def respond(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if "id" not in message:  # a notification
            self._answer(202, b"")
        elif method == "tools/call":
            self._answer(500, b"Internal Server Error")
        else:
            result: dict[str, Any] = {}
            if method == "initialize":
                result = {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "failing", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            self._answer(200, json.dumps(reply).encode())

    def do_DELETE(self) -> None:
        self._answer(200, b"")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "s1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return


def test_a_call_a_url_refuses_with_an_http_error_names_the_status(system: ToolSystem) -> None:
    # The SDK says only "Server returned an error response": whether the server crashed (500),
    # is overloaded (503) or forbids the call (403) is the first thing its author needs.
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FailingCalls)
    serving = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
        with register_mcp_server_sync(system, "web", url, connect_timeout=WAIT) as plugin:
            result = failure(run(system, "echo", {}))
            assert plugin.state == "connected"  # the server answers pings: the session goes on
    finally:
        httpd.shutdown()
        httpd.server_close()
        serving.join()
    assert result["error"] == {
        "message": (
            "MCP request failed: Server returned an error response (HTTP 500 Internal Server Error)"
        ),
        "info": {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"},
    }


class _RefusedNotifications(_FailingCalls):
    """An endpoint that refuses every notification with HTTP 503 (which the SDK drops without
    a word) and answers ``tools/call`` with a JSON-RPC error of its own."""

    def respond(self, message: dict[str, Any]) -> None:
        if "id" not in message:
            self._answer(503, b"Service Unavailable")
        elif message.get("method") == "tools/call":
            error = {"code": -32000, "message": "echo is out of order"}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
            self._answer(200, json.dumps(reply).encode())
        else:
            super().respond(message)


def test_a_servers_own_error_is_not_given_the_status_another_request_was_refused_with(
    system: ToolSystem,
) -> None:
    # The 503 of a notification was kept, and told as the status of the next failed call,
    # which the server had answered with an error of its own.
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RefusedNotifications)
    serving = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
        with register_mcp_server_sync(system, "web", url, connect_timeout=WAIT):
            result = failure(run(system, "echo", {}))
    finally:
        httpd.shutdown()
        httpd.server_close()
        serving.join()
    assert result["error"]["message"] == "MCP request failed: echo is out of order"


def test_a_url_nothing_listens_on_fails_naming_the_url(system: ToolSystem) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpConnectionError) as caught:
        register_mcp_server_sync(system, "web", url, connect_timeout=WAIT)
    assert str(caught.value) == (
        f'MCP server "web" could not be connected at {url}: ConnectError: All connection '
        "attempts failed"
    )
    assert [t.name for t in threading.enumerate() if t.name == "mcp[web]"] == []


def test_a_url_that_never_answers_fails_naming_the_url_and_the_limit(system: ToolSystem) -> None:
    with socket.socket() as listener:  # accepts connections, never answers a request
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        with pytest.raises(McpConnectionError) as caught:
            register_mcp_server_sync(system, "web", url, connect_timeout=0.5)
    assert str(caught.value) == (
        f'MCP server "web" at {url} did not initialize and list its tools within '
        "connect_timeout=0.5 s"
    )
    assert [t.name for t in threading.enumerate() if t.name == "mcp[web]"] == []
