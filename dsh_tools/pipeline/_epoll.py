"""``PreciseEpoll``: the selector of the loops batches, code runs and calls with hooks run on
(Linux), whose timed waits end on time; None where the platform has no ``epoll``.
``new_pool_loop`` makes such a loop."""

from __future__ import annotations

import asyncio
import select
import selectors
from collections.abc import Callable
from typing import Any, Final, TypeVarTuple

__all__ = [
    "PreciseEpoll",
    "mark_given_up",
    "mark_given_up_leftovers",
    "mark_wake_only",
    "new_pool_loop",
    "set_wake_only",
]

_FD_SETSIZE = 1024  # select() takes descriptors below this
_Ts = TypeVarTuple("_Ts")
_SKIPPED_AT_MOST: Final = 64
"""Zero waits in a row that may skip their system call (see ``PreciseEpoll``)."""
_LONG_WAIT_S: Final = 0.05
"""A timed wait at least this long is one ``epoll_wait`` (see ``PreciseEpoll``)."""
_EARLY_BY_S: Final = 0.002
"""How much shorter than its timeout such an ``epoll_wait`` is asked for: its whole
milliseconds, rounded up, then end before the timer is due (rounded up once more, even
that of a float that lands a hair above a millisecond)."""

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
        ``select()``. A wait of ``_LONG_WAIT_S`` or more (a run's wall ceiling, its init's
        report; nearly always ended by a descriptor, not by its timer) is one ``epoll_wait``
        that ends ``_EARLY_BY_S`` before its timeout: should the timer be what ends it, the
        loop finds it not yet due and waits the rest precisely. Every wake-up of an empty
        Code Mode run so makes one system call, not two.

        One exception, in a loop made by ``new_pool_loop``: a zero wait (the loop has callbacks
        ready) while nothing is registered but the loop's own wake-up socket (``wake_fd``) and
        descriptors that only wake as it does (``wake_only``: the main thread's signal wake-up
        socket) returns no events without a system call, up to ``_SKIPPED_AT_MOST`` times in a
        row.
        That socket only wakes a blocked wait, and a zero wait does not block: a callback
        another thread added is in the loop's ready queue already, and the socket's bytes are
        read by the next wait that makes the call. Once the loop has a signal handler the
        socket carries signals too, and every wait makes the call. A call with hooks makes one
        such pass of its thread's loop; the system call was about a seventh of it.
        """

        def __init__(self) -> None:
            super().__init__()
            self._epoll_fd = self.fileno()
            self._precise = self._epoll_fd < _FD_SETSIZE
            self._wake_fd: int | None = None  # the descriptor that only wakes a blocked wait
            self._also_waking: set[int] = set()  # others that do only that (``wake_only``)
            self._only_wake = False  # nothing is registered but those
            self._skipped = 0  # zero waits in a row that made no system call

        def wake_fd(self, fd: int | None) -> None:
            """Name the loop's wake-up socket (None once it carries signals too)."""
            self._wake_fd = fd
            self._note_keys()

        def wake_only(self, fd: int, only: bool = True) -> None:
            """Name another descriptor that only wakes a blocked wait (``only=False``: no
            longer)."""
            if only:
                self._also_waking.add(fd)
            else:
                self._also_waking.discard(fd)
            self._note_keys()

        def _note_keys(self) -> None:
            # Called at every register and unregister: a length and, only when no more
            # descriptors are left than wake ones, lookups (listing the keys cost a code run
            # four times as many calls).
            registered = self.get_map()
            wake = self._wake_fd
            also = self._also_waking
            count = len(registered)
            self._only_wake = (
                wake is not None
                and count <= 1 + len(also)
                and wake in registered
                and (count == 1 or all(fd == wake or fd in also for fd in registered))
            )

        def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
            key = super().register(fileobj, events, data)
            self._note_keys()
            return key

        def unregister(self, fileobj: Any) -> selectors.SelectorKey:
            key = super().unregister(fileobj)
            self._note_keys()
            return key

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if self._only_wake and timeout is not None and timeout <= 0:
                self._skipped += 1
                if self._skipped < _SKIPPED_AT_MOST:
                    return []
                self._skipped = 0
            if timeout is not None and timeout > 0 and self._precise:
                if timeout >= _LONG_WAIT_S:
                    return super().select(timeout - _EARLY_BY_S)
                try:
                    select.select((self._epoll_fd,), (), (), timeout)
                except InterruptedError:
                    return []
                timeout = 0
            return super().select(timeout)

    class _PreciseLoop(asyncio.SelectorEventLoop):
        """A selector loop over a ``_PreciseEpoll`` that tells it which descriptor is its
        wake-up socket, and when that socket starts carrying signals."""

        def __init__(self) -> None:
            self._precise_selector = _PreciseEpoll()
            super().__init__(self._precise_selector)
            # All the loop has registered as it is made is its own wake-up socket.
            (wake,) = self._precise_selector.get_map().values()
            self._precise_selector.wake_fd(wake.fd)

        def wake_only(self, fd: int, only: bool = True) -> None:
            """See ``_PreciseEpoll.wake_only``."""
            self._precise_selector.wake_only(fd, only)

        def add_signal_handler(
            self, sig: int, callback: Callable[[*_Ts], object], *args: *_Ts
        ) -> None:
            self._precise_selector.wake_fd(None)
            super().add_signal_handler(sig, callback, *args)

    PreciseEpoll = _PreciseEpoll


