"""Per-call cost of ``system.execute`` for a trivial tool, with no hooks and with four
pass-through hooks (pre-execute, guard, execute wrapper, post-execute), beside a bare pykka ask
round trip measured in the same run.

Run: ``python benchmarks/bench_pipeline.py [--calls N] [--runs R] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import pykka

from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool

try:
    from benchmarks._common import median_of, per_call_us
except ImportError:  # run as a script from the benchmarks folder
    from _common import median_of, per_call_us  # type: ignore[no-redef]


class _Echo(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def _echo_tool() -> Any:
    return define_tool(
        name="echo",
        description="Echo the text back.",
        parameters={"text": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"},
            render=lambda args, value: [{"type": "text", "text": value}],
        ),
        execute=lambda args, ctx: args["text"],
    )


async def _pass_pre(exec: Any, next: Any) -> Any:
    return await next()


async def _pass_wrap(exec: Any, next: Any) -> Any:
    return await next()


async def _pass_post(exec: Any, result: Any, next: Any) -> Any:
    return await next()


def measure(calls: int, runs: int) -> dict[str, float]:
    """Median microseconds per call for each workload."""
    figures: dict[str, float] = {}
    with ToolSystem.start(ToolsConfig(), code_runtime=None) as system:
        system.tools.register(_echo_tool())
        call = ExecuteCall(call_id="c1", name="echo", arguments={"text": "hi"})
        for _ in range(1000):
            system.execute(call)
        system.session.clear()

        def run_calls() -> float:
            us = per_call_us(calls, lambda: system.execute(call))
            system.session.clear()
            return us

        figures["no_hooks_us"] = median_of(runs, run_calls)
        system.tools.on_pre_execute(_pass_pre)
        system.tools.guard(lambda exec: None)
        system.tools.on_execute(_pass_wrap)
        system.tools.on_post_execute(_pass_post)
        for _ in range(1000):
            system.execute(call)
        figures["four_hooks_us"] = median_of(runs, run_calls)
    ref = _Echo.start()
    try:
        for _ in range(1000):
            ref.ask(1)
        figures["pykka_ask_us"] = median_of(runs, lambda: per_call_us(calls, lambda: ref.ask(1)))
    finally:
        ref.stop()
    figures["no_hooks_vs_ask"] = figures["no_hooks_us"] / figures["pykka_ask_us"]
    figures["four_hooks_vs_ask"] = figures["four_hooks_us"] / figures["pykka_ask_us"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.calls, args.runs)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"system.execute, no hooks:        {figures['no_hooks_us']:7.1f} us/call (bar 60)")
        print(f"system.execute, four hooks:      {figures['four_hooks_us']:7.1f} us/call (bar 80)")
        print(f"bare pykka ask round trip:       {figures['pykka_ask_us']:7.1f} us")
        print(f"ratio no hooks / ask:            {figures['no_hooks_vs_ask']:7.2f}")
        print(f"ratio four hooks / ask:          {figures['four_hooks_vs_ask']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
