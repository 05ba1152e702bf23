"""``PreciseEpoll``: the selector of the loop batches and code runs run on (Linux), whose timed
waits end on time; None where the platform has no ``epoll``."""

from __future__ import annotations

import select
import selectors

__all__ = ["PreciseEpoll"]

_FD_SETSIZE = 1024  # select() takes descriptors below this

PreciseEpoll: type[selectors.BaseSelector] | None = None

if hasattr(selectors, "EpollSelector"):

    class _PreciseEpoll(selectors.EpollSelector):
        """``epoll`` whose timed waits end on time.

        ``epoll_wait`` counts whole milliseconds and the stock selector rounds a timeout up, so
        a timer due in 0.2 ms fires 0.8 ms late. Sleeping tool bodies and deadlines on the
        system loop are timers: a pool of ten 5 ms calls lost about 0.4 ms per call to that
        rounding. A timed wait here is a ``select()`` on the epoll descriptor itself (a
        microsecond timeout; the descriptor is readable as soon as any registered one is),
        then a non-blocking ``epoll_wait`` collects the events. Untimed and zero waits are the
        stock ones, and so is every wait when the epoll descriptor is too high for
        ``select()``.
        """

        def __init__(self) -> None:
            super().__init__()
            self._epoll_fd = self.fileno()
            self._precise = self._epoll_fd < _FD_SETSIZE

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if timeout is not None and timeout > 0 and self._precise:
                try:
                    select.select((self._epoll_fd,), (), (), timeout)
                except InterruptedError:
                    return []
                timeout = 0
            return super().select(timeout)

    PreciseEpoll = _PreciseEpoll
