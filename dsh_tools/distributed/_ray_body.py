"""The local ``async def`` body of a placed tool: connect to Ray, submit the call, await the
reply without blocking the loop, stop the remote call on an abort or a cancellation, and turn
the reply into the body's value or exception (or a remote failure code)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard

from ..actors import AbortError
from ..actors._futures import retrieve
from ._driver import connect_in_background, connection, import_ray, still_connected
from ._errors import RemoteUnavailableError, RemoteWorkerLostError, describe_ray_failure
from ._ray_runners import ActorSubmission, LazyRunner, RunnerSettings, Submission
from ._remote import DROPPED
from ._wire import decode_reply, encode_call, rebuild_exception

__all__ = ["Body", "remote_body"]

Body = Callable[[Any, Any], Awaitable[Any]]

_CONNECTION_CHECK_S = 1.0
"""How often a call waiting for its reply checks that the Ray connection it was sent on is
still there (seconds)."""
_RECORD_WAIT_S = 30.0
"""How long a call whose actor died waits for that actor's record of the calls it began to be
read on its node (a worker may have to start there) before it takes the call for one that may
have run (seconds)."""
_SHUT_DOWN = "the Ray connection ended (ray.shutdown()) before the call settled"
_PLACED_JUST_THEN = (
    "but Ray may have placed its actor just then, and the body may have begun before it was"
    " stopped (the body may have run, and is not run again)"
)
_GIVEN_UP_AS_IT_BEGAN = (
    "its actor was given up before it was seen placed, and the call may have begun on it (the"
    " body may have run, and is not run again)"
)


async def _connected(tool: str, aborted: asyncio.Future[None]) -> None:
    """Connect to Ray unless connected; an abort meanwhile ends the wait (not the connection,
    which goes on for the next call)."""
    try:
        ray = import_ray()
    except ImportError as exc:
        raise RemoteUnavailableError(tool, str(exc)) from None
    if ray.is_initialized():
        return
    connecting = asyncio.wrap_future(connect_in_background())
    connecting.add_done_callback(retrieve)
    await asyncio.wait((connecting, aborted), return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():
        raise AbortError("ABORTED")
    try:
        connecting.result()
    except Exception as exc:
        raise RemoteUnavailableError(tool, f"ray.init() failed: {exc}") from None


def _outcome(tool: str, reply: asyncio.Future[Any], ctx: Any, submission: Submission) -> Any:
    """The body's value, or its exception raised here, or a remote failure code."""
    ray = import_ray()
    errors = ray.exceptions
    try:
        frame = reply.result()
    except errors.TaskCancelledError:
        raise RemoteWorkerLostError(tool, "the body was cancelled on the cluster") from None
    except errors.ActorUnavailableError as exc:
        # Its actor could not be reached for a moment (a broken connection, its node's network
        # hiccuping): Ray cannot tell whether the call ran, or runs yet, so its outcome is
        # lost; the actor is not, and keeps its slot (and its state) for the next calls.
        raise RemoteWorkerLostError(tool, describe_ray_failure(exc)) from None
    except errors.RayActorError as exc:
        submission.lost()
        if exc.actor_init_failed:
            # The actor holding the body could not be made (its arguments, the body itself,
            # could not be loaded there): the body did not run. The next call tries a fresh one.
            raise RemoteUnavailableError(tool, describe_ray_failure(exc)) from None
        # Its actor had reached the call (see ``_never_began``), but whether the body began
        # before the process ended, Ray cannot tell.
        raise RemoteWorkerLostError(tool, describe_ray_failure(exc), died=True) from None
    except (
        errors.WorkerCrashedError,
        errors.NodeDiedError,
        errors.LocalRayletDiedError,
        errors.OutOfMemoryError,
    ) as exc:
        submission.lost()
        # Ray reports a worker process killed an instant before the call reached it (while
        # idle, just as Ray leased it the call) as one that died under the body.
        raise RemoteWorkerLostError(tool, describe_ray_failure(exc), died=True) from None
    except errors.ObjectLostError as exc:
        # A reply is made once the body has returned: the body ran, its reply is gone.
        submission.lost()
        raise RemoteWorkerLostError(
            tool, "the body ran, but its reply was lost: " + describe_ray_failure(exc)
        ) from None
    except (
        errors.RuntimeEnvSetupError,
        errors.TaskUnschedulableError,
        errors.ActorUnschedulableError,
        errors.PendingCallsLimitExceeded,
        errors.AuthenticationError,
        errors.RayTaskError,
    ) as exc:
        # The machinery failed before the body could run: its environment could not be set
        # up, no node could take it, Ray refused to queue it, or the call could not be loaded
        # on the worker (a body's own exception comes back in the reply, so a task error is
        # the wrapper's, raised before the body). An actor that failed so never runs a call:
        # the next call tries a fresh one.
        submission.lost()
        raise RemoteUnavailableError(tool, describe_ray_failure(exc)) from None
    except errors.RayError as exc:
        # Any other failure Ray reports (its object store or disk full as the reply was
        # stored, its own system error) may come after the body ran: reported as a loss, not
        # as a call that did not run, which a harness might send again.
        submission.lost()
        raise RemoteWorkerLostError(tool, describe_ray_failure(exc)) from None
    value, fault, contexts = decode_reply(frame, ray.cloudpickle.loads)
    for context in contexts:
        ctx.defer_context(context)
    if fault is not None:
        raise rebuild_exception(fault, ray.cloudpickle.loads)
    return value


