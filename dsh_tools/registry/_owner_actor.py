"""``OwnerActor`` and ``ScopeActor``: who registered what, so ``close()`` can undo it (LIFO).

A plugin owner writes the global layer; an agent scope writes its agent's layer. Both forward
each mutation to the ``RegistryActor`` and remember its key; closing disposes every remembered
registration, last first, and refuses later registrations.
"""

from __future__ import annotations

from typing import Any

import pykka

from ..actors._protocol import CloseOwner, MutationReply, OwnerMutation, RemoveEntry, ReplaceTool

__all__ = ["OwnerActor", "ScopeActor"]


class OwnerActor(pykka.ThreadingActor):
    """Forwards mutations to the registry and keeps their keys for LIFO disposal."""

    use_daemon_thread = True  # a forgotten stop() must not keep the process alive

    def __init__(self, registry: pykka.ActorRef[Any], label: str, agent: str | None) -> None:
        super().__init__()
        self._registry = registry
        self.label = label
        self.agent = agent
        self._keys: list[int] = []
        self._closed = False

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, OwnerMutation):
            if self._closed:
                raise RuntimeError(f"{self.label} is closed")
            mutation = message.mutation
            if isinstance(mutation, ReplaceTool) and mutation.key not in self._keys:
                raise ValueError(f"{self.label} did not register the tool it would replace")
            reply: MutationReply = self._registry.ask(mutation, block=True)
            if isinstance(mutation, ReplaceTool):
                # The new key takes the old one's place, so LIFO disposal order is kept.
                self._keys[self._keys.index(mutation.key)] = reply.key
            else:
                self._keys.append(reply.key)
            return reply
        if isinstance(message, RemoveEntry):
            reply = self._registry.ask(message, block=True)
            if message.key in self._keys:
                self._keys.remove(message.key)
            return reply
        if isinstance(message, CloseOwner):
            self._closed = True
            changes = 0
            while self._keys:
                key = self._keys.pop()
                removed: MutationReply = self._registry.ask(RemoveEntry(key), block=True)
                changes += removed.changed
            return changes
        return super().on_receive(message)


class ScopeActor(OwnerActor):
    """The owner of one agent's layer: local tools, masks, scoped guards, hooks and sections."""
