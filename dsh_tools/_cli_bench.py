"""``dsh-tools bench``: measure the figures, show their progress, print them against their
bars (or as JSON)."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import NamedTuple, TextIO

__all__ = ["run_bench"]


class _Progress:
    """Progress on stderr: one line redrawn in place at a terminal, else a line per step (a log
    shows how far the run got)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self._lock = threading.Lock()

    def step(self, label: str) -> None:
        with self._lock:
            self.done += 1
            width = 24
            filled = int(width * (self.done - 1) / max(1, self.total))
            bar = "#" * filled + "-" * (width - filled)
            line = f"[{bar}] {self.done}/{self.total} {label}"
            if self.tty:
                self.stream.write("\r" + line[:100].ljust(100))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


# Every timing bar is a ratio between two figures measured in turns in the same run (machines
# differ, and one machine's speed varies through the day); absolute times are shown without one.
_BARS: list[tuple[str, str, str, float | None]] = [
    ("execute_no_hooks_us", "per call, no hooks (system.execute)", "us", None),
    ("execute_no_hooks_on_loop_us", "  the same on a per-thread event loop", "us", None),
    ("execute_no_hooks_ratio", "  system.execute / on an event loop", "x", None),
    ("execute_no_hooks_then_us", "  the --against revision, same call, in turns", "us", None),
    ("execute_no_hooks_vs_first_release", "  this checkout / the first release", "x", 0.6),
    ("execute_no_hooks_vs_revision", "  this checkout / the --against revision", "x", None),
    ("ref_ask_no_hooks_us", "  the same as system.ref.ask(ExecuteCall)", "us", None),
    ("execute_four_hooks_us", "per call, four pass-through hooks", "us", None),
    ("execute_four_hooks_on_loop_us", "  the same on a per-thread event loop", "us", None),
    ("execute_four_hooks_ratio", "  system.execute / on an event loop", "x", None),
    ("execute_four_hooks_then_us", "  the --against revision, same call, in turns", "us", None),
    ("execute_four_hooks_vs_first_release", "  this checkout / the first release", "x", 0.7),
    ("execute_four_hooks_vs_revision", "  this checkout / the --against revision", "x", None),
    ("ref_ask_four_hooks_us", "  the same as system.ref.ask(ExecuteCall)", "us", None),
    ("pykka_ask_us", "bare pykka ask round trip (reference point)", "us", None),
    ("pool10_sleep5ms_async_ms", "1,000 x 5 ms safe calls, pool 10 (async)", "ms", None),
    ("pool10_sleep5ms_async_floor_ms", "  asyncio loop, same sleeps ten at a time", "ms", None),
    ("pool10_sleep5ms_async_ratio", "  pool / asyncio loop", "x", 1.03),
    ("pool10_sleep5ms_thread_ms", "1,000 x 5 ms safe calls, pool 10 (thread)", "ms", None),
    ("pool10_sleep5ms_thread_floor_ms", "  bare ThreadPoolExecutor(10), same sleeps", "ms", None),
    ("pool10_sleep5ms_thread_ratio", "  pool / ThreadPoolExecutor(10)", "x", 1.05),
    ("thread_batch_vs_first_release", "  the same / the first release, in turns", "x", None),
    ("thread_batch_vs_revision", "  the same / the --against revision, in turns", "x", None),
    ("trivial_pool1_calls_per_s", "trivial calls per second, pool 1", "/s", None),
    ("trivial_pool10_calls_per_s", "trivial calls per second, pool 10", "/s", None),
    ("trivial_pool100_calls_per_s", "trivial calls per second, pool 100", "/s", None),
    ("run_code_empty_ms", "empty run_code, end to end", "ms", None),
    ("run_code_100_calls_ms", "run_code, 100 calls under asyncio.gather", "ms", None),
    ("assemble_2000_first_ms", "assemble_prompt, 2,000 tools, first call", "ms", None),
    ("assemble_2000_cached_ms", "  the same again, registry unchanged", "ms", 1),
    ("run_code_empty_back_to_back_ms", "empty run_code, back to back", "ms", None),
    ("run_code_100_calls_back_to_back_ms", "run_code 100 calls, back to back", "ms", None),
    ("demo_rss_mb", "resident memory of the demo (peak)", "MB", 80),
    ("monty_empty_ms", "Monty: session checkout + empty feed_run", "ms", None),
    ("monty_100_calls_ms", "Monty: 100 external async calls, gathered", "ms", None),
    ("monty_empty_back_to_back_ms", "Monty: empty run, back to back", "ms", None),
    ("monty_100_calls_back_to_back_ms", "Monty: 100 calls, back to back", "ms", None),
    ("run_code_empty_vs_monty", "empty run_code / Monty's empty run", "x", 2),
    ("run_code_100_calls_vs_monty", "run_code 100 calls / Monty's 100 calls", "x", 0.2),
    ("runtime_empty_ms", "code runtime alone, empty run (no pipeline)", "ms", None),
    ("runtime_100_calls_ms", "code runtime alone, 100 calls answered at once", "ms", None),
    ("100_calls_floor_ratio", "  the same / Monty's 100 calls", "x", None),
]


