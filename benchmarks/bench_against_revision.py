"""This checkout against an earlier revision of dsh-tools, measured in turns in one run.

The per-call bars are set as fractions of an earlier figure ("at most 0.7 x what it was"); a
figure measured on another day, under another load, cannot be compared with today's. This
script checks the earlier revision out into a temporary git worktree and measures both trees
in alternating child processes (each round: one process per tree, in turns, so that both
see the same load), with the same workload written against the public API both share:

- microseconds per ``system.execute`` of a trivial tool, without hooks and with four
  pass-through hooks (pre-execute, guard, execute wrapper, post-execute, each ``async def``
  where a hook is async);
- milliseconds for a batch of 1,000 x 5 ms plain-function (worker thread) bodies at pool 10.

Run: ``python benchmarks/bench_against_revision.py REVISION [--rounds N] [--calls N] [--json]``
(REVISION: any git revision of this repository, e.g. a tag or commit). It needs git and the
dependencies of both trees in the running interpreter (they share pykka and msgspec)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent

# Runs in a child process with one tree first on sys.path; prints one JSON object.
_PROBE = r"""
import json, sys, time
from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolOutput, ToolsConfig, ToolSystem
from dsh_tools import define_tool

CALLS = int(sys.argv[1])


def int_tool(name, execute):
    return define_tool(
        name=name,
        description=name,
        parameters={"n": {"type": "integer", "required": True}},
        output=ToolOutput(
            schema={"type": "integer"},
            render=lambda args, value: [{"type": "text", "text": str(value)}],
        ),
        execute=execute,
        is_concurrency_safe=lambda args: True,
    )


async def pass_pre(exec, next):
    return await next()


async def pass_wrap(exec, next):
    return await next()


async def pass_post(exec, result, next):
    return await next()


def sleep_thread(args, ctx):
    time.sleep(0.005)
    return int(args["n"])


def per_call_us(system, call):
    for _ in range(2000):
        system.execute(call)
    best = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(CALLS):
            system.execute(call)
        best.append((time.perf_counter() - start) / CALLS * 1e6)
        system.session.clear()
    return sorted(best)[1]


figures = {}
with ToolSystem.start(ToolsConfig(), code_runtime=None) as system:
    system.tools.register(int_tool("trivial", lambda args, ctx: args["n"]))
    system.tools.register(int_tool("sleep_thread", sleep_thread))
    call = ExecuteCall(call_id="c1", name="trivial", arguments={"n": 1})
    batch = ExecuteBatch(
        calls=[ToolCall(f"b{i}", "sleep_thread", '{"n": %d}' % i) for i in range(1000)],
        max_parallel=10,
    )
    system.execute_batch(batch)
    system.session.clear()
    start = time.perf_counter()
    system.execute_batch(batch)
    figures["thread_batch_ms"] = (time.perf_counter() - start) * 1e3
    system.session.clear()
    figures["no_hooks_us"] = per_call_us(system, call)
    system.tools.on_pre_execute(pass_pre)
    system.tools.guard(lambda exec: None)
    system.tools.on_execute(pass_wrap)
    system.tools.on_post_execute(pass_post)
    figures["four_hooks_us"] = per_call_us(system, call)
print(json.dumps(figures))
"""

_LABELS = {
    "no_hooks_us": ("system.execute, no hooks", "us"),
    "four_hooks_us": ("system.execute, four pass-through hooks", "us"),
    "thread_batch_ms": ("1,000 x 5 ms thread bodies, pool 10", "ms"),
}


def _measure(tree: Path, calls: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(calls)],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the earlier git revision to measure against")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-rev-") as scratch:
        earlier = Path(scratch) / "earlier"
        subprocess.run(
            [
                "git",
                "-C",
                str(_HERE),
                "worktree",
                "add",
                "--quiet",
                "--detach",
                str(earlier),
                args.revision,
            ],
            check=True,
        )
        try:
            ours: list[dict[str, float]] = []
            theirs: list[dict[str, float]] = []
            for _ in range(args.rounds):
                theirs.append(_measure(earlier, args.calls))
                ours.append(_measure(_HERE, args.calls))
        finally:
            subprocess.run(
                ["git", "-C", str(_HERE), "worktree", "remove", "--force", str(earlier)],
                check=False,
            )
    report: dict[str, dict[str, float]] = {}
    for key in _LABELS:
        now = statistics.median(r[key] for r in ours)
        then = statistics.median(r[key] for r in theirs)
        report[key] = {"this_checkout": now, "revision": then, "ratio": now / then}
    if args.json:
        print(json.dumps({"revision": args.revision, "figures": report}, indent=2))
        return 0
    print(f"this checkout against {args.revision}, {args.rounds} rounds in turns (medians)")
    for key, (label, unit) in _LABELS.items():
        f = report[key]
        print(
            f"{label:42} {f['this_checkout']:8.1f} {unit} vs {f['revision']:8.1f} {unit}"
            f"   ratio {f['ratio']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