async def _first(
    reply: asyncio.Future[Any],
    aborted: asyncio.Future[None],
    tool: str,
    session: tuple[str, str],
    waiting: Callable[[], None] | None = None,
) -> None:
    """Wait until ``reply`` or ``aborted`` is done. After ``ray.shutdown()`` (or a new
    connection) Ray never settles a reply of the connection ``session``: the call then fails
    as lost, its body ended with that connection. ``waiting`` is called at each check
    meanwhile (``Submission.waiting``)."""
    while not (reply.done() or aborted.done()):
        await asyncio.wait(
            (reply, aborted), timeout=_CONNECTION_CHECK_S, return_when=asyncio.FIRST_COMPLETED
        )
        if not (reply.done() or aborted.done()):
            if not still_connected(session):
                raise RemoteWorkerLostError(tool, _SHUT_DOWN)
            if waiting is not None:
                waiting()


async def _never_began(
    reply: asyncio.Future[Any],
    submission: Submission,
    aborted: asyncio.Future[None],
    tool: str,
    session: tuple[str, str],
) -> bool:
    """Whether the call failed because its actor had died before reaching it: the answer
    just ahead of it on the actor (a ``ready()``, or the call ahead, ``Submission.reached``)
    failed with the death too, and the record the actor kept of the calls it began
    (``Submission.record``) shows this one had not. The body did not run, and the call may
    go to a fresh actor."""
    reached = submission.reached
    failure = None if reply.cancelled() else reply.exception()
    if reached is None or not _actor_died(failure):
        return False
    if failure.actor_init_failed:
        return False  # no actor to reach: a fresh one would fail the same way
    turn = asyncio.wrap_future(reached.future())
    turn.add_done_callback(retrieve)
    await _first(turn, aborted, tool, session)
    if not turn.done():
        raise AbortError("ABORTED")
    if not _actor_died(turn.exception()):
        return False
    # That answer (the probe's, or the call ahead's) may have been sent just before the call
    # began and lost with a process the body ended at once: only the record the actor kept on
    # its node of the calls it began tells. Without it, the call may have run.
    return await _record_shows_unbegun(submission, aborted, tool, session)


async def _shown_unbegun(
    submission: Submission, aborted: asyncio.Future[None], tool: str, session: tuple[str, str]
) -> bool:
    """Whether a call taken off (or stopped on) a pool actor given up before the pool saw it
    placed (``ActorSubmission.unseen``) is shown not to have begun there: Ray may place the
    actor just then, and reports a call it cancelled as cancelled even when the actor began
    it before the kill. So the actor's own answers tell: one that died without answering its
    ``ready`` was never placed (the answer of one placed in that instant is lost with its
    process only if the kill lands between the answer and its sending: that window is left
    open); one that answered is read from its record once it is gone. True for every other
    call, which something else showed had not begun (a dropped call; a task Ray cancelled,
    whose race is left open)."""
    if not isinstance(submission, ActorSubmission) or not submission.unseen:
        return True
    if not still_connected(session) or submission.begun.ready is None:
        return False
    ready = await _settled_within(submission.begun.ready, aborted, tool, session)
    if ready is None or ready.cancelled():
        return False
    if ready.exception() is not None:
        return _actor_died(ready.exception())  # killed before it was placed
    submission.begun.learn(ready.result())
    # Read only once the process is gone: a call Ray reported cancelled may still begin.
    probe = await _settled_within(submission.actor.ready.remote(), aborted, tool, session)
    if probe is None or probe.cancelled() or not _actor_died(probe.exception()):
        return False
    return await _record_shows_unbegun(submission, aborted, tool, session)


