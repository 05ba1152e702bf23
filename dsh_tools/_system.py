"""``ToolSystem``: the composition root that starts, wires and stops the actors.

It is the only module that imports every layer. It owns:

- the ``RegistryActor`` (tables and snapshots; it also remembers what the global handle, each
  plugin and each agent scope registered, keyed by owner, so that a scope costs no thread);
- the system event loop thread (batches, code runs and ``ref.ask`` calls run there) and the
  worker threads that run plain-function bodies off that loop;
- the front actor ``ref`` that answers ``ExecuteCall`` / ``ExecuteBatch`` messages;
- the session log and the approval seam.

It builds each typed part and passes it explicitly: the loop thread (``_system_loop``), the
front actor (``_front``), owner handles (``_handles``) and the Code Mode wiring (``_code_mode``).

It stays one module past 400 lines because it is one thing, the public face of a running
system: its lifecycle, handles and four execute entry points all share the stopping flag, the
lock and the parts built here, and each would need them all back if split out.

``execute`` drives the pipeline in the caller's thread, with plain-function bodies inline and no
event loop until something on the path needs one (then on a private per-thread loop): no
thread hop and no loop on the hot path (either costs more than the whole pipeline).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pykka

from ._code_mode import install_code_mode
from ._front import FrontActor, FrontRef
from ._handles import AgentScope, PluginHandle, check_closer, take_closer
from ._system_loop import SystemLoop
from .actors import (
    AbortController,
    BatchOutcome,
    ExecuteBatch,
    ExecuteCall,
    ToolExecutionResult,
)
from .actors._agent_key import check_agent_key
from .actors._attached import Attached
from .actors._config import ToolsConfig
from .actors._logging import get_logger
from .actors._protocol import StopRegistry
from .actors._timeouts import checked_timeout
from .codebridge._assembly import AssembledPrompt, PromptAssembler
from .codebridge._sandbox import CodeSandbox
from .codebridge._seam import DEFAULT, CodeRuntime, DefaultRuntime
from .pipeline import Pipeline, SessionLog, SpillPolicy, message_of
from .pipeline._approval import Approval, ApprovalCall, ApprovalFunction, as_approval
from .pipeline._core import BODY_WIND_DOWN_S
from .pipeline._loop import drive, driving, interrupts_deferred, isolated, running_loop
from .pipeline._pipeline import CANCELLED_REASON, INTERRUPTED_REASON, STOPPING_REASON
from .pipeline._pool import BatchRunner
from .pipeline._workers import BodyThreads
from .registry import RegistryActor, SnapshotCell, ToolsHandle
from .registry._snapshot import STOPPED_TEXT

__all__ = [
    "ABANDONED_SETTLE_S",
    "STOP_GRACE_S",
    "AgentScope",
    "FrontRef",
    "PluginHandle",
    "ToolSystem",
]

_log = get_logger("dsh_tools.system")

STOP_GRACE_S = 5.0
"""How long ``stop()`` waits for aborted calls to settle before it stops the actors."""
ABANDONED_SETTLE_S = 1.0
"""How long ``stop()`` then waits for the calls whose plain bodies it stopped waiting for."""
WORKER_EXIT_S = 2.0
"""How long ``stop()`` then waits, in all, for the worker threads to exit."""
RUNTIME_DISPOSAL_S = 10.0
"""How long ``stop()`` waits for the code runtime it owns to dispose of itself."""

# Systems not stopped yet: the interpreter stops them at exit, so a script that forgets
# stop() (or dies of an exception) still exits, and every call it started gets its result.
_running: weakref.WeakSet[ToolSystem] = weakref.WeakSet()


def _calls_named(batch: ExecuteBatch) -> str:
    """``2 calls ('c1', 'c2')``: which batch a message is about (its first call ids)."""
    ids = [call.call_id for call in batch.calls[:3]]
    more = ", ..." if len(batch.calls) > len(ids) else ""
    count = len(batch.calls)
    return f"{count} call{'' if count == 1 else 's'} ({', '.join(map(repr, ids))}{more})"


def _stop_running_systems() -> None:
    for system in list(_running):
        try:
            system.stop()
        except Exception as exc:  # exiting anyway: say why, stop the others
            _log.warning("stopping a tool system at exit failed", error=message_of(exc))


atexit.register(_stop_running_systems)


# Every system this process started, stopped or not: a child forked while one stops has
# its copy too.
_started: weakref.WeakSet[ToolSystem] = weakref.WeakSet()


def _forsake_started_systems() -> None:
    """In a child the host forked: none of a system's threads exist here, so the child's
    copies are stopped without stopping anything (the parent stops the system itself)."""
    for system in list(_started):
        system._forsake()
    _running.clear()


os.register_at_fork(after_in_child=_forsake_started_systems)


class ToolSystem:
    """A running tool system: registry, scopes, pipeline, pool, session log and front actor.

    Start one with ``ToolSystem.start(config)``; use it as a context manager or call
    ``stop()``, which stops every actor, thread and worker it started.
    """

    def __init__(
        self,
        config: ToolsConfig | None = None,
        *,
        approval: Approval | ApprovalFunction | None = None,
        code_runtime: CodeRuntime | DefaultRuntime | None = DEFAULT,
        session: SessionLog | None = None,
        code_sandbox: CodeSandbox | None = None,
    ) -> None:
        if config is None:
            config = ToolsConfig()
        if not isinstance(config, ToolsConfig):
            raise TypeError(f"config must be a ToolsConfig, got {type(config).__name__}")
        from ._code_mode import check_code_runtime, check_code_sandbox, check_runtime_settings

        check_code_runtime(code_runtime)
        check_code_sandbox(code_runtime, code_sandbox)  # before anything is started
        check_runtime_settings(config, code_runtime)
        self.config = config
        self.approval = approval  # normalized by the setter
        if session is not None and not isinstance(session, SessionLog):
            raise TypeError(f"session must be a SessionLog, got {type(session).__name__}")
        self.session = session if session is not None else SessionLog()
        self._stopped = False
        self._pid = os.getpid()  # the process whose threads run this system
        self._stop_done = threading.Event()  # set once the first stop() has ended
        self._finisher: threading.Thread | None = None  # the thread that ends it
        # A stop() that a KeyboardInterrupt cut short: the next stop() finishes it.
        self._cut_short = False
        self._stopping = AbortController()  # batches abort when it does
        # What stop() closes once the calls in flight settled (``on_stop``).
        self._on_stop: Attached[Callable[[], object]] = Attached()
        self._lock = threading.Lock()
        self._scopes: dict[str, AgentScope] = {}
        self._cell = SnapshotCell()
        self._assembler = PromptAssembler()
        self._registry = RegistryActor.start(config.mode, self._cell)
        self._system_loop = SystemLoop()
        self._loop = self._system_loop.loop
        self._submit = self._system_loop.submit
        self._background = self._system_loop.background
        self._call_on_loop = self._system_loop.call
        self._executor = BodyThreads("dsh-tools-body")
        self.pipeline = Pipeline(
            self._cell,
            session=self.session,
            executor=self._executor,
            approval=lambda: self._approval_call,
            background=self._background,
        )
        self._batches = BatchRunner(
            self.pipeline,
            max_parallel=config.max_parallel_tool_calls,
            stopping=self._stopping.signal,
            executor=self._executor,
        )
        self._owner_ids = itertools.count(1)
        self.tools = ToolsHandle(
            registry=self._registry,
            owner=0,
            cell=self._cell,
            agent=None,
            label="the global tools handle",
            background=self._background,
        )
        self.code_runtime: CodeRuntime | None = None
        self.dispatch_spill: SpillPolicy | None = None
        self._owns_runtime = install_code_mode(
            self, code_runtime, registry=self._registry, cell=self._cell, code_sandbox=code_sandbox
        )
        refs: list[FrontRef] = []
        FrontActor.start(self.pipeline, self._batches, self._submit, refs.append)
        self.ref: FrontRef = refs[0]
        _running.add(self)
        _started.add(self)

    @property
    def approval(self) -> Approval | None:
        """The approver ``Ask`` decisions are routed to (``None``: they are denied)."""
        return self._approval

    @approval.setter
    def approval(self, value: Approval | ApprovalFunction | None) -> None:
        approval = as_approval(value)
        # Checked now (at start), and the pipeline reuses what was learned at every Ask.
        self._approval_call = None if approval is None else ApprovalCall(approval)
        self._approval = approval

    @classmethod
    def start(
        cls,
        config: ToolsConfig | None = None,
        *,
        approval: Approval | ApprovalFunction | None = None,
        code_runtime: CodeRuntime | DefaultRuntime | None = DEFAULT,
        session: SessionLog | None = None,
        code_sandbox: CodeSandbox | None = None,
    ) -> ToolSystem:
        """Start a tool system. ``approval`` answers ``Ask`` decisions: an ``Approval`` (an
        object with a ``request`` method) or a function or ``async def`` taking the same
        keywords (``TypeError`` for anything else); ``code_runtime`` runs
        Code Mode programs (``DEFAULT``: the subprocess runtime; ``None``: none); ``session``
        is the log to record into (for example ``SessionLog(max_events=10_000)``);
        ``code_sandbox`` grants the default runtime's sandbox paths and environment."""
        return cls(
            config,
            approval=approval,
            code_runtime=code_runtime,
            session=session,
            code_sandbox=code_sandbox,
        )

    def assemble_prompt(self, agent: str | None = None) -> AssembledPrompt:
        """The prompt sections and tool schemas ``agent`` gets in this system's mode.

        Kept per registry snapshot: until the registry changes, a call reuses the last
        assembly. Its ``tools`` schemas are then read-only (``FrozenDict``, equal to and
        encoding like plain dicts; copy one to change it); the lists are fresh on every call.
        ``TypeError`` for an ``agent`` that is not a ``str`` or ``None``; ``RuntimeError`` once
        ``stop()`` was called (as the handles' writes), since no call of the prompt it would
        give could run.
        """
        if self._stopped:
            self._check_running()
        check_agent_key(agent)
        return self._assembler.assemble(
            self._cell.current,
            agent,
            runtime=self.code_runtime,
            tool_order=self.config.tool_order,
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> ToolSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether ``stop()`` has not been called."""
        return not self._stopped

    def stop(self) -> None:
        """Stop every actor, the event loop, the worker threads and any code runtime.

        Calls in flight are aborted first (reason ``"the tool system is stopping"``: their
        signals abort where the system owns them, async bodies are cancelled, batches stop
        starting calls) and given up to ``STOP_GRACE_S`` seconds to settle, so every started
        call records its one ``tool/result`` and its caller gets its result. A plain body
        still running on a worker thread after that is left to it: its call settles
        ``ABORTED`` without it (in a batch too). Calls submitted after ``stop()`` raise
        ``RuntimeError``. A stop that a ``KeyboardInterrupt`` cut short (a Ctrl-C while it
        waits) is finished by the next ``stop()``, or as the interpreter exits.
        """
        finishing: threading.Thread | None = None
        # Calls whose caller's loop closed under them never settle: nothing to wait for, nor
        # work of this system running on the thread that ran that loop.
        self.pipeline.abandon_stranded()
        ends_it = False
        try:
            # The marking too is in the ``try``: a Ctrl-C landing in it (or as it ends) left the
            # system stopped to its callers, not cut short, with its loop and threads running;
            # the next stop() waited some twenty seconds for a stop that never came, then left
            # them running.
            with self._lock:
                stopped_already = self._stopped
                # The first stop(), or one after a stop that an interruption cut short, which
                # left the loop, the threads, the template and the workers running.
                ends_it = not stopped_already or self._cut_short
                if ends_it:
                    self._stopped = True
                    self._cut_short = False
                    self._scopes.clear()
                    self._stop_done.clear()
                    if self._inside_own_work():
                        # Called from a hook or body of this system's own calls: those calls
                        # settle only once this returns, so the rest of the stop waits for them
                        # on a thread of its own (a later stop() from elsewhere waits for it).
                        finishing = threading.Thread(
                            target=self._finish_stop, name="dsh-tools-stop", daemon=True
                        )
                    self._finisher = finishing or threading.current_thread()
            if not ends_it:
                # A later stop(): it returns once the first has ended, unless it is called from
                # work that the first waits for, or by the first itself.
                if threading.current_thread() is not self._finisher and not self._inside_own_work():
                    self._stop_done.wait(
                        STOP_GRACE_S + ABANDONED_SETTLE_S + RUNTIME_DISPOSAL_S + WORKER_EXIT_S + 1
                    )
                return
            _running.discard(self)
            self._stopping.abort(STOPPING_REASON)
            self.pipeline.interrupt_all(STOPPING_REASON)
            if finishing is not None:
                finishing.start()
                return
        except BaseException:
            if ends_it:
                self._stop_cut_short()
            raise
        self._finish_stop()

    def _stop_cut_short(self) -> None:
        """An interruption ended this stop() before the system had stopped: the next stop()
        (the one at the interpreter's exit, if none comes sooner) finishes it."""
        # A second Ctrl-C while the first propagates must not leave this unrecorded.
        with interrupts_deferred():
            with self._lock:
                self._cut_short = True
            _running.add(self)
            self._stop_done.set()  # stop()s waiting for it return: none of them was to end it

    def _inside_own_work(self) -> bool:
        """Whether this thread runs work of this system's calls that is in flight: it is the
        system loop's, or a body thread's, or calls of the system are in flight on it."""
        current = threading.current_thread()
        if current is self._system_loop.thread or current in self._executor.threads():
            return True
        ident = current.ident
        return any(record.thread == ident for record in list(self.pipeline.live))

    def _finish_stop(self) -> None:
        """The rest of ``stop()``, once the calls in flight were aborted."""
        try:
            self._end_everything()
        except BaseException:
            self._stop_cut_short()
            raise
        self._stop_done.set()

    def _end_everything(self) -> None:
        in_flight = self._system_loop.pending_now()
        self._settle_in_flight(time.monotonic() + STOP_GRACE_S)
        if self.pipeline.abandon_bodies():
            # Plain bodies that ignored their signal through the grace are left to their
            # threads: their calls settle without them, a moment for that.
            # A hook chain that began waiting meanwhile on a call given up on (its post-execute
            # hook, once its body was given up) is given up in turn a moment after it began,
            # perhaps past that wait: its call gets the same moment to settle. A batch's calls
            # commit in order, so the next call's hook begins only once that one is given up:
            # each such give-up, as it begins, extends the wait again.
            deadline = time.monotonic() + ABANDONED_SETTLE_S
            while True:
                self._settle_in_flight(deadline)
                later = self.pipeline.hooks_given_up_at + ABANDONED_SETTLE_S
                if later <= deadline:
                    break
                deadline = later
        given_up = in_flight & self._system_loop.pending_now()
        while True:
            # One at a time, the last attached first, as disposers go: a stop cut short leaves
            # the rest attached, to the next stop() (a closer detached meanwhile is not run).
            with self._lock:
                close = take_closer(self._on_stop)
            if close is None:
                break
            try:
                close()
            except Exception as exc:
                _log.warning("closing a resource at stop() failed", error=message_of(exc))
        runtime = self.code_runtime
        if runtime is not None and self._owns_runtime:
            self._dispose_runtime(runtime)
        with contextlib.suppress(pykka.ActorDeadError):
            self._registry.ask(StopRegistry())
        self.ref.stop()
        self._registry.stop()
        current = threading.current_thread()
        # Calls that reached the loop since (an ask the front actor took before it stopped, a
        # call past execute()'s check as stop() began) were interrupted as they came in: they
        # settle before the loop ends, each with its one result; later ones are refused.
        self._system_loop.refuse_submissions()
        if current is not self._system_loop.thread:
            self._system_loop.wait_pending(time.monotonic() + ABANDONED_SETTLE_S, given_up)
        self._system_loop.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        # Idle worker threads exit as soon as they see the shutdown; a body that never returns
        # cannot be killed, so wait only briefly for them, all together.
        deadline = time.monotonic() + WORKER_EXIT_S
        for thread in self._executor.threads():
            if thread is not current:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _dispose_runtime(self, runtime: CodeRuntime) -> None:
        """Dispose the code runtime the system owns, waiting up to ``RUNTIME_DISPOSAL_S``. A
        run whose event loop does not move (a thread blocked for good while its run waits)
        would keep the disposal waiting for ever: it is then cancelled, which stops the
        runtime's pool and template anyway, and a second ``dispose()``, which waits only for
        that, sees them gone."""
        future = self._system_loop.submit(runtime.dispose())
        try:
            future.result(RUNTIME_DISPOSAL_S)
            return
        except concurrent.futures.TimeoutError:
            future.cancel()
        except Exception as exc:
            _log.warning("code runtime disposal failed", error=message_of(exc))
            return
        try:
            self._call_on_loop(runtime.dispose(), timeout=RUNTIME_DISPOSAL_S)
        except Exception as exc:
            _log.warning("code runtime disposal failed", error=message_of(exc))

    def _settle_in_flight(self, deadline: float) -> None:
        """Wait (until ``deadline``) for work on the system loop and for calls on other
        threads; never for work this very thread would have to run."""
        current = threading.get_ident()
        if current == self._system_loop.thread.ident:
            return
        self._system_loop.wait_pending(deadline)
        while time.monotonic() < deadline:
            others = [rec for rec in list(self.pipeline.live) if rec.thread != current]
            if not others:
                return
            time.sleep(0.005)

    def on_stop(self, close: Callable[[], object]) -> Callable[[], None]:
        """Have ``stop()`` call ``close()`` once the calls in flight have settled, before the
        system's loop and threads end: for resources whose life is the system's (an MCP
        plugin's server and connection, say). Closers run on the stopping thread, the last
        attached first; one that raises is logged and the rest still run. Returns the function
        that detaches ``close`` (when the resource is closed earlier by itself). ``TypeError``
        for a ``close`` that cannot be called without arguments."""
        check_closer("on_stop", close)
        with self._lock:  # stop() marks itself under this lock: no closer is missed
            self._check_running()
            return self._on_stop.attach(close)

    def _check_running(self) -> None:
        if self._stopped:
            if self._pid != os.getpid():
                raise RuntimeError(
                    f"the tool system runs in process {self._pid}, which forked this one after "
                    "starting it; start a new one here with ToolSystem.start()"
                )
            raise RuntimeError(STOPPED_TEXT)

    def _forsake(self) -> None:
        """This is a child forked from the system's process (``_forsake_started_systems``):
        mark it stopped, with fresh locks (one held by a thread of the parent at the fork
        would stay held here), so that using it raises and stopping it returns at once, and
        mark its actors dead, so that its handles raise instead of waiting for them."""
        self._lock = threading.Lock()
        self._stopped = True
        self._cut_short = False  # a stop the parent began is the parent's to finish
        self._finisher = None
        done = threading.Event()
        done.set()
        self._stop_done = done
        for ref in (self._registry, self.ref):
            ref.actor_stopped.set()

    # --- handles -------------------------------------------------------------------------------

    def plugin(self, name: str) -> PluginHandle:
        """A new owner handle for global registrations; ``close()`` disposes them (LIFO).
        ``TypeError`` for a ``name`` that is not a ``str``, ``ValueError`` for the empty one."""
        self._check_running()
        if type(name) is not str:
            # It names the plugin in every message about it (and an MCP server's logs).
            raise TypeError(f"plugin names are str, got {type(name).__name__}")
        if not name:  # a message about it would name nothing: plugin "" is closed
            raise ValueError("plugin names are non-empty str, got ''")
        return PluginHandle(name, self._owner_tools(f'plugin "{name}"', None))

    def agent(self, key: str) -> AgentScope:
        """The live scope of agent ``key`` (started on first use; fresh after ``close()``,
        once that close has disposed the old scope's registrations: while it runs, this waits
        for it, and it finishes one that a Ctrl-C cut short). ``RuntimeError`` rather than wait
        on a thread that runs an event loop (a hook's, an async tool's), which the close may
        need, or in one of that close's own closers."""
        self._check_running()
        check_agent_key(key, optional=False)
        while True:
            with self._lock:
                scope = self._scopes.get(key)
                if scope is None:
                    scope = AgentScope(
                        key,
                        self._owner_tools(f'agent scope "{key}"', key),
                        forget=self._forget_scope,
                        inject=self._inject,
                    )
                    self._scopes[key] = scope
                    return scope
                if not scope.closed:
                    return scope
            scope._await_disposal()  # it forgets itself once disposed
            self._check_running()  # stop() may have come meanwhile

    def _forget_scope(self, scope: AgentScope) -> None:
        with self._lock:
            if self._scopes.get(scope.key) is scope:
                del self._scopes[scope.key]

    def _owner_tools(self, label: str, agent: str | None) -> ToolsHandle:
        """The ToolsHandle writing through a fresh owner (which closing it disposes)."""
        return ToolsHandle(
            registry=self._registry,
            owner=next(self._owner_ids),  # itertools.count: one C call, atomic under the GIL
            cell=self._cell,
            agent=agent,
            label=label,
            background=self._background,
        )

    def _inject(self, agent: str, context: Any) -> None:
        self._batches.inject(agent, context)

    # --- execution -----------------------------------------------------------------------------

    def execute(self, call: ExecuteCall, timeout: float | None = None) -> ToolExecutionResult:
        """Run one call to completion in this thread and return its result.

        A plain-function body runs inline in this thread, unless an execute wrapper gave it a
        signal of its own (a deadline, say): it then runs on a worker thread, so that timers
        the wrapper set on this thread's loop can still fire while the body waits.

        With ``timeout``, the call runs on the system loop and ``TimeoutError`` is raised here
        if it has not finished in time (the call still finishes, with its one result and event);
        it is seconds above 0 and at most ``threading.TIMEOUT_MAX`` (else ``ValueError``, or
        ``TypeError`` for a non-number, before the call starts).
        Raises ``RuntimeError`` when called from a thread running an event loop: use
        ``await execute_async(call)`` there. The one exception is a plain body or hook that
        ``execute`` itself is running inline on this thread: its nested call runs on the system
        loop while this thread waits.
        """
        if self._stopped:
            self._check_running()
        if not isinstance(call, ExecuteCall):
            raise TypeError(f"execute() takes an ExecuteCall, got {type(call).__name__}")
        if timeout is not None:
            timeout = checked_timeout(timeout)
        loop = running_loop()
        nested = driving(loop)
        if not nested and loop is not None:
            raise RuntimeError(
                "ToolSystem.execute() cannot run inside a running event loop; "
                "use await system.execute_async(call)"
            )
        if timeout is not None or nested:
            # A plain body (or hook) that ``execute`` is running inline on this thread calls
            # back in: this thread is busy with the outer call, so the nested call runs on the
            # system loop while this thread waits for it.
            # A Ctrl-C while waiting cancels the call on the system loop, where it settles and
            # records its result, as a blocking batch's calls do.
            try:
                result: ToolExecutionResult = self._call_on_loop(
                    self.pipeline.run(call, inline=False, waited=True), timeout
                )
            except TimeoutError:
                raise TimeoutError(
                    f"call {call.call_id!r} did not finish within {timeout} s"
                ) from None
            return result
        try:
            out: ToolExecutionResult = drive(self.pipeline.run(call, inline=True, driven=True))
        except BaseException:
            # Interrupted before the call settled (a second Ctrl-C while it winds down): it is
            # finished and recorded without waiting any longer.
            with interrupts_deferred():
                self.pipeline.abandon_interrupted(threading.get_ident())
            raise
        return out

    async def execute_async(self, call: ExecuteCall) -> ToolExecutionResult:
        """Run one call on the caller's running loop (plain-function bodies on worker threads)."""
        self._check_running()
        if not isinstance(call, ExecuteCall):
            raise TypeError(f"execute_async() takes an ExecuteCall, got {type(call).__name__}")
        # In a copy of the caller's context, as a blocking execute() and a batch's calls run:
        # what the call's hooks set there (a tracing mark, say) never reaches the caller's task.
        result: ToolExecutionResult = await isolated(
            self.pipeline.run(call, inline=False, outer=asyncio.current_task()),
            contextvars.copy_context(),
        )
        return result

    def execute_batch(self, batch: ExecuteBatch, timeout: float | None = None) -> BatchOutcome:
        """Run one model turn's calls in the dispatcher pool; results in model order.

        With ``timeout`` (seconds, checked as ``execute``'s is), ``TimeoutError`` naming the
        batch is raised here if it has not finished in time; the batch is not aborted, and its
        calls still finish, each with its one result and event.
        A ``KeyboardInterrupt`` while waiting (Ctrl-C) aborts the batch (reason ``"the caller
        was interrupted"``; its calls still settle and record their results) and propagates."""
        self._check_running()
        if not isinstance(batch, ExecuteBatch):
            raise TypeError(f"execute_batch() takes an ExecuteBatch, got {type(batch).__name__}")
        timeout = checked_timeout(timeout)
        if threading.current_thread() is self._system_loop.thread:
            # A hook or an async tool of this system: the loop that would run the batch is
            # the one this call would block.
            raise RuntimeError(
                "execute_batch() cannot block the system loop, which runs this hook or async "
                "tool and would run the batch; use await system.execute_batch_async(batch)"
            )
        control = AbortController()
        try:
            outcome: BatchOutcome = self._call_on_loop(
                self._batches.run(batch, control),
                timeout,
                lambda _future: control.abort(INTERRUPTED_REASON),
            )
        except TimeoutError:
            raise TimeoutError(
                f"the batch of {_calls_named(batch)} did not finish within {timeout} s"
            ) from None
        return outcome

    async def execute_batch_async(self, batch: ExecuteBatch) -> BatchOutcome:
        """``execute_batch`` for callers on an event loop (the batch runs on the system loop).

        Cancelling the awaiting task aborts the batch (reason ``"the awaiting task was
        cancelled"``), waits for it to settle (every started call commits its result and
        event, the rest are ``ABORTED_BEFORE_DISPATCH``; an async body that watches its
        signal is cancelled after ``BODY_WIND_DOWN_S``, or when the task is cancelled again),
        then raises ``CancelledError``."""
        self._check_running()
        if not isinstance(batch, ExecuteBatch):
            raise TypeError(f"execute_batch() takes an ExecuteBatch, got {type(batch).__name__}")
        control = AbortController()
        forced = AbortController()
        future = self._submit(self._batches.run(batch, control, forced.signal))
        waiter = asyncio.wrap_future(future)
        try:
            outcome: BatchOutcome = await asyncio.shield(waiter)
            return outcome
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                raise
            control.abort(CANCELLED_REASON)
            # An async body that watches its signal settles its own way, as under
            # execute_async: for BODY_WIND_DOWN_S at most, or until this task is cancelled
            # again; then it is cancelled too.
            timer = asyncio.get_running_loop().call_later(
                BODY_WIND_DOWN_S, forced.abort, CANCELLED_REASON
            )
            try:
                while not waiter.done():
                    try:
                        await asyncio.shield(waiter)
                    except asyncio.CancelledError:
                        forced.abort(CANCELLED_REASON)
                    except Exception:
                        # The batch failed as it wound down (stop() gave it up and the loop
                        # ended under it): this task's cancellation is still what it raises.
                        pass
            finally:
                timer.cancel()
            raise
