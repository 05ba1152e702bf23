"""``ToolsHandle``: the registration and read API of one owner (global, plugin or agent scope).

Writes are one ask each to the registry actor, tagged with their owner (so that closing the
owner can undo them), and are answered before the call returns; reads come straight from the
published snapshot, with no actor round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, Literal, TypeVar, overload

import pykka

from ..actors import ExecuteCall, ToolCall, message_of
from ..actors._agent_key import check_agent_key
from ..actors._config import finite_number
from ..actors._logging import get_logger
from ..actors._protocol import (
    AddGuard,
    AddHook,
    AddRestriction,
    AddSection,
    CloseOwner,
    MutationReply,
    OwnerMutation,
    RegisterTool,
    RegisterTools,
    RemoveEntries,
    RemoveEntry,
    ReplaceTool,
)
from ._definition import ToolDefinition, accepts_positional
from ._hooks import (
    AssembleHook,
    ChangeObserver,
    CodeDispatchLogHook,
    ExecuteWrapper,
    Guard,
    PostExecuteHook,
    PreExecuteHook,
    ResultObserver,
)
from ._json_text import ArgumentsTextError, read_arguments
from ._lossless_copy import snapshot_json
from ._registry_actor import RegistryActor
from ._snapshot import STOPPED_TEXT, SnapshotCell, ToolEntry
from ._tool_contract import _check_text, check_registration, classify, project_schema

__all__ = ["Disposer", "ExecutionMode", "ToolsHandle", "listener_of"]

ExecutionMode = Literal["parallel", "exclusive"]

_Mutation = RegisterTool | ReplaceTool | AddRestriction | AddGuard | AddHook | AddSection
"""What a handle asks the registry to apply for its owner."""

_log = get_logger("dsh_tools.registry")


class Disposer:
    """Undoes one registration when called; calling it again does nothing."""

    __slots__ = ("_done", "_handle", "_key", "_lock")

    def __init__(self, handle: ToolsHandle, key: int) -> None:
        self._handle = handle
        self._key = key
        self._done = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        if self._claim():
            self._handle._remove(self._key)

    def _claim(self) -> bool:
        """Mark this disposer run; whether it had not run before (so its caller removes)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True

    @property
    def disposed(self) -> bool:
        """Whether this disposer has run."""
        return self._done


def register_together(
    handle: ToolsHandle, definitions: Sequence[ToolDefinition]
) -> list[Disposer | Exception]:
    """Register ``definitions`` through ``handle`` as one change: the registry publishes once
    and the ``change`` observers are told once. Each definition's outcome, in order, is its
    disposer or the error that kept it out (what ``register`` would raise: a name taken, a
    definition refused). An observer that raises undoes them all (one more change) and the
    exception reaches the caller, as with ``register``."""
    refused: dict[int, Exception] = {}
    entries: list[tuple[ToolDefinition, bool]] = []
    for index, definition in enumerate(definitions):
        try:
            entries.append((definition, handle._checked("register", definition)))
        except Exception as exc:
            refused[index] = exc
    sent: list[int | str] = (
        handle._send(RegisterTools(tuple(entries), handle._agent)) if entries else []
    )
    added: list[Disposer] = []
    outcomes: list[Disposer | Exception] = []
    replies = iter(sent)
    for index in range(len(definitions)):
        if index in refused:
            outcomes.append(refused[index])
            continue
        reply = next(replies)
        if isinstance(reply, str):
            outcomes.append(ValueError(reply))
        else:
            added.append(Disposer(handle, reply))
            outcomes.append(added[-1])
    if added:
        try:
            handle._notify()
        except BaseException:
            dispose_together(added[::-1])
            raise
    return outcomes


def dispose_together(disposers: Sequence[Disposer]) -> None:
    """Undo the registrations of ``disposers`` (of one system), in their order, as one change:
    the registry publishes once, so no reader sees some of them gone and others not, and the
    ``change`` observers are told once. Disposers that ran already are skipped."""
    claimed = [disposer for disposer in disposers if disposer._claim()]
    if claimed:
        claimed[0]._handle._remove_all(tuple(disposer._key for disposer in claimed))


