"""``RayPlacement``: a tool's body runs on Ray, everything around it stays here.

``RayPlacement(...).place(tool, execute)`` (called by ``define_tool(..., placement=...)``)
returns an ``async def`` body. Each call of it sends the arguments as JSON to a Ray task (or to
one actor of a pool, for tools that keep state), awaits the reply without blocking the loop, and
returns the value or raises the body's exception, so the local pipeline (hooks, guards,
approval, wrappers, timeouts, post-hooks, the session log, batch slots and barriers) sees an
ordinary ``async def`` body.

Cancellation: when the call's signal aborts (the caller's abort, or the timeout policy's
deadline) or the awaiting task is cancelled, the Ray task is cancelled with ``ray.cancel``; if it
has not settled after ``cancel_grace_s`` it is forced (``force=True`` ends the worker process;
an actor, which Ray cannot force, is killed and replaced by a fresh one). The call then settles
as ``ABORTED`` (or ``TOOL_TIMEOUT`` through the policy), as locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import msgspec
import structlog

from ..actors import AbortError
from ._driver import ensure_ray, import_ray
from ._errors import RemoteUnavailableError, RemoteWorkerLostError
from ._remote import BodyActor, run_body
from ._wire import decode_reply, encode_call, rebuild_exception

__all__ = ["RAY_DEFAULT", "RayPlacement", "set_ray_default"]

_log = structlog.get_logger("dsh_tools.distributed")

# Ray's blocking calls (connecting, waiting for a cancelled task to settle) run here, never on
# an event loop.
_blocking = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dsh-ray")

Body = Callable[[Any, Any], Awaitable[Any]]


class RayPlacement(msgspec.Struct, frozen=True, kw_only=True):
    """Run a tool's body on Ray.

    ``num_cpus``, ``num_gpus``, ``resources`` and ``runtime_env`` are Ray's scheduling options
    for each call (or for each actor). ``actor_pool=0`` runs every call as a Ray task; ``N > 0``
    keeps ``N`` actors holding the body, each running one call at a time, for tools that keep
    state between calls (an actor that dies or is killed on an abort is replaced by a fresh one:
    its state is lost). ``cancel_grace_s`` is how long a cancelled call may take to stop before
    it is forced; ``settle_s`` bounds the wait after forcing. A body runs at most once: Ray's
    retries are off.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    resources: dict[str, float] | None = None
    runtime_env: dict[str, Any] | None = None
    actor_pool: int = 0
    cancel_grace_s: float = 2.0
    settle_s: float = 10.0

    def __post_init__(self) -> None:
        for label in ("num_cpus", "num_gpus", "cancel_grace_s", "settle_s"):
            value = getattr(self, label)
            if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"RayPlacement: {label} must be a finite number >= 0")
        if type(self.actor_pool) is not int or self.actor_pool < 0:
            raise ValueError("RayPlacement: actor_pool must be an int >= 0")
        if self.resources is not None:
            for key, amount in self.resources.items():
                if type(key) is not str or type(amount) not in (int, float) or amount < 0:
                    raise ValueError("RayPlacement: resources must map str names to numbers >= 0")
        if self.runtime_env is not None and not isinstance(self.runtime_env, dict):
            raise ValueError("RayPlacement: runtime_env must be a dict")

    def place(self, tool: str, execute: Callable[[Any, Any], Any]) -> Body:
        """The ``async def`` body that runs ``execute`` on Ray with these options."""
        runner = _LazyRunner(tool, execute)
        return _remote_body(tool, lambda: (self, runner))

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env:
            options["runtime_env"] = dict(self.runtime_env)
        return options


_default_lock = threading.Lock()
_default = RayPlacement()


def set_ray_default(placement: RayPlacement) -> RayPlacement:
    """Set the options every tool placed with ``RAY_DEFAULT`` uses from its next call on;
    returns the previous default."""
    global _default
    if not isinstance(placement, RayPlacement):
        raise TypeError(f"set_ray_default needs a RayPlacement, got {type(placement).__name__}")
    with _default_lock:
        previous, _default = _default, placement
    return previous


class _RayDefault:
    """The placement of tools that opt into the system-wide default (``set_ray_default``)."""

    def place(self, tool: str, execute: Callable[[Any, Any], Any]) -> Body:
        runners: dict[int, tuple[RayPlacement, _LazyRunner]] = {}
        lock = threading.Lock()

        def current() -> tuple[RayPlacement, _LazyRunner]:
            placement = _default
            with lock:
                found = runners.get(id(placement))
                if found is None or found[0] is not placement:
                    found = runners[id(placement)] = (placement, _LazyRunner(tool, execute))
            return found

        return _remote_body(tool, current)

    def __repr__(self) -> str:
        return "RAY_DEFAULT"


