"""Plain defaults that msgspec leaves out of the dataclasses it builds, put in.

``msgspec.convert`` (and decoding) builds a dataclass without calling its ``__init__``, and
leaves a field the arguments omit, whose default is a plain value (not a factory), out of the
instance's ``__dict__``: reading the field still gives the default (the class attribute), but
whatever reads the instance's ``__dict__`` does not see it. ``msgspec.to_builtins`` and
``msgspec.json.encode`` are among those, so a ``@tool`` body returning (a part of) its
arguments gave the model ``{"name": "a"}`` for ``Item(name="a", qty=1)``; ``vars(item)``,
``copy.replace`` and pickling see the same hole.

``defaults_filler(type)`` walks a converted value along its type and sets each such missing
default on each dataclass instance, as its ``__init__`` would have. It exists only for types
that hold a dataclass with a plain default somewhere; every other tool pays nothing. Slotted
dataclasses, Structs and attrs classes are built with every field set, and need nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from msgspec import inspect as mi

from ._typed_losses import inner_types

__all__ = ["DefaultsFiller", "defaults_filler"]

DefaultsFiller = Callable[[Any], None]
"""``fill(value)``: set the missing plain defaults of every dataclass instance in ``value``
(converted to the type the filler was made for)."""


def defaults_filler(annotation: Any) -> DefaultsFiller | None:
    """The filler for values converted to ``annotation``, or ``None`` when no part of the type
    is a dataclass (with a ``__dict__``) that has a field with a plain default."""
    try:
        info = mi.type_info(annotation)
    except (TypeError, ValueError):
        return None
    compiled: dict[int, _Cell] = {}
    cell = _compile(info, compiled)
    return cell.fill


class _Cell:
    """The filler of one part of the type; ``fill`` stays ``None`` when the part needs none.
    A recursive type refers to its own cell, which is complete once the compile returns."""

    __slots__ = ("fill",)

    def __init__(self) -> None:
        self.fill: DefaultsFiller | None = None


def _compile(t: mi.Type, compiled: dict[int, _Cell]) -> _Cell:
    known = compiled.get(id(t))
    if known is not None:
        return known
    cell = compiled[id(t)] = _Cell()
    if not _holds(t, set()):
        return cell
    if isinstance(t, mi.Metadata):
        cell.fill = _compile(t.type, compiled).fill
    elif isinstance(t, mi.DataclassType | mi.StructType | mi.TypedDictType | mi.NamedTupleType):
        fields = [(f.name, _compile(f.type, compiled)) for f in t.fields]
        defaults = _plain_defaults(t.cls) if isinstance(t, mi.DataclassType) else []
        if isinstance(t, mi.TypedDictType):
            cell.fill = _fields_filler(dict, fields, _item)
        elif defaults:
            cell.fill = _dataclass_filler(t.cls, defaults, fields)
        else:
            cell.fill = _fields_filler(t.cls, fields, getattr)
    elif isinstance(t, mi.UnionType):
        cell.fill = _each_of([_compile(member, compiled) for member in t.types])
    elif isinstance(t, mi.TupleType):
        positions = [(i, _compile(item, compiled)) for i, item in enumerate(t.item_types)]
        cell.fill = _fields_filler(tuple, positions, _item)
    elif isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        cell.fill = _items_filler(_compile(t.item_type, compiled))
    elif isinstance(t, mi.DictType):  # keys are text: no dataclass among them
        cell.fill = _values_filler(_compile(t.value_type, compiled))
    return cell


def _holds(t: mi.Type, seen: set[int]) -> bool:
    """Whether ``t`` is or holds a dataclass with a plain default (a fresh ``seen`` per
    question: an answer found inside a cycle is not final for the cycle's other parts)."""
    if id(t) in seen:
        return False
    seen.add(id(t))
    if isinstance(t, mi.DataclassType) and _plain_defaults(t.cls):
        return True
    return any(_holds(part, seen) for part in inner_types(t))


def _plain_defaults(cls: type) -> list[tuple[str, Any]]:
    """The fields of dataclass ``cls`` with a plain default that its instances keep in their
    ``__dict__`` (a slot is set as the instance is built; an attrs class sets every field)."""
    if not dataclasses.is_dataclass(cls):
        return []
    slots: set[str] = set()
    for base in cls.__mro__:
        declared = base.__dict__.get("__slots__", ())
        slots.update((declared,) if isinstance(declared, str) else declared)
    if "__dict__" not in dir(cls) and slots:
        return []
    return [
        (f.name, f.default)
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING and f.name not in slots
    ]


def _item(container: Any, key: Any) -> Any:
    return container[key]


def _dataclass_filler(
    cls: type, defaults: list[tuple[str, Any]], fields: list[tuple[str, _Cell]]
) -> DefaultsFiller:
    def fill(value: Any) -> None:
        if not isinstance(value, cls):
            return
        own = value.__dict__
        for name, default in defaults:
            if name not in own:
                own[name] = default  # what ``__init__`` sets (the same object, as there)
        for name, sub in fields:
            inner = sub.fill
            if inner is not None:
                inner(getattr(value, name))

    return fill


def _fields_filler(
    cls: type, fields: list[tuple[Any, _Cell]], get: Callable[[Any, Any], Any]
) -> DefaultsFiller | None:
    # Cells of a recursive type are read when the fill runs, not now: they may not be done.
    if not fields:
        return None

    def fill(value: Any) -> None:
        if not isinstance(value, cls):
            return
        for key, sub in fields:
            inner = sub.fill
            if inner is not None:
                try:
                    member = get(value, key)
                except (KeyError, IndexError, AttributeError):  # an absent optional field
                    continue
                inner(member)

    return fill


def _each_of(members: list[_Cell]) -> DefaultsFiller:
    def fill(value: Any) -> None:
        # Each member's filler looks at the value's type first, so at most the matching
        # members act on it.
        for member in members:
            inner = member.fill
            if inner is not None:
                inner(value)

    return fill


def _items_filler(item: _Cell) -> DefaultsFiller:
    def fill(value: Any) -> None:
        inner = item.fill
        if inner is None or isinstance(value, str | bytes | dict):
            return
        for member in value:
            inner(member)

    return fill


def _values_filler(value_cell: _Cell) -> DefaultsFiller:
    def fill(value: Any) -> None:
        if not isinstance(value, dict):
            return
        inner = value_cell.fill
        if inner is not None:
            for member in value.values():
                inner(member)

    return fill
