"""The dispatch stage: the execute waterfall and the body (inline, on a worker
thread, or as its own task), its rendering, and the candidate result for post-execute."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from asyncio import current_task
from collections.abc import Callable, Coroutine
from functools import partial
from types import CoroutineType
from typing import Any, Final, Literal

import msgspec

from ..actors import (
    NEVER_ABORTED,
    AbortController,
    AbortSignal,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolNotFoundError,
    any_signal,
)
from ..actors._frozen import EMPTY_LIST
from ..registry import RUN_CODE, normalize_output, replacement_value
from ..registry._execution import CallRecord, DispatchExecution, ToolRunContext
from ..registry._snapshot import ToolEntry
from ._body_task import (
    awaited,
    call_plain_body,
    capture,
    closing,
    own_cancellation,
    raise_body_failure,
    wake,
    watch_body,
)
from ._chain import answered_by, is_awaitable, rest_of_chain
from ._core import (
    BODY_WIND_DOWN_S,
    CANCELLED_REASON,
    FINISH,
    INTERRUPTED_REASON,
    POST,
    BodyCancelled,
    PipelineCore,
    ScopeCancelled,
    Stage,
    abort_reason,
    aborted_code,
    caller_interrupted,
    cancel_body,
    closing_call,
    owned_generator_exit,
    passes_cancel,
    replace_if_aborted,
    scope_cancelled,
    take_back_cancels,
    warn_given_up,
    wind_down,
)
from ._loop import (
    disown_body,
    event_loop,
    in_context,
    new_own_body,
    new_task,
    running_loop,
    waiting_loop,
)
from ._results import cancelled, concat_contexts, failure_from_exception, stamped
from ._workers import BodyThreads

__all__ = ["OFF_LOOP", "DispatchStages", "Inline"]

OFF_LOOP: Final = "off-loop"
"""``dispatch(inline=OFF_LOOP)``: a plain body runs on the calling thread as long as no event loop
runs there (a dispatcher pool's worker thread, which has nothing else to do meanwhile); once
the call has moved onto a loop (an execute wrapper, an async body) it runs on a worker thread."""

Inline = bool | Literal["off-loop"]


class DispatchStages(PipelineCore):
    """The dispatch stage of a call (see ``Pipeline``)."""

    def plain_dispatch(self, rec: CallRecord) -> bool:
        """Whether ``rec``'s dispatch is, as things stand, nothing but a plain body: no execute
        wrapper applies and its tool's body is a plain function."""
        entry = rec.entry
        if entry is None or entry.is_async:
            return False
        return not rec.hooks_under(self._cell.current).execute

    def dispatches_quietly(self, rec: CallRecord) -> bool:
        """Whether ``rec``'s dispatch runs no user code outside the body, as things stand: no
        execute wrapper applies (the body itself runs in its own task or thread)."""
        return not rec.hooks_under(self._cell.current).execute

    def abandoned_stage(self, rec: CallRecord) -> Stage:
        """What a call whose plain body ``stop()`` gave up on settles with: ``ABORTED``, or
        ``ABORTED_BEFORE_DISPATCH`` when the body never began."""
        failed = cancelled(aborted_code(rec), call_id=rec.call_id, reason=abort_reason(rec))
        return Stage(POST, failed)

    def on_body_thread(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on one of the threads plain bodies run on (raises ``RuntimeError`` once
        they have shut down)."""
        executor = self._executor
        if type(executor) is BodyThreads:
            executor.run(fn)  # no future: nobody reads one
        else:
            executor.submit(fn)

    async def dispatch(
        self, rec: CallRecord, *, inline: Inline, looped: bool = False, own_task: bool = False
    ) -> Stage:
        """Run the execute waterfall and the body; the candidate result for post-execute.
        ``looped``: the caller runs on an event loop already. ``own_task``: this coroutine is
        its task's whole work (a pool's dispatch task): with no execute wrapper, an async body
        then runs right in that task rather than in one of its own."""
        try:
            hooks = rec.hooks_under(self._cell.current).execute
            if hooks:
                rec.stage = "execute-wrapper"
                if not looped:  # hooks are async code: they may await anything asyncio
                    loop = await event_loop()
                    rec.hook_task = current_task(loop)  # interrupt() cancels it
                base = partial(self._invoke, rec, inline)
                view = DispatchExecution(rec)
                then = base if len(hooks) == 1 else rest_of_chain(hooks, (view,), base)
                result = hooks[0](view, then)
                if type(result) is CoroutineType or is_awaitable(result):
                    # Inline, not calls: the four-hook path pays for every call on it.
                    rec.hooks_waiting = True  # interrupt() cancels the task from now on
                    if rec.stop_reason is not None:
                        wind_down(rec)
                    result = await result
                    # A wrapper may return next() unawaited; a pass-through answer is a success.
                    while type(result) is not ToolExecutionSuccess and is_awaitable(result):
                        result = await result
                    rec.hooks_waiting = False
                    if rec.own_cancels:  # a hook swallowed the interrupt's cancellation
                        take_back_cancels(rec)
                    if rec.passed is not None:
                        self.scope_took_back(rec)
            else:
                result = await self._invoke(rec, inline, own_task)
            rec.dispatch_signal = rec.signal
            rec.stage = "execute-wrapper"
            canonical = rec.canonical
            if not canonical or result is not canonical[-1]:  # else the base's own, as it is
                result = self._normalize_dispatch_result(rec, result, hooks)
            rec.contexts_closed = True
            if rec.deferred:
                result = _with_deferred(rec.deferred, result)
            signal = rec.signal
            if (signal is not NEVER_ABORTED and signal.aborted) or rec.stop_reason is not None:
                result = replace_if_aborted(rec, result)  # its test inline: most calls pass
            return Stage(POST, result)
        except BaseException as exc:
            if closing_call(rec, exc):
                raise
            rec.dispatch_signal = rec.signal
            rec.contexts_closed = True
            passed = rec.passed
            if passed is not None and not isinstance(exc, asyncio.CancelledError):
                self.scope_took_back(rec)  # its scope's answer, as raised (ToolTimeoutError)
            # First: reading the exception tells whether the caller's task still counts its
            # cancellation (``rec.outer_cancelled``, which ``_passed`` cleared).
            failed = self._fault(rec, exc)
            if (
                passed is not None
                and rec.outer_cancelled
                and isinstance(exc, asyncio.CancelledError)
            ):
                # The caller's cancellation, raised into the wrappers once the body had
                # settled (``_passed``), came back out of them: the call ends as the base
                # answered it, its deferred contexts kept, and post-execute runs.
                return Stage(POST, _with_deferred(rec.deferred, passed) if rec.deferred else passed)
            return Stage(FINISH, failed)

    async def _invoke(
        self, rec: CallRecord, inline: Inline, own_task: bool = False
    ) -> ToolExecutionResult:
        """The base of the execute waterfall (what the last wrapper's ``next()`` runs): the
        body and its rendering, as a canonical result of this execution. Never raises."""
        if rec.passed is not None:  # next() again, after the caller's cancellation went in
            self.scope_took_back(rec)
        wrapper_signal = rec.dispatch_signal
        caller = rec.signal
        if wrapper_signal is caller:
            fused, detach = caller, None
        else:
            fused, detach = any_signal(wrapper_signal, caller)
        try:
            # The awaiting task's cancellation counts too, though a wrapper swallowed it.
            if (
                (fused is not NEVER_ABORTED and fused.aborted)  # see ``call_aborted``
                or rec.stop_reason is not None
                or (rec.outer is not None and self._check_outer(rec))
            ):
                return _canonical(
                    rec, cancelled("ABORTED_BEFORE_DISPATCH", reason=abort_reason(rec, fused))
                )
            current = self._cell.current
            entry = (
                rec.entry  # what it resolved to as it began (see ``CallRecord.snapshot``)
                if current is rec.snapshot
                else current.lookup(rec.name, rec.agent)
            )
            if entry is None:
                return _canonical(rec, failure_from_exception(ToolNotFoundError(rec.name)))
            rec.body_invoked = True
            # A wrapper that supplied its own signal (a deadline, say) may abort it from a timer
            # on this very loop: a plain body then runs on a worker thread so the loop stays free
            # to fire it. Without one, nothing on this loop can abort the body's signal, so the
            # body runs inline (the hot path).
            here = fused is caller and (
                inline is True or (inline == OFF_LOOP and running_loop() is None)
            )
            rec.stage = "body"
            try:
                ctx = ToolRunContext(rec, fused)
                if here and not entry.is_async:
                    try:  # ``call_plain_body``, inline: the hot path
                        value = entry.definition.execute(rec.arguments, ctx)
                    except GeneratorExit as exc:
                        raise owned_generator_exit("the tool body") from exc
                    except StopIteration as exc:
                        raise RuntimeError("the tool body raised StopIteration") from exc
                    if is_awaitable(value):
                        value = await self._run_task(rec, awaited(value), fused)
                else:
                    value = await self._call_body(entry, rec, ctx, here, own_task)
            except ScopeCancelled as scoped:
                # The wrapper's own scope (its asyncio.timeout) cancelled its task as next()
                # waited for the body, which has settled: the scope takes the cancellation.
                rec.stage = "execute-wrapper"
                raise asyncio.CancelledError(*scoped.args) from None
            except BodyCancelled:
                reason = abort_reason(rec, fused)
                if reason is None and caller_interrupted(rec):
                    reason = INTERRUPTED_REASON  # its blocking caller's Ctrl-C cancelled it
                return _passed(rec, _canonical(rec, cancelled(aborted_code(rec), reason=reason)))
            except BaseException as exc:  # the base never raises
                if closing_call(rec, exc):
                    raise
                return _passed(rec, _canonical(rec, self._fault(rec, exc)))
            rec.stage = "render"
            try:
                value, content, meta = normalize_output(
                    entry.definition, rec.arguments, value, nested=rec.parent is not None
                )
            except BaseException as exc:
                if closing_call(rec, exc):
                    raise
                return _canonical(rec, self._fault(rec, exc))
            success: ToolExecutionResult = ToolExecutionSuccess(
                value, content, meta, EMPTY_LIST, rec.call_id
            )
            if (fused is not NEVER_ABORTED and fused.aborted) or rec.stop_reason is not None:
                success = cancelled("ABORTED", reason=abort_reason(rec, fused), settled=success)
                return _passed(rec, _canonical(rec, success))
            # ``_canonical``, inline for the usual success (stamped already, not interrupted).
            rec.canonical.append(success)
            rec.stage = "execute-wrapper"
            return success
        finally:
            if detach is not None:
                detach()
            rec.dispatch_signal = wrapper_signal

    async def _call_body(
        self,
        entry: ToolEntry,
        rec: CallRecord,
        ctx: ToolRunContext,
        inline: bool,
        own_task: bool = False,
    ) -> Any:
        execute = entry.definition.execute
        signal = object.__getattribute__(ctx, "_signal")  # not ctx.signal: the body reads that
        if entry.is_async:
            if own_task:
                return await self._run_task(
                    rec, execute(rec.arguments, ctx), signal, this_task=True
                )
            return await self._run_task(rec, execute(rec.arguments, ctx), signal)
        if inline:
            value = execute(rec.arguments, ctx)
        else:
            value = await self._run_in_worker(rec, execute, ctx)
        if is_awaitable(value):
            value = await self._run_task(rec, awaited(value), signal)
        return value

    async def _run_task(
        self,
        rec: CallRecord,
        coro: Coroutine[Any, Any, Any],
        signal: AbortSignal,
        *,
        this_task: bool = False,
    ) -> Any:
        """Run an async body as its own task from its first step (in a copy of the context;
        started at once where asyncio can, see ``new_task``) and return what it returns. The
        task is cancelled when ``signal`` aborts or the pipeline interrupts the call; a
        cancellation of the awaiting task reaches it the same way. A body that ends by such a
        cancellation raises ``BodyCancelled``; one that raised ``CancelledError`` of its own
        accord raises it (a tool failure).

        ``this_task``: the awaiting task does nothing but this call's dispatch, so it is the
        body's task (``_in_this_task``); otherwise the body gets a task of its own
        (``_in_own_task``)."""
        if this_task:
            ok, value = await self._in_this_task(rec, coro, signal)
        else:
            ok, value = await self._in_own_task(rec, coro, signal)
        self._check_outer(rec)
        if ok:
            return value
        try:
            raise_body_failure(rec, value)
        finally:
            # The traceback keeps this frame: without the names that lead to the exception it
            # holds no cycle, and reference counting frees the failed call at once.
            value = None

    async def _in_own_task(
        self, rec: CallRecord, coro: Coroutine[Any, Any, Any], signal: AbortSignal
    ) -> tuple[bool, Any]:
        """``_run_task``'s body in a task of its own: ``(True, value)`` or ``(False, error)``."""
        loop = await waiting_loop()  # the body's task needs one
        settled: asyncio.Future[None] = loop.create_future()
        # The body of a blocking execute: a Ctrl-C in its code is its own. Not a Code Mode
        # run's (the package's own code), whose task may run what its sub-calls attach.
        owned = rec.inline and rec.name != RUN_CODE
        start = new_own_body if owned else new_task
        task = start(loop, capture(coro, settled), contextvars.copy_context())
        if task.done():  # an eager task (Python 3.12+) whose body never waited
            outcome: tuple[bool, Any] = task.result()
            del task
            try:
                return outcome
            finally:
                # The body's frames link back to this one (its step ran inside this call): this
                # frame may not keep a failure, whose traceback keeps them.
                del outcome
        # A body cancelled before its first step never settles ``settled`` itself.
        task.add_done_callback(partial(wake, settled))
        unwatch = watch_body(rec, task, loop, signal, self.bodies)
        # The wait itself, which stop() cancels past its grace to give up a body that swallowed
        # its outright cancellation too (``abandon_body``).
        rec.body_wait = current_task(loop)
        forced: asyncio.TimerHandle | None = None
        scoped: asyncio.CancelledError | None = None
        given_up = False
        try:
            waiter = settled
            while True:
                try:
                    # Not the task itself: a cancellation of the awaiting task interrupts the
                    # call (aborting the signal the pipeline owns, cancelling the body by the
                    # rule of cancel_body) instead of reaching the body unannounced. The body's
                    # last step settles the waiter, which wakes this task one pass of the loop
                    # sooner than the task's done callbacks would.
                    await waiter
                except asyncio.CancelledError as caught:
                    if take_back_cancels(rec):
                        # stop() past its grace: a body still running once cancelled outright
                        # is given up (``give_up_body``), so that its call gets its one result.
                        if not task.done():
                            given_up = True
                            break
                    elif scoped is None and scope_cancelled(rec):
                        # User code around a wrapper's next() (its asyncio.timeout, its
                        # TaskGroup) cancelled this task: the body is inside that scope,
                        # trusted or not, and once it has settled the scope gets the
                        # cancellation (``ScopeCancelled``).
                        scoped = caught
                    if not task.done():
                        if scoped is not None:
                            cancel_body(rec, task, True)
                        elif not self._check_outer(rec, caught):
                            cancel_body(rec, task)
                        elif forced is None:
                            # A body trusted to watch its signal (which aborted with the
                            # awaiting task) settles its own way, but not for ever: a body that
                            # read its signal and never ended held the caller's cancellation
                            # for good, every later cancellation too.
                            forced = loop.call_later(BODY_WIND_DOWN_S, cancel_body, rec, task, True)
                        else:  # the awaiting task cancelled again: no more waiting
                            # The wind-down's timer has done its work: left to fire, it
                            # cancelled the body once more, cutting its cleanup short (a
                            # Code Mode run gives its plain sub-calls up first, then settles).
                            forced.cancel()
                            cancel_body(rec, task, True)
                        waiter = loop.create_future()
                        task.add_done_callback(partial(wake, waiter))
                        continue
                break
            if given_up:
                self.give_up_body(rec, task)
                rec.cancel_sent = True
                return False, asyncio.CancelledError()
            if scoped is not None:
                rec.cancel_sent = False  # the scope's, not the pipeline's: next() may run again
                raise ScopeCancelled(*scoped.args)
            if task.cancelled():  # cancelled before its first step: the body never saw it
                return False, asyncio.CancelledError()
            outcome = task.result()
            return outcome
        finally:
            if forced is not None:
                forced.cancel()
            rec.body_wait = None
            unwatch()
            if owned:
                disown_body(task)
            del unwatch, task, forced, scoped  # no name of this frame may lead to a failure

    def scope_took_back(self, rec: CallRecord) -> None:
        """The wrappers have had the cancellation of the caller's task that ``_passed`` raised
        into them (they answered, or call ``next()`` again): if the task no longer counts it, a
        scope of a wrapper's own (its ``asyncio.timeout``) took it back, so it was that scope's
        and not the caller's. The call, interrupted as for the caller, is no longer: the
        wrapper's answer stands (a fallback success is not made ``ABORTED``), a second
        ``next()`` runs the body again with a signal not aborted, and the wrappers are not
        cut short by an interrupted call's wind-down, as under ``execute``."""
        rec.passed = None
        outer = rec.outer
        if (
            outer is None
            or outer.cancelling() > rec.cancel_base  # the caller's own, still counted
            or rec.stop_reason is not CANCELLED_REASON
            or self.stop_reason is not None  # stop() interrupts it anyway
        ):
            return
        rec.stop_reason = None
        rec.outer_cancel_args = ()
        rec.cancel_sent = False
        own = rec.own
        if own is not None and rec.signal is own.signal:
            # The signal the pipeline aborted for the caller: a fresh one for what follows.
            fresh = rec.own = AbortController()
            if rec.dispatch_signal is own.signal:
                rec.dispatch_signal = fresh.signal
            rec.signal = fresh.signal

    def give_up_body(self, rec: CallRecord, task: asyncio.Task[Any]) -> None:
        """``stop()``, its grace over: stop waiting for ``rec``'s async body, which went on after
        it was cancelled outright (it swallows its cancellation): it runs on in the background,
        held here until it ends, and what it settles with is dropped; its call settles
        ``ABORTED`` without it."""
        warn_given_up(rec, "body", "the tool body")
        self.hold_given_up(task)

    async def _in_this_task(
        self, rec: CallRecord, coro: Coroutine[Any, Any, Any], signal: AbortSignal
    ) -> tuple[bool, Any]:
        """``_run_task``'s body in the awaiting task, whose task does nothing but this call's
        dispatch: the body runs right here, in a copy of the context, and this task is the
        body's task (what ``asyncio.current_task()``, ``asyncio.timeout()`` and ``TaskGroup``
        find from its first line). An abort cancels this task, which reaches the body where it
        waits; nothing after the body awaits, so the cancellation ends with it. One task per
        call instead of two, and no pass of the loop between the body's end and its call's
        settlement."""
        task = asyncio.current_task()
        assert task is not None
        unwatch = watch_body(rec, task, task.get_loop(), signal, self.bodies)
        requests = task.cancelling()
        outcome: tuple[bool, Any]
        try:
            outcome = True, await in_context(coro, contextvars.copy_context())
        except GeneratorExit as exc:
            if closing(task):  # this coroutine is being closed, not the body raising
                raise
            outcome = False, exc
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: a body's outcome
            outcome = False, exc
        finally:
            unwatch()
            del unwatch
        if rec.cancel_sent:
            task.uncancel()  # the pipeline's own cancellation ends here, however the body took it
        elif task.cancelling() > requests:
            outcome = await own_cancellation(task, requests, outcome)
        del task
        try:
            return outcome
        finally:
            del outcome  # a failure's traceback keeps this frame: no cycle through the failure

    async def _run_in_worker(self, rec: CallRecord, execute: Any, ctx: ToolRunContext) -> Any:
        """Run a plain body on a worker thread; a cancellation of the awaiting task aborts the
        call and then waits for the body to return. Only ``stop()`` abandons it, once its grace
        is over (``abandon_bodies``): the body is left to its thread, the call is ``ABORTED``."""
        executor = self._executor
        waits = self.body_waits
        work: concurrent.futures.Future[Any] | None = None
        scoped: asyncio.CancelledError | None = None
        try:
            try:
                loop = await waiting_loop()  # to wait for the worker
                # In a copy of the call's context, as inline and as asyncio.to_thread: what the
                # caller and the call's hooks set (a tracing span) reaches the body, and nothing
                # it sets leaks.
                run = contextvars.copy_context().run
                rec.body_wait = current_task(loop)
                waits.add(rec)
                if not rec.inline or type(executor) is not BodyThreads:
                    work = executor.submit(run, call_plain_body, execute, rec.arguments, ctx)
                    waiting = asyncio.wrap_future(work)
                else:
                    # The blocking execute's own thread, where a Ctrl-C lands wherever it
                    # stands (on the main thread). One raised in the hand-over to a worker
                    # thread, or between it and this task's wait, failed the call at once
                    # while its body ran on with nobody waiting for it. So the wait is made
                    # first, and the hand-over notes a Ctrl-C that comes once the body is
                    # handed over rather than raise it: it interrupts the call, which waits
                    # for its body and settles ABORTED before KeyboardInterrupt propagates
                    # (``reraise``).
                    work = concurrent.futures.Future()
                    waiting = asyncio.wrap_future(work)
                    if executor.hand_noting_interrupts(
                        work, run, call_plain_body, execute, rec.arguments, ctx
                    ):
                        rec.reraise = KeyboardInterrupt()
                        self.interrupt(rec, INTERRUPTED_REASON)
            except KeyboardInterrupt:
                if not rec.inline:
                    raise
                # A Ctrl-C in these steps (the caller's, not the body's, which runs on the
                # worker) is the call's interruption, never a failure of its body (one that
                # says nothing: a bare KeyboardInterrupt has no message). A body not yet
                # handed over never runs (a worker skips a cancelled future): the call ends
                # before dispatch. One already handed over is waited for, as above.
                rec.reraise = KeyboardInterrupt()
                if work is None or work.cancel():
                    rec.body_invoked = False
                    self.interrupt(rec, INTERRUPTED_REASON)
                    raise BodyCancelled from None
                self.interrupt(rec, INTERRUPTED_REASON)
                waiting = asyncio.wrap_future(work)
            try:
                return await waiting
            except asyncio.CancelledError as caught:
                if take_back_cancels(rec):
                    raise BodyCancelled from None  # abandoned
                if (
                    work.done()
                    and not work.cancelled()
                    and isinstance(work.exception(), asyncio.CancelledError)
                ):
                    raise  # the body raised CancelledError itself: its own failure
                # Else the awaiting task's, which may have come just after the body returned:
                # what it returned is still its outcome (below), as when it comes sooner.
                scoped = self._waiter_cancelled(rec, caught)
            except KeyboardInterrupt as exc:
                if rec.inline and work.done() and not work.cancelled() and work.exception() is exc:
                    # The body's own, raised on its worker thread, where no Ctrl-C lands: its
                    # failure, as any exception of a body's, not its caller's interruption
                    # (which ``reraise`` holding it tells the fault handler). It still
                    # reaches a blocking caller once the failure is recorded. On a loop
                    # (``execute_async``'s, or the system loop under ``execute(timeout=)``)
                    # it only stays the failure: re-raised out of a task there, asyncio
                    # would let it out of the loop itself and end it.
                    rec.reraise = exc
                raise
            while not work.done():
                try:
                    await asyncio.wrap_future(work)
                except asyncio.CancelledError as caught:
                    if take_back_cancels(rec):
                        raise BodyCancelled from None  # abandoned
                    scoped = scoped or self._waiter_cancelled(rec, caught)
            if scoped is not None:  # the body has returned: what it returned is dropped
                raise ScopeCancelled(*scoped.args)
            if work.cancelled():  # cancelled before a worker thread picked it up
                raise BodyCancelled
            return work.result()
        finally:
            rec.body_wait = None
            waits.discard(rec)

    def _waiter_cancelled(
        self, rec: CallRecord, caught: asyncio.CancelledError
    ) -> asyncio.CancelledError | None:
        """The task waiting for ``rec``'s plain body was cancelled, by the task awaiting
        ``execute_async`` or, for a call without one, by its blocking caller's Ctrl-C (the
        wait of ``execute``, on this thread's loop or, with ``timeout=``, on the system loop).
        The body runs on to its end either way; the call is interrupted, so that what it
        returns settles ``ABORTED`` instead of reaching the model as a success its caller
        never received. Cancelled by neither (``scope_cancelled``: user code around a
        wrapper's ``next()``), ``caught`` is returned instead, for that scope to get once the
        body has returned (``ScopeCancelled``)."""
        if scope_cancelled(rec):
            return caught
        if not self._check_outer(rec, caught) and caller_interrupted(rec):
            self.interrupt(rec, INTERRUPTED_REASON)
        return None

    def _normalize_dispatch_result(
        self, rec: CallRecord, result: Any, wrappers: tuple[Callable[..., Any], ...]
    ) -> ToolExecutionResult:
        """What the execute waterfall answered (``wrappers``, outermost first, gave it), as the
        call's result (raises ``TypeError`` for anything but a success or a failure)."""
        if rec.is_canonical(result):
            return result  # type: ignore[no-any-return]
        result_type = type(result)
        if result_type is ToolExecutionFailure:
            failure: ToolExecutionFailure = msgspec.structs.replace(result)
            return failure
        if result_type is ToolExecutionSuccess:
            entry = self._cell.current.lookup(rec.name, rec.agent)
            if entry is None:
                raise ToolNotFoundError(rec.name)
            value, content, meta = normalize_output(
                entry.definition,
                rec.arguments,
                replacement_value(entry.definition, rec.name, result.value),
                nested=rec.parent is not None,
            )
            return ToolExecutionSuccess(value, content, meta, result.additional_contexts)
        raise TypeError(
            f"tools/execute wrapper returned {result_type.__name__}; "
            "expected ToolExecutionSuccess or ToolExecutionFailure"
            + answered_by(wrappers, result, "wrappers")
        )


def _canonical(rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
    """``result`` stamped with the call's id and remembered as the base's own."""
    if result.call_id != rec.call_id:  # ``stamped``, its usual case inline
        result = stamped(result, rec.call_id)
    rec.canonical.append(result)
    rec.stage = "execute-wrapper"
    if rec.stop_reason is not None and rec.hooks_waiting:
        wind_down(rec)  # interrupted under its wrappers: they may wait again
    return result


def _passed(rec: CallRecord, result: ToolExecutionResult) -> ToolExecutionResult:
    """``result``, the base's answer to a call its caller's task may have cancelled, for the
    execute wrapper whose ``next()`` waits for it; or, under ``execute_async`` with a wrapper
    waiting, the ``CancelledError`` of that task, raised into the wrapper (``passes_cancel``)
    with ``result`` kept as the call's, should it come back out of the wrappers."""
    if not rec.outer_cancelled or not passes_cancel(rec):
        return result
    outer = rec.outer
    assert outer is not None  # ``passes_cancel``
    if outer.cancelling() <= rec.cancel_base:  # a scope of a wrapper's took it back already
        return result
    rec.passed = result
    # Read again once the wrapper has had it: a scope of its own (its asyncio.timeout) takes
    # its cancellation back, and then the caller's task counts none of the caller's.
    rec.outer_cancelled = False
    raise asyncio.CancelledError(*(rec.outer_cancel_args or (CANCELLED_REASON,)))


def _with_deferred(deferred: list[Any], result: ToolExecutionResult) -> ToolExecutionResult:
    """``result`` with the contexts its call deferred (``CallRecord.deferred``) before its own."""
    return msgspec.structs.replace(
        result, additional_contexts=concat_contexts(deferred, result.additional_contexts)
    )
