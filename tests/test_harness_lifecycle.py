"""``stop()`` keeps the one-result promise, and a process that never calls it still exits."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT, Logs, block, call, echo, fixture
from pool_support import batch

import dsh_tools._system as system_module
import dsh_tools.codebridge._template_host as template_host
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolsConfig, ToolSystem
from dsh_tools.codebridge import CodeRunRequest, CodeSandbox, SubprocessCodeRuntime

A_TOOL = """
from dsh_tools import ToolOutput as _ToolOutput, define_tool as _define_tool


def a_tool(name, body):
    \"\"\"A tool of no parameters whose string value renders as nothing.\"\"\"
    return _define_tool(
        name=name,
        description=name,
        parameters={},
        output=_ToolOutput(schema={"type": "string"}, render=lambda a, v: []),
        execute=body,
    )
"""
"""What every script may use (``run_script`` runs it first)."""


def run_script(source: str, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``source`` (dedented, after ``A_TOOL``) in a fresh interpreter with ``args``; its
    output as text."""
    return subprocess.run(
        [sys.executable, "-c", A_TOOL + textwrap.dedent(source), *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )


def test_stop_mid_batch_gives_every_started_call_its_result() -> None:
    system = ToolSystem.start(code_runtime=None)
    sleeping, polling = threading.Event(), threading.Event()
    saw_abort: list[Any] = []

    async def sleeper(args: Any, ctx: Any) -> Any:
        sleeping.set()
        await asyncio.sleep(3600)  # interrupted: it never looks at its signal
        return [block("slept")]

    def poller(args: Any, ctx: Any) -> Any:
        polling.set()
        saw_abort.append(ctx.signal.wait(WAIT))
        return [block("noticed")]

    safe = {"is_concurrency_safe": lambda args: True}
    system.tools.register(fixture("sleeper", sleeper, **safe))
    system.tools.register(fixture("poller", poller, **safe))
    calls = [ToolCall("s1", "sleeper", "{}"), ToolCall("p1", "poller", "{}")]
    calls += [ToolCall("later", "poller", "{}")]
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute_batch, ExecuteBatch(calls=calls, max_parallel=2), WAIT)
        assert sleeping.wait(WAIT) and polling.wait(WAIT)
        system.stop()
        outcome = pending.result(WAIT)
    codes = [r.to_dict()["error"]["info"]["code"] for r in outcome.results]
    assert codes == ["ABORTED", "ABORTED", "ABORTED_BEFORE_DISPATCH"]
    assert {r.abort_reason for r in outcome.results} == {  # type: ignore[union-attr]
        "the tool system is stopping"
    }
    assert saw_abort == [True]  # the plain body saw its signal abort
    results = [e.data["call_id"] for e in system.session.events if e.type == "tool/result"]
    assert results == ["s1", "p1", "later"]
    with pytest.raises(RuntimeError, match="the tool system is stopped"):
        system.execute_batch(ExecuteBatch(calls=[ToolCall("x", "poller", "{}")]))
    with pytest.raises(RuntimeError, match="the tool system is stopped"):
        system.execute(call())


def test_a_ref_ask_in_flight_when_stop_is_called_receives_its_result() -> None:
    system = ToolSystem.start(code_runtime=None)
    entered = threading.Event()

    async def slow(args: Any, ctx: Any) -> Any:
        entered.set()
        await asyncio.sleep(3600)
        return [block("slow")]

    system.tools.register(fixture("slow", slow))
    future = system.ref.ask(ExecuteCall(call_id="c1", name="slow", arguments={}), block=False)
    assert entered.wait(WAIT)
    system.stop()
    result = future.get(timeout=WAIT)
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED"
    assert result.abort_reason == "the tool system is stopping"
    assert [e.type for e in system.session.events] == ["tool/call", "tool/result"]


def test_a_call_that_arrives_while_stop_waits_for_the_calls_in_flight_never_starts() -> None:
    system = ToolSystem.start(code_runtime=None)
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def holding(args: Any, ctx: Any) -> Any:  # a plain body slow to see its signal
        entered.set()
        release.wait(WAIT)
        return [block("held")]

    async def delete(args: Any, ctx: Any) -> Any:
        ran.append("delete")
        return [block("deleted")]

    system.tools.register(fixture("holding", holding))
    system.tools.register(fixture("delete", delete))
    held = system.ref.ask(ExecuteCall(call_id="c0", name="holding", arguments={}), block=False)
    assert entered.wait(WAIT)
    stopper = threading.Thread(target=system.stop)
    stopper.start()
    deadline = time.monotonic() + WAIT
    while system.running and time.monotonic() < deadline:
        time.sleep(0.001)
    late = system.ref.ask(ExecuteCall(call_id="c1", name="delete", arguments={}), timeout=WAIT)
    release.set()
    stopper.join(WAIT)
    assert late.to_dict()["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert late.abort_reason == "the tool system is stopping"
    assert ran == []
    assert held.get(timeout=WAIT).to_dict()["error"]["info"]["code"] == "ABORTED"
    assert sorted((e.type, e.data["call_id"]) for e in system.session.events) == [
        ("tool/call", "c0"),
        ("tool/call", "c1"),
        ("tool/result", "c0"),
        ("tool/result", "c1"),
    ]


def test_a_call_that_reaches_the_loop_as_stop_ends_it_still_gets_its_one_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An ask the front actor took after the calls in flight had settled (here from a closer,
    # which runs then) reached the system loop while stop() went on to end it: the call was
    # logged, its hook still waiting when the loop ended, and it never got a result (its
    # waiter a RuntimeError, its task reported destroyed unfinished).
    system = ToolSystem.start(code_runtime=None)
    late: list[Any] = []

    async def settles_soon(exec: Any, next: Any) -> Any:
        await asyncio.sleep(0.2)  # still waiting when the rest of stop() is done
        return await next()

    system.tools.register(fixture("quick", lambda args, ctx: [block("quick")]))
    system.tools.on_pre_execute(settles_soon)
    system.on_stop(
        lambda: late.append(
            system.ref.ask(ExecuteCall(call_id="c1", name="quick", arguments={}), block=False)
        )
    )
    system.stop()
    result = late[0].get(timeout=WAIT)
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert result.abort_reason == "the tool system is stopping"
    assert sorted((e.type, e.data["call_id"]) for e in system.session.events) == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
    ]
    late.clear()
    del result
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text


def test_stop_aborts_a_blocking_execute_running_on_another_thread() -> None:
    system = ToolSystem.start(code_runtime=None)
    entered = threading.Event()

    async def slow(args: Any, ctx: Any) -> Any:
        entered.set()
        await asyncio.sleep(3600)
        return [block("slow")]

    system.tools.register(fixture("slow", slow))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute, ExecuteCall(call_id="c1", name="slow", arguments={}))
        assert entered.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED"
    assert result.abort_reason == "the tool system is stopping"


def test_stop_aborts_a_call_awaited_on_another_event_loop() -> None:
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(echo())
    entered = threading.Event()

    async def slow(args: Any, ctx: Any) -> Any:
        entered.set()
        await asyncio.sleep(3600)
        return [block("slow")]

    system.tools.register(fixture("slow", slow))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            asyncio.run,
            system.execute_async(ExecuteCall(call_id="c1", name="slow", arguments={})),
        )
        assert entered.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    assert result.to_dict()["error"]["info"]["code"] == "ABORTED"


HELLO_TOOL = """
system.tools.register(
    define_tool(
        name="hello",
        description="Say hello.",
        parameters={},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: "hello",
    )
)
"""
"""A script's lines registering a ``hello`` tool on ``system``."""

SCRIPT = (
    """
import asyncio
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolOutput, ToolSystem, define_tool

system = ToolSystem.start()  # mode "native": no Code Mode template
"""
    + HELLO_TOOL
    + """def hello(call_id):
    return ExecuteCall(call_id=call_id, name="hello", arguments={})

print(system.execute(hello("c1")).value)
print(system.execute_batch(ExecuteBatch(calls=[ToolCall("c2", "hello", "{}")])).results[0].value)
print(system.ref.ask(hello("c3")).value)
print(asyncio.run(system.execute_async(hello("c4"))).value)
ENDING
"""
)


@pytest.mark.parametrize(
    ("ending", "exit_code"),
    [("# no stop()", 0), ("raise SystemExit(system.running and 7)", 7), ("1 / 0", 1)],
    ids=["forgets stop", "exits with a code", "dies of an exception"],
)
def test_a_script_that_never_calls_stop_exits(ending: str, exit_code: int) -> None:
    done = run_script(SCRIPT.replace("ENDING", ending))
    assert done.returncode == exit_code, done.stderr
    assert done.stdout.split() == ["hello"] * 4


BLOCKED_LOOP_AT_EXIT = (
    """
import threading, time
import dsh_tools._system as system_module
system_module.STOP_GRACE_S = system_module.ABANDONED_SETTLE_S = 0.2
from dsh_tools import ExecuteCall, ToolOutput, ToolSystem, define_tool

system = ToolSystem.start(code_runtime=None)
"""
    + HELLO_TOOL
    + """
entered = threading.Event()

async def stuck(exec, next):
    entered.set()
    time.sleep(3600)  # blocks the running loop of its thread

system.tools.on_pre_execute(stuck)
call = ExecuteCall(call_id="c1", name="hello", arguments={})
threading.Thread(target=system.execute, args=(call,), daemon=True).start()
assert entered.wait(10)
print("exiting")
"""
)


