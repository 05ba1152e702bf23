"""Dispatcher pool throughput through ``ExecuteBatch``: 1,000 x 5 ms safe calls with a pool of
10 (async and thread bodies; ideal 500 ms) and trivial calls per second with pools of 1, 10 and
100. Run: ``python benchmarks/bench_pool.py [--runs R] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from dsh_tools._bench import measure_pool


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    f = measure_pool(args.runs)
    if args.json:
        print(json.dumps(f, indent=2))
        return 0
    for kind, floor in (("async", "asyncio loop"), ("thread", "ThreadPoolExecutor(10)")):
        key = f"pool10_sleep5ms_{kind}"
        print(
            f"1,000 x 5 ms {kind} calls, pool 10: {f[f'{key}_ms']:6.1f} ms; "
            f"{floor} {f[f'{key}_floor_ms']:6.1f} ms; ratio {f[f'{key}_ratio']:.3f}"
        )
    for pool in (1, 10, 100):
        print(f"trivial calls, pool {pool:>3}: {f[f'trivial_pool{pool}_calls_per_s']:8.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