RAY_DEFAULT = _RayDefault()
"""Place a tool's body on Ray with the options set by ``set_ray_default`` (``RayPlacement()``
until then), read at each call."""


# --- runners: how a call reaches Ray ----------------------------------------------------------


class _Submission(Protocol):
    ref: Any

    def stop(self) -> None:
        """Cancel, wait the grace, force, wait to settle (blocking; run off the loop)."""

    def lost(self) -> None:
        """The process that ran the call died: do not send it more calls."""

    def release(self) -> None:
        """The call is over (whatever happened)."""


class _TaskSubmission:
    __slots__ = ("grace", "ref", "settle")

    def __init__(self, ref: Any, grace: float, settle: float) -> None:
        self.ref = ref
        self.grace = grace
        self.settle = settle

    def stop(self) -> None:
        ray = import_ray()
        ray.cancel(self.ref, force=False, recursive=True)
        ready, _ = ray.wait([self.ref], timeout=self.grace, fetch_local=False)
        if ready:
            return
        _log.warning("remote body ignored cancellation; forcing its worker to exit")
        ray.cancel(self.ref, force=True, recursive=True)
        ray.wait([self.ref], timeout=self.settle, fetch_local=False)

    def lost(self) -> None:
        return None

    def release(self) -> None:
        return None


class _TaskRunner:
    """Every call is one Ray task running the body (exported to the cluster once)."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any], placement: RayPlacement):
        ray = import_ray()

        def tool_body(frame: bytes) -> bytes:
            from ray import cloudpickle

            return run_body(execute, frame, cloudpickle.dumps)

        self._grace = placement.cancel_grace_s
        self._settle = placement.settle_s
        self._remote = ray.remote(tool_body).options(
            name=f"dsh-tool[{tool}]", max_retries=0, retry_exceptions=False, **placement._options()
        )

    def submit(self, frame: bytes) -> _Submission:
        return _TaskSubmission(self._remote.remote(frame), self._grace, self._settle)


class _ActorSubmission:
    __slots__ = ("actor", "pool", "ref", "released", "slot")

    def __init__(self, pool: _ActorPool, slot: int, actor: Any, ref: Any) -> None:
        self.pool = pool
        self.slot = slot
        self.actor = actor
        self.ref = ref
        self.released = False

    def stop(self) -> None:
        ray = import_ray()
        pool = self.pool
        # A pending call is dropped; a running one sees its signal abort (Ray cannot interrupt
        # an actor's running call, nor force it).
        ray.cancel(self.ref, recursive=True)
        ready, _ = ray.wait([self.ref], timeout=pool.grace, fetch_local=False)
        if ready:
            return
        _log.warning("remote body on an actor ignored cancellation; replacing the actor")
        pool.discard(self.slot, self.actor)
        ray.wait([self.ref], timeout=pool.settle, fetch_local=False)

    def lost(self) -> None:
        self.pool.discard(self.slot, self.actor)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool.release(self.slot)


class _ActorPool:
    """``size`` actors holding the body; a call goes to the one with the fewest calls queued."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any], placement: RayPlacement):
        ray = import_ray()
        self.grace = placement.cancel_grace_s
        self.settle = placement.settle_s
        self._execute = execute
        self._tool = tool
        self._cls = ray.remote(BodyActor).options(
            max_restarts=0, max_task_retries=0, max_concurrency=1, **placement._options()
        )
        self._lock = threading.Lock()
        self._actors: list[Any] = [None] * placement.actor_pool
        self._queued = [0] * placement.actor_pool

    def submit(self, frame: bytes) -> _Submission:
        with self._lock:
            slot = min(range(len(self._queued)), key=self._queued.__getitem__)
            actor = self._actors[slot]
            if actor is None:
                actor = self._actors[slot] = self._cls.remote(self._execute)
            self._queued[slot] += 1
        return _ActorSubmission(self, slot, actor, actor.call.remote(frame))

    def release(self, slot: int) -> None:
        with self._lock:
            self._queued[slot] -= 1

    def discard(self, slot: int, actor: Any) -> None:
        """Kill ``actor`` and let the next call of its slot start a fresh one."""
        with self._lock:
            if self._actors[slot] is actor:
                self._actors[slot] = None
        with contextlib.suppress(Exception):
            import_ray().kill(actor, no_restart=True)


