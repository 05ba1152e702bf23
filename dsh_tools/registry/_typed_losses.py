"""What converting ``@tool`` arguments would lose without a word, refused instead.

msgspec converts a JSON array into a ``set`` or ``frozenset`` by dropping repeated items, and
JSON object keys into ``int``, ``float``, ``Enum``... keys by overwriting when two keys convert
to the same key (``"0"`` and ``"-0"`` both become ``0``). The model was told ``uniqueItems`` and
has no way to know which of two keys won, so either loss is an argument error, worded as
msgspec words its own (``Expected ... - at `arguments.path```). So is an integer that a ``float``
parameter cannot hold exactly (past 2**53, most cannot): msgspec rounds it to the nearest float,
and the tool would run with a number the model never sent.

``losses_check`` compares the converted arguments with the arguments they came from, guided
by the argument type; it exists only for argument types that hold such parts, so every other
tool pays nothing. The items of a set that may hold such parts themselves (a ``frozenset``, a
``tuple`` or a frozen Struct holding one) are converted one by one to be paired with their raw
items, since the set keeps them in an order of its own.
"""

from __future__ import annotations

import datetime
import decimal
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec
from msgspec import inspect as mi

from ._compact_json import compact_json
from ._error_keys import render_key
from ._unique_items import first_json_repeat

__all__ = ["LossesCheck", "inner_types", "losses_check"]

LossesCheck = Callable[[Any, Any], str | None]
"""``check(arguments, converted)``: the first loss as an argument violation, or ``None``."""

_MISSING: Final = object()
_encode = msgspec.json.encode
_LONG_INTEGER: Final = re.compile(rb"(?<![.\d])\d{16}")
"""Sixteen digits that do not continue a fraction or a longer number: an integer of at least
2**53 in magnitude (9007199254740992 has sixteen) is spelt so, in JSON text."""

# A path is built lazily as (parent, segment) pairs and rendered only for a violation.
_Path = tuple[Any, str | tuple[str]] | None

_SCALARS: Final[dict[type[mi.Type], Any]] = {
    mi.StrType: str,
    mi.IntType: int,
    mi.FloatType: float,
    mi.BoolType: bool,
    mi.UUIDType: uuid.UUID,
    mi.DateTimeType: datetime.datetime,
    mi.DateType: datetime.date,
    mi.TimeType: datetime.time,
    mi.DecimalType: decimal.Decimal,
}


def _render(path: _Path) -> str:
    segments: list[str] = []
    while path is not None:
        path, segment = path
        # A dict entry's segment is its key, in a tuple of one (see ``_parts``).
        segments.append(render_key(segment[0]) if isinstance(segment, tuple) else segment)
    return "arguments" + "".join(reversed(segments))


def _bare(info: mi.Type) -> mi.Type:
    while isinstance(info, mi.Metadata):
        info = info.type
    return info


def _annotation(info: mi.Type) -> Any:
    """The annotation of a type that can be a set item or a dict key (constraints aside: the
    value already passed them), to convert one item or key alone; ``None`` for another type."""
    info = _bare(info)
    simple = _SCALARS.get(type(info))
    if simple is not None:
        return simple
    if isinstance(info, mi.NoneType):
        return None.__class__
    if isinstance(info, mi.EnumType | mi.StructType | mi.DataclassType | mi.NamedTupleType):
        return info.cls
    if isinstance(info, mi.LiteralType):
        return typing.Literal[info.values]
    inner: list[Any]
    if isinstance(info, mi.FrozenSetType | mi.VarTupleType):
        inner = [_annotation(info.item_type)]
    elif isinstance(info, mi.TupleType | mi.UnionType):
        inner = [
            _annotation(t)
            for t in (info.item_types if isinstance(info, mi.TupleType) else info.types)
        ]
    else:
        return None
    if any(part is None for part in inner):
        return None
    if isinstance(info, mi.FrozenSetType):
        return types.GenericAlias(frozenset, (inner[0],))
    if isinstance(info, mi.VarTupleType):
        return types.GenericAlias(tuple, (inner[0], ...))
    if isinstance(info, mi.TupleType):
        return types.GenericAlias(tuple, tuple(inner))
    return typing.Union[tuple(inner)]  # noqa: UP007 - built from a tuple of members


def _converted_alone(annotation: Any, value: Any, as_key: bool) -> Any:
    """``value`` converted on its own, as the whole arguments converted it (a key through a
    one-entry JSON object, as object keys are only converted from JSON text)."""
    if as_key:
        decoded = msgspec.json.decode(
            msgspec.json.encode({value: None}), type=dict[annotation, None], strict=True
        )
        return next(iter(decoded))
    return msgspec.json.decode(msgspec.json.encode(value), type=annotation, strict=True)


def _first_collision(
    annotation: Any, values: list[Any], as_key: bool
) -> tuple[int, int, Any] | None:
    """The first two of ``values`` that convert to equal values: (earlier, later, converted)."""
    if annotation is None:
        return None
    seen: dict[Any, int] = {}
    for index, value in enumerate(values):
        try:
            converted = _converted_alone(annotation, value, as_key)
        except (msgspec.ValidationError, TypeError, ValueError):
            return None
        try:
            earlier = seen.setdefault(converted, index)
        except TypeError:
            return None
        if earlier != index:
            return earlier, index, converted
    return None


