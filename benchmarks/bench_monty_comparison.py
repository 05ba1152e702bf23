"""Code Mode against Pydantic's Monty, measured side by side in one run.

Prints the medians of an empty run and of 100 gathered calls (a plain-function tool body, the
bar's figure, and an ``async`` one, the shape of Monty's external function) for ``ToolSystem``
``run_code`` (end to end, in the sandbox, the default) and for ``pydantic_monty.AsyncMonty``
(fresh session checkout from a warm pool + ``feed_run``), with the ratios the bars apply to:
empty run <= 2 x Monty, 100 calls <= 0.2 x Monty. Each figure is measured from a warm pool
(runs a short untimed pause apart, as a model's turns keep them) and back to back. The two are
measured in turns (``--rounds`` rounds of ``--runs`` runs each): each ratio is the median of the
rounds' own ratios, each figure the median over the rounds. It also prints the floor under the
100-call figure: ``SubprocessCodeRuntime`` alone running the same program, its binding
answering at once (the worker, the sandbox and the frames, without the pipeline).

Usage: ``python benchmarks/bench_monty_comparison.py [--runs N] [--rounds R] [--json]`` (needs
the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys

from dsh_tools._bench import POOL_REFILL_PAUSE_S, measure_code_mode
from dsh_tools._bench_monty import compare_with_monty, monty_available, monty_version


def _ours(runs: int) -> dict[str, float]:
    return measure_code_mode(runs=runs)


def main() -> int:
    """Measure both and print the figures and ratios; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per figure and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds in turns with Monty")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args()
    if not monty_available():
        # Found before minutes of measuring Code Mode alone.
        print(
            "bench_monty_comparison.py: Monty (pydantic-monty) is not installed; install the "
            "bench extra: pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    figures = compare_with_monty(_ours, options.runs, options.rounds, POOL_REFILL_PAUSE_S)
    if options.json:
        print(json.dumps({**figures, "monty_version": monty_version()}))
        return 0
    print(f"Monty: pydantic-monty {monty_version()}")
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
    print("the code runtime alone, its binding answering at once (no pipeline; warm pool)")
    print(f"  empty run:                      {figures['runtime_empty_ms']:8.2f} ms")
    print(f"  100 gathered calls:             {figures['runtime_100_calls_ms']:8.2f} ms")
    print(f"    ratio {figures['100_calls_floor_ratio']:.2f} to Monty's 100 calls (the floor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