async def _record_shows_unbegun(
    submission: Submission, aborted: asyncio.Future[None], tool: str, session: tuple[str, str]
) -> bool:
    """Whether the record the call's dead actor kept on its node of the calls it began shows
    this one had not (``Submission.record``); False when it tells nothing."""
    record = submission.record()
    if record is None:
        return False
    reading, seq = record
    read = await _settled_within(reading, aborted, tool, session)
    if read is None:
        return False  # its node does not answer (gone with the actor, say)
    last = None if read.cancelled() or read.exception() is not None else read.result()
    return isinstance(last, int) and last < seq


async def _settled_within(
    ref: Any, aborted: asyncio.Future[None], tool: str, session: tuple[str, str]
) -> asyncio.Future[Any] | None:
    """``ref``'s outcome once Ray settled it, or None when it has not within
    ``_RECORD_WAIT_S``; an abort meanwhile ends the wait as ``ABORTED``."""
    settled = asyncio.wrap_future(ref.future())
    settled.add_done_callback(retrieve)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_first(settled, aborted, tool, session), _RECORD_WAIT_S)
    if settled.done():
        return settled
    if aborted.done():
        raise AbortError("ABORTED")
    return None


def _actor_died(failure: BaseException | None) -> TypeGuard[Any]:
    """Whether ``failure`` is Ray's report that the actor died. ``ActorUnavailableError`` is a
    ``RayActorError`` too but no death: the actor was out of reach for a moment (a broken
    connection, its node's network hiccuping) and lives on, with the calls it was sent,
    which it may have run or may run yet. Sending one of them again would run it twice."""
    errors = import_ray().exceptions
    return isinstance(failure, errors.RayActorError) and not isinstance(
        failure, errors.ActorUnavailableError
    )


def _failed_on_cluster(reply: asyncio.Future[Any]) -> bool:
    """Whether the call's reply is a failure Ray reported (not the body's own)."""
    exc = None if reply.cancelled() else reply.exception()
    return isinstance(exc, import_ray().exceptions.RayError)


def _cancelled_on_cluster(reply: asyncio.Future[Any]) -> bool:
    """Whether the call's reply is Ray's "cancelled before it ran"."""
    exc = None if reply.cancelled() else reply.exception()
    return isinstance(exc, import_ray().exceptions.TaskCancelledError)


def _dropped(reply: asyncio.Future[Any]) -> bool:
    """Whether the call's reply is its actor's word that it dropped the call before it began
    (``BodyActor.drop``): Ray ran a call it had reported cancelled, and the actor refused it."""
    return (
        reply.done()
        and not reply.cancelled()
        and reply.exception() is None
        and reply.result() == DROPPED
    )


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _stopped(submission: Submission, session: tuple[str, str]) -> None:
    """Cancel the remote call and wait (off the loop) until it settled or was forced.

    Each stop waits on a thread of its own: its grace then runs from the abort. On a shared
    pool, the calls of an aborted batch beyond its size would wait for a thread while others
    wait out their graces, and would be forced only graces later."""
    stopping: concurrent.futures.Future[None] = concurrent.futures.Future()

    def stop() -> None:
        try:
            submission.stop()
        except BaseException as exc:
            if still_connected(session):
                stopping.set_exception(exc)
                return
            # Ray refuses to cancel once its connection ended (ray.shutdown()): so did the call.
        stopping.set_result(None)

    # Not a daemon: a call that is being forced is forced before the interpreter exits.
    threading.Thread(target=stop, name="dsh-ray-stop").start()
    await asyncio.shield(asyncio.wrap_future(stopping))