def test_a_script_that_exits_while_a_hook_blocks_its_threads_loop_exits_cleanly() -> None:
    done = run_script(BLOCKED_LOOP_AT_EXIT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["exiting"]
    assert "Traceback" not in done.stderr, done.stderr


CTRL_C = """
import asyncio, os, signal, threading
from dsh_tools import ExecuteBatch, ToolCall, ToolSystem

started = threading.Event()


async def wait_long(args, ctx):
    started.set()
    await asyncio.sleep(3600)
    return "done"


system = ToolSystem.start()
system.tools.register(a_tool("wait_long", wait_long))
threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
try:
    system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "wait_long", "{}")]))
except KeyboardInterrupt:
    print("interrupted")
for _ in range(1000):  # the batch settles on its own, before any stop()
    results = [e.data for e in system.session.events if e.type == "tool/result"]
    if results:
        break
    threading.Event().wait(0.01)
print([r["error"]["code"] for r in results])
system.stop()
"""


def test_ctrl_c_during_a_blocking_batch_aborts_it() -> None:
    done = run_script(CTRL_C)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted", "['ABORTED']"]


CTRL_C_INSIDE_A_LOCK = """
import asyncio, concurrent.futures, os, signal, sys, threading
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolSystem

# A Ctrl-C that lands right after the main thread has taken a future's lock, before the
# ``with`` block that releases it has begun: what a Ctrl-C at a random moment sometimes does.
armed = [False]
enter = threading.Condition.__enter__
make_future = concurrent.futures.Future.__init__


def future_with_a_marked_lock(self):
    make_future(self)
    self._condition.of_a_future = True


def enter_then_interrupted(self):
    held = enter(self)
    if armed[0] and getattr(self, "of_a_future", False):
        if threading.current_thread() is threading.main_thread():
            armed[0] = False
            os.kill(os.getpid(), signal.SIGINT)
    return held


concurrent.futures.Future.__init__ = future_with_a_marked_lock
threading.Condition.__enter__ = enter_then_interrupted


async def wait_long(args, ctx):
    await asyncio.sleep(3600)


async def quick(args, ctx):
    return "quick"


system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("wait_long", wait_long))
system.tools.register(a_tool("quick", quick))
armed[0] = True
try:
    if sys.argv[1] == "batch":
        system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "wait_long", "{}")]))
    else:
        system.execute(ExecuteCall(call_id="c1", name="wait_long", arguments={}), timeout=60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
later = system.execute_batch(ExecuteBatch(calls=[ToolCall("c2", "quick", "{}")]), timeout=10)
print(later.results[0].value, [e.data["error"]["code"] for e in system.session.events
                               if e.type == "tool/result" and e.data["call_id"] == "c1"])
system.stop()
"""


@pytest.mark.parametrize("entry", ["batch", "execute-with-timeout"])
def test_a_ctrl_c_landing_inside_a_lock_of_the_wait_leaves_the_system_working(entry: str) -> None:
    # Interrupted that way, the wait once left the lock of the future the system loop settles
    # held for ever: that call's result was never recorded and every later call hung.
    done = run_script(CTRL_C_INSIDE_A_LOCK, entry)
    assert done.returncode == 0, done.stderr
    interrupted, later = done.stdout.splitlines()
    assert interrupted == "interrupted"
    assert later in ("quick ['ABORTED']", "quick ['ABORTED_BEFORE_DISPATCH']")


CTRL_C_AS_CLOSE_MARKS_ITSELF = """
import os, signal, sys, threading, types
from dsh_tools import ToolSystem
import dsh_tools._handles as handles

# A Ctrl-C that lands as close() marks the scope closing, before its disposal has begun.
armed = [False]


def get_ident():
    if armed[0]:
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)
    return threading.get_ident()


handles.threading = types.SimpleNamespace(**{**vars(threading), "get_ident": get_ident})
system = ToolSystem.start(code_runtime=None)
scope = system.agent("A")
scope.tools.register(a_tool("mine", lambda args, ctx: "x"))
armed[0] = True
try:
    scope.close()
except KeyboardInterrupt:
    print("interrupted")
scope.close()
seen = []
asking = threading.Thread(target=lambda: seen.append(system.agent("A").tools.names()), daemon=True)
asking.start()
asking.join(10)
print(seen or "agent() waits")
system.stop()
"""


def test_a_ctrl_c_as_a_scope_close_begins_leaves_it_to_the_next_close() -> None:
    # Landing there, it left the scope closed but neither disposed nor cut short: the next
    # close() returned at once, and agent("A") waited for a disposal that never came.
    done = run_script(CTRL_C_AS_CLOSE_MARKS_ITSELF)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "[[]]"]


CTRL_C_AS_STOP_MARKS_ITSELF = """
import os, signal, threading, types
from dsh_tools import ToolSystem
import dsh_tools._system as system_module

# A Ctrl-C that lands as stop() marks the system stopping, before the stop has begun.
armed = [False]


def current_thread():
    if armed[0]:
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)
    return threading.current_thread()


system_module.threading = types.SimpleNamespace(
    **{**vars(threading), "current_thread": current_thread}
)
before = set(threading.enumerate())
system = ToolSystem.start(code_runtime=None)
armed[0] = True
try:
    system.stop()
except KeyboardInterrupt:
    print("interrupted")
system.stop()
left = sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive())
print(system.running, left)
"""


def test_a_ctrl_c_as_stop_begins_leaves_the_stop_to_the_next_stop() -> None:
    # Landing there, it left the system stopped to its callers but not cut short: the next
    # stop() waited the whole grace for the first to end, then returned with the loop and the
    # actors still running.
    done = run_script(CTRL_C_AS_STOP_MARKS_ITSELF)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "False []"]


CTRL_C_AS_A_CLOSER_IS_TAKEN = """
import os, signal
from dsh_tools import ToolSystem


class PopThenInterrupted(dict):
    # Closers whose next take is interrupted by a Ctrl-C right after it detached one.
    armed = True

    def pop(self, *args):
        thing = super().pop(*args)
        if PopThenInterrupted.armed:
            PopThenInterrupted.armed = False
            os.kill(os.getpid(), signal.SIGINT)
        return thing


system = ToolSystem.start(code_runtime=None)
ran = []
scope = system.agent("A")
scope.on_close(lambda: ran.append("server stopped"))
scope._on_close._things = PopThenInterrupted(scope._on_close._things)
try:
    scope.close()
except KeyboardInterrupt:
    print("interrupted", ran)
scope.close()
system.on_stop(lambda: ran.append("connection closed"))
PopThenInterrupted.armed = True
system._on_stop._things = PopThenInterrupted(system._on_stop._things)
try:
    system.stop()
except KeyboardInterrupt:
    print("interrupted", ran)
system.stop()
print(ran)
"""


def test_a_ctrl_c_as_a_closer_is_taken_leaves_it_to_the_next_close_or_stop() -> None:
    # Taken off the list but not yet called, the closer was lost: the close() or stop() that
    # finished the interrupted one never ran it (an MCP server left running, say).
    done = run_script(CTRL_C_AS_A_CLOSER_IS_TAKEN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "interrupted []",
        "interrupted ['server stopped']",
        "['server stopped', 'connection closed']",
    ]


CTRL_C_BEFORE_A_REUSED_ID_IS_LOGGED = """
import os, signal, threading
from dsh_tools import ExecuteCall, ToolSystem
from dsh_tools.pipeline import SessionLog

append = SessionLog.append


def interrupted_before_b_is_logged(self, type, data, agent=None):
    if type == "tool/call" and agent == "B":
        os.kill(os.getpid(), signal.SIGINT)
    return append(self, type, data, agent)


release = threading.Event()
system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("held", lambda args, ctx: release.wait(10) and "done"))
a = threading.Thread(
    target=system.execute, args=(ExecuteCall(call_id="c1", name="held", arguments={}, agent="A"),)
)
a.start()
while not system.session.events:
    threading.Event().wait(0.01)
SessionLog.append = interrupted_before_b_is_logged
try:
    system.execute(ExecuteCall(call_id="c1", name="held", arguments={}, agent="B"))
except KeyboardInterrupt:
    print("interrupted")
SessionLog.append = append
release.set()
a.join(10)
print([(e.type, e.agent) for e in system.session.events])
system.stop()
"""


def test_a_call_interrupted_before_it_is_logged_gets_no_result_beside_one_of_the_same_id() -> None:
    done = run_script(CTRL_C_BEFORE_A_REUSED_ID_IS_LOGGED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "interrupted",
        "[('tool/call', 'A'), ('tool/result', 'A')]",
    ]


CTRL_C_IN_A_BODY_USING_THE_PACKAGE = """
import asyncio, os, signal, threading, time
from dsh_tools import ExecuteCall, ToolSystem, snapshot_json

finished = []


def busy(args, ctx):  # a plain body that spends its time in the package's own helpers
    end = time.monotonic() + 5
    while time.monotonic() < end:
        snapshot_json({"rows": list(range(100))})
    finished.append(True)
    return "done"


async def pre(exec, next):  # the call then runs in the wait's own task
    await asyncio.sleep(0)
    return await next()


system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("busy", busy))
system.tools.on_pre_execute(pre)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    system.execute(ExecuteCall(call_id="c1", name="busy", arguments={}))
except KeyboardInterrupt:
    print("interrupted", finished)
system.stop()
"""


def test_ctrl_c_interrupts_a_plain_body_while_it_runs_the_package_s_own_code() -> None:
    done = run_script(CTRL_C_IN_A_BODY_USING_THE_PACKAGE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted []"]  # the body did not run on to its end


CTRL_C_WHILE_A_PLAIN_BODY_RUNS_ON_THE_SYSTEM_LOOP = """
import os, signal, threading, time
from dsh_tools import ExecuteCall, ToolSystem

started = threading.Event()
ended = []


def polls(args, ctx):  # on a worker thread, where no Ctrl-C lands: it watches its signal
    started.set()
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if ctx.signal.aborted:
            ended.append("saw the abort")
            return "stopped"
        time.sleep(0.01)
    ended.append("ran to its end")
    return "done"


system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("polls", polls))
threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
try:
    system.execute(ExecuteCall(call_id="c1", name="polls", arguments={}), timeout=60)
except KeyboardInterrupt:
    print("interrupted")
end = time.monotonic() + 25
while time.monotonic() < end:
    recorded = [e.data for e in system.session.events
                if e.type == "tool/result" and e.data["call_id"] == "c1"]
    if recorded:
        break
    time.sleep(0.01)
print(recorded[0]["error"]["code"], ended)
system.stop()
"""


def test_ctrl_c_while_waiting_on_the_system_loop_aborts_a_plain_bodys_signal() -> None:
    # ``execute(timeout=)`` runs the call on the system loop: the Ctrl-C cancels it there, and a
    # plain body on its worker thread learns of it only through its signal (it once had none
    # the pipeline could abort, and ran on to its end after the caller had gone).
    done = run_script(CTRL_C_WHILE_A_PLAIN_BODY_RUNS_ON_THE_SYSTEM_LOOP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "ABORTED ['saw the abort']"]


CTRL_C_AS_THE_WAIT_BEGINS = """
import os, signal, warnings
import dsh_tools._blocking_wait as blocking_wait
from dsh_tools import ExecuteBatch, ToolCall, ToolSystem

warnings.simplefilter("error")  # a coroutine never awaited fails the script
make_handler = blocking_wait._Interruptions.__init__


def made_then_interrupted(self, *args):
    make_handler(self, *args)
    os.kill(os.getpid(), signal.SIGINT)  # just before the wait installs its handler


async def body(args, ctx):
    return "done"


system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("quick", body))
blocking_wait._Interruptions.__init__ = made_then_interrupted
before = len(os.listdir("/proc/self/fd"))
for i in range(20):
    try:
        system.execute_batch(ExecuteBatch(calls=[ToolCall(f"c{i}", "quick", "{}")]), timeout=5)
    except KeyboardInterrupt:
        pass
print(len(os.listdir("/proc/self/fd")) - before)
blocking_wait._Interruptions.__init__ = make_handler
system.stop()
"""


def test_a_ctrl_c_as_a_blocking_wait_begins_leaves_nothing_open() -> None:
    done = run_script(CTRL_C_AS_THE_WAIT_BEGINS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]  # no descriptor left open, no coroutine left unawaited


CTRL_C_IN_THE_RECORDING = """
import os, signal, sys
from dsh_tools import ExecuteCall, ToolSystem
from dsh_tools.pipeline import SessionLog

# A Ctrl-C that lands in the pipeline's own bookkeeping, just after an event was appended.
which = sys.argv[1]
append = SessionLog.append


def append_then_interrupted(self, type, data, agent=None):
    event = append(self, type, data, agent)
    if type == which and data["call_id"] == "c1":
        os.kill(os.getpid(), signal.SIGINT)
    return event


SessionLog.append = append_then_interrupted
system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("plain", lambda args, ctx: "done"))
try:
    system.execute(ExecuteCall(call_id="c1", name="plain", arguments={}))
except KeyboardInterrupt:
    print("interrupted")
events = [(e.type, e.data.get("error", {}).get("code")) for e in system.session.events]
print(events)
system.stop()
"""


@pytest.mark.parametrize(
    ("landing", "events"),
    [
        ("tool/call", "[('tool/call', None), ('tool/result', 'ABORTED_BEFORE_DISPATCH')]"),
        ("tool/result", "[('tool/call', None), ('tool/result', None)]"),
    ],
)
def test_a_ctrl_c_in_the_recording_of_a_call_leaves_it_exactly_one_result(
    landing: str, events: str
) -> None:
    done = run_script(CTRL_C_IN_THE_RECORDING, landing)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", events]


CTRL_C_EXECUTE = """
import asyncio, os, signal, sys, threading
from dsh_tools import ExecuteCall, ToolSystem

started = threading.Event()
ends = []


async def wait_long(args, ctx):
    started.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        ends.append("cancelled")
        raise
    return "done"


async def quick(args, ctx):
    return "quick"


system = ToolSystem.start()
for name, body in (("wait_long", wait_long), ("quick", quick)):
    system.tools.register(a_tool(name, body))
threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
timeout = float(sys.argv[1]) if len(sys.argv) > 1 else None
try:
    system.execute(ExecuteCall(call_id="c1", name="wait_long", arguments={}), timeout=timeout)
except KeyboardInterrupt:
    print("interrupted")
for _ in range(1000):  # the call settles (at once under the blocking execute itself)
    results = [e.data for e in system.session.events if e.type == "tool/result"]
    if results:
        break
    threading.Event().wait(0.01)
print([r["error"]["code"] for r in results], ends)
later = system.execute(ExecuteCall(call_id="c2", name="quick", arguments={}))
print(later.value, len(system.pipeline.live))
system.stop()
"""


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["execute", "execute-with-timeout"])
def test_ctrl_c_during_a_blocking_execute_cancels_the_call_and_records_its_result(
    timeout: float | None,
) -> None:
    # Left pending, the interrupted call ran on: resumed by the next call on the same thread
    # (and recorded as a success there), or to its end on the system loop.
    args = [] if timeout is None else [str(timeout)]
    done = run_script(CTRL_C_EXECUTE, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "['ABORTED'] ['cancelled']", "quick 0"]