def _show(value: Any) -> str:
    try:
        text = compact_json(value)
    except Exception:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _repeated_items(info: mi.SetType | mi.FrozenSetType, raw: list[Any], path: _Path) -> str:
    where = _render(path)
    repeat = first_json_repeat(raw)
    if repeat is not None:
        first, second = repeat
        return (
            f"Expected `array` of unique items, items {first} and {second} are both "
            f"`{_show(raw[first])}` - at `{where}`"
        )
    collision = _first_collision(_annotation(info.item_type), raw, False)
    if collision is not None:
        first, second, _ = collision
        return (
            f"Expected `array` of unique items, items {first} (`{_show(raw[first])}`) and "
            f"{second} (`{_show(raw[second])}`) convert to the same value - at `{where}`"
        )
    return f"Expected `array` of unique items, some items convert to the same value - at `{where}`"


def _colliding_keys(info: mi.DictType, raw: Mapping[str, Any], path: _Path) -> str:
    where = _render(path)
    keys = list(raw)
    collision = _first_collision(_annotation(info.key_type), keys, True)
    if collision is not None:
        first, second, converted = collision
        return (
            f"Expected `object` with distinct keys, keys {_show(keys[first])} and "
            f"{_show(keys[second])} both convert to the key `{converted!r}` - at `{where}`"
        )
    return f"Expected `object` with distinct keys, some keys convert to one key - at `{where}`"


def _rounded(raw: int, value: float, path: _Path) -> str:
    return (
        f"Expected `number` that a float holds exactly, got `{raw}` (a float would round it to "
        f"{value!r}) - at `{_render(path)}`"
    )


_INTEGER_TEXT: Final = re.compile(r"-?\d{16,}")


def _rounded_key(raw: Mapping[str, Any], value: Mapping[float, Any], path: _Path) -> str | None:
    """The first key of a ``dict[float, T]`` spelt as an integer its float key does not equal
    (keys convert in order, one to one: none collided)."""
    for text, key in zip(raw, value, strict=True):
        if _INTEGER_TEXT.fullmatch(text) is not None and key != int(text):
            return (
                f"Expected object key that a float holds exactly, got `{text}` (a float would "
                f"round it to {key!r}) - at `{_render(path)}`"
            )
    return None


def _text_keyed(info: mi.DictType) -> bool:
    return isinstance(_bare(info.key_type), mi.StrType)


def _origin(cls: Any) -> Any:
    return typing.get_origin(cls) or cls


def _fits(info: mi.Type, value: Any) -> bool:
    """Whether ``value``, a converted value, is what union member ``info`` converts to."""
    kind = type(value)
    if isinstance(info, mi.FloatType):
        return kind is float
    if isinstance(info, mi.StructType | mi.DataclassType | mi.NamedTupleType):
        return kind is _origin(info.cls)
    if isinstance(info, mi.DictType | mi.TypedDictType):
        return kind is dict
    if isinstance(info, mi.ListType):
        return kind is list
    if isinstance(info, mi.SetType):
        return kind is set
    if isinstance(info, mi.FrozenSetType):
        return kind is frozenset
    if isinstance(info, mi.TupleType | mi.VarTupleType):
        return kind is tuple
    return False


def inner_types(info: mi.Type) -> list[mi.Type]:
    """The types a value of ``info`` holds its parts as (not a dict's keys: they are text)."""
    if isinstance(info, mi.Metadata):
        return [info.type]
    if isinstance(info, mi.StructType | mi.DataclassType | mi.TypedDictType | mi.NamedTupleType):
        return [field.type for field in info.fields]
    if isinstance(info, mi.UnionType):
        return list(info.types)
    if isinstance(info, mi.TupleType):
        return list(info.item_types)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return [info.item_type]
    if isinstance(info, mi.DictType):
        return [info.value_type]
    return []


def _holding(root: mi.Type, floats: bool = True) -> frozenset[int]:
    """The ids of the parts of ``root`` (one ``type_info`` tree, which the caller keeps alive)
    that are or hold a set, a dict whose keys are not text or a float. A recursive type is one part
    that refers to itself, so this is a fixed point over the graph of parts, not a walk down
    a tree: a part holds what any part it refers to holds, wherever the cycle closes."""
    parts: dict[int, list[mi.Type]] = {}
    holding: set[int] = set()
    pending = [root]
    while pending:
        info = pending.pop()
        if id(info) in parts:
            continue
        inner = inner_types(info)
        parts[id(info)] = inner
        pending.extend(inner)
        if (
            isinstance(info, mi.SetType | mi.FrozenSetType)
            or (floats and isinstance(info, mi.FloatType))
            or (isinstance(info, mi.DictType) and not _text_keyed(info))
        ):
            holding.add(id(info))
    changed = True
    while changed:
        changed = False
        for part, inner in parts.items():
            if part not in holding and any(id(t) in holding for t in inner):
                holding.add(part)
                changed = True
    return frozenset(holding)


