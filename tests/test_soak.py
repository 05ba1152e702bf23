"""Soak: 100,000 calls with random aborts; nothing leaks (threads, processes, descriptors,
memory) and every call ends with exactly one result and one ``tool/result`` event."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import threading
from typing import Any

import pytest

from dsh_tools import (
    AbortController,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _children() -> list[str]:
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def _tools() -> list[Any]:
    def fast(args: Any, ctx: Any) -> int:
        controller = args.get("abort_self")
        if controller:
            ctx.defer_context({"content": [{"type": "text", "text": "note"}], "source": {}})
        return int(args["n"])

    async def waits(args: Any, ctx: Any) -> int:
        if args.get("wait"):
            await asyncio.sleep(0)
        if ctx.signal.aborted:
            raise RuntimeError("saw the abort")
        return int(args["n"])

    def int_output() -> ToolOutput:
        return ToolOutput(
            schema={"type": "integer"},
            render=lambda args, value: [{"type": "text", "text": str(value)}],
        )

    params = {
        "n": {"type": "integer", "required": True},
        "abort_self": {"type": "boolean"},
        "wait": {"type": "boolean"},
    }
    return [
        define_tool(
            name="fast",
            description="fast",
            parameters=params,
            output=int_output(),
            execute=fast,
            is_concurrency_safe=lambda a: True,
        ),
        define_tool(
            name="waits",
            description="waits",
            parameters=params,
            output=int_output(),
            execute=waits,
            is_concurrency_safe=lambda a: a["n"] % 3 != 0,
        ),
    ]


@pytest.mark.timeout(300)
def test_calls_with_random_aborts_leak_nothing() -> None:
    rng = random.Random(20261202)
    gc.collect()
    threads_before = threading.active_count()
    fds_before = _open_fds()
    system = ToolSystem.start(ToolsConfig(max_parallel_tool_calls=8), code_runtime=None)
    results = 0
    try:
        for definition in _tools():
            system.tools.register(definition)
        aborters: list[AbortController] = []

        async def maybe_abort(exec: Any, next: Any) -> Any:
            if aborters and exec.call_id.endswith("7"):
                aborters[-1].abort("soak abort")
            return await next()

        system.tools.on_pre_execute(maybe_abort)
        rss_baseline = 0
        total = 100_000
        done = 0
        while done < total:
            if rng.random() < 0.2:
                controller = AbortController()
                aborters[:] = [controller]
                size = rng.randint(1, 40)
                calls = [
                    ToolCall(
                        f"b{done + i}",
                        rng.choice(["fast", "waits"]),
                        f'{{"n": {done + i}, "wait": {"true" if rng.random() < 0.5 else "false"}}}',
                    )
                    for i in range(size)
                ]
                outcome = system.execute_batch(
                    ExecuteBatch(
                        calls=calls, signal=controller.signal, max_parallel=rng.randint(1, 8)
                    )
                )
                assert len(outcome.results) == size
                results += size
                done += size
            else:
                signal = None
                if rng.random() < 0.1:
                    controller = AbortController()
                    controller.abort("pre-aborted")
                    signal = controller.signal
                result = system.execute(
                    ExecuteCall(
                        call_id=f"c{done}",
                        name=rng.choice(["fast", "waits"]),
                        arguments={"n": done, "abort_self": rng.random() < 0.05},
                        signal=signal,
                    )
                )
                assert result.is_error == (signal is not None) or result.is_error is False
                results += 1
                done += 1
            events = system.session.events
            calls_logged = sum(1 for e in events if e.type == "tool/call")
            results_logged = sum(1 for e in events if e.type == "tool/result")
            assert calls_logged == results_logged
            if len(events) > 20_000:
                system.session.clear()
            if rss_baseline == 0 and done > 20_000:
                gc.collect()
                rss_baseline = _rss_kb()
        assert results == done
        gc.collect()
        growth_kb = _rss_kb() - rss_baseline
        assert growth_kb < 40_000, f"resident memory grew by {growth_kb} KiB"
    finally:
        system.stop()
    gc.collect()
    assert threading.active_count() == threads_before
    # The calling thread keeps one private event loop: an epoll descriptor, its self-pipe and,
    # on the main thread, the socket pair its waits point Python's signal wakeup at.
    assert _open_fds() <= fds_before + 5
    assert _children() == []
    fds_after_first = _open_fds()
    with ToolSystem.start(code_runtime=None) as again:
        for definition in _tools():
            again.tools.register(definition)
        for n in range(1000):
            again.execute(ExecuteCall(call_id=f"again-{n}", name="waits", arguments={"n": n}))
    gc.collect()
    assert _open_fds() == fds_after_first
    assert threading.active_count() == threads_before