CTRL_C_IN_A_HOOK = """
import asyncio, os, signal, sys, threading
from dsh_tools import Ask, ExecuteCall, ToolSystem

waiting = threading.Event()


async def wait_long():
    waiting.set()
    await asyncio.sleep(3600)


async def pre(exec, next):
    await wait_long()
    return await next()


async def ask(exec, next):
    return Ask("may it?")


async def wrapper(exec, next):
    await wait_long()
    return await next()


async def post(exec, result, next):
    await wait_long()
    return await next()


async def approver(*, agent, tool_name, call_id, signal):
    await wait_long()
    return "allowed-once"


async def body(args, ctx):
    await wait_long()
    return "done"


stage, timeout = sys.argv[1], float(sys.argv[2]) if sys.argv[2] != "none" else None
system = ToolSystem.start(code_runtime=None, approval=approver)
system.tools.register(a_tool("quick", body if stage == "body" else lambda args, ctx: "done"))
if stage == "pre-execute":
    system.tools.on_pre_execute(pre)
elif stage == "approval":
    system.tools.on_pre_execute(ask)
elif stage == "execute-wrapper":
    system.tools.on_execute(wrapper)
elif stage == "post-execute":
    system.tools.on_post_execute(post)
seen = []
system.tools.on_result(lambda exec, result: seen.append(result))
threading.Thread(target=lambda: waiting.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
call = ExecuteCall(call_id="c1", name="quick", arguments={}, agent="coder")
try:
    system.execute(call, timeout=timeout)
except KeyboardInterrupt:
    print("interrupted")
for _ in range(1000):  # with timeout=, the call settles on the system loop
    if seen:
        break
    threading.Event().wait(0.01)
(result,) = seen
print(result.content[0]["text"], "/", result.abort_reason, "/", result.exception_type)
system.stop()
"""


@pytest.mark.parametrize("timeout", ["none", "30"], ids=["execute", "execute-with-timeout"])
@pytest.mark.parametrize(
    ("stage", "shown"),
    [
        ("pre-execute", "Error: tool call aborted before dispatch"),
        ("approval", "Error: tool call aborted before dispatch"),
        ("execute-wrapper", "Error: tool call aborted before dispatch"),
        ("post-execute", "Error: tool call aborted"),
        ("body", "Error: tool call aborted"),
    ],
)
def test_ctrl_c_while_a_blocking_execute_waits_in_a_hook_aborts_the_call(
    stage: str, shown: str, timeout: str
) -> None:
    # The Ctrl-C cancels the call's task where the hook waits: that ended the call as the
    # hook's own failure, "Error: " with exception_type CancelledError, instead of as the
    # interrupted call it is (and a body so cancelled was ABORTED without a reason).
    done = run_script(CTRL_C_IN_A_HOOK, stage, timeout)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [
        "interrupted",
        f"{shown} / the caller was interrupted / ",
    ]


CTRL_C_TWICE = """
import asyncio, os, signal, threading, time
from dsh_tools import ExecuteCall, ToolSystem

cleaning = threading.Event()


async def slow_cleanup(args, ctx):
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        cleaning.set()
        await asyncio.sleep(3600)  # a cleanup the second Ctrl-C stops waiting for
        raise
    return "done"


def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


def press_twice():
    time.sleep(0.3)
    ctrl_c()
    if cleaning.wait(10):
        ctrl_c()


system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("slow_cleanup", slow_cleanup))
threading.Thread(target=press_twice).start()
try:
    system.execute(ExecuteCall(call_id="c1", name="slow_cleanup", arguments={}))
except KeyboardInterrupt:
    print("interrupted")
results = [e.data for e in system.session.events if e.type == "tool/result"]
print([(r["call_id"], r["error"]["code"]) for r in results], len(system.pipeline.live))
system.stop()
print(sorted(t.name for t in threading.enumerate()))
"""


CTRL_C_IN_A_SUB_CALL = """
import os, signal
from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool


async def poke(args, ctx):
    return "pressed"


def render(args, value):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands as the sub-call is rendered
    return [{"type": "text", "text": value}]


with ToolSystem.start(ToolsConfig(mode="code")) as system:
    system.tools.register(
        define_tool(
            name="poke",
            description="Poke.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=render),
            execute=poke,
        )
    )
    program = "seen = await tools.poke({})\\nprint(seen)\\nawait asyncio.sleep(60)"
    arguments = {"code": program, "description": "d"}
    try:
        system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=arguments))
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    settles = [e.data for e in system.session.events if e.type == "tool/code-dispatch"]
    print([s["is_error"] for s in settles])
    (result,) = [e.data for e in system.session.events if e.type == "tool/result"]
    print(result["error"]["code"])
"""


def test_ctrl_c_during_a_code_run_interrupts_the_call_not_the_sub_call_running_then() -> None:
    # A Code Mode run's sub-calls run on the waiting thread's loop: a KeyboardInterrupt raised
    # wherever the main thread stood took the sub-call being rendered for its own failure, and
    # the run went on without the Ctrl-C (or, landing in a loop callback, lost the wake-up the
    # wait was for, and the wait never ended). The wait cancels the call instead.
    done = run_script(CTRL_C_IN_A_SUB_CALL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "[False]", "ABORTED"]


CTRL_C_IN_AN_INLINE_BODY = """
import asyncio, os, signal, threading, time
from dsh_tools import ExecuteCall, ToolSystem


def body(args, ctx):
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    time.sleep(60)  # runs inline on the main thread, inside the call's own task
    return "slept"


async def pre(exec, next):
    await asyncio.sleep(0.01)  # the call waits on the thread's loop from here on
    return await next()


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("sleepy", body))
    system.tools.on_pre_execute(pre)
    try:
        system.execute(ExecuteCall(call_id="c1", name="sleepy", arguments={}))
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
"""


