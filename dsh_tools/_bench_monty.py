"""The peer figures Code Mode is compared with: Pydantic's Monty, measured in the same run.

``pydantic_monty.AsyncMonty`` keeps a warm pool of interpreter workers; one figure is a fresh
session checkout plus an empty ``feed_run``, the other the same program as the Code Mode
benchmark with 100 external async function calls under ``asyncio.gather``. Monty is a
benchmark-only dependency (the ``bench`` extra); without it these figures are left out.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import time
from typing import Any

__all__ = ["measure_monty", "monty_available"]

_GATHER_PROGRAM = (
    "import asyncio\nvalues = await asyncio.gather(*[trivial(i) for i in range(100)])\nsum(values)"
)


def monty_available() -> bool:
    """Whether ``pydantic_monty`` is installed."""
    return importlib.util.find_spec("pydantic_monty") is not None


async def _trivial(n: int) -> int:
    return n


async def _measure(runs: int) -> dict[str, float]:
    import pydantic_monty

    async with pydantic_monty.AsyncMonty(min_processes=2) as pool:

        async def once(program: str, lookup: dict[str, Any] | None) -> float:
            start = time.perf_counter()
            async with pool.checkout() as session:
                await session.feed_run(program, external_lookup=lookup)
            return (time.perf_counter() - start) * 1e3

        figures: dict[str, float] = {}
        for key, program, lookup in (
            ("monty_empty_ms", "None", None),
            ("monty_100_calls_ms", _GATHER_PROGRAM, {"trivial": _trivial}),
        ):
            for _ in range(3):
                await once(program, lookup)
            figures[key] = statistics.median([await once(program, lookup) for _ in range(runs)])
        return figures


def measure_monty(runs: int = 20) -> dict[str, float]:
    """Milliseconds for Monty's empty run and 100 gathered external calls (median)."""
    return asyncio.run(_measure(runs))
