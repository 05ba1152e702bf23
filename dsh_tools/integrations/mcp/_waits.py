"""The ``timeout=`` of a plugin's blocking waits, checked before anything is sent or waited on."""

from __future__ import annotations

import math
from typing import cast

__all__ = ["checked_timeout", "positive"]


def positive(value: object) -> bool:
    """Whether ``value`` is a finite ``int`` or ``float`` above 0 (a ``bool`` is none)."""
    if type(value) not in (int, float):
        return False
    number = cast(float, value)
    return math.isfinite(number) and number > 0


def checked_timeout(timeout: object, where: str, *, zero: bool) -> float | None:
    """``timeout`` when it is ``None`` or a finite number of seconds above 0 (at 0 too, with
    ``zero``: a wait that only looks), else ``ValueError`` naming ``where``. A NaN wait spins
    without end, an infinite one overflows the lock's wait, and a request given up before its
    answer could come would read as a server that did not answer."""
    if timeout is None:
        return None
    if positive(timeout) or (zero and type(timeout) in (int, float) and timeout == 0):
        return float(cast(float, timeout))
    wanted = "a number of seconds not below 0" if zero else "a positive number of seconds"
    raise ValueError(f"{where}: timeout must be None or {wanted}, got {timeout!r}")
