"""The per-call pipeline: prepare, dispatch, post-execute, finish.

The stages live in rooms of their own (``_prepare``, ``_dispatch``, ``_commit`` over the shared
``_core``) and are separate coroutines, so the dispatcher pool can run prepare and commit on one
sequential coordinator while only dispatches overlap; ``Pipeline.run`` chains them for a single
call. Nothing here raises for tool, hook, policy or data faults: every outcome is a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from asyncio import current_task
from functools import partial
from typing import Any

from ..actors import AbortController, ExecuteCall, ToolExecutionResult
from ..actors._signal import NEVER_ABORTED
from ..registry import RUN_CODE
from ..registry._execution import CallRecord
from ._commit import CommitStages
from ._core import (
    CANCELLED_REASON,
    DISPATCH,
    FINISH,
    INTERRUPTED_REASON,
    POST,
    STEPPING,
    STOPPING_REASON,
    STRANDED_CHECK,
    Stage,
    abandon_body,
    abort_reason,
    aborted_code,
    after_give_up_time,
    cancel_body,
    compact_arguments,
    hooks_still_wait,
)
from ._dispatch import DispatchStages
from ._loop import GiveUp, event_loop, first_loop, interrupts_deferred
from ._prepare import PrepareStages
from ._results import cancelled

__all__ = [
    "CANCELLED_REASON",
    "DISPATCH",
    "FINISH",
    "INTERRUPTED_REASON",
    "POST",
    "STOPPING_REASON",
    "Pipeline",
    "Stage",
]


class Pipeline(PrepareStages, DispatchStages, CommitStages):
    """Runs calls against the published registry snapshot; stateless between calls."""

    # --- the whole call ------------------------------------------------------------------------

    async def run(
        self,
        call: ExecuteCall,
        *,
        inline: bool,
        record: bool = True,
        outer: asyncio.Task[Any] | None = None,
        driven: bool = False,
        waited: bool = False,
    ) -> Any:
        """Run one call through every stage and return its one result.

        ``inline``: the blocking ``execute`` on the caller's own thread (plain bodies inline;
        ``KeyboardInterrupt`` / ``SystemExit`` from user code propagate once the result is
        recorded). ``outer``: the caller's task (``execute_async``); when it is cancelled the
        call is aborted, settles, is recorded, and ``CancelledError`` is raised. ``driven``:
        ``drive`` runs this coroutine and no event loop runs on this thread as it starts.
        ``waited``: a blocking caller on another thread waits for it (``execute(timeout=)``),
        whose Ctrl-C cancels it here.
        """
        own = None
        if (outer is not None or waited) and call.signal is NEVER_ABORTED:
            # A signal the pipeline can abort on the caller's behalf (cancellation, a Ctrl-C
            # of a caller waiting elsewhere, stop()): a plain body on a worker thread learns
            # of it only so.
            own = AbortController()
        rec, stage = self.begin(call, own)
        rec.inline = inline
        rec.thread = threading.get_ident()
        if outer is not None:
            rec.outer = outer
            rec.cancel_base = outer.cancelling()
        live = self.live
        live.add(rec)
        if len(live) >= self.stranded_check_at:
            self.abandon_stranded()
            self.stranded_check_at = max(STRANDED_CHECK, 2 * len(live))
        # Marks this call's own steps (``closing_call``): a GeneratorExit raised in one is user
        # code's, handled by the stage as any failure of it.
        stepping = STEPPING.set(rec)
        if self.stop_reason is not None:  # stop() began as this call came in
            self.interrupt(rec, self.stop_reason)
        try:
            if record and call.parent is None:
                session = self.session
                rec.logged_call = data = session.call_data(
                    rec.call_id, rec.name, compact_arguments(rec.arguments)
                )
                session.append("tool/call", data, rec.agent)
            # Whether this coroutine runs on an event loop for sure: each stage with hooks
            # would otherwise ask (``event_loop()``), which costs more than a pass-through hook.
            looped = False
            if stage is None:
                stage = self.prepare_now(rec)
                if stage is None:  # a pre-execute hook applies: hooks are async code
                    rec.stage = "pre-execute"
                    # Not yet suspended: under ``drive`` no loop runs, none need be asked for.
                    loop = await (first_loop() if driven else event_loop())
                    # Every later stage runs in this task: interrupt() cancels it while a hook
                    # of any of them waits.
                    rec.hook_task = current_task(loop)
                    looped = True
                    stage = await self.prepare(rec, looped=True)
                if outer is not None:
                    self._check_outer(rec)
            if stage.kind == DISPATCH:
                stage = await self.dispatch(rec, inline=inline, looped=looped)
                if outer is not None:
                    self._check_outer(rec)
            if looped and outer is None:  # in a task already, and no task to check
                result = await self.commit(rec, stage, looped=True)
            else:
                result = self.commit_now(rec, stage) or await self.commit(rec, stage, looped=looped)
            if rec.logged_call is not None and not rec.abandoned:
                self.session.record_result(rec.call_id, result, rec.agent)
        except BaseException:
            # Something raised through the pipeline's own steps: a Ctrl-C that landed in them
            # (Python raises it wherever the main thread stands), or the coroutine closed. The
            # call still keeps its one result: aborted, as an interrupted call's is. (The
            # pipeline ends every fault of user code as a result.)
            if not rec.abandoned and rec.logged_call is not None:
                self._record_interrupted(rec)
            raise
        finally:
            live.discard(rec)
            check_at = self.stranded_check_at
            if check_at > STRANDED_CHECK and 4 * len(live) < check_at:
                # A burst is over: stranded calls are looked for as early as before it.
                self.stranded_check_at = max(STRANDED_CHECK, 2 * len(live))
            try:  # noqa: SIM105 (contextlib.suppress costs every call a context manager)
                STEPPING.reset(stepping)
            except ValueError:  # closed from another context
                pass
        if rec.reraise is not None and not rec.abandoned:
            raise rec.reraise
        if outer is not None:
            self._check_outer(rec)
            # Only while the task still counts the cancellation: a hook's own scope (an
            # execute wrapper's asyncio.timeout) cancels this very task too, and takes its
            # cancellation back as it ends; raised then, it reached a caller nobody cancelled.
            if rec.outer_cancelled and outer.cancelling() > rec.cancel_base:
                raise asyncio.CancelledError(*(rec.outer_cancel_args or (CANCELLED_REASON,)))
        return result

    def _record_interrupted(self, rec: CallRecord) -> ToolExecutionResult:
        """Finish ``rec`` as aborted now and record that result, if its ``tool/call`` is in the
        log without one: an interruption may have cut the recording of either short, before or
        after the event was appended (``SessionLog.awaits_result``). Returns that result."""
        rec.abandoned = True  # whatever the call might settle with later is dropped
        reason = abort_reason(rec) or INTERRUPTED_REASON
        failed = cancelled(aborted_code(rec), call_id=rec.call_id, reason=reason)
        with interrupts_deferred():  # a Ctrl-C more must not lose it
            result = self.finish(rec, failed)
            logged = rec.logged_call
            if logged is not None and self.session.awaits_result(logged, rec.agent):
                self.session.record_result(rec.call_id, result, rec.agent)
        return result

    # --- stop(), its grace over ------------------------------------------------------------------

    def abandon_bodies(self) -> bool:
        """``stop()``, once its grace is over: stop waiting for the plain bodies still running
        on worker threads (each is left to its thread, what it returns is dropped), and cancel
        the async bodies and hook chains still waiting, those trusted to watch their signal or
        that took the interrupt's cancellation included; an async body that swallows that
        cancellation too is given up ``BODY_GIVE_UP_S`` later (left to run in the background).
        Their calls settle ``ABORTED`` (or ``ABORTED_BEFORE_DISPATCH``), whatever started them.
        Whether there were any. (Here, not in ``PipelineCore``: the hook chains it gives up are
        those of calls running through ``run``, settled by ``settle_without_hooks``.)"""
        found = False
        for rec in list(self.body_waits):
            task = rec.body_wait
            if task is not None:
                found = True
                with contextlib.suppress(RuntimeError):  # the loop has closed
                    task.get_loop().call_soon_threadsafe(abandon_body, rec, task)
        for rec in list(self.live):
            # One that swallows that cancellation too is given up a moment later, as a body
            # is, so that its call still settles within stop()'s last wait for it; so is one
            # that starts waiting later (``wind_down``).
            if self.hooks_overdue(rec, partial(self.settle_without_hooks, rec)):
                found = True
        for overdue in self._pools.now():
            found = True
            with contextlib.suppress(RuntimeError):  # its loop has closed: nothing waits there
                overdue()
        for rec in list(self.bodies):
            task = rec.body_task
            if task is not None:
                found = True
                with contextlib.suppress(RuntimeError):
                    loop = task.get_loop()
                    loop.call_soon_threadsafe(cancel_body, rec, task, True)
                    wait = rec.body_wait
                    if wait is not None and rec.name != RUN_CODE:  # a run settles its own way
                        # One that swallows that cancellation too is given up a moment later,
                        # so that its call still settles within stop()'s last wait for them.
                        after_give_up_time(loop, abandon_body, rec, wait)
        return found

    # --- a hook that went on after stop() cancelled it -------------------------------------------

    def settle_without_hooks(self, rec: CallRecord, task: asyncio.Task[Any]) -> None:
        """``stop()`` cancelled the hook chain ``rec`` waits on in ``task`` (the task running
        this ``run``), its grace over, and the chain went on: the call is finished and recorded
        as aborted now, and ``task`` is cancelled with a ``GiveUp``, which the driver of this
        ``run`` (``resume``, under ``execute``, ``execute_async`` and the system loop) takes:
        it returns that result to the caller and runs ``run`` on in the background, what it
        settles with later dropped.

        Calls whose ``run`` shares ``task`` with this one's are nested in one another (a
        wrapper awaiting ``execute_async``, whose call's hook went on): all of them are given
        up together, if each waits on its hooks, and the driver of the outermost takes the
        ``GiveUp`` (the inner ones go on inside its ``run``, in the background). Giving up only
        the innermost would leave the outer one's hook to go on, perhaps to another call; giving
        up only the outer one would leave the inner ones without a result. If one of them waits
        on anything else (a body), they are left to it, as before."""
        live = self.live
        if rec not in live:
            return
        nested = [other for other in live if other.hook_task is task]
        if not all(hooks_still_wait(other, task) for other in nested):
            return
        results: dict[CallRecord, ToolExecutionResult] = {}
        cancels = 0
        for other in nested:
            self.hooks_gone_on(other, task)  # logged
            live.discard(other)
            cancels += other.own_cancels
            other.own_cancels = 0
            results[other] = self._record_interrupted(other)

        def hold(background: asyncio.Task[Any]) -> None:
            # What the given-up calls do from now on runs in ``background``. The awaiting task
            # is its caller's again (under ``execute_async`` it goes on with its own work): it
            # is no longer what a wind-down of their hooks cancels, nor are its cancellations
            # theirs (a post-execute hook that ran on once cancelled the caller's next await).
            for other in results:
                other.hook_task = background
                other.outer = None
            self.hold_given_up(background)

        # ``run`` marks the context its steps run in with its record (``STEPPING``): the driver
        # that steps the outermost one there is the one that takes the ``GiveUp``.
        task.cancel(GiveUp(results, cancels, STEPPING, hold, _owed_to_caller))

    # --- a caller whose event loop closed -------------------------------------------------------

    def abandon_stranded(self) -> bool:
        """Finish and record as aborted (``abandon_interrupted``) every ``execute_async`` call
        whose caller's event loop has closed under it (closed with the call's task pending):
        that task never runs again, so the call would stay in flight for the process's life,
        with everything it holds, and a later ``stop()`` on the thread that ran the loop would
        take that thread for the system's own work. Whether there were any."""
        found = False
        for rec in list(self.live):
            outer = rec.outer
            if outer is None or rec.sealed or not outer.get_loop().is_closed():
                continue
            found = True
            self.live.discard(rec)
            self.bodies.discard(rec)
            self.body_waits.discard(rec)
            self._record_interrupted(rec)
        return found

    # --- a blocking caller that stopped waiting ------------------------------------------------

    def abandon_interrupted(self, thread: int) -> None:
        """The blocking ``execute`` on ``thread`` stopped waiting for its call, which had not
        settled (a second Ctrl-C while the first one's cancellation was still settling): it
        is finished and recorded now as aborted (reason ``INTERRUPTED_REASON`` unless it was
        aborted for another), so that it keeps its one result and no ``stop()`` takes that
        thread for the system's own work. Whatever it settles with later, should the
        thread's loop ever run it on, is dropped."""
        for rec in list(self.live):
            if rec.thread != thread or not rec.inline or rec.sealed:
                continue
            self.live.discard(rec)
            # Its body's task waits on the thread's loop, which no longer runs: nothing of the
            # system waits for it or stops it any more.
            self.bodies.discard(rec)
            self.body_waits.discard(rec)
            self._record_interrupted(rec)


def _owed_to_caller(rec: CallRecord, task: asyncio.Task[Any]) -> tuple[Any, ...] | None:
    """``GiveUp``'s ``owed``: the cancellation the caller's own task (``rec.outer``, awaiting
    ``execute_async``) asked for since the call began, which a hook swallowed; ``run`` raises
    it once a call has settled, and so does the call given up without its hooks."""
    if rec.outer is not task or task.cancelling() <= rec.cancel_base:
        return None
    return rec.outer_cancel_args or (CANCELLED_REASON,)
