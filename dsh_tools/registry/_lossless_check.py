"""The lossless predicate: ``is_json_value``, and its memoized form for one validation."""

from __future__ import annotations

from typing import Any

from ..actors import FrozenDict, FrozenList
from ._lossless import _SURROGATE, INT_MAX, INT_MIN, _float_ok, _key_problem, _scalar_problem

__all__ = ["is_json_value", "is_json_value_memo"]


def _is_json(value: Any, proven: set[int] | None) -> bool:
    """The lossless predicate. ``proven`` holds ids of containers already known to pass; the
    walk skips them, and a container root that passes is added to it."""
    t = type(value)
    if t is dict or t is FrozenDict:
        is_dict = True
    elif t is list or t is FrozenList:
        is_dict = False
    else:
        return _scalar_problem(value) is None
    if proven is not None and id(value) in proven:
        return True
    # Flat pass first: most containers hold scalars and already-proven children only.
    for slot, item in value.items() if is_dict else enumerate(value):
        if is_dict and type(slot) is not str:
            return False
        ti = type(item)
        if ti is str:
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return False
        elif ti is int:
            if not INT_MIN <= item <= INT_MAX:
                return False
        elif ti is bool or item is None:
            pass
        elif ti is float:
            if not _float_ok(item):
                return False
        elif (
            (ti is dict or ti is FrozenDict or ti is list or ti is FrozenList)
            and proven is not None
            and id(item) in proven
        ):
            pass
        else:
            break
    else:
        if is_dict:
            for slot in value:
                if not slot.isascii() and _SURROGATE.search(slot) is not None:
                    return False
        if proven is not None:
            proven.add(id(value))
        return True
    stack: list[list[Any]] = [
        [iter(value.items()) if is_dict else enumerate(value), is_dict, id(value)]
    ]
    ancestors = {id(value)}
    while stack:
        entry = stack[-1]
        descended = False
        for slot, item in entry[0]:
            if (
                entry[1]
                and (type(slot) is not str or not slot.isascii())
                and _key_problem(slot) is not None
            ):
                return False
            ti = type(item)
            if ti is str:
                if item.isascii() or _SURROGATE.search(item) is None:
                    continue
                return False
            if ti is int:
                if INT_MIN <= item <= INT_MAX:
                    continue
                return False
            if ti is bool or item is None:
                continue
            if ti is float:
                if _float_ok(item):
                    continue
                return False
            if ti is dict or ti is FrozenDict:
                child_is_dict = True
            elif ti is list or ti is FrozenList:
                child_is_dict = False
            else:
                return False
            item_id = id(item)
            if proven is not None and item_id in proven:
                continue
            if item_id in ancestors:
                return False
            ancestors.add(item_id)
            stack.append(
                [iter(item.items()) if child_is_dict else enumerate(item), child_is_dict, item_id]
            )
            descended = True
            break
        if not descended:
            stack.pop()
            ancestors.discard(entry[2])
    if proven is not None:
        proven.add(id(value))
    return True


def is_json_value(value: Any) -> bool:
    """Whether ``value`` is lossless JSON. Total: never raises, never invokes user code."""
    try:
        return _is_json(value, None)
    except Exception:  # e.g. a container resized by another thread while being read
        return False


def is_json_value_memo(value: Any, proven: set[int]) -> bool:
    """``is_json_value`` sharing a memo of containers already proven within one validation."""
    try:
        return _is_json(value, proven)
    except Exception:
        return False
