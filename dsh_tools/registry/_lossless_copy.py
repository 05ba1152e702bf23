"""The lossless copy walkers: ``snapshot_json`` (validate and deep-freeze) and ``thaw`` (validate
and copy back to plain ``dict``/``list``), each source container read exactly once.

Already-frozen input is copied like plain input. A ``FrozenDict`` or ``FrozenList`` proves nothing
about its contents (anyone can build ``FrozenList([float("nan")])``, and ``dict.__setitem__`` still
writes into a ``FrozenDict``), so reusing one without a full walk would not be provably safe, and
after a full walk the copy is nearly free.
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._lossless import (
    _SURROGATE,
    _TYPE_NAME,
    INT_MAX,
    INT_MIN,
    PathNode,
    _fail,
    _float_ok,
    _key_problem,
    _scalar_problem,
)

__all__ = ["snapshot_json", "thaw"]

_dict_set: Final = dict.__setitem__
_list_set: Final = list.__setitem__


def _copy_tree(value: Any, root: PathNode, frozen: bool, top: Any = None) -> Any:
    """Validate ``value`` and copy it; containers become frozen when ``frozen`` is true.

    Each source container is read exactly once (one C-level copy); the walk then checks and
    completes the private copy in place, so what is returned is exactly what was checked.
    ``top`` is the root's copy when the caller already made it.
    """
    t = type(value)
    if t is dict or t is FrozenDict:
        if top is None:
            top = FrozenDict(value) if frozen else dict(value)
        top_is_dict = True
    elif t is list or t is FrozenList:
        if top is None:
            top = FrozenList(value) if frozen else list(value)
        top_is_dict = False
    else:
        problem = _scalar_problem(value)
        if problem is not None:
            raise _fail(root, problem)
        return value

    result = top
    # Stack entries: [iterator over the copy, the copy, is_dict, path node, source id].
    stack: list[list[Any]] = [
        [iter(top.items()) if top_is_dict else enumerate(top), top, top_is_dict, root, id(value)]
    ]
    ancestors = {id(value)}
    while stack:
        entry = stack[-1]
        descended = False
        for slot, item in entry[0]:
            if entry[2] and (type(slot) is not str or not slot.isascii()):
                problem = _key_problem(slot)
                if problem is not None:
                    raise _fail(entry[3], problem)
            ti = type(item)
            if ti is str:
                if item.isascii() or _SURROGATE.search(item) is None:
                    continue
                raise _fail((entry[3], slot), "str (lone surrogate)")
            if ti is int:
                if INT_MIN <= item <= INT_MAX:
                    continue
                raise _fail((entry[3], slot), "int (out of range)")
            if ti is bool or item is None:
                continue
            if ti is float:
                if _float_ok(item):
                    continue
                raise _fail((entry[3], slot), str(_scalar_problem(item)))
            if ti is dict or ti is FrozenDict:
                child: Any = FrozenDict(item) if frozen else dict(item)
                child_is_dict = True
            elif ti is list or ti is FrozenList:
                child = FrozenList(item) if frozen else list(item)
                child_is_dict = False
            else:
                raise _fail((entry[3], slot), str(_TYPE_NAME(ti)))
            item_id = id(item)
            if item_id in ancestors:
                raise _fail((entry[3], slot), "cycle")
            if entry[2]:
                _dict_set(entry[1], slot, child)
            else:
                _list_set(entry[1], slot, child)
            ancestors.add(item_id)
            stack.append(
                [
                    iter(child.items()) if child_is_dict else enumerate(child),
                    child,
                    child_is_dict,
                    (entry[3], slot),
                    item_id,
                ]
            )
            descended = True
            break
        if not descended:
            stack.pop()
            ancestors.discard(entry[4])
    return result


def _flat_child(item: Any) -> Any:
    """A frozen copy of ``item`` when it is a container of accepted scalars, else ``None``.

    An object's keys are checked first, then its values as an array's items are.
    """
    ti = type(item)
    child: Any
    if ti is dict or ti is FrozenDict:
        child = FrozenDict(item)
        for key in child:
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
                return None
        members = child.values()
    elif ti is list or ti is FrozenList:
        child = members = FrozenList(item)
    else:
        return None
    for member in members:
        tm = type(member)
        if tm is str:
            if not member.isascii() and _SURROGATE.search(member) is not None:
                return None
        elif tm is int:
            if not INT_MIN <= member <= INT_MAX:
                return None
        elif tm is bool or member is None:
            pass
        elif tm is float:
            if not _float_ok(member):
                return None
        else:
            return None
    return child


def snapshot_json(value: Any, root: str = "value") -> Any:
    """Validate ``value`` as lossless JSON and return a deep-frozen copy of it.

    Objects become ``FrozenDict`` and arrays ``FrozenList``; scalars are returned as they are.
    The caller's value is only read, never retained or changed. Raises ``LosslessJsonError``
    naming the path (rooted at ``root``) and the offending type.
    """
    t = type(value)
    # Fast path: two levels of scalars (most arguments, values and content blocks). Anything
    # else, including every problem, continues in the general walker from the same root copy;
    # children replaced here are flat private copies, which cannot take part in a cycle.
    # The object and array loops are written out separately on purpose: one loop behind an
    # ``is_dict`` test costs about 4% per call on this path.
    if t is dict or t is FrozenDict:
        copy: Any = FrozenDict(value)
        for key, item in copy.items():
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
                break
            ti = type(item)
            if ti is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    break
            elif ti is int:
                if not INT_MIN <= item <= INT_MAX:
                    break
            elif ti is bool or item is None:
                pass
            elif ti is float:
                if not _float_ok(item):
                    break
            else:
                child = _flat_child(item)
                if child is None:
                    break
                _dict_set(copy, key, child)
        else:
            return copy
        return _copy_tree(value, root, True, copy)
    if t is list or t is FrozenList:
        copy = FrozenList(value)
        for index, item in enumerate(copy):
            ti = type(item)
            if ti is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    break
            elif ti is int:
                if not INT_MIN <= item <= INT_MAX:
                    break
            elif ti is bool or item is None:
                pass
            elif ti is float:
                if not _float_ok(item):
                    break
            else:
                child = _flat_child(item)
                if child is None:
                    break
                _list_set(copy, index, child)
        else:
            return copy
        return _copy_tree(value, root, True, copy)
    if t is str:
        if value.isascii() or _SURROGATE.search(value) is None:
            return value
        raise _fail(root, "str (lone surrogate)")
    if t is int:  # a tool's usual value; out of range, it is named by the general walk
        if INT_MIN <= value <= INT_MAX:
            return value
    elif t is bool or value is None:
        return value
    return _copy_tree(value, root, True)


def thaw(value: Any, root: str = "value") -> Any:
    """Return a fresh plain ``dict``/``list`` copy of a frozen or plain lossless JSON tree.

    The walk validates as it copies (it is the same walker as ``snapshot_json``), so a value
    that is not lossless JSON raises ``LosslessJsonError`` instead of looping on a cycle.
    """
    t = type(value)
    # Fast path: a scalar accepted as it is (a tool's usual value); anything else, every
    # problem included, is the general walk's.
    if t is int:
        if INT_MIN <= value <= INT_MAX:
            return value
    elif t is str:
        if value.isascii():
            return value
    elif t is bool or value is None:
        return value
    return _copy_tree(value, root, False)
