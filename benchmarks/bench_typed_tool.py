"""Argument validation of an ``@tool`` beside ``define_tool``'s, for the same typical call.

Both tools take the same parameters (a path, an optional limit and flag, a closed nested options
object with an enum) and get the same frozen arguments. ``define_tool`` validates them against
its compiled schema and hands the body the frozen mapping; ``@tool`` validates and converts them
with msgspec in strict mode and hands the body typed values (the nested object as a Struct).

Run: ``python benchmarks/bench_typed_tool.py [--calls N] [--runs R] [--json]``. Each figure is
the median over the runs of the mean microseconds per call of the tool's ``execute`` (validation
plus a trivial body), and the ratio of the two measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec

# The same typical call that bench_validation.py measures (run as a script, so the sibling
# module imports).
from bench_validation import ARGUMENTS, PARAMETERS

from dsh_tools import ToolOutput, define_tool, snapshot_json, tool

DSL_TOOL = define_tool(
    "read",
    "Read a file",
    PARAMETERS,
    ToolOutput({"type": "string"}, lambda args, value: [{"type": "text", "text": value}]),
    lambda args, run_ctx: "file contents",
)


class Options(msgspec.Struct, forbid_unknown_fields=True):
    encoding: Literal["utf-8", "latin-1"] | None = None
    offset: int | None = None


@tool
def read(
    path: str, limit: int | None = None, follow: bool = False, options: Options | None = None
) -> str:
    """Read a file.

    Args:
        path: Absolute path.
        limit: Max lines.
    """
    return "file contents"


def _per_call_us(fn: Callable[[], Any], calls: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(samples)


def measure(calls: int, runs: int) -> dict[str, float]:
    """The figures: microseconds per call, and the ``@tool`` / ``define_tool`` ratio."""
    frozen = snapshot_json(ARGUMENTS)
    dsl_execute = DSL_TOOL.execute
    typed_execute = read.execute

    def dsl() -> Any:
        return dsl_execute(frozen, None)

    def typed() -> Any:
        return typed_execute(frozen, None)

    assert dsl() == typed() == "file contents"
    dsl_us = _per_call_us(dsl, calls, runs)
    typed_us = _per_call_us(typed, calls, runs)
    return {
        "define_tool_execute_us": dsl_us,
        "typed_tool_execute_us": typed_us,
        "typed_over_define_tool": typed_us / dsl_us,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    figures = measure(options.calls, options.runs)
    if options.json:
        print(json.dumps(figures, indent=2))
        return 0
    rows = (
        ("define_tool execute (validates)", figures["define_tool_execute_us"], "us/call"),
        ("@tool execute (validates, converts)", figures["typed_tool_execute_us"], "us/call"),
        ("@tool / define_tool", figures["typed_over_define_tool"], "x"),
    )
    for label, value, unit in rows:
        print(f"{label + ':':40} {value:6.2f} {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
