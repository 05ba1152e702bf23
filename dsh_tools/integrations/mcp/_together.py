"""Closing an owner's MCP plugins together: the tool system's at ``stop()``, an agent
scope's at its ``close()``.

Both run what is attached to them one after another, and closing a stdio server that lingers
after its input ends waits out the SDK's grace (2 s) before it terminates it, twice that for
one that ignores ``SIGTERM``: one after another, a harness with ten such servers would wait up
to forty seconds. So the first plugin an owner comes to closes every plugin of that owner still
open then, each on a thread of its own, and returns once all are closed; the others' turns find
them closed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

from ...actors import message_of
from ...actors._logging import get_logger

if TYPE_CHECKING:
    from ..._handles import AgentScope
    from ..._system import ToolSystem
    from ._plugin import McpPlugin

    Owner: TypeAlias = ToolSystem | AgentScope

__all__ = ["close_together"]

_log = get_logger("dsh_tools.mcp")

Attach = Callable[[Callable[[], object]], Callable[[], None]]
"""``system.on_stop`` or ``scope.on_close``: attaches a closer, returns its detacher."""

_lock = threading.Lock()
_open: weakref.WeakKeyDictionary[Owner, set[McpPlugin]] = weakref.WeakKeyDictionary()
"""The plugins each owner is to close."""
_closing: weakref.WeakSet[Owner] = weakref.WeakSet()
"""The owners closing their plugins: a plugin closed then leaves its turn attached (a no-op by
then) rather than detach it while the owner takes the turns."""


def close_together(owner: Owner, attach: Attach, plugin: McpPlugin) -> Callable[[], None]:
    """Have ``owner`` close ``plugin`` as its closer (``attach``), together with its other open
    plugins (``TypeError`` or ``RuntimeError`` as ``attach`` raises them); returns the function
    that undoes this, for a plugin closed earlier by itself."""
    with _lock:
        _open.setdefault(owner, set()).add(plugin)
    try:
        detach = attach(partial(_close_all, owner, plugin))
    except BaseException:
        _forget(owner, plugin)
        raise

    def undo() -> None:
        with _lock:
            closing = owner in _closing
        if not closing:
            detach()
        _forget(owner, plugin)

    return undo


def _forget(owner: Owner, plugin: McpPlugin) -> None:
    with _lock:
        plugins = _open.get(owner)
        if plugins is not None:
            plugins.discard(plugin)


def _close_all(owner: Owner, plugin: McpPlugin) -> None:
    """``plugin.close()``, with every other plugin of ``owner`` still open closed meanwhile on
    threads of their own; returns once all of them are closed."""
    with _lock:
        _closing.add(owner)
        others = [other for other in _open.get(owner, ()) if other is not plugin]
    closing = [
        threading.Thread(target=_close, args=(other,), name=f"mcp-stop[{other.name}]", daemon=True)
        for other in others
    ]
    for thread in closing:
        thread.start()
    try:
        plugin.close()
    finally:
        for thread in closing:
            thread.join()


def _close(plugin: McpPlugin) -> None:
    try:
        plugin.close()
    except Exception as exc:  # as stop() logs a closer that raises
        _log.warning(
            "closing an MCP plugin together with others failed",
            server=plugin.name,
            error=message_of(exc),
        )
