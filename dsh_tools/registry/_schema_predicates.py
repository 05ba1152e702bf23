"""What the schema walks share: which values count as schema records, maps and arrays, the scalar
types of the subset, and type-aware JSON equality of scalars (for ``enum`` and ``const``).
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._lossless import _SURROGATE

_SCHEMA_TYPES: Final = ("object", "array", "string", "number", "integer", "boolean", "null")
_SCALAR_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null"})
_MISSING: Final[Any] = object()


def _is_record(value: Any) -> bool:
    """An exact dict (or ``FrozenDict``) whose keys are all exact, encodable ``str``."""
    t = type(value)
    if t is not dict and t is not FrozenDict:
        return False
    for key in value:
        if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
            return False
    return True


def _is_map(value: Any) -> bool:
    """An exact dict or ``FrozenDict``, whatever its keys."""
    return type(value) is dict or type(value) is FrozenDict


def _is_array(value: Any) -> bool:
    """An exact list or ``FrozenList``."""
    return type(value) is list or type(value) is FrozenList


def _scalar_equal(a: Any, b: Any) -> bool:
    """Type-aware JSON equality of scalars: ``True`` never equals ``1``; ``1`` equals ``1.0``."""
    ta = type(a)
    tb = type(b)
    if ta is bool or tb is bool:
        return a is b
    if (ta is int or ta is float) and (tb is int or tb is float):
        return bool(a == b)
    if ta is str and tb is str:
        return bool(a == b)
    return a is None and b is None


def _in_enum(value: Any, entries: Any) -> bool:
    return any(_scalar_equal(value, entry) for entry in entries)


def _spath(node: Any) -> str:
    """Render an assertion path node: ``(parent, suffix)`` pairs under the root label."""
    suffixes: list[str] = []
    while type(node) is tuple:
        suffixes.append(node[1])
        node = node[0]
    suffixes.append(node)
    suffixes.reverse()
    return "".join(suffixes)
