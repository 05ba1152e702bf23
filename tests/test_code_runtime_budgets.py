"""Code runtime, real subprocess: budgets, the output ledger, hostile frames and containment
and the fault cases (after each, nothing is left behind)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import dsh_tools.codebridge._run_calls as run_calls
from dsh_tools.actors import AbortController, FrozenDict, FrozenList
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunFailure,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    CodeSandbox,
    ErrorClassSpec,
    SubprocessCodeRuntime,
)
from dsh_tools.codebridge._frames import (
    Call,
    Done,
    DoneError,
    Log,
    OutputLimit,
    encode_frame,
)
from dsh_tools.codebridge._pool import Slot, _alive
from dsh_tools.codebridge._run_calls import OUT_OF_SEQUENCE_LIMIT
from dsh_tools.codebridge._tokens import ArrayMarker, ObjectMarker, tokenize
from dsh_tools.codebridge._worker_api import access_expression

TOOL_CALL_ERROR = ErrorClassSpec("ToolCallError", "tool_name")
DEFAULT_LIMIT = "outer output exceeded 67108864 bytes"


def tools(**functions: Any) -> list[BindingNamespace]:
    return [BindingNamespace("tools", functions, TOOL_CALL_ERROR)]


def run(
    runtime: SubprocessCodeRuntime,
    program: str,
    bindings: list[BindingNamespace] | None = None,
    abort: AbortController | None = None,
) -> CodeRunResult:
    request = CodeRunRequest(program, bindings or [], None if abort is None else abort.signal)
    return asyncio.run(runtime.run(request))


def failure(result: CodeRunResult) -> tuple[str, str]:
    assert result.error is not None, result
    return result.error.kind, result.error.message


def counted_bytes(result: CodeRunResult) -> int:
    """What the ledger counts: the logs array plus the value or the failure message."""
    size = len(msgspec.json.encode(list(result.logs)))
    if result.error is not None:
        return size + len(msgspec.json.encode(result.error.message))
    if result.value is not msgspec.UNSET:
        return size + len(msgspec.json.encode(result.value))
    return size


def limit_result(cap: int) -> CodeRunResult:
    return CodeRunResult(
        [], error=CodeRunFailure("output-limit", f"outer output exceeded {cap} bytes")
    )


def forge(*frames: Any) -> bytes:
    """Frames a hostile program writes to the worker->host channel itself."""
    return b"".join(bytes(encode_frame(frame)) for frame in frames)


def raw_frame(body: bytes) -> bytes:
    return len(body).to_bytes(8, "big") + body


def writes_then(forged: bytes, rest: str) -> str:
    return f"import os\nos.write(4, {forged!r})\n{rest}"


def with_idle_workers(own: SubprocessCodeRuntime) -> None:
    """Run once, then wait (up to 30 s) until two pre-forked workers are idle."""
    assert run(own, "return 1").value == 1
    own.warm_up()
    deadline = time.monotonic() + 30
    while own.idle_workers < 2 and time.monotonic() < deadline:
        time.sleep(0.01)


def members_of(session: int) -> list[str]:
    """Processes whose session or process group is ``session`` (state letter and pid)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if session in (int(fields[2]), int(fields[3])):
            found.append(f"{entry}:{fields[0].decode()}")
    return found


def assert_nothing_left(session: int) -> None:
    """Every process of the run's session is gone (zombies included, so reaped).

    The template reaps killed grandchildren on its own schedule, which the test cannot await;
    poll /proc for a bounded time instead.
    """
    deadline = time.monotonic() + 5
    while members := members_of(session):
        if time.monotonic() > deadline:
            pytest.fail(f"processes left behind in session {session}: {members}")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def runtime_with() -> Iterator[Callable[..., SubprocessCodeRuntime]]:
    made: dict[tuple[tuple[str, Any], ...], SubprocessCodeRuntime] = {}

    def make(**settings: Any) -> SubprocessCodeRuntime:
        # These tests find the run's processes on the host by the pids the program reports,
        # which only the process isolation shares with the host (the sandbox's PID namespace
        # renumbers them); the sandbox tests check the same budgets under the default.
        settings.setdefault("isolation", "process")
        settings.setdefault("max_wall_ms", 30_000)
        settings.setdefault("compute_ms", 10_000)
        key = tuple(sorted(settings.items()))
        if key not in made:
            made[key] = SubprocessCodeRuntime(CodeRuntimeConfig(**settings))
        return made[key]

    yield make
    for runtime in made.values():
        runtime.close()


@pytest.fixture(scope="module")
def runtime(runtime_with: Callable[..., SubprocessCodeRuntime]) -> SubprocessCodeRuntime:
    return runtime_with()


# --- budgets --------------------------------------------------------------------------------------