def run_bench(
    out: TextIO,
    *,
    as_json: bool,
    runs: int,
    code_mode: bool,
    check: bool = False,
    against: str | None = None,
    against_by_default: bool = False,
) -> int:
    """Measure and print the benchmark table (or JSON); return 1 when ``check`` and a bar is
    not met (a figure over its bar, or a comparison that could not be measured), else 0.

    ``against``: a git revision (the first release, ``FIRST_RELEASE``, for the per-call bars)
    to measure in turns with this checkout, when the package runs from a git checkout; else
    that comparison is left out and a line says why. ``against_by_default``: the revision is
    the command's default, not one the user asked for; then a comparison this copy cannot make
    (it is not a git checkout, or its history lacks the revision) is left out with that line but
    is not a bar unmet."""
    from ._bench import (
        POOL_REFILL_PAUSE_S,
        measure_assembly,
        measure_code_mode,
        measure_demo_rss,
        measure_pipeline,
        measure_pool,
    )
    from ._bench_monty import compare_with_monty, monty_available, monty_version

    progress = _Progress(3 + 5 + (4 if code_mode else 0) + (1 if against else 0))
    figures: dict[str, float] = {}
    skipped: str | None = None
    skip_fails = False
    if against:
        progress.step(f"this checkout against {against}, in turns")
        comparison = _against_revision(against, rounds=max(runs, 3))
        figures.update(comparison.figures)
        skipped = comparison.missing
        # A bar that could not be measured is not met, unless the comparison is only the
        # default one and this copy cannot make it (an installed package has no history).
        skip_fails = skipped is not None and (comparison.possible or not against_by_default)
    figures.update(measure_pipeline(runs=runs, progress=progress.step))
    figures.update(measure_pool(runs=runs, progress=progress.step))
    if code_mode:
        if monty_available():
            # In turns with Monty, a ratio per round (see compare_with_monty).
            steps = iter([progress.step])  # the first round shows progress

            def ours(count: int) -> dict[str, float]:
                return measure_code_mode(runs=count, progress=next(steps, None))

            figures.update(compare_with_monty(ours, max(runs * 2, 8), 4, POOL_REFILL_PAUSE_S))
            figures["run_code_empty_vs_monty"] = figures["empty_ratio"]
            figures["run_code_100_calls_vs_monty"] = figures["100_calls_ratio"]
        else:
            figures.update(measure_code_mode(runs=max(runs * 4, 10), progress=progress.step))
        figures.update(measure_assembly(runs=runs, progress=progress.step))
        figures.update(measure_demo_rss(progress=progress.step))
    progress.close()
    bars = {key: float(bar) for key, _, _, bar in _BARS if bar is not None and key in figures}
    over = [key for key, bar in bars.items() if figures[key] > bar]
    met = not over and not skip_fails
    peer = monty_version() if "monty_empty_ms" in figures else None
    if as_json:
        report: dict[str, object] = {
            "cpus": os.cpu_count(),
            "figures": figures,
            "bars": bars,
            "over": over,
            "bars_met": met,
        }
        if peer is not None:
            report["monty_version"] = peer
        if skipped is not None:
            report["skipped"] = skipped
        print(json.dumps(report, indent=2), file=out)
    else:
        _print_table(out, figures, over)
        if peer is not None:
            print(f"(Monty: pydantic-monty {peer})", file=out)
        if skipped is not None:
            print(f"(not measured: {skipped})", file=out)
    return 1 if check and not met else 0


