"""How a tool makes its body's value canonical, kept for the values put in its place.

A ``@tool`` body may return a Struct, a dataclass, an Enum or a tuple, and a ``define_tool``
body with an ``output_type`` Struct that Struct: their execute converts it to JSON data before
the output contract sees it. A post-execute hook's ``Accept(value=...)`` and an execute
wrapper's own ``ToolExecutionSuccess`` never pass through that execute, so the conversion is
recorded here, by the execute it belongs to, and ``replacement_value`` applies it to them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..actors import ToolOutputError
from ._definition import ToolDefinition
from ._lossless import LosslessJsonError

__all__ = ["converts_values", "replacement_value"]

_CONVERTERS: weakref.WeakKeyDictionary[Callable[..., Any], Callable[[Any], Any]] = (
    weakref.WeakKeyDictionary()
)


def converts_values(execute: Callable[..., Any], convert: Callable[[Any], Any]) -> None:
    """Record that ``execute`` makes its body's value canonical with ``convert`` (which may
    raise ``LosslessJsonError`` for a value that contains itself)."""
    _CONVERTERS[execute] = convert


def replacement_value(defn: ToolDefinition, tool: str, value: Any) -> Any:
    """``value``, put in place of the body's by a post-execute hook (``Accept(value=...)``) or
    an execute wrapper (a ``ToolExecutionSuccess`` of its own), made canonical as the body's
    own value is, so a hook may hand back what the body would have returned. A tool whose
    execute converts nothing takes it as it is. ``ToolOutputError`` for ``tool`` when
    ``value`` contains itself."""
    try:
        convert = _CONVERTERS.get(defn.execute)
    except TypeError:  # an execute that cannot be weakly referenced was never recorded
        return value
    if convert is None:
        return value
    try:
        return convert(value)
    except LosslessJsonError as exc:
        raise ToolOutputError(tool, [f"value is not lossless JSON: {exc}"]) from None
