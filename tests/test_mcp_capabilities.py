"""Client capabilities of an MCP plugin: sampling, elicitation, roots, logging and progress
through the pipeline's seams, and the server's resources and prompts, against the live server
(``tests/mcp_live_server.py``) as a real process."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, Logs
from mcp import MCPDeprecationWarning, StdioServerParameters
from mcp_support import (
    RecordingApproval,
    failure,
    registering,
    run,
    texts,
)

from dsh_tools import AbortSignal, ExecuteBatch, ToolCall, ToolSystem
from dsh_tools.integrations import (
    McpPlugin,
    McpProgress,
    McpRequestContext,
    McpToolError,
)

# --- sampling ----------------------------------------------------------------------------------


def test_sampling_requests_reach_the_harness_callback_with_the_calling_context(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    seen: list[tuple[McpRequestContext, dict[str, Any]]] = []

    def answer(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        seen.append((ctx, params))
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "forty-two"},
            "model": "scripted-model",
            "stopReason": "endTurn",
        }

    connect(system, sampling=answer)
    result = run(system, "ask_model", {"question": "meaning of life?"})
    assert texts(result) == ["scripted-model: forty-two"]
    [(ctx, params)] = seen
    assert ctx.server == "live"
    assert ctx.call is not None and ctx.call.call_id == "call-ask_model"
    assert ctx.call.tool == "ask_model"
    assert params["systemPrompt"] == "Answer briefly."
    assert params["maxTokens"] == 50
    assert params["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "meaning of life?"}}
    ]


def test_close_does_not_wait_for_a_plain_sampling_callback_still_running(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A plain callback cannot be interrupted: close() leaves it to its thread (it returns
    # when the callback does) and ends the session, the server and the client thread now.
    entered, release = threading.Event(), threading.Event()

    def slow_model(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        entered.set()
        release.wait(WAIT)
        return {"role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m"}

    plugin = connect(system, sampling=slow_model)
    try:
        with ThreadPoolExecutor(2) as pool:
            call = pool.submit(run, system, "ask_model", {"question": "?"})
            assert entered.wait(WAIT)
            closing = pool.submit(plugin.close)
            closing.result(WAIT)
            assert not release.is_set()  # closed while the callback still waits
            assert failure(call.result(WAIT))["error"]["info"]["code"] == "MCP_DISCONNECTED"
            assert plugin.state == "closed"
            assert [t for t in threading.enumerate() if t.name.startswith("mcp[")] == []
    finally:
        release.set()


@pytest.mark.parametrize("closing", ["aclose", "close"])
def test_a_coroutine_callback_may_close_its_own_plugin(
    system: ToolSystem, connect: Callable[..., McpPlugin], logs: Logs, closing: str
) -> None:
    # A coroutine callback runs on the connection's loop, inside the request the server is
    # waiting on: its close cannot wait for the connection to end, which waits for it.
    plugins: list[McpPlugin] = []

    async def give_up(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        if closing == "aclose":
            await plugins[0].aclose()
        else:
            plugins[0].close()
        return {"role": "assistant", "content": {"type": "text", "text": "bye"}, "model": "m"}

    plugins.append(connect(system, sampling=give_up))
    error = failure(run(system, "ask_model", {"question": "?"}))["error"]
    assert error["info"]["code"] == "MCP_DISCONNECTED"
    plugins[0].close()  # waits for the close under way
    assert plugins[0].state == "closed"
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("mcp[")])
    assert not [e for e in logs.entries if e["event"] == "MCP session did not close in time"]


def test_a_failing_sampling_callback_fails_the_servers_request(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    async def refuse(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        await asyncio.sleep(0)
        raise RuntimeError("no model configured")

    connect(system, sampling=refuse)
    error = failure(run(system, "ask_model", {"question": "?"}))["error"]
    # The server's tool lets the sampling error through as its own request error.
    assert error == {
        "message": "MCP request failed: sampling failed: no model configured",
        "info": {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"},
    }


def test_a_malformed_sampling_result_fails_the_servers_request_in_one_line(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # The error goes back to the server, and through its tool to the model: one line naming
    # the wrong field, not pydantic's several lines with a link each.
    def no_model(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": "x"}}

    connect(system, sampling=no_model)
    error = failure(run(system, "ask_model", {"question": "?"}))["error"]
    assert error == {
        "message": "MCP request failed: sampling failed: malformed CreateMessageResult at "
        "model: Field required",
        "info": {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"},
    }


def test_without_a_sampling_callback_the_server_is_told_it_is_unsupported(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    connect(system)
    error = failure(run(system, "ask_model", {"question": "?"}))["error"]
    assert error == {
        "message": "MCP request failed: Sampling not supported",
        "info": {"name": "McpToolError", "code": "MCP_REQUEST_FAILED"},
    }


# --- elicitation -------------------------------------------------------------------------------


def test_elicitation_goes_to_a_callback(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    asked: list[dict[str, Any]] = []

    def answer(ctx: McpRequestContext, params: dict[str, Any]) -> Mapping[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"sure": False}}

    connect(system, elicitation=answer)
    assert texts(run(system, "confirm", {"action": "launch"})) == ["accept False"]
    assert asked[0]["message"] == "Really launch?"
    assert asked[0]["requestedSchema"]["properties"]["sure"]["default"] is True


def test_elicitation_routed_to_the_approval_seam_accepts_with_the_defaults(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    approval = RecordingApproval("allowed-once")
    system = make_system(approval=approval)
    connect(system, elicitation="approval")
    result = run(system, "confirm", {"action": "deploy"}, agent="ops")
    assert texts(result) == ["accept True"]
    [request] = approval.requests
    assert request["agent"] == "ops"
    assert request["tool_name"] == "confirm"
    assert request["call_id"] == "call-confirm"
    assert request["reason"] == "Really deploy?"


class ApprovalWithArguments:
    """An approver that requires every keyword the pipeline gives, ``arguments`` included."""

    def __init__(self) -> None:
        self.arguments: list[Any] = []

    def request(
        self,
        *,
        agent: str,
        tool_name: str,
        call_id: str,
        signal: AbortSignal,
        arguments: Any,
        reason: str | None = None,
    ) -> str:
        self.arguments.append(arguments)
        return "allowed-once"


def approve_without_reasons(
    *, agent: str, tool_name: str, call_id: str, signal: AbortSignal
) -> str:
    return "allowed-once"


def test_elicitation_calls_the_approver_with_the_keywords_it_takes(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    # As the pipeline does: ``arguments`` and ``reason`` only for an approver that takes them,
    # and every approver that takes the required keywords can answer.
    approval = ApprovalWithArguments()
    system = make_system(approval=approval)
    connect(system, elicitation="approval")
    assert texts(run(system, "confirm", {"action": "deploy"}, agent="ops")) == ["accept True"]
    [arguments] = approval.arguments
    assert arguments["message"] == "Really deploy?"
    assert arguments["requestedSchema"]["properties"]["sure"]["default"] is True

    plain = make_system(approval=approve_without_reasons)
    connect(plain, elicitation="approval")
    assert texts(run(plain, "confirm", {"action": "deploy"}, agent="ops")) == ["accept True"]


def test_an_elicitation_approval_is_abandoned_when_the_connection_ends(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    asked = threading.Event()
    abandoned: list[bool] = []

    def wait_for_a_human(*, signal: AbortSignal, **request: Any) -> str:
        asked.set()
        abandoned.append(signal.wait(WAIT))
        return "cancelled"

    system = make_system(approval=wait_for_a_human)
    plugin = connect(system, elicitation="approval")
    with ThreadPoolExecutor(1) as pool:
        calling = pool.submit(run, system, "confirm", {"action": "deploy"}, agent="ops")
        assert asked.wait(WAIT)
        plugin.close()
        assert failure(calling.result(WAIT))["error"]["info"]["code"] == "MCP_DISCONNECTED"
    wait_until(lambda: bool(abandoned))
    assert abandoned == [True]


def test_closing_waits_for_no_approver_that_ignores_its_signal(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    # A human who has not answered yet, behind an approver that does not watch the signal:
    # close() waits for it no more than for any other callback, and the connection's own
    # thread ends; the approver's thread ends when it returns.
    asked, answer = threading.Event(), threading.Event()

    def wait_for_a_human(**request: Any) -> str:
        asked.set()
        answer.wait(WAIT * 3)
        return "allowed-once"

    system = make_system(approval=wait_for_a_human)
    plugin = connect(system, elicitation="approval", close_timeout=WAIT * 3)
    try:
        with ThreadPoolExecutor(2) as pool:
            calling = pool.submit(run, system, "confirm", {"action": "deploy"}, agent="ops")
            assert asked.wait(WAIT)
            closing = pool.submit(plugin.close)
            closing.result(WAIT)
            assert failure(calling.result(WAIT))["error"]["info"]["code"] == "MCP_DISCONNECTED"
            assert not answer.is_set()
            assert not [t for t in threading.enumerate() if t.name == "mcp[live]"]
    finally:
        answer.set()
    # The approver's thread ends once it returns.
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("mcp")])


def test_a_rejected_approval_declines_the_elicitation(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    system = make_system(approval=RecordingApproval("rejected"))
    connect(system, elicitation="approval")
    assert texts(run(system, "confirm", {"action": "deploy"}, agent="ops")) == ["decline -"]


def test_an_approval_cannot_fill_in_required_fields_so_it_is_not_asked(
    make_system: Callable[..., ToolSystem], connect: Callable[..., McpPlugin]
) -> None:
    approval = RecordingApproval("allowed-once")
    system = make_system(approval=approval)
    connect(system, elicitation="approval")
    assert texts(run(system, "ask_name", {}, agent="ops")) == ["decline -"]
    assert approval.requests == []


# --- roots and logging -------------------------------------------------------------------------


def test_roots_are_listed_as_file_uris(
    system: ToolSystem, connect: Callable[..., McpPlugin], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    connect(system, roots=[tmp_path, str(other)])
    listed = texts(run(system, "show_roots", {}))[0].splitlines()
    assert listed == [tmp_path.as_uri(), other.as_uri()]


def test_server_log_messages_go_to_structlog_with_the_server_name(
    system: ToolSystem, connect: Callable[..., McpPlugin], logs: Logs
) -> None:
    connect(system)
    assert texts(run(system, "chatty", {})) == ["logged"]
    lines = [e for e in logs.entries if e["event"] == "MCP server log"]
    assert [(e["log_level"], e["server"], e["server_logger"], e["data"]) for e in lines] == [
        ("info", "live", "chatty", "warming up"),
        ("warning", "live", "chatty", {"disk": "low"}),
    ]


def test_log_level_sets_the_servers_level_without_a_deprecation_warning(
    system: ToolSystem, errlog: Any
) -> None:
    # The SDK marks its helper for logging/setLevel deprecated for a later protocol version;
    # the servers of this one still take the request, and a harness that asks for a level as
    # documented must not get the SDK's warning for it.
    hostile = StdioServerParameters(
        command=sys.executable, args=[str(Path(__file__).with_name("mcp_hostile_server.py"))]
    )
    with warnings.catch_warnings(record=True) as caught, registering(errlog) as register:
        warnings.simplefilter("always")
        register(system, "hostile", hostile, log_level="warning")
        assert texts(run(system, "logging_level", {})) == ["warning"]
    assert [str(w.message) for w in caught if w.category is MCPDeprecationWarning] == []


# --- progress ----------------------------------------------------------------------------------


def test_progress_becomes_session_events_with_the_call_id_and_reaches_the_callback(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # The server reports progress only for a request that carries a progressToken.
    observed: list[McpProgress] = []
    connect(system, on_progress=observed.append)
    outcome = system.execute_batch(
        ExecuteBatch(calls=[ToolCall("b1", "count", '{"steps": 3}')]), timeout=WAIT
    )
    assert texts(outcome.results[0]) == ["counted"]
    events = [e.data for e in system.session.events if e.type == "tool/progress"]
    assert events == [
        {
            "call_id": "b1",
            "tool": "count",
            "server": "live",
            "progress": float(step),
            "total": 3.0,
            "message": f"step {step}",
        }
        for step in (1, 2, 3)
    ]
    wait_until(lambda: len(observed) == 3)  # delivered off the connection, in order
    assert [(p.call_id, p.progress, p.total) for p in observed] == [
        ("b1", 1.0, 3.0),
        ("b1", 2.0, 3.0),
        ("b1", 3.0, 3.0),
    ]


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def test_a_slow_progress_callback_holds_neither_the_call_nor_the_connection(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # A plain callback that blocks (a user interface that is slow to update) gets its
    # notifications in order once it can; meanwhile the call and the server's other
    # requests go on.
    release = threading.Event()
    observed: list[tuple[float, str]] = []

    def slow(progress: McpProgress) -> None:
        release.wait(WAIT)
        observed.append((progress.progress, threading.current_thread().name))

    connect(system, on_progress=slow)
    try:
        assert texts(run(system, "count", {"steps": 3})) == ["counted"]
        assert texts(run(system, "greet", {"name": "ada"})) == ["hello ada"]
        assert observed == []  # still held by the first notification
    finally:
        release.set()
    wait_until(lambda: len(observed) == 3)
    assert [progress for progress, _ in observed] == [1.0, 2.0, 3.0]
    assert all(thread.startswith("mcp-callback[live]_") for _, thread in observed), observed


def test_an_async_progress_callback_that_waits_holds_nothing_either(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    release = threading.Event()
    observed: list[float] = []

    async def waits(progress: McpProgress) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)
        observed.append(progress.progress)

    connect(system, on_progress=waits)
    try:
        assert texts(run(system, "count", {"steps": 2})) == ["counted"]
        assert observed == []
    finally:
        release.set()
    wait_until(lambda: len(observed) == 2)
    assert observed == [1.0, 2.0]


def call_events(system: ToolSystem, call_id: str) -> list[tuple[str, Any]]:
    """The session events of one call, in order: its progress, then its result."""
    return [
        (event.type, event.data)
        for event in system.session.events
        if event.type in ("tool/progress", "tool/result") and event.data["call_id"] == call_id
    ]


def test_a_flood_of_progress_keeps_at_most_1000_events_for_the_call_the_last_one_the_latest(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # 3,000 notifications as fast as the server can send them: the first 999 are events as
    # they come, the rest are coalesced into one, recorded as the call ends, that holds the
    # latest notification and says how many were left out.
    connect(system)
    assert texts(run(system, "flood", {"times": 3000})) == ["flooded"]
    events = call_events(system, "call-flood")
    progress = [data for kind, data in events if kind == "tool/progress"]
    assert len(progress) == 1000
    assert [data["progress"] for data in progress[:999]] == [float(n) for n in range(1, 1000)]
    assert all("dropped" not in data for data in progress[:999])
    assert progress[-1] == {
        "call_id": "call-flood",
        "tool": "flood",
        "server": "live",
        "progress": 3000.0,
        "total": 3000.0,
        "message": "step 3000",
        "dropped": 2000,
    }
    assert [kind for kind, _ in events[-2:]] == ["tool/progress", "tool/result"]


def test_a_call_a_wrapper_retries_bounds_the_progress_of_each_try_on_its_own(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # Each try is a tools/call request of its own: its progress is bounded and coalesced as
    # the request ends, so the call records up to 1,000 events a try, not 1,000 in all.
    connect(system)

    async def twice(exec: Any, next: Any) -> Any:
        await next()
        return await next()

    system.tools.on_execute(twice)
    assert texts(run(system, "flood", {"times": 1500})) == ["flooded"]
    events = call_events(system, "call-flood")
    progress = [data for kind, data in events if kind == "tool/progress"]
    assert len(progress) == 2000
    assert [data.get("dropped") for data in (progress[998], progress[999], progress[1999])] == [
        None,
        500,
        500,
    ]
    assert [data["progress"] for data in (progress[999], progress[1000])] == [1500.0, 1.0]
    assert [kind for kind, _ in events].count("tool/result") == 1


def test_a_flood_of_progress_without_end_times_out_as_before_with_its_events_bounded(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    observed: list[McpProgress] = []
    connect(system, timeouts={"flood": 1500}, on_progress=observed.append)
    outcome = failure(run(system, "flood", {}))
    assert outcome["error"]["info"]["code"] == "TOOL_TIMEOUT"
    events = call_events(system, "call-flood")
    assert [kind for kind, _ in events[-2:]] == ["tool/progress", "tool/result"]
    progress = [data for kind, data in events if kind == "tool/progress"]
    assert len(progress) == 1000
    last = progress[-1]
    # The coalesced event counts every notification between the 999th event and itself.
    assert last["dropped"] == last["progress"] - 1000 > 0
    # Nothing more is recorded for the call once it is over, while the callback still gets
    # what the connection brought (at most 1,000 waiting for it, as before).
    assert texts(run(system, "greet", {"name": "ada"})) == ["hello ada"]
    assert len(call_events(system, "call-flood")) == len(events)
    wait_until(lambda: len(observed) >= 1000)


# --- resources and prompts ---------------------------------------------------------------------


def test_resources_and_prompts_are_reachable_from_the_plugin(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    assert [(r["uri"], r["mimeType"]) for r in plugin.list_resources()] == [
        ("notes://today", "text/plain"),
        ("notes://logo", "image/png"),
    ]
    assert plugin.read_resource("notes://today") == [
        {"uri": "notes://today", "mimeType": "text/plain", "text": "buy milk"}
    ]
    [logo] = plugin.read_resource("notes://logo")
    assert logo["mimeType"] == "image/png" and logo["blob"].startswith("iVBOR")
    assert [p["name"] for p in plugin.list_prompts()] == ["review"]
    prompt = plugin.get_prompt("review", {"code": "x = 1"})
    assert prompt["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Please review:\nx = 1"}}
    ]
    # Prompt arguments are text: anything else is refused naming the argument, not by the
    # SDK's multi-line validation error.
    with pytest.raises(
        TypeError, match=r"prompt 'review': argument 'code' must be text .* got int"
    ):
        plugin.get_prompt("review", {"code": 12})  # type: ignore[dict-item]


def test_a_resource_link_in_a_result_is_readable_through_the_plugin(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    [block] = run(system, "link", {}).content
    assert block == {
        "type": "resource_link",
        "uri": "notes://today",
        "name": "today",
        "mimeType": "text/plain",
    }

    async def read() -> list[dict[str, Any]]:
        return await asyncio.wait_for(plugin.aread_resource(block["uri"]), WAIT)

    assert asyncio.run(read())[0]["text"] == "buy milk"


def test_a_resource_list_change_reaches_the_callback_which_may_re_list(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    seen: list[tuple[str, list[str]]] = []
    done = threading.Event()
    plugin: McpPlugin | None = None

    def changed(kind: str) -> None:
        assert plugin is not None
        seen.append((kind, [r["uri"] for r in plugin.list_resources()]))
        done.set()

    plugin = connect(system, on_list_changed=changed)
    assert texts(run(system, "add_note", {"name": "later", "text": "call mum"})) == ["noted later"]
    assert done.wait(WAIT)
    assert seen == [("resources", ["notes://today", "notes://logo", "notes://later"])]
    assert plugin.read_resource("notes://later")[0]["text"] == "call mum"


def test_a_coroutine_callback_lists_with_the_awaitable_forms_and_is_told_so(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    # On the connection's own loop a blocking list would stall the connection until its
    # timeout and then blame the server: it is refused at once, and the a-forms work there.
    seen: list[Any] = []
    done = threading.Event()
    plugins: list[McpPlugin] = []

    async def changed(kind: str) -> None:
        try:
            plugins[0].list_resources(timeout=WAIT)
        except RuntimeError as exc:
            seen.append(str(exc))
        seen.append([r["uri"] for r in await plugins[0].alist_resources()])
        seen.append([t["name"] for t in await plugins[0].alist_resource_templates()])
        done.set()

    plugins.append(connect(system, on_list_changed=changed))
    assert texts(run(system, "add_note", {"name": "later", "text": "call mum"})) == ["noted later"]
    assert done.wait(WAIT)
    refusal, uris, templates = seen
    assert "from a coroutine callback would stop the loop that answers it" in refusal
    assert uris == ["notes://today", "notes://logo", "notes://later"]
    assert templates == []
    assert texts(run(system, "greet", {"name": "after"})) == ["hello after"]


def test_reading_an_unknown_resource_is_a_request_failure(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    with pytest.raises(McpToolError) as caught:
        plugin.read_resource("notes://nowhere")
    assert caught.value.code == "MCP_REQUEST_FAILED"
    assert "notes://nowhere" in str(caught.value)


def test_a_uri_that_is_no_text_is_refused_by_the_blocking_and_the_async_form(
    system: ToolSystem, connect: Callable[..., McpPlugin]
) -> None:
    plugin = connect(system)
    bad: Any = 12
    with pytest.raises(TypeError, match=r"^uri must be a non-empty str$"):
        plugin.read_resource(bad)
    with pytest.raises(TypeError, match=r"^uri must be a non-empty str$"):
        asyncio.run(plugin.aread_resource(bad))


def test_progress_queued_when_the_connection_closes_is_dropped_quietly(logs: Logs) -> None:
    # The connection's calls are over: its queued notifications reach no callback, and none
    # fails on the callback threads that closing shut down.
    from dsh_tools.integrations.mcp._callbacks import CallbackRunner

    delivered: list[float] = []

    async def scenario() -> None:
        runner = CallbackRunner("gone", asyncio.get_running_loop())
        for step in (1.0, 2.0, 3.0):
            runner.progress(delivered.append, McpProgress("gone", "c1", "t", None, step, 3.0, None))
        runner.close()
        runner.progress(delivered.append, McpProgress("gone", "c1", "t", None, 4.0, 3.0, None))
        for _ in range(5):
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert delivered == []
    assert logs.warnings == []


def test_a_notification_after_a_call_is_over_is_delivered_but_recorded_no_more() -> None:
    # The live floods cannot show it: past the 999th event a late notification is only held,
    # so a call that ends early (a timeout while the server still reports) is taken here.
    from dsh_tools.integrations.mcp._progress import CallProgress, ProgressSink

    recorded: list[tuple[float, int | None]] = []
    delivered: list[float] = []
    call = CallProgress(
        ProgressSink(
            lambda progress, dropped: recorded.append((progress.progress, dropped)),
            lambda progress: delivered.append(progress.progress),
        )
    )
    for step in (1.0, 2.0):
        call.add(McpProgress("live", "c1", "t", None, step, None, None))
    call.end()
    call.add(McpProgress("live", "c1", "t", None, 3.0, None, None))
    call.end()
    assert recorded == [(1.0, None), (2.0, None)]
    assert delivered == [1.0, 2.0, 3.0]


def test_a_call_of_exactly_1000_notifications_records_the_last_as_it_ends_dropping_none() -> None:
    from dsh_tools.integrations.mcp._progress import CallProgress, ProgressSink

    recorded: list[tuple[float, int | None]] = []
    call = CallProgress(
        ProgressSink(
            lambda progress, dropped: recorded.append((progress.progress, dropped)),
            lambda progress: None,
        )
    )
    for step in range(1, 1001):
        call.add(McpProgress("live", "c1", "t", None, float(step), None, None))
    assert len(recorded) == 999
    call.end()
    call.end()
    assert recorded[-2:] == [(999.0, None), (1000.0, 0)]