def test_ctrl_c_still_interrupts_a_plain_body_running_inline_in_the_waiting_call() -> None:
    # The wait takes a Ctrl-C itself only while the loop runs something else; one that comes
    # while the call's own task runs (here a plain body sleeping on the main thread) is raised
    # there, as ever: cancelling from the loop would wait for the body's whole minute.
    done = run_script(CTRL_C_IN_AN_INLINE_BODY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "interrupted"


CTRL_C_IN_AN_ASYNC_BODY_HOLDING_THE_LOOP = """
import os, signal, threading, time
from dsh_tools import ExecuteCall, ToolSystem

ran_to_its_end = []


async def body(args, ctx):
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    end = time.monotonic() + 20
    while time.monotonic() < end:  # holds the thread's loop, in its own task, never awaiting
        time.sleep(0.01)
    ran_to_its_end.append(True)
    return "slept"


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("sleepy", body))
    try:
        system.execute(ExecuteCall(call_id="c1", name="sleepy", arguments={}))
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    print(ran_to_its_end, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    print([e.data["is_error"] for e in system.session.events if e.type == "tool/result"])
"""


def test_ctrl_c_interrupts_an_async_body_that_holds_the_loop_in_a_blocking_execute() -> None:
    # An async body of the blocking call runs in a task of its own: a first Ctrl-C while it
    # holds the loop (a blocking sleep, a loop of pure Python) was taken for the loop's
    # and only cancelled the call from it, so the body ran on to its end, its result was
    # recorded as a success, and only then was KeyboardInterrupt raised. It is the call's own
    # code, as a plain body inline is: the Ctrl-C is raised there.
    done = run_script(CTRL_C_IN_AN_ASYNC_BODY_HOLDING_THE_LOOP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "[] True", "[True]"]


CTRL_C_WHILE_A_PLAIN_BODY_RUNS_ON_A_WORKER = """
import os, signal, sys, threading, time
from dsh_tools import ExecuteCall, ToolSystem, timeout_policy

def body(args, ctx):
    if ctx.call_id == "c1":  # the second call, once its caller waits for it
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        time.sleep(1)  # on a worker thread: it cannot be interrupted, and returns on its own
    return "written"


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("save", body))
    if sys.argv[1] == "wrapped":  # a wrapper's own signal: the body runs on a worker
        system.tools.on_execute(timeout_policy(default_ms=60_000))
    timeout = 60 if sys.argv[1] == "timed" else None  # on the system loop, its body on a worker
    system.execute(ExecuteCall(call_id="c0", name="save", arguments={}), timeout=timeout)
    try:
        system.execute(ExecuteCall(call_id="c1", name="save", arguments={}), timeout=timeout)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    for _ in range(1000):  # the call settles on its own once the body returns
        results = [e.data for e in system.session.events if e.type == "tool/result"][1:]
        if results:
            break
        time.sleep(0.01)
    print([r["error"]["code"] if r["is_error"] else "success" for r in results])
"""


@pytest.mark.parametrize("how", ["wrapped", "timed"])
def test_ctrl_c_while_a_plain_body_runs_on_a_worker_aborts_its_call(how: str) -> None:
    # The body cannot be interrupted and returns on its own; the caller was interrupted all
    # the same, and the model must not be told of a success that the harness never received:
    # the call settles ABORTED (the body's success kept in ``settled_with``), as a batch's does.
    done = run_script(CTRL_C_WHILE_A_PLAIN_BODY_RUNS_ON_A_WORKER, how)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted", "['ABORTED']"]


CTRL_C_AS_A_PLAIN_BODY_IS_HANDED_TO_A_NEW_WORKER = """
import os, signal, time
from dsh_tools import ExecuteCall, ToolSystem, timeout_policy

finished = []


def body(args, ctx):
    os.kill(os.getpid(), signal.SIGINT)  # as the caller is still starting this worker thread
    time.sleep(0.3)
    finished.append(True)
    return "written"


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("save", body))
    system.tools.on_execute(timeout_policy(default_ms=60_000))  # the body runs on a worker
    try:
        system.execute(ExecuteCall(call_id="c1", name="save", arguments={}))
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    print(finished)
    print([r.get("error", {}).get("code") for r in (
        e.data for e in system.session.events if e.type == "tool/result"
    )])
"""


def test_ctrl_c_as_a_plain_body_is_handed_to_its_worker_waits_for_the_body() -> None:
    # The Ctrl-C landed in the pipeline's own hand-over of the body to a worker thread, as
    # that thread started: the call was failed with it at once, as though the body had raised
    # it, while the body ran on with nobody waiting for it. The hand-over now finishes first;
    # the call is interrupted, waits for its body and settles ABORTED, and KeyboardInterrupt
    # propagates after.
    done = run_script(CTRL_C_AS_A_PLAIN_BODY_IS_HANDED_TO_A_NEW_WORKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "[True]", "['ABORTED']"]


CTRL_C_AS_THE_HAND_OVER_BEGINS = """
import sys
from dsh_tools import ExecuteCall, ToolSystem, timeout_policy
from dsh_tools.pipeline._workers import BodyThreads

ran = []


def ctrl_c_as_the_hand_over_begins(frame, event, arg):
    if event == "call" and frame.f_code is BodyThreads._hand.__code__:
        sys.setprofile(None)
        raise KeyboardInterrupt


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("save", lambda args, ctx: ran.append(True) or "saved"))
    system.tools.on_execute(timeout_policy(default_ms=60_000))  # the body runs on a worker
    sys.setprofile(ctrl_c_as_the_hand_over_begins)
    try:
        system.execute(ExecuteCall(call_id="c1", name="save", arguments={}))
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    sys.setprofile(None)
    print(ran)
    print([e.data["content"][0]["text"] for e in system.session.events
           if e.type == "tool/result"])
"""


def test_ctrl_c_before_a_plain_body_is_handed_to_its_worker_aborts_the_call_before_dispatch() -> (
    None
):
    # The Ctrl-C was taken for the body's own failure, with the empty message of a bare
    # KeyboardInterrupt ("Error: "), though the body never ran.
    done = run_script(CTRL_C_AS_THE_HAND_OVER_BEGINS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "interrupted",
        "[]",
        "['Error: tool call aborted before dispatch']",
    ]


CTRL_C_IN_A_GUARD_OR_A_HOOK = """
import os, signal, time
from dsh_tools import ExecuteCall, ToolSystem

ran = []


def ctrl_c(*args):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # interrupted here


async def ctrl_c_after(exec, result, next):
    ctrl_c()
    return await next()


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("save", lambda args, ctx: ran.append(ctx.call_id) or "saved"))
    for call_id, register in [("in-guard", system.tools.guard),
                              ("in-post-hook", lambda: system.tools.on_post_execute(ctrl_c_after))]:
        dispose = register(ctrl_c) if call_id == "in-guard" else register()
        try:
            system.execute(ExecuteCall(call_id=call_id, name="save", arguments={}))
            print("not interrupted")
        except KeyboardInterrupt:
            pass
        dispose()
    print(ran)
    for event in system.session.events:
        if event.type == "tool/result":
            print(event.data["call_id"], event.data["content"][0]["text"])
"""


def test_ctrl_c_in_a_guard_or_a_hook_settles_the_call_as_interrupted() -> None:
    # A Ctrl-C landing in a guard or a hook on the caller's thread was taken for their
    # failure: "Error: " (a bare KeyboardInterrupt says nothing), no error code.
    done = run_script(CTRL_C_IN_A_GUARD_OR_A_HOOK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "['in-post-hook']",
        "in-guard Error: tool call aborted before dispatch",
        "in-post-hook Error: tool call aborted",
    ]


A_BODY_RAISING_KEYBOARD_INTERRUPT_ON_ITS_WORKER = """
from dsh_tools import ExecuteCall, ToolSystem, timeout_policy


def body(args, ctx):
    raise KeyboardInterrupt


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("raising", body))
    system.tools.on_execute(timeout_policy(default_ms=60_000))  # the body runs on a worker
    try:
        system.execute(ExecuteCall(call_id="c1", name="raising", arguments={}))
        print("not raised")
    except KeyboardInterrupt:
        print("raised")
    for event in system.session.events:
        if event.type == "tool/result":
            print(event.data["is_error"], repr(event.data["content"][0]["text"]))
"""


def test_a_keyboard_interrupt_a_body_raises_on_its_worker_is_its_failure() -> None:
    # No Ctrl-C lands on a worker thread: the body raised it itself, which is its failure, not
    # its caller's interruption (it was recorded as "tool call aborted", "the caller was
    # interrupted"). It still reaches the caller once recorded.
    done = run_script(A_BODY_RAISING_KEYBOARD_INTERRUPT_ON_ITS_WORKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["raised", "True 'Error: '"]


CTRL_C_AT_EVERY_STEP_OF_THE_HAND_OVER = """
import signal, sys, threading, time
from dsh_tools import ExecuteCall, ToolSystem, timeout_policy
from dsh_tools.pipeline._dispatch import DispatchStages
from dsh_tools.pipeline._workers import BodyThreads

HAND = BodyThreads._hand.__code__
WAIT = DispatchStages._run_in_worker.__code__
ran = []


def start():
    system = ToolSystem.start(code_runtime=None)
    system.tools.register(a_tool("save", lambda args, ctx: ran.append(ctx.call_id) or "saved"))
    system.tools.on_execute(timeout_policy(default_ms=60_000))  # the body runs on a worker
    return system


def stop(system):
    failed = []
    stopping = threading.Thread(target=lambda: failed.extend(
        [] if system.stop() is None else ["stop returned"]), daemon=True)
    stopping.start()
    stopping.join(20)
    return not stopping.is_alive() and not failed


def ctrl_c_at(step):
    # A Ctrl-C raises where the interpreter checks for signals: as a function begins, after a
    # call. Raised at the step-th such point from the steps that hand the body over to a
    # worker thread until the call's task has waited for it, with Python's own SIGINT handler
    # in place.
    seen, waiting = [0], [False]

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is HAND:
            waiting[0] = True
        elif event == "return" and frame.f_code is WAIT:
            waiting[0] = False
        elif event == "call" and frame.f_code is WAIT:
            return  # the call is on its way there: not one of those steps yet
        elif event in ("call", "c_return") and (waiting[0] or inside(frame)):
            if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                return  # a Ctrl-C is noted there, not raised
            seen[0] += 1
            if seen[0] > step:
                sys.setprofile(None)
                raise KeyboardInterrupt

    return profile, seen


def inside(frame):
    # In the hand-over, or in the steps of the call's task that lead to it and wait after it.
    while frame is not None and frame.f_code not in (HAND, WAIT):
        frame = frame.f_back
    return frame is not None


wrong = []
system = start()
for step in range(100):
    if sys.argv[1] == "new thread":
        if not stop(system):
            wrong.append(f"step {step - 1}: stop failed")
        system = start()
    else:  # an idle thread takes the body
        system.execute(ExecuteCall(call_id=f"warm{step}", name="save", arguments={}))
        time.sleep(0.05)
    profile, seen = ctrl_c_at(step)
    sys.setprofile(profile)
    try:
        system.execute(ExecuteCall(call_id=f"c{step}", name="save", arguments={}))
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    sys.setprofile(None)
    if seen[0] <= step:
        break  # no such step: every one was tried
    if not interrupted:
        wrong.append(f"step {step}: not interrupted")
    for _ in range(500):
        results = [e.data for e in system.session.events
                   if e.type == "tool/result" and e.data["call_id"] == f"c{step}"]
        if results:
            break
        time.sleep(0.01)
    codes = [r.get("error", {}).get("code") for r in results]
    expected = ["ABORTED"] if f"c{step}" in ran else ["ABORTED_BEFORE_DISPATCH"]
    if codes != expected:
        wrong.append(f"step {step}: body ran: {f'c{step}' in ran}, results: {codes}")
if not stop(system):
    wrong.append("the last stop failed")
print(step, wrong)
"""


@pytest.mark.parametrize("taker", ["idle thread", "new thread"])
def test_a_ctrl_c_at_any_step_of_a_bodys_hand_over_never_leaves_it_running_unwaited(
    taker: str,
) -> None:
    # A Ctrl-C raised in the hand-over (after the worker was taken from the idle ones, or once
    # a new one was recorded but not started) or between it and the call's wait failed the
    # call at once as though its body had raised it, while the body ran on with nobody waiting,
    # and left stop() joining a thread never started: it raised. Now a Ctrl-C before the
    # hand-over settles the call ABORTED_BEFORE_DISPATCH with the body never run; one after,
    # the call settles ABORTED once its body returns.
    done = run_script(CTRL_C_AT_EVERY_STEP_OF_THE_HAND_OVER, taker)
    assert done.returncode == 0, done.stderr
    steps, wrong = done.stdout.split(" ", 1)
    assert int(steps) > 2
    assert wrong.strip() == "[]"


CTRL_C_AT_EVERY_STEP_OF_A_SUBMIT = """
import signal, sys
from dsh_tools.pipeline._workers import BodyThreads

HAND = BodyThreads._hand.__code__


def ctrl_c_at(step):
    seen = [0]

    def profile(frame, event, arg):
        inside = frame
        while inside is not None and inside.f_code is not HAND:
            inside = inside.f_back
        if inside is None or event not in ("call", "c_return"):
            return
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # a Ctrl-C is noted there, not raised
        seen[0] += 1
        if seen[0] > step:
            sys.setprofile(None)
            raise KeyboardInterrupt

    return profile, seen


wrong = []
for step in range(100):
    threads, ran = BodyThreads("t"), []
    profile, seen = ctrl_c_at(step)
    sys.setprofile(profile)
    try:
        threads.submit(ran.append, step).result(10)
    except KeyboardInterrupt:
        pass
    sys.setprofile(None)
    try:
        threads.shutdown(wait=True)
    except RuntimeError as error:
        wrong.append(f"step {step}: {error}")
    if ran not in ([], [step]):
        wrong.append(f"step {step}: ran {ran}")
    if seen[0] <= step:
        break
print(step, wrong)
"""


def test_a_ctrl_c_at_any_step_of_starting_a_body_thread_leaves_it_started_once() -> None:
    # Raised once the new worker was recorded but before it started, it left a thread that
    # shutdown(), and so stop(), could never join: it raised instead.
    done = run_script(CTRL_C_AT_EVERY_STEP_OF_A_SUBMIT)
    assert done.returncode == 0, done.stderr
    steps, wrong = done.stdout.split(" ", 1)
    assert int(steps) > 2
    assert wrong.strip() == "[]"


CTRL_C_WHILE_A_PLAIN_APPROVER_ASKS = """
import os, signal, threading
from dsh_tools import Ask, ExecuteCall, ToolSystem

asked, withdrawn = threading.Event(), []


def console(*, agent, tool_name, call_id, signal):
    asked.set()
    withdrawn.append(signal.wait(10))
    return "cancelled"


async def ask(exec, next):
    return Ask("it writes")


with ToolSystem.start(code_runtime=None, approval=console) as system:
    system.tools.register(a_tool("write", lambda args, ctx: "written"))
    system.tools.on_pre_execute(ask)
    threading.Thread(target=lambda: asked.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
    try:
        system.execute(ExecuteCall(call_id="c1", name="write", arguments={}, agent="A"))
    except KeyboardInterrupt:
        print("interrupted")
    for _ in range(1000):
        if withdrawn:
            break
        threading.Event().wait(0.01)
    print(withdrawn, [e.type for e in system.session.events])
"""


def test_a_ctrl_c_while_a_plain_approver_asks_withdraws_the_question() -> None:
    # The approver's signal was the call's never-aborted one: the prompt went on asking, on
    # a thread of its own, about a call the Ctrl-C had already settled (whether the Ctrl-C
    # came as the call waited for it, or as the call was still handing the question over).
    done = run_script(CTRL_C_WHILE_A_PLAIN_APPROVER_ASKS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "[True] ['tool/call', 'tool/result']"]


A_WAIT_CUT_SHORT = """
import asyncio, signal
from dsh_tools import ExecuteCall, ToolSystem
from dsh_tools.pipeline import _loop


async def pre(exec, next):
    await asyncio.sleep(0.01)  # the call waits on the main thread's loop
    return await next()


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("t", lambda args, ctx: "ok"))
    system.tools.on_pre_execute(pre)
    call = ExecuteCall(call_id="c1", name="t", arguments={})
    system.execute(call)
    # What a Ctrl-C landing in a wait's own ending leaves: Python's wakeup descriptor still on
    # the wait's socket, and the wait's SIGINT handler still installed.
    wakeup = _loop._state.holder.wakeup()
    signal.set_wakeup_fd(wakeup.writer.fileno(), warn_on_full_buffer=False)
    loop = _loop.thread_loop()
    stale = _loop._CancelOnInterrupt(loop, loop.create_future())
    stale.waiting = False
    signal.signal(signal.SIGINT, stale)
    wakeup.writer.send(b"\\x11")  # a signal that came meanwhile, for the next wait to pass on
    system.execute(ExecuteCall(call_id="c2", name="t", arguments={}))
    print("second call settled", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_a_wait_whose_ending_a_ctrl_c_cut_short_leaves_the_next_wait_working() -> None:
    # A Ctrl-C can land in the few lines that end a wait (restoring the wakeup descriptor and
    # the SIGINT handler). The next wait found its own socket as the descriptor to pass what
    # arrives on to, and wrote it back into itself for ever.
    done = run_script(A_WAIT_CUT_SHORT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "second call settled True"


A_WAIT_CUT_SHORT_THEN_A_TIMED_WAIT = """
import os, signal, sys, time
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolSystem
from dsh_tools.pipeline import _loop


def ask(args, ctx):
    if sys.argv[2] == "ctrl-c":
        os.kill(os.getpid(), signal.SIGINT)  # while the caller's wait is on
        ctx.signal.wait(5)
    return "ok"


with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(a_tool("ask", ask))
    # What a Ctrl-C landing in a driven wait's own ending leaves: its SIGINT handler, acting
    # as Python's own from then on. Landing before the wait noted that it no longer waits, the
    # handler still says so, but its call has settled.
    loop = _loop.thread_loop()
    settled = loop.create_future()
    settled.set_result(None)
    stale = _loop._CancelOnInterrupt(loop, settled)
    stale.waiting = sys.argv[3] == "before it noted its end"
    signal.signal(signal.SIGINT, stale)
    try:
        if sys.argv[1] == "batch":
            system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "ask", "{}")]))
        else:
            system.execute(ExecuteCall(call_id="c1", name="ask", arguments={}), timeout=10)
        print("returned")
    except KeyboardInterrupt:
        print("interrupted")
    handler = signal.getsignal(signal.SIGINT)
    for _ in range(500):  # the interrupted call settles on the system loop
        results = [e.data["call_id"] for e in system.session.events if e.type == "tool/result"]
        if results:
            break
        time.sleep(0.01)
    print("results", *results)
    print("python's own back", handler is signal.default_int_handler)
