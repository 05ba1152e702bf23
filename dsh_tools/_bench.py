"""The measurements behind ``dsh-tools bench`` and the scripts in ``benchmarks/``.

- per-call cost of ``system.execute`` (trivial tool; no hooks, and four pass-through hooks:
  pre-execute, guard, execute wrapper, post-execute), each beside the same call run through the
  pipeline on a per-thread event loop (``run_until_complete``, how ``execute`` ran it before it
  drove the coroutine itself), the same call as ``system.ref.ask(ExecuteCall(...))`` and a
  bare pykka ask round trip;
- dispatcher pool: 1,000 calls of a 5 ms concurrency-safe tool with a pool of 10 (``async``
  body and plain-function body), each beside its floor measured in the same run (an asyncio
  loop running the same sleeps ten at a time; a bare ``ThreadPoolExecutor(10)`` doing the same
  sleeps), and trivial calls per second with pools of 1, 10 and 100;
- Code Mode: an empty ``run_code`` end to end, and a program making 100 trivial calls under
  ``asyncio.gather``, each taken from a warm pool (runs ``POOL_REFILL_PAUSE_S`` apart, as a
  model's turns keep them, so the single-use worker a run used has been replaced) and back to
  back (each run then also waits for, and shares the 2 cores with, the fork of its
  replacement);
- the code runtime alone running the same two programs, its binding answering at once: the
  floor every ``run_code`` pays (worker, sandbox, frames) before a tool runs;
- ``assemble_prompt`` for 2,000 tools (in ``both`` mode: schemas and the SDK section), the first
  call and a call after it with the registry unchanged;
- the peak resident memory of ``dsh-tools demo`` (run as a child process).

Each figure is the median of several runs; a ``*_ratio`` figure divides two figures of the same
run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pykka

from ._system import ToolSystem
from .actors import ExecuteBatch, ExecuteCall, ToolCall
from .actors._config import ToolsConfig
from .pipeline._loop import new_pool_loop
from .registry import ToolOutput, define_tool

__all__ = [
    "POOL_REFILL_PAUSE_S",
    "measure_assembly",
    "measure_code_mode",
    "measure_demo_rss",
    "measure_pipeline",
    "measure_pool",
    "measure_runtime_floor",
]

Progress = Callable[[str], None]

POOL_REFILL_PAUSE_S = 0.02
"""Untimed pause between the warm-pool runs of Code Mode (and of its peer): long enough for
the pool to have replaced the single-use worker the previous run took."""


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _paired(
    runs: int, measure: Callable[[], float], peer: Callable[[], float]
) -> tuple[float, float]:
    """Medians of ``measure`` and ``peer`` run in turns, so that both see the same load."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(runs):
        ours.append(measure())
        theirs.append(peer())
    return statistics.median(ours), statistics.median(theirs)


