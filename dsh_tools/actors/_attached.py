"""``Attached``: things attached for later, each with the function that detaches it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Attached"]

_T = TypeVar("_T")


class Attached(Generic[_T]):
    """Things attached for later (closers, callbacks), each with the function that detaches
    it. A detacher keeps its thing's key, not the thing, so a thing that refers back to what
    keeps its detacher (a pool's bound method, a plugin's ``close``) makes no reference cycle.

    Every operation is one operation on a dict, atomic as such; a caller that must check
    something before it attaches, or take everything at once against those checks, holds a
    lock of its own around both."""

    __slots__ = ("_things",)

    def __init__(self) -> None:
        self._things: dict[object, _T] = {}

    def attach(self, thing: _T) -> Callable[[], None]:
        """Attach ``thing``; the returned function detaches it (again: nothing)."""
        key = object()
        things = self._things
        things[key] = thing

        def detach() -> None:
            things.pop(key, None)

        return detach

    def now(self) -> list[_T]:
        """What is attached now, oldest first."""
        return list(self._things.values())

    def take_last(self) -> _T | None:
        """Detach the thing attached last and return it (``None`` when there is none)."""
        entry = self.take_last_entry()
        return None if entry is None else entry[1]

    def take_last_entry(self) -> tuple[object, _T] | None:
        """``take_last``, with the key that ``put_back`` takes (``None`` when there is none).
        Another thread may detach things meanwhile: the last one found may be gone before it
        is taken, or the dict may change size under its look (``RuntimeError``); either way
        this looks again, since ``None`` tells the caller nothing is left (``stop()`` would
        skip the closers still attached)."""
        things = self._things
        while things:
            try:
                key = next(reversed(things))
                return key, things.pop(key)
            except (StopIteration, KeyError, RuntimeError):  # detached meanwhile: look again
                continue
        return None

    def put_back(self, key: object, thing: _T) -> None:
        """Attach ``thing`` again under ``key`` (from ``take_last_entry``), as the last: its
        detacher detaches it as before."""
        self._things[key] = thing

    def take(self) -> list[_T]:
        """Detach everything and return it, oldest first."""
        things, self._things = self._things, {}
        return list(things.values())