"""


@pytest.mark.parametrize("landed", ["after it noted its end", "before it noted its end"])
@pytest.mark.parametrize("ctrl_c", ["none", "ctrl-c"])
@pytest.mark.parametrize("how", ["timeout", "batch"])
def test_a_timed_wait_after_a_wait_cut_short_takes_the_ctrl_c_as_after_python_s_own(
    how: str, ctrl_c: str, landed: str
) -> None:
    # A driven wait whose ending a Ctrl-C cut short leaves its handler in place, acting as
    # Python's own until the next driven wait replaces it. The waits of execute(timeout=) and
    # of a batch took it for an application's own and waited unguarded (a Ctrl-C raised
    # wherever the main thread stood), leaving it in place after them too; so they did when
    # the Ctrl-C had landed before the wait noted that it no longer waits.
    done = run_script(A_WAIT_CUT_SHORT_THEN_A_TIMED_WAIT, how, ctrl_c, landed)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "interrupted" if ctrl_c == "ctrl-c" else "returned",
        "results c1",
        "python's own back True",
    ]


AN_APPLICATIONS_OWN_HANDLER = """
import asyncio, os, signal, sys
from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem

taken = []
kill = [False]
install = [False]


def own(signum, frame):
    taken.append(signum)


async def ask(args, ctx):
    await asyncio.sleep(0)  # the call waits on the main thread's loop
    if install[0]:
        signal.signal(signal.SIGINT, own)
    if kill[0]:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.05)
    return "ok"


def call(number, how):
    made = ExecuteCall(call_id=f"c{number}", name="ask", arguments={})
    result = system.execute(made) if how == "execute" else system.execute(made, timeout=10)
    assert not result.is_error, result.content
    return len(taken), signal.getsignal(signal.SIGINT) is own


with ToolSystem.start(ToolsConfig(mode="code")) as system:
    system.tools.register(a_tool("ask", ask))
    call(1, sys.argv[1])
    print("python's own put back", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    signal.signal(signal.SIGINT, own)  # the application's own, between two calls
    kill[0] = True
    print("first call", *call(2, sys.argv[1]))
    print("next call", *call(3, sys.argv[1]))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    kill[0] = False
    run = ExecuteCall(
        call_id="c4", name="run_code", arguments={"code": "return 1", "description": "d"}
    )
    system.execute(run)
    signal.signal(signal.SIGINT, own)
    kill[0] = True
    run = ExecuteCall(
        call_id="c5",
        name="run_code",
        arguments={"code": "return await tools.ask({})", "description": "d"},
    )
    result = system.execute(run)
    print("code run", result.value["result"], len(taken), signal.getsignal(signal.SIGINT) is own)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    kill[0], install[0] = False, True  # installed by the tool as the call waits
    print("installed as it waits", *call(6, sys.argv[1]))
"""


@pytest.mark.parametrize("how", ["execute", "execute with a timeout"])
def test_an_applications_own_sigint_handler_installed_between_calls_takes_their_ctrl_c(
    how: str,
) -> None:
    # A blocking call that waits on the main thread swaps its own SIGINT handler in for
    # Python's, and back after. One that finds the application's own (installed since the
    # last call put Python's back) leaves it in place: the Ctrl-C the tool sends while the
    # call waits reaches the application's handler, not the call, which returns its value.
    # One installed by the tool as the call waits stays after it.
    done = run_script(AN_APPLICATIONS_OWN_HANDLER, how.split()[0])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "python's own put back True",
        "first call 1 True",
        "next call 2 True",
        "code run ok 3 True",
        "installed as it waits 3 True",
    ]


CTRL_C_TWICE_IN_A_RUNS_TEARDOWN = """
import _thread, contextlib, os, signal, sys, threading
from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem
from dsh_tools.codebridge._run import CodeRun

started = threading.Event()


def wait(args, ctx):
    started.set()
    ctx.signal.wait(10)
    return "late"


refill = CodeRun._schedule_refill
# A second Ctrl-C that lands while the first one's cancellation tears the run down (C
# callables: no frame of this script stands where the handler finds the main thread).
if sys.argv[1] == "package":
    CodeRun._schedule_refill = _thread.interrupt_main
else:  # in the standard library's code that the teardown runs (contextlib, selectors)
    stack = contextlib.ExitStack()
    stack.callback(_thread.interrupt_main)
    CodeRun._schedule_refill = stack.close
system = ToolSystem.start(ToolsConfig(mode="code", max_parallel_code_runs=1))
system.tools.register(a_tool("wait", wait))
threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT)).start()
try:
    system.execute(
        ExecuteCall(call_id="c1", name="run_code", arguments={"code": "await tools.wait({})",
                                                               "description": "d"})
    )
except KeyboardInterrupt:
    print("interrupted")
CodeRun._schedule_refill = refill
print(system.code_runtime.runs_in_flight)
later = ExecuteCall(
    call_id="c2", name="run_code", arguments={"code": "return 2", "description": "d"}
)
print(system.execute(later, timeout=10).value["result"])
system.stop()
"""


@pytest.mark.parametrize("landing", ["package", "stdlib"])
def test_a_second_ctrl_c_in_a_code_runs_teardown_leaves_no_run_holding_its_slot(
    landing: str,
) -> None:
    # Raised inside the run's teardown, the second KeyboardInterrupt cut it short: the run kept
    # its slot of ``max_parallel_code_runs`` (for the wall ceiling, 10 minutes by default),
    # and often its worker's five descriptors for good; a storm of Ctrl-C so left every later
    # run waiting for a slot. The wait stops once the loop has finished its turn instead.
    done = run_script(CTRL_C_TWICE_IN_A_RUNS_TEARDOWN, landing)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "0", "2"]
    # What the wait left pending on the thread's loop ends as that loop closes at exit: closed
    # with it pending, asyncio reported each task as destroyed while pending.
    assert done.stderr == ""


CTRL_C_AS_A_RUN_TAKES_ITS_WORKER = """
import os, signal, time
import dsh_tools.codebridge._template_host as template_host
from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem
from dsh_tools.codebridge._pool import WorkerPool

take = WorkerPool.take


def take_then_interrupted(self):
    slot = take(self)
    if slot is not None:
        WorkerPool.take = take
        os.kill(os.getpid(), signal.SIGINT)  # lands as the call takes a pre-forked worker
    return slot


system = ToolSystem.start(ToolsConfig(mode="code"))
system.code_runtime.warm_up()
for _ in range(1000):
    if system.code_runtime.idle_workers == 2:
        break
    time.sleep(0.01)
WorkerPool.take = take_then_interrupted
try:
    system.execute(
        ExecuteCall(call_id="c1", name="run_code", arguments={"code": "return 1",
                                                               "description": "d"})
    )
except KeyboardInterrupt:
    print("interrupted")
print(system.code_runtime.prepared_runs)  # workers still held for a run that never comes
system.stop()
print(len(template_host._HOST_FDS))  # the workers' pipes the host still holds open
"""


def test_a_ctrl_c_as_a_code_run_call_takes_its_worker_gives_the_worker_back_at_once() -> None:
    # The call takes a pre-forked worker as it begins, to give it the program early. A
    # KeyboardInterrupt raised between the pool's hands and the call's dropped the worker with
    # its five pipes still open, for the process's life. Now the Ctrl-C is raised once the
    # worker is the call's, and the call ends there, before it began: the worker goes back
    # with it. Kept prepared instead, it held a process and its five descriptors, and a place
    # among the prepared runs, until the system stopped.
    done = run_script(CTRL_C_AS_A_RUN_TAKES_ITS_WORKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["interrupted", "0", "0"]


A_STOP_CUT_SHORT = """
import threading
from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem

system = ToolSystem.start(ToolsConfig(mode="code"))
system.execute(
    ExecuteCall(call_id="c1", name="run_code", arguments={"code": "return 1", "description": "d"})
)
closed = []
system.on_stop(lambda: closed.append("the other resource"))


def interrupted():
    raise KeyboardInterrupt  # a Ctrl-C while stop() waits for a resource to close


system.on_stop(interrupted)  # the last attached closes first
try:
    system.stop()
except KeyboardInterrupt:
    print("interrupted")
