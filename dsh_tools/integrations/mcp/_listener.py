"""What a connection learns when it connects, and what it tells its plugin afterwards."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "ConnectionListener",
    "Listing",
    "notify_lost",
    "notify_names_freed",
    "notify_tools_changed",
]


class Listing:
    """What one successful connection learned: tools (wire form), identity, instructions."""

    __slots__ = ("capabilities", "instructions", "server_info", "tools")

    def __init__(
        self,
        tools: list[dict[str, Any]],
        server_info: dict[str, Any] | None,
        instructions: str | None,
        capabilities: dict[str, Any],
    ) -> None:
        self.tools = tools
        self.server_info = server_info
        self.instructions = instructions
        self.capabilities = capabilities


class ConnectionListener(Protocol):
    """What the connection tells its plugin; each method runs on a worker thread, in order."""

    def reconnected(self, listing: Listing) -> None: ...

    def tools_changed(self, tools: list[dict[str, Any]]) -> None: ...

    def lost(self, final: bool, reason: str) -> None: ...

    def names_freed(self) -> None: ...


def notify_lost(listener: ConnectionListener, *, final: bool, reason: str) -> None:
    listener.lost(final, reason)


def notify_tools_changed(listener: ConnectionListener, *, tools: list[dict[str, Any]]) -> None:
    listener.tools_changed(tools)


def notify_names_freed(listener: ConnectionListener) -> None:
    listener.names_freed()
