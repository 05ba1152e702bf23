"""The approval seam as a typed protocol: an object with ``request``, or a plain function or
``async def`` as a shorthand; refused at start otherwise; the approver sees the call's frozen
arguments; an answer that is no outcome is a clear error naming it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import WAIT, call, echo, text

from dsh_tools import (
    AbortSignal,
    Approval,
    ApprovalOutcome,
    Ask,
    ExecuteBatch,
    FrozenDict,
    ToolCall,
    ToolSystem,
)


def asking(system: ToolSystem) -> None:
    async def pre(exec: Any, next: Any) -> Any:
        return Ask("writes need a human")

    system.tools.register(echo())
    system.tools.on_pre_execute(pre)


class Desk:
    """An ``Approval`` object approving everything but the text ``"rm -rf"``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def request(
        self,
        *,
        agent: str,
        tool_name: str,
        call_id: str,
        signal: AbortSignal,
        arguments: Any,
        reason: str = "",
    ) -> ApprovalOutcome:
        self.seen.append({"agent": agent, "arguments": arguments, "reason": reason})
        return "rejected" if arguments.get("text") == "rm -rf" else "allowed-once"


def test_an_approval_object_sees_the_frozen_arguments() -> None:
    desk = Desk()
    checked: Approval = desk  # the protocol is satisfied structurally
    with ToolSystem.start(approval=checked, code_runtime=None) as system:
        asking(system)
        ok = system.execute(call(agent="A", arguments={"text": "hello"}))
        no = system.execute(call(agent="A", arguments={"text": "rm -rf"}, call_id="c2"))
    assert text(ok) == "hello"
    assert text(no) == 'Error: the user rejected tool "echo"'
    assert [s["arguments"] for s in desk.seen] == [{"text": "hello"}, {"text": "rm -rf"}]
    assert type(desk.seen[0]["arguments"]) is FrozenDict
    assert desk.seen[0]["reason"] == "writes need a human"


def test_a_plain_function_is_an_approver() -> None:
    def approve(**request: Any) -> ApprovalOutcome:
        return "allowed-once" if request["tool_name"] == "echo" else "rejected"

    with ToolSystem.start(approval=approve, code_runtime=None) as system:
        asking(system)
        assert text(system.execute(call(agent="A"))) == "hi"


def test_an_async_def_is_an_approver() -> None:
    async def approve(*, arguments: Any, **request: Any) -> ApprovalOutcome:
        await asyncio.sleep(0)
        return "rejected"

    with ToolSystem.start(approval=approve, code_runtime=None) as system:
        asking(system)
        assert text(system.execute(call(agent="A"))) == 'Error: the user rejected tool "echo"'


@pytest.mark.parametrize("approval", [42, "yes", object()])
def test_anything_else_is_refused_at_start(approval: Any) -> None:
    with pytest.raises(TypeError, match="approval must be an object with a request"):
        ToolSystem.start(approval=approval, code_runtime=None)


def test_a_lambda_answering_true_gets_an_error_naming_true() -> None:
    with ToolSystem.start(approval=lambda *a, **k: True, code_runtime=None) as system:
        asking(system)
        result = system.execute(call(agent="A"))
    assert text(result) == (
        "Error: unreachable variant in ApprovalOutcome: the approver returned True; "
        'expected one of "allowed-once", "rejected", "cancelled", "unavailable"'
    )


class WebApprover:
    """A web-style approver: ``request`` parks a future; a request handler on another thread
    answers it later through ``decide``."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]] = {}
        self.asked = threading.Event()
        self.lock = threading.Lock()

    async def request(self, *, call_id: str, signal: AbortSignal, **request: Any) -> str:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        with self.lock:
            self.pending[call_id] = (loop, future)
        self.asked.set()
        try:
            return await future
        finally:
            with self.lock:
                self.pending.pop(call_id, None)

    def decide(self, call_id: str, outcome: str) -> None:
        with self.lock:
            loop, future = self.pending[call_id]
        loop.call_soon_threadsafe(future.set_result, outcome)


def test_a_web_style_approver_is_answered_from_another_thread() -> None:
    web = WebApprover()
    with ToolSystem.start(approval=web, code_runtime=None) as system:
        asking(system)
        batch = ExecuteBatch(calls=[ToolCall("w1", "echo", '{"text": "deploy"}')], agent="A")
        answered: list[Any] = []
        runner = threading.Thread(target=lambda: answered.append(system.execute_batch(batch)))
        runner.start()
        assert web.asked.wait(WAIT)
        threading.Thread(target=web.decide, args=("w1", "allowed-once")).start()
        runner.join(WAIT)
    (outcome,) = answered
    assert outcome.by_call_id("w1").value == "deploy"


def test_an_approver_that_does_not_take_the_arguments_keyword_is_called_without_it() -> None:
    class Console:
        def __init__(self) -> None:
            self.reasons: list[str | None] = []

        def request(
            self, *, agent: str, tool_name: str, call_id: str, signal: Any, reason: Any = None
        ) -> str:
            self.reasons.append(reason)
            return "allowed-once"

    console = Console()
    with ToolSystem.start(approval=console, code_runtime=None) as system:
        asking(system)
        assert text(system.execute(call(agent="A"))) == "hi"
    assert console.reasons == ["writes need a human"]


def test_an_approver_missing_a_required_keyword_is_refused_at_start_naming_it() -> None:
    def approve(*, agent: str, tool_name: str) -> str:
        return "allowed-once"

    with pytest.raises(TypeError, match=r"does not take call_id, signal"):
        ToolSystem.start(approval=approve, code_runtime=None)


def test_a_blocking_plain_approver_does_not_stall_another_agents_batch() -> None:
    other_ran = threading.Event()
    waited: list[bool] = []

    def approve(**request: Any) -> str:
        # A console prompt stand-in: it blocks until the other agent's batch has run. On the
        # shared loop it would wait out its bound and the other batch would run only after.
        waited.append(other_ran.wait(WAIT))
        return "allowed-once"

    def marker(args: Any, ctx: Any) -> str:
        other_ran.set()
        return "other"

    async def ask_for_echo_only(exec: Any, next: Any) -> Any:
        return Ask("writes need a human") if exec.name == "echo" else await next()

    with ToolSystem.start(approval=approve, code_runtime=None) as system:
        system.tools.register(echo())
        system.tools.register(echo(name="other", execute=marker))
        system.tools.on_pre_execute(ask_for_echo_only)
        asked = threading.Thread(
            target=system.execute_batch,
            args=(ExecuteBatch(calls=[ToolCall("a1", "echo", '{"text": "x"}')], agent="A"),),
        )
        asked.start()
        other = system.execute_batch(ExecuteBatch(calls=[ToolCall("b1", "other", "{}")], agent="B"))
        asked.join(WAIT)
    assert text(other.results[0]) == "other"
    assert waited == [True]


def test_stop_cancels_a_pending_async_approver_and_the_call_keeps_its_one_result() -> None:
    started = threading.Event()

    async def never_answers(**request: Any) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "allowed-once"

    system = ToolSystem.start(approval=never_answers, code_runtime=None)
    asking(system)
    outcome: list[Any] = []
    waiting = threading.Thread(
        target=lambda: outcome.append(
            system.execute_batch(
                ExecuteBatch(calls=[ToolCall("a1", "echo", '{"text": "x"}')], agent="A")
            )
        )
    )
    waiting.start()
    assert started.wait(WAIT)
    system.stop()
    waiting.join(WAIT)
    [result] = outcome[0].results
    assert result.error.info.code == "ABORTED_BEFORE_DISPATCH"
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]
