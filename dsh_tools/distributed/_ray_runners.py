"""How a call reaches Ray: one task per call, or a pool of actors holding the body; and how a
submitted call is stopped (cancel, wait the grace, force) and released."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from ..actors._logging import get_logger
from ._driver import connected_ray, connection, demand, import_ray, never_placed
from ._errors import RemoteUnavailableError
from ._ray_pickle import ShippedBody
from ._remote import CONTROL_GROUP, BodyActor, last_begun, run_body

__all__ = [
    "ActorPool",
    "ActorSubmission",
    "LazyRunner",
    "RunnerSettings",
    "Submission",
    "TaskRunner",
    "TaskSubmission",
]

_log = get_logger("dsh_tools.distributed")

_RECHECK_S = 1.0
"""The least time between two looks at the cluster for a task waiting to be placed (see
``TaskSubmission.waiting``), and how long one look's answer serves the calls of its runner."""

_DROP_ANSWER_S = 1.0
"""The least time an actor has to answer whether it dropped calls that had not begun (its
``drop`` runs beside the running call, so a live actor answers at once)."""


class RunnerSettings(Protocol):
    """What a runner reads from its placement (``RayPlacement``)."""

    @property
    def actor_pool(self) -> int: ...

    @property
    def cancel_grace_s(self) -> float: ...

    @property
    def settle_s(self) -> float: ...

    @property
    def placement_wait_s(self) -> float: ...

    def _options(self) -> dict[str, Any]:
        """Ray's scheduling options for each call (or each actor)."""
        ...


class Submission(Protocol):
    ref: Any

    @property
    def reached(self) -> Any:
        """A Ray object ref that settles once the worker has reached the call, failing if it
        died before (an actor runs its calls in order, one at a time: one that died idle, or
        under the call just ahead, never began this one); None where nothing tells (a task,
        which has a worker of its own)."""

    @property
    def moved(self) -> bool:
        """Whether the call was taken off its worker before it started (that worker was
        replaced): a ``TaskCancelledError`` then means "submit it again", not a failure."""

    def stop(self) -> None:
        """Cancel, wait the grace, force, wait to settle (blocking; run off the loop)."""

    def waiting(self) -> None:
        """Called about every second while the reply is awaited (see ``ActorPool.unplaced``);
        raises ``RemoteUnavailableError`` when no node can place the call (it has not begun:
        stop it, and it fails so)."""

    def record(self) -> tuple[Any, int] | None:
        """Once the worker died and neither its answer to the call nor ``reached`` came
        back: a Ray object ref that settles with the number of the last call the worker
        began, read from its node (None when that record tells nothing), and this call's
        number; None where no record is kept (a task)."""

    def lost(self) -> None:
        """The process that ran the call died: do not send it more calls."""

    def release(self) -> None:
        """The call is over (whatever happened)."""


class TaskSubmission:
    __slots__ = ("check_at", "ref", "runner")

    reached = None  # a task is never queued behind another call on its worker

    def __init__(self, runner: TaskRunner, ref: Any, since: float) -> None:
        self.runner = runner
        self.ref = ref
        # When to look at the cluster first (see ``waiting``): nothing is asked of it before.
        self.check_at = since + runner.wait

    @property
    def moved(self) -> bool:
        return False  # a task is never queued behind another call

    def stop(self) -> None:
        # After ray.shutdown() the task ended with the connection: nothing to stop (and
        # asked to, Ray would connect anew, see ``connected_ray``).
        ray = connected_ray()
        if ray is None:
            return
        runner = self.runner
        ray.cancel(self.ref, force=False, recursive=True)
        ready, _ = ray.wait([self.ref], timeout=runner.grace, fetch_local=False)
        if ready or connected_ray() is None:
            return
        _log.warning("remote body ignored cancellation; forcing its worker to exit")
        ray.cancel(self.ref, force=True, recursive=True)
        ray.wait([self.ref], timeout=runner.settle, fetch_local=False)

    def record(self) -> tuple[Any, int] | None:
        return None  # never asked: a task is never queued behind another call

    def waiting(self) -> None:
        # Ray keeps a task no node can place in its queue for ever (an autoscaler may add a
        # node that can). Once the call has waited ``placement_wait_s``, and again every
        # ``placement_wait_s`` (at least every ``_RECHECK_S``) while it waits, the cluster
        # is asked whether any live node could ever place it; a call that starts sooner asks
        # nothing.
        now = time.monotonic()
        if now < self.check_at:
            return
        runner = self.runner
        self.check_at = now + max(runner.wait, _RECHECK_S)
        runner.unplaced()

    def lost(self) -> None:
        return None

    def release(self) -> None:
        return None


