"""``retrieve``: marks a future's outcome as read."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["retrieve"]


def retrieve(future: asyncio.Future[Any]) -> None:
    """Read ``future``'s failure, if any, without raising it (a done callback, or once it is
    done): a future whose outcome nobody awaits (a reply to an aborted call, a start whose run
    ended without it) must not log "exception was never retrieved" when collected."""
    if not future.cancelled():
        future.exception()
