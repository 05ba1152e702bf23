"""``McpPlugin``: one MCP server's registrations, kept in step with the server.

The plugin owns one registration per server tool, made through one ``system.plugin(name)``
owner (or an agent's scope). It follows the server:

- ``notifications/tools/list_changed``: re-list and apply the difference (removed tools
  unregistered, changed ones replaced in one change, new ones registered), one ``change``
  notification per applied change. Calls already running finish; a later call to a removed
  tool is ``UNKNOWN_TOOL``. A new tool whose name another tool has is left out (warned
  about) and registered once that name is free: the plugin observes the registry's changes
  while such a tool waits, and only then.
- connection lost: while a reconnect is pending the tools stay registered and fail fast with
  ``MCP_DISCONNECTED``; once the plugin gives up (no ``reconnect`` policy, or attempts
  exhausted) they are withdrawn and ``state`` is ``"disconnected"``. A reconnect re-lists and
  applies the difference as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, get_args

from ...actors import FrozenDict, message_of
from ...actors._futures import retrieve
from ...actors._logging import get_logger
from ...registry import (
    Disposer,
    ToolsHandle,
    dispose_together,
    register_together,
    snapshot_json,
)
from ._client import Listing, McpClient, describe
from ._errors import McpConnectionError
from ._progress import ProgressSink
from ._resources import ServerResources
from ._tools import ConcurrencyPolicy, build_definition, needs_tasks
from ._types import McpProgress, McpState, McpToolInfo, ProgressCallback
from ._waits import checked_timeout

if TYPE_CHECKING:
    from ..._system import PluginHandle, ToolSystem

__all__ = ["INSTRUCTIONS_ORDER", "McpPlugin"]

_log = get_logger("dsh_tools.mcp")

INSTRUCTIONS_ORDER = 200
"""Where a server's instructions section sorts in ``assemble_prompt()`` (after the SDK)."""


class _Registered:
    __slots__ = ("disposer", "info", "wire")

    def __init__(self, wire: Mapping[str, Any], disposer: Disposer, info: McpToolInfo) -> None:
        self.wire = wire
        self.disposer = disposer
        self.info = info


