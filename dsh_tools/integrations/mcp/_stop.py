"""What a tool system's ``stop()`` does to its MCP plugins: it closes them together.

``stop()`` runs what is attached to it one after another, and closing a stdio server that
lingers after its input ends waits out the SDK's grace (2 s) before it terminates it, twice
that for one that ignores ``SIGTERM``: one after another, a harness with ten such servers
would wait up to forty seconds for its stop. So the first plugin ``stop()`` comes to closes
every plugin of the system still open then, each on a thread of its own, and returns once all
are closed; the others' turns find them closed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from ...actors import message_of
from ...actors._logging import get_logger

if TYPE_CHECKING:
    from ..._system import ToolSystem
    from ._plugin import McpPlugin

__all__ = ["close_at_stop"]

_log = get_logger("dsh_tools.mcp")

_lock = threading.Lock()
_open: weakref.WeakKeyDictionary[ToolSystem, set[McpPlugin]] = weakref.WeakKeyDictionary()
"""The plugins of each tool system that its ``stop()`` is to close."""
_stopping: weakref.WeakSet[ToolSystem] = weakref.WeakSet()
"""The tool systems whose ``stop()`` is closing their plugins: a plugin closed then leaves
its turn attached (a no-op by then) rather than detach it while ``stop()`` takes the turns."""


def close_at_stop(system: ToolSystem, plugin: McpPlugin) -> Callable[[], None]:
    """Have ``system.stop()`` close ``plugin``, together with the system's other open plugins
    (``TypeError`` or ``RuntimeError`` as ``on_stop`` raises them); returns the function that
    undoes this, for a plugin closed earlier by itself."""
    with _lock:
        _open.setdefault(system, set()).add(plugin)
    try:
        detach = system.on_stop(partial(_close_together, system, plugin))
    except BaseException:
        _forget(system, plugin)
        raise

    def undo() -> None:
        with _lock:
            stopping = system in _stopping
        if not stopping:
            detach()
        _forget(system, plugin)

    return undo


def _forget(system: ToolSystem, plugin: McpPlugin) -> None:
    with _lock:
        plugins = _open.get(system)
        if plugins is not None:
            plugins.discard(plugin)


def _close_together(system: ToolSystem, plugin: McpPlugin) -> None:
    """``plugin.close()``, with every other plugin of ``system`` still open closed meanwhile on
    threads of their own; returns once all of them are closed."""
    with _lock:
        _stopping.add(system)
        others = [other for other in _open.get(system, ()) if other is not plugin]
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
            "closing an MCP plugin at stop() failed", server=plugin.name, error=message_of(exc)
        )