system.stop()
print(closed, system.code_runtime.template_pid)
print(sorted(t.name for t in threading.enumerate()))
"""


def test_a_stop_that_a_ctrl_c_cut_short_is_finished_by_the_next_stop() -> None:
    # The next stop() returned at once, as if the first had ended: the system loop, the
    # actors' threads, the pool's thread, the template and its workers ran on for the
    # process's life (five threads and four descriptors per system, in a harness that
    # stops its systems under Ctrl-C).
    done = run_script(A_STOP_CUT_SHORT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "interrupted",
        "['the other resource'] None",
        "['MainThread']",
    ]


def test_a_closer_detached_after_a_stop_cut_short_is_not_run_by_the_next_stop() -> None:
    # A stop cut short in one closer leaves the others to the next stop(); a resource that
    # closes by itself meanwhile detaches its closer, which the next stop() ran all the same.
    system = ToolSystem.start(code_runtime=None)
    ran: list[str] = []
    detach = system.on_stop(lambda: ran.append("closed by the stop"))

    def interrupted() -> None:
        ran.append("interrupted")
        raise KeyboardInterrupt

    system.on_stop(interrupted)
    with pytest.raises(KeyboardInterrupt):
        system.stop()
    detach()  # its resource closed by itself meanwhile
    system.stop()
    assert ran == ["interrupted"]


SLEEPER_SYSTEM = """
system = ToolSystem.start(code_runtime=None)
system.tools.register(a_tool("sleeper", sleeper))
"""
"""A script's lines starting ``system`` with the ``sleeper`` tool it defined before them."""

CTRL_C_ON_ANOTHER_THREAD = (
    """
import asyncio, signal, threading, time
from dsh_tools import ExecuteCall, ToolOutput, ToolSystem, define_tool

started = threading.Event()


async def sleeper(args, ctx):
    started.set()
    await asyncio.sleep(3600)
    return "done"


def ctrl_c_taken_by_this_thread():
    started.wait(10)
    time.sleep(0.2)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

"""
    + SLEEPER_SYSTEM
    + """threading.Thread(target=ctrl_c_taken_by_this_thread).start()
begun = time.monotonic()
try:
    system.execute(ExecuteCall(call_id="c1", name="sleeper", arguments={}))
except KeyboardInterrupt:
    print("interrupted", time.monotonic() - begun < 10)
print([e.data["error"]["code"] for e in system.session.events if e.type == "tool/result"])
system.stop()
"""
)


def test_a_ctrl_c_that_another_thread_takes_still_interrupts_a_blocking_execute_at_once() -> None:
    # The kernel gives a process's SIGINT to any of its threads; Python notes it for the main
    # thread, which must not sleep on in its loop's wait until the body's timer.
    done = run_script(CTRL_C_ON_ANOTHER_THREAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted True", "['ABORTED']"]


SIGNAL_FOR_ANOTHER_LOOP = (
    """
import asyncio, signal, threading, time
from dsh_tools import ExecuteCall, ToolOutput, ToolSystem, define_tool

app_loop = asyncio.new_event_loop()  # the harness's own loop, not running now
seen = []
app_loop.add_signal_handler(signal.SIGUSR1, seen.append, "usr1")
started = threading.Event()


async def sleeper(args, ctx):
    started.set()
    await asyncio.sleep(0.5)
    return "done"


def usr1_taken_by_this_thread():
    started.wait(10)
    signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

"""
    + SLEEPER_SYSTEM
    + """threading.Thread(target=usr1_taken_by_this_thread).start()
print(system.execute(ExecuteCall(call_id="c1", name="sleeper", arguments={})).value)
app_loop.run_until_complete(asyncio.sleep(0.1))
print(seen)
system.stop()
"""
)


def test_a_signal_arriving_while_execute_waits_still_reaches_the_harness_loops_handler() -> None:
    done = run_script(SIGNAL_FOR_ANOTHER_LOOP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["done", "['usr1']"]


def test_a_second_ctrl_c_stops_the_wait_and_the_call_keeps_its_one_result() -> None:
    # The call is finished and recorded as the caller stops waiting, so that nothing waits for
    # it and a later stop() on the same thread stops the system rather than taking the thread
    # for the system's own work.
    done = run_script(CTRL_C_TWICE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "interrupted",
        "[('c1', 'ABORTED')] 0",
        "['MainThread']",
    ]
    assert done.stderr == ""  # the body's cleanup is cancelled again as the loop closes


def test_stopping_the_system_from_a_batch_observer_lets_the_batch_settle_first() -> None:
    system = ToolSystem.start(code_runtime=None)
    try:
        system.tools.register(fixture("x"))
        system.tools.on_result(lambda exec, result: system.stop())

        outcome = system.execute_batch(batch("c1", "c2"), timeout=10)
        assert [r.call_id for r in outcome.results] == ["c1", "c2"]
        assert result_ids(system) == ["c1", "c2"]
        assert not system.running
    finally:
        system.stop()


def result_ids(system: ToolSystem) -> list[str]:
    return [e.data["call_id"] for e in system.session.events if e.type == "tool/result"]


@pytest.mark.parametrize("entry", ["batch", "batch_async"])
@pytest.mark.parametrize("where", ["plain body", "async body", "pre-execute", "post-execute"])
def test_stop_from_inside_a_batch_call_lets_the_batch_settle_with_every_result(
    entry: str, where: str
) -> None:
    # The call that stops the system runs on the system's own threads: its batch settles only
    # once stop() returns, so the rest of the stop waits for it instead of tearing it down.
    before = set(threading.enumerate())
    system = ToolSystem.start(code_runtime=None)

    def plain(args: Any, ctx: Any) -> Any:
        if where == "plain body":
            system.stop()
        return [block("done")]

    async def async_body(args: Any, ctx: Any) -> Any:
        if where == "async body":
            system.stop()
        return [block("done")]

    async def stop_in(stage: str, exec: Any, *rest: Any) -> Any:
        if where == stage:
            system.stop()
        return await rest[-1]()

    body = async_body if where == "async body" else plain
    system.tools.register(fixture("t", body, is_concurrency_safe=lambda args: False))
    system.tools.on_pre_execute(lambda exec, next: stop_in("pre-execute", exec, next))
    system.tools.on_post_execute(lambda e, r, next: stop_in("post-execute", e, r, next))
    turn = ExecuteBatch(calls=[ToolCall("c1", "t", "{}"), ToolCall("c2", "t", "{}")])
    if entry == "batch":
        outcome = system.execute_batch(turn, timeout=WAIT)
    else:
        outcome = asyncio.run(asyncio.wait_for(system.execute_batch_async(turn), WAIT))
    codes = [r.to_dict()["error"]["info"]["code"] for r in outcome.results]
    first = "ABORTED_BEFORE_DISPATCH" if where == "pre-execute" else "ABORTED"
    assert codes == [first, "ABORTED_BEFORE_DISPATCH"]
    assert result_ids(system) == ["c1", "c2"]
    assert not system.running
    system.stop()  # from outside: waits for the rest of the first stop
    assert [t for t in threading.enumerate() if t not in before] == []


def test_stop_from_a_hook_of_a_code_mode_sub_call_leaves_no_template_or_pool_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sub-call's hook runs on the run's own loop: stop() returns at once there, and the
    # rest of the stop (the runtime's disposal among it) follows once the run has settled.
    monkeypatch.setattr(system_module, "RUNTIME_DISPOSAL_S", 1.0, raising=False)
    before = set(threading.enumerate())
    system = ToolSystem.start(ToolsConfig(mode="code"))
    system.tools.register(fixture("p"))

    async def stop_here(exec: Any, next: Any) -> Any:
        if exec.name == "p":
            system.stop()
        return await next()

    system.tools.on_pre_execute(stop_here)
    program = {"code": "return await tools.p({})", "description": "Call p"}
    call = ExecuteCall(call_id="c1", name="run_code", arguments=program)
    with contextlib.suppress(Exception):
        asyncio.run(system.execute_async(call))
    join_threads_started_since(before)
    assert {t.name for t in set(threading.enumerate()) - before if t.is_alive()} == set()
    assert templates_of_this_process() == []


def join_threads_started_since(before: set[threading.Thread], timeout: float = 10.0) -> None:
    """Wait for every thread that is not in ``before`` to end, those whose start is still under
    way in another thread included (``join`` refuses such a thread until it runs)."""
    deadline = time.monotonic() + timeout
    while True:
        starting = False
        for thread in set(threading.enumerate()) - before:
            try:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            except RuntimeError:  # started a moment ago by another thread, not running yet
                starting = True
        if not starting or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def templates_of_this_process() -> list[int]:
    """The worker templates this process started that still run (zombies are gone)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != b"Z" and b"_template.py" in command:
            found.append(int(entry))
    return found


def test_a_warmed_up_system_has_its_workers_waiting_before_its_first_run() -> None:
    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        runtime = system.code_runtime
        assert isinstance(runtime, SubprocessCodeRuntime)
        assert templates_of_this_process() == []  # nothing starts before it is asked for
        runtime.warm_up()
        deadline = time.monotonic() + WAIT
        while runtime.idle_workers < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.idle_workers == 2  # started with the system, not by the first run
        assert templates_of_this_process() == [runtime.template_pid]
        program = {"code": "return 6 * 7", "description": "Multiply"}
        result = system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=program))
        assert result.content[0]["text"].endswith("42")
    assert templates_of_this_process() == []


def test_a_workspace_the_harness_makes_after_start_is_granted_to_the_first_run(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    sandbox = CodeSandbox(write=(str(workspace),))
    with ToolSystem.start(ToolsConfig(mode="code"), code_sandbox=sandbox) as system:
        time.sleep(0.3)  # the harness sets up its workspace after start
        workspace.mkdir()
        (workspace / "input.txt").write_text("hello")
        program = {"code": f"return open({str(workspace / 'input.txt')!r}).read()"}
        program["description"] = "Read the input"
        result = system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=program))
        assert result.content[0]["text"].endswith("hello"), result


def fork_a_sleeper() -> int:
    """Fork a child that only sleeps until it is killed, as a harness's helper process would
    live on; its pid."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child
        time.sleep(60)
        os._exit(0)
    return child


def test_a_process_forked_from_the_harness_does_not_keep_its_template_from_stopping() -> None:
    # A multiprocessing worker forked after a run holds a copy of everything the host had
    # open: the template must still see the host's stop() as the end of its control socket.
    system = ToolSystem.start(ToolsConfig(mode="code"))
    program = {"code": "return 1", "description": "One"}
    system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=program))
    runtime = system.code_runtime
    assert isinstance(runtime, SubprocessCodeRuntime)
    template = runtime._template._process
    assert template is not None
    child = fork_a_sleeper()
    try:
        system.stop()
        assert template.wait(WAIT) == 0  # it ended on the end of file, not killed past a wait
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
    assert templates_of_this_process() == []


