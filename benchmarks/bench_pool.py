"""Dispatcher pool throughput through ``ExecuteBatch``.

- 1,000 calls of a concurrency-safe tool that sleeps 5 ms, pool of 10: wall time against the
  ideal 500 ms, once with an ``async def`` body (``asyncio.sleep``) and once with a plain
  function body on a worker thread (``time.sleep``).
- calls per second for a trivial concurrency-safe tool with pools of 1, 10 and 100.

Run: ``python benchmarks/bench_pool.py [--runs R] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from dsh_tools import ExecuteBatch, ToolCall, ToolOutput, ToolSystem, define_tool

try:
    from benchmarks._common import median_of
except ImportError:  # run as a script from the benchmarks folder
    from _common import median_of  # type: ignore[no-redef]


def _tool(name: str, execute: Callable[..., Any]) -> Any:
    return define_tool(
        name=name,
        description=f"{name} benchmark tool",
        parameters={"n": {"type": "integer", "required": True}},
        output=ToolOutput(
            schema={"type": "integer"},
            render=lambda args, value: [{"type": "text", "text": str(value)}],
        ),
        execute=execute,
        is_concurrency_safe=lambda args: True,
    )


async def _sleep_async(args: Any, ctx: Any) -> int:
    await asyncio.sleep(0.005)
    return int(args["n"])


def _sleep_thread(args: Any, ctx: Any) -> int:
    time.sleep(0.005)
    return int(args["n"])


def _batch(name: str, calls: int, pool: int) -> ExecuteBatch:
    return ExecuteBatch(
        calls=[ToolCall(f"c{i}", name, '{"n": %d}' % i) for i in range(calls)],
        max_parallel=pool,
    )


def measure(
    runs: int, progress: Callable[[str], None] | None = None, calls: int = 1000
) -> dict[str, float]:
    """Median figures: ``*_ms`` wall times and ``*_calls_per_s`` throughputs."""
    figures: dict[str, float] = {}
    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(_tool("sleep_async", _sleep_async))
        system.tools.register(_tool("sleep_thread", _sleep_thread))
        system.tools.register(_tool("trivial", lambda args, ctx: int(args["n"])))

        def timed(batch: ExecuteBatch) -> float:
            start = time.perf_counter()
            outcome = system.execute_batch(batch)
            elapsed = time.perf_counter() - start
            system.session.clear()
            assert all(not r.is_error for r in outcome.results), "benchmark calls failed"
            return elapsed

        for label, name in (("async", "sleep_async"), ("thread", "sleep_thread")):
            if progress:
                progress(f"{calls} x 5 ms {label} calls, pool 10")
            timed(_batch(name, 100, 10))
            figures[f"sleep5ms_{label}_ms"] = (
                median_of(runs, lambda n=name: timed(_batch(n, calls, 10))) * 1000
            )
        for pool in (1, 10, 100):
            if progress:
                progress(f"trivial calls, pool {pool}")
            batch = _batch("trivial", 2000, pool)
            timed(batch)
            seconds = median_of(runs, lambda b=batch: timed(b))
            figures[f"trivial_pool{pool}_calls_per_s"] = 2000 / seconds
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.runs, None if args.json else lambda m: print("..", m, flush=True))
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"1,000 x 5 ms async calls, pool 10:  {figures['sleep5ms_async_ms']:7.1f} ms (bar 540)")
    print(f"1,000 x 5 ms thread calls, pool 10: {figures['sleep5ms_thread_ms']:7.1f} ms (bar 540)")
    for pool in (1, 10, 100):
        print(f"trivial calls, pool {pool:>3}: {figures[f'trivial_pool{pool}_calls_per_s']:9.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
