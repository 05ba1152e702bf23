"""Code Mode against Pydantic's Monty, measured side by side in one run.

Prints the medians of an empty run and of 100 gathered calls for ``SubprocessCodeRuntime``
(the sandbox, the default; runtime level) and ``ToolSystem`` ``run_code`` (end to end), and
for ``pydantic_monty.AsyncMonty`` (fresh session checkout from a warm pool + ``feed_run``), with
the ratios the bars apply to: empty run <= 2 x Monty, 100 calls <= 0.2 x Monty.

Usage: ``python benchmarks/bench_monty_comparison.py [--runs N] [--json]`` (needs the ``bench``
extra).
"""

from __future__ import annotations

import argparse
import json

from dsh_tools._bench import measure_code_mode
from dsh_tools._bench_monty import measure_monty


def main() -> None:
    """Measure both and print the figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs per figure")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args()
    figures = measure_code_mode(runs=options.runs)
    figures.update(measure_monty(runs=options.runs))
    figures["empty_ratio"] = figures["run_code_empty_ms"] / figures["monty_empty_ms"]
    figures["calls_ratio"] = figures["run_code_100_calls_ms"] / figures["monty_100_calls_ms"]
    if options.json:
        print(json.dumps(figures))
        return
    print(f"run_code empty, end to end:     {figures['run_code_empty_ms']:8.2f} ms")
    print(f"Monty checkout + empty run:     {figures['monty_empty_ms']:8.2f} ms")
    print(f"  ratio {figures['empty_ratio']:.2f} (bar <= 2)")
    print(f"run_code 100 gathered calls:    {figures['run_code_100_calls_ms']:8.2f} ms")
    print(f"Monty 100 gathered ext. calls:  {figures['monty_100_calls_ms']:8.2f} ms")
    print(f"  ratio {figures['calls_ratio']:.2f} (bar <= 0.2)")


if __name__ == "__main__":
    main()