def test_a_child_forked_after_start_exits_and_refuses_the_parents_system() -> None:
    # None of the system's threads exist in a forked child: its exit must not wait for them
    # (the interpreter stops running systems at exit), and using the system there says why.
    done = run_script(
        """
        import faulthandler, os, sys
        from dsh_tools import ExecuteCall, ToolSystem
        system = ToolSystem.start(code_runtime=None)
        child = os.fork()
        if child == 0:
            faulthandler.dump_traceback_later(20, exit=True)
            try:
                system.execute(ExecuteCall(call_id="c1", name="missing", arguments={}))
            except RuntimeError as error:
                print("child:", error, flush=True)
            try:  # the handles ask the system's actors, which have no thread here
                system.tools.section("notes", 1.0, "text")
            except RuntimeError as error:
                print("child handle:", error, flush=True)
            with system:  # stopping it here returns at once
                pass
            sys.exit(0)  # the interpreter's exit stops every system still running
        _, status = os.waitpid(child, 0)
        print("child exit status:", os.waitstatus_to_exitcode(status), flush=True)
        print("parent running:", system.running, flush=True)
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("child: the tool system runs in process "), lines
    assert lines[0].endswith(
        "which forked this one after starting it; start a new one here with ToolSystem.start()"
    )
    assert lines[1:] == [
        "child handle: the global tools handle is closed",
        "child exit status: 0",
        "parent running: True",
    ]


def test_a_child_forked_while_the_parent_stops_its_system_stops_its_copy_at_once() -> None:
    done = run_script(
        """
        import faulthandler, os, threading, time
        from dsh_tools import ExecuteCall, ToolSystem
        from conftest import block, fixture
        system = ToolSystem.start(code_runtime=None)
        started, forked = threading.Event(), threading.Event()
        def lingering(args, ctx):  # keeps the parent's stop() waiting
            started.set()
            forked.wait(10)
            return [block("done")]
        system.tools.register(fixture("lingering", lingering))
        call = ExecuteCall(call_id="c1", name="lingering", arguments={})
        threading.Thread(target=system.execute, args=(call,), daemon=True).start()
        started.wait(10)
        stopping = threading.Thread(target=system.stop)
        stopping.start()
        while system.running:
            pass
        time.sleep(0.3)  # the stop now waits for the call to settle
        child = os.fork()
        if child == 0:
            # A stop that waits for the parent's threads would wait up to 19 s here.
            faulthandler.dump_traceback_later(5, exit=True)
            system.stop()
            print("child stopped its copy", flush=True)
            os._exit(0)
        forked.set()
        stopping.join()
        _, status = os.waitpid(child, 0)
        print("child exit status:", os.waitstatus_to_exitcode(status), flush=True)
        """,
        cwd=str(Path(__file__).parent),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["child stopped its copy", "child exit status: 0"]


def forked(child: Callable[[], str]) -> str:
    """Fork; the child runs ``child`` and exits, the parent returns what it wrote."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child
        try:
            os.write(write_end, child().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        text = reader.read().decode()
    os.waitpid(pid, 0)
    return text


def test_a_forked_child_closes_its_copies_of_the_workers_pipes_and_refuses_the_runtime() -> None:
    system = ToolSystem.start(ToolsConfig(mode="code"))
    try:
        runtime = system.code_runtime
        assert isinstance(runtime, SubprocessCodeRuntime)
        runtime.warm_up()
        deadline = time.monotonic() + WAIT
        while runtime.idle_workers < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        descriptors = [fd for slot in runtime._pool._idle for fd in slot.fds.values()]
        assert len(descriptors) == 12  # six pipes of each of two workers

        def child() -> str:
            still_open = [fd for fd in descriptors if os.path.exists(f"/proc/self/fd/{fd}")]
            try:
                asyncio.run(runtime.run(CodeRunRequest("return 1", [])))
            except RuntimeError as error:
                return f"{still_open} {error}"
            return f"{still_open} ran"

        assert forked(child) == (
            "[] code runtime: it belongs to the process that forked this one; make a new "
            "runtime here"
        )
        program = {"code": "return 6 * 7", "description": "Multiply"}
        result = system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=program))
        assert result.content[0]["text"].endswith("42")  # the parent's workers are its own
    finally:
        system.stop()


def test_a_fork_while_the_template_starts_waits_and_leaves_the_template_to_the_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The template's control socket exists before its process does: a child forked in
    # between would copy it unknown, and the template would wait for the child's end.
    starting = threading.Event()
    real_popen = template_host.subprocess.Popen

    def slow_popen(*args: Any, **kwargs: Any) -> Any:
        starting.set()
        time.sleep(0.3)  # the fork below lands now
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(template_host.subprocess, "Popen", slow_popen)
    system = ToolSystem.start(ToolsConfig(mode="code"))
    runtime = system.code_runtime
    assert isinstance(runtime, SubprocessCodeRuntime)
    runtime.warm_up()
    assert starting.wait(WAIT)
    child = fork_a_sleeper()
    try:
        monkeypatch.undo()
        program = {"code": "return 1", "description": "One"}
        system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=program))
        template = runtime._template._process
        assert template is not None
        system.stop()
        assert template.wait(WAIT) == 0  # it ended on the end of file, not killed past a wait
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


@pytest.mark.parametrize("pause", [0.0, 0.001, 0.01, 0.05])
def test_stopping_a_system_while_its_workers_warm_up_leaves_nothing_behind(
    pause: float,
) -> None:
    before = set(threading.enumerate())
    system = ToolSystem.start(ToolsConfig(mode="code"))
    assert isinstance(system.code_runtime, SubprocessCodeRuntime)
    system.code_runtime.warm_up()
    time.sleep(pause)
    system.stop()
    join_threads_started_since(before)
    assert {t.name for t in set(threading.enumerate()) - before if t.is_alive()} == set()
    assert templates_of_this_process() == []


def test_an_async_observer_of_a_call_that_outlives_the_stop_is_closed_not_left_unawaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The call's body outlasts stop()'s grace, so the system loop has ended by the time the
    # call commits: its async result observer can never run there, and must be closed rather
    # than collected unawaited (a RuntimeWarning into whatever runs then).
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.1)
    system = ToolSystem.start(code_runtime=None)
    entered, release = threading.Event(), threading.Event()
    observed: list[str] = []

    def slow(args: Any, ctx: Any) -> Any:
        entered.set()
        release.wait(WAIT)
        return [block("late")]

    async def observer(exec: Any, result: Any) -> None:
        observed.append(exec.call_id)

    system.tools.register(fixture("slow", slow))
    system.tools.on_result(observer)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute, ExecuteCall(call_id="c1", name="slow", arguments={}))
        assert entered.wait(WAIT)
        system.stop()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            release.set()
            result = pending.result(WAIT)
            gc.collect()
    assert text_of(result) == "Error: tool call aborted"
    assert observed == []
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def text_of(result: Any) -> str:
    return str(result.content[0]["text"])


def strand_calls(system: ToolSystem, count: int) -> None:
    """Start ``count`` calls of ``nap`` on event loops that are then closed under them."""
    for i in range(count):
        loop = asyncio.new_event_loop()
        task = loop.create_task(system.execute_async(call("nap", call_id=f"c{i}")))
        loop.run_until_complete(asyncio.sleep(0))  # the call starts and waits
        assert not task.done()
        loop.close()


