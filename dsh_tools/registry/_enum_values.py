"""The values an enum argument may take, named where msgspec refuses one.

msgspec's message for a value outside an ``Enum`` or ``Literal`` is ``Invalid enum value 'HIGH'``
and the path: the model learns what it sent, not what it may send (a ``define_tool`` tool says
``"unit" must be one of ["C","F"]``). ``with_allowed_values`` adds them, on the failure path
only, by walking the argument type along the message's path with ``msgspec.inspect``; a path it
does not read leaves the message as it is.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import msgspec

__all__ = ["with_allowed_values"]

_AT: Final = " - at `"
_KEY_IN: Final = "key` in `"
_REFUSED: Final = "Invalid enum value "
_UNKNOWN: Final = "Object contains unknown field `"
_EXPECTED: Final = re.compile(r"Expected `[a-z]+`, got `[a-z]+`$")
_SEGMENT: Final = re.compile(r'\.([^.\[`]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\[\.\.\.\]')
_MOST_SHOWN: Final = 50
"""How many allowed values a message lists at most (then how many more there are)."""


def with_allowed_values(args_type: Any, message: str) -> str:
    """``message`` (a refusal of the arguments of ``args_type``, its path already rooted at
    ``arguments``) with what the model may send where it failed: the allowed values of the
    enum or ``Literal`` it names, when it is msgspec's ``Invalid enum value`` or its
    ``Expected `int`, got `str``` (an ``IntEnum`` given a member's name), and the fields of the
    object an ``Object contains unknown field`` names (the arguments themselves when it names
    no path: a key one level off)."""
    head, at, where = message.rpartition(_AT)
    if not at:
        head, where = message, ""
    elif not where.endswith("`"):
        return message
    unknown = head.startswith(_UNKNOWN)
    if not (head.startswith(_REFUSED) or unknown or (at and _EXPECTED.match(head))):
        return message
    is_key = where.startswith(_KEY_IN)
    path = where[len(_KEY_IN) if is_key else 0 : -1] if at else "arguments"
    if not path.startswith("arguments") or (unknown and is_key):
        return message
    try:
        node: Any = msgspec.inspect.type_info(args_type)
        rest, pos = path[len("arguments") :], 0
        while pos < len(rest):
            match = _SEGMENT.match(rest, pos)
            if match is None:
                return message
            pos = match.end()
            node = _step(node, match.group(1), match.group(2))
            if node is None:
                return message
        if unknown:
            fields = getattr(_bare(node), "fields", None)
            if not fields:
                return message
            shown = ", ".join(f"`{field.encode_name}`" for field in fields[:_MOST_SHOWN])
            if len(fields) > _MOST_SHOWN:
                shown += f" and {len(fields) - _MOST_SHOWN} more"
            return f"{head} (its fields are {shown}){at}{where}"
        if is_key:
            node = _bare(node)
            node = node.key_type if isinstance(node, msgspec.inspect.DictType) else None
        values = _values(node)
        if is_key and values:
            values = [value if type(value) is str else str(value) for value in values]  # JSON keys
        names = None if is_key else _member_names(node)
    except Exception:  # a type msgspec cannot inspect: the message stays as msgspec wrote it
        return message
    if not values:
        return message
    shown = ", ".join(
        json.dumps(value, ensure_ascii=False) + (f" ({names[index]})" if names else "")
        for index, value in enumerate(values[:_MOST_SHOWN])
    )
    if len(values) > _MOST_SHOWN:
        shown += f" and {len(values) - _MOST_SHOWN} more"
    return f"{head} (expected one of {shown}){at}{where}"


def _bare(node: Any) -> Any:
    """``node`` without its constraints, and the one member of an optional union that is not
    ``None`` (a union of several others is left as it is)."""
    while True:
        if isinstance(node, msgspec.inspect.Metadata):
            node = node.type
            continue
        if isinstance(node, msgspec.inspect.UnionType):
            members = [m for m in node.types if not isinstance(m, msgspec.inspect.NoneType)]
            if len(members) == 1:
                node = members[0]
                continue
        return node


_ITEMS: Final = (
    msgspec.inspect.ListType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
    msgspec.inspect.VarTupleType,
)


def _step(node: Any, field: str | None, index: str | None) -> Any:
    """The type one path segment leads to from ``node`` (a field by its JSON name, an item,
    a dict's value), or ``None``."""
    node = _bare(node)
    fields = getattr(node, "fields", None)
    if field is not None and fields is not None:
        return next((f.type for f in fields if f.encode_name == field), None)
    if isinstance(node, msgspec.inspect.TupleType):
        at = int(index) if index is not None else len(node.item_types)
        return node.item_types[at] if at < len(node.item_types) else None
    if isinstance(node, msgspec.inspect.DictType):
        return node.value_type
    if isinstance(node, _ITEMS):
        return node.item_type
    return None


def _values(node: Any) -> list[Any] | None:
    """The JSON values an enum or ``Literal`` type (or an optional one) takes."""
    node = _bare(node)
    if isinstance(node, msgspec.inspect.EnumType):
        return [member.value for member in node.cls]
    if isinstance(node, msgspec.inspect.LiteralType):
        return list(node.values)
    return None


def _member_names(node: Any) -> list[str] | None:
    """The member names of an enum whose values are not strings (an ``IntEnum``: the
    declarations show only its numbers, and a model sends a member's name), else ``None``."""
    node = _bare(node)
    if isinstance(node, msgspec.inspect.EnumType):
        members = list(node.cls)
        if any(type(member.value) is not str for member in members):
            return [member.name for member in members]
    return None
