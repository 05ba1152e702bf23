"""A tool body in a task of its own: its outcome captured without failing the task, its
cancellation (the pipeline's, the awaiting task's, or one it asked for itself) told apart, and
the call's abort signal watched for it. The dispatch stage (``_dispatch``) runs bodies with these.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from types import FrameType
from typing import Any, NoReturn

from ..actors import AbortSignal
from ..registry._execution import CallRecord
from ._core import (
    BodyCancelled,
    cancel_from_any_thread,
    cancel_soon,
    cancellation_behind,
    log,
    log_fields,
    owned_generator_exit,
)

__all__ = [
    "awaited",
    "call_plain_body",
    "capture",
    "closing",
    "own_cancellation",
    "raise_body_failure",
    "wake",
    "watch_body",
]


async def own_cancellation(
    task: asyncio.Task[Any], requests: int, outcome: tuple[bool, Any]
) -> tuple[bool, Any]:
    """The outcome of a body that cancelled its own task (the awaiting one), which it shares
    with the call's later steps. A body in a task of its own that asks for its cancellation and
    returns before it arrives ends cancelled, a failure; here the request would instead reach
    whatever the call awaits next. So it is taken now, as the body's outcome. A request the body
    already received (and swallowed) leaves its outcome as it is. Either way the requests are
    the body's, and the task's count goes back to what it was before the body."""
    try:
        if outcome[0]:
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError as exc:
                return False, exc  # from inside the handler, which unbinds ``exc``: no cycle
        return outcome
    finally:
        while task.cancelling() > requests:
            task.uncancel()


async def awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def capture(
    coro: Coroutine[Any, Any, Any], settled: asyncio.Future[None]
) -> tuple[bool, Any]:
    """A body's outcome, ``(True, value)`` or ``(False, exception)``, settling ``settled`` in
    the same step. The body's task itself never fails, so no ``SystemExit`` or
    ``KeyboardInterrupt`` from a body can escape into the event loop."""
    try:
        value = await coro
    except BaseException as exc:
        if _cancel_requested(inspect.currentframe()):
            await _take_pending_cancel()
        wake(settled)
        return False, exc  # from inside the handler, which unbinds ``exc``: no cycle via this frame
    wake(settled)
    return True, value


def _cancel_requested(frame: FrameType | None) -> bool:
    """Whether a cancellation of the task whose step runs ``frame`` (``capture``'s, the top of
    its body's task) is pending. None is when no step of that task runs: the coroutine is being
    closed (its task given up by ``stop()`` and collected, perhaps while another task of some
    loop steps), and it must not wait for anything then.

    Told by frames, as nothing else public can: ``capture``'s coroutine cannot be handed to
    itself, and asyncio names no task a step or a close runs for but the current one, whose
    coroutine is ``capture``'s own exactly when its ``cr_frame`` is ``frame``. (This runs only
    for a body that failed or was closed; ``frame`` is None only where Python keeps no frames,
    and the current task is trusted then, as before.)"""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop runs: the coroutine is being closed, nothing is pending
        return False
    if task is None:
        return False
    if frame is not None and getattr(task.get_coro(), "cr_frame", None) is not frame:
        return False
    return task.cancelling() > 0


async def _take_pending_cancel() -> None:
    """Receive a cancellation requested of this task and not yet delivered, if any. A body that
    cancels its own task and then raises fails with what it raised, as an asyncio task would;
    returning its failure with the request still pending would end the task cancelled instead.
    (A cancellation the body already received passes through here without a trace.)"""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(0)


def watch_body(
    rec: CallRecord,
    task: asyncio.Task[Any],
    loop: asyncio.AbstractEventLoop,
    signal: AbortSignal,
    running: set[CallRecord],
) -> Callable[[], None]:
    """Make ``task`` the call's body task, one of the bodies ``running`` now, cancelled when
    ``signal`` aborts or, if the call was interrupted on its way here (from a pool's worker
    thread), once it has taken its first step, as ``interrupt()`` would: the body then sees the
    cancellation where it waits. Returns what undoes all that once the body has ended."""
    rec.body_task, rec.body_loop, rec.body_signal = task, loop, signal
    running.add(rec)
    remove = signal.add_callback(partial(cancel_from_any_thread, loop, rec, task))
    if rec.stop_reason is not None:
        cancel_soon(rec, task)

    def unwatch() -> None:
        remove()
        rec.body_task = None
        running.discard(rec)

    return unwatch


def raise_body_failure(rec: CallRecord, failure: BaseException) -> NoReturn:
    """Raise what a body's failure means to its dispatch: ``BodyCancelled`` when the pipeline
    (or the awaiting task's cancellation) cancelled it, a ``RuntimeError`` for a
    ``GeneratorExit`` the body raised itself (not this coroutine closing), else the failure. A
    body the pipeline cancelled that ends with an error of its own instead (its cleanup
    failed) was cancelled all the same: ``BodyCancelled``, the error logged."""
    try:
        if isinstance(failure, GeneratorExit):
            raise owned_generator_exit("the tool body") from failure
        if rec.cancel_sent or rec.outer_cancelled:
            if isinstance(failure, asyncio.CancelledError):
                raise BodyCancelled
            if isinstance(failure, Exception):
                # The call was still cancelled (ABORTED, as any cancelled body). When the
                # cancellation reached the body and its cleanup failed, that error is the log's;
                # a body that read its signal and settled its own way, raising its own error
                # (a Code Mode run's abort), was never cancelled and failed nothing.
                if rec.cancel_sent or cancellation_behind(failure) is not None:
                    fields = log_fields(rec)
                    fields["stage"] = "execute"
                    log.warning(
                        f"the tool body's cleanup after its cancellation raised: {failure!r}",
                        exc_info=failure,
                        **fields,
                    )
                raise BodyCancelled
        raise failure
    finally:
        del failure  # the traceback keeps this frame too


def call_plain_body(execute: Callable[..., Any], arguments: Any, ctx: Any) -> Any:
    """Call a plain body, inline or on a worker thread; a ``GeneratorExit`` it raises is its
    failure, not the closing of the coroutine that awaits it, and a ``StopIteration`` is a
    ``RuntimeError`` as from an ``async def`` body (``without_stop_iteration``)."""
    try:
        return execute(arguments, ctx)
    except GeneratorExit as exc:
        raise owned_generator_exit("the tool body") from exc
    except StopIteration as exc:  # written out, not a call: the hookless call's hot path
        raise RuntimeError("the tool body raised StopIteration") from exc


def closing(task: asyncio.Task[Any]) -> bool:
    """Whether a ``GeneratorExit`` that reached ``task``'s coroutine comes from its closing (no
    step of the task runs now) rather than from a body that raised it within a step."""
    try:
        return asyncio.current_task() is not task
    except RuntimeError:  # no loop runs: the coroutine is being closed
        return True


def wake(waiter: asyncio.Future[None], _task: object = None) -> None:
    """Settle ``waiter`` unless it is settled or cancelled already (a task's done callback)."""
    if not waiter.done():
        try:  # noqa: SIM105 (contextlib.suppress costs every body a context manager)
            waiter.set_result(None)
        except RuntimeError:  # its loop has closed: the collector closes the body's task
            pass
