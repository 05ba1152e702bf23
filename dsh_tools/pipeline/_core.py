"""What every pipeline stage shares: the stage kinds, the abort rules, cancellation of a call
from the pipeline's side, and turning what escapes user code into a result.

``PipelineCore`` holds the published registry snapshot and the calls running now; the stage
rooms (``_prepare``, ``_dispatch``, ``_commit``) extend it and ``Pipeline`` chains them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any, Final, TypeVarTuple

import msgspec
from msgspec import UNSET

from ..actors import (
    NEVER_ABORTED,
    AbortError,
    AbortSignal,
    HarnessError,
    ToolExecutionFailure,
    ToolExecutionResult,
)
from ..actors._attached import Attached
from ..actors._logging import get_logger
from ..registry import compact_json
from ..registry._execution import Announced, CallRecord
from ..registry._snapshot import SnapshotCell, ToolEntry
from ._approval import ApprovalCall
from ._epoll import mark_given_up
from ._loop import interrupted_task, running_loop
from ._results import cancelled, failure_from_exception, with_abort_reason
from ._session import SessionLog

__all__ = [
    "BODY_GIVE_UP_S",
    "BODY_WIND_DOWN_S",
    "CANCELLED_REASON",
    "DISPATCH",
    "DISPATCH_STAGE",
    "FINISH",
    "POST",
    "STOPPING_REASON",
    "BodyCancelled",
    "PipelineCore",
    "ScopeCancelled",
    "Stage",
    "abandon_body",
    "abort_reason",
    "aborted_code",
    "after_give_up_time",
    "call_aborted",
    "caller_interrupted",
    "cancel_body",
    "cancel_soon",
    "cancellation_behind",
    "close_awaitable",
    "compact_arguments",
    "hooks_still_wait",
    "log",
    "log_fields",
    "owned_generator_exit",
    "passes_cancel",
    "replace_if_aborted",
    "scope_cancelled",
    "take_back_cancels",
    "warn_given_up",
    "wind_down",
]

CANCELLED_REASON = "the awaiting task was cancelled"
"""The abort reason of a call whose awaiting task (``execute_async``, a batch) was cancelled."""

INTERRUPTED_REASON = "the caller was interrupted"
"""The abort reason of a call or batch whose blocking caller was interrupted (Ctrl-C)."""

STRANDED_CHECK = 64
"""How many calls may be in flight at once before ``run`` looks for calls whose caller's event
loop closed under them (``abandon_stranded``); then twice as many as remain, and back down to
twice as many as are in flight (at least this) once fewer than a quarter of that are."""

STOPPING_REASON = "the tool system is stopping"
"""The abort reason of a call that ``ToolSystem.stop()`` interrupted."""


log = get_logger("dsh_tools.pipeline")

# Stage kinds: what a prepared or dispatched call needs next.
DISPATCH = 0  # run the execute waterfall and the body
POST = 1  # run post-execute, then finish
FINISH = 2  # finish only (post-execute is bypassed)


class Stage:
    """Where a call stands between stages: the next step and the candidate result."""

    __slots__ = ("kind", "result")

    def __init__(self, kind: int, result: ToolExecutionResult | None) -> None:
        self.kind = kind
        self.result = result


DISPATCH_STAGE = Stage(DISPATCH, None)


class BodyCancelled(Exception):
    """The body ended by the cancellation the pipeline (or the awaiting task) asked for."""


class ScopeCancelled(Exception):
    """The task of a call was cancelled while an execute wrapper's ``next()`` waited for the
    body, by user code around that ``next()`` (the wrapper's own ``asyncio.timeout``, a
    ``TaskGroup`` of its: ``scope_cancelled``). The body has settled; ``next()`` raises
    ``CancelledError`` (these args) into the wrapper, whose scope takes it (``_invoke``)."""


def scope_cancelled(rec: CallRecord) -> bool:
    """Whether the task running ``rec``'s stage now, found cancelled, was cancelled by user
    code of the call's own: neither by the task awaiting ``execute_async`` (``outer``) nor for
    its blocking caller's Ctrl-C (``caller_interrupted``). Under ``execute_async`` that is a
    task of a wrapper's other than the caller's (``asyncio.wait_for`` runs ``next()`` in one
    on Python 3.11, a ``TaskGroup`` does), cancelled while the caller's is not; in the
    caller's own task the two cannot be told apart (``passes_cancel``). The pipeline's own
    cancellations of it (``own_cancels``) are taken back before this is asked."""
    outer = rec.outer
    if outer is None:
        return not caller_interrupted(rec)
    return outer.cancelling() <= rec.cancel_base and asyncio.current_task() is not outer


def passes_cancel(rec: CallRecord) -> bool:
    """Whether the caller's cancellation, found by a wait for ``rec``'s body, is also raised
    into the execute wrapper whose ``next()`` waits there, once the body has settled. Under
    ``execute_async`` a wrapper runs in the caller's own task, where a scope of its own (an
    ``asyncio.timeout`` around ``next()``) cancels that task just as the caller does: the
    call is interrupted as for the caller, and the wrapper gets the ``CancelledError``, as
    asyncio would give it. Its scope takes its own back (then the wrapper answers, as under
    ``execute``); the caller's goes on up the chain."""
    return rec.hooks_waiting and rec.outer is not None


