"""``BodyThreads``: the worker threads plain-function bodies run on off the event loop.

A started dispatch must never wait for a free thread (a body blocked on something another
body will do would otherwise deadlock the batch), so unlike ``ThreadPoolExecutor`` there is no
cap: an idle thread is reused (the one idle the shortest time, whose stack is warm), else a new
one starts. A thread idle for ``IDLE_S`` exits, so that a burst of bodies does not leave its
threads (and their stacks) behind for the life of the system; ``shutdown`` ends the rest.
``threads()`` lists them, so that stopping can wait (briefly) for each.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from ._loop import interrupts_deferred

__all__ = ["BodyThreads"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_Work = tuple[
    "concurrent.futures.Future[Any] | None", Callable[..., Any], tuple[Any, ...], dict[str, Any]
]
"""What a thread runs: ``fn(*args, **kwargs)`` settling the future, or with no future (``run``)
whatever it returns or raises dropped."""

IDLE_S: Final = 60.0
"""How long a thread waits for work before it exits (the least recently used go first: work
goes to the one idle the shortest time)."""

_NO_ARGS: tuple[Any, ...] = ()
_NO_KWARGS: dict[str, Any] = {}


class _Worker:
    __slots__ = ("inbox", "thread")

    def __init__(self, owner: BodyThreads, name: str, first: _Work) -> None:
        self.inbox: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self.inbox.put(first)
        self.thread = threading.Thread(target=owner._serve, args=(self,), name=name, daemon=True)


class BodyThreads(concurrent.futures.Executor):
    """An executor with no cap on its threads, reusing idle ones first."""

    def __init__(self, thread_name_prefix: str = "dsh-tools-body") -> None:
        self._prefix = thread_name_prefix
        self._idle_s = IDLE_S
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._all: list[threading.Thread] = []
        self._numbers = itertools.count()
        self._closed = False

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._hand((future, fn, args, kwargs))
        return future

    def hand_noting_interrupts(
        self,
        future: concurrent.futures.Future[_T],
        fn: Callable[_P, _T],
        /,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> bool:
        """``submit``, settling ``future``, which the caller made (and waits on) before, from a
        thread where a Ctrl-C raises wherever that thread stands (a blocking call's): one that
        comes once the work is handed over (while a new thread starts, the hand-over's one
        long step, say) is noted instead of raised, which would lose the caller's wait for
        work already handed over. One that comes before raises, and ``fn`` never runs.
        Whether a Ctrl-C was noted: the caller raises it in its own time."""
        return self._hand((future, fn, args, kwargs), note_interrupts=True)

    def run(self, fn: Callable[[], object]) -> None:
        """``submit(fn)`` for a caller that never looks at the outcome: no future is made (its
        condition and lock cost a call as much as a short body), and what ``fn`` returns or
        raises is dropped, as an unread future's would be."""
        self._hand((None, fn, _NO_ARGS, _NO_KWARGS))

    def _hand(self, work: _Work, *, note_interrupts: bool = False) -> bool:
        """Give ``work`` to an idle thread, else to a new one. ``note_interrupts``: a Ctrl-C
        that comes once the work is handed over (while the new thread starts, or as the
        hand-over ends) is noted, not raised; whether one came. One that comes before raises,
        and the work never runs. Without ``note_interrupts`` it raises either way, though
        never with the work half handed over: an idle thread lost, or a new one not started
        (which ``shutdown`` could never join), or started twice.

        A Ctrl-C raises only where the interpreter checks for signals: after a call, or as a
        Python function begins. So the one call handing the work to an idle thread is that
        branch's last step (``del`` rather than ``pop()``, which is a call), and once
        ``worker`` is bound the work is in its hands: the handler below finishes what a
        Ctrl-C cut short and tells it from one that came first. That costs a call nothing,
        where swapping in a SIGINT handler for the whole hand-over costs it as much as a
        short body."""
        worker: _Worker | None = None
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                idle = self._idle
                if idle:
                    worker = idle[-1]
                    del idle[-1]
                    worker.inbox.put(work)
                    return False
                worker = _Worker(self, f"{self._prefix}_{next(self._numbers)}", work)
                self._all.append(worker.thread)
            # Never cut short: a thread launched but not yet marked started looks unstarted,
            # and starting it again would run a second thread on the same worker.
            noted = interrupts_deferred()
            with noted:
                worker.thread.start()
            if noted.came and not note_interrupts:
                raise KeyboardInterrupt
            return noted.came
        except KeyboardInterrupt:
            if worker is None:
                raise  # before the hand-over: nothing of it was done
            if worker.thread.ident is None:  # a new thread, recorded but not started
                with interrupts_deferred():
                    worker.thread.start()
            if not note_interrupts:
                raise
            return True

    def _serve(self, worker: _Worker) -> None:
        inbox, idle_s = worker.inbox, self._idle_s
        while True:
            try:
                work = inbox.get(timeout=idle_s)
            except queue.Empty:
                with self._lock:
                    # Still idle: nobody can hand it work any more. Otherwise it was taken
                    # just now, and the work is in its inbox already (both under the lock).
                    if worker in self._idle:
                        self._idle.remove(worker)
                        self._all.remove(worker.thread)
                        return
                continue
            if work is None:
                return
            future, fn, args, kwargs = work
            del work
            if future is None:
                try:  # noqa: SIM105 (a context manager costs every body a call)
                    fn(*args, **kwargs)
                except BaseException:  # dropped, as from a future nobody reads
                    pass
            elif future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # the waiter gets it, as from ThreadPoolExecutor
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            with self._lock:
                if self._closed:
                    return
                self._idle.append(worker)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; idle threads exit now, busy ones after their body returns.
        (Work is handed to a thread as it is submitted, so nothing is ever queued to cancel.)"""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.inbox.put(None)
        if wait:
            for thread in self.threads():
                if thread is not threading.current_thread():
                    thread.join()

    def threads(self) -> list[threading.Thread]:
        """Every thread this executor started that has not retired for want of work (alive
        or not)."""
        with self._lock:
            return list(self._all)
