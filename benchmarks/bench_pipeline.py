"""Per-call cost of ``system.execute`` (no hooks; four pass-through hooks), each beside the same
call run on a per-thread event loop (the ratio of the two, measured in one run), and a bare
pykka ask round trip.

Run: ``python benchmarks/bench_pipeline.py [--calls N] [--runs R] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from dsh_tools._bench import measure_pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    f = measure_pipeline(args.calls, args.runs)
    if args.json:
        print(json.dumps(f, indent=2))
        return 0
    for key, label in (("no_hooks", "no hooks"), ("four_hooks", "four pass-through hooks")):
        print(
            f"system.execute, {label + ':':25} {f[f'execute_{key}_us']:6.1f} us/call; "
            f"on a per-thread event loop {f[f'execute_{key}_on_loop_us']:6.1f} us; "
            f"ratio {f[f'execute_{key}_ratio']:.3f}"
        )
    print(f"bare pykka ask round trip: {f['pykka_ask_us']:6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
