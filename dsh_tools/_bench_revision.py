"""This checkout against an earlier revision of dsh-tools, measured in turns in one run.

The per-call bars are fractions of the first release's figures ("at most 0.7 x what it was");
a figure measured on another day, under another load, cannot be compared with today's. The
earlier revision is checked out into a temporary git worktree and both trees are measured in
alternating child processes (each round: one process per tree, in turns, so that both see the
same load), with the same workload written against the public API both share:

- microseconds per ``system.execute`` of a trivial tool, without hooks and with four
  pass-through hooks (pre-execute, guard, execute wrapper, post-execute, each ``async def``
  where a hook is async);
- milliseconds for a batch of 1,000 x 5 ms plain-function (worker thread) bodies at pool 10.

It needs git and a source checkout of the project (an installed wheel has no history):
``source_checkout()`` finds the checkout this package runs from, if any.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["FIRST_RELEASE", "LABELS", "compare_with_revision", "resolve", "source_checkout"]

FIRST_RELEASE = "0f77180"
"""The commit the per-call bars are fractions of."""

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

LABELS = {
    "no_hooks_us": ("system.execute, no hooks", "us"),
    "four_hooks_us": ("system.execute, four pass-through hooks", "us"),
    "thread_batch_ms": ("1,000 x 5 ms thread bodies, pool 10", "ms"),
}
"""Each figure the probe prints: its label and unit."""


def source_checkout() -> Path | None:
    """The git checkout this package runs from (its parent folder holds ``.git``), or None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / ".git").exists() else None


def _git(checkout: Path, *args: str) -> str:
    """``git -C checkout ARGS``'s output; ``RuntimeError`` naming what failed otherwise."""
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise RuntimeError(f"git cannot be run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve(checkout: Path, revision: str) -> str:
    """The full hash of the commit ``revision`` names in ``checkout`` (``RuntimeError`` when it
    names none: a shallow clone may lack the first release)."""
    try:
        return _git(checkout, "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}")
    except RuntimeError as exc:
        raise RuntimeError(f"git cannot find {revision!r}: {exc}") from None


def _measure(tree: Path, calls: int, scratch: Path) -> dict[str, float]:
    # -P and a scratch working directory: nothing but the tree and the interpreter's own
    # library may answer the probe's imports (``-c`` would put the working directory first).
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, str(calls)],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measuring {tree} failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def compare_with_revision(
    checkout: Path, revision: str, *, rounds: int = 7, calls: int = 10_000
) -> dict[str, dict[str, float]]:
    """Each figure of ``LABELS`` for ``checkout`` as it is and for ``revision`` of it, in
    turns over ``rounds`` rounds: ``{"this_checkout": median, "revision": median, "ratio":
    their ratio}``. Raises ``RuntimeError`` when git cannot check ``revision`` out or a tree
    cannot be measured. The temporary worktree is removed however the comparison ends, a
    ``SIGTERM`` (a CI job's timeout) included."""
    commit = resolve(checkout, revision)  # a hash: nothing git could take for an option
    with tempfile.TemporaryDirectory(prefix="dsh-bench-rev-") as scratch, _terminated_as_exit():
        earlier = Path(scratch) / "earlier"
        _git(checkout, "worktree", "add", "--quiet", "--detach", str(earlier), commit)
        try:
            ours: list[dict[str, float]] = []
            theirs: list[dict[str, float]] = []
            for _ in range(rounds):
                theirs.append(_measure(earlier, calls, Path(scratch)))
                ours.append(_measure(checkout, calls, Path(scratch)))
        finally:
            with contextlib.suppress(RuntimeError):
                _git(checkout, "worktree", "remove", "--force", str(earlier))
    report: dict[str, dict[str, float]] = {}
    for key in LABELS:
        now = statistics.median(r[key] for r in ours)
        then = statistics.median(r[key] for r in theirs)
        report[key] = {"this_checkout": now, "revision": then, "ratio": now / then}
    return report


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """While the comparison runs on the main thread: ``SIGTERM`` raises ``SystemExit`` (status
    143, as the signal would have), so that the worktree is still removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
