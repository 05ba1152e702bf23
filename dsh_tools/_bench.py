"""The measurements behind ``dsh-tools bench`` and the scripts in ``benchmarks/``.

- per-call cost of ``system.execute`` (trivial tool; no hooks, and four pass-through hooks:
  pre-execute, guard, execute wrapper, post-execute) beside a bare pykka ask round trip;
- dispatcher pool: 1,000 calls of a 5 ms concurrency-safe tool with a pool of 10 (``async``
  body and plain-function body), and trivial calls per second with pools of 1, 10 and 100;
- Code Mode: an empty ``run_code`` end to end, and a program making 100 trivial calls under
  ``asyncio.gather``, each taken from a warm pool (runs ``POOL_REFILL_PAUSE_S`` apart, as a
  model's turns keep them, so the single-use worker a run used has been replaced) and back to
  back (each run then also waits for, and shares the 2 cores with, the fork of its
  replacement);
- the peak resident memory of ``dsh-tools demo`` (run as a child process).

Each figure is the median of several runs.
"""

from __future__ import annotations

import asyncio
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
from .registry import ToolOutput, define_tool

__all__ = [
    "POOL_REFILL_PAUSE_S",
    "measure_code_mode",
    "measure_demo_rss",
    "measure_pipeline",
    "measure_pool",
]

Progress = Callable[[str], None]

POOL_REFILL_PAUSE_S = 0.02
"""Untimed pause between the warm-pool runs of Code Mode (and of its peer): long enough for
the pool to have replaced the single-use worker the previous run took."""


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


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

        def run_calls() -> float:
            us = _per_call_us(calls, lambda: system.execute(call))
            system.session.clear()
            return us

        if progress:
            progress("system.execute, no hooks")
        figures["execute_no_hooks_us"] = _median(runs, run_calls)
        system.tools.on_pre_execute(_pass_pre)
        system.tools.guard(lambda exec: None)
        system.tools.on_execute(_pass_wrap)
        system.tools.on_post_execute(_pass_post)
        for _ in range(2000):
            system.execute(call)
        if progress:
            progress("system.execute, four pass-through hooks")
        figures["execute_four_hooks_us"] = _median(runs, run_calls)
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


def _sleep_thread(args: Any, ctx: Any) -> int:
    time.sleep(0.005)
    return int(args["n"])


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

        for label, name in (("async", "sleep_async"), ("thread", "sleep_thread")):
            if progress:
                progress(f"1,000 x 5 ms {label} calls, pool 10")
            timed(_batch(name, 100, 10))
            batch = _batch(name, 1000, 10)
            figures[f"pool10_sleep5ms_{label}_ms"] = _median(runs, partial(timed, batch)) * 1e3
        for pool in (1, 10, 100):
            if progress:
                progress(f"trivial calls, pool {pool}")
            batch = _batch("trivial", 2000, pool)
            timed(batch)
            seconds = _median(runs, partial(timed, batch))
            figures[f"trivial_pool{pool}_calls_per_s"] = 2000 / seconds
    return figures


def measure_code_mode(runs: int = 20, progress: Progress | None = None) -> dict[str, float]:
    """Milliseconds for an empty ``run_code`` and for 100 trivial gathered calls."""
    figures: dict[str, float] = {}
    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(_int_tool("trivial", lambda args, ctx: int(args["n"])))
        programs = {
            "run_code_empty_ms": "return None",
            "run_code_100_calls_ms": (
                "values = await asyncio.gather("
                "*[tools.trivial({'n': i}) for i in range(100)])\nreturn sum(values)"
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
            if progress:
                progress(key.replace("_ms", "").replace("_", " "))
            for _ in range(3):
                once(program, POOL_REFILL_PAUSE_S)
            figures[key] = _median(runs, partial(once, program, POOL_REFILL_PAUSE_S))
            back_to_back = key.replace("_ms", "_back_to_back_ms")
            figures[back_to_back] = _median(runs, partial(once, program, 0.0))
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
