"""The node side of ``RayCodeRuntime``: an async Ray actor that owns a real code runtime.

The actor builds the runtime with the factory it was given (by default the shipped subprocess
runtime, so its process isolation and budgets hold on the node) and runs programs on it. A
program's binding calls do not run here: each becomes a ``CallEvent`` that the harness collects
with ``events`` and answers with ``resolve``, so every tool call goes through the harness's
pipeline. So does its ``help()`` (a ``HelpEvent``), which the harness's describer answers.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET

from ..actors import AbortController
from ..registry import snapshot_json
from ._code_wire import CallEvent, DoneEvent, HelpEvent, MisuseEvent, NamespaceSpec

__all__ = ["EVENTS_GROUP", "EVENTS_SLOTS", "CodeRunHost"]

_encoder = msgspec.json.Encoder()

EVENTS_GROUP = "events"
"""The Ray concurrency group the harness sends ``events`` in. Each live run keeps one such
long poll waiting on the node; in the actor's default group (``max_concurrency`` slots shared
by every call) enough of them would take every slot, and the node would answer nothing else,
its signs of life (``ready``), new runs and binding answers included."""
EVENTS_SLOTS = 10_000
"""How many ``events`` polls the node serves at once: a waiting poll costs only a coroutine,
and one that waits for a slot holds back its run's events."""


class _BindingFailed(Exception):
    """A binding call the harness answered with a failure; the text is the harness's."""


class _NodeRun:
    __slots__ = ("controller", "done", "dropped", "numbers", "pending", "queue", "ready", "task")

    def __init__(self) -> None:
        self.controller = AbortController()
        self.dropped = False  # nobody will collect its events: forget it once it settles
        self.queue: list[Any] = []
        self.ready = asyncio.Event()
        self.pending: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self.numbers = itertools.count(1)
        self.done = False
        self.task: asyncio.Task[None] | None = None

    def push(self, event: Any) -> None:
        self.queue.append(event)
        self.ready.set()

    async def ask(self, event: Callable[[int], Any]) -> Any:
        """Send the harness ``event(number)`` and wait for its answer as call ``number``."""
        number = next(self.numbers)
        answer: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self.pending[number] = answer
        self.push(event(number))
        try:
            ok, payload = await answer
        finally:
            self.pending.pop(number, None)
        if not ok:
            raise _BindingFailed(payload)
        return payload

    def binding(self, global_name: str, member: str) -> Callable[[Any], Any]:
        async def call_in_harness(value: Any) -> Any:
            raw = msgspec.Raw(_encoder.encode(value))
            return await self.ask(lambda number: CallEvent(number, global_name, member, raw))

        return call_in_harness

    def describer(self, global_name: str) -> Callable[[str | None], Any]:
        """The namespace's ``describe`` here: the describer is the harness's, asked on the
        run's event channel only when the program calls ``help()``."""

        def describe_in_harness(name: str | None) -> Any:
            return self.ask(lambda number: HelpEvent(number, global_name, name))

        return describe_in_harness


class CodeRunHost:
    """Runs programs on a code runtime built on this node (see the module docstring)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        runtime = factory()
        if not all(callable(getattr(runtime, method, None)) for method in ("run", "dispose")):
            # Said here, where the actor is made: each run would fail on a missing method.
            raise TypeError(f"runtime_factory returned {type(runtime).__name__}, not a CodeRuntime")
        self._runtime = runtime
        self._runs: dict[str, _NodeRun] = {}
        # The loop of the actor's default group, where the runs live (see ``events``).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, run_id: str, program: str, namespaces: list[NamespaceSpec]) -> None:
        """Start one run; its events are collected with ``events(run_id)``."""
        from ..codebridge import BindingNamespace, CodeRunRequest, ErrorClassSpec

        self._loop = asyncio.get_running_loop()
        # ``drop`` may arrive first (the harness's task was cancelled as it started the run):
        # the run then starts aborted, settles at once and is forgotten.
        run = self._runs.setdefault(run_id, _NodeRun())
        bindings = [
            BindingNamespace(
                spec.global_name,
                {member: run.binding(spec.global_name, member) for member in spec.members},
                None if spec.error_class is None else ErrorClassSpec(*spec.error_class),
                describe=run.describer(spec.global_name) if spec.described else None,
            )
            for spec in namespaces
        ]
        request = CodeRunRequest(program, bindings, run.controller.signal)
        run.task = asyncio.ensure_future(self._settle(run_id, run, request))

    async def _settle(self, run_id: str, run: _NodeRun, request: Any) -> None:
        try:
            await self._settle_run(run, request)
        finally:
            if run.dropped:
                self._runs.pop(run_id, None)

    async def _settle_run(self, run: _NodeRun, request: Any) -> None:
        try:
            result = await self._runtime.run(request)
        except Exception as exc:
            run.push(MisuseEvent(type(exc).__name__, str(exc)))
            return
        error = result.error
        has_value = result.value is not UNSET
        run.push(
            DoneEvent(
                logs=list(result.logs),
                has_value=has_value,
                value=msgspec.Raw(_encoder.encode(result.value if has_value else None)),
                error_kind=None if error is None else error.kind,
                error_message=None if error is None else error.message,
            )
        )

    async def events(self, run_id: str) -> bytes:
        """The run's next events (waits for at least one); the last one settles the run.

        Sent in its own concurrency group (``EVENTS_GROUP``), which Ray serves on a loop and
        thread of its own: the run's state is read on the default group's loop, where ``start``
        put the run, and this call only waits for that."""
        home = self._loop
        if home is None or home is asyncio.get_running_loop():
            return await self._next_events(run_id)
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._next_events(run_id), home)
        )

    async def _next_events(self, run_id: str) -> bytes:
        run = self._runs[run_id]
        await run.ready.wait()
        events, run.queue = run.queue, []
        run.ready.clear()
        if any(isinstance(event, DoneEvent | MisuseEvent) for event in events):  # settled
            self._runs.pop(run_id, None)
        return _encoder.encode(events)

    async def resolve(self, run_id: str, number: int, ok: bool, payload: bytes) -> None:
        """Answer binding call ``number``: its value, or the failure text (JSON)."""
        run = self._runs.get(run_id)
        answer = None if run is None else run.pending.get(number)
        if answer is not None and not answer.done():
            value = msgspec.json.decode(payload)
            answer.set_result((ok, snapshot_json(value) if ok else value))

    async def abort(self, run_id: str, reason: str) -> None:
        """Abort the run (the runtime settles it as ``abort`` with ``reason``)."""
        run = self._runs.get(run_id)
        if run is not None:
            run.controller.abort(reason)

    async def drop(self, run_id: str, reason: str, started: bool) -> None:
        """Abort the run and forget it once it settles: the harness stopped waiting for it
        (its task was cancelled). ``started``: ``start`` had returned there; otherwise it
        may still be on its way, and the run then starts aborted."""
        run = self._runs.get(run_id)
        if run is None:
            if started:
                return  # it has ended and its events were collected
            run = self._runs[run_id] = _NodeRun()
        run.dropped = True
        run.controller.abort(reason)
        if run.task is not None and run.task.done():
            self._runs.pop(run_id, None)

    async def dispose(self) -> None:
        """Dispose of the node's runtime (its live runs settle, its processes are killed)."""
        await self._runtime.dispose()

    async def ready(self) -> bool:
        """Answer once the runtime is built."""
        return True
