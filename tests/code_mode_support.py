"""Helpers for the Code Mode tests.

- ``FakeRuntime(script)``: an in-process ``CodeRuntime`` whose scripted behaviour calls the
  binding functions directly. ``script(program)`` is an
  ``async`` function of a ``FakeProgram``; what it returns is the run's value (``UNSET`` = no
  result), or a ``CodeRunResult`` (``program.fail(kind, message)`` builds a failure); what it
  raises, the runtime raises. When the run signal aborts first, the run settles as
  ``abort`` / ``str(reason)`` (like the subprocess runtime killing its worker), unless
  ``honor_signal=False`` (a runtime that ignores the signal).
- ``FakeProgram``: ``call(name, *args)`` awaits a binding (a rejection raises
  ``ToolCallRejected``, the program's ``ToolCallError``), ``attempt`` returns the message of a
  rejection instead, ``fire`` submits without awaiting, ``print`` logs.
- ``echo_tool``: "echo" returns ``"<tool>:<value>"``; ``Gates``: gated tools whose bodies wait
  on a test-controlled gate and also release when their signal aborts.
- ``run_code(...)``: the ``ExecuteCall`` of a ``run_code`` call; ``code_system(...)``: a started
  system in a non-native mode (stop it with ``with``); ``value_of``/``failure_of``: the value of
  a success or the error of a failure.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from msgspec import UNSET

from dsh_tools import (
    AbortSignal,
    ExecuteCall,
    ToolDefinition,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)
from dsh_tools.codebridge import CodeRunFailure, CodeRunRequest, CodeRunResult
from dsh_tools.codebridge._bridge import ToolCallRejected

WAIT = 10.0
"""Upper bound for awaiting any gate (a hang fails the test instead of blocking it)."""

Script = Callable[["FakeProgram"], Awaitable[Any]]


async def _nothing(program: FakeProgram) -> Any:
    return UNSET


class FakeProgram:
    """What a scripted program sees: the request, its ``tools`` bindings, logs."""

    def __init__(self, request: CodeRunRequest) -> None:
        self.request = request
        namespace = request.bindings[0]
        self.functions = namespace.functions
        self.signal = request.signal
        self.logs: list[str] = []

    def print(self, *parts: Any) -> None:
        """Log one entry, like ``print`` in a real program."""
        self.logs.append(" ".join(str(p) for p in parts))

    async def call(self, name: str, *args: Any) -> Any:
        """``await tools.<name>(*args)``: the value, or ``ToolCallRejected`` raised."""
        return await self.functions[name](*args)

    async def attempt(self, name: str, *args: Any) -> str:
        """Await a call that must be rejected; return the rejection's message."""
        try:
            value = await self.call(name, *args)
        except ToolCallRejected as exc:
            return str(exc)
        raise AssertionError(f"{name} was not rejected; it returned {value!r}")

    async def fire(self, name: str, *args: Any) -> asyncio.Task[Any]:
        """Call a binding without awaiting its outcome; returns once the call is submitted."""
        task = asyncio.ensure_future(self.call(name, *args))
        await asyncio.sleep(0)  # the task's first step submits the call
        return task

    def fail(self, kind: str, message: str) -> CodeRunResult:
        """A failed run carrying the logs so far."""
        return CodeRunResult(list(self.logs), error=CodeRunFailure(kind, message))


class FakeRuntime:
    """An in-process ``CodeRuntime`` running ``script``; records every request."""

    def __init__(
        self,
        script: Script = _nothing,
        *,
        language: str = "python",
        honor_signal: bool = True,
    ) -> None:
        self.script = script
        self._language = language
        self.honor_signal = honor_signal
        self.requests: list[CodeRunRequest] = []

    @property
    def language(self) -> str:
        return self._language

    @property
    def isolation(self) -> str:
        return "in-process"

    @property
    def runs(self) -> int:
        """How many times ``run`` was called."""
        return len(self.requests)

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        self.requests.append(request)
        program = FakeProgram(request)
        task = asyncio.ensure_future(self.script(program))
        signal = request.signal
        if self.honor_signal and signal is not None:
            aborted = asyncio.ensure_future(_reason_of(signal))
            await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                return program.fail("abort", str(aborted.result()))
            aborted.cancel()
        outcome = await task
        if isinstance(outcome, CodeRunResult):
            return outcome
        return CodeRunResult(list(program.logs), value=outcome)

    async def dispose(self) -> None:
        return None


async def _reason_of(signal: AbortSignal) -> Any:
    return await signal


# --- tools -----------------------------------------------------------------------------------


