"""Per-call cost of ``system.execute`` (no hooks; four pass-through hooks) beside a bare pykka
ask round trip. Run: ``python benchmarks/bench_pipeline.py [--calls N] [--runs R] [--json]``."""

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
    ask = f["pykka_ask_us"]
    print(f"system.execute, no hooks:   {f['execute_no_hooks_us']:6.1f} us/call (bar 60)")
    print(f"system.execute, four hooks: {f['execute_four_hooks_us']:6.1f} us/call (bar 80)")
    print(f"bare pykka ask round trip:  {ask:6.1f} us")
    print(
        f"ratios to one ask: {f['execute_no_hooks_us'] / ask:.2f} / "
        f"{f['execute_four_hooks_us'] / ask:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