class _LazyRunner:
    """Builds the task runner or actor pool on the first call (after Ray is connected)."""

    def __init__(self, tool: str, execute: Callable[[Any, Any], Any]) -> None:
        self._tool = tool
        self._execute = execute
        self._lock = threading.Lock()
        self._runner: _TaskRunner | _ActorPool | None = None

    def get(self, placement: RayPlacement) -> _TaskRunner | _ActorPool:
        runner = self._runner
        if runner is None:
            with self._lock:
                runner = self._runner
                if runner is None:
                    runner = self._runner = (
                        _ActorPool(self._tool, self._execute, placement)
                        if placement.actor_pool
                        else _TaskRunner(self._tool, self._execute, placement)
                    )
        return runner


# --- the local body ---------------------------------------------------------------------------


async def _connected(tool: str, aborted: asyncio.Future[None]) -> None:
    """Connect to Ray unless connected; an abort meanwhile ends the wait (not the connection,
    which goes on for the next call)."""
    try:
        ray = import_ray()
    except ImportError as exc:
        raise RemoteUnavailableError(tool, str(exc)) from None
    if ray.is_initialized():
        return
    connecting = asyncio.get_running_loop().run_in_executor(_blocking, ensure_ray)
    connecting.add_done_callback(_retrieve)
    await asyncio.wait((connecting, aborted), return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():
        raise AbortError("ABORTED")
    try:
        connecting.result()
    except Exception as exc:
        raise RemoteUnavailableError(tool, f"ray.init() failed: {exc}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _outcome(tool: str, reply: asyncio.Future[Any], ctx: Any, submission: _Submission) -> Any:
    """The body's value, or its exception raised here, or a remote failure code."""
    ray = import_ray()
    errors = ray.exceptions
    try:
        frame = reply.result()
    except errors.TaskCancelledError:
        raise RemoteWorkerLostError(tool, "the body was cancelled on the cluster") from None
    except (
        errors.WorkerCrashedError,
        errors.RayActorError,
        errors.NodeDiedError,
        errors.ObjectLostError,
        errors.LocalRayletDiedError,
        errors.OutOfMemoryError,
    ) as exc:
        submission.lost()
        raise RemoteWorkerLostError(tool, _first_line(exc)) from None
    except errors.RayError as exc:
        # The machinery failed before the body could run (its environment could not be set
        # up, the body could not be unpickled on the worker, the task was unschedulable).
        raise RemoteUnavailableError(tool, _first_line(exc)) from None
    value, fault, contexts = decode_reply(frame)
    for context in contexts:
        ctx.defer_context(context)
    if fault is not None:
        raise rebuild_exception(fault, ray.cloudpickle.loads)
    return value


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A reply nobody reads (the call was aborted) must not log "exception never retrieved".
    if not future.cancelled():
        future.exception()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _stopped(submission: _Submission) -> None:
    """Cancel the remote call and wait (off the loop) until it settled or was forced."""
    stopping = asyncio.get_running_loop().run_in_executor(_blocking, submission.stop)
    await asyncio.shield(stopping)


def _remote_body(tool: str, resolve: Callable[[], tuple[RayPlacement, _LazyRunner]]) -> Body:
    async def remote_body(args: Any, ctx: Any) -> Any:
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
                raise RemoteUnavailableError(tool, _first_line(exc)) from None
            frame = encode_call(ctx.call_id, ctx.name, ctx.agent, args)
            try:
                submission = runner.submit(frame)
            except Exception as exc:  # the body (or its closure) cannot be pickled, say
                raise RemoteUnavailableError(
                    tool, f"the body could not be sent to Ray: {_first_line(exc)}"
                ) from None
            try:
                reply = asyncio.wrap_future(submission.ref.future(), loop=loop)
                reply.add_done_callback(_retrieve)
                try:
                    await asyncio.wait((reply, aborted), return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:
                    with contextlib.suppress(asyncio.CancelledError):
                        await _stopped(submission)
                    raise
                if not reply.done():
                    await _stopped(submission)
                    raise AbortError("ABORTED")
                return _outcome(tool, reply, ctx, submission)
            finally:
                submission.release()
        finally:
            remove()
            aborted.cancel()

    remote_body.__name__ = remote_body.__qualname__ = f"ray_body[{tool}]"
    return remote_body
