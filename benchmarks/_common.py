"""Shared helpers for the benchmark scripts: medians of repeated runs, JSON-friendly results."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_of(runs: int, measure: Callable[[], float]) -> float:
    """The median of ``runs`` measurements."""
    return statistics.median(measure() for _ in range(runs))


def per_call_us(calls: int, fn: Callable[[], Any]) -> float:
    """Microseconds per call of ``fn`` over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6
