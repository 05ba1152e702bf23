"""The front actor behind ``system.ref``: ``ExecuteCall`` / ``ExecuteBatch`` asks, answered
with the result itself while many asks are in flight at once."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import pykka

from .actors import ExecuteBatch, ExecuteCall
from .actors._timeouts import checked_timeout
from .pipeline import Pipeline
from .pipeline._pool import BatchRunner

__all__ = ["FrontActor", "FrontRef", "Submit"]

Submit = Callable[[Coroutine[Any, Any, Any]], concurrent.futures.Future[Any]]
"""Start a coroutine on the system loop (``SystemLoop.submit``)."""


class FrontActor(pykka.ThreadingActor):
    """Answers ``ExecuteCall`` and ``ExecuteBatch`` asks without blocking its mailbox.

    Each request is started on the system loop and answered at once with a future of its
    result (set when it settles), so many asks may be in flight at once and a slow call never
    delays another. Its ref (``FrontRef``) waits for that future, so ``ref.ask(message)``
    returns the result itself.
    """

    use_daemon_thread = True  # a forgotten stop() must not keep the process alive

    def __init__(
        self,
        pipeline: Pipeline,
        batches: BatchRunner,
        submit: Submit,
        publish: Callable[[FrontRef], None],
    ) -> None:
        super().__init__()
        self._pipeline = pipeline
        self._batches = batches
        self._submit = submit
        publish(FrontRef(self))  # start() returns the plain ref; the system hands out this one

    def on_receive(self, message: Any) -> Any:
        _check_message(message)
        if isinstance(message, ExecuteCall):
            coro: Coroutine[Any, Any, Any] = self._pipeline.run(message, inline=False)
        else:
            coro = self._batches.run(message)
        answer: pykka.Future[Any] = pykka.ThreadingFuture()
        self._submit(coro).add_done_callback(partial(_settle_answer, answer))
        return answer


def _check_message(message: object) -> None:
    if not isinstance(message, ExecuteCall | ExecuteBatch):
        raise TypeError(
            "system.ref answers ExecuteCall and ExecuteBatch messages, "
            f"got {type(message).__name__}"
        )


def _settle_answer(answer: pykka.Future[Any], done: concurrent.futures.Future[Any]) -> None:
    try:
        answer.set(done.result())
    except BaseException:
        answer.set_exception()


class FrontRef(pykka.ActorRef[FrontActor]):
    """The front actor's ref: an ask's reply is the future of the result; ``ask`` waits for
    both (within one ``timeout``), so callers get the result as from any actor."""

    def tell(self, message: Any) -> None:
        """Send ``message`` without waiting for its result. Another message raises
        ``TypeError`` here: told, the actor would have no caller to give it to, and pykka stops
        an actor whose ``on_receive`` raises for a told message, so every later ask of the
        system would fail with ``ActorDeadError``."""
        _check_message(message)
        super().tell(message)

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        checked_timeout(timeout, caller="ref.ask() ", poll=True)  # before it is sent
        reply: pykka.Future[Any] = super().ask(message, block=False)
        answer: pykka.Future[Any] = pykka.ThreadingFuture()
        answer.set_get_hook(partial(_result_of, reply))
        if block:
            return answer.get(timeout=timeout)
        return answer


def _result_of(reply: pykka.Future[Any], timeout: float | None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    inner = reply.get(timeout=timeout)
    if not isinstance(inner, pykka.Future):
        return inner
    return inner.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