def mark_wake_only(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Tell ``loop``, if ``new_pool_loop`` made it, that ``fd`` (registered with it) only wakes
    a blocked wait of it, as its own wake-up socket does."""
    if PreciseEpoll is not None and isinstance(loop, _PreciseLoop):
        loop.wake_only(fd)


def set_wake_only(loop: asyncio.AbstractEventLoop, fd: int, only: bool) -> bool:
    """Tell ``loop``, if ``new_pool_loop`` made it and it is open, whether ``fd`` (registered
    with it) only wakes a blocked wait now, or no longer does (``only=False``); False for any
    other loop, which this does not apply to."""
    if PreciseEpoll is None or not isinstance(loop, _PreciseLoop) or loop.is_closed():
        return False
    loop.wake_only(fd, only)
    return True


def new_pool_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose timers fire on time (for batches, code runs and each thread's
    private loop): on Linux a selector loop over a ``PreciseEpoll`` (see the class docstring),
    elsewhere the platform's default loop. What it reports goes to ``_quiet_given_up``."""
    loop = asyncio.new_event_loop() if PreciseEpoll is None else _PreciseLoop()
    loop.set_exception_handler(_quiet_given_up)
    return loop


_GIVEN_UP_PREFIX: Final = "dsh_tools given up: "
"""How the name of a task that ``mark_given_up`` marked begins."""

_DESTROYED_PENDING: Final = "Task was destroyed but it is pending!"
"""The message asyncio reports a task collected unfinished with (``call_exception_handler``)."""


def mark_given_up(task: asyncio.Task[Any]) -> None:
    """Mark ``task``, which runs what ``stop()`` gave up (a body, a hook), as one that nothing
    waits for: a loop of ``new_pool_loop`` (the system loop, a blocking caller's own) may stop
    or close before it ends, and its collection, still pending, is not reported then. (A loop
    of the caller's own keeps its own exception handler, which is left alone.) The mark is
    the task's name, which is still there when asyncio reports the task from its finalizer."""
    task.set_name(_GIVEN_UP_PREFIX + task.get_name())


def mark_given_up_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """As ``loop`` ends for good with a task ``mark_given_up`` marked still pending on it,
    mark every task still pending there too: what a given-up body or hook started in tasks of
    its own (the one ``asyncio.wait_for`` makes on Python 3.11, a task group's) is left pending
    with it, and nothing waits for those either (asyncio cannot tell which task started
    which). A loop with no given-up task pending reports every task it leaves, as ever."""
    pending = asyncio.all_tasks(loop)
    if any(task.get_name().startswith(_GIVEN_UP_PREFIX) for task in pending):
        for task in pending:
            if not task.get_name().startswith(_GIVEN_UP_PREFIX):
                mark_given_up(task)


def _quiet_given_up(
    loop: asyncio.AbstractEventLoop,
    context: dict[str, Any],
    _message: str = _DESTROYED_PENDING,
    _prefix: str = _GIVEN_UP_PREFIX,
) -> None:
    """The exception handler of a ``new_pool_loop`` loop: drops the report of a task that
    ``mark_given_up`` marked destroyed while pending, and hands every other report to the
    loop's default handler. (Its constants are bound as defaults: it may run while the
    interpreter exits, its module's globals cleared.)"""
    if context.get("message") == _message:
        get_name = getattr(context.get("task"), "get_name", None)
        if get_name is not None and str(get_name()).startswith(_prefix):
            return
    loop.default_exception_handler(context)
