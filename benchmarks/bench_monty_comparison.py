"""Code Mode against Pydantic's Monty, measured side by side in one run.

Prints the medians of an empty run and of 100 gathered calls (a plain-function tool body, the
bar's figure, and an ``async`` one, the shape of Monty's external function) for
``SubprocessCodeRuntime`` (the sandbox, the default; runtime level) and ``ToolSystem``
``run_code`` (end to end), and
for ``pydantic_monty.AsyncMonty`` (fresh session checkout from a warm pool + ``feed_run``), with
the ratios the bars apply to: empty run <= 2 x Monty, 100 calls <= 0.2 x Monty. Each figure is
measured from a warm pool (runs a short untimed pause apart, as a model's turns keep them) and
back to back.

Usage: ``python benchmarks/bench_monty_comparison.py [--runs N] [--json]`` (needs the ``bench``
extra).
"""

from __future__ import annotations

import argparse
import json

from dsh_tools._bench import POOL_REFILL_PAUSE_S, measure_code_mode
from dsh_tools._bench_monty import measure_monty


def main() -> None:
    """Measure both and print the figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs per figure")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args()
    figures = measure_code_mode(runs=options.runs)
    figures.update(measure_monty(runs=options.runs, pause=POOL_REFILL_PAUSE_S))
    for suffix in ("", "_back_to_back"):
        for name in ("empty", "100_calls"):
            figures[f"{name}{suffix}_ratio"] = (
                figures[f"run_code_{name}{suffix}_ms"] / figures[f"monty_{name}{suffix}_ms"]
            )
        figures[f"100_async_calls{suffix}_ratio"] = (
            figures[f"run_code_100_async_calls{suffix}_ms"] / figures[f"monty_100_calls{suffix}_ms"]
        )
    if options.json:
        print(json.dumps(figures))
        return
    pause_ms = POOL_REFILL_PAUSE_S * 1e3
    for suffix, heading in (
        ("", f"from a warm pool (runs {pause_ms:.0f} ms apart, untimed; the bars' figures)"),
        ("_back_to_back", "back to back (each run also waits for its replacement's fork)"),
    ):
        print(heading)
        print(f"  run_code empty, end to end:     {figures[f'run_code_empty{suffix}_ms']:8.2f} ms")
        print(f"  Monty checkout + empty run:     {figures[f'monty_empty{suffix}_ms']:8.2f} ms")
        print(f"    ratio {figures[f'empty{suffix}_ratio']:.2f} (bar <= 2)")
        print(
            f"  run_code 100 gathered calls:    {figures[f'run_code_100_calls{suffix}_ms']:8.2f} ms"
        )
        print(f"  Monty 100 gathered ext. calls:  {figures[f'monty_100_calls{suffix}_ms']:8.2f} ms")
        print(f"    ratio {figures[f'100_calls{suffix}_ratio']:.2f} (bar <= 0.2)")
        print(
            "  run_code 100 calls, async body: "
            f"{figures[f'run_code_100_async_calls{suffix}_ms']:8.2f} ms"
        )
        print(f"    ratio {figures[f'100_async_calls{suffix}_ratio']:.2f} (no body thread hop)")


if __name__ == "__main__":
    main()