def test_calls_whose_event_loop_closed_under_them_are_finished_and_recorded() -> None:
    # The harness closed its loop with execute_async calls in flight: their tasks never ran
    # again, so each call stayed in flight for the process's life with all it held, had no
    # tool/result, and a stop() from that thread took it for the system's own work (it
    # returned at once and the system stopped seconds later, on a thread of its own).
    before = set(threading.enumerate())
    system = ToolSystem.start(code_runtime=None)

    async def nap(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(3600)

    system.tools.register(fixture("nap", nap))
    calls = 70
    strand_calls(system, calls)
    assert len(system.pipeline.live) < calls  # the calls that came later found them
    system.stop()
    assert system.pipeline.live == set()
    codes = [e.data["error"]["code"] for e in system.session.events if e.type == "tool/result"]
    assert codes == ["ABORTED"] * calls
    assert [t for t in threading.enumerate() if t not in before] == []


def test_calls_stranded_after_a_burst_are_looked_for_as_early_as_before_it() -> None:
    # A burst of calls in flight at once raises the count at which calls stranded on a closed
    # loop are looked for; once it is over, that count comes back down, so stranded calls do
    # not pile up to the size of the biggest burst the system ever had.
    system = ToolSystem.start(code_runtime=None)
    release = asyncio.Event()

    async def held(args: Any, ctx: Any) -> Any:
        await release.wait()

    async def nap(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(3600)

    system.tools.register(fixture("held", held))
    system.tools.register(fixture("nap", nap))

    async def burst() -> None:
        calls = [
            asyncio.ensure_future(system.execute_async(call("held", call_id=f"b{i}")))
            for i in range(600)
        ]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(*calls)

    asyncio.run(burst())
    stranded = 70
    strand_calls(system, stranded)
    assert len(system.pipeline.live) < stranded  # the calls that came later found them
    system.stop()


@pytest.mark.parametrize("entry", ["execute_async", "ref.ask"])
def test_a_plain_body_that_outlasts_the_stop_is_left_to_its_thread_and_its_call_settles(
    monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    system = ToolSystem.start(code_runtime=None)
    entered, release = threading.Event(), threading.Event()

    def stuck(args: Any, ctx: Any) -> Any:  # never looks at its signal
        entered.set()
        release.wait(WAIT)
        return [block("too late")]

    system.tools.register(fixture("stuck", stuck))
    one = ExecuteCall(call_id="c1", name="stuck", arguments={})

    async def awaiting() -> tuple[Any, int]:
        result = await system.execute_async(one)
        return result, asyncio.current_task().cancelling()  # type: ignore[union-attr]

    with ThreadPoolExecutor(1) as pool:
        if entry == "execute_async":
            pending = pool.submit(asyncio.run, awaiting())
        else:
            pending = pool.submit(lambda: (system.ref.ask(one, timeout=WAIT), 0))
        assert entered.wait(WAIT)
        try:
            system.stop()
            result, cancelling = pending.result(WAIT)
        finally:
            release.set()
    assert text_of(result) == "Error: tool call aborted"
    assert result.abort_reason == "the tool system is stopping"
    assert cancelling == 0
    assert result_ids(system) == ["c1"]


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain body", "under a wrapper"])
def test_a_batch_whose_plain_body_outlasts_the_stop_settles_with_every_result(
    monkeypatch: pytest.MonkeyPatch, wrapped: bool
) -> None:
    # Without a wrapper the pool runs the body right on a body thread; under one, a task on
    # the loop waits for it. Either way, once the grace is over the stuck call settles without
    # its body, the batch commits in order and its waiter gets every result.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    system = ToolSystem.start(code_runtime=None)
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def stuck(args: Any, ctx: Any) -> Any:  # never looks at its signal
        entered.set()
        release.wait(WAIT)
        returned.set()
        return [block("too late")]

    async def passes(exec: Any, next: Any) -> Any:
        return await next()

    system.tools.register(fixture("stuck", stuck))
    system.tools.register(echo())
    if wrapped:
        system.tools.on_execute(passes)
    turn = ExecuteBatch(calls=[ToolCall("c1", "stuck", "{}"), ToolCall("c2", "echo", "{}")])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute_batch, turn)
        assert entered.wait(WAIT)
        try:
            system.stop()
            outcome = pending.result(WAIT)
        finally:
            release.set()
    assert returned.wait(WAIT)
    stuck_result, sibling = outcome.results
    assert stuck_result.error.info.code == "ABORTED"
    assert stuck_result.abort_reason == "the tool system is stopping"
    assert stuck_result.call_id == "c1" and sibling.call_id == "c2"
    assert sibling.abort_reason == "the tool system is stopping"  # committed after the stop
    assert result_ids(system) == ["c1", "c2"]  # what the body returned late is dropped


@pytest.mark.parametrize("entry", ["execute_batch", "ref.ask", "execute_async"])
@pytest.mark.parametrize("stage", ["pre-execute", "post-execute"])
def test_a_hook_that_takes_the_stops_cancellation_and_waits_on_is_cancelled_past_the_grace(
    monkeypatch: pytest.MonkeyPatch, entry: str, stage: str
) -> None:
    # The interrupt cancels a waiting hook; one that catches that and goes on waiting (a long
    # cleanup) is cancelled once more when the grace is over, so its call still settles and
    # its caller gets the result.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    system = ToolSystem.start(code_runtime=None)
    waiting = threading.Event()
    cancellations: list[str] = []

    async def stubborn(*args: Any) -> Any:
        waiting.set()
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            cancellations.append("first")
            try:
                await asyncio.sleep(WAIT)  # a cleanup longer than the grace
            except asyncio.CancelledError:
                cancellations.append("second")
                raise
        return await args[-1]()

    system.tools.register(echo())
    if stage == "pre-execute":
        system.tools.on_pre_execute(stubborn)
    else:
        system.tools.on_post_execute(stubborn)
    one = ExecuteCall(call_id="c1", name="echo", arguments={})
    with ThreadPoolExecutor(1) as pool:
        if entry == "execute_batch":
            turn = ExecuteBatch(calls=[ToolCall("c1", "echo", "{}")])
            pending = pool.submit(lambda: system.execute_batch(turn).results[0])
        elif entry == "ref.ask":
            pending = pool.submit(system.ref.ask, one, timeout=WAIT)
        else:
            pending = pool.submit(asyncio.run, system.execute_async(one))
        assert waiting.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    code = "ABORTED_BEFORE_DISPATCH" if stage == "pre-execute" else "ABORTED"
    assert result.error.info.code == code
    assert cancellations == ["first", "second"]
    assert result_ids(system) == ["c1"]


def test_a_code_mode_sub_call_whose_plain_body_outlasts_the_stop_records_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    system = ToolSystem.start(ToolsConfig(mode="code"))
    entered, release = threading.Event(), threading.Event()

    def stuck(args: Any, ctx: Any) -> Any:
        entered.set()
        release.wait(WAIT)
        return [block("too late")]

    system.tools.register(fixture("stuck", stuck))
    program = {"code": "return await tools.stuck({})", "description": "waits"}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(system.execute, call("run_code", program, call_id="r1"))
        assert entered.wait(WAIT)
        try:
            system.stop()
            result = pending.result(WAIT)
        finally:
            release.set()
    assert result.is_error
    kinds = [e.type for e in system.session.events]
    assert kinds == [
        "tool/call",
        "tool/code-dispatch-start",
        "tool/code-dispatch",
        "tool/result",
    ]
    (end,) = [e for e in system.session.events if e.type == "tool/code-dispatch"]
    assert "aborted" in str(end.data)


def test_a_stop_from_elsewhere_while_an_inside_stop_is_starting_waits_for_it() -> None:
    # The inside stop() runs the abort callbacks before it starts the thread that finishes
    # it (a slow one widens that moment): a stop() from another thread then must wait for
    # the end of the stop, not fail or return early.
    before = set(threading.enumerate())
    system = ToolSystem.start(code_runtime=None)
    watching, stopping = threading.Event(), threading.Event()

    async def sibling(args: Any, ctx: Any) -> Any:
        ctx.signal.add_callback(lambda reason: time.sleep(0.5))  # a slow abort callback
        watching.set()
        await ctx.signal
        return [block("saw the abort")]

    def stops(args: Any, ctx: Any) -> Any:
        stopping.set()
        system.stop()
        return [block("stopped")]

    system.tools.register(fixture("sibling", sibling))
    system.tools.register(fixture("stops", stops))
    outside: list[Any] = []

    def stop_from_elsewhere() -> None:
        stopping.wait(WAIT)
        time.sleep(0.1)
        try:
            system.stop()
            outside.append([t.name for t in threading.enumerate() if t.name == "dsh-tools-stop"])
        except BaseException as exc:
            outside.append(exc)

    with ThreadPoolExecutor(2) as pool:
        sibling_call = ExecuteCall(call_id="s1", name="sibling", arguments={})
        pending = pool.submit(asyncio.run, system.execute_async(sibling_call))
        assert watching.wait(WAIT)
        other = pool.submit(stop_from_elsewhere)
        result = system.execute(ExecuteCall(call_id="c1", name="stops", arguments={}))
        other.result(WAIT)
        pending.result(WAIT)
    assert outside == [[]]  # returned without error, once the stop had ended
    assert text_of(result) == "Error: tool call aborted"
    assert sorted(result_ids(system)) == ["c1", "s1"]
    assert [t for t in threading.enumerate() if t not in before] == []


@pytest.mark.parametrize("entry", ["execute_async", "execute_batch"])
def test_an_async_body_that_watches_its_signal_but_outlasts_the_stop_is_cancelled(
    monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    # A body that reads its signal is trusted to end itself when it aborts; one that then
    # keeps waiting through stop()'s grace is cancelled all the same, and its call settles.
    monkeypatch.setattr(system_module, "STOP_GRACE_S", 0.2)
    system = ToolSystem.start(code_runtime=None)
    entered = threading.Event()
    ends: list[str] = []

    async def watches_then_ignores(args: Any, ctx: Any) -> Any:
        ctx.signal.add_callback(lambda reason: None)
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            ends.append("cancelled")
            raise
        return [block("never")]

    system.tools.register(fixture("t", watches_then_ignores))
    one = ExecuteCall(call_id="c1", name="t", arguments={})
    with ThreadPoolExecutor(1) as pool:
        if entry == "execute_async":
            pending = pool.submit(asyncio.run, system.execute_async(one))
        else:
            turn = ExecuteBatch(calls=[ToolCall("c1", "t", "{}")])
            pending = pool.submit(lambda: system.execute_batch(turn).results[0])
        assert entered.wait(WAIT)
        system.stop()
        result = pending.result(WAIT)
    assert text_of(result) == "Error: tool call aborted"
    assert ends == ["cancelled"]
    assert result_ids(system) == ["c1"]


def test_on_stop_closers_run_once_the_calls_settle_last_attached_first(logs: Logs) -> None:
    system = ToolSystem.start(code_runtime=None)
    closed: list[str] = []
    system.on_stop(lambda: closed.append("first"))
    detach = system.on_stop(lambda: closed.append("detached"))
    system.on_stop(lambda: 1 / 0)  # logged; the others still run
    system.on_stop(lambda: closed.append("last"))
    detach()
    system.stop()
    system.stop()
    assert closed == ["last", "first"]
    assert logs.warnings == ["closing a resource at stop() failed"]
    with pytest.raises(RuntimeError, match="the tool system is stopped"):
        system.on_stop(lambda: None)
    with (
        ToolSystem.start(code_runtime=None) as other,
        pytest.raises(TypeError, match=r"^on_stop\(\) takes a callable, got int$"),
    ):
        other.on_stop(3)  # type: ignore[arg-type]


CTRL_C_BEFORE_THE_FIRST_STEP = """
import asyncio, contextlib, os, signal
from dsh_tools import ExecuteCall, ToolSystem
from dsh_tools.pipeline import _loop


async def nap(args, ctx):
    await asyncio.sleep(0.2)
    return "woke"


arming = _loop._woken_by_signals


@contextlib.contextmanager
def ctrl_c_as_the_wait_is_armed(loop, *rest):
    # The first time only: the Ctrl-C lands after the call's task was made, before it ran.
    _loop._woken_by_signals = arming
    os.kill(os.getpid(), signal.SIGINT)
    with arming(loop, *rest):
        yield


_loop._woken_by_signals = ctrl_c_as_the_wait_is_armed
system = ToolSystem.start()
system.tools.register(a_tool("nap", nap))
try:
    system.execute(ExecuteCall(call_id="a", name="nap", arguments={}))
except KeyboardInterrupt:
    print("interrupted")
print([e.data["error"]["code"] for e in system.session.events if e.type == "tool/result"])
system.stop()
"""


def test_ctrl_c_before_a_driven_calls_first_step_settles_it_and_propagates() -> None:
    # A call whose body waits skips the loop's trial pass: a Ctrl-C between making its task and
    # the task's first step used to cancel it unstarted, which left the loop running for ever.
    done = run_script(CTRL_C_BEFORE_THE_FIRST_STEP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted", "['ABORTED']"]
    assert "never awaited" not in done.stderr


def test_an_owners_closers_run_first_last_attached_first_despite_a_failing_one(
    system: ToolSystem, logs: Logs
) -> None:
    order: list[str] = []
    scope = system.agent("worker")
    scope.tools.register(echo())

    def failing() -> None:
        order.append("failing")
        raise RuntimeError("closer broke")

    scope.on_close(lambda: order.append(f"first, echo visible: {scope.tools.names()}"))
    scope.on_close(failing)
    detach = scope.on_close(lambda: order.append("detached"))
    detach()
    scope.close()
    assert order == ["failing", "first, echo visible: ['echo']"]
    assert system.agent("worker").tools.names() == []
    assert "closing a resource with its owner failed" in logs.warnings
    with pytest.raises(TypeError, match="on_close\\(\\) takes a callable, got int"):
        system.plugin("p").on_close(1)  # type: ignore[arg-type]


def test_a_close_that_a_ctrl_c_cuts_short_is_finished_by_the_next_close(
    system: ToolSystem,
) -> None:
    # A Ctrl-C in a closer (a plugin's server slow to shut down) left the plugin marked
    # closed with its other closers never run and its tools registered: every later close()
    # returned at once, and the model went on seeing tools whose server was gone.
    plugin = system.plugin("server")
    plugin.tools.register(echo())
    closed: list[str] = []
    plugin.on_close(lambda: closed.append("connection"))
    pressed = [False]

    def interrupted() -> None:
        if not pressed[0]:
            pressed[0] = True
            raise KeyboardInterrupt
        closed.append("server")

    plugin.on_close(interrupted)
    with pytest.raises(KeyboardInterrupt):
        plugin.close()
    assert plugin.closed
    plugin.close()
    assert closed == ["connection"]  # the interrupted closer is not run twice
    assert system.tools.names() == []
    plugin.close()  # closed for good now
    assert closed == ["connection"]


def test_on_close_refuses_a_closer_once_its_owner_is_closed(system: ToolSystem) -> None:
    # Attached after close() took its closers, it would never run: an MCP server registered
    # in a scope closed meanwhile would outlive the scope. Refused instead, as on_stop() is.
    scope = system.agent("gone")
    scope.close()
    closed: list[str] = []
    with pytest.raises(RuntimeError, match='agent scope "gone" is closed'):
        scope.on_close(lambda: closed.append("late"))
    plugin = system.plugin("gone")
    plugin.close()
    with pytest.raises(RuntimeError, match='plugin "gone" is closed'):
        plugin.on_close(lambda: closed.append("late"))
    scope.close()
    plugin.close()
    assert closed == []


def test_a_closer_that_needs_arguments_is_refused_when_attached(system: ToolSystem) -> None:
    # Called without arguments at stop() or close(), it would only log a warning and leave
    # what it was to close open.
    def close_connection(connection: object) -> None:
        pass

    needs = "takes a callable of no arguments; " + close_connection.__qualname__ + " needs some"
    with pytest.raises(TypeError) as error:
        system.on_stop(close_connection)
    assert str(error.value) == "on_stop() " + needs
    with pytest.raises(TypeError) as error:
        system.agent("A").on_close(close_connection)
    assert str(error.value) == "on_close() " + needs
    with pytest.raises(TypeError, match=r"^on_close\(\) takes a callable, got int$"):
        system.plugin("git").on_close(3)  # type: ignore[arg-type]


def test_stop_runs_every_closer_while_another_thread_detaches_others() -> None:
    # A closer detached by another thread as stop() took the one attached last made the take
    # find nothing (the key gone) or fail (the dict changed size under its look), and stop()
    # then ran none of the closers still attached: a plugin's server, say, left running.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches between any two steps, as under load
    try:
        for _ in range(20):
            system = ToolSystem.start(ToolsConfig(mode="native"))
            ran: list[int] = []
            for number in range(50):
                system.on_stop(partial(ran.append, number))
            churn = [system.on_stop(lambda: None) for _ in range(2000)]
            go = threading.Event()

            def detach_churn(churn: list[Callable[[], None]] = churn, go: threading.Event = go):
                go.wait()
                for detach in churn:
                    detach()

            detacher = threading.Thread(target=detach_churn)
            detacher.start()
            system.on_stop(go.set)  # attached last: the first closer stop() runs
            system.stop()
            detacher.join()
            assert sorted(ran) == list(range(50))
    finally:
        sys.setswitchinterval(interval)
