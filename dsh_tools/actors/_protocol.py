"""Internal actor messages: registry mutations and owner bookkeeping (the pool's messages live
with the pool, in ``pipeline._pool_parts``).

They are frozen msgspec Structs like the public catalog, but they are not part of the public
surface; a harness talks to the system through ``ExecuteCall`` and ``ExecuteBatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = [
    "AddGuard",
    "AddHook",
    "AddRestriction",
    "AddSection",
    "CloseOwner",
    "MutationReply",
    "OwnerMutation",
    "RegisterTool",
    "RegisterTools",
    "RemoveEntries",
    "RemoveEntry",
    "SetTransport",
    "StopRegistry",
]


class RegisterTool(msgspec.Struct, frozen=True):
    """Add a checked definition to the global layer (agent None) or to ``agent``'s layer."""

    definition: Any
    agent: str | None
    is_async: bool


class RegisterTools(msgspec.Struct, frozen=True):
    """Add checked definitions (each with whether its body is async) to one layer as one
    published change; the reply is, per definition, its key or the text of the error that kept
    it out (a name taken)."""

    entries: tuple[tuple[Any, bool], ...]
    agent: str | None


class ReplaceTool(msgspec.Struct, frozen=True):
    """Swap the tool registered under ``key`` for ``definition`` (same name, same layer) in one
    published change, so no reader ever sees the name missing."""

    key: int
    definition: Any
    is_async: bool


class AddRestriction(msgspec.Struct, frozen=True):
    """Add a visibility mask to ``agent``'s layer."""

    agent: str | None
    allow: tuple[str, ...] | None
    deny: tuple[str, ...] | None


class AddGuard(msgspec.Struct, frozen=True):
    """Add a guard to the global layer or to ``agent``'s layer."""

    fn: Callable[..., Any]
    agent: str | None


class AddHook(msgspec.Struct, frozen=True):
    """Add a listener to a hook point, scoped to ``agent`` (None = every call)."""

    point: str
    fn: Callable[..., Any]
    agent: str | None
    prepend: bool = False


class AddSection(msgspec.Struct, frozen=True):
    """Add a prompt section, scoped to ``agent`` (None = every assembly)."""

    name: str
    order: float
    text: str
    agent: str | None


class SetTransport(msgspec.Struct, frozen=True):
    """Install the reserved ``run_code`` transport (sent once by the composition root)."""

    definition: Any
    is_async: bool


class RemoveEntry(msgspec.Struct, frozen=True):
    """Remove whatever registration ``key`` names; removing twice is a no-op."""

    key: int


class RemoveEntries(msgspec.Struct, frozen=True):
    """Remove every registration ``keys`` name, in this order, as one published change; the
    reply is whether a tool went (keys removed already are skipped)."""

    keys: tuple[int, ...]


class StopRegistry(msgspec.Struct, frozen=True):
    """Mark the registry closed: later reads of prompt assembly refuse."""


class MutationReply(msgspec.Struct, frozen=True):
    """The answer to a mutation: its key and whether it emitted a ``change``."""

    key: int
    changed: bool


class OwnerMutation(msgspec.Struct, frozen=True):
    """Apply ``mutation`` for ``owner`` (the global handle, a plugin or an agent scope) and
    remember its key under that owner; ``label`` names the owner in errors."""

    mutation: Any
    owner: int
    label: str


class CloseOwner(msgspec.Struct, frozen=True):
    """Dispose everything ``owner`` registered, last first, and refuse its later mutations;
    the reply is how many of the removals emitted a ``change``."""

    owner: int