def _per_call_us(calls: int, fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _int_tool(name: str, execute: Callable[..., Any], *, safe: bool = True) -> Any:
    return define_tool(
        name=name,
        description=f"{name} benchmark tool",
        parameters={"n": {"type": "integer", "required": True}},
        output=ToolOutput(
            schema={"type": "integer"},
            render=lambda args, value: [{"type": "text", "text": str(value)}],
        ),
        execute=execute,
        is_concurrency_safe=(lambda args: True) if safe else None,
    )


class _EchoActor(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


async def _pass_pre(exec: Any, next: Any) -> Any:
    return await next()


async def _pass_wrap(exec: Any, next: Any) -> Any:
    return await next()


async def _pass_post(exec: Any, result: Any, next: Any) -> Any:
    return await next()


def measure_pipeline(
    calls: int = 20_000, runs: int = 5, progress: Progress | None = None
) -> dict[str, float]:
    """Microseconds per ``system.execute`` call, with and without four pass-through hooks."""
    figures: dict[str, float] = {}
    with ToolSystem.start(ToolsConfig(), code_runtime=None) as system:
        system.tools.register(_int_tool("trivial", lambda args, ctx: args["n"]))
        call = ExecuteCall(call_id="c1", name="trivial", arguments={"n": 1})
        for _ in range(2000):
            system.execute(call)

        loop = asyncio.new_event_loop()

        def run_calls() -> float:
            us = _per_call_us(calls, lambda: system.execute(call))
            system.session.clear()
            return us

        def run_on_loop() -> float:
            pipeline = system.pipeline
            us = _per_call_us(
                calls, lambda: loop.run_until_complete(pipeline.run(call, inline=True))
            )
            system.session.clear()
            return us

        def run_asks() -> float:
            us = _per_call_us(calls // 4, lambda: system.ref.ask(call))
            system.session.clear()
            return us

        try:
            for label, key in (("no hooks", "no_hooks"), ("four pass-through hooks", "four_hooks")):
                if key == "four_hooks":
                    system.tools.on_pre_execute(_pass_pre)
                    system.tools.guard(lambda exec: None)
                    system.tools.on_execute(_pass_wrap)
                    system.tools.on_post_execute(_pass_post)
                for _ in range(2000):
                    system.execute(call)
                    loop.run_until_complete(system.pipeline.run(call, inline=True))
                if progress:
                    progress(f"system.execute, {label}")
                direct, on_loop = _paired(runs, run_calls, run_on_loop)
                figures[f"execute_{key}_us"] = direct
                figures[f"execute_{key}_on_loop_us"] = on_loop
                figures[f"execute_{key}_ratio"] = direct / on_loop
                figures[f"ref_ask_{key}_us"] = _median(runs, run_asks)
        finally:
            loop.close()
    ref = _EchoActor.start()
    try:
        if progress:
            progress("bare pykka ask round trip")
        for _ in range(2000):
            ref.ask(1)
        figures["pykka_ask_us"] = _median(runs, lambda: _per_call_us(calls, lambda: ref.ask(1)))
    finally:
        ref.stop()
    return figures


async def _sleep_async(args: Any, ctx: Any) -> int:
    await asyncio.sleep(0.005)
    return int(args["n"])


async def _trivial_async(args: Any, ctx: Any) -> int:
    return int(args["n"])


def _sleep_thread(args: Any, ctx: Any) -> int:
    time.sleep(0.005)
    return int(args["n"])


def _asyncio_floor_s(calls: int = 1000, pool: int = 10) -> float:
    """Seconds for an event loop (the kind batches run on) to run ``calls`` 5 ms sleeps,
    ``pool`` at a time."""

    async def sleeps() -> None:
        gate = asyncio.Semaphore(pool)

        async def one() -> None:
            async with gate:
                await asyncio.sleep(0.005)

        await asyncio.gather(*(one() for _ in range(calls)))

    loop = new_pool_loop()
    try:
        start = time.perf_counter()
        loop.run_until_complete(sleeps())
        return time.perf_counter() - start
    finally:
        loop.close()


def _thread_pool_floor_s(calls: int = 1000, pool: int = 10) -> float:
    """Seconds for a bare ``ThreadPoolExecutor(pool)`` to run ``calls`` 5 ms sleeps."""
    with concurrent.futures.ThreadPoolExecutor(pool) as executor:
        executor.submit(time.sleep, 0).result()  # start-up is not part of the figure
        start = time.perf_counter()
        for future in [executor.submit(time.sleep, 0.005) for _ in range(calls)]:
            future.result()
        return time.perf_counter() - start


def _batch(name: str, calls: int, pool: int) -> ExecuteBatch:
    return ExecuteBatch(
        calls=[ToolCall(f"c{i}", name, f'{{"n": {i}}}') for i in range(calls)],
        max_parallel=pool,
    )


def measure_pool(runs: int = 5, progress: Progress | None = None) -> dict[str, float]:
    """Wall time of 1,000 x 5 ms safe calls with a pool of 10; trivial calls per second."""
    figures: dict[str, float] = {}
    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(_int_tool("sleep_async", _sleep_async))
        system.tools.register(_int_tool("sleep_thread", _sleep_thread))
        system.tools.register(_int_tool("trivial", lambda args, ctx: int(args["n"])))

        def timed(batch: ExecuteBatch) -> float:
            start = time.perf_counter()
            outcome = system.execute_batch(batch)
            elapsed = time.perf_counter() - start
            system.session.clear()
            if any(r.is_error for r in outcome.results):
                raise RuntimeError("a benchmark call failed")
            return elapsed

        floors = {"async": _asyncio_floor_s, "thread": _thread_pool_floor_s}
        for label, name in (("async", "sleep_async"), ("thread", "sleep_thread")):
            if progress:
                progress(f"1,000 x 5 ms {label} calls, pool 10")
            timed(_batch(name, 100, 10))
            batch = _batch(name, 1000, 10)
            ours, floor = _paired(runs, partial(timed, batch), floors[label])
            figures[f"pool10_sleep5ms_{label}_ms"] = ours * 1e3
            figures[f"pool10_sleep5ms_{label}_floor_ms"] = floor * 1e3
            figures[f"pool10_sleep5ms_{label}_ratio"] = ours / floor
        for pool in (1, 10, 100):
            if progress:
                progress(f"trivial calls, pool {pool}")
            batch = _batch("trivial", 2000, pool)
            timed(batch)
            seconds = _median(runs, partial(timed, batch))
            figures[f"trivial_pool{pool}_calls_per_s"] = 2000 / seconds
    return figures


def measure_code_mode(runs: int = 20, progress: Progress | None = None) -> dict[str, float]:
    """Milliseconds for an empty ``run_code`` and for 100 trivial gathered calls: of a plain
    function body (the bar's figure; each body hops to a body thread and back) and, as
    ``run_code_100_async_calls*``, of an ``async`` body (no thread hop; the shape of Monty's
    external function)."""
    figures: dict[str, float] = {}
    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(_int_tool("trivial", lambda args, ctx: int(args["n"])))
        system.tools.register(_int_tool("trivial_async", _trivial_async))
        programs = {
            "run_code_empty_ms": "return None",
            "run_code_100_calls_ms": (
                "values = await asyncio.gather("
                "*[tools.trivial({'n': i}) for i in range(100)])\nreturn sum(values)"
            ),
            "run_code_100_async_calls_ms": (
                "values = await asyncio.gather("
                "*[tools.trivial_async({'n': i}) for i in range(100)])\nreturn sum(values)"
            ),
        }
        counter = iter(range(10**9))

        def once(program: str, pause: float) -> float:
            call = ExecuteCall(
                call_id=f"bench-{next(counter)}",
                name="run_code",
                arguments={"code": program, "description": "Benchmark program"},
            )
            start = time.perf_counter()
            result = system.execute(call)
            elapsed = time.perf_counter() - start
            system.session.clear()
            if result.is_error:
                raise RuntimeError(f"benchmark program failed: {result.content}")
            time.sleep(pause)
            return elapsed * 1e3

        for key, program in programs.items():
            if progress and key != "run_code_100_async_calls_ms":  # one step per bar figure
                progress(key.replace("_ms", "").replace("_", " "))
            for _ in range(3):
                once(program, POOL_REFILL_PAUSE_S)
            figures[key] = _median(runs, partial(once, program, POOL_REFILL_PAUSE_S))
            back_to_back = key.replace("_ms", "_back_to_back_ms")
            figures[back_to_back] = _median(runs, partial(once, program, 0.0))
    figures.update(measure_runtime_floor(runs))
    return figures


def _answered_at_once(arguments: Any) -> asyncio.Future[Any]:
    # What a binding hands back when its result is known at once: a settled future.
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(arguments["n"])
    return future


def measure_runtime_floor(runs: int = 20) -> dict[str, float]:
    """Milliseconds for the empty and the 100-call program run by the code runtime alone,
    with a binding that answers at once (no pipeline): the worker, the sandbox and the frames,
    which every ``run_code`` pays before any tool runs. Runs are ``POOL_REFILL_PAUSE_S`` apart."""
    from .codebridge import (
        BindingNamespace,
        CodeRunRequest,
        ErrorClassSpec,
        SubprocessCodeRuntime,
    )

    bindings = {"trivial": _answered_at_once}
    namespace = BindingNamespace(
        "tools", bindings, ErrorClassSpec("ToolCallError", "tool_name"), bindings
    )
    programs = {
        "runtime_empty_ms": "return None",
        "runtime_100_calls_ms": (
            "values = await asyncio.gather("
            "*[tools.trivial({'n': i}) for i in range(100)])\nreturn sum(values)"
        ),
    }

    async def measure() -> dict[str, float]:
        runtime = SubprocessCodeRuntime()
        try:
            figures: dict[str, float] = {}
            for key, program in programs.items():
                request = CodeRunRequest(program, [namespace])
                samples = []
                for count in range(runs + 3):  # three untimed runs first
                    start = time.perf_counter()
                    result = await runtime.run(request)
                    elapsed = time.perf_counter() - start
                    if result.error is not None:
                        raise RuntimeError(f"benchmark program failed: {result.error.message}")
                    if count >= 3:
                        samples.append(elapsed * 1e3)
                    await asyncio.sleep(POOL_REFILL_PAUSE_S)
                figures[key] = statistics.median(samples)
            return figures
        finally:
            await runtime.dispose()

    return asyncio.run(measure())


def measure_assembly(
    tools: int = 2000, runs: int = 5, progress: Progress | None = None
) -> dict[str, float]:
    """Milliseconds for ``assemble_prompt`` over ``tools`` tools: first call, unchanged after."""
    if progress:
        progress(f"assemble_prompt, {tools:,} tools")
    figures: dict[str, float] = {}
    with ToolSystem.start(ToolsConfig(mode="both")) as system:
        for i in range(tools):
            system.tools.register(_int_tool(f"tool_{i:04d}", lambda args, ctx: int(args["n"])))
        start = time.perf_counter()
        system.assemble_prompt()
        figures["assemble_2000_first_ms"] = (time.perf_counter() - start) * 1e3

        def again() -> float:
            start = time.perf_counter()
            for _ in range(100):
                system.assemble_prompt()
            return (time.perf_counter() - start) / 100 * 1e3

        figures["assemble_2000_cached_ms"] = _median(runs, again)
    return figures


def measure_demo_rss(progress: Progress | None = None) -> dict[str, float]:
    """Peak resident memory (MB) of the host process running ``dsh-tools demo``.

    The demo runs in a fresh child interpreter that reports its own peak (``VmHWM``: unlike
    ``ru_maxrss`` it starts afresh at ``exec``, so the benchmark process's own size does not
    leak in); Code Mode worker processes are separate processes and not counted.
    """
    if progress:
        progress("resident memory of the demo")
    script = (
        "import contextlib, io, sys\n"
        "from dsh_tools.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(['demo'])\n"
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "print(peak[0].split()[1])\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120
    )
    return {"demo_rss_mb": int(done.stdout.split()[-1]) / 1024}
