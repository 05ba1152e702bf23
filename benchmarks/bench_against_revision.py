"""This checkout against an earlier revision of dsh-tools, measured in turns in one run.

Run: ``python benchmarks/bench_against_revision.py [REVISION] [--rounds N] [--calls N] [--json]``
(REVISION: any git revision of this repository; by default the first release, whose figures
the per-call bars are fractions of). It needs git and the dependencies of both trees in the
running interpreter (they share pykka and msgspec). ``dsh-tools bench`` runs the same
comparison; what is measured, and how, is described in ``dsh_tools/_bench_revision.py``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_HERE))

from dsh_tools._bench_revision import (  # noqa: E402 (this checkout's package, not an installed one)
    FIRST_RELEASE,
    LABELS,
    compare_with_revision,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", nargs="?", default=FIRST_RELEASE)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        report = compare_with_revision(_HERE, args.revision, rounds=args.rounds, calls=args.calls)
    except RuntimeError as exc:
        print(f"bench_against_revision: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"revision": args.revision, "figures": report}, indent=2))
        return 0
    print(f"this checkout against {args.revision}, {args.rounds} rounds in turns (medians)")
    for key, (label, unit) in LABELS.items():
        f = report[key]
        print(
            f"{label:42} {f['this_checkout']:8.1f} {unit} vs {f['revision']:8.1f} {unit}"
            f"   ratio {f['ratio']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
