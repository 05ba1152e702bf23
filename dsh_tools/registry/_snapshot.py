"""Immutable registry views: what the hot path reads without an actor round trip.

The ``RegistryActor`` owns the mutable tables and publishes a fresh ``RegistrySnapshot`` after
every change (copy-on-write). A snapshot never changes after publication, so any thread may read
it; per-agent views and filtered hook lists are computed lazily and cached on the snapshot
(a race only computes the same value twice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "HOOK_POINTS",
    "STOPPED_TEXT",
    "GuardTable",
    "HookEntry",
    "HookSet",
    "Layer",
    "RegistrySnapshot",
    "Restriction",
    "SectionEntry",
    "SnapshotCell",
    "ToolEntry",
]

HOOK_POINTS = (
    "pre_execute",
    "execute",
    "post_execute",
    "result",
    "change",
    "code_dispatch_log",
    "assemble",
)

STOPPED_TEXT = "the tool system is stopped; start a new one with ToolSystem.start()"
"""What every use of a stopped system that raises says (a closed snapshot's system)."""


class ToolEntry:
    """One registered tool: its definition, whether its body is a coroutine function, its layer."""

    __slots__ = ("agent", "definition", "is_async", "key", "name")

    def __init__(self, key: int, definition: Any, is_async: bool, agent: str | None) -> None:
        self.key = key
        self.definition = definition
        self.name: str = definition.name
        self.is_async = is_async
        self.agent = agent


class Restriction:
    """One ``restrict(allow=, deny=)`` mask of an agent layer (frozen name sets)."""

    __slots__ = ("allow", "deny", "key")

    def __init__(self, key: int, allow: frozenset[str] | None, deny: frozenset[str] | None):
        self.key = key
        self.allow = allow
        self.deny = deny

    def admits(self, name: str) -> bool:
        """Whether a global tool called ``name`` passes this mask."""
        if self.allow is not None and name not in self.allow:
            return False
        return not (self.deny is not None and name in self.deny)


class GuardTable:
    """A layer's guards in registration order; ``generation`` changes when an empty table refills.

    Guard passes use it for live iteration: a guard added during a pass is seen later in the
    same pass, unless the table emptied in between (a new generation).
    """

    __slots__ = ("entries", "generation")

    def __init__(self, entries: tuple[tuple[int, Callable[[Any], Any]], ...], generation: int):
        self.entries = entries
        self.generation = generation


EMPTY_GUARDS = GuardTable((), 0)


class Layer:
    """The global layer or one agent's layer: tools, restrictions and guards."""

    __slots__ = ("guards", "restrictions", "tools")

    def __init__(
        self,
        tools: Mapping[str, ToolEntry],
        restrictions: tuple[Restriction, ...],
        guards: GuardTable,
    ) -> None:
        self.tools = tools
        self.restrictions = restrictions
        self.guards = guards

    @property
    def is_empty(self) -> bool:
        """Whether all three tables are empty (an agent layer is then discarded)."""
        return not self.tools and not self.restrictions and not self.guards.entries


EMPTY_LAYER = Layer({}, (), EMPTY_GUARDS)


class HookEntry:
    """One hook or observer: ``agent`` is the scope it was registered through (None = global)."""

    __slots__ = ("agent", "fn", "key")

    def __init__(self, key: int, fn: Callable[..., Any], agent: str | None) -> None:
        self.key = key
        self.fn = fn
        self.agent = agent


class HookSet:
    """The listeners of every hook point that apply to one agent's calls, outermost first (one
    attribute per point of ``HOOK_POINTS``; each a tuple, empty when none applies). The
    pipeline reads a point as an attribute: a stage asks for its hooks on every call."""

    __slots__ = HOOK_POINTS

    pre_execute: tuple[Callable[..., Any], ...]
    execute: tuple[Callable[..., Any], ...]
    post_execute: tuple[Callable[..., Any], ...]
    result: tuple[Callable[..., Any], ...]
    change: tuple[Callable[..., Any], ...]
    code_dispatch_log: tuple[Callable[..., Any], ...]
    assemble: tuple[Callable[..., Any], ...]

    def __init__(self, hooks: Mapping[str, tuple[HookEntry, ...]], agent: str | None) -> None:
        for point in HOOK_POINTS:
            entries = hooks.get(point, ())
            fns = tuple(e.fn for e in entries if e.agent is None or e.agent == agent)
            object.__setattr__(self, point, fns)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"HookSet.{name} is read-only")


class SectionEntry:
    """A prompt section registered through a handle."""

    __slots__ = ("agent", "key", "name", "order", "text")

    def __init__(self, key: int, name: str, order: float, text: str, agent: str | None) -> None:
        self.key = key
        self.name = name
        self.order = order
        self.text = text
        self.agent = agent