def call_aborted(rec: CallRecord) -> bool:
    """Whether the caller's signal aborted or the pipeline interrupted the call."""
    # Most calls have no signal of their own (``NEVER_ABORTED``), and asking a signal costs a
    # property call: every call passes here, and where the pipeline asks a call's signal
    # inline it first compares it with ``NEVER_ABORTED`` the same way.
    signal = rec.signal
    return (signal is not NEVER_ABORTED and signal.aborted) or rec.stop_reason is not None


def abort_reason(rec: CallRecord, signal: AbortSignal | None = None) -> Any:
    if rec.signal.aborted:
        return rec.signal.reason
    if signal is not None and signal.aborted:
        return signal.reason
    return rec.stop_reason


def aborted_code(rec: CallRecord) -> str:
    """The code an aborted call settles with: ``ABORTED`` once its body began, else
    ``ABORTED_BEFORE_DISPATCH``."""
    return "ABORTED" if rec.body_invoked else "ABORTED_BEFORE_DISPATCH"


def replace_if_aborted(rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
    """A success of a call that was aborted meanwhile becomes the cancellation result
    (keeping the success in ``settled_with``)."""
    # ``call_aborted``, inline: every call passes here twice.
    signal = rec.signal
    if (
        (signal is not NEVER_ABORTED and signal.aborted) or rec.stop_reason is not None
    ) and not result.is_error:
        return cancelled(
            aborted_code(rec), result.additional_contexts, reason=abort_reason(rec), settled=result
        )
    return result


def close_awaitable(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


Announcer = Callable[[Any, str | None], Announced | None]
"""See ``PipelineCore.announcers``."""


class PipelineCore:
    """The published snapshot, the calls running now, and what every stage needs."""

    def __init__(
        self,
        cell: SnapshotCell,
        *,
        session: SessionLog,
        executor: Executor,
        approval: Callable[[], ApprovalCall | None],
        background: Callable[[Awaitable[Any], str, dict[str, Any]], None],
    ) -> None:
        self._cell = cell
        self.session = session
        self._executor = executor
        self._approval = approval
        self._background = background
        self.live: set[CallRecord] = set()  # calls inside ``run`` now (stop() interrupts them)
        # ``live``'s size at which ``run`` next looks for calls stranded on a closed loop.
        self.stranded_check_at = STRANDED_CHECK
        # Set by ``interrupt_all`` (stop()) before it reads ``live``: a call that enters ``run``
        # later (it passed the system's running check as stop() began) reads it after adding
        # itself to ``live``, so one of the two interrupts it.
        self.stop_reason: Any = None
        # Calls whose async body runs now, whatever started them (``run``, a pool).
        self.bodies: set[CallRecord] = set()
        # Calls whose plain body a task awaits on a worker thread now (``body_wait``),
        # whatever started them.
        self.body_waits: set[CallRecord] = set()
        # Async bodies given up while they still run (``DispatchStages.give_up_body``): held until
        # they end, since asyncio keeps only weak references to tasks.
        self.given_up: set[asyncio.Task[Any]] = set()
        # What each running pool does once stop()'s grace is over (``watch_pool``).
        self._pools: Attached[Callable[[], None]] = Attached()
        # When (``time.monotonic()``) stop(), its grace over, last had a hook chain given up a
        # while later (``hooks_overdue``): it waits for the call that settles to settle.
        self.hooks_given_up_at = 0.0
        # By tool name: who is told, with its arguments (a snapshot) and agent, as a call to
        # that tool begins, before its guards, hooks and approval, so that what its body will
        # need can get ready meanwhile (Code Mode prepares the run). It may return what to call
        # once the call has ended, however it ended. Quick, any thread, never raises; it must
        # not act on the call's behalf, which may yet be refused.
        self.announcers: dict[str, Announcer] = {}

    def release_announced(self, rec: CallRecord) -> None:
        """Give back what announcing ``rec`` took (a pre-forked worker), if it still holds it.
        Never raises: nothing of it is the call's."""
        announced = rec.announced
        if announced is not None:
            rec.announced = None
            with contextlib.suppress(Exception):
                announced()

    def lookup(self, name: str, agent: str | None) -> ToolEntry | None:
        """The entry ``name`` resolves to for ``agent`` in the current snapshot."""
        return self._cell.current.lookup(name, agent)

    def visible_names(self, agent: str | None) -> list[str]:
        """The names ``agent`` sees now, in view order."""
        return list(self._cell.current.view(agent))

    # --- cancellation --------------------------------------------------------------------------

    def interrupt(self, rec: CallRecord, reason: Any, anyway: bool = False) -> None:
        """Abort ``rec`` from the pipeline's side (any thread): remember ``reason``, abort the
        signal the pipeline owns for it, cancel its async body's task (by the rule of
        ``cancel_body``; ``anyway``: even a body that watches its signal). The call still
        settles and commits as usual; its success becomes ``ABORTED``."""
        if rec.stop_reason is None:
            rec.stop_reason = reason
        if anyway:
            rec.hurried = True
        own = rec.own
        if own is not None:
            own.abort(reason)
        task, loop = rec.body_task, rec.body_loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                if anyway:
                    loop.call_soon_threadsafe(cancel_body, rec, task, True)
                else:
                    loop.call_soon_threadsafe(cancel_soon, rec, task)
        approval = rec.approval_task
        if approval is not None:
            with contextlib.suppress(RuntimeError):
                approval.get_loop().call_soon_threadsafe(approval.cancel)
        hooks = rec.hook_task
        if hooks is not None:
            with contextlib.suppress(RuntimeError):
                hooks.get_loop().call_soon_threadsafe(cancel_hooks_soon, rec, hooks)

    def interrupt_all(self, reason: Any) -> None:
        """``interrupt`` every call running through ``run`` now, and every call that enters it
        from now on (``stop()``)."""
        self.stop_reason = reason
        for rec in list(self.live):
            self.interrupt(rec, reason)

    def watch_pool(self, overdue: Callable[[], None]) -> Callable[[], None]:
        """Have ``overdue()`` called (on any thread) once ``stop()``'s grace is over, while
        the pool that gives it runs: it settles what its calls still wait for
        (``abandon_bodies``). Returns the function that stops the watch."""
        return self._pools.attach(overdue)

    def hooks_overdue(
        self, rec: CallRecord, give_up: Callable[[asyncio.Task[Any]], object]
    ) -> bool:
        """``stop()``'s grace is over: cancel the hook chain ``rec`` still waits on, once more
        (a hook that took the interrupt's cancellation and went on waiting), and have
        ``give_up(task)`` called ``BODY_GIVE_UP_S`` later on the loop of the ``task`` it
        waits in, to settle the call without it should it go on; whether it waits. A hook
        chain of ``rec``'s that starts waiting later (a post-execute hook, a wrapper's code
        after ``next()``, once ``stop()`` gave up the body) is not waited for either: it is
        cancelled at once and given up ``LATE_HOOK_GIVE_UP_S`` later (``wind_down``)."""
        rec.hurried = True
        later = rec.late_give_up = partial(self._give_up_later, give_up)
        task = rec.hook_task
        if task is None or not rec.hooks_waiting or task.done():
            return False
        with contextlib.suppress(RuntimeError):  # the loop has closed
            task.get_loop().call_soon_threadsafe(cancel_hooks, rec, task)
            later(task, BODY_GIVE_UP_S)
        return True

    def _give_up_later(
        self,
        give_up: Callable[[asyncio.Task[Any]], object],
        task: asyncio.Task[Any],
        delay: float,
    ) -> None:
        """Have ``give_up(task)`` called ``delay`` seconds from now, on ``task``'s loop, and
        ``stop()`` wait for what it settles (``hooks_given_up_at``); from any thread
        (``RuntimeError`` once that loop has closed)."""
        self.hooks_given_up_at = time.monotonic()
        after_give_up_time(task.get_loop(), give_up, task, delay=delay)

    def hooks_gone_on(self, rec: CallRecord, task: asyncio.Task[Any] | None) -> bool:
        """``stop()``'s grace over, and ``BODY_GIVE_UP_S`` since ``hooks_overdue`` cancelled
        the hook chain ``rec`` waits on in ``task`` once more: whether it still waits there (a
        hook that swallows every cancellation); if so, it is given up, as a body that does is
        (``give_up_body``): logged, and ``task`` held until it ends. Call on ``task``'s loop."""
        if not hooks_still_wait(rec, task):
            return False
        warn_given_up(rec, rec.stage, HOOK_STAGES[rec.stage])
        return True

    def hold_given_up(self, task: asyncio.Task[Any]) -> None:
        """Hold ``task``, which runs what ``stop()`` gave up (a body, a hook), until it ends:
        asyncio keeps only weak references to tasks. Its loop may stop or close before it ends
        (the system loop's, a blocking caller's): destroyed pending then, it is not reported,
        as nothing waits for it (``mark_given_up``)."""
        mark_given_up(task)
        given_up = self.given_up
        given_up.add(task)
        task.add_done_callback(given_up.discard)

    def given_up_stage(self, rec: CallRecord) -> Stage:
        """What a call whose hook chain ``stop()`` gave up on (``hooks_gone_on``) settles with:
        ``ABORTED`` once its body began, else ``ABORTED_BEFORE_DISPATCH``; no more hooks run."""
        failed = cancelled(aborted_code(rec), call_id=rec.call_id, reason=abort_reason(rec))
        return Stage(FINISH, failed)

    def _check_outer(self, rec: CallRecord, caught: BaseException | None = None) -> bool:
        """Whether the awaiting task has been cancelled since the call began (then interrupt
        the call once). ``caught``: the ``CancelledError`` the call's step took in that task,
        whose message (``task.cancel(msg)``) the task gets back when the call has settled."""
        outer = rec.outer
        if outer is None:
            return False
        if not rec.outer_cancelled and outer.cancelling() > rec.cancel_base:
            rec.outer_cancelled = True
            if rec.stop_reason is not CANCELLED_REASON:  # not once more (``passes_cancel``)
                self.interrupt(rec, CANCELLED_REASON)
        if rec.outer_cancelled and caught is not None and not rec.outer_cancel_args:
            rec.outer_cancel_args = caught.args
        return rec.outer_cancelled

    def _fault(self, rec: CallRecord, exc: BaseException) -> ToolExecutionFailure:
        """The result for ``exc`` escaping user code at ``rec.stage``: the cancellation result
        when it is the awaiting task's cancellation, else a failure, logged once with its
        traceback. ``KeyboardInterrupt`` / ``SystemExit`` on the caller's own thread are
        re-raised by ``run`` after the result is recorded (the Ctrl-C's call settles as
        interrupted); anywhere else they stay a failure, so that no user code can stop the
        system loop."""
        rec.hooks_waiting = False  # whatever raised, no hook of this stage waits any more
        if isinstance(exc, asyncio.CancelledError):
            if take_back_cancels(rec):  # the interrupt's own, into a waiting hook
                return cancelled(aborted_code(rec), reason=abort_reason(rec))
            if self._check_outer(rec, exc):
                return cancelled(aborted_code(rec), reason=CANCELLED_REASON)
            if caller_interrupted(rec):
                return cancelled(aborted_code(rec), reason=abort_reason(rec) or INTERRUPTED_REASON)
        if rec.inline and isinstance(exc, KeyboardInterrupt) and rec.reraise is not exc:
            # The blocking caller's Ctrl-C, landing in a guard, a hook, a plain body or the
            # pipeline's own steps on its thread: the call was interrupted, and says so, rather
            # than failed with what a bare KeyboardInterrupt says (nothing: "Error: "). Not
            # one a body raised on its worker thread (``reraise`` holds it already).
            rec.reraise = exc
            self.interrupt(rec, INTERRUPTED_REASON)
            return cancelled(aborted_code(rec), reason=abort_reason(rec))
        failure = failure_from_exception(exc)
        fields = log_fields(rec)
        fields["stage"] = rec.stage
        fields["exception_type"] = failure.exception_type
        # The interrupt's cancellation reached a waiting hook (taken back all the same: left on
        # the awaiting task, it would read as the caller's own cancellation), or the awaiting
        # task's own did, and the hook's cleanup raised this instead: the call ends as that
        # cancellation, as a body's does.
        if take_back_cancels(rec):
            cancelled_here, reason = True, abort_reason(rec)
        elif isinstance(exc, Exception) and self._check_outer(rec, cancellation_behind(exc)):
            # The caller's CancelledError, which the hook's cleanup replaced, still carries
            # the message its task was cancelled with back to it (a walk of the exception's
            # context, on this faulting path only).
            cancelled_here, reason = True, CANCELLED_REASON
        else:
            cancelled_here = isinstance(exc, Exception) and caller_interrupted(rec)
            reason = abort_reason(rec) or INTERRUPTED_REASON
        if cancelled_here:
            log.warning(
                f"{rec.stage} raised while cancelled: {failure.error.message}",
                exc_info=exc,
                **fields,
            )
            if isinstance(exc, Exception):
                return cancelled(aborted_code(rec), reason=reason)
        if isinstance(exc, HarnessError):
            # An expected outcome the model is told about (bad arguments, an abort, a
            # deadline): kept for whoever turns on debug logs, never noise at the default.
            log.debug(f"{rec.stage} raised: {failure.error.message}", exc_info=exc, **fields)
        else:
            log.warning(f"{rec.stage} raised: {failure.error.message}", exc_info=exc, **fields)
        if rec.inline and isinstance(exc, KeyboardInterrupt | SystemExit):
            rec.reraise = exc
        if isinstance(exc, AbortError):
            # A body or hook that watched its signal and answered the abort with its own
            # ``AbortError`` (the shipped ``bash`` tool does) keeps its error as the contract
            # says, and the harness still learns why the call was aborted, as it does when the
            # pipeline ends the call. Paid on this failure path only, never by a passing call.
            reason = abort_reason(rec, rec.dispatch_signal)
            if reason is not None:
                return with_abort_reason(failure, reason)
        return failure


def cancellation_behind(failure: BaseException) -> asyncio.CancelledError | None:
    """The ``CancelledError`` that ``failure`` was raised while handling (its context,
    ``raise ... from None`` included), as a cleanup's error is; ``None`` when there is none."""
    seen: set[int] = set()
    context = failure.__context__
    while context is not None and id(context) not in seen:
        if isinstance(context, asyncio.CancelledError):
            return context
        seen.add(id(context))
        context = context.__context__
    return None


STEPPING: Final = contextvars.ContextVar[CallRecord]("dsh_tools_stepping_call")
"""The record of the call whose ``Pipeline.run`` runs in this context (set for its duration):
a ``GeneratorExit`` that reaches one of its stages while it is set was raised by user code in
a step of the call (a hook, an approver, a renderer), not thrown in by the closing of its
coroutine, which runs in whatever context closes it."""


def closing_call(rec: CallRecord, exc: BaseException) -> bool:
    """Whether ``exc``, reaching a stage of ``rec``, is its coroutine being closed: a
    ``GeneratorExit`` not raised in one of its steps under ``Pipeline.run`` (a dispatcher
    pool's stages handle what their stages raise themselves)."""
    return isinstance(exc, GeneratorExit) and STEPPING.get(None) is not rec


def owned_generator_exit(owner: str) -> RuntimeError:
    """What a ``GeneratorExit`` raised by user code (``owner``: "a guard", "the tool body")
    fails its call with. The stages pass a ``GeneratorExit`` on unchanged only where it may be
    their own coroutine closing; one out of a plain function never is."""
    return RuntimeError(f"{owner} raised GeneratorExit")


def cancel_body(rec: CallRecord, task: asyncio.Task[Any], anyway: bool = False) -> None:
    """Cancel an aborted call's async body, unless it looks at its signal and that signal has
    aborted: such a body learns of the abort itself and settles its own way (raises its own
    error, returns what it has, drains what it started). ``anyway``: such a body too
    (``stop()``, past its grace)."""
    if task.done() or rec.body_task is not task:
        return  # the body has ended (its task may run another call's body by now)
    signal = rec.body_signal
    if not anyway and rec.signal_read and signal is not None and signal.aborted:
        return
    rec.cancel_sent = True
    task.cancel()


HOOK_WIND_DOWN_S = 1.0
"""How long a hook of an interrupted call may wait once it starts waiting (``wind_down``)."""

BODY_WIND_DOWN_S = 1.0
"""How long an ``async def`` body that reads its signal may go on once the awaiting task was
cancelled (its signal aborted with it) before it is cancelled too: the task awaiting
``execute_async`` (``_in_own_task``) or ``execute_batch_async`` (its ``forced`` signal)."""

BODY_GIVE_UP_S = BODY_WIND_DOWN_S / 2
"""How long an ``async def`` body that ``stop()`` cancelled outright, its grace over, may go on
before its call settles without it (``abandon_bodies``): within ``stop()``'s last wait."""

LATE_HOOK_GIVE_UP_S = 0.05
"""How long a hook chain that starts waiting once ``stop()`` has given up its call's body (a
post-execute hook, a wrapper's code after ``next()``) may go on after its cancellation, which
comes at once (``wind_down``), before its call settles without it. Short: a batch commits its
calls in order, so each call's chain starts only once the call before has settled, and
``stop()`` waits for them all (a hundred such calls take it five seconds past its grace)."""

HOOK_STAGES: Final = {
    "pre-execute": "the pre-execute hook",
    "execute-wrapper": "the execute wrapper",
    "post-execute": "the post-execute hook",
}
"""The stages whose awaiting user code ``interrupt`` cancels (``CallRecord.hook_task``), and
what runs in each."""


_Ts = TypeVarTuple("_Ts")


def after_give_up_time(
    loop: asyncio.AbstractEventLoop,
    callback: Callable[[*_Ts], object],
    *args: *_Ts,
    delay: float = BODY_GIVE_UP_S,
) -> None:
    """Have ``loop`` run ``callback(*args)`` ``delay`` seconds from now; from any thread
    (``RuntimeError`` once ``loop`` has closed): by default how long a body or hook chain
    ``stop()`` cancelled once more, its grace over, may go on before its call settles
    without it."""
    loop.call_soon_threadsafe(loop.call_later, delay, callback, *args)


def warn_given_up(rec: CallRecord, stage: str, what: str) -> None:
    """Log that ``what`` (``"the tool body"``, ``"the pre-execute hook"``...), run in
    ``rec``'s ``stage``, went on after its cancellation and is given up."""
    fields = log_fields(rec)
    fields["stage"] = stage
    log.warning(
        f"{what} went on after its cancellation; its call settles without it "
        "and what it returns is dropped",
        **fields,
    )


def hooks_still_wait(rec: CallRecord, task: asyncio.Task[Any] | None) -> bool:
    """Whether ``rec``'s hook chain still waits in ``task`` (``hooks_gone_on``, unlogged)."""
    return not (
        task is None
        or task.done()
        or rec.hook_task is not task
        or not rec.hooks_waiting
        or rec.stage not in HOOK_STAGES
        or rec.sealed
    )


def wind_down(rec: CallRecord) -> None:
    """A hook chain starts waiting on a call already interrupted (a post-execute hook, a
    wrapper once its body returned; call in the task that awaits it): it is part of the call's
    wind-down and may wait a while (its contexts, its cleanup), but not for ever: its task is
    cancelled if it still waits ``HOOK_WIND_DOWN_S`` seconds on; at once (one pass later) if
    the call is ``hurried``: the ordered commits of a batch would otherwise give each of its
    calls that wind-down in turn, long past stop()'s grace or the caller's second cancel.
    Hurried by ``stop()``, its grace over, the call settles without the chain should it go on
    after that cancellation too, as one that waited then does (``hooks_overdue``): nothing
    else would give it up, and ``stop()`` would end the loop under it."""
    task = rec.hook_task
    if task is not None:
        if rec.hurried:
            cancel_hooks_soon(rec, task)
            give_up = rec.late_give_up
            if give_up is not None:
                give_up(task, LATE_HOOK_GIVE_UP_S)
        else:
            task.get_loop().call_later(HOOK_WIND_DOWN_S, _wound_down, rec, task)


def _wound_down(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    """``wind_down``'s timer: cancel the hooks still waiting, unless the call was interrupted
    for a cancellation of the caller's task that a scope of a wrapper's own then took back (an
    ``asyncio.timeout`` around ``next()``, its ``TimeoutError`` answered by the wrapper: see
    ``DispatchStages.scope_took_back``, which ends that interruption once the chain returns)."""
    if rec.stop_reason is None:
        return
    outer = rec.outer
    if rec.passed is not None and outer is not None and outer.cancelling() <= rec.cancel_base:
        return
    cancel_hooks(rec, task)


def cancel_hooks(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    """Cancel the task that waits on an interrupted call's hooks, if it still does (on its
    loop, between its steps: it is suspended inside a hook or in what a hook awaits, not in
    a body a wrapper awaits)."""
    if (
        not rec.hooks_waiting
        or rec.hook_task is not task
        or rec.stage not in HOOK_STAGES
        or task.done()
    ):
        return
    rec.own_cancels += 1
    task.cancel()


def cancel_hooks_soon(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    # One more pass first, as for a body: a hook awaiting the call's signal may settle on its
    # own before the cancellation would reach it.
    task.get_loop().call_soon(cancel_hooks, rec, task)


def abandon_body(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    """Cancel the task waiting for ``rec``'s body (a plain one on its worker thread, an async
    one in a task of its own), if it still waits (on its loop): ``stop()`` gives it up."""
    if task.done() or rec.body_wait is not task:
        return
    rec.own_cancels += 1
    task.cancel()


def caller_interrupted(rec: CallRecord) -> bool:
    """Whether the task running ``rec``'s stage now was cancelled, for a call without an
    awaiting task of the caller's to watch (``outer``): that task is the call's own, and only
    the blocking caller's Ctrl-C cancels it (the wait of ``execute``, on this thread's loop or,
    with ``timeout=``, on the system loop). A hook or approver waiting then was interrupted,
    as one cancelled with ``execute_async``'s task is: not a failure of its own."""
    if rec.outer is not None:
        return False
    loop = running_loop()
    task = None if loop is None else asyncio.current_task(loop)
    # Noted where the Ctrl-C cancels it: a wrapper's own timeout cancels it too.
    return task is not None and task.cancelling() > 0 and interrupted_task(task)


def take_back_cancels(rec: CallRecord) -> bool:
    """Withdraw the cancellations ``cancel_hooks`` or ``abandon_body`` sent (call in the task
    they went to, once it has caught or outlived them); whether there were any."""
    sent = rec.own_cancels
    if not sent:
        return False
    rec.own_cancels = 0
    task = asyncio.current_task()
    if task is not None:
        for _ in range(sent):
            task.uncancel()
    return True


def cancel_soon(rec: CallRecord, task: asyncio.Task[Any]) -> None:
    # One more pass of the loop first: a body awaiting its signal is woken by a callback queued
    # just before this one, and it may settle on its own (raise its own error, return what it
    # has) before the cancellation would reach it.
    task.get_loop().call_soon(cancel_body, rec, task)


def cancel_from_any_thread(
    loop: asyncio.AbstractEventLoop, rec: CallRecord, task: asyncio.Task[Any], reason: Any
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed
        loop.call_soon_threadsafe(cancel_soon, rec, task)


def log_fields(rec: CallRecord) -> dict[str, Any]:
    """What every log line about a call carries (the token's id, never the token), and the
    agent whose call it is, so that a harness running several agents can tell them apart."""
    return {
        "call_id": rec.call_id,
        "tool": rec.name,
        "agent": rec.agent,
        "token": rec.token.id,
        "parent": rec.parent.id if rec.parent is not None else None,
    }


def compact_arguments(arguments: Any) -> str | None:
    if arguments is UNSET:
        return None
    try:
        return msgspec.json.encode(arguments).decode()
    except (RecursionError, TypeError, ValueError):
        return compact_json(arguments)  # deeper than msgspec goes
