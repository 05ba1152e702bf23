"""The worker side: what a Ray task or actor runs for one call of a placed body.

This module is imported on Ray workers; it needs only ``dsh_tools`` and Ray there. The body sees
a ``RemoteRunContext`` shaped like the local run context. A cancellation (``ray.cancel``) reaches
it two ways: as the ``KeyboardInterrupt`` Ray raises into a running task, and as
``ctx.signal`` aborting, which a watcher notices from Ray's cancellation flag (the only way an
actor's running call learns of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..actors import AbortController, AbortSignal
from ..registry import LosslessJsonError, snapshot_json
from ._wire import RemoteCall, decode_call, encode_reply, fault_of, snapshot_value

__all__ = ["BodyActor", "RemoteRunContext", "run_body"]

_WATCH_INTERVAL = 0.05
"""How often a watched call polls Ray's cancellation flag, and how often an ``async def`` body's
loop wakes so that an interrupt raised into the worker's thread is noticed (seconds)."""


class RemoteRunContext:
    """What a placed body sees on the worker: ``call_id``, ``name``, ``arguments``, ``agent``,
    ``signal`` (aborts when the call is cancelled) and ``defer_context(ctx)`` (delivered with
    the result in the calling process). There is no ``token`` or ``parent``: execution tokens
    are identities of the calling process and never cross it."""

    __slots__ = ("_call", "_contexts", "_controller", "_stop", "arguments")

    def __init__(self, call: RemoteCall, arguments: Any) -> None:
        self._call = call
        self.arguments = arguments
        self._contexts: list[Any] = []
        self._controller: AbortController | None = None
        self._stop = threading.Event()

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
        """Aborts once Ray cancels this call (watched from the first time it is read)."""
        if self._controller is None:
            self._controller = AbortController()
            _watch_cancellation(self._controller, self._stop)
        return self._controller.signal

    def defer_context(self, context: Any) -> None:
        """Attach a hook context to this call's result (frozen now, sent with the result)."""
        with contextlib.suppress(LosslessJsonError, RecursionError):
            context = snapshot_json(context)
        self._contexts.append(context)

    def _close(self) -> list[Any]:
        self._stop.set()
        return self._contexts


def _watch_cancellation(controller: AbortController, stop: threading.Event) -> None:
    try:
        import ray

        runtime = ray.get_runtime_context()
        runtime.is_canceled()
    except Exception:
        return  # not inside a Ray task (or no flag to read): the interrupt is all there is

    def watch() -> None:
        while not stop.wait(_WATCH_INTERVAL):
            try:
                cancelled = runtime.is_canceled()
            except Exception:
                return
            if cancelled:
                controller.abort("cancelled")
                return

    threading.Thread(target=watch, name="dsh-remote-cancel-watch", daemon=True).start()


async def _awake(awaitable: Any) -> Any:
    """Await ``awaitable`` while the loop wakes every ``_WATCH_INTERVAL``: an interrupt that Ray
    raises into this thread only lands while Python code runs, never inside a long select()."""

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(_WATCH_INTERVAL)

    beat = asyncio.ensure_future(heartbeat())
    try:
        return await awaitable
    finally:
        beat.cancel()


def run_body(execute: Callable[[Any, Any], Any], frame: bytes, dumps: Any) -> bytes:
    """Run one call: decode, run the body (awaiting it on a fresh loop when it is async),
    check the value is lossless, encode the reply. Exceptions from the body become a fault in
    the reply; a cancellation (``KeyboardInterrupt``) propagates to Ray."""
    call, arguments = decode_call(frame)
    ctx = RemoteRunContext(call, arguments)
    try:
        try:
            value = execute(arguments, ctx)
            if inspect.isawaitable(value):
                value = asyncio.run(_awake(value))
            value = snapshot_value(call.name, value)
        finally:
            contexts = ctx._close()
    except Exception as exc:
        return encode_reply(None, fault_of(exc, traceback.format_exc(), dumps), contexts)
    return encode_reply(value, None, contexts)


class BodyActor:
    """A Ray actor holding one tool's body: its closure, module globals and anything the body
    keeps stay alive between calls on this actor (stateful tools). Calls run one at a time."""

    def __init__(self, execute: Callable[[Any, Any], Any]) -> None:
        from ray import cloudpickle

        self._execute = execute
        self._dumps = cloudpickle.dumps

    def call(self, frame: bytes) -> bytes:
        """Run one call of the body (see ``run_body``)."""
        return run_body(self._execute, frame, self._dumps)

    def ready(self) -> bool:
        """Answer once the actor is constructed (its body unpickled)."""
        return True
