"""Owner handles: a plugin's or an agent scope's registrations, disposed together on close.

The system builds each handle's ``ToolsHandle`` (writing through a fresh owner) and passes it
in with the callables that close the owner, so this module needs nothing from the system.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from .registry import ToolsHandle

__all__ = ["AgentScope", "OwnerCloser", "PluginHandle"]

OwnerCloser = Callable[[int, ToolsHandle], None]
"""Dispose what ``owner`` registered through ``handle`` (``ToolSystem._close_owner``)."""


class _OwnerHandle:
    """What plugins and agent scopes share: an owner and the ToolsHandle writing through it,
    so that ``close()`` can dispose their registrations, last first."""

    def __init__(self, owner: int, tools: ToolsHandle, close_owner: OwnerCloser) -> None:
        self.closed = False
        self._owner = owner
        self._close_owner = close_owner
        self.tools = tools

    def close(self) -> None:
        """Dispose everything registered through this handle, in reverse order."""
        if self.closed:
            return
        self.closed = True
        self._forget()
        self._close_owner(self._owner, self.tools)

    def _forget(self) -> None:
        """Drop the system's reference to this handle (subclasses)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PluginHandle(_OwnerHandle):
    """An owner of global registrations: ``close()`` disposes them, last first."""

    def __init__(self, name: str, owner: int, tools: ToolsHandle, close_owner: OwnerCloser) -> None:
        self.name = name
        super().__init__(owner, tools, close_owner)


class AgentScope(_OwnerHandle):
    """One agent's layer: local tools, masks, guards and hooks scoped to ``key``; ``close()``
    disposes them (LIFO)."""

    def __init__(
        self,
        key: str,
        owner: int,
        tools: ToolsHandle,
        close_owner: OwnerCloser,
        *,
        forget: Callable[[AgentScope], None],
        inject: Callable[[str, Any], None],
    ) -> None:
        self.key = key
        self._forget_scope = forget
        self._inject = inject
        super().__init__(owner, tools, close_owner)

    def _forget(self) -> None:
        self._forget_scope(self)

    def inject_context(self, context: Any) -> None:
        """Add a hook context for this agent: into the active batch's FIFO, or straight into
        the session as a ``user/message`` when no batch is running."""
        self._inject(self.key, context)