def _parts(
    info: mi.Type, raw: Any, value: Any, path: _Path
) -> list[tuple[mi.Type, Any, Any, _Path]]:
    """The (type, raw part, converted part, path) of the parts of a converted container."""
    if isinstance(info, mi.DictType):
        # Keys that are text stay themselves, and keys that are not are known distinct here:
        # every key converted to a key of its own, in the same order.
        # A key is rendered only when a message names it (``_render``).
        pairs = zip(raw.items(), value.values(), strict=True)
        return [(info.value_type, r, v, (path, (k,))) for (k, r), v in pairs]
    if isinstance(info, mi.ListType | mi.VarTupleType):
        pairs = zip(raw, value, strict=True)
        return [(info.item_type, r, v, (path, f"[{i}]")) for i, (r, v) in enumerate(pairs)]
    if isinstance(info, mi.TupleType):
        return [
            (member, raw[i], value[i], (path, f"[{i}]")) for i, member in enumerate(info.item_types)
        ]
    if isinstance(info, mi.NamedTupleType) or (isinstance(info, mi.StructType) and info.array_like):
        return [
            (field.type, raw[i], getattr(value, field.name), (path, f"[{i}]"))
            for i, field in enumerate(info.fields)
            if i < len(raw)  # past the end: a default, not from the arguments
        ]
    if isinstance(info, mi.StructType | mi.DataclassType | mi.TypedDictType):
        as_dict = isinstance(info, mi.TypedDictType)
        parts: list[tuple[mi.Type, Any, Any, _Path]] = []
        for field in info.fields:
            raw_item = raw.get(field.encode_name, _MISSING)
            if raw_item is _MISSING:
                continue  # a default: not from the arguments
            item = value[field.name] if as_dict else getattr(value, field.name)
            parts.append((field.type, raw_item, item, (path, f".{field.encode_name}")))
        return parts
    return []


def _set_items(
    info: mi.SetType | mi.FrozenSetType, raw: Any, path: _Path
) -> list[tuple[mi.Type, Any, Any, _Path]]:
    """The items of a set whose items may themselves lose something (``set[frozenset[int]]``):
    the set holds them in its own order, so each raw item is paired with its own conversion."""
    annotation = _annotation(info.item_type)
    if annotation is None:
        return []
    items: list[tuple[mi.Type, Any, Any, _Path]] = []
    for index, item in enumerate(raw):
        try:
            converted = _converted_alone(annotation, item, False)
        except (msgspec.ValidationError, TypeError, ValueError):
            continue  # it converted within the whole set; alone it cannot be paired
        items.append((info.item_type, item, converted, (path, f"[{index}]")))
    return items


def losses_check(args_type: Any) -> LossesCheck | None:
    """The check for the arguments of ``args_type`` (the argument struct), or ``None`` when
    its conversion cannot lose anything."""
    try:
        root = mi.type_info(args_type)
    except (TypeError, ValueError):
        return None
    holding = _holding(root)
    if id(root) not in holding:
        return None
    # Only floats to look at: arguments whose JSON text holds no integer past 2**53 (sixteen
    # digits or more) lose nothing, which the C encoder and a regex tell at a tenth of the
    # cost of the walk (digits inside strings only send the arguments to the walk).
    floats_only = id(root) not in _holding(root, floats=False)

    def holds(info: mi.Type) -> bool:
        return id(info) in holding

    def check(arguments: Any, converted: Any) -> str | None:
        if floats_only:
            try:
                text = _encode(arguments)
            except (RecursionError, TypeError):
                text = None  # deeper than the encoder goes: the walk decides
            if text is not None and _LONG_INTEGER.search(text) is None:
                return None
        stack: list[tuple[mi.Type, Any, Any, _Path]] = [(root, arguments, converted, None)]
        while stack:
            info, raw, value, path = stack.pop()
            info = _bare(info)
            if isinstance(info, mi.UnionType):
                member = next((m for m in map(_bare, info.types) if _fits(m, value)), None)
                if member is None:
                    continue
                info = member
            if not holds(info):
                continue
            if isinstance(info, mi.FloatType):
                # An int and a float compare exactly: unequal is rounded.
                if type(raw) is int and value != raw:
                    return _rounded(raw, value, path)
                continue
            if isinstance(info, mi.SetType | mi.FrozenSetType):
                if len(value) != len(raw):
                    return _repeated_items(info, list(raw), path)
                if holds(info.item_type):
                    stack.extend(reversed(_set_items(info, raw, path)))
                continue
            if isinstance(info, mi.DictType) and not _text_keyed(info):
                if len(value) != len(raw):
                    return _colliding_keys(info, raw, path)
                if isinstance(_bare(info.key_type), mi.FloatType):
                    lost = _rounded_key(raw, value, path)
                    if lost is not None:
                        return lost
            # Pushed last part first, so the first loss in document order is the one named.
            stack.extend(reversed(_parts(info, raw, value, path)))
        return None

    return check
