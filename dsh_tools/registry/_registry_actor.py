"""``RegistryActor``: the one owner of the registry's tables.

Every change (global or scoped) is a message answered before the caller continues, serialized
under one sequence number, and followed by the publication of a fresh immutable snapshot. The
actor never runs user code, so a mutation sent from inside a hook, guard or tool body can never
deadlock on it; ``change`` observers run in the caller's thread after publication.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import pykka

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
    SetTransport,
    StopRegistry,
)
from ._snapshot import (
    EMPTY_GUARDS,
    EMPTY_LAYER,
    HOOK_POINTS,
    GuardTable,
    HookEntry,
    Layer,
    RegistrySnapshot,
    Restriction,
    SectionEntry,
    SnapshotCell,
    ToolEntry,
)

__all__ = ["RUN_CODE", "RegistryActor"]

RUN_CODE: Final = "run_code"
"""The reserved name of the Code Mode transport (``codebridge`` names it ``RUN_CODE_TOOL_NAME``
for harness authors)."""

_RESERVED_RESTRICT = (
    'tools.restrict() cannot name reserved Code Mode presentation transport "run_code"; '
    "restrict end-capability tools instead"
)


class RegistryActor(pykka.ThreadingActor):
    """Owns tools, restrictions, guards, hooks and sections; publishes snapshots to ``cell``."""

    use_daemon_thread = True  # a forgotten stop() must not keep the process alive

    def __init__(self, mode: str, cell: SnapshotCell) -> None:
        super().__init__()
        self._mode = mode
        self._keys = itertools.count(1)
        self._seq = 0
        self._generations = itertools.count(1)
        self._global = EMPTY_LAYER
        self._scopes: dict[str, Layer] = {}
        self._hooks: dict[str, tuple[HookEntry, ...]] = {p: () for p in HOOK_POINTS}
        self._sections: tuple[SectionEntry, ...] = ()
        self._transport: ToolEntry | None = None
        self._closed = False
        # key -> where it lives: ("tool", agent, name) / ("restriction", agent) /
        # ("guard", agent) / ("hook", point) / ("section",)
        self._where: dict[int, tuple[Any, ...]] = {}
        # Who registered what, so that closing an owner undoes its registrations, last first.
        self._owned: dict[int, list[int]] = {}
        self._owner_of: dict[int, int] = {}
        self.cell = cell
        cell.current = self._build()

    # --- publication ---------------------------------------------------------------------------

    def _build(self) -> RegistrySnapshot:
        self._seq += 1
        return RegistrySnapshot(
            seq=self._seq,
            mode=self._mode,
            global_layer=self._global,
            scopes=dict(self._scopes),
            hooks=dict(self._hooks),
            sections=self._sections,
            transport=self._transport,
            closed=self._closed,
        )

    def _publish(self) -> None:
        self.cell.current = self._build()

    def _layer(self, agent: str | None) -> Layer:
        if agent is None:
            return self._global
        return self._scopes.get(agent, EMPTY_LAYER)

    def _set_layer(self, agent: str | None, layer: Layer) -> None:
        if agent is None:
            self._global = layer
        elif layer.is_empty:
            self._scopes.pop(agent, None)
        else:
            self._scopes[agent] = layer

    # --- messages ------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, OwnerMutation):
            return self._owner_mutation(message)
        if isinstance(message, CloseOwner):
            return self._close_owner(message.owner)
        return self._apply(message)

    def _apply(self, message: Any) -> Any:
        if isinstance(message, RegisterTool):
            return self._register(message)
        if isinstance(message, RemoveEntry):
            return self._remove(message.key)
        if isinstance(message, RemoveEntries):
            return self._remove_all(message.keys)
        if isinstance(message, ReplaceTool):
            return self._replace(message)
        if isinstance(message, AddRestriction):
            return self._restrict(message)
        if isinstance(message, AddGuard):
            return self._guard(message)
        if isinstance(message, AddHook):
            return self._hook(message)
        if isinstance(message, AddSection):
            return self._section(message)
        if isinstance(message, StopRegistry):
            self._closed = True
            self._publish()
            return None
        if isinstance(message, SetTransport):
            return self._set_transport(message.definition, message.is_async)
        return super().on_receive(message)

    def _owner_mutation(self, message: OwnerMutation) -> MutationReply | list[int | str]:
        # A handle sends nothing for its owner after the owner's close (``ToolsHandle._order``).
        owner, label, mutation = message.owner, message.label, message.mutation
        keys = self._owned.setdefault(owner, [])
        replacing = isinstance(mutation, ReplaceTool)
        if replacing and mutation.key not in keys:
            raise ValueError(f"{label} did not register the tool it would replace")
        if isinstance(mutation, RegisterTools):
            outcomes = self._register_all(mutation)
            for outcome in outcomes:
                if isinstance(outcome, int):
                    keys.append(outcome)
                    self._owner_of[outcome] = owner
            return outcomes
        reply: MutationReply = self._apply(mutation)
        if replacing:
            # The new key takes the old one's place, so LIFO disposal order is kept.
            keys[keys.index(mutation.key)] = reply.key
            self._owner_of.pop(mutation.key, None)
        else:
            keys.append(reply.key)
        self._owner_of[reply.key] = owner
        return reply

    def _close_owner(self, owner: int) -> int:
        keys = self._owned.pop(owner, [])
        changes = 0
        while keys:
            key = keys.pop()
            self._owner_of.pop(key, None)
            changes += self._remove(key).changed
        return changes

    def _register(self, message: RegisterTool) -> MutationReply:
        definition = message.definition
        name: str = definition.name
        agent = message.agent
        layer = self._layer(agent)
        if name in layer.tools:
            raise ValueError(_taken(name, agent))
        key = next(self._keys)
        tools = dict(layer.tools)
        tools[name] = ToolEntry(key, definition, message.is_async, agent)
        self._set_layer(agent, Layer(tools, layer.restrictions, layer.guards))
        self._where[key] = ("tool", agent, name)
        self._publish()
        return MutationReply(key, True)

    def _register_all(self, message: RegisterTools) -> list[int | str]:
        """Register ``message.entries`` as one change, with one snapshot published: the layer
        is copied once, where registering them one by one would copy it (and publish) once per
        tool. Each entry's outcome is its key, or the error text of a name taken."""
        agent = message.agent
        layer = self._layer(agent)
        tools = dict(layer.tools)
        outcomes: list[int | str] = []
        for definition, is_async in message.entries:
            name: str = definition.name
            if name in tools:
                outcomes.append(_taken(name, agent))
                continue
            key = next(self._keys)
            tools[name] = ToolEntry(key, definition, is_async, agent)
            self._where[key] = ("tool", agent, name)
            outcomes.append(key)
        if len(tools) != len(layer.tools):
            self._set_layer(agent, Layer(tools, layer.restrictions, layer.guards))
            self._publish()
        return outcomes

    def _replace(self, message: ReplaceTool) -> MutationReply:
        where = self._where.get(message.key)
        name: str = message.definition.name
        if where is not None and where[0] != "tool":
            # Still registered, but not a tool: "no longer registered" would send the caller
            # looking for who disposed it.
            raise ValueError(
                f'tool "{name}" cannot be replaced: replace() takes the disposer of a tool, '
                f"and this one disposes a {where[0]}"
            )
        if where is None:
            raise ValueError(f'tool "{name}" cannot be replaced: it is no longer registered')
        agent = where[1]
        if where[2] != name:
            raise ValueError(f'tool "{where[2]}" can only be replaced by a tool of the same name')
        layer = self._layer(agent)
        key = next(self._keys)
        tools = dict(layer.tools)
        tools[name] = ToolEntry(key, message.definition, message.is_async, agent)
        self._set_layer(agent, Layer(tools, layer.restrictions, layer.guards))
        del self._where[message.key]
        self._where[key] = ("tool", agent, name)
        self._publish()
        return MutationReply(key, True)

    def _restrict(self, message: AddRestriction) -> MutationReply:
        if message.agent is None:
            raise ValueError(
                "tools.restrict() requires a scoped context (an agent scope handle): a "
                "context-global restriction would mask every agent — deny the tool for the "
                "intended agent instead"
            )
        listed = [*(message.allow or ()), *(message.deny or ())]
        if self._mode != "native" and RUN_CODE in listed:
            raise ValueError(_RESERVED_RESTRICT)
        known = self._global.tools
        unknown = list(dict.fromkeys(n for n in listed if n not in known))
        if unknown:
            known_text = ", ".join(sorted(known)) or "(none)"
            if len(unknown) == 1:
                head = f'unknown global tool "{unknown[0]}"'
            else:
                head = "unknown global tools " + ", ".join(f'"{n}"' for n in unknown)
            raise ValueError(f"tools.restrict() names {head}; known global tools: {known_text}")
        key = next(self._keys)
        layer = self._layer(message.agent)
        restriction = Restriction(
            key,
            frozenset(message.allow) if message.allow is not None else None,
            frozenset(message.deny) if message.deny is not None else None,
        )
        self._set_layer(
            message.agent, Layer(layer.tools, (*layer.restrictions, restriction), layer.guards)
        )
        self._where[key] = ("restriction", message.agent)
        self._publish()
        return MutationReply(key, True)

    def _guard(self, message: AddGuard) -> MutationReply:
        key = next(self._keys)
        layer = self._layer(message.agent)
        table = layer.guards
        generation = table.generation if table.entries else next(self._generations)
        guards = GuardTable((*table.entries, (key, message.fn)), generation)
        self._set_layer(message.agent, Layer(layer.tools, layer.restrictions, guards))
        self._where[key] = ("guard", message.agent)
        self._publish()
        return MutationReply(key, False)

    def _hook(self, message: AddHook) -> MutationReply:
        if message.point not in self._hooks:
            raise ValueError(f"unknown hook point {message.point!r}")
        key = next(self._keys)
        entry = HookEntry(key, message.fn, message.agent)
        current = self._hooks[message.point]
        self._hooks[message.point] = (entry, *current) if message.prepend else (*current, entry)
        self._where[key] = ("hook", message.point)
        self._publish()
        return MutationReply(key, False)

    def _section(self, message: AddSection) -> MutationReply:
        key = next(self._keys)
        entry = SectionEntry(key, message.name, message.order, message.text, message.agent)
        self._sections = (*self._sections, entry)
        self._where[key] = ("section",)
        self._publish()
        return MutationReply(key, False)

    def _set_transport(self, definition: Any, is_async: bool) -> MutationReply:
        key = next(self._keys)
        self._transport = ToolEntry(key, definition, is_async, None)
        self._publish()
        return MutationReply(key, True)

    def _remove(self, key: int) -> MutationReply:
        owner = self._owner_of.pop(key, None)
        if owner is not None:
            self._owned[owner].remove(key)
        if key not in self._where:
            return MutationReply(key, False)
        changed = self._unlink(key)
        self._publish()
        return MutationReply(key, changed)

    def _remove_all(self, keys: tuple[int, ...]) -> bool:
        """Remove ``keys`` as one change, with one snapshot published: each layer that loses
        tools is rebuilt once, where removing them one by one would copy the layer (and
        publish) once per tool, time in the square of their number."""
        doomed = set(keys)
        owners = {self._owner_of.pop(key) for key in keys if key in self._owner_of}
        for owner in owners:
            self._owned[owner] = [key for key in self._owned[owner] if key not in doomed]
        tools_of: dict[str | None, set[int]] = {}
        found = changed = False
        for key in keys:
            where = self._where.get(key)
            if where is None:
                continue
            found = True
            if where[0] == "tool":
                del self._where[key]
                tools_of.setdefault(where[1], set()).add(key)
                changed = True
            else:
                changed = self._unlink(key) or changed
        for agent, gone in tools_of.items():
            layer = self._layer(agent)
            tools = {n: e for n, e in layer.tools.items() if e.key not in gone}
            self._set_layer(agent, Layer(tools, layer.restrictions, layer.guards))
        if found:
            self._publish()
        return changed

    def _unlink(self, key: int) -> bool:
        """Take registration ``key`` (known to ``_where``) out of its place, unpublished;
        whether that changed what a tool list shows."""
        where = self._where.pop(key)
        kind = where[0]
        changed = False
        if kind == "tool":
            agent = where[1]
            layer = self._layer(agent)
            tools = {n: e for n, e in layer.tools.items() if e.key != key}
            self._set_layer(agent, Layer(tools, layer.restrictions, layer.guards))
            changed = True
        elif kind == "restriction":
            agent = where[1]
            layer = self._layer(agent)
            restrictions = tuple(r for r in layer.restrictions if r.key != key)
            self._set_layer(agent, Layer(layer.tools, restrictions, layer.guards))
            changed = True
        elif kind == "guard":
            agent = where[1]
            layer = self._layer(agent)
            entries = tuple(g for g in layer.guards.entries if g[0] != key)
            guards = GuardTable(entries, layer.guards.generation) if entries else EMPTY_GUARDS
            self._set_layer(agent, Layer(layer.tools, layer.restrictions, guards))
        elif kind == "hook":
            point = where[1]
            self._hooks[point] = tuple(h for h in self._hooks[point] if h.key != key)
        else:
            self._sections = tuple(s for s in self._sections if s.key != key)
        return changed


def _taken(name: str, agent: str | None) -> str:
    """Why a tool named ``name`` cannot be registered in ``agent``'s layer: one has the name."""
    if agent is None:
        return (
            f'tool "{name}" is already registered (for a per-agent variant, register '
            "through that agent's scope handle, system.agent(key).tools, instead)"
        )
    return f'tool "{name}" is already registered in this scope'