class TaskRunner:
    """Every call is one Ray task running the body (exported to the cluster once)."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any], placement: RunnerSettings):
        ray = import_ray()

        def tool_body(frame: bytes) -> bytes:
            from ray import cloudpickle

            return run_body(execute, frame, cloudpickle.dumps)

        self.grace = placement.cancel_grace_s
        self.settle = placement.settle_s
        self.wait = placement.placement_wait_s
        self._tool = tool
        options = placement._options()
        self._demand = demand(options)  # what each call needs of a node
        # The last answer of ``never_placed`` and when it was had: the calls of a burst that
        # wait together share one look at the cluster.
        self._checked: tuple[float, str | None] = (-math.inf, None)
        self._remote = ray.remote(tool_body).options(
            name=f"dsh-tool[{tool}]", max_retries=0, retry_exceptions=False, **options
        )

    def submit(self, frame: bytes, since: float) -> Submission:
        return TaskSubmission(self, self._remote.remote(frame), since)

    def unplaced(self) -> None:
        """Raise ``RemoteUnavailableError`` when no live node of the cluster has the resources
        a call needs (free or not): Ray would never place it, and it has not begun."""
        now = time.monotonic()
        checked_at, why = self._checked
        if now - checked_at >= _RECHECK_S:
            why = never_placed("worker for the call", self.wait, self._demand)
            self._checked = (now, why)
        if why is not None:
            raise RemoteUnavailableError(self._tool, why)


class ActorSubmission:
    __slots__ = (
        "actor",
        "begun",
        "moved",
        "pool",
        "reached",
        "ref",
        "released",
        "seq",
        "since",
        "slot",
        "unseen",
    )

    def __init__(
        self,
        pool: ActorPool,
        slot: _Slot,
        actor: Any,
        begun: _Record,
        reached: Any,
        seq: int,
        ref: Any,
        since: float,
    ) -> None:
        self.pool = pool
        self.since = since  # when the call was first sent (to this actor or one before it)
        self.slot = slot
        self.actor = actor
        self.begun = begun  # where its actor records the calls it began
        self.reached = reached
        self.seq = seq  # its place in the order the pool's calls were sent (see ``BodyActor``)
        self.ref = ref
        self.released = False
        self.moved = False  # taken off its actor before it started (see ``ActorPool.discard``)
        # Taken off (or stopped on) an actor given up before the pool saw it placed: nothing
        # showed the call had not begun there (see ``_ray_body._shown_unbegun``).
        self.unseen = False

    def stop(self) -> None:
        ray = connected_ray()
        if ray is None:
            return  # the actor ended with the connection (see ``TaskSubmission.stop``)
        pool = self.pool
        slot = self.slot
        if slot.actor is self.actor and not slot.placed and not pool.heard(slot, self.actor):
            # Its actor is not placed yet (it has begun no call). Ray runs no later call on an
            # actor a call of which was cancelled before it was placed: the actor is given up,
            # and the calls queued on it go to a fresh one (see ``ActorPool.unplaced``).
            pool.discard(slot, self.actor, moving=True)
            if connected_ray() is not None:
                ray.wait([self.ref], timeout=pool.settle, fetch_local=False)
            return
        if _drop(ray, self.actor, [self.seq], pool.grace) == [self.seq]:
            # It had not begun (it waits behind another call): it never will, and the call
            # ahead is no part of this abort. Ray's own cancellation would not do: it reports
            # a queued call cancelled and runs it all the same when its turn comes.
            return
        if connected_ray() is None:
            return  # ended with the connection while the actor was asked
        # A running call sees its signal abort (Ray cannot interrupt an actor's running call,
        # nor force it). Should the actor not have answered (dead, out of reach, or too busy
        # to), a call still queued is dropped by Ray at best.
        ray.cancel(self.ref, recursive=True)
        ready, _ = ray.wait([self.ref], timeout=pool.grace, fetch_local=False)
        if ready or connected_ray() is None:
            return
        ahead = self.reached
        if ahead is not None and not _settled(ray, ahead):
            # Queued behind a call still running on the actor, it has not begun. Ray runs
            # a cancelled queued call all the same once its turn comes (its flag set late,
            # if at all): it is cancelled again as it begins, once the call ahead ended (its
            # own abort or deadline ends it). Killing the actor now would lose that call,
            # which is no part of this abort.
            ready, _ = ray.wait([ahead], timeout=pool.settle, fetch_local=False)
            if ready and connected_ray() is not None:
                ray.cancel(self.ref, recursive=True)
                ready, _ = ray.wait([self.ref], timeout=pool.grace, fetch_local=False)
            if ready or connected_ray() is None:
                return
        _log.warning("remote body on an actor ignored cancellation; replacing the actor")
        pool.discard(self.slot, self.actor, running=self)
        if connected_ray() is not None:
            ray.wait([self.ref], timeout=pool.settle, fetch_local=False)

    def waiting(self) -> None:
        self.pool.unplaced(self)

    def record(self) -> tuple[Any, int] | None:
        reading = self.begun.read()
        return None if reading is None else (reading, self.seq)

    def lost(self) -> None:
        self.pool.discard(self.slot, self.actor)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool.release(self.slot, self)


class _Record:
    """Where a pool's actor records the calls it began (``BegunRecord``: its node and file,
    from its first ``ready`` answer), and the one reading of it once the actor died, which
    the calls sent to it share (the reading removes the file)."""

    __slots__ = ("lock", "reading", "ready", "where")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.where: tuple[str, str] | None = None
        self.reading: Any = None
        # The actor's first ``ready`` (see ``ActorPool.heard``); None for a slot's record
        # before its first actor.
        self.ready: Any = None

    def learn(self, where: Any) -> None:
        """Take the answer of the actor's ``ready``: the node and file of its record."""
        if isinstance(where, tuple) and len(where) == 2:
            with self.lock:
                if self.where is None:
                    self.where = (str(where[0]), str(where[1]))

    def read(self) -> Any:
        """A Ray object ref settling with ``last_begun`` of the record, read on its node (the
        first call asks Ray, the others share it); None when the actor keeps none, or never
        said where (it died before it was placed), or Ray's connection ended."""
        with self.lock:
            if self.reading is None and self.where is not None:
                ray = connected_ray()
                if ray is not None:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    node, path = self.where
                    self.reading = (
                        ray.remote(last_begun)
                        .options(
                            name="dsh-tool-record",
                            num_cpus=0,
                            max_retries=0,
                            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                        )
                        .remote(path)
                    )
            return self.reading