def remote_body(tool: str, resolve: Callable[[], tuple[RunnerSettings, LazyRunner]]) -> Body:
    async def body(args: Any, ctx: Any) -> Any:
        signal = ctx.signal
        if signal.aborted:
            raise AbortError("ABORTED")
        loop = asyncio.get_running_loop()
        aborted: asyncio.Future[None] = loop.create_future()

        def on_abort(_reason: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing waits
                loop.call_soon_threadsafe(_wake, aborted)

        remove = signal.add_callback(on_abort)
        try:
            await _connected(tool, aborted)
            placement, lazy = resolve()
            try:
                runner = lazy.get(placement)
            except Exception as exc:
                raise RemoteUnavailableError(tool, describe_ray_failure(exc)) from None
            session = connection()
            frame = encode_call(ctx.call_id, ctx.name, ctx.agent, args)
            fresh = False  # whether the call was sent again after its actor died unreached
            again = False
            since = time.monotonic()  # a call sent again has waited since then
            while True:
                if again and not still_connected(session):
                    # Sent again after ray.shutdown(), it would connect anew (Ray connects on
                    # any call made while disconnected), from this thread and behind the
                    # harness's back: a fresh local instance, which ends with this thread.
                    raise RemoteWorkerLostError(tool, _SHUT_DOWN)
                again = True
                try:
                    submission = runner.submit(frame, since)
                except Exception as exc:  # the body (or its closure) cannot be pickled, say
                    raise RemoteUnavailableError(
                        tool, f"the body could not be sent to Ray: {lazy.unsendable(exc)}"
                    ) from None
                try:
                    reply = asyncio.wrap_future(submission.ref.future(), loop=loop)
                    reply.add_done_callback(retrieve)
                    try:
                        await _first(reply, aborted, tool, session, submission.waiting)
                    except asyncio.CancelledError:
                        with contextlib.suppress(asyncio.CancelledError):
                            await _stopped(submission, session)
                        raise
                    except RemoteUnavailableError as exc:
                        # No node can place its task or actor: cancelled (or taken off its
                        # actor), the call has not begun, unless Ray placed it just then
                        # (its outcome then stands).
                        await _stopped(submission, session)
                        await asyncio.wait((reply,), timeout=_CONNECTION_CHECK_S)
                        if not reply.done() or reply.cancelled() or _dropped(reply):
                            raise
                        if reply.exception() is not None:
                            if not isinstance(submission, ActorSubmission):
                                raise  # a task Ray cancelled: its race is left open
                            if submission.unseen:
                                if not await _shown_unbegun(submission, aborted, tool, session):
                                    raise RemoteWorkerLostError(
                                        tool, f"{exc.detail}; {_PLACED_JUST_THEN}"
                                    ) from None
                                raise
                            # The stop heard its actor placed after all (Ray placed it as the
                            # call was given up) and stopped the call as a running one: its
                            # failure stands, as any call's.
                    if not reply.done():
                        await _stopped(submission, session)
                        raise AbortError("ABORTED")
                    if _failed_on_cluster(reply) and not still_connected(session):
                        # ray.shutdown() ends the job's workers and actors as it disconnects:
                        # their calls fail with a death, which the ending connection explains.
                        raise RemoteWorkerLostError(tool, _SHUT_DOWN)
                    if submission.moved and (_cancelled_on_cluster(reply) or _dropped(reply)):
                        if not await _shown_unbegun(submission, aborted, tool, session):
                            raise RemoteWorkerLostError(tool, _GIVEN_UP_AS_IT_BEGAN)
                        continue  # taken off a replaced actor before it started: again
                    if not fresh and await _never_began(reply, submission, aborted, tool, session):
                        # Its actor had died while idle, before the call reached it: the body
                        # did not run, so it runs on a fresh actor. Once: a call whose fresh
                        # actor dies before it too fails as lost.
                        submission.lost()
                        fresh = True
                        continue
                    return _outcome(tool, reply, ctx, submission)
                finally:
                    submission.release()
        finally:
            remove()
            aborted.cancel()

    body.__name__ = body.__qualname__ = f"ray_body[{tool}]"
    return body