def _text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def echo_tool(
    name: str = "echo",
    *,
    safe: bool = False,
    seen: list[Any] | None = None,
    description: str | None = None,
) -> ToolDefinition:
    """A tool returning ``"<name>:<value>"``; ``seen`` records the arguments it received."""

    def body(args: Any, ctx: Any) -> str:
        if seen is not None:
            seen.append(args)
        return f"{name}:{args['value']}"

    return define_tool(
        name=name,
        description=description if description is not None else f"Echo through {name}.",
        parameters={"value": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: _text(value)),
        execute=body,
        is_concurrency_safe=(lambda args: True) if safe else None,
    )


async def first_of(event: asyncio.Event, signal: AbortSignal) -> None:
    """Wait until ``event`` is set or ``signal`` aborts."""
    waits = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(_reason_of(signal))}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()


class Gates:
    """Gated tools: each body waits for ``release(value)`` or its signal's abort.

    ``log`` holds ``enter <value>`` / ``exit <value>`` in order, ``started`` the values whose
    bodies ran, ``aborted`` those that observed their signal abort; ``live``/``peak`` count
    concurrent bodies.
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.started: list[str] = []
        self.aborted: list[str] = []
        self.live = 0
        self.peak = 0
        self._release: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._entered: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._exited: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def tool(self, name: str, *, safe: bool = True) -> ToolDefinition:
        """A gated tool returning ``"<name>:<value>"`` once released."""

        async def body(args: Any, ctx: Any) -> str:
            value = args["value"]
            self.started.append(value)
            self.log.append(f"enter {value}")
            self.live += 1
            self.peak = max(self.peak, self.live)
            self._entered[value].set()
            try:
                await first_of(self._release[value], ctx.signal)
                if ctx.signal.aborted:
                    self.aborted.append(value)
                return f"{name}:{value}"
            finally:
                self.live -= 1
                self.log.append(f"exit {value}")
                self._exited[value].set()

        return define_tool(
            name=name,
            description=f"Gated {name}.",
            parameters={"value": {"type": "string", "required": True}},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: _text(value)),
            execute=body,
            is_concurrency_safe=(lambda args: True) if safe else None,
        )

    def release(self, *values: str) -> None:
        """Open the gates of ``values``."""
        for value in values:
            self._release[value].set()

    async def entered(self, value: str) -> None:
        """Wait until the body for ``value`` is running."""
        await asyncio.wait_for(self._entered[value].wait(), WAIT)

    async def exited(self, value: str) -> None:
        """Wait until the body for ``value`` has returned."""
        await asyncio.wait_for(self._exited[value].wait(), WAIT)

    def is_entered(self, value: str) -> bool:
        """Whether the body for ``value`` has started."""
        return self._entered[value].is_set()


# --- calls and systems -----------------------------------------------------------------------


def run_code(
    code: str = "return 1",
    description: str = "Run the test program",
    *,
    call_id: str = "call-1",
    agent: str | None = "A",
    signal: AbortSignal | None = None,
) -> ExecuteCall:
    """The ``ExecuteCall`` of one ``run_code`` call."""
    return ExecuteCall(
        call_id=call_id,
        name="run_code",
        arguments={"code": code, "description": description},
        signal=signal,  # type: ignore[arg-type]
        agent=agent,
    )


def code_system(
    runtime: Any = None,
    *,
    mode: str = "both",
    tools: Iterable[ToolDefinition] = (),
    **config: Any,
) -> ToolSystem:
    """A started system in ``mode`` with ``runtime`` (a ``FakeRuntime`` by default) and
    ``tools`` registered globally."""
    system = ToolSystem.start(
        ToolsConfig(mode=mode, **config),
        code_runtime=runtime if runtime is not None else FakeRuntime(),
    )
    for definition in tools:
        system.tools.register(definition)
    return system


def dispatch_events(system: ToolSystem, kind: str = "tool/code-dispatch") -> list[dict[str, Any]]:
    """The data of every ``kind`` event, as plain dicts, in log order."""
    return [dict(e.data) for e in system.session.events if e.type == kind]


def value_of(result: ToolExecutionResult) -> Any:
    """The value of a success (fails the test, showing the failure, otherwise)."""
    assert isinstance(result, ToolExecutionSuccess), result.to_dict()
    return result.value


def failure_of(result: ToolExecutionResult) -> ToolFailure:
    """The error of a failure (fails the test, showing the success, otherwise)."""
    assert isinstance(result, ToolExecutionFailure), result.to_dict()
    return result.error


def texts(content: Iterable[Any]) -> list[str]:
    """The texts of content blocks."""
    return [block["text"] for block in content]


async def wait_for(awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable``, bounded by ``WAIT`` seconds."""
    return await asyncio.wait_for(awaitable, WAIT)
