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
    print(f"1,000 x 5 ms async calls, pool 10:  {f['pool10_sleep5ms_async_ms']:6.1f} ms (bar 540)")
    print(f"1,000 x 5 ms thread calls, pool 10: {f['pool10_sleep5ms_thread_ms']:6.1f} ms (bar 540)")
    for pool in (1, 10, 100):
        print(f"trivial calls, pool {pool:>3}: {f[f'trivial_pool{pool}_calls_per_s']:8.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
