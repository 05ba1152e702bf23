"""The worker side: what a Ray task or actor runs for one call of a placed body.

This module is imported on Ray workers; it needs only ``dsh_tools`` and Ray there. The body sees
a ``RemoteRunContext`` shaped like the local run context. A cancellation (``ray.cancel``) reaches
it two ways: as the ``KeyboardInterrupt`` Ray raises into a running task, and as ``ctx.signal``
aborting once Ray's cancellation flag is set (the only way an actor's running call learns of
it).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any, Final

from ..actors import AbortSignal
from ..registry import LosslessJsonError, snapshot_json
from ._wire import RemoteCall, decode_call, encode_reply, fault_of, snapshot_value

__all__ = ["BodyActor", "RemoteRunContext", "run_body"]

_WATCH_INTERVAL = 0.05
"""How often an ``async def`` body's loop wakes to notice an interrupt or the cancellation flag
(seconds)."""


class _CancelFlagSignal(AbortSignal):
    """An ``AbortSignal`` that reads Ray's cancellation flag whenever the body's own thread asks
    whether it aborted. Ray keeps that flag per executing thread, so nothing else can watch it;
    an ``async def`` body's loop reads it on every heartbeat."""

    __slots__ = ("_probe", "_thread")

    def __init__(self, probe: Callable[[], bool]) -> None:
        super().__init__()
        self._probe = probe
        self._thread = threading.get_ident()

    @property
    def aborted(self) -> bool:
        if not self._aborted and threading.get_ident() == self._thread:
            try:
                cancelled = self._probe()
            except Exception:
                cancelled = False
            if cancelled:
                self._fire("cancelled")
        return self._aborted


def _cancel_probe() -> Callable[[], bool] | None:
    """``is_canceled`` of the running Ray task, or None outside one."""
    try:
        import ray

        runtime = ray.get_runtime_context()
        runtime.is_canceled()
    except Exception:
        return None
    probe: Callable[[], bool] = runtime.is_canceled
    return probe


class RemoteRunContext:
    """What a placed body sees on the worker: ``call_id``, ``name``, ``arguments``, ``agent``,
    ``signal`` and ``defer_context(ctx)`` (delivered with the result in the calling process).

    ``signal.aborted`` turns true once Ray cancels the call (read it from the body's thread; an
    ``async def`` body's awaiters wake within ``_WATCH_INTERVAL``). There is no ``token`` or
    ``parent``: execution tokens are identities of the calling process and never cross it.
    """

    __slots__ = ("_call", "_contexts", "_odd", "_signal", "arguments")

    def __init__(self, call: RemoteCall, arguments: Any) -> None:
        self._call = call
        self.arguments = arguments
        self._contexts: list[Any] = []
        self._odd: set[int] = set()  # the contexts that are not lossless JSON
        probe = _cancel_probe()
        self._signal = AbortSignal() if probe is None else _CancelFlagSignal(probe)

    @property
    def call_id(self) -> str:
        """The call id the harness gave."""
        return self._call.call_id

    @property
    def name(self) -> str:
        """The tool name called."""
        return self._call.name

    @property
    def agent(self) -> str | None:
        """The calling agent's key, or None."""
        return self._call.agent

    @property
    def signal(self) -> AbortSignal:
        """Aborts once Ray cancels this call."""
        return self._signal

    def defer_context(self, context: Any) -> None:
        """Attach a hook context to this call's result (frozen now, sent with the result)."""
        try:
            context = snapshot_json(context)
        except (LosslessJsonError, RecursionError):
            # Kept as given, as locally, where it fails the result; it travels pickled so
            # that it fails the result there the same way (not turned into JSON on the way).
            self._odd.add(len(self._contexts))
        self._contexts.append(context)


