"""The check of a blocking call's ``timeout``, made before anything is sent or submitted: a
bad value found only once the call runs would leave it running with nobody to take its
result."""

from __future__ import annotations

import threading

__all__ = ["checked_timeout"]


def checked_timeout(timeout: object, *, caller: str = "", poll: bool = False) -> float | None:
    """``timeout`` in seconds (``None``: wait without one); ``TypeError`` unless it is a number
    or ``None``, ``ValueError`` unless it is above 0 (from 0 when ``poll``: a zero timeout asks
    once, as for any pykka future) and at most ``threading.TIMEOUT_MAX``. ``caller`` starts
    the messages (``"ref.ask() "``)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"{caller}timeout must be a number of seconds or None, got {type(timeout).__name__}"
        )
    seconds = float(timeout)
    # NaN fails either comparison.
    if not (seconds >= 0 if poll else seconds > 0) or not seconds <= threading.TIMEOUT_MAX:
        bounds = "from 0 to" if poll else "above 0 and at most"
        raise ValueError(
            f"{caller}timeout must be a number of seconds {bounds} {threading.TIMEOUT_MAX:g} "
            f"(threading.TIMEOUT_MAX), or None to wait without one; got {timeout!r}"
        )
    return seconds
