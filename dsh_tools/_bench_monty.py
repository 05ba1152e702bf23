"""The peer figures Code Mode is compared with: Pydantic's Monty, measured in the same run.

``pydantic_monty.AsyncMonty`` keeps a warm pool of interpreter workers; one figure is a fresh
session checkout plus an empty ``feed_run``, the other the same program as the Code Mode
benchmark with 100 external async function calls under ``asyncio.gather``; each is measured
with the same untimed pause between runs as Code Mode's warm-pool figures, and back to back.
Monty is a benchmark-only dependency (the ``bench`` extra); without it these figures are left out.

It is measured in a child interpreter (``python -m dsh_tools._bench_monty RUNS PAUSE``,
printing JSON): ``pydantic_monty`` 1.4 can abort its process at exit, which must not end
``dsh-tools bench``.

``compare_with_monty`` measures Code Mode and Monty in turns, a few runs of each per round: the
project's machine changes speed by a factor of two within a minute, so each ratio is taken
within one round and the figures reported are medians over the rounds.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["compare_with_monty", "measure_monty", "monty_available", "monty_version"]

_RATIOS = (
    ("empty", "run_code_empty", "monty_empty"),
    ("100_calls", "run_code_100_calls", "monty_100_calls"),
    ("100_async_calls", "run_code_100_async_calls", "monty_100_calls"),
    ("100_calls_floor", "runtime_100_calls", "monty_100_calls"),
)
"""(ratio name, our figure, Monty's figure), each also ``_back_to_back`` unless ``ours`` has
no such figure."""

_GATHER_PROGRAM = (
    "import asyncio\nvalues = await asyncio.gather(*[trivial(i) for i in range(100)])\nsum(values)"
)


def monty_available() -> bool:
    """Whether ``pydantic_monty`` is installed."""
    return importlib.util.find_spec("pydantic_monty") is not None


def monty_version() -> str | None:
    """The installed ``pydantic-monty`` release (``None`` without it): its figures change with
    it (1.7's empty run and 100 calls took about 0.6-0.8 x 1.4's here), so every report that
    compares with Monty names the release it measured. That of the distribution providing
    the ``pydantic_monty`` module, the code measured (``pydantic-monty-client``, which may be
    installed without the ``pydantic-monty`` that only requires it); that one's otherwise."""
    providers = importlib.metadata.packages_distributions().get("pydantic_monty", [])
    for name in (*providers, "pydantic-monty"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


async def _trivial(n: int) -> int:
    return n


async def _measure(runs: int, pause: float) -> dict[str, float]:
    import pydantic_monty

    async with pydantic_monty.AsyncMonty(min_processes=2) as pool:

        async def once(program: str, lookup: dict[str, Any] | None, pause: float) -> float:
            start = time.perf_counter()
            async with pool.checkout() as session:
                await session.feed_run(program, external_lookup=lookup)
            elapsed = (time.perf_counter() - start) * 1e3
            await asyncio.sleep(pause)
            return elapsed

        figures: dict[str, float] = {}
        for key, program, lookup in (
            ("monty_empty_ms", "None", None),
            ("monty_100_calls_ms", _GATHER_PROGRAM, {"trivial": _trivial}),
        ):
            for _ in range(3):
                await once(program, lookup, pause)
            figures[key] = statistics.median(
                [await once(program, lookup, pause) for _ in range(runs)]
            )
            figures[key.replace("_ms", "_back_to_back_ms")] = statistics.median(
                [await once(program, lookup, 0.0) for _ in range(runs)]
            )
        return figures


def measure_monty(runs: int = 20, pause: float = 0.02) -> dict[str, float]:
    """Milliseconds for Monty's empty run and 100 gathered external calls (median), runs
    ``pause`` seconds apart, and back to back (``*_back_to_back_ms``)."""
    child = subprocess.run(
        [sys.executable, "-m", "dsh_tools._bench_monty", str(runs), str(pause)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        figures = json.loads(child.stdout.splitlines()[0])
    except (IndexError, ValueError):
        raise RuntimeError(f"the Monty benchmark failed: {child.stderr.strip()[-500:]}") from None
    return {str(key): float(value) for key, value in figures.items()}


def compare_with_monty(
    ours: Callable[[int], dict[str, float]], runs: int, rounds: int, pause: float
) -> dict[str, float]:
    """Code Mode's figures (``ours(runs)``, ``measure_code_mode``'s keys) and Monty's, measured
    in ``rounds`` turns of ``runs`` each: the median of each figure over the rounds, and for
    each ratio ``<name>[_back_to_back]_ratio`` the median of the rounds' own ratios."""
    per_round: list[dict[str, float]] = []
    for _ in range(rounds):
        figures = ours(runs)
        figures.update(measure_monty(runs=runs, pause=pause))
        for name, our, peer in _RATIOS:
            for suffix in ("", "_back_to_back"):
                if f"{our}{suffix}_ms" not in figures:
                    continue
                figures[f"{name}{suffix}_ratio"] = (
                    figures[f"{our}{suffix}_ms"] / figures[f"{peer}{suffix}_ms"]
                )
        per_round.append(figures)
    return {key: statistics.median(f[key] for f in per_round) for key in per_round[0]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_measure(int(sys.argv[1]), float(sys.argv[2])))), flush=True)
