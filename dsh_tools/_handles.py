"""Owner handles: a plugin's or an agent scope's registrations, disposed together on close.

The system builds each handle's ``ToolsHandle`` (writing through a fresh owner, which it also
closes) and passes it in, so this module needs nothing from the system.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Self

from .actors import message_of
from .actors._attached import Attached
from .actors._logging import get_logger
from .pipeline._loop import interrupts_deferred, interrupts_held, running_loop
from .registry import ToolsHandle
from .registry._definition import accepts_positional

_log = get_logger("dsh_tools")

__all__ = ["AgentScope", "PluginHandle", "check_closer", "take_closer"]


def take_closer(closers: Attached[Callable[[], object]]) -> Callable[[], object] | None:
    """The closer attached last, detached to be run now (``None`` when none is left). A Ctrl-C
    as it is taken puts it back before ``KeyboardInterrupt`` is raised: taken but never run, it
    was lost to the close() or stop() that finishes the one cut short."""
    noted = interrupts_deferred()
    with noted:
        entry = closers.take_last_entry()
    if noted.came:
        if entry is not None:
            closers.put_back(*entry)
        raise KeyboardInterrupt
    return None if entry is None else entry[1]


def check_closer(method: str, close: object) -> None:
    """Refuse a closer that is not callable, or not without arguments, as ``method`` attaches
    it: found only when it is called, it would be a warning in the logs while what it was to
    close stays open."""
    if not callable(close):
        raise TypeError(f"{method}() takes a callable, got {type(close).__name__}")
    if not accepts_positional(close, 0):
        name = getattr(close, "__qualname__", type(close).__name__)
        raise TypeError(f"{method}() takes a callable of no arguments; {name} needs some")


class _OwnerHandle:
    """What plugins and agent scopes share: the ToolsHandle writing through their owner, so
    that ``close()`` can dispose their registrations, last first."""

    def __init__(self, tools: ToolsHandle) -> None:
        self.closed = False
        self.tools = tools
        self._on_close: Attached[Callable[[], object]] = Attached()
        # ``close()`` marks itself under this lock: no closer is attached after it looked.
        self._closing = threading.Lock()
        # Notified when a close() ends, disposed or cut short (``_await_disposal``).
        self._settled = threading.Condition(self._closing)
        # A close() that an interruption (Ctrl-C) cut short: the next close() finishes it.
        self._cut_short = False
        self._disposed = False
        self._closer: int | None = None  # the thread running close()

    def on_close(self, close: Callable[[], object]) -> Callable[[], None]:
        """Have ``close()`` call ``close`` first, the last attached first: for what lives as
        long as these registrations (an MCP plugin registered in an agent's scope, say). One
        that raises is logged and the rest still run. Returns the function that detaches it.
        ``RuntimeError`` once ``close()`` has begun: nothing would ever call ``close``;
        ``TypeError`` for a ``close`` that cannot be called without arguments."""
        check_closer("on_close", close)
        with self._closing:
            if self.closed:
                raise RuntimeError(f"{self.tools._label} is closed")
            return self._on_close.attach(close)

    def close(self) -> None:
        """Run the ``on_close`` closers, then dispose everything registered through this
        handle, in reverse order. One that a ``KeyboardInterrupt`` (or another
        ``BaseException``) cuts short leaves the handle closed to its users, and the next
        ``close()`` finishes it: the closers not yet run, then the disposal."""
        disposed = began = False
        try:
            # The marking too is in the ``try``: a Ctrl-C landing as it ends (or in it) left
            # the handle closed, not cut short and never settled, so the next close() returned
            # at once and agent(key) waited for ever.
            with self._closing:
                if self.closed and not self._cut_short:
                    return
                began = True  # first: from here on, an interruption is settled as cut short
                self.closed = True
                self._cut_short = False
                self._closer = threading.get_ident()
            while (closer := take_closer(self._on_close)) is not None:
                try:
                    closer()
                except Exception as exc:
                    _log.warning("closing a resource with its owner failed", error=message_of(exc))
            self.tools._close_owner()
            # Forgotten only now: until its registrations are gone, the system hands out no
            # fresh scope for the key, which would still see them (``_await_disposal``).
            self._forget()
            disposed = True
        finally:
            if began:
                # Not cut short itself: a Ctrl-C meanwhile is raised once this is recorded.
                with interrupts_held(), self._closing:
                    self._disposed = disposed
                    self._cut_short = not disposed
                    self._settled.notify_all()

    def _await_disposal(self) -> None:
        """Return once this closed handle's registrations are gone: wait for the ``close()``
        under way on another thread, or finish one that an interruption cut short.
        ``RuntimeError`` on the thread running that ``close()`` (in one of its closers),
        which would wait for itself, and on a thread that runs an event loop (the system's,
        where hooks and async tools run): waiting would stall that loop, and deadlock it when
        the close needs it (a closer that runs a batch, or stops an MCP session there)."""
        with self._closing:
            while not (self._disposed or self._cut_short):
                if self._closer == threading.get_ident():
                    raise RuntimeError(
                        f"{self.tools._label} is still closing: its closers run before its "
                        "registrations are disposed"
                    )
                if running_loop() is not None:
                    raise RuntimeError(
                        f"{self.tools._label} is closing on another thread, which this thread "
                        "cannot wait for: it runs an event loop (a hook's or an async tool's) "
                        "that the close may need; ask for the scope again once that close() "
                        "has returned"
                    )
                self._settled.wait()
            finish = not self._disposed
        if finish:
            self.close()

    def _forget(self) -> None:
        """Drop the system's reference to this handle (subclasses)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PluginHandle(_OwnerHandle):
    """An owner of global registrations: ``close()`` disposes them, last first."""

    def __init__(self, name: str, tools: ToolsHandle) -> None:
        self.name = name
        super().__init__(tools)


class AgentScope(_OwnerHandle):
    """One agent's layer: local tools, masks, guards and hooks scoped to ``key``; ``close()``
    disposes them (LIFO)."""

    def __init__(
        self,
        key: str,
        tools: ToolsHandle,
        *,
        forget: Callable[[AgentScope], None],
        inject: Callable[[str, Any], None],
    ) -> None:
        self.key = key
        self._forget_scope = forget
        self._inject = inject
        super().__init__(tools)

    def _forget(self) -> None:
        self._forget_scope(self)

    def inject_context(self, context: Any) -> None:
        """Add a hook context for this agent: into the active batch's FIFO, or straight into
        the session as a ``user/message`` when no batch is running. ``LosslessJsonError``
        (naming where, ``context.content[0] is float (NaN)``) for a context that is not
        lossless JSON."""
        self._inject(self.key, context)
