"""Latency of the subprocess code runtime.

Prints the median end-to-end time of ``SubprocessCodeRuntime.run`` for

- an empty program (bar: <= 15 ms; the reference measures 20.5 ms), and
- a program making 100 trivial binding calls under ``asyncio.gather`` (bar: <= 30 ms; the
  reference measures 28.6 ms).

The template process is started (and one run made) before timing, as in a running harness.
Measure twice: idle, and pinned to one core with ``taskset -c 0 python benchmarks/...``.

Usage: ``python benchmarks/bench_code_runtime.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunRequest,
    ErrorClassSpec,
    SubprocessCodeRuntime,
)

GATHER_PROGRAM = """\
values = await asyncio.gather(*[tools.echo({"value": i}) for i in range(100)])
return len(values)
"""


async def _echo(args: Any) -> Any:
    return f"echo:{args['value']}"


async def _measure(runtime: SubprocessCodeRuntime, request: CodeRunRequest, runs: int) -> float:
    samples: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        result = await runtime.run(request)
        samples.append((time.perf_counter() - started) * 1000)
        if result.error is not None:
            raise SystemExit(f"benchmark run failed: {result.error}")
    return statistics.median(samples)


async def _main(runs: int) -> dict[str, float]:
    runtime = SubprocessCodeRuntime()
    bindings = [
        BindingNamespace("tools", {"echo": _echo}, ErrorClassSpec("ToolCallError", "tool_name"))
    ]
    empty = CodeRunRequest("pass", bindings)
    gather = CodeRunRequest(GATHER_PROGRAM, bindings)
    try:
        await runtime.run(empty)  # start the template
        figures = {
            "empty_run_ms": await _measure(runtime, empty, runs),
            "gather_100_calls_ms": await _measure(runtime, gather, runs),
        }
    finally:
        await runtime.dispose()
    return figures


def main() -> None:
    """Run the benchmark and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="timed runs per figure")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args()
    figures = asyncio.run(_main(options.runs))
    if options.json:
        print(json.dumps(figures))
        return
    empty, gather = figures["empty_run_ms"], figures["gather_100_calls_ms"]
    print(f"empty run_code, end to end:       {empty:6.2f} ms  (bar 15 ms)")
    print(f"100 trivial calls under gather:   {gather:6.2f} ms  (bar 30 ms)")


if __name__ == "__main__":
    main()
