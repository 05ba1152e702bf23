"""JSON equality of whole values, for ``uniqueItems``: ``1`` equals ``1.0``, ``True`` never
equals ``1``, objects are equal whatever the order of their keys.

Each value gets a hashable key that is equal exactly for JSON-equal values, so finding a
repeat is one pass over the items. The key is built by an explicit work-stack loop (no
recursion), as every walk of argument values is, and stays flat however deep the value: a
container's key is its number in a table shared by the items being compared, since hashing
and comparing nested tuples would recurse.
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict, FrozenList

__all__ = ["first_json_repeat", "json_key"]


class _Marker:
    """Tags the keys of booleans, arrays and objects; equal only to itself."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


_BOOLEAN: Final = _Marker("boolean")
_ARRAY: Final = _Marker("array")
_OBJECT: Final = _Marker("object")
_CONTAINER: Final = _Marker("container")

# Python's own equality already is JSON equality for these: 1 == 1.0 with equal hashes, and a
# string never equals a number. Booleans are tagged, since True == 1 in Python.
_PLAIN_SCALARS: Final = (str, int, float, type(None))


def _frame(value: Any) -> list[Any] | None:
    """A work-stack frame for a JSON container, ``None`` for anything else:
    [members, is object, keys of the members so far, name of the member being keyed]."""
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return [iter(value.items()), True, [], None]
    if kind is list or kind is FrozenList:
        return [iter(value), False, [], None]
    return None


def json_key(value: Any, table: dict[Any, int]) -> Any:
    """A hashable key, equal for two values keyed with the same ``table`` exactly when they are
    equal as JSON. A value that is not JSON data keys by its own equality (``TypeError`` if it
    is unhashable)."""
    kind = type(value)
    if kind is bool:
        return (_BOOLEAN, value)
    root = _frame(value)
    if root is None:
        return value
    frames = [root]
    while True:
        frame = frames[-1]
        is_object = frame[1]
        keys: list[Any] = frame[2]
        for entry in frame[0]:
            name, item = entry if is_object else (None, entry)
            inner = _frame(item)
            if inner is None:
                key = (_BOOLEAN, item) if type(item) is bool else item
                keys.append((name, key) if is_object else key)
                continue
            frame[3] = name
            frames.append(inner)
            break
        else:
            frames.pop()
            shape = (_OBJECT, frozenset(keys)) if is_object else (_ARRAY, tuple(keys))
            done = (_CONTAINER, table.setdefault(shape, len(table)))
            if not frames:
                return done
            parent = frames[-1]
            parent[2].append((parent[3], done) if parent[1] else done)


def first_json_repeat(items: Any) -> tuple[int, int] | None:
    """The indexes of the first item equal (as JSON) to an earlier one, and of that earlier
    one: ``(earlier, later)``; ``None`` when the items are unique or cannot all be keyed."""
    seen: dict[Any, int] = {}
    table: dict[Any, int] = {}
    try:
        for index, item in enumerate(items):
            earlier = seen.setdefault(
                item if type(item) in _PLAIN_SCALARS else json_key(item, table), index
            )
            if earlier != index:
                return earlier, index
    except TypeError:
        return None
    return None