async def _awake(awaitable: Any, signal: AbortSignal) -> Any:
    """Await ``awaitable`` while the loop wakes every ``_WATCH_INTERVAL``: an interrupt that Ray
    raises into this thread only lands while Python code runs (never inside a long select()),
    and an actor's cancellation flag is read here, cancelling the body like a local abort."""
    body = asyncio.ensure_future(awaitable)

    async def heartbeat() -> None:
        while not body.done():
            await asyncio.sleep(_WATCH_INTERVAL)
            if signal.aborted:
                body.cancel()
                return

    beat = asyncio.ensure_future(heartbeat())
    try:
        return await body
    finally:
        beat.cancel()


def run_body(execute: Callable[[Any, Any], Any], frame: bytes, dumps: Any) -> bytes:
    """Run one call: decode, run the body (awaiting it on a fresh loop when it is async),
    check the value is lossless, encode the reply. Exceptions from the body become a fault in
    the reply; Ray's cancellation of the call (a ``KeyboardInterrupt`` or ``CancelledError``
    once its flag is set) or Ray's exit of the worker propagates to Ray."""
    call, arguments = decode_call(frame)
    ctx = RemoteRunContext(call, arguments)
    try:
        try:
            value = execute(arguments, ctx)
            if inspect.isawaitable(value):
                value = asyncio.run(_awake(value, ctx.signal))
            value = snapshot_value(call.name, value)
        finally:
            contexts = ctx._contexts
    except BaseException as exc:  # a library's BaseException too: the body's failure, as locally
        if isinstance(exc, _ENDING_TASK) and (
            ctx.signal.aborted or hasattr(exc, "ray_terminate_msg")
        ):
            # Ray's cancellation, or Ray ending the worker (its SIGTERM, ``exit_actor()``:
            # those exits carry Ray's message): they end the task, as Ray expects. Raised by
            # the body itself (``sys.exit()`` in a command-line entry point it wraps, say),
            # they are its own failure, as locally; the worker, and an actor's state, live on.
            raise
        fault = fault_of(exc, traceback.format_exc(), dumps)
        return encode_reply(None, fault, contexts, ctx._odd, dumps)
    return encode_reply(value, None, contexts, ctx._odd, dumps)


_ENDING_TASK: Final = (KeyboardInterrupt, SystemExit, asyncio.CancelledError)
"""What Ray raises in a worker to cancel its call or end the worker."""


DROPPED: Final = b""
"""What ``BodyActor.call`` answers for a call dropped before it began (no reply frame is
empty)."""

CONTROL_GROUP: Final = "control"
"""The actor's concurrency group for ``drop``: answered while a call runs in the default
group (one thread: the calls still run one at a time, in the order they were sent)."""


class BodyActor:
    """A Ray actor holding one tool's body: its closure, module globals and anything the body
    keeps stay alive between calls on this actor (stateful tools). Calls run one at a time.

    Each call carries a sequence number, increasing in the order the calls were sent (the
    order the actor runs them in). ``drop`` makes a call that has not begun never begin: Ray
    reports a queued actor call it was asked to cancel as cancelled, yet still runs it when
    its turn comes, with no cancellation flag set."""

    def __init__(self, execute: Callable[[Any, Any], Any]) -> None:
        from ray import cloudpickle

        self._execute = execute
        self._dumps = cloudpickle.dumps
        self._lock = threading.Lock()
        self._begun = -1  # the sequence number of the last call that began
        self._dropped: set[int] = set()

    def call(self, frame: bytes, seq: int) -> bytes:
        """Run one call of the body (see ``run_body``), unless it was dropped (``DROPPED``)."""
        with self._lock:
            self._begun = seq
            if self._dropped:
                dropped = seq in self._dropped
                # A dropped call Ray did not send after all leaves its number behind.
                self._dropped = {later for later in self._dropped if later > seq}
                if dropped:
                    return DROPPED
        return run_body(self._execute, frame, self._dumps)

    def drop(self, seqs: list[int]) -> list[int]:
        """Of the calls ``seqs``, those that had not begun: they never will (run in the
        ``CONTROL_GROUP``, beside the running call)."""
        with self._lock:
            dropped = [seq for seq in seqs if seq > self._begun]
            self._dropped.update(dropped)
        return dropped

    def ready(self) -> bool:
        """Answer once the actor is constructed (its body unpickled)."""
        return True