class RegistrySnapshot:
    """One published, immutable state of the registry."""

    __slots__ = (
        "_hook_sets",
        "_scoped",
        "_view_cache",
        "closed",
        "global_layer",
        "hooks",
        "mode",
        "scopes",
        "sections",
        "seq",
        "transport",
    )

    def __init__(
        self,
        *,
        seq: int,
        mode: str,
        global_layer: Layer,
        scopes: Mapping[str, Layer],
        hooks: Mapping[str, tuple[HookEntry, ...]],
        sections: tuple[SectionEntry, ...],
        transport: ToolEntry | None,
        closed: bool = False,
    ) -> None:
        self.seq = seq
        self.mode = mode
        self.global_layer = global_layer
        self.scopes = scopes
        self.hooks = hooks
        self.sections = sections
        self.transport = transport
        self.closed = closed
        # Caches hold entries for None and for the agents in ``_scoped`` only: any other agent
        # sees what a call without an agent sees, and a harness may use a new agent key per
        # conversation without this snapshot growing.
        self._view_cache: dict[str | None, dict[str, ToolEntry]] = {}
        self._hook_sets: dict[str | None, HookSet] = {}
        self._scoped = frozenset(
            [
                *scopes,
                *(entry.agent for entries in hooks.values() for entry in entries),
                *(section.agent for section in sections),
            ]
        ) - {None}

    def scoped(self, agent: str | None) -> bool:
        """Whether anything in this snapshot (a layer, a hook, a section) applies to ``agent``
        alone; if not, ``agent`` sees exactly what a call without an agent sees."""
        return agent in self._scoped

    def view(self, agent: str | None) -> dict[str, ToolEntry]:
        """The tools ``agent`` sees, in view order (treat the returned dict as read-only)."""
        cached = self._view_cache.get(agent)
        if cached is not None:
            return cached
        if agent is not None and agent not in self._scoped:
            return self.view(None)
        layer = self.scopes.get(agent) if agent is not None else None
        out: dict[str, ToolEntry] = {}
        if layer is None:
            out.update(self.global_layer.tools)
        else:
            restrictions = layer.restrictions
            for name, entry in self.global_layer.tools.items():
                if all(r.admits(name) for r in restrictions):
                    out[name] = entry
            # A local shadow replaces an admitted global in place (keeping its slot); other
            # locals are appended in their registration order.
            out.update(layer.tools)
        if self.transport is not None:
            out[self.transport.name] = self.transport
        self._view_cache[agent] = out
        return out

    def lookup(self, name: str, agent: str | None) -> ToolEntry | None:
        """The visible entry called ``name`` for ``agent``, or None."""
        view = self._view_cache.get(agent)  # ``view``'s cache, read here: every call looks up
        return (view if view is not None else self.view(agent)).get(name)

    def hooks_of(self, agent: str | None) -> HookSet:
        """The listeners of every point that apply to a call of ``agent``."""
        cached = self._hook_sets.get(agent)
        if cached is not None:
            return cached
        if agent is not None and agent not in self._scoped:
            return self.hooks_of(None)
        hook_set = self._hook_sets[agent] = HookSet(self.hooks, agent)
        return hook_set

    def all_hooks(self, point: str) -> tuple[Callable[..., Any], ...]:
        """Every listener of ``point`` regardless of scope (``change`` observers are unfiltered)."""
        return tuple(e.fn for e in self.hooks.get(point, ()))

    def guard_table(self, agent: str | None) -> GuardTable | None:
        """The guard table of the global layer (agent None) or of ``agent``'s layer, if any."""
        if agent is None:
            return self.global_layer.guards
        layer = self.scopes.get(agent)
        return layer.guards if layer is not None else None

    def known_names(self, agent: str | None) -> list[str]:
        """Global names plus ``agent``'s local names, before restrictions."""
        names = dict.fromkeys(self.global_layer.tools)
        if agent is not None and agent in self.scopes:
            names.update(dict.fromkeys(self.scopes[agent].tools))
        return list(names)


class SnapshotCell:
    """Holds the current snapshot; replacing ``current`` is one atomic attribute store."""

    __slots__ = ("current",)

    def __init__(self, snapshot: RegistrySnapshot | None = None) -> None:
        self.current: RegistrySnapshot = snapshot if snapshot is not None else _EMPTY


_EMPTY = RegistrySnapshot(
    seq=0,
    mode="native",
    global_layer=EMPTY_LAYER,
    scopes={},
    hooks={},
    sections=(),
    transport=None,
)
