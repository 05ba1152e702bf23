"""A ``@tool`` value that ``msgspec.to_builtins`` gave up on with ``RecursionError``: it nests
past the interpreter's recursion limit, or it contains itself.

``unconvertible`` tells which, without recursion (an explicit work stack, as the lossless
walkers): a plain lossless JSON value is kept as it is, at any depth, as a ``define_tool``
body's would be; anything else raises the ``LosslessJsonError`` that names where the value
contains itself, or says it is nested too deep to convert. The walk reads what ``to_builtins``
reads: dicts, lists, tuples, sets, Struct fields and dataclass fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from ..actors import FrozenDict, FrozenList
from ._lossless import LosslessJsonError, PathNode, _fail
from ._lossless_copy import snapshot_json

__all__ = ["unconvertible"]

_PLAIN = (dict, list, FrozenDict, FrozenList)
_SCALARS = (str, int, float, bool, type(None))


def _members(value: Any) -> Iterable[tuple[str | int, Any]] | None:
    """``(path segment, member)`` of a container ``to_builtins`` converts, else ``None``."""
    if isinstance(value, dict):
        return ((key if type(key) is str else str(key), item) for key, item in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return enumerate(value)
    cls = type(value)
    if isinstance(value, msgspec.Struct):
        names = zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True)
        return ((encoded, getattr(value, name, None)) for name, encoded in names)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
    return None


def _cycle(value: Any) -> tuple[PathNode | None, bool]:
    """The path of the first member that is one of its own ancestors (``None`` if there is
    none), and whether the walk met anything ``to_builtins`` converts: a container that is not
    a plain ``dict`` or ``list``, or an object that is not a JSON scalar."""
    members = _members(value)
    if members is None:
        return None, False
    converted = type(value) not in _PLAIN
    stack: list[tuple[Iterator[tuple[str | int, Any]], PathNode, int]] = [
        (iter(members), "value", id(value))
    ]
    ancestors = {id(value)}
    while stack:
        entries, node, own = stack[-1]
        for segment, item in entries:
            inner = _members(item)
            if inner is None:
                converted = converted or type(item) not in _SCALARS
                continue
            if id(item) in ancestors:
                return (node, segment), converted
            converted = converted or type(item) not in _PLAIN
            ancestors.add(id(item))
            stack.append((iter(inner), (node, segment), id(item)))
            break
        else:
            stack.pop()
            ancestors.discard(own)
    return None, converted


def unconvertible(value: Any) -> Any:
    """``value`` itself when it is lossless JSON; else ``LosslessJsonError``: ``<path> is
    cycle``, the problem of a plain value (``<path> is float (NaN)``), or ``value is nested too
    deep to convert``."""
    try:
        snapshot_json(value)
    except LosslessJsonError as exc:
        problem = exc
    else:
        return value
    node, converted = _cycle(value)
    if node is not None:
        raise _fail(node, "cycle") from None
    if not converted:
        raise problem  # plain dicts and lists: nothing to convert, the problem is this one
    raise LosslessJsonError("value", "nested too deep to convert")