class ToolsHandle:
    """Register tools, masks, guards and hooks through one owner; read the views it sees.

    On an agent scope's handle, ``get``/``schemas`` read that agent's view and everything
    registered is scoped to that agent. ``background(awaitable, label, fields)`` awaits what a
    ``change`` observer returns and logs its failure as a warning (without it such an
    awaitable is closed and a warning says so).
    """

    def __init__(
        self,
        *,
        registry: pykka.ActorRef[RegistryActor],
        owner: int,
        cell: SnapshotCell,
        agent: str | None,
        label: str,
        background: Callable[[Awaitable[Any], str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._registry = registry
        self._owner = owner
        self._background = background
        self._cell = cell
        self._agent = agent
        self._label = label
        self._closed = False
        # Held while a mutation is sent and while the close is: every mutation of this owner
        # reaches the registry before its close, or is refused here, so the registry need not
        # remember closed owners.
        self._order = threading.Lock()

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def agent(self) -> str | None:
        """The agent this handle writes for, or None for the global layer."""
        return self._agent

    def _mutate(self, mutation: _Mutation) -> MutationReply:
        return self._send(mutation)

    @overload
    def _send(self, mutation: _Mutation) -> MutationReply: ...
    @overload
    def _send(self, mutation: RegisterTools) -> list[int | str]: ...
    def _send(self, mutation: _Mutation | RegisterTools) -> MutationReply | list[int | str]:
        try:
            with self._order:
                if self._closed:
                    raise RuntimeError(self._closed_text())
                pending = self._registry.ask(
                    OwnerMutation(mutation, self._owner, self._label), block=False
                )
            reply: MutationReply | list[int | str] = pending.get()
            return reply
        except pykka.ActorDeadError:
            raise RuntimeError(self._closed_text()) from None

    def _closed_text(self) -> str:
        """Why this handle takes no more changes: the system it belongs to stopped (the
        registry's last snapshot says so), or its owner was closed."""
        if self._cell.current.closed:
            return STOPPED_TEXT
        return f"{self._label} is closed"

    def _remove(self, key: int) -> None:
        try:
            reply: MutationReply = self._registry.ask(RemoveEntry(key), block=True)
        except pykka.ActorDeadError:
            return
        if reply.changed:
            self._notify_quietly()

    def _remove_all(self, keys: tuple[int, ...]) -> None:
        try:
            changed: bool = self._registry.ask(RemoveEntries(keys), block=True)
        except pykka.ActorDeadError:
            return
        if changed:
            self._notify_quietly()

    def _notify(self) -> None:
        for observer in self._cell.current.all_hooks("change"):
            self._settle_later(observer())

    def _notify_quietly(self) -> None:
        for observer in self._cell.current.all_hooks("change"):
            try:
                self._settle_later(observer())
            except (Exception, asyncio.CancelledError) as exc:
                _log.warning("tools/change observer failed", error=message_of(exc))

    def _settle_later(self, out: Any) -> None:
        """An observer's awaitable is awaited in the background; its failure is a warning."""
        if not inspect.isawaitable(out):
            return
        if self._background is not None:
            self._background(out, "tools/change observer failed: ", {})
            return
        close = getattr(out, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
        _log.warning("tools/change observer returned an awaitable that nothing can await")

    def _close_owner(self) -> None:
        """Close this handle and dispose what its owner registered (last first), telling the
        change observers once per registration that changed; nothing once the registry has
        stopped."""
        try:
            with self._order:
                self._closed = True
                pending = self._registry.ask(CloseOwner(self._owner), block=False)
            changes: int = pending.get()
        except pykka.ActorDeadError:
            return
        for _ in range(changes):
            self._notify_quietly()

    def _changing(self, mutation: _Mutation) -> Disposer:
        reply = self._mutate(mutation)
        disposer = Disposer(self, reply.key)
        if reply.changed:
            try:
                self._notify()
            except BaseException:
                disposer()  # roll back; emits one more change
                raise
        return disposer

    # --- registration --------------------------------------------------------------------------

    def register(self, definition: ToolDefinition) -> Disposer:
        """Add a tool to this handle's layer; returns its idempotent disposer."""
        is_async = self._checked("register", definition)
        return self._changing(RegisterTool(definition, self._agent, is_async))

    def _checked(self, verb: str, definition: object) -> bool:
        """Refuse what ``verb`` (``register``) cannot take: no ``ToolDefinition``, or one the
        registration contract refuses; whether the definition's body is ``async``."""
        if not isinstance(definition, ToolDefinition):
            raise TypeError(_not_a_definition(verb, definition))
        check_registration(definition, reserve_run_code=self._cell.current.mode != "native")
        return inspect.iscoroutinefunction(definition.execute)

    def replace(self, disposer: Disposer, definition: ToolDefinition) -> Disposer:
        """Swap the tool that ``disposer`` registered (through this handle) for ``definition``
        of the same name, in one change: readers see the old tool or the new one, never
        neither. Returns the new tool's disposer; the old disposer becomes a no-op. A change
        observer that raises puts the old tool back, under the old disposer."""
        if not isinstance(definition, ToolDefinition):
            raise TypeError(_not_a_definition("replace", definition))
        if not isinstance(disposer, Disposer):
            # The tool's name, most likely: say what it takes instead.
            raise TypeError(
                "replace() takes the Disposer that this handle's register() returned for the "
                f"tool, got {type(disposer).__name__}"
            )
        if disposer._handle is not self:
            raise ValueError("replace() takes a disposer that this handle returned")
        check_registration(definition, reserve_run_code=self._cell.current.mode != "native")
        is_async = inspect.iscoroutinefunction(definition.execute)
        previous = self._entry(disposer._key)
        with disposer._lock:
            if disposer._done:
                raise ValueError(f'tool "{definition.name}" cannot be replaced: it was disposed')
            disposer._done = True
        try:
            reply = self._mutate(ReplaceTool(disposer._key, definition, is_async))
        except BaseException:
            disposer._done = False  # nothing changed: the old tool is still registered
            raise
        replacement = Disposer(self, reply.key)
        try:
            self._notify()
        except BaseException:
            # As for register, a failing observer undoes the change: the old tool comes back
            # under its own disposer, which emits one more change.
            self._put_back(disposer, replacement, previous)
            raise
        return replacement

    def _put_back(
        self, disposer: Disposer, replacement: Disposer, previous: ToolEntry | None
    ) -> None:
        """Replace ``replacement``'s tool by the ``previous`` entry that ``disposer``
        registered, and make ``disposer`` its disposer again; when that cannot be done (the
        system stopped meanwhile), withdraw the replacement."""
        if previous is None:
            replacement()
            return
        try:
            putting_back = ReplaceTool(replacement._key, previous.definition, previous.is_async)
            reply = self._mutate(putting_back)
        except Exception:
            replacement()
            return
        replacement._done = True
        with disposer._lock:
            disposer._key = reply.key
            disposer._done = False
        self._notify_quietly()

    def _entry(self, key: int) -> ToolEntry | None:
        """The tool entry ``key`` names in this handle's layer, if it is still there."""
        snapshot = self._cell.current
        layer = snapshot.global_layer if self._agent is None else snapshot.scopes.get(self._agent)
        if layer is not None:
            for entry in layer.tools.values():
                if entry.key == key:
                    return entry
        return None

    def restrict(
        self, *, allow: Iterable[str] | None = None, deny: Iterable[str] | None = None
    ) -> Disposer:
        """Mask global tools for this agent: admitted iff in ``allow`` (if given) and not in
        ``deny`` (if given). Only agent scopes may restrict."""
        if self._agent is None:
            raise ValueError(
                "tools.restrict() requires a scoped context (an agent scope handle): a "
                "context-global restriction would mask every agent — deny the tool for the "
                "intended agent instead"
            )
        if allow is None and deny is None:
            raise ValueError(
                "tools.restrict({}) is a no-op: pass `allow` and/or `deny` (an empty filter is "
                "almost always a materialized-empty-config bug)"
            )
        allow_names = _names("allow", allow)
        deny_names = _names("deny", deny)
        return self._changing(AddRestriction(self._agent, allow_names, deny_names))

    def guard(self, fn: Guard) -> Disposer:
        """Add a synchronous guard: ``fn(exec)`` returns None to abstain or a denial reason.
        ``TypeError`` for an ``async def`` one: its awaitable would fail every call closed."""
        _synchronous(
            "guard",
            fn,
            "a def returning None or a reason",
            "use an async pre-execute hook for a policy that awaits",
        )
        return Disposer(self, self._mutate(AddGuard(fn, self._agent)).key)

    def _add_hook(self, point: str, fn: Callable[..., object], prepend: bool = False) -> Disposer:
        _callable(point, fn)
        if type(prepend) is not bool:
            # Read as a truth value it would put a listener first for "no" or a 0.5 weight.
            raise TypeError(f"on_{point}() prepend must be a bool, got {type(prepend).__name__}")
        return Disposer(self, self._mutate(AddHook(point, fn, self._agent, prepend)).key)

    def on_pre_execute(self, hook: PreExecuteHook, prepend: bool = False) -> Disposer:
        """Add an ``async def hook(exec, next) -> Allow | Deny | Ask`` waterfall listener."""
        return self._add_hook("pre_execute", hook, prepend)

    def on_execute(self, hook: ExecuteWrapper, prepend: bool = False) -> Disposer:
        """Add an ``async def wrapper(exec, next) -> ToolExecutionResult`` around dispatch."""
        return self._add_hook("execute", hook, prepend)

    def on_post_execute(self, hook: PostExecuteHook, prepend: bool = False) -> Disposer:
        """Add an ``async def hook(exec, result, next) -> Accept | Block`` listener."""
        return self._add_hook("post_execute", hook, prepend)

    def on_result(self, fn: ResultObserver) -> Disposer:
        """Add a ``fn(exec, result)`` observer of every final result."""
        return self._add_hook("result", fn)

    def on_change(self, fn: ChangeObserver) -> Disposer:
        """Add a ``fn()`` observer of tool and restriction changes (in every scope)."""
        return self._add_hook("change", fn)

    def on_code_dispatch_log(self, hook: CodeDispatchLogHook, prepend: bool = False) -> Disposer:
        """Add an ``async def hook(log, next) -> list[dict]`` shaping Code Mode dispatch logs."""
        return self._add_hook("code_dispatch_log", hook, prepend)

    def on_assemble(self, hook: AssembleHook) -> Disposer:
        """Add a ``hook(assembly) -> assembly`` listener of prompt assembly. ``TypeError`` for
        an ``async def`` one: assembly is synchronous, and its coroutine failed every
        ``assemble_prompt`` afterwards."""
        _synchronous(
            "assemble",
            hook,
            "a def returning the AssembledPrompt",
            "assemble_prompt() calls it and uses what it returns at once",
        )
        return self._add_hook("assemble", hook)

    def section(self, name: str, order: float, text: str) -> Disposer:
        """Add a prompt section; a scoped section shadows a global one of the same name."""
        if type(name) is not str:
            raise TypeError(f"section name must be a non-empty str, got {type(name).__name__}")
        if not name:
            raise ValueError("section name must be a non-empty str, got ''")
        if type(order) not in (int, float):
            raise TypeError("section order must be a number")
        if not finite_number(order):
            raise ValueError(f"section order must be a finite number, got {order!r}")
        if type(text) is not str:
            raise TypeError("section text must be a str")
        # Both go into every prompt assembled from here on, as a tool's name does.
        _check_text(name, f"section name {name!r}")
        _check_text(text, f'section "{name}" text')
        return Disposer(self, self._mutate(AddSection(name, order, text, self._agent)).key)

    # --- reads ---------------------------------------------------------------------------------

    def _target(self, agent: str | None) -> str | None:
        """The agent a read is for: ``agent`` when given, else this handle's (``TypeError``
        for a key that is not a ``str``)."""
        if agent is None:
            return self._agent
        check_agent_key(agent)
        return agent

    def get(self, name: str, agent: str | None = None) -> ToolDefinition | None:
        """The definition ``name`` resolves to in the agent's view, or None. ``TypeError``
        for a ``name`` that is not a ``str``: no tool could have it, so the read would answer
        None for a mistake (a ``bytes`` name, a whole ``ToolCall``)."""
        if type(name) is not str:
            raise TypeError(f"tool names are str, got {type(name).__name__}")
        entry = self._cell.current.lookup(name, self._target(agent))
        return entry.definition if entry is not None else None

    def schemas(self, agent: str | None = None) -> list[dict[str, Any]]:
        """``{name, description, parameters}`` for every visible tool, in view order (fresh)."""
        view = self._cell.current.view(self._target(agent))
        return [project_schema(entry.definition) for entry in view.values()]

    def names(self, agent: str | None = None) -> list[str]:
        """The visible tool names, in view order."""
        return list(self._cell.current.view(self._target(agent)))

    def execution_mode(self, call: ExecuteCall | ToolCall) -> ExecutionMode:
        """``"parallel"`` iff the visible tool's classifier returns exactly ``True``, given the
        call's arguments; a ``ToolCall``'s argument text is read first, as a batch reads it (a
        text the batch would refuse runs nothing, so it holds no sibling back: ``"parallel"``,
        as in the pool). ``TypeError`` for anything else (a bare tool name, say)."""
        if not isinstance(call, ExecuteCall | ToolCall):
            raise TypeError(
                f"execution_mode() takes an ExecuteCall or a ToolCall, got {type(call).__name__}"
            )
        agent = getattr(call, "agent", None)
        entry = self._cell.current.lookup(call.name, self._target(agent))
        if entry is None:
            return "exclusive"
        arguments = call.arguments
        if isinstance(call, ToolCall):
            try:
                arguments = snapshot_json(read_arguments(call.arguments), "arguments")
            except (ArgumentsTextError, ValueError, RecursionError, MemoryError):
                return "parallel"
        return "parallel" if classify(entry.definition, arguments) else "exclusive"


def _not_a_definition(method: str, given: object) -> str:
    """What ``register``/``replace`` say when given something else. A plain function is the
    likeliest (a harness author registering the body itself), so that one is told how to
    make a tool of it."""
    text = (
        f"{method}() takes a ToolDefinition (build one with define_tool), "
        f"got {type(given).__name__}"
    )
    if inspect.isfunction(given) or inspect.ismethod(given):
        name = getattr(given, "__qualname__", "the function")
        text += f" {name}: decorate it with @tool to build one from its type hints and docstring"
    return text


def _names(label: str, names: Iterable[str] | None) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str | bytes):
        raise TypeError(f"tools.restrict() {label} must be a list of tool names, not a string")
    try:
        iterator = iter(names)
    except TypeError:
        raise TypeError(
            f"tools.restrict() {label} must be a list of tool names, got {type(names).__name__}"
        ) from None
    out = tuple(iterator)
    for name in out:
        if type(name) is not str:
            raise TypeError(
                f"tools.restrict() {label} must hold tool names (str), got {type(name).__name__}"
            )
    return out


_SHAPES: dict[str, tuple[str, ...]] = {
    "guard": ("exec",),
    "pre_execute": ("exec", "next"),
    "execute": ("exec", "next"),
    "post_execute": ("exec", "result", "next"),
    "result": ("exec", "result"),
    "change": (),
    "code_dispatch_log": ("log", "next"),
    "assemble": ("assembly",),
}
"""The positional arguments the pipeline passes each kind of listener."""


_KIND: Final = "__dsh_tools_listener_of__"
"""The attribute that marks a listener the package makes for one kind only (``listener_of``)."""

_REGISTERED_WITH = {"guard": "guard", **{kind: f"on_{kind}" for kind in _SHAPES if kind != "guard"}}

_F = TypeVar("_F", bound=Callable[..., object])


def listener_of(kind: str, fn: _F) -> _F:
    """Mark ``fn`` as a listener of ``kind`` only (a key of ``_SHAPES``): registering it as any
    other kind is refused, however well its arguments fit (an execute wrapper takes
    ``(exec, next)`` as a pre-execute hook does). Read at registration only."""
    setattr(fn, _KIND, kind)
    return fn


def _synchronous(kind: str, fn: object, shape: str, why: str) -> None:
    """Refuse ``fn`` as a ``kind`` listener unless it is a callable that is no ``async def``
    (``shape`` says what it should be, ``why`` why not async)."""
    _callable(kind, fn)
    if inspect.iscoroutinefunction(fn):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise TypeError(
            f"{kind} listener {name} must be synchronous ({shape}), not async def: {why}"
        )


def _callable(label: str, fn: object) -> None:
    """Refuse a listener that is not callable, or cannot take the arguments it will be given:
    when registered, rather than failing every call (or, for an observer, every warning) once
    it runs."""
    if not callable(fn):
        raise TypeError(f"{label} listener must be callable, got {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        # Calling one runs none of its body: a hook would fail every call closed, an observer
        # would silently observe nothing. (A stray ``yield`` is the usual cause.)
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise TypeError(
            f"{label} listener {name} is a generator function (it contains yield), so calling "
            "it runs none of its body: return (or await) its answer instead of yielding it"
        )
    kind = getattr(fn, _KIND, None)
    if kind is not None and kind != label:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        what = {"execute": "an execute wrapper"}.get(kind, f"a {kind} listener")
        raise TypeError(
            f"{name} is {what}: register it with tools.{_REGISTERED_WITH[kind]}(...), "
            f"not as a {label} listener"
        )
    shape = _SHAPES[label]
    if not accepts_positional(fn, len(shape)):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise TypeError(
            f"{label} listener {name} must accept {len(shape)} positional "
            f"argument{'' if len(shape) == 1 else 's'} ({', '.join(shape)})"
        )
