"""``LoopActor``: an actor whose mailbox is drained on an asyncio event loop.

Pool and bridge actors schedule stage coroutines on the system loop and receive their
completions as messages. Running their mailbox on that same loop keeps every state transition
serialized (one message at a time, no locks) without a cross-thread wake-up per message, which
would cost more than the stages themselves (see the architecture notes in the README).
``tell`` is thread-safe.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from ._logging import get_logger

__all__ = ["LoopActor"]

_log = get_logger("dsh_tools.actors")


class LoopActor:
    """Processes ``on_receive(message)`` one message at a time on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._mailbox: deque[Any] = deque()
        self._draining = False

    def tell(self, message: Any) -> None:
        """Queue ``message``; safe from any thread."""
        if self._on_loop():
            self._mailbox.append(message)
            if not self._draining:
                self._drain()
        else:
            self._loop.call_soon_threadsafe(self.tell, message)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _drain(self) -> None:
        self._draining = True
        try:
            while self._mailbox:
                message = self._mailbox.popleft()
                try:
                    self.on_receive(message)
                except Exception as exc:  # a handler bug must not wedge the mailbox
                    _log.exception(
                        "actor message handler failed", actor=type(self).__name__, error=repr(exc)
                    )
                    self.on_failure(exc)
        finally:
            self._draining = False

    def on_receive(self, message: Any) -> None:
        """Handle one message (override)."""
        raise NotImplementedError

    def on_failure(self, exc: BaseException) -> None:
        """Called when ``on_receive`` raised; the default does nothing more than log."""
