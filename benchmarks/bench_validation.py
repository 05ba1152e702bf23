"""Per-call cost of the data layer: argument snapshot and validation, and output normalization.

Run: ``python benchmarks/bench_validation.py [--calls N] [--runs R] [--json]``. Each figure is
the median over the runs of the mean microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from dsh_tools.registry import (
    ToolOutput,
    define_tool,
    normalize_output,
    snapshot_json,
    validate_json_schema_value,
)

# A typical call: a few keys and one nested object, as a model sends them (plain, decoded JSON).
ARGUMENTS: dict[str, Any] = {
    "path": "/srv/project/src/main.py",
    "limit": 200,
    "follow": True,
    "options": {"encoding": "utf-8", "offset": 10},
}

PARAMETERS: dict[str, Any] = {
    "path": {"type": "string", "required": True, "description": "Absolute path"},
    "limit": {"type": "integer", "description": "Max lines"},
    "follow": {"type": "boolean"},
    "options": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]},
            "offset": {"type": "integer"},
        },
    },
}


def _body(args: Any, run_ctx: Any) -> str:
    return "file contents"


TOOL = define_tool(
    "read",
    "Read a file",
    PARAMETERS,
    ToolOutput({"type": "string"}, lambda args, value: [{"type": "text", "text": value}]),
    _body,
)


def _per_call_us(fn: Callable[[], Any], calls: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(samples)


def measure(calls: int, runs: int) -> dict[str, float]:
    """The figures, in microseconds per call."""
    frozen_args = snapshot_json(ARGUMENTS)
    schema = TOOL.parameters

    def snapshot() -> Any:
        return snapshot_json(ARGUMENTS)

    def validate() -> Any:
        return validate_json_schema_value(schema, frozen_args, "")

    def snapshot_and_validate() -> Any:
        return TOOL.execute(snapshot_json(ARGUMENTS), None)

    def normalize() -> Any:
        return normalize_output(TOOL, frozen_args, "file contents", nested=False)

    for fn in (snapshot, validate, snapshot_and_validate, normalize):
        fn()  # warm caches and check that nothing raises
    return {
        "snapshot_us": _per_call_us(snapshot, calls, runs),
        "validate_us": _per_call_us(validate, calls, runs),
        "snapshot_validate_execute_us": _per_call_us(snapshot_and_validate, calls, runs),
        "normalize_output_string_us": _per_call_us(normalize, calls, runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.calls, args.runs)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"snapshot_json(arguments):                 {figures['snapshot_us']:6.2f} us/call")
    print(f"validate arguments (compiled schema):     {figures['validate_us']:6.2f} us/call")
    print(
        "snapshot + define_tool execute (validates): "
        f"{figures['snapshot_validate_execute_us']:5.2f} us/call"
    )
    print(
        f"normalize_output, string value:           {figures['normalize_output_string_us']:6.2f}"
        " us/call"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
