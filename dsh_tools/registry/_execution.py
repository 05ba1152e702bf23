"""The per-call record and its public views.

One private ``CallRecord`` per call holds what the pipeline tracks (the caller's signal, whether
the body ran, deferred contexts, the captured finalizer, which results are canonical). Hooks
see read-only views of it: ``ToolExecution`` (pre/post hooks, guards, finalizers, observers),
``ToolRunContext`` (the body: adds ``defer_context``) and ``DispatchExecution`` (execute wrappers:
``signal`` is settable, to another ``AbortSignal``, until the call is sealed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..actors import AbortController, AbortSignal, ExecutionToken, ToolExecutionResult
from ._lossless import LosslessJsonError
from ._lossless_copy import snapshot_json

if TYPE_CHECKING:  # the snapshot's types, for annotations only
    from ._snapshot import HookSet, RegistrySnapshot, SnapshotCell, ToolEntry

__all__ = [
    "Announced",
    "CallRecord",
    "DispatchExecution",
    "ToolExecution",
    "ToolRunContext",
    "is_call_snapshot",
]


class Announced(Protocol):
    """What a tool's announcer (``Pipeline.announcers``) took as a call began (a pre-forked
    worker), given back once the call has ended."""

    def __call__(self) -> None:
        """Give back what is still held (nothing if the call's run claimed it). Never raises."""

    def holds(self) -> bool:
        """Whether giving back may still have anything to do: ``False`` once nothing is held
        for good (the call's run claimed it), so that the call's end skips the give-back and
        the Ctrl-C guard around it; ``True`` when unsure."""


class CallRecord:
    """Private per-call state; never handed to user code."""

    __slots__ = (
        "abandoned",
        "agent",
        "announced",
        "approval_task",
        "arguments",
        "body_invoked",
        "body_loop",
        "body_signal",
        "body_task",
        "body_wait",
        "call_id",
        "cancel_base",
        "cancel_sent",
        "canonical",
        "cell",
        "contexts_closed",
        "deferred",
        "dispatch_signal",
        "entry",
        "exec_view",
        "finalizer",
        "hook_task",
        "hooks",
        "hooks_waiting",
        "hurried",
        "inline",
        "late_give_up",
        "logged_call",
        "name",
        "outer",
        "outer_cancel_args",
        "outer_cancelled",
        "own",
        "own_cancels",
        "parent",
        "passed",
        "reraise",
        "sealed",
        "signal",
        "signal_read",
        "snapshot",
        "stage",
        "stop_reason",
        "thread",
        "token",
    )

    def __init__(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        signal: AbortSignal,
        agent: str | None,
        parent: ExecutionToken | None,
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.signal = signal
        self.agent = agent
        self.parent = parent
        self.token = ExecutionToken()
        self.body_invoked = False
        self.deferred: list[Any] | None = None
        self.contexts_closed = False
        # The tool's ``finalize_content`` (``types.ContentFinalizer``), captured at the start
        self.finalizer: Callable[[ToolExecution, ToolExecutionResult], Any] | None = None
        self.entry: ToolEntry | None = None
        self.canonical: list[ToolExecutionResult] = []
        self.sealed = False
        self.dispatch_signal: AbortSignal = signal
        self.exec_view: ToolExecution | None = None
        self.cell: SnapshotCell | None = None  # for wrappers that look up the definition
        # The snapshot current when the call began, and the hooks and entry it had for the
        # call (``entry`` above): a stage that finds it still current reads them here rather
        # than asking it again (it is immutable, and answers the same).
        self.snapshot: RegistrySnapshot | None = None
        self.hooks: HookSet | None = None
        # Cancellation and fault bookkeeping (see Pipeline.interrupt and Pipeline._fault).
        self.stage = "prepare"  # which user code runs now, for fault logs
        self.stop_reason: Any = None  # set when the pipeline itself aborted the call
        self.own: AbortController | None = None  # the pipeline's own, for this call's signal
        self.body_task: asyncio.Task[Any] | None = None  # the async body's task while it runs
        self.approval_task: asyncio.Future[Any] | None = None  # the approver's, while awaited
        self.body_loop: asyncio.AbstractEventLoop | None = None
        self.body_signal: AbortSignal | None = None
        self.signal_read = False  # the body asked its context for its signal
        self.cancel_sent = False  # the pipeline cancelled the body's task
        # The task the call's hook stages (pre-execute, execute wrappers, post-execute) run
        # in, once one does, and whether it awaits a hook chain of the call now.
        self.hook_task: asyncio.Task[Any] | None = None
        self.hooks_waiting = False
        # Interrupted past any wind-down (stop()'s grace over, a batch's awaiting task
        # cancelled again): a hook that starts waiting from then on is cancelled at once.
        self.hurried = False
        # Set (and ``hurried`` with it) once stop()'s grace is over: what has such a hook
        # given up a while later should it go on (``PipelineCore.hooks_overdue``), called with
        # the task it waits in and the delay.
        self.late_give_up: Callable[[asyncio.Task[Any], float], object] | None = None
        # The task awaiting the call's plain body on a worker thread, while it does.
        self.body_wait: asyncio.Task[Any] | None = None
        # Cancellations the pipeline sent ``hook_task`` or ``body_wait`` (an interrupt, a
        # stop() past its grace) and has not taken back (``take_back_cancels``).
        self.own_cancels = 0
        # The awaiting task (execute_async), whose cancellation counts
        self.outer: asyncio.Task[Any] | None = None
        self.cancel_base = 0
        self.outer_cancelled = False
        # What the awaiting task's cancellation said (``task.cancel(msg)``), given back to it.
        self.outer_cancel_args: tuple[Any, ...] = ()
        # The base's answer, when the caller's cancellation was raised into the execute
        # wrapper waiting for it (``pipeline._dispatch._passed``).
        self.passed: Any = None
        self.inline = False  # running on the caller's own thread (blocking execute)
        # Its blocking caller stopped waiting and it was finished without it: nothing it
        # settles with later is recorded or raised.
        self.abandoned = False
        # The data of the call's tool/call event, set just before it is appended: which event
        # is this call's when an interruption cut its recording short (``Pipeline.run``).
        self.logged_call: Any = None
        self.reraise: BaseException | None = None
        self.thread = 0  # the thread ``run`` runs on
        # What the tool's announcer (``Pipeline.announcers``) returned: called once the call
        # has ended.
        self.announced: Announced | None = None

    def hooks_under(self, current: RegistrySnapshot) -> HookSet:
        """The hooks that apply to the call under ``current``, the registry as it stands: the
        ones it began with while that snapshot is still current, else ``current``'s own."""
        hooks = self.hooks
        if hooks is not None and current is self.snapshot:
            return hooks
        return current.hooks_of(self.agent)

    def view(self) -> ToolExecution:
        """The read-only view shared by hooks, guards, finalizers and observers."""
        view = self.exec_view
        if view is None:
            view = self.exec_view = ToolExecution(self)
        return view

    def is_canonical(self, result: Any) -> bool:
        """Whether ``result`` is one the base produced for this very execution."""
        for own in self.canonical:  # noqa: SIM110 (a loop costs less than any() here)
            if own is result:
                return True
        return False


class _ReadOnly:
    __slots__ = ("_record",)

    _record: CallRecord

    def __init__(self, record: CallRecord) -> None:
        object.__setattr__(self, "_record", record)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} cannot be deleted")

    @property
    def token(self) -> ExecutionToken:
        """The execution's opaque identity."""
        return self._record.token

    @property
    def call_id(self) -> str:
        """The call id the harness gave."""
        return self._record.call_id

    @property
    def name(self) -> str:
        """The tool name called."""
        return self._record.name

    @property
    def arguments(self) -> Any:
        """The frozen argument snapshot (``UNSET`` when it could not be taken)."""
        return self._record.arguments

    @property
    def agent(self) -> str | None:
        """The calling agent's key, or None."""
        return self._record.agent

    @property
    def parent(self) -> ExecutionToken | None:
        """The token of the enclosing execution (a Code Mode run), or None."""
        return self._record.parent

    @property
    def sealed(self) -> bool:
        """Whether the call has finished (its result was published)."""
        return self._record.sealed

    def __repr__(self) -> str:
        r = self._record
        return f"<{type(self).__name__} {r.name!r} call_id={r.call_id!r} token={r.token.id}>"


class ToolExecution(_ReadOnly):
    """What pre/post hooks, guards, finalizers and observers see of a call."""

    __slots__ = ()

    @property
    def signal(self) -> AbortSignal:
        """The caller's signal."""
        return self._record.signal


class ToolRunContext(_ReadOnly):
    """What a tool body sees: the fused signal and ``defer_context``."""

    __slots__ = ("_signal",)

    def __init__(self, record: CallRecord, signal: AbortSignal) -> None:
        object.__setattr__(self, "_record", record)  # not super().__init__: one call less
        object.__setattr__(self, "_signal", signal)

    @property
    def signal(self) -> AbortSignal:
        """The signal the body must observe (the caller's, fused with any wrapper's).

        A body that reads it is trusted to observe it: when it aborts, the body's task is not
        cancelled (the body settles its own way). A body that never reads it is cancelled."""
        self._record.signal_read = True
        signal: AbortSignal = object.__getattribute__(self, "_signal")
        return signal

    def defer_context(self, context: Any) -> None:
        """Attach a hook context to this call's result (in call order, before wrapper and
        post-execute contexts). Ignored once the dispatch has settled."""
        record = self._record
        if record.contexts_closed:
            return
        if record.deferred is None:
            record.deferred = []
        # Freeze now, so a body that changes the dict afterwards cannot change what is
        # delivered; a context that is not lossless JSON is kept as given and fails the
        # result's materialization (the contract's outcome for it).
        with contextlib.suppress(LosslessJsonError, RecursionError):
            context = snapshot_json(context)
        record.deferred.append(context)


def is_call_snapshot(args: object, run_ctx: object) -> bool:
    """Whether a body called with ``(args, run_ctx)`` got its call's own arguments from the
    pipeline: a ``snapshot_json`` of them, so lossless JSON throughout (a direct call of a
    definition's ``execute`` with anything else is checked in full). Hooks see the same
    snapshot; one that writes into it past the freeze (``dict.__setitem__``) is trusted too,
    like any other harness code."""
    return (
        type(run_ctx) is ToolRunContext
        and object.__getattribute__(run_ctx, "_record").arguments is args
    )


class DispatchExecution(_ReadOnly):
    """What execute wrappers see: like ``ToolExecution`` but ``signal`` may be replaced."""

    __slots__ = ()

    @property
    def signal(self) -> AbortSignal:
        """The signal the body will see (fused with the caller's); settable by wrappers."""
        return self._record.dispatch_signal

    @signal.setter
    def signal(self, value: AbortSignal) -> None:
        if self._record.sealed:
            raise AttributeError("the execution is sealed; its signal can no longer be replaced")
        if not isinstance(value, AbortSignal):
            raise TypeError(f"exec.signal must be an AbortSignal, got {type(value).__name__}")
        self._record.dispatch_signal = value

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "signal":
            DispatchExecution.signal.fset(self, value)  # type: ignore[attr-defined]
            return
        super().__setattr__(name, value)

    @property
    def definition(self) -> Any:
        """The live visible definition for this call's name and agent (None if gone)."""
        record = self._record
        cell = record.cell
        entry = cell.current.lookup(record.name, record.agent) if cell is not None else None
        return entry.definition if entry is not None else None
