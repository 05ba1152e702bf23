"""The approval seam for ``Ask`` decisions."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import WAIT, arun, await_event, call, changed_after, echo, text

from dsh_tools import AbortController, Ask, ExecuteBatch, ToolCall, ToolSystem


class Answerer:
    """A synchronous approval service answering ``outcome`` and recording every request."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.requests: list[dict[str, Any]] = []

    def request(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        return self.outcome


class PendingAnswerer:
    """An async approval service that answers only once ``answer(outcome)`` is called."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.released = asyncio.Event()
        self.outcome: Any = None
        self.requests: list[dict[str, Any]] = []

    async def request(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        self.asked.set()
        await self.released.wait()
        return self.outcome

    def answer(self, outcome: str) -> None:
        self.outcome = outcome
        self.released.set()


def asking(system: ToolSystem, reason: str | None = None) -> None:
    async def pre(exec: Any, next: Any) -> Any:
        return Ask(reason) if reason is not None else Ask()

    system.tools.on_pre_execute(pre)


class Stages:
    def __init__(self, system: ToolSystem) -> None:
        self.body: list[str] = []
        self.post: list[Any] = []

        def body(args: Any, ctx: Any) -> str:
            self.body.append(ctx.call_id)
            return args.get("text") or ""

        async def post(exec: Any, result: Any, next: Any) -> Any:
            self.post.append(result)
            return await next()

        system.tools.register(echo(execute=body))
        system.tools.on_post_execute(post)


def test_rp71_without_a_service_ask_with_a_reason_denies_with_it(system: ToolSystem) -> None:
    system.tools.register(echo())
    asking(system, "needs approval")
    result = system.execute(call(agent="A"))
    assert text(result) == "Error: needs approval"
    assert result.to_dict()["error"] == {"message": "needs approval"}


def test_rp71_without_a_service_a_bare_ask_is_not_yet_supported(system: ToolSystem) -> None:
    system.tools.register(echo())
    asking(system)
    assert text(system.execute(call(agent="A"))) == (
        'Error: tool "echo" requires approval (not yet supported)'
    )


def test_rp71_an_agentless_ask_never_reaches_the_service(make_system: Any) -> None:
    answerer = Answerer("allowed-once")
    system = make_system(approval=answerer)
    system.tools.register(echo())
    asking(system, "please")
    assert text(system.execute(call())) == (
        'Error: tool "echo" requires approval, but the call has no agent to route it through'
    )
    assert answerer.requests == []


def test_rp72_an_allowed_once_answer_runs_the_call(make_system: Any) -> None:
    answerer = Answerer("allowed-once")
    system = make_system(approval=answerer)
    system.tools.register(echo())
    asking(system, "hook wants a human")
    signal = AbortController().signal
    result = system.execute(call(agent="A", signal=signal))
    assert text(result) == "hi"
    assert not result.is_error
    (request,) = answerer.requests
    assert request == {
        "agent": "A",
        "tool_name": "echo",
        "call_id": "c1",
        "arguments": {"text": "hi"},
        "reason": "hook wants a human",
        "signal": signal,
    }
    assert request["signal"] is signal


def test_an_ask_whose_reason_is_not_a_str_names_ask_and_never_reaches_the_service(
    make_system: Any,
) -> None:
    answerer = Answerer("allowed-once")
    system = make_system(approval=answerer)
    system.tools.register(echo())

    async def pre(exec: Any, next: Any) -> Any:
        return changed_after(Ask("why"), reason=5)

    system.tools.on_pre_execute(pre)
    result = system.execute(call(agent="A"))
    assert text(result) == "Error: Ask.reason must be a str or None, got int"
    assert answerer.requests == []


def test_rp72_a_bare_ask_sends_no_reason(make_system: Any) -> None:
    answerer = Answerer("allowed-once")
    system = make_system(approval=answerer)
    system.tools.register(echo())
    asking(system)
    system.execute(call(agent="A"))
    assert "reason" not in answerer.requests[0]


def test_rp72_the_service_can_be_attached_at_run_time(system: ToolSystem) -> None:
    system.tools.register(echo())
    asking(system, "later")
    assert text(system.execute(call(agent="A"))) == "Error: later"
    system.approval = Answerer("allowed-once")
    assert text(system.execute(call(agent="A", call_id="c2"))) == "hi"


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        ("rejected", 'the user rejected tool "echo"'),
        ("cancelled", 'approval for tool "echo" was cancelled'),
        ("unavailable", 'tool "echo" requires approval, but no approval channel is available'),
    ],
)
def test_rp73_non_grants_are_denials(make_system: Any, outcome: str, message: str) -> None:
    system = make_system(approval=Answerer(outcome))
    stages = Stages(system)
    asking(system, "check")
    result = system.execute(call(agent="A"))
    assert result.to_dict() == {
        "content": [{"type": "text", "text": "Error: " + message}],
        "is_error": True,
        "error": {"message": message},
    }
    assert stages.body == []
    assert stages.post == [result]


def test_rp74_an_unknown_outcome_is_unreachable_and_skips_post(make_system: Any) -> None:
    system = make_system(approval=Answerer("yolo"))
    stages = Stages(system)
    asking(system, "check")
    result = system.execute(call(agent="A"))
    assert result.is_error
    assert "unreachable" in text(result)
    assert text(result) == (
        'Error: unreachable variant in ApprovalOutcome: the approver returned "yolo"; '
        'expected one of "allowed-once", "rejected", "cancelled", "unavailable"'
    )
    assert stages.post == []
    assert stages.body == []


def test_rp74_a_raising_service_is_a_final_error(make_system: Any) -> None:
    class Broken:
        def request(self, **kwargs: Any) -> str:
            raise RuntimeError("approval asked outside an open turn")

    system = make_system(approval=Broken())
    stages = Stages(system)
    asking(system, "check")
    result = system.execute(call(agent="A"))
    assert text(result) == "Error: approval asked outside an open turn"
    assert stages.post == []


def run_pending(system: ToolSystem, answerer: PendingAnswerer, outcome: str) -> Any:
    controller = AbortController()

    async def scenario() -> Any:
        task = asyncio.create_task(system.execute_async(call(agent="A", signal=controller.signal)))
        await await_event(answerer.asked)
        controller.abort()
        answerer.answer(outcome)
        return await task

    return arun(scenario())


def test_rp75_an_abort_during_approval_wins_over_allowed_once(make_system: Any) -> None:
    answerer = PendingAnswerer()
    system = make_system(approval=answerer)
    stages = Stages(system)
    asking(system, "check")
    result = run_pending(system, answerer, "allowed-once")
    assert result.to_dict()["error"] == {
        "message": "tool call aborted before dispatch",
        "info": {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"},
    }
    assert stages.body == []
    assert stages.post == [result]


def test_rp75_a_guard_denial_still_beats_the_abort(make_system: Any) -> None:
    answerer = PendingAnswerer()
    system = make_system(approval=answerer)
    Stages(system)
    asking(system, "check")
    system.tools.guard(lambda exec: "guard says no")
    result = run_pending(system, answerer, "allowed-once")
    assert text(result) == "Error: guard says no"


def test_rp76_an_abort_with_a_cancelled_answer_is_aborted_before_dispatch(
    make_system: Any,
) -> None:
    answerer = PendingAnswerer()
    system = make_system(approval=answerer)
    stages = Stages(system)
    asking(system, "check")
    result = run_pending(system, answerer, "cancelled")
    assert text(result) == "Error: tool call aborted before dispatch"
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert stages.body == []
    assert stages.post == [result]


def test_rp76_an_abort_with_a_rejected_answer_stays_a_rejection(make_system: Any) -> None:
    answerer = PendingAnswerer()
    system = make_system(approval=answerer)
    Stages(system)
    asking(system, "check")
    result = run_pending(system, answerer, "rejected")
    assert text(result) == 'Error: the user rejected tool "echo"'


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt], ids=lambda e: e.__name__)
def test_an_approver_raising_systemexit_fails_its_call_and_leaves_the_system_loop_running(
    make_system: Any, raised: type[BaseException]
) -> None:
    # The approver runs in a task of its own on the system loop: what it raises is its call's
    # failure, never a stop of that loop (every later call through the loop would then hang).
    async def broken(**kwargs: Any) -> Any:
        raise raised("approver bug")

    system = make_system(approval=broken)
    system.tools.register(echo())
    asking(system)
    for call_id in ("c1", "c2"):
        batch = ExecuteBatch(calls=[ToolCall(call_id, "echo", "{}")], agent="A")
        (result,) = system.execute_batch(batch, timeout=10).results
        assert text(result) == "Error: approver bug"
    assert [event.type for event in system.session.events] == ["tool/call", "tool/result"] * 2


def test_a_plain_approver_raising_stop_iteration_on_a_worker_thread_gives_a_result(
    make_system: Any,
) -> None:
    class Exhausted:
        def request(self, **kwargs: Any) -> Any:
            return next(iter([]))

    system = make_system(approval=Exhausted())
    system.tools.register(echo())
    asking(system)
    # Under execute_async a plain approver runs on a worker thread, whose future could not
    # carry StopIteration and never settled.
    result = asyncio.run(system.execute_async(call(agent="A")))
    assert result.is_error
    assert "the approver raised StopIteration" in text(result)


def test_stop_settles_a_blocking_execute_whose_plain_approver_never_answers(
    make_system: Any,
) -> None:
    asked, answer = threading.Event(), threading.Event()
    threads: list[str] = []

    class Console:  # a prompt nobody attends
        def request(self, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            asked.set()
            answer.wait(WAIT)
            return "allowed-once"

    system = make_system(approval=Console())
    system.tools.register(echo())
    asking(system)
    with ThreadPoolExecutor(1, thread_name_prefix="harness") as caller:
        pending = caller.submit(system.execute, call(agent="A"))
        assert asked.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    answer.set()
    assert threads and not threads[0].startswith("harness")
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


def test_a_plain_approver_of_a_blocking_execute_learns_from_its_signal_that_stop_came(
    make_system: Any,
) -> None:
    # The call had no signal of its own, so the approver got the never-aborted one: a console
    # prompt watching it went on asking after stop() had settled the call, holding its thread.
    asked = threading.Event()
    withdrawn: list[bool] = []

    class Console:
        def request(self, *, signal: Any, **kwargs: Any) -> Any:
            asked.set()
            withdrawn.append(signal.wait(WAIT))
            return "cancelled"

    system = make_system(approval=Console())
    system.tools.register(echo())
    asking(system)
    with ThreadPoolExecutor(1) as caller:
        pending = caller.submit(system.execute, call(agent="A"))
        assert asked.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    assert withdrawn == [True]
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"


@pytest.mark.parametrize("stopped", [True, False], ids=["stop", "caller-timeout"])
def test_an_async_approver_whose_cleanup_fails_when_cancelled_ends_before_dispatch(
    make_system: Any, stopped: bool
) -> None:
    asked = threading.Event()

    async def dialog(**kwargs: Any) -> str:
        asked.set()
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            raise ConnectionError("the approval dialog is gone") from None
        return "allowed-once"

    system = make_system(approval=dialog)
    system.tools.register(echo())
    asking(system)

    async def caller() -> Any:
        if stopped:
            threading.Thread(target=lambda: asked.wait(WAIT) and system.stop()).start()
            return await system.execute_async(call(agent="A"))
        try:
            async with asyncio.timeout(0.2):
                await system.execute_async(call(agent="A"))
        except TimeoutError:
            return "TimeoutError"

    outcome = arun(asyncio.wait_for(caller(), WAIT))
    (result,) = [e.data for e in system.session.events if e.type == "tool/result"]
    assert result["error"]["code"] == "ABORTED_BEFORE_DISPATCH"  # not the dialog's error
    if not stopped:
        assert outcome == "TimeoutError"


def test_a_call_cancelled_as_its_async_approver_is_asked_leaves_no_coroutine_never_awaited(
    make_system: Any,
) -> None:
    # The harness gives up on the call (its task cancelled) just as the question is put: the
    # approver's coroutine exists but never ran. It is closed, not left for Python to warn
    # "coroutine ... was never awaited" about wherever it is collected.
    asked: list[str] = []

    async def dialog(**kwargs: Any) -> str:
        asked.append(kwargs["call_id"])
        return "allowed-once"

    system = make_system(approval=dialog)
    system.tools.register(echo())

    async def ask_as_the_caller_gives_up(exec: Any, next: Any) -> Any:
        # Under execute_async the hook runs in the caller's task: its cancellation lands on
        # the next loop pass, when the pipeline first waits for the approver.
        caller = asyncio.current_task()
        assert caller is not None
        asyncio.get_running_loop().call_soon(caller.cancel)
        return Ask("check")

    system.tools.on_pre_execute(ask_as_the_caller_gives_up)

    async def caller() -> str:
        try:
            await system.execute_async(call(agent="A"))
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = arun(asyncio.wait_for(caller(), WAIT))
        gc.collect()
    assert outcome == "cancelled"
    assert asked == []  # no one was asked
    (result,) = [e.data for e in system.session.events if e.type == "tool/result"]
    assert result["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


requesting_user: contextvars.ContextVar[str] = contextvars.ContextVar("user", default="-")


def test_a_plain_approver_runs_in_its_calls_context(make_system: Any) -> None:
    # A plain approver runs on a worker thread (it may block on a console prompt): there it
    # still sees the context of the call it is asked about (who asks, set by the harness), as
    # a function run by asyncio.to_thread does and as an async approver does.
    seen: list[str] = []

    def request(**kwargs: Any) -> str:
        seen.append(requesting_user.get())
        return "allowed-once"

    system = make_system(approval=request)
    system.tools.register(echo())
    asking(system, "check")
    token = requesting_user.set("ada")
    try:
        assert text(system.execute(call(agent="a"))) == "hi"
        arun(system.execute_async(call(agent="a", call_id="c2")))
    finally:
        requesting_user.reset(token)
    assert seen == ["ada", "ada"]