class _Slot:
    """One place for an actor in a pool (its fields are the pool's, read under its lock)."""

    __slots__ = ("actor", "begun", "calls", "index", "last", "made", "made_at", "placed")

    def __init__(self, index: int) -> None:
        self.index = index
        self.actor: Any = None  # None until a call makes one, and after it was discarded
        self.begun = _Record()  # its actor's record (a fresh one with each actor)
        # The calls submitted to its actors and not yet released.
        self.calls: set[ActorSubmission] = set()
        # The ref of the last call sent to its actor while it has calls (see ``submit``).
        self.last: Any = None
        # Whether its actor has been placed (its ``ready`` answered), and when it was made
        # (see ``unplaced``); how many actors it has had (tells them apart).
        self.placed = False
        self.made_at = 0.0
        self.made = 0


def _queued(slot: _Slot) -> int:
    return len(slot.calls)


class ActorPool:
    """``size`` actors holding the body; a call goes to the one with the fewest calls queued.

    While an actor of the pool is placed (Ray has constructed it on a node), new calls go only
    to placed actors (and to slots that have none yet): an actor Ray cannot place (the pool is
    larger than the cluster offers) would hold its calls for ever. One still unplaced
    ``placement_wait_s`` after it was made, while another of the pool is placed, is given up
    (see ``unplaced``); its slot takes calls again once Ray places the fresh actor made for it."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any], placement: RunnerSettings):
        ray = import_ray()
        self.grace = placement.cancel_grace_s
        self.settle = placement.settle_s
        self._execute = execute
        self._tool = tool
        options = placement._options()
        # ``drop`` runs in a group of its own, beside the running call (see ``BodyActor``).
        self._cls = ray.remote(concurrency_groups={CONTROL_GROUP: 1})(BodyActor).options(
            max_restarts=0, max_task_retries=0, max_concurrency=1, **options
        )
        self._demand = demand(options)  # what each actor needs of a node
        self._wait = placement.placement_wait_s
        self._lock = threading.Lock()
        self._slots = [_Slot(index) for index in range(placement.actor_pool)]
        self._sent = itertools.count()  # numbers the calls in the order they are sent

    def submit(self, frame: bytes, since: float) -> Submission:
        """Send the call ``frame`` to an actor; ``since``: when it was first sent (it is sent
        again when it was taken off an actor before it began)."""
        with self._lock:
            slots = self._slots
            for slot in slots:
                if slot.placed:
                    slots = [other for other in slots if other.placed or other.actor is None]
                    break
            slot = min(slots, key=_queued)
            actor = slot.actor
            reached = placing = None
            if actor is None:
                # No ``ready`` probe ahead of the first call: its answer can be lost with a
                # process that the call ends at once (Ray sends it as the call begins), and a
                # call taken for not begun would run twice. An actor that dies as Ray places
                # it or as it loads the body fails the call as a death (it may have run).
                actor, ready, on_placed = self._make(slot)
                placing = ready, on_placed
            elif slot.calls:
                # The call just ahead on the same actor: should it fail with the actor's death,
                # the actor died before it finished that one, so it never began this one.
                reached = slot.last
            else:
                # ``ready`` just before the call, on the same actor: should it fail with the
                # actor's death, the actor died while idle and never began the call. However
                # soon after its last call it died: a process often ends just after its work
                # (a crash the body left behind, the memory it took).
                reached = actor.ready.remote()
            seq = next(self._sent)
            submission = ActorSubmission(
                self, slot, actor, slot.begun, reached, seq, actor.call.remote(frame, seq), since
            )
            slot.last = submission.ref
            slot.calls.add(submission)
        if placing is not None:
            # Out of the lock: a future already done runs its callback at once, here.
            ready, on_placed = placing
            ready.future().add_done_callback(on_placed)
        return submission

    def _make(self, slot: _Slot) -> tuple[Any, Any, Callable[[Any], None]]:
        """A fresh actor for ``slot`` (under the lock), its ``ready`` (answered once Ray has
        placed it), and what to call with that answer's future."""
        actor = slot.actor = self._cls.remote(self._execute)
        slot.placed = False
        slot.made_at = time.monotonic()
        slot.made += 1
        begun = slot.begun = _Record()
        # Answered once Ray has placed and constructed the actor (before any call: it is the
        # first in the actor's queue). Neither the pool nor the actor is held by the wait (Ray
        # keeps it until the answer, for ever for an actor it never places): a pool no longer
        # used is collected, and its actors end.
        on_placed = functools.partial(_on_placed, weakref.ref(self), slot.index, slot.made, begun)
        ready = begun.ready = actor.ready.remote()
        return actor, ready, on_placed

    def release(self, slot: _Slot, submission: ActorSubmission) -> None:
        with self._lock:
            calls = slot.calls
            calls.discard(submission)
            if not calls:
                slot.last = None  # not held: it would keep its reply in Ray's store

    def placed(self, index: int, made: int) -> None:
        """The ``made``-th actor of slot ``index`` is placed (see ``submit``)."""
        with self._lock:
            slot = self._slots[index]
            if slot.actor is not None and slot.made == made:
                slot.placed = True

    def heard(self, slot: _Slot, actor: Any) -> bool:
        """Whether ``actor``, the actor of ``slot`` not yet known as placed, answers its
        ``ready`` within the grace: the answer reaches Ray's store before the callback that
        marks the slot placed runs, and a call whose body has begun may be aborted between
        the two (the actor answered ``ready`` before it began the call)."""
        with self._lock:
            ready = slot.begun.ready if slot.actor is actor else None
        ray = connected_ray()
        if ready is None or ray is None:
            return False
        answered, _ = ray.wait([ready], timeout=self.grace, fetch_local=False)
        return bool(answered)

    def unplaced(self, submission: ActorSubmission) -> None:
        """Give up the actor of ``submission`` if Ray has not placed it ``placement_wait_s``
        after it was made while another actor of the pool is placed: the calls queued on it
        go to the placed ones. An actor never placed has begun no call, so none of them has
        run; they are moved the way ``discard`` moves the calls queued behind a stubborn
        one (cancelled, then the actor killed: an actor whose queued calls were cancelled
        before it was placed runs no later call), so that should Ray place it just then and a
        call begin, that call is reported lost with it, and none runs twice. A fresh actor
        with no calls takes its slot and waits in Ray's queue: once Ray places it (the
        cluster grew, or something gave its resources back), the slot takes calls again.

        While no actor of the pool is placed, the calls wait for Ray to place one, unless no
        node of the cluster has the resources an actor needs: then ``RemoteUnavailableError``
        says so (see ``ActorSubmission.waiting``) once the call has waited
        ``placement_wait_s``, counted from when its actor was made or from when the call was
        first sent, whichever came first: a call taken off an actor given up meanwhile has
        waited that long already, and a fresh actor no node can place does not restart it."""
        slot = submission.slot
        actor = submission.actor
        if slot.placed or slot.actor is not actor:
            return  # the usual path: a call on a placed actor
        with self._lock:
            if slot.actor is not actor or slot.placed:
                return
            alone = not any(other.placed for other in self._slots)
            began = min(slot.made_at, submission.since) if alone else slot.made_at
            if time.monotonic() - began < self._wait:
                return
        if alone:
            why = never_placed("actor of its pool", self._wait, self._demand)
            if why is not None:
                raise RemoteUnavailableError(self._tool, why)
            return
        _log.warning(
            f"an actor of tool {self._tool!r} was not placed by Ray within {self._wait}s while"
            " another of its pool runs (the pool is larger than the cluster offers); its calls"
            " go to the others"
        )
        self.discard(slot, actor, moving=True)
        placing = None
        with self._lock:
            if slot.actor is None and connected_ray() is not None:
                placing = self._make(slot)[1:]
        if placing is not None:
            ready, on_placed = placing
            ready.future().add_done_callback(on_placed)

    def discard(
        self,
        slot: _Slot,
        actor: Any,
        running: ActorSubmission | None = None,
        moving: bool = False,
    ) -> None:
        """Kill ``actor`` and let the next call of its slot start a fresh one.

        When it is replaced because ``running`` will not stop, the calls queued behind it
        have not started (an actor runs one call at a time): they are taken off it first
        (cancelled before they start, ``moved``) and their bodies submit them again, so
        that only the stubborn call is lost with it. Ray reports a call it cancelled before
        it ran as ``TaskCancelledError`` (and runs it all the same when its turn comes, so
        the actor is asked to drop them first, see ``BodyActor.drop``); one that did start
        meanwhile (the stubborn call ended just then) cannot be cancelled, fails as lost with
        the kill, and is not run again. Only a call the actor dropped is moved (should it not
        answer, a call whose call just ahead has not ended): when ``running`` itself waited
        behind a call that would not end (see ``ActorSubmission.stop``), that call may be
        running, and is lost with the actor. ``moving``: every call on it is moved so (its
        actor was never placed, see ``unplaced``)."""
        with self._lock:
            if slot.actor is actor:
                slot.actor = None
                slot.placed = False
            queued = (
                [s for s in slot.calls if s.actor is actor and s is not running]
                if running is not None or moving
                else []
            )
        ray = connected_ray()
        if ray is None:
            return  # the actor ended with the connection (see ``TaskSubmission.stop``)
        if running is not None and queued:
            # Only the calls the actor dropped before they began are sure not to have begun
            # (the stubborn call may have ended just now, and the next one begun). Should
            # the actor not answer, only those behind another call that has not ended are:
            # the one at the head of its queue (not ``running`` when that one was queued
            # behind a call that would not end) may be running, and is lost with the actor.
            dropped = _drop(ray, actor, [s.seq for s in queued], self.grace)
            queued = (
                [s for s in queued if s.reached is not None and not _settled(ray, s.reached)]
                if dropped is None
                else [s for s in queued if s.seq in dropped]
            )
            if connected_ray() is None:
                return  # ended with the connection while the actor was asked
        for submission in queued:
            submission.moved = True
            submission.unseen = moving
        for submission in queued:
            # Marked cancelled before the kill, a queued call fails as cancelled, not as lost.
            with contextlib.suppress(Exception):
                ray.cancel(submission.ref)
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _drop(ray: Any, actor: Any, seqs: list[int], grace: float) -> list[int] | None:
    """Those of the calls ``seqs`` that ``actor`` dropped before they began (they never will,
    see ``BodyActor.drop``), or None when it did not answer (it died, is out of reach, or a
    body holds its interpreter, or the connection ended: then nothing is asked, see
    ``connected_ray``)."""
    if connected_ray() is None:
        return None
    try:
        dropping = actor.drop.options(concurrency_group=CONTROL_GROUP).remote(seqs)
        dropped: list[int] = ray.get(dropping, timeout=max(grace, _DROP_ANSWER_S))
    except Exception:
        return None
    return dropped


