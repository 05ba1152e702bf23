"""Frozen JSON containers: ``FrozenDict`` and ``FrozenList``.

They subclass ``dict`` and ``list`` so that they compare equal to plain values and encode with
msgspec as they are, while every mutator raises ``TypeError``. The lossless walker
(``dsh_tools.registry.snapshot_json``) is the only producer of deep-frozen trees; these classes
only refuse mutation.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList"]


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable")


class FrozenDict(dict[str, Any]):
    """A read-only ``dict``: equal to the plain dict with the same items, hashable by identity."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A read-only ``list``: equal to the plain list with the same items, hashable by identity."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    clear = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    reverse = _refuse
    sort = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)

    def __repr__(self) -> str:
        return f"FrozenList({list.__repr__(self)})"

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))


EMPTY_LIST: FrozenList = FrozenList()
EMPTY_DICT: FrozenDict = FrozenDict()