def _print_table(out: TextIO, figures: dict[str, float], over: list[str]) -> None:
    """The measured figures with their bars, a figure over its bar marked "(over)"."""
    print(f"{'figure':<48} {'measured':>12}  {'bar':>8}", file=out)
    print("-" * 72, file=out)
    for key, label, unit, bar in _BARS:
        if key not in figures:
            continue
        value = figures[key]
        if unit == "/s":
            shown = f"{value:,.0f} {unit}"
        elif unit == "x":
            shown = f"{value:.2f} {unit}"
        elif value < 0.1:
            shown = f"{value:.4f} {unit}"
        else:
            shown = f"{value:.1f} {unit}"
        bar_text = f"<= {bar:g}" if bar is not None else ""
        mark = "  (over)" if key in over else ""
        print(f"{label:<48} {shown:>12}  {bar_text:>8}{mark}", file=out)


def revision_problem(revision: str) -> str | None:
    """Why this checkout cannot be measured against ``revision`` (None when it can): this
    package does not run from a git checkout, or git cannot find the revision. Asked before
    anything is measured, for a revision named on the command line."""
    from ._bench_revision import resolve, source_checkout

    checkout = source_checkout()
    if checkout is None:
        return "this package does not run from a git checkout (an installed copy has no history)"
    try:
        resolve(checkout, revision)
    except RuntimeError as exc:
        return str(exc)
    return None


class _Comparison(NamedTuple):
    """The figures of this checkout against a revision, or why they are missing."""

    figures: dict[str, float]
    missing: str | None = None
    """Why the comparison is missing, if it is."""
    possible: bool = True
    """False when this copy cannot make the comparison at all: it is not a git checkout, git
    cannot be run, or its history lacks the revision (a shallow clone)."""


def _against_revision(revision: str, *, rounds: int) -> _Comparison:
    """The per-call figures of this checkout against ``revision`` (see ``_bench_revision``),
    or why they are missing. The bars apply to the first release only."""
    from ._bench_revision import FIRST_RELEASE, compare_with_revision, resolve, source_checkout

    problem = revision_problem(revision)
    checkout = source_checkout()
    if problem is not None or checkout is None:
        return _Comparison({}, f"the comparison with {revision}: {problem}", possible=False)
    try:
        first_release = resolve(checkout, revision) == resolve(checkout, FIRST_RELEASE)
        report = compare_with_revision(checkout, revision, rounds=rounds)
    except RuntimeError as exc:
        return _Comparison({}, f"the comparison with {revision}: {exc}")
    figures = {
        "execute_no_hooks_then_us": report["no_hooks_us"]["revision"],
        "execute_four_hooks_then_us": report["four_hooks_us"]["revision"],
    }
    ratios = {
        "execute_no_hooks_vs_first_release": report["no_hooks_us"]["ratio"],
        "execute_four_hooks_vs_first_release": report["four_hooks_us"]["ratio"],
        "thread_batch_vs_first_release": report["thread_batch_ms"]["ratio"],
    }
    if not first_release:  # another revision's ratios are shown under other names
        ratios = {key.replace("first_release", "revision"): v for key, v in ratios.items()}
    figures.update(ratios)
    return _Comparison(figures)
