"""The descriptors one attempt of a run reads (its channel, status and native output pipes),
watched through a single descriptor of the run's event loop.

Adding a reader to an asyncio loop and removing it again costs about ten microseconds each (the
loop's bookkeeping, measured on the project's machine), and a run watches four pipes: on Linux
they go into an epoll instance that the loop's runs share (``_LoopWatch``), which is the one
descriptor the loop watches, and a pipe is dropped with one ``epoll_ctl``. The instance is made
at the loop's first run and kept for the loop's life: one made and closed per run cost each run
two system calls more. A loop of ``new_pool_loop`` that watches nothing but its wake-up
descriptors makes no system call for a zero wait, which every later call with hooks on that
loop would otherwise pay: between runs the instance, which holds nothing then and so is never
readable, is one of those descriptors to it (``set_wake_only``), rather than added to the loop
and removed again each run (two system calls and asyncio's bookkeeping of a reader). Any other
loop watches it only while it holds a pipe. Elsewhere each pipe is a reader of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import weakref
from collections.abc import Callable

from ..pipeline._epoll import set_wake_only

__all__ = ["RunReaders"]

_EPOLL = hasattr(select, "epoll")


class _LoopWatch:
    """The epoll instance of one event loop's runs (it closes with the loop's last reference),
    the callback of every descriptor in it, and whether the loop watches it now: from its
    first descriptor in to its last out (``RunReaders`` calls ``start`` and ``stop``). It
    holds no reference to the loop, so that its entry in ``_WATCHES`` goes with the loop."""

    __slots__ = ("callbacks", "epoll", "parked", "shared", "watched")

    def __init__(self, *, shared: bool) -> None:
        self.epoll = select.epoll()
        self.callbacks: dict[int, Callable[[], None]] = {}
        self.watched = False
        self.shared = shared  # the loop's, kept for its life (else one attempt's, closed with it)
        # Between runs: still a reader of the loop, as a descriptor that only wakes its waits.
        self.parked = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``loop`` watch the instance (it holds a descriptor now)."""
        if not self.watched:
            if self.parked:
                self.parked = False
                set_wake_only(loop, self.epoll.fileno(), False)
            else:
                loop.add_reader(self.epoll.fileno(), self.on_ready)
            self.watched = True

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``loop`` stop watching the instance once it holds no descriptor (a loop of
        ``new_pool_loop`` keeps it as a descriptor that only wakes its waits: see the module)."""
        if self.watched and not self.callbacks:
            self.watched = False
            if self.shared and set_wake_only(loop, self.epoll.fileno(), True):
                self.parked = True
                return
            try:
                loop.remove_reader(self.epoll.fileno())
            except Exception:  # a closed loop: nothing watches it any more
                return

    def on_ready(self) -> None:
        callbacks = self.callbacks
        parked = self.parked  # before the callbacks, whose last drop may park it
        events = self.epoll.poll(0)
        for fd, _events in events:
            # Looked up now: an earlier callback may have dropped it (``RunReaders.drop``).
            callback = callbacks.get(fd)
            if callback is not None:
                callback()
        if parked and events:
            # Readable though it holds nothing: a descriptor closed while still in it (and
            # open in another process), which epoll goes on reporting. The loop stops watching
            # the instance between runs, as before it was parked, rather than wake for it.
            self.parked = False
            loop = asyncio.get_running_loop()
            set_wake_only(loop, self.epoll.fileno(), False)
            loop.remove_reader(self.epoll.fileno())


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatch] = (
    weakref.WeakKeyDictionary()
)
"""Each event loop's ``_LoopWatch`` (made at its first run); touched on that loop only."""


def _loop_watch(loop: asyncio.AbstractEventLoop) -> tuple[_LoopWatch, bool]:
    """``loop``'s shared ``_LoopWatch`` and ``True``; for a loop that cannot be referenced
    weakly (a loop type without ``__weakref__``), one of the run's own and ``False``."""
    try:
        watch = _WATCHES.get(loop)
    except TypeError:
        return _LoopWatch(shared=False), False
    if watch is None:
        watch = _WATCHES[loop] = _LoopWatch(shared=True)
    return watch, True


class RunReaders:
    """One attempt's readers; every method runs on ``loop``.

    ``_fds`` holds the descriptors watched now; a callback may drop any reader or close them
    all, and is then never called for a dropped descriptor again (not even for an event already
    taken from the kernel: the loop's ``_LoopWatch`` looks each callback up as it calls it).
    Each descriptor leaves the shared epoll instance before it is closed (``drop``, ``close``):
    the kernel would otherwise keep watching it while a copy of it lives in another process,
    and report its events under a number a later run may reuse.
    """

    __slots__ = ("_fds", "_loop", "_own", "_watch")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fds: dict[int, Callable[[], None]] = {}
        self._watch: _LoopWatch | None = None
        self._own = False  # ``_watch`` is this attempt's alone, closed with it

    def watch(self, callbacks: dict[int, Callable[[], None]]) -> None:
        """Start watching each descriptor of ``callbacks`` for reading (called once). Raises
        ``OSError`` when the kernel refuses (out of descriptors or of epoll watches); what was
        registered is then undone by ``close()``."""
        if _EPOLL:
            watch, shared = _loop_watch(self._loop)
            self._watch, self._own = watch, not shared
            for fd, callback in callbacks.items():
                watch.epoll.register(fd, select.EPOLLIN)
                self._fds[fd] = callback  # so that close() unregisters what was registered
                watch.callbacks[fd] = callback
            watch.start(self._loop)
        else:
            for fd, callback in callbacks.items():
                self._loop.add_reader(fd, callback)
                self._fds[fd] = callback  # so that close() removes what was added

    def __contains__(self, fd: int) -> bool:
        return fd in self._fds

    def drop(self, fd: int) -> None:
        """Stop watching ``fd`` (nothing when it is not watched)."""
        if self._fds.pop(fd, None) is None:
            return
        watch = self._watch
        if watch is not None:
            watch.callbacks.pop(fd, None)
            _unregister(watch.epoll, fd)
            watch.stop(self._loop)
        else:
            self._loop.remove_reader(fd)

    def close(self) -> None:
        """Stop watching every descriptor (before they are closed)."""
        fds, self._fds = self._fds, {}
        watch = self._watch
        for fd in fds:
            if watch is not None:
                watch.callbacks.pop(fd, None)
                _unregister(watch.epoll, fd)
            else:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(fd)
        if watch is not None:
            watch.stop(self._loop)
            if self._own:
                self._watch = None
                watch.epoll.close()


def _unregister(epoll: select.epoll, fd: int) -> None:
    # Not ``contextlib.suppress``: a run drops four descriptors, and the context manager cost
    # each three Python calls more than the ``epoll_ctl`` itself.
    try:
        epoll.unregister(fd)
    except (OSError, ValueError):  # ValueError: the epoll instance is closed
        return
