"""Overhead of the Code Mode dispatch half (bridge, per-run pool, pipeline) without a worker.

An in-process runtime calls the binding functions directly, so the figures are what the
bridge adds on top of the code runtime measured by ``bench_code_runtime.py``:

- an empty ``run_code`` (``system.execute`` end to end: pipeline, bridge, pool, drain);
- a program making 100 trivial calls under ``asyncio.gather`` (concurrency-safe tool), with an
  agent (dispatch events recorded) and without one;
- the same with a ``tools/code-dispatch-log`` listener and the dispatch-log spill arm;
- the same with an ``async def`` tool body (no worker-thread hop per call: the difference to
  the plain-function figure is what running plain bodies off the loop costs).

Measure twice: idle, and pinned to one core with ``taskset -c 0 python benchmarks/...``.

Usage: ``python benchmarks/bench_code_bridge.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from msgspec import UNSET

from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool
from dsh_tools.codebridge import CodeRunRequest, CodeRunResult

Program = Callable[[Any], Awaitable[Any]]


class InProcessRuntime:
    """Runs a Python coroutine function against the request's bindings."""

    language = "python"
    isolation = "in-process"

    def __init__(self) -> None:
        self.program: Program | None = None

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        assert self.program is not None
        value = await self.program(request.bindings[0].functions)
        return CodeRunResult([], value=value)

    async def dispose(self) -> None:
        return None


async def empty(tools: Any) -> Any:
    return UNSET


def gather_100_of(name: str) -> Program:
    async def program(tools: Any) -> Any:
        binding = tools[name]
        values = await asyncio.gather(*[binding({"n": i}) for i in range(100)])
        return sum(values)

    return program


gather_100 = gather_100_of("trivial")


class MemoryStore:
    def save(self, text: str, source: Any) -> str:
        return "mem://x"


async def passthrough(log: Any, next: Any) -> Any:
    return await next()


def measure(runs: int) -> dict[str, float]:
    runtime = InProcessRuntime()
    figures: dict[str, float] = {}
    with ToolSystem.start(
        ToolsConfig(mode="code", max_inline_bytes=4096), code_runtime=runtime
    ) as system:
        system.dispatch_spill.store = MemoryStore()

        async def async_body(args: Any, ctx: Any) -> Any:
            return args["n"]

        for name, body in (("trivial", lambda args, ctx: args["n"]), ("async_trivial", async_body)):
            system.tools.register(
                define_tool(
                    name=name,
                    description="Return n.",
                    parameters={"n": {"type": "integer", "required": True}},
                    output=ToolOutput(
                        schema={"type": "integer"},
                        render=lambda a, v: [{"type": "text", "text": str(v)}],
                    ),
                    execute=body,
                    is_concurrency_safe=lambda args: True,
                )
            )
        counter = iter(range(10**9))

        def once(program: Program, agent: str | None) -> float:
            runtime.program = program
            call = ExecuteCall(
                call_id=f"bench-{next(counter)}",
                name="run_code",
                arguments={"code": "-", "description": "Benchmark program"},
                agent=agent,
            )
            start = time.perf_counter()
            result = system.execute(call)
            elapsed = time.perf_counter() - start
            system.session.clear()
            if result.is_error:
                raise SystemExit(f"benchmark program failed: {result.content}")
            return elapsed * 1e3

        def median(program: Program, agent: str | None) -> float:
            for _ in range(3):
                once(program, agent)
            return statistics.median(once(program, agent) for _ in range(runs))

        figures["bridge_empty_run_ms"] = median(empty, "A")
        figures["bridge_100_calls_no_agent_ms"] = median(gather_100, None)
        figures["bridge_100_calls_agent_ms"] = median(gather_100, "A")
        figures["bridge_100_async_calls_agent_ms"] = median(gather_100_of("async_trivial"), "A")
        system.tools.on_code_dispatch_log(passthrough)
        figures["bridge_100_calls_agent_log_hook_ms"] = median(gather_100, "A")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    figures = measure(options.runs)
    if options.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:40} {value:8.2f}")


if __name__ == "__main__":
    main()