def test_a_hot_loop_exhausts_the_compute_budget_despite_pending_calls(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    async def never(value: Any) -> Any:
        await asyncio.Event().wait()

    program = "import os\nprint(os.getpid())\ntools.slow({})\nwhile True:\n    pass"
    result = run(runtime_with(compute_ms=300), program, tools(slow=never))
    kind, message = failure(result)
    assert kind == "timeout"
    assert message.startswith("compute budget exhausted (300ms busy)")  # and the line
    assert_nothing_left(int(result.logs[0]))


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_budgets_too_large_for_a_kernel_limit_mean_no_limit(isolation: str) -> None:
    # 1e25 ms of CPU and 1e30 MB are finite, so accepted, and past what setrlimit takes.
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(isolation=isolation, compute_ms=1e25, max_memory_mb=1e30)
    )
    try:
        # A few tenths of a second of CPU: a limit that wrapped in the kernel's arithmetic
        # (2**62 s counted in nanoseconds) fires within the first ones.
        result = run(runtime, "x = 0\nfor i in range(3_000_000):\n    x += i\nreturn x")
    finally:
        runtime.close()
    assert result.error is None, result.error
    assert result.value == sum(range(3_000_000))


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_integer_budgets_past_64_bits_mean_no_limit_as_the_float_ones_do(isolation: str) -> None:
    # Accepted at construction, these once failed every run as its boot frame was encoded.
    config = CodeRuntimeConfig(
        isolation=isolation, compute_ms=10**30, max_wall_ms=10**30, max_memory_mb=10**30
    )
    assert (config.compute_ms, config.max_wall_ms, config.max_memory_mb) == (1e30, 1e30, 1e30)
    runtime = SubprocessCodeRuntime(config)
    try:
        result = run(runtime, "return 6 * 7")
    finally:
        runtime.close()
    assert result.error is None, result.error
    assert result.value == 42