async def wait_out(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` to end, through any cancellation of the awaiting task (its caller
    raises that cancellation once this returns); the outcome is retrieved, not raised."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,))
    retrieve(future)


class McpPlugin(ServerResources):
    """One MCP server's registrations and its live connection.

    ``name`` is the plugin name, ``agent`` the scope the tools are registered in (``None``:
    global), ``tool_names`` the registered names in server order (it follows the server),
    ``server_info`` the server's ``Implementation`` in wire form and ``instructions`` its
    instructions text (or ``None``). ``state`` says where the connection is (``McpState``);
    ``closed`` is true once it is ``"closed"`` or ``"disconnected"`` for good.
    ``close()`` (or ``await aclose()``, or leaving a ``with`` / ``async with`` block) disposes
    the registrations last first, then ends the session and the server process; it is
    idempotent.
    """

    def __init__(
        self,
        *,
        system: ToolSystem,
        name: str,
        agent: str | None,
        client: McpClient,
        tools: ToolsHandle,
        owner: PluginHandle | None,
        prefix: str,
        policy: ConcurrencyPolicy,
        timeout_ms: float | None,
        timeouts: Mapping[str, float],
        instructions_section: bool,
        on_progress: ProgressCallback | None,
        close_timeout: float,
    ) -> None:
        self.name = name
        self.agent = agent
        self.server_info: dict[str, Any] | None = None
        self.instructions: str | None = None
        self._system = system
        self._client = client
        self._tools = tools
        self._owner = owner
        self._prefix = prefix
        self._policy = policy
        self._timeout_ms = timeout_ms
        self._timeouts = dict(timeouts)
        self._instructions_section = instructions_section
        self._on_progress = on_progress
        self._progress_sink = ProgressSink(self._record_progress, self._deliver_progress)
        self._close_timeout = close_timeout
        self._at_close: list[Callable[[], None]] = []  # ``close_with``
        # By MCP name, in server order; replaced whole, never changed in place (read unlocked).
        self._registered: dict[str, _Registered] = {}
        self._skipped: tuple[str, ...] = ()
        # Listed tools left out because another tool has their name (by MCP name, wire form),
        # registered once the name is free: a change observer, there only while some wait,
        # tells the connection to retry them (``names_freed``).
        self._waiting: dict[str, Mapping[str, Any]] = {}
        self._watch: Disposer | None = None
        self._order: tuple[str, ...] = ()  # the last listing's registrable names, in order
        self._section: Disposer | None = None
        self._sync = threading.RLock()
        self._closing = False

    # --- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> McpState:
        """``connecting``, ``connected``, ``reconnecting``, ``disconnected`` or ``closed``."""
        return self._client.state

    @property
    def closed(self) -> bool:
        """Whether the plugin is done: closed, or disconnected with no reconnect left."""
        return self._client.state in ("closed", "disconnected")

    def wait_for_state(self, *states: McpState, timeout: float | None = None) -> bool:
        """Block until ``state`` is one of ``states``; False if ``timeout`` passed first.

        ``ValueError`` for a state that is none of the five: ``wait_for_state("connected",
        5)`` (the timeout given by position) would otherwise wait for a state that never comes,
        with no timeout; and for no state at all, which no state ever is among."""
        known = get_args(McpState)
        if not states:  # none is ever reached: without a timeout, a wait for ever
            raise ValueError(f"wait_for_state takes at least one state among {', '.join(known)}")
        for state in states:
            if state not in known:
                raise ValueError(
                    f"wait_for_state takes states among {', '.join(known)} (and timeout= by "
                    f"keyword), got {state!r}"
                )
        return self._client.wait_for_state(
            states, checked_timeout(timeout, "wait_for_state", zero=True)
        )

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The registered names, in the server's order. A listing is applied here once it is
        registered whole: a registry change observer hears of a tool before this names it."""
        # Read without the plugin's lock (``_registered`` is replaced whole, never changed in
        # place): the registry's change observers run under that lock while the plugin
        # registers, and one that waits for a thread reading this must not wait for ever.
        return tuple(r.info.name for r in self._registered.values())

    @property
    def unsupported_tools(self) -> tuple[str, ...]:
        """Server tools left unregistered: they can only run as tasks, which this client does
        not support."""
        return self._skipped

    def tool_info(self, name: str) -> McpToolInfo | None:
        """What the server said about registered tool ``name`` (title, hints, schemas)."""
        for registered in self._registered.values():  # lock-free, as ``tool_names``
            if registered.info.name == name:
                return registered.info
        return None

    # --- following the server (on a worker thread, one at a time) ------------------------------

    def _definition_name(self, mcp_name: str) -> str:
        return self._prefix + mcp_name

    def _timeout(self, mcp_name: str) -> float | None:
        name = self._definition_name(mcp_name)
        return self._timeouts.get(mcp_name, self._timeouts.get(name, self._timeout_ms))

    def _build(self, wire: Mapping[str, Any]) -> Any:
        mcp_name = wire["name"]
        return build_definition(
            self._client,
            wire,
            name=self._definition_name(mcp_name),
            policy=self._policy,
            timeout_ms=self._timeout(mcp_name),
            progress=self._progress_sink,
        )

    def adopt(self, listing: Listing) -> None:
        """Take a fresh connection's identity and tools (the first one raises on a conflict;
        later ones log it and skip the tool)."""
        first = self.server_info is None and not self._registered
        self.server_info = listing.server_info
        self.instructions = listing.instructions
        self._apply(listing.tools, strict=first)
        self._set_section(listing.instructions)
        if first:
            self._check_timeouts(listing.tools)

    def _check_timeouts(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """Warn about ``timeouts`` keys that name none of the first listing's tools: a
        misspelled one would leave the tool it meant without a deadline, silently."""
        known: set[str] = set()
        for wire in tools:
            mcp_name = wire.get("name")
            if isinstance(mcp_name, str):
                known.update((mcp_name, self._definition_name(mcp_name)))
        unknown = [key for key in self._timeouts if key not in known]
        if unknown:
            _log.warning(
                "MCP timeouts name no tool the server listed",
                server=self.name,
                names=unknown,
                listed=sorted(w["name"] for w in tools if isinstance(w.get("name"), str)),
            )

    def _set_section(self, text: str | None) -> None:
        if not self._instructions_section:
            return
        with self._sync:
            if self._closing:
                return
            old, self._section = self._section, None
            if old is not None:
                old()
            if text and text.strip():
                title = (self.server_info or {}).get("title") or self.name
                body = f"## {title} (MCP server)\n\n{text.strip()}\n"
                self._section = self._tools.section(f"mcp:{self.name}", INSTRUCTIONS_ORDER, body)

    def _apply(self, tools: Sequence[Mapping[str, Any]], *, strict: bool) -> None:
        with self._sync:
            if self._closing:
                return
            wanted: dict[str, Mapping[str, Any]] = {}
            first_at: dict[str, int] = {}  # where each name was first listed
            skipped: list[str] = []
            for index, wire in enumerate(tools):
                mcp_name: str = wire.get("name") or ""  # a wire tool's name is a str
                # The SDK lets an empty name through, and the registry refuses it with an error
                # that names neither this server nor the entry: say both here. A name listed
                # twice leaves the model one of two tools, chosen by the server's order: say so
                # too, naming both entries.
                problem = None
                if not mcp_name:
                    problem = f"tools[{index}] has an empty name"
                elif mcp_name in first_at:
                    problem = (
                        f'tools[{index}] repeats the name "{mcp_name}" of '
                        f"tools[{first_at[mcp_name]}]"
                    )
                if problem is not None:
                    if strict:
                        raise McpConnectionError(
                            f'MCP server "{self.name}" listed a tool that cannot be '
                            f"registered: {problem}",
                            "MCP_CONNECT_FAILED",
                        )
                    _log.warning(
                        "MCP tool could not be registered",
                        server=self.name,
                        tool=mcp_name or f"tools[{index}]",
                        error=problem if not mcp_name else f"{problem}; the first is kept",
                    )
                    continue
                first_at[mcp_name] = index
                if needs_tasks(wire):
                    skipped.append(mcp_name)
                    continue
                wanted[mcp_name] = wire
            for mcp_name in skipped:
                if mcp_name not in self._skipped:
                    _log.warning(
                        "MCP tool not registered: it can only run as a task, which this "
                        "client does not support",
                        server=self.name,
                        tool=mcp_name,
                    )
            self._skipped = tuple(skipped)
            removed = [n for n in self._registered if n not in wanted]
            if removed:
                current = self._registered
                self._registered = {n: r for n, r in current.items() if n in wanted}
                dispose_together([current[mcp_name].disposer for mcp_name in removed])
            waiting: dict[str, Mapping[str, Any]] = {}
            order: dict[str, _Registered] = {}
            # The tools new to the registry, registered together once the others are done.
            fresh: dict[str, tuple[Mapping[str, Any], Any]] = {}
            for mcp_name, wire in wanted.items():
                old = self._registered.get(mcp_name)
                if old is not None and old.wire == wire:
                    order[mcp_name] = old
                    continue
                try:
                    definition = self._build(wire)
                    if old is None:
                        fresh[mcp_name] = (wire, definition)
                        continue
                    disposer = self._tools.replace(old.disposer, definition)
                except Exception as exc:
                    if strict:
                        self._withdraw_and_raise(
                            mcp_name, exc, [entry.disposer for entry in reversed(order.values())]
                        )
                    self._left_out(mcp_name, wire, old, exc, order, waiting)
                    continue
                order[mcp_name] = _Registered(wire, disposer, self._info_of(definition))
                if self._closing:
                    break
            if fresh and not self._closing:
                self._register_fresh(fresh, strict, order, waiting)
                order = {n: order[n] for n in wanted if n in order}
            if self._closing:
                # Closed by a change observer of this very update (on this thread): the close
                # withdrew what was registered before, and this update's own are undone here.
                dispose_together([entry.disposer for entry in reversed(order.values())])
                order = {}
                waiting = {}
            self._registered = order
            self._order = tuple(wanted)
            self._waiting = waiting
            self._watch_names()

    def _register_fresh(
        self,
        fresh: Mapping[str, tuple[Mapping[str, Any], Any]],
        strict: bool,
        order: dict[str, _Registered],
        waiting: dict[str, Mapping[str, Any]],
    ) -> None:
        """Register the listing's new tools in one change (``register_together``: a change
        per tool made a server of thousands of tools take time in the square of their number,
        and an observer that assembles the prompt on each, in the cube), adding them to
        ``order``. Under ``strict`` (the first listing), a tool refused undoes them all, and
        ``order`` too, and raises; else it is left out with a warning."""
        names = list(fresh)
        try:
            outcomes = register_together(self._tools, [fresh[n][1] for n in names])
        except Exception as exc:  # a change observer raised: the registry undid them all
            if strict:
                dispose_together([entry.disposer for entry in reversed(order.values())])
                raise
            outcomes = [exc] * len(names)
        if strict:
            for mcp_name, outcome in zip(names, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    added = [o for o in outcomes if isinstance(o, Disposer)]
                    self._withdraw_and_raise(
                        mcp_name,
                        outcome,
                        [*reversed(added), *(e.disposer for e in reversed(order.values()))],
                    )
        for mcp_name, outcome in zip(names, outcomes, strict=True):
            wire, definition = fresh[mcp_name]
            if isinstance(outcome, Exception):
                self._left_out(mcp_name, wire, None, outcome, order, waiting)
            else:
                order[mcp_name] = _Registered(wire, outcome, self._info_of(definition))

    def _withdraw_and_raise(
        self, mcp_name: str, exc: Exception, disposers: list[Disposer]
    ) -> NoReturn:
        """A first listing's tool refused: withdraw what this listing registered (in one
        change) and raise, naming the tool that holds the name when that is the refusal."""
        dispose_together(disposers)
        taken = self._name_taken(mcp_name, exc)
        if taken is not None:
            raise taken from exc
        raise exc

    def _left_out(
        self,
        mcp_name: str,
        wire: Mapping[str, Any],
        old: _Registered | None,
        exc: Exception,
        order: dict[str, _Registered],
        waiting: dict[str, Mapping[str, Any]],
    ) -> None:
        """A later listing's tool that could not be registered: warned about; the version
        registered before stays, and one whose name another tool has waits for it."""
        taken = self._name_taken(mcp_name, exc)
        _log.warning(
            "MCP tool could not be registered",
            server=self.name,
            tool=mcp_name,
            error=describe(exc) if taken is None else str(taken),
        )
        if old is not None:
            order[mcp_name] = old
        elif taken is not None:
            waiting[mcp_name] = wire

    def _name_taken(self, mcp_name: str, exc: Exception) -> ValueError | None:
        """The error for a listed tool whose name another tool has (raised for the first
        listing, logged for a later one): the registry's own names neither this server nor
        the way out."""
        name = self._definition_name(mcp_name)
        if type(exc) is not ValueError or self._tools.get(name) is None:
            return None
        way_out = (
            f'give this server a tool_prefix (tool_prefix="{self.name}_", say)'
            if not self._prefix
            else "give this server another tool_prefix"
        )
        return ValueError(
            f'MCP server "{self.name}" lists tool "{mcp_name}", but a tool named "{name}" is '
            f"registered already; {way_out} to keep its tools apart"
        )

    def _watch_names(self) -> None:
        """Observe the registry's changes while a tool waits for its name, and only then."""
        with self._sync:
            if self._waiting and not self._closing:
                if self._watch is None:
                    self._watch = self._tools.on_change(self._registry_changed)
            elif self._watch is not None:
                watch, self._watch = self._watch, None
                watch()

    def _registry_changed(self) -> None:
        """A ``change`` observer, on whatever thread changed the registry: when a waiting
        tool's name is free, the connection's update thread registers it (not this thread,
        whose caller's change is done, nor under the caller's locks)."""
        waiting = tuple(self._waiting)  # replaced whole, never changed in place
        if any(self._tools.get(self._definition_name(n)) is None for n in waiting):
            self._client.names_freed()

    def names_freed(self) -> None:
        """Register the waiting tools whose names are free now (on the update thread)."""
        with self._sync:
            if self._closing or not self._waiting:
                return
            waiting = dict(self._waiting)
            registered = dict(self._registered)
            added: list[Disposer] = []
            for mcp_name, wire in list(waiting.items()):
                name = self._definition_name(mcp_name)
                if self._tools.get(name) is not None:
                    continue
                try:
                    definition = self._build(wire)
                    disposer = self._tools.register(definition)
                except Exception as exc:
                    # Taken again meanwhile, say: it waits on, and the listing warned already.
                    _log.debug(
                        "MCP tool still not registered",
                        server=self.name,
                        tool=mcp_name,
                        error=describe(exc),
                    )
                    continue
                added.append(disposer)
                if self._closing:
                    # Closed by a change observer of this very registration (on this thread):
                    # the close withdrew what was registered before, and these are undone here.
                    for undo in reversed(added):
                        undo()
                    return
                del waiting[mcp_name]
                registered[mcp_name] = _Registered(wire, disposer, self._info_of(definition))
                _log.info(
                    "MCP tool registered: its name is free again", server=self.name, tool=mcp_name
                )
            self._registered = {n: registered[n] for n in self._order if n in registered}
            self._waiting = waiting
            self._watch_names()

    @staticmethod
    def _info_of(definition: Any) -> McpToolInfo:
        from ._tools import mcp_tool_info

        info = mcp_tool_info(definition)
        assert info is not None
        return info

    def _withdraw(self) -> None:
        with self._sync:
            self._waiting = {}
            self._watch_names()
            registered, self._registered = self._registered, {}
            # One change for the whole server: see dispose_together.
            dispose_together([entry.disposer for entry in reversed(registered.values())])
            section, self._section = self._section, None
            if section is not None:
                section()

    # ConnectionListener

    def reconnected(self, listing: Listing) -> None:
        _log.info("MCP server reconnected", server=self.name)
        self.adopt(listing)

    def tools_changed(self, tools: list[dict[str, Any]]) -> None:
        self._apply(tools, strict=False)

    def lost(self, final: bool, reason: str) -> None:
        if final:
            _log.warning(
                "MCP server disconnected; its tools are withdrawn", server=self.name, reason=reason
            )
            self._withdraw()
        else:
            _log.warning("MCP server disconnected; reconnecting", server=self.name, reason=reason)

    # --- progress ------------------------------------------------------------------------------

    def _record_progress(self, progress: McpProgress, dropped: int | None) -> None:
        """Record one notification of a call as a session event (``dropped``: the coalesced
        last event of a call that had more than ``MAX_PROGRESS_EVENTS``, ``_progress``)."""
        data: dict[str, Any] = {
            "call_id": progress.call_id,
            "tool": progress.tool,
            "server": progress.server,
            "progress": progress.progress,
        }
        if progress.total is not None:
            data["total"] = progress.total
        if progress.message is not None:
            data["message"] = progress.message
        if dropped is not None:
            data["dropped"] = dropped
        try:
            self._system.session.append(
                "tool/progress", FrozenDict(snapshot_json(data)), progress.agent
            )
        except Exception as exc:  # a non-finite number from the server, say
            _log.warning("MCP progress not recorded", server=self.name, error=message_of(exc))

    def _deliver_progress(self, progress: McpProgress) -> None:
        """On the client loop: the callback gets every notification in order, off the
        session's receive loop."""
        if self._on_progress is not None:
            self._client.callbacks.progress(self._on_progress, progress)

    # --- closing -------------------------------------------------------------------------------

    def close_with(self, undo: Callable[[], None]) -> None:
        """Have the first ``close()`` call ``undo()`` once the connection is closed, the last
        given first: what registration did beside the tools (the plugin's name claimed in its
        system, its place among what the system's ``stop()`` closes)."""
        self._at_close.append(undo)

    def close(self) -> None:
        """Dispose the registrations (LIFO), then close the session and the server process.

        Blocks for at most a few seconds (the SDK's shutdown: close stdin, wait, terminate,
        kill). Calls still running fail with ``MCP_DISCONNECTED``.
        """
        with self._sync:
            first = not self._closing
            self._closing = True
        if first:
            try:
                self._withdraw()
                if self._owner is not None:
                    self._owner.close()
            except Exception as exc:
                _log.warning(
                    "disposing an MCP plugin failed", server=self.name, error=message_of(exc)
                )
        try:
            self._client.close(self._close_timeout)
        finally:
            if first:
                while self._at_close:
                    self._at_close.pop()()

    async def aclose(self) -> None:
        """``close()`` on a worker thread, for callers on an event loop. Cancelling the awaiting
        task raises ``CancelledError`` once the plugin is closed: the close is never cut
        short, nor left to go on after the cancellation. From a coroutine callback (on the
        connection's own loop, which the session's end waits for) it starts the close and
        returns, as ``close()`` does there."""
        if self._client.waits_for_caller():
            self.close()
            return
        closing = asyncio.ensure_future(asyncio.to_thread(self.close))
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            await wait_out(closing)
            raise

    def __enter__(self) -> McpPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> McpPlugin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<McpPlugin {self.name!r} {self.state} tools={list(self.tool_names)}>"
