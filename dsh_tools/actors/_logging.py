"""The library's loggers: structlog when the application configured it, else quiet.

A library must not print. structlog's default configuration (used until the application calls
``structlog.configure``) writes every line, debug included, to stdout; for this library that would
put failed programs' error texts, escape codes and all, into a harness's own output. So each
logger here asks, per line, whether structlog is configured:

- **configured**: the line goes through structlog's global configuration under the logger's name,
  exactly as ``structlog.get_logger(name)`` would send it (this is how tests and harnesses route
  and capture the library's lines);
- **not configured**: it goes through structlog's standard-library wrapper to the ``logging``
  logger of the same name (``dsh_tools.pipeline``, ``dsh_tools.mcp``, ...). The ``dsh_tools``
  logger carries a ``NullHandler``, so nothing appears until the application configures
  ``logging`` (``logging.basicConfig(level=logging.WARNING)`` shows warnings and failures).
  Below the stdlib logger's level a line costs one ``isEnabledFor`` check.

A line is its event text followed by its fields as ``key=value`` pairs; ``exc_info`` becomes the
stdlib record's traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping

import structlog
from structlog.typing import EventDict, WrappedLogger

__all__ = ["LibraryLogger", "get_logger"]

logging.getLogger("dsh_tools").addHandler(logging.NullHandler())


def _to_stdlib_call(
    _logger: WrappedLogger, _method: str, event_dict: EventDict
) -> tuple[tuple[str], dict[str, object]]:
    """The last processor of the quiet path: one message string, and the traceback if any."""
    exc_info = event_dict.pop("exc_info", None)
    event = str(event_dict.pop("event", ""))
    if event_dict:
        event = event + " " + " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    return (event,), {"exc_info": exc_info}


class LibraryLogger:
    """One named logger of the library; see the module docstring for where its lines go.

    Invariants: ``_structlog`` is structlog's lazy proxy for ``name`` (it reads the global
    configuration at each use), ``_stdlib`` is ``logging.getLogger(name)`` and ``_quiet`` wraps it
    with a fixed processor chain that never consults the global configuration.
    """

    __slots__ = ("_quiet", "_stdlib", "_structlog", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._structlog = structlog.get_logger(name)
        self._stdlib = logging.getLogger(name)
        self._quiet = structlog.wrap_logger(
            self._stdlib,
            processors=[_to_stdlib_call],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def _log(self, level: int, method: str, event: str, fields: Mapping[str, object]) -> None:
        if structlog.is_configured():
            getattr(self._structlog, method)(event, **fields)
        elif self._stdlib.isEnabledFor(level):
            getattr(self._quiet, method)(event, **fields)

    def debug(self, event: str, **fields: object) -> None:
        self._log(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: object) -> None:
        self._log(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: object) -> None:
        self._log(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: object) -> None:
        self._log(logging.ERROR, "error", event, fields)

    def exception(self, event: str, **fields: object) -> None:
        """An error with the exception being handled (``exc_info=True`` unless given)."""
        merged: MutableMapping[str, object] = dict(fields)
        merged.setdefault("exc_info", True)
        self._log(logging.ERROR, "error", event, merged)


def get_logger(name: str) -> LibraryLogger:
    """The library's logger called ``name`` (a ``dsh_tools.*`` name)."""
    return LibraryLogger(name)