def test_waiting_on_a_slow_binding_accrues_no_compute(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    async def slow(value: Any) -> Any:
        await asyncio.sleep(1.5)
        return "slow-done"

    result = run(runtime_with(compute_ms=1000), "return await tools.slow({})", tools(slow=slow))
    assert result == CodeRunResult([], value="slow-done")


def test_the_wall_clock_ceiling_ends_a_run_that_waits_forever(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    pids: list[int] = []

    async def never(value: Any) -> Any:
        pids.append(value["pid"])
        await asyncio.Event().wait()

    program = "import os\nawait tools.never({'pid': os.getpid()})"
    result = run(runtime_with(max_wall_ms=400), program, tools(never=never))
    kind, message = failure(result)
    assert kind == "timeout"
    assert message in (
        "wall-clock ceiling reached (400ms)",
        "wall-clock ceiling reached (400ms) with 1 call unanswered: tools.never",
    )
    # A loaded machine may reach the ceiling before the program reaches its call; when it
    # did reach it, the worker that made it is gone.
    for pid in pids:
        assert_nothing_left(pid)


def test_a_run_that_reaches_its_wall_ceiling_names_the_calls_it_was_waiting_for(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    # "wall-clock ceiling reached" alone did not say which of its tools a program had waited
    # on for the whole of it.
    started = 0
    both_started = asyncio.Event()

    async def never(value: Any) -> Any:
        nonlocal started
        started += 1
        if started == 2:
            both_started.set()
        await asyncio.Event().wait()

    async def ready(value: Any) -> Any:
        await both_started.wait()
        return True

    program = """
print("fetching")
waiting = asyncio.gather(tools.never({}), tools.never({}), tools["slow-too"]({}))
await tools.ready({})
await waiting
"""
    bindings = tools(never=never, ready=ready, **{"slow-too": never})
    result = run(runtime_with(max_wall_ms=1500), program, bindings)
    assert result.logs == ["fetching"]
    assert failure(result) == (
        "timeout",
        "wall-clock ceiling reached (1500ms) with 3 calls unanswered: tools.never (2),"
        ' tools["slow-too"]',
    )


def test_the_sandbox_ends_a_run_at_its_wall_ceiling_when_the_hosts_loop_stands_still(
    tmp_path: Path,
) -> None:
    # The host's timer lives on the run's event loop; a harness that stops that loop for good
    # (without closing it) leaves the timer unrun. The sandbox's init holds the ceiling anyway.
    beat = tmp_path / "beat"
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_wall_ms=1500, sandbox=CodeSandbox(write=[str(tmp_path)]))
    )
    loop = asyncio.new_event_loop()
    try:
        program = (
            "import time\nfor n in range(100_000):\n"
            f"    open({str(beat)!r}, 'w').write(str(n))\n    time.sleep(0.02)"
        )
        task = loop.create_task(runtime.run(CodeRunRequest(program, [])))

        async def until_it_beats() -> None:
            while not beat.exists() and not task.done():
                await asyncio.sleep(0.01)

        loop.run_until_complete(until_it_beats())
        assert beat.exists(), f"the run ended before its program began: {task.result()}"
        time.sleep(4.0)  # the loop stands still: ceiling (1.5 s) + backstop (1 s), and more
        last = beat.read_text()
        time.sleep(0.2)  # ten beats, had the program lived on
        assert beat.read_text() == last
        result = loop.run_until_complete(task)  # the loop runs again: the run has ended
        kind, message = failure(result)
        assert kind == "timeout"
        # Where the program was, as the init asked the worker before it ended the run (which
        # a worker not scheduled in time leaves unsaid).
        assert re.fullmatch(
            r"wall-clock ceiling reached \(1500ms\)(; the program was at line [234])?", message
        ), message
    finally:
        runtime.close()
        loop.close()


def test_abort_ends_a_hot_loop(runtime: SubprocessCodeRuntime) -> None:
    async def scenario() -> CodeRunResult:
        controller = AbortController()
        loop = asyncio.get_running_loop()

        async def ready(value: Any) -> Any:
            loop.call_later(0.15, controller.abort, "user-cancel")
            return None

        program = "import os\nprint(os.getpid())\nawait tools.ready({})\nwhile True:\n    pass"
        request = CodeRunRequest(program, tools(ready=ready), controller.signal)
        return await runtime.run(request)

    result = asyncio.run(scenario())
    assert result.error == CodeRunFailure("abort", "user-cancel")
    assert_nothing_left(int(result.logs[0]))


def test_a_pre_aborted_signal_fails_without_spawning() -> None:
    fresh = SubprocessCodeRuntime()
    controller = AbortController()
    controller.abort("too-late")
    try:
        assert run(fresh, "return 1", abort=controller) == CodeRunResult(
            [], error=CodeRunFailure("abort", "too-late")
        )
        assert fresh.template_pid is None
    finally:
        fresh.close()


def test_failures_before_spawn_go_through_the_ledger(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    controller = AbortController()
    controller.abort("r" * 1000)
    assert run(runtime_with(max_output_bytes=64), "return 1", abort=controller) == limit_result(64)
    tiny = run(runtime_with(max_output_bytes=4), "def f(:")
    assert failure(tiny)[0] == "output-limit"
    assert counted_bytes(tiny) <= 4


def test_an_abort_during_a_call_wins_and_the_late_resolution_is_dropped(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def scenario() -> tuple[CodeRunResult, list[Any]]:
        loop = asyncio.get_running_loop()
        problems: list[Any] = []
        loop.set_exception_handler(lambda _loop, context: problems.append(context))
        controller = AbortController()
        resolved = asyncio.Event()

        async def late(value: Any) -> Any:
            loop.call_later(0.1, controller.abort, "cancel-now")
            await asyncio.sleep(0.4)
            resolved.set()
            return "too late"

        request = CodeRunRequest("return await tools.late({})", tools(late=late), controller.signal)
        result = await runtime.run(request)
        await asyncio.wait_for(resolved.wait(), 5)
        await asyncio.sleep(0)  # let the dropped reply's task finish
        return result, problems

    result, problems = asyncio.run(scenario())
    assert result == CodeRunResult([], error=CodeRunFailure("abort", "cancel-now"))
    assert problems == []


def test_unbounded_allocation_fails_the_run_and_the_next_run_works(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    limited = runtime_with(max_memory_mb=64)
    program = """
import os
print(os.getpid())
hoard = []
while True:
    hoard.append(bytearray(1 << 20))
"""
    result = run(limited, program)
    kind, message = failure(result)
    assert (kind == "exception" and "MemoryError" in message) or kind == "worker-exit"
    assert_nothing_left(int(result.logs[0]))
    assert run(limited, 'return "alive"').value == "alive"


# --- the exact ledger -----------------------------------------------------------------------------


def test_a_value_fits_the_cap_to_the_byte(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    assert run(runtime_with(max_output_bytes=7), 'return "€"').value == "€"
    assert failure(run(runtime_with(max_output_bytes=6), 'return "€"'))[0] == "output-limit"
    program = 'print("abc")\nreturn "xy"'
    assert run(runtime_with(max_output_bytes=11), program) == CodeRunResult(["abc"], value="xy")
    over = run(runtime_with(max_output_bytes=10), program)
    assert failure(over)[0] == "output-limit"
    assert counted_bytes(over) <= 10


def test_an_exception_message_fits_the_cap_to_the_byte(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    program = 'print("abc")\nraise ValueError("xy")'
    uncapped = run(runtime_with(), program)
    _, message = failure(uncapped)
    cap = 7 + len(msgspec.json.encode(message))
    assert run(runtime_with(max_output_bytes=cap), program) == uncapped
    assert failure(run(runtime_with(max_output_bytes=cap - 1), program))[0] == "output-limit"


def test_a_flood_of_logs_ends_as_output_limit_with_a_bounded_prefix(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    result = run(
        runtime_with(max_output_bytes=300), 'for i in range(1000):\n    print("spam line", i)'
    )
    assert result.error == CodeRunFailure("output-limit", "outer output exceeded 300 bytes")
    assert result.value is msgspec.UNSET
    assert result.logs
    assert len(msgspec.json.encode(list(result.logs))) < 300
    assert counted_bytes(result) <= 300


def test_an_oversized_first_entry_keeps_its_fitting_prefix(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    result = run(runtime_with(max_output_bytes=96), 'print("start-" + \'😀"\\\\\\n\' * 100)')
    assert failure(result)[0] == "output-limit"
    assert len(result.logs) == 1
    assert result.logs[0].startswith("start-")
    assert counted_bytes(result) <= 96


@pytest.mark.parametrize("program", ['return "y" * 10000', 'raise ValueError("x" * 1_000_000)'])
def test_an_oversized_completion_is_exactly_output_limit(
    runtime_with: Callable[..., SubprocessCodeRuntime], program: str
) -> None:
    assert run(runtime_with(max_output_bytes=64), program) == limit_result(64)


def test_the_default_cap_is_64_mib_to_the_byte(runtime: SubprocessCodeRuntime) -> None:
    fits = run(runtime, 'return "x" * 67_108_860')
    assert fits.error is None
    assert fits.value == "x" * 67_108_860
    assert run(runtime, 'return "x" * 67_108_861') == limit_result(67_108_864)


def test_native_output_goes_through_the_same_ledger(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    program = """
import os, time
os.write(1, b"a" * 20)
time.sleep(0.05)
os.write(1, b"b" * 100)
time.sleep(0.05)
return 1
"""
    result = run(runtime_with(max_output_bytes=80), program)
    assert failure(result)[0] == "output-limit"
    # Each read of the pipe is one entry; a loaded machine may read both writes at once.
    text = "".join(result.logs)
    assert text.startswith("a" * 20 + "b")
    assert ("a" * 20 + "b" * 100).startswith(text)


def test_native_output_is_captured_until_the_end_after_a_forged_done(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    forged = forge(Done(value=["done"]))
    program = f"""
import os
payload = b"".join(b"%05d|" % i for i in range(20_000))
os.write(1, payload)
os.write(4, {forged!r})
while True:
    pass
"""
    result = run(runtime_with(max_output_bytes=200_000), program)
    assert result.error is None
    assert result.value == "done"
    assert "".join(result.logs) == "".join(f"{i:05d}|" for i in range(20_000))


# --- hostile frames -------------------------------------------------------------------------------


def test_hostile_frames_are_ignored_or_answered(runtime: SubprocessCodeRuntime) -> None:
    calls: list[Any] = []

    async def real(value: Any) -> Any:
        calls.append(value)
        return "still-works"

    forged = forge(
        Call(1000, "tools", "unknown", [ObjectMarker([])]),
        Call(1001, "nope", "real", [ObjectMarker([])]),
        Call(1002, "tools", "__class__", [ObjectMarker([])]),
        Call(1002, "tools", "real", [ObjectMarker([])]),  # a duplicate id: never answered
        Done(error=DoneError("bogus-kind", "x")),
    ) + b"".join(
        raw_frame(body)
        for body in (
            b"\xc1",  # undecodable
            b"junk frame body",
            msgspec.msgpack.encode(["Log", 5]),
            msgspec.msgpack.encode(["Done", None, ["exception", 5]]),
            msgspec.msgpack.encode(["Call", "id", "tools", "real", []]),
        )
    )
    result = run(runtime, writes_then(forged, "return await tools.real({})"), tools(real=real))
    assert result == CodeRunResult([], value="still-works")
    assert calls == [{}]


def test_call_ids_far_out_of_sequence_fail_the_run_before_the_host_remembers_too_many(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The host remembers every id it has answered above the worker's own sequence (1, 2, ...)
    # so as never to answer one twice; a program forging ids past that sequence would grow
    # that memory without end, so past OUT_OF_SEQUENCE_LIMIT of them the run fails. (The calls
    # name a real binding, which answers at once: calls of no binding, or calls left in
    # flight, end the run sooner.)
    program = f"""
import os, msgspec
frames = bytearray()
for i in range({OUT_OF_SEQUENCE_LIMIT + 1}):
    body = msgspec.msgpack.encode(["Call", 1_000_000 + i, "tools", "wait", [["object", []]]])
    frames += len(body).to_bytes(8, "big") + body
    if len(frames) > 1 << 20:
        os.write(4, frames)
        frames = bytearray()
os.write(4, frames)
await asyncio.sleep(60)
"""

    def wait(args: Any) -> int:
        return 1

    kind, message = failure(run(runtime, program, tools(wait=wait)))
    assert (kind, message) == (
        "frame-limit",
        f"the program used more than {OUT_OF_SEQUENCE_LIMIT} binding call ids out of sequence",
    )
    assert run(runtime, "return 1").value == 1


def test_unknown_bindings_are_answered_with_the_dotted_name(
    runtime: SubprocessCodeRuntime,
) -> None:
    replies = _replies_to(runtime, [Call(500, "tools", "nope", [None]), Call(501, "x", "y", [1])])
    assert replies == [
        [500, False, None, 'unknown binding "tools.nope"'],
        [501, False, None, 'unknown binding "x.y"'],
    ]


def _replies_to(runtime: SubprocessCodeRuntime, calls: list[Call]) -> Any:
    """Send forged calls and read the host's replies directly (bypassing the worker's reader)."""
    forged = forge(*calls)
    program = f"""
import os, msgspec
asyncio.get_running_loop().remove_reader(3)
os.set_blocking(3, True)
os.write(4, {forged!r})
replies = []
for _ in range({len(calls)}):
    size = int.from_bytes(os.read(3, 8), "big")
    body = b""
    while len(body) < size:
        body += os.read(3, size - len(body))
    frame = msgspec.msgpack.decode(body)
    replies.append(frame[1:])
return replies
"""
    invoked: list[Any] = []

    async def real(value: Any) -> Any:
        invoked.append(value)
        return "invoked"

    result = run(runtime, program, tools(real=real))
    assert invoked == []
    assert result.error is None, result
    return result.value


def test_forged_logs_cannot_bypass_the_cap(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    forged = forge(*[Log("l" * 100)] * 50, Done(value=["v" * 10_000]))
    result = run(runtime_with(max_output_bytes=200), writes_then(forged, "while True:\n    pass"))
    assert failure(result)[0] == "output-limit"
    assert counted_bytes(result) <= 200


@pytest.mark.parametrize(
    ("cap", "frame"),
    [
        (64, Done(value=["x" * 100_000])),
        (64, Done(error=DoneError("exception", "€" * 1000))),
        (64, Done(value=[1], error=DoneError("output-limit", "anything"))),
        (67_108_864, OutputLimit()),
    ],
    ids=["huge-value", "huge-message", "forged-limit-done", "forged-output-limit"],
)
def test_forged_completions_are_checked_against_the_ledger(
    runtime_with: Callable[..., SubprocessCodeRuntime], cap: int, frame: Any
) -> None:
    program = writes_then(forge(frame), "while True:\n    pass")
    assert run(runtime_with(max_output_bytes=cap), program) == limit_result(cap)


def test_a_forged_negative_zero_completion_is_invalid_output(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = writes_then(forge(Done(value=[-0.0])), "while True:\n    pass")
    message = "program completion must be lossless JSON: negative zero"
    assert run(runtime, program) == CodeRunResult(
        [], error=CodeRunFailure("invalid-output", message)
    )


def test_when_a_forged_done_has_value_and_error_the_error_wins(
    runtime: SubprocessCodeRuntime,
) -> None:
    forged = forge(Done(value=["value"], error=DoneError("exception", "the error")))
    program = writes_then(forged, "while True:\n    pass")
    assert run(runtime, program) == CodeRunResult(
        [], error=CodeRunFailure("exception", "the error")
    )


def test_a_forged_3000_deep_completion_decodes_exactly(
    runtime: SubprocessCodeRuntime,
) -> None:
    tokens: list[Any] = [ArrayMarker(1)] * 3000 + ["core"]
    program = writes_then(forge(Done(value=tokens)), "while True:\n    pass")
    result = run(runtime, program)
    assert result.error is None
    assert tokenize(result.value, (dict, FrozenDict), (list, FrozenList)) == tokens


def test_forged_calls_with_invalid_arguments_are_refused_without_invoking(
    runtime: SubprocessCodeRuntime,
) -> None:
    replies = _replies_to(
        runtime,
        [
            Call(700, "tools", "real", [-0.0]),
            Call(701, "tools", "real", [ArrayMarker(3), 1]),
            Call(702, "tools", "real", [ObjectMarker(["a", "a"]), 1, 2]),
            Call(703, "tools", "real", []),
            Call(704, "tools", "real", [1, 2]),
        ],
    )
    problems = [
        "negative zero",
        "a container announces more children than remain",
        "repeated object key",
        "empty token list",
        "tokens left over after the value",
    ]
    assert replies == [
        [call_id, False, None, f"binding arguments must be lossless JSON: {problem}"]
        for call_id, problem in zip(range(700, 705), problems, strict=True)
    ]


# --- frame-limit: frames over max_frame_bytes -----------------------------------------------------


def test_a_worker_frame_over_the_cap_fails_the_run_before_its_body_is_read(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    calls: list[Any] = []

    async def sink(value: Any) -> Any:
        calls.append(value)
        return None

    program = 'import os\nprint(os.getpid())\nawait tools.sink({"blob": "z" * 200_000})'
    result = run(runtime_with(max_frame_bytes=100_000), program, tools(sink=sink))
    kind, message = failure(result)
    assert kind == "frame-limit"
    assert message.startswith("worker frame of ")
    assert message.endswith("exceeds max_frame_bytes (100000)")
    assert calls == []
    assert_nothing_left(int(result.logs[0]))


@pytest.mark.parametrize(
    ("program", "what"),
    [
        ('await tools.sink({"blob": "z" * 200_000})', "the arguments of tools.sink"),
        ('await tools["my-sink"]({"blob": "z" * 200_000})', 'the arguments of tools["my-sink"]'),
        ('return "z" * 200_000', "the program's result"),
        ('print("z" * 200_000)', "one log entry: a print or a write to sys.stdout or sys.stderr"),
        (
            'import sys\nsys.stderr.write("z" * 200_000)',
            "one log entry: a print or a write to sys.stdout or sys.stderr",
        ),
        ('raise ValueError("z" * 200_000)', "the program's uncaught exception"),
    ],
    ids=["arguments", "quoted-arguments", "result", "print", "write", "exception"],
)
def test_a_frame_over_the_cap_is_named_by_what_it_would_have_carried(
    runtime_with: Callable[..., SubprocessCodeRuntime], program: str, what: str
) -> None:
    # The program is told which of the things it sends was too large, and the run keeps
    # what it printed before.
    async def sink(value: Any) -> Any:
        raise AssertionError("a call over the cap never reaches its binding")

    result = run(
        runtime_with(max_frame_bytes=100_000, max_output_bytes=1_000_000),
        'print("before")\n' + program,
        tools(sink=sink, **{"my-sink": sink}),
    )
    kind, message = failure(result)
    assert kind == "frame-limit"
    assert re.fullmatch(
        rf"worker frame of \d+ bytes \({re.escape(what)}\) exceeds max_frame_bytes \(100000\)",
        message,
    ), message
    assert list(result.logs) == ["before"]


def test_a_reply_frame_over_the_cap_fails_the_run(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    async def huge(value: Any) -> Any:
        return "h" * 200_000

    result = run(
        runtime_with(max_frame_bytes=100_000), "return await tools.huge({})", tools(huge=huge)
    )
    kind, message = failure(result)
    assert kind == "frame-limit"
    # The model is told which of its calls brought back too much.
    assert re.fullmatch(
        r"reply frame of \d+ bytes \(the result of tools\.huge\) exceeds max_frame_bytes "
        r"\(100000\)",
        message,
    ), message


def test_only_a_reply_over_the_cap_spells_out_the_call_it_answers(
    runtime_with: Callable[..., SubprocessCodeRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    # How the program wrote the call is wanted only by the frame-limit message: the calls
    # whose replies fit, all of them but that one, do not spell it out.
    spelt: list[str] = []

    def access(global_name: str, name: str) -> str:
        spelt.append(name)
        return access_expression(global_name, name)

    monkeypatch.setattr(run_calls, "access_expression", access)

    async def small(value: Any) -> Any:
        return value

    async def huge(value: Any) -> Any:
        return "h" * 200_000

    program = (
        "await asyncio.gather(*[tools.small({'n': n}) for n in range(50)])\n"
        "return await tools.huge({})"
    )
    result = run(runtime_with(max_frame_bytes=100_000), program, tools(small=small, huge=huge))
    kind, message = failure(result)
    assert kind == "frame-limit"
    assert "(the result of tools.huge)" in message
    assert spelt == ["huge"]


# --- faults: whatever the program does, one result and nothing left behind --------------------


def test_fault_a_worker_that_kills_itself_is_a_worker_exit(runtime: SubprocessCodeRuntime) -> None:
    result = run(runtime, "import os\nprint(os.getpid())\nos.kill(os.getpid(), 9)")
    assert result.error == CodeRunFailure(
        "worker-exit", "worker exited with signal SIGKILL before completing"
    )
    assert_nothing_left(int(result.logs[0]))


def test_fault_garbage_on_the_frame_pipe_fails_the_run(runtime: SubprocessCodeRuntime) -> None:
    program = "import os\nprint(os.getpid())\nos.write(4, b'garbage!' * 8)\nawait asyncio.sleep(60)"
    result = run(runtime, program)
    kind, message = failure(result)
    assert kind == "frame-limit"
    assert message.startswith("worker frame of ")
    assert_nothing_left(int(result.logs[0]))


def test_fault_child_processes_are_killed_with_the_run(runtime: SubprocessCodeRuntime) -> None:
    program = """
import os, subprocess
child = subprocess.Popen(["sleep", "60"])
print(os.getpid(), child.pid)
return "spawned"
"""
    result = run(runtime, program)
    assert result.value == "spawned"
    worker, child = (int(pid) for pid in result.logs[0].split())
    assert_nothing_left(worker)
    assert not os.path.exists(f"/proc/{child}")


def test_fault_child_processes_of_an_aborted_run_are_killed(
    runtime: SubprocessCodeRuntime,
) -> None:
    async def scenario() -> CodeRunResult:
        controller = AbortController()

        async def ready(value: Any) -> Any:
            controller.abort("stop")
            return None

        program = """
import os, subprocess
child = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(os.getpid(), child.pid)
await tools.ready({})
while True:
    pass
"""
        return await runtime.run(CodeRunRequest(program, tools(ready=ready), controller.signal))

    result = asyncio.run(scenario())
    assert result.error == CodeRunFailure("abort", "stop")
    worker, child = (int(pid) for pid in result.logs[0].split())
    assert_nothing_left(worker)
    assert not os.path.exists(f"/proc/{child}")


def test_fault_an_escaped_grandchild_holding_the_pipe_cannot_hang_settlement(
    runtime: SubprocessCodeRuntime,
) -> None:
    program = """
import os, subprocess
child = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(child.pid)
return "escaped"
"""
    started = time.monotonic()
    result = run(runtime, program)
    try:
        assert result.value == "escaped"
        assert time.monotonic() - started < 5
    finally:
        os.kill(int(result.logs[0]), signal.SIGKILL)


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_fault_a_closed_channel_ends_the_run_as_a_worker_exit(
    runtime_with: Callable[..., SubprocessCodeRuntime], isolation: str
) -> None:
    # No Done can come once the worker's channel to the host is closed: the run ends then, not
    # at its wall ceiling (30 s here), and its slot is free for the next run.
    async def echo(value: Any) -> Any:
        return value

    program = """
import os, time
os.close(4)  # where the worker's frames go
try:
    await tools.echo({})
except ToolCallError as e:
    print(e.message)
time.sleep(60)
return "unreachable"
"""
    result = run(runtime_with(isolation=isolation), program, tools(echo=echo))
    assert result == CodeRunResult(
        [], error=CodeRunFailure("worker-exit", "worker closed its channel before completing")
    )


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_fault_a_program_that_closes_the_channel_from_the_host_ends_its_run_quietly(
    runtime_with: Callable[..., SubprocessCodeRuntime], isolation: str
) -> None:
    async def echo(value: Any) -> Any:
        return value

    program = """
import os
os.close(3)  # where the host's replies would come from
await tools.echo({})
return "unreachable"
"""
    result = run(runtime_with(isolation=isolation), program, tools(echo=echo))
    assert result == CodeRunResult(
        [], error=CodeRunFailure("worker-exit", "worker exited with code 70 before completing")
    )


def test_fault_cancelling_the_caller_kills_the_worker(runtime: SubprocessCodeRuntime) -> None:
    async def scenario() -> int:
        announced: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def pid(value: Any) -> Any:
            announced.set_result(value)
            return None

        program = "import os\nawait tools.pid(os.getpid())\nwhile True:\n    pass"
        task = asyncio.create_task(runtime.run(CodeRunRequest(program, tools(pid=pid))))
        worker = await asyncio.wait_for(announced, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return worker

    assert_nothing_left(asyncio.run(scenario()))


def killed(template: int) -> None:
    """Wait until the template ``os.kill`` just killed has exited, which sends its workers
    their parent-death signal: no worker of it reads a program written after this. One that
    read its program may have run some of it, and its run fails rather than run it again."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{template}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return  # reaped already (between the open and the read, for the second)
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return
        time.sleep(0.001)


def test_fault_a_template_killed_as_it_prefork_workers_fails_no_run() -> None:
    # Killed right after a run asked it for a replacement worker: that worker may be half
    # started (its cgroups removed with the template before it joined them, say) when the
    # next run takes it. Such a worker ran nothing of the program, so the run tries again.
    own = SubprocessCodeRuntime()
    try:
        for attempt in range(5):
            assert run(own, f"return {attempt}").value == attempt
            # A run may have been served by a worker pre-forked before the last kill; the
            # replacement template starts with the pool's next spawn, moments later.
            deadline = time.monotonic() + 10
            while own.template_pid is None and time.monotonic() < deadline:
                time.sleep(0.001)
            template = own.template_pid
            assert template is not None
            os.kill(template, signal.SIGKILL)
            killed(template)
            assert run(own, "return 'next'").value == "next"
    finally:
        own.close()


def children_of(parent: int) -> list[int]:
    """The pids of ``parent``'s live children, read from ``/proc``."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def test_fault_a_worker_gone_before_its_program_is_tried_again_when_its_template_dies() -> None:
    # The run's pre-forked worker is gone before it read its program (its init held stopped,
    # so only the channel's end of file tells the host); the host hangs up, and then the
    # template dies. Hanging up closed the channel that showed the program unread, so the
    # run failed; tried again, the next attempt was ended by the first one's wait for the
    # init's answer. Nothing of the program ran: the run tries again and completes.
    own = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=30_000))
    try:
        with_idle_workers(own)
        template = own.template_pid
        assert template is not None
        # Each run's init is the first process of its own PID namespace: the template's child
        # as root, otherwise the child of the template's child.
        own_namespace = os.readlink(f"/proc/{template}/ns/pid")
        # Read until the tree shows them: on a loaded machine a worker the runtime counts as
        # idle may not be in /proc as the init's child yet.
        deadline = time.monotonic() + 30
        while True:
            inits: list[int] = []
            for child in children_of(template):
                for pid in [child, *children_of(child)]:
                    with contextlib.suppress(OSError):  # gone meanwhile
                        if os.readlink(f"/proc/{pid}/ns/pid") != own_namespace:
                            inits.append(pid)
                            break
            workers = [worker for init in inits for worker in children_of(init)]
            if (inits and workers) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert inits and workers
        for init in inits:
            os.kill(init, signal.SIGSTOP)  # the template's death kills it all the same
        for worker in workers:
            os.kill(worker, signal.SIGKILL)
        program = "import time\ntime.sleep(0.6)\nreturn 'next'"

        async def scenario() -> CodeRunResult:
            task = asyncio.create_task(own.run(CodeRunRequest(program, [])))
            await asyncio.sleep(0.1)
            os.kill(template, signal.SIGKILL)
            return await asyncio.wait_for(task, 30)

        result = asyncio.run(scenario())
        assert result.value == "next", result
        killed(template)
    finally:
        own.close()


def test_fault_a_template_killed_as_its_worker_gets_the_program_does_not_run_it_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The template dies just after the host wrote the program to its pre-forked worker. A
    # worker under process isolation outlives its template: it read the program (or would,
    # from the channel the host left to it) and ran it while the run tried again on a fresh
    # worker, so the program ran twice. The run ends that worker first, then tries again only
    # if it never read the program, and otherwise fails.
    log = tmp_path / "ran"
    own = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process", max_wall_ms=60_000))
    try:
        with_idle_workers(own)
        write_early = Slot.write_early

        def then_the_template_dies(slot: Slot, data: bytes) -> int:
            written = write_early(slot, data)
            template = own.template_pid
            assert template is not None
            os.kill(template, signal.SIGKILL)
            killed(template)
            return written

        monkeypatch.setattr(Slot, "write_early", then_the_template_dies)
        program = f"import time\nopen({str(log)!r}, 'a').write('ran\\n')\ntime.sleep(0.5)\nreturn 2"
        result = run(own, program)
        monkeypatch.undo()
        time.sleep(1)  # a worker left running would have written its mark by now
        if result.error is None:
            assert result.value == 2
            assert log.read_text() == "ran\n"  # tried again: the first worker ran nothing
        else:
            assert result.error.kind == "worker-exit", result
            # Run once at most: its mark written once, or never (then there is no file).
            assert (log.read_text() if log.exists() else "") in ("", "ran\n")
        assert run(own, "return 3").value == 3
    finally:
        own.close()


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_fault_a_template_killed_while_a_silent_program_runs_does_not_run_it_again(
    tmp_path: Path, isolation: str
) -> None:
    # A program that had neither printed nor called a tool when its template was killed
    # looked like a worker that never started, and the run tried again on a new template:
    # the program ran twice (its writes twice, its wall time from the start again). Its
    # worker had read its program, so the run fails instead.
    marks = tmp_path / "marks"
    marks.mkdir()
    log = marks / "ran"
    settings: dict[str, Any] = {"max_wall_ms": 60_000}
    if isolation == "sandbox":
        settings["sandbox"] = CodeSandbox(write=[str(marks)])
    else:
        settings["isolation"] = "process"
    own = SubprocessCodeRuntime(CodeRuntimeConfig(**settings))
    try:
        with_idle_workers(own)  # the run takes a pre-forked worker, as most runs do
        program = f"import time\nopen({str(log)!r}, 'a').write('ran\\n')\ntime.sleep(5)\nreturn 2"

        async def scenario() -> CodeRunResult:
            task = asyncio.create_task(own.run(CodeRunRequest(program, [])))
            while not (log.exists() and log.read_text()):
                assert not task.done(), task.result()
                await asyncio.sleep(0.01)
            template = own.template_pid
            assert template is not None
            os.kill(template, signal.SIGKILL)
            return await asyncio.wait_for(task, 30)

        result = asyncio.run(scenario())
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert log.read_text() == "ran\n"
        assert run(own, "return 3").value == 3
    finally:
        own.close()


def test_a_pooled_slot_whose_template_died_before_forking_it_is_not_idle() -> None:
    # The template took the spawn request and was killed before it forked the worker: the
    # slot's status pipe shows nothing, and need never reach end of file (another process of
    # that template may still hold its write end). It must not pass for an idle worker, or the
    # pool stays "full" of such slots and never starts a new template.
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    pipes = [os.pipe() for _ in range(2)]
    try:
        for read_end, _write_end in pipes:
            os.set_blocking(read_end, False)
        dead_slot = Slot({"status": pipes[0][0]}, exited)
        waiting_slot = Slot({"status": pipes[1][0]}, living)
        assert not _alive(dead_slot)
        assert _alive(waiting_slot)
        # A worker that did report is not handed out either once its template has exited: a
        # sandboxed one is dying with it, and a run could not tell whether it read its
        # program before it died.
        os.write(pipes[0][1], b"P\x00\x00\x00\x07")
        assert not _alive(dead_slot)
        os.write(pipes[1][1], b"P\x00\x00\x00\x08")
        assert _alive(waiting_slot)
    finally:
        living.kill()
        living.wait()
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)


def test_fault_a_dead_template_is_replaced_for_the_next_run() -> None:
    own = SubprocessCodeRuntime()
    try:
        assert run(own, "return 1").value == 1
        template = own.template_pid
        assert template is not None
        os.kill(template, signal.SIGKILL)
        killed(template)
        assert run(own, "return 2").value == 2
        # A worker the dead template had already forked may serve that run; the one after
        # finds every such worker gone and starts a new template.
        assert run(own, "return 3").value == 3
        assert own.template_pid not in (None, template)
    finally:
        own.close()
    assert own.template_pid is None


def test_disposal_stops_the_template() -> None:
    own = SubprocessCodeRuntime()
    assert run(own, "return 1").value == 1
    template = own.template_pid
    assert template is not None
    own.close()
    assert not os.path.exists(f"/proc/{template}")


def test_a_cpu_limit_death_is_the_compute_timeout(
    runtime_with: Callable[..., SubprocessCodeRuntime],
) -> None:
    # The kernel backstop (RLIMIT_CPU) fires before the host's sampler would here, because the
    # program lowers its own limit: the death by SIGXCPU is still reported as the budget.
    program = """
import resource
resource.setrlimit(resource.RLIMIT_CPU, (1, 2))
while True:
    pass
"""
    result = run(runtime_with(compute_ms=20_000), program)
    assert result.error == CodeRunFailure("timeout", "compute budget exhausted (20000ms busy)")


def test_a_template_that_cannot_start_is_a_worker_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_tools.codebridge import _template_host

    monkeypatch.setattr(_template_host, "_TEMPLATE_PATH", "/nonexistent/template.py")
    broken = SubprocessCodeRuntime()
    try:
        assert run(broken, "return 1") == CodeRunResult(
            [], error=CodeRunFailure("worker-exit", "worker error: the template process exited")
        )
    finally:
        broken.close()


def test_disposal_reaches_runs_on_other_threads_event_loops() -> None:
    import threading

    own = SubprocessCodeRuntime()
    ready = threading.Event()
    results: list[CodeRunResult] = []

    async def announce(value: Any) -> Any:
        ready.set()
        return None

    def in_thread() -> None:
        program = "await tools.announce({})\nwhile True:\n    pass"
        results.append(run(own, program, tools(announce=announce)))

    thread = threading.Thread(target=in_thread)
    thread.start()
    assert ready.wait(10)
    own.close()
    thread.join(10)
    assert results == [CodeRunResult([], error=CodeRunFailure("abort", "runtime disposed"))]


HOST_SCRIPT = """
import asyncio
from dsh_tools.codebridge import (
    BindingNamespace, CodeRunRequest, CodeRuntimeConfig, SubprocessCodeRuntime,
)

async def main():
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process"))

    async def announce(worker):
        print(runtime.template_pid, worker, flush=True)

    program = "import os\\nawait tools.announce(os.getpid())\\nwhile True:\\n    pass"
    await runtime.run(CodeRunRequest(program, [BindingNamespace("tools", {"announce": announce})]))

asyncio.run(main())
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :].split()[0] != b"Z"


def test_fault_a_host_that_dies_takes_its_template_and_workers_along() -> None:
    import subprocess
    import sys

    host = subprocess.Popen([sys.executable, "-c", HOST_SCRIPT], stdout=subprocess.PIPE)
    assert host.stdout is not None
    template, worker = (int(pid) for pid in host.stdout.readline().split())
    host.kill()
    host.wait()
    host.stdout.close()
    # The template sees its control socket close, kills and reaps its workers, then exits
    # (left as a zombie of whoever adopts it, which the test cannot await: poll /proc).
    deadline = time.monotonic() + 5
    while _running(template) or os.path.exists(f"/proc/{worker}"):
        assert time.monotonic() < deadline, "template or worker outlived the host"
        time.sleep(0.005)


def test_a_harness_lower_locked_memory_limit_is_kept() -> None:
    # Runs may lock 64 KiB a process, or less where the harness allows less: its lower soft
    # limit was raised to 64 KiB for them.
    script = """
import asyncio, json, resource
from dsh_tools.codebridge import CodeRunRequest, CodeRuntimeConfig, SubprocessCodeRuntime
hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
resource.setrlimit(resource.RLIMIT_MEMLOCK, (16384, hard))
runtime = SubprocessCodeRuntime(CodeRuntimeConfig(isolation="process"))
program = "import resource\\nreturn list(resource.getrlimit(resource.RLIMIT_MEMLOCK))"
try:
    print(json.dumps(asyncio.run(runtime.run(CodeRunRequest(program, []))).value))
finally:
    runtime.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    soft, hard = msgspec.json.decode(done.stdout)
    assert soft == 16384
    assert hard <= 64 * 1024