def _settled(ray: Any, ref: Any) -> bool:
    """Whether Ray has settled ``ref`` (its call ended, or failed)."""
    ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
    return bool(ready)


def _on_placed(
    pool: weakref.ref[ActorPool],
    index: int,
    made: int,
    begun: _Record,
    answer: concurrent.futures.Future[Any],
) -> None:
    """An actor's ``ready`` answered: it is placed (and says where it records the calls it
    began), unless that failed (its death is then reported to the calls sent to it)."""
    if answer.cancelled() or answer.exception() is not None:
        return
    begun.learn(answer.result())
    held = pool()
    if held is not None:
        held.placed(index, made)


class LazyRunner:
    """Builds the task runner or actor pool on the first call of each Ray connection (after
    Ray is connected): after ``ray.shutdown()`` the pool's actors are gone, and the next
    connection gets fresh ones."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any]) -> None:
        self._tool = tool
        # Pickled by ``_ray_pickle`` whenever Ray sends it, so a typed body's classes that
        # travel by value arrive usable (see that module).
        self._execute = ShippedBody(execute)
        self._lock = threading.Lock()
        self._held: tuple[tuple[str, str], TaskRunner | ActorPool] | None = None

    def get(self, placement: RunnerSettings) -> TaskRunner | ActorPool:
        current = connection()
        held = self._held
        if held is None or held[0] != current:
            with self._lock:
                held = self._held
                if held is None or held[0] != current:
                    runner = (
                        ActorPool(self._tool, self._execute, placement)
                        if placement.actor_pool
                        else TaskRunner(self._tool, self._execute, placement)
                    )
                    held = self._held = (current, runner)
        return held[1]

    def unsendable(self, exc: BaseException) -> str:
        """Why the body could not be sent to Ray (see ``ShippedBody.unsendable``)."""
        return self._execute.unsendable(exc)
