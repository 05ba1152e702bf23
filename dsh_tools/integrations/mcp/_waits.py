"""The ``timeout=`` of a plugin's blocking waits, checked before anything is sent or waited on."""

from __future__ import annotations

import math

__all__ = ["checked_timeout"]


def checked_timeout(timeout: object, where: str, *, zero: bool) -> float | None:
    """``timeout`` when it is ``None`` or a finite number of seconds above 0 (at 0 too, with
    ``zero``: a wait that only looks), else ``ValueError`` naming ``where``. A NaN wait spins
    without end, an infinite one overflows the lock's wait, and a request given up before its
    answer could come would read as a server that did not answer."""
    if timeout is None:
        return None
    # ``bool`` is an ``int``, but ``timeout=True`` says no number of seconds
    if (
        isinstance(timeout, int | float)
        and not isinstance(timeout, bool)
        and math.isfinite(timeout)
        and (timeout > 0 or (zero and timeout == 0))
    ):
        return float(timeout)
    wanted = "a number of seconds not below 0" if zero else "a positive number of seconds"
    raise ValueError(f"{where}: timeout must be None or {wanted}, got {timeout!r}")
