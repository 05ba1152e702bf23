"""The descriptors one attempt of a run reads (its channel, status and native output pipes),
watched through a single descriptor of the run's event loop.

Adding a reader to an asyncio loop and removing it again costs about ten microseconds each (the
loop's bookkeeping, measured on the project's machine), and a run watches four pipes: on Linux
they go into an epoll instance of the run's own, which is then the one descriptor the loop
watches, and a pipe is dropped with one ``epoll_ctl``. Elsewhere each pipe is a reader of the
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import Callable

__all__ = ["RunReaders"]

_EPOLL = hasattr(select, "epoll")


class RunReaders:
    """One attempt's readers; every method runs on ``loop``.

    ``_callbacks`` holds the descriptors watched now, each with the callback that reads it; a
    callback may drop any reader or close them all, and is then never called for a dropped
    descriptor again (not even for an event already taken from the kernel).
    """

    __slots__ = ("_callbacks", "_epoll", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._epoll: select.epoll | None = None

    def watch(self, callbacks: dict[int, Callable[[], None]]) -> None:
        """Start watching each descriptor of ``callbacks`` for reading (called once). Raises
        ``OSError`` when the kernel refuses (out of descriptors or of epoll watches); what was
        registered is then undone by ``close()``."""
        if _EPOLL:
            epoll = select.epoll(len(callbacks))
            try:
                for fd in callbacks:
                    epoll.register(fd, select.EPOLLIN)
                self._loop.add_reader(epoll.fileno(), self._on_ready)
            except BaseException:
                epoll.close()
                raise
            self._epoll = epoll
            self._callbacks.update(callbacks)
        else:
            for fd, callback in callbacks.items():
                self._loop.add_reader(fd, callback)
                self._callbacks[fd] = callback  # so that close() removes what was added

    def __contains__(self, fd: int) -> bool:
        return fd in self._callbacks

    def _on_ready(self) -> None:
        callbacks = self._callbacks
        epoll = self._epoll
        if epoll is None:
            return
        for fd, _events in epoll.poll(0):
            if self._callbacks is not callbacks:
                return  # closed by an earlier callback
            callback = callbacks.get(fd)
            if callback is not None:
                callback()

    def drop(self, fd: int) -> None:
        """Stop watching ``fd`` (nothing when it is not watched)."""
        if self._callbacks.pop(fd, None) is None:
            return
        if self._epoll is not None:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)
        else:
            self._loop.remove_reader(fd)

    def close(self) -> None:
        """Stop watching every descriptor (before they are closed)."""
        callbacks, self._callbacks = self._callbacks, {}
        epoll, self._epoll = self._epoll, None
        if epoll is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(epoll.fileno())
            epoll.close()
            return
        for fd in callbacks:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
