"""What the keys of a ``@tool`` parameter's ``dict[int, T]`` may be, said in its JSON Schema.

JSON object keys are text, so a ``dict[int, T]`` parameter takes ``{"1": ...}``, and msgspec
(which validates ``@tool`` arguments) refuses every key that is not a JSON integer. msgspec's
schema says that only for keys that are already strings (a ``pattern``, a ``Literal``, a str
``Enum``), so the schema of ``dict[int, T]`` is that of ``dict[str, T]`` and a model cannot
know its keys are numbers. ``describe_key_text`` adds the ``propertyNames`` those keys obey.
Validation stays msgspec's; the keyword only states what it already enforces (a key's numeric
constraints, such as ``ge``, still hold beyond the pattern).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

__all__ = ["INTEGER_KEY_PATTERN", "describe_key_text"]

INTEGER_KEY_PATTERN: Final = "^-?(0|[1-9][0-9]*)$"
"""The object keys msgspec decodes as an ``int``: a JSON integer (no sign ``+``, no leading
zero, no exponent, no fraction)."""

mi = msgspec.inspect

_CLASSES: Final = (mi.StructType, mi.TypedDictType, mi.DataclassType, mi.NamedTupleType)


def _unwrapped(t: Any) -> Any:
    while isinstance(t, mi.Metadata):
        t = t.type
    return t


def _key_names(key: Any) -> dict[str, Any] | None:
    """The ``propertyNames`` schema of a dict key type msgspec decodes from text it does not
    describe; None for key types it describes (strings) or that are left as they are."""
    key = _unwrapped(key)
    if isinstance(key, mi.IntType):
        return {"pattern": INTEGER_KEY_PATTERN}
    if isinstance(key, mi.LiteralType):
        literals: list[Any] = list(key.values)
        if all(type(value) is str for value in literals):
            return None  # msgspec states these itself
        if all(type(value) in (int, str) for value in literals):
            return {"enum": [str(value) for value in literals]}
        return None
    if isinstance(key, mi.EnumType):
        members = list(dict.fromkeys(key.cls.__members__.values()))
        values: list[Any] = [member.value for member in members]
        if values and all(isinstance(value, int) for value in values):
            return {"enum": [str(int(value)) for value in values]}
    return None


def _resolve(node: Any, components: Mapping[str, Any]) -> Any:
    """The component a ``{"$ref": "#/$defs/Name"}`` node refers to, or the node itself."""
    ref = node.get("$ref") if isinstance(node, dict) else None
    if type(ref) is str and ref.startswith("#/$defs/"):
        return components.get(ref[len("#/$defs/") :])
    return node


def _options(node: dict[str, Any]) -> list[Any]:
    """A union's schemas: its ``anyOf``, with a tagged group of Structs (an ``anyOf`` of its
    own, with a discriminator) flattened in."""
    found: list[Any] = []
    pending = list(node.get("anyOf") or ())
    while pending:
        option = pending.pop(0)
        if isinstance(option, dict) and "discriminator" in option and "anyOf" in option:
            pending[:0] = list(option["anyOf"])
        else:
            found.append(option)
    return found


def _class_option(member: Any, options: list[Any], components: Mapping[str, Any]) -> Any:
    """The one union option that is the schema of the class type ``member``, or None when
    it cannot be told apart (then nothing is added under it)."""
    names = {field.encode_name for field in member.fields}
    tag = getattr(member, "tag_field", None)
    if tag is not None:  # a tagged Struct's schema lists its tag among the properties
        names.add(tag)
    matches = []
    for option in options:
        target = _resolve(option, components)
        if option is target or not isinstance(target, dict):
            continue
        if target.get("title") != member.cls.__name__:
            continue
        positional = isinstance(member, mi.NamedTupleType) or getattr(member, "array_like", False)
        if positional or set(target.get("properties") or {}) == names:
            matches.append(option)
    return matches[0] if len(matches) == 1 else None


def _union_pairs(
    t: Any, node: dict[str, Any], components: Mapping[str, Any]
) -> list[tuple[Any, Any]]:
    """Each union member that may hold a dict, with its option: msgspec allows at most one
    member that encodes as a plain object and one as a plain array, so those are told apart
    by their ``type``, and classes by their component."""
    options = _options(node)
    pairs: list[tuple[Any, Any]] = []
    for member in t.types:
        inner = _unwrapped(member)
        if isinstance(inner, _CLASSES):
            option = _class_option(inner, options, components)
        else:
            if isinstance(inner, mi.DictType | mi.FrozenDictType):
                kind = "object"
            elif isinstance(inner, mi.CollectionType | mi.TupleType):
                kind = "array"
            else:
                continue
            plain = [
                option
                for option in options
                if isinstance(option, dict) and "$ref" not in option and option.get("type") == kind
            ]
            option = plain[0] if len(plain) == 1 else None
        if option is not None:
            pairs.append((member, option))
    return pairs


def describe_key_text(args_type: Any, root: dict[str, Any], components: Mapping[str, Any]) -> None:
    """Add ``propertyNames`` to every object schema under ``root`` (the parameters schema of
    ``args_type``, its shared shapes in ``components``) that stands for a dict whose keys
    msgspec decodes from text into something else (``int``, an int ``Literal`` or ``Enum``).

    The schema is walked beside the type it was generated from; a part whose schema cannot be
    matched with certainty is left as it is, so this only ever adds what is true.
    """
    seen: set[int] = set()
    pending: list[tuple[Any, Any]] = [(mi.type_info(args_type), root)]
    while pending:
        t, node = pending.pop()
        t = _unwrapped(t)
        if not isinstance(node, dict):
            continue
        if "$ref" in node:
            if id(node) in seen:
                continue
            seen.add(id(node))
            node = _resolve(node, components)
            if not isinstance(node, dict):
                continue
        if isinstance(t, _CLASSES):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(t, mi.NamedTupleType) or getattr(t, "array_like", False):
                items = node.get("prefixItems") or ()
                pending.extend(zip((field.type for field in t.fields), items, strict=False))
            else:
                properties = node.get("properties") or {}
                pending.extend(
                    (field.type, properties.get(field.encode_name)) for field in t.fields
                )
        elif isinstance(t, mi.DictType | mi.FrozenDictType):
            names = _key_names(t.key_type)
            if names is not None and "propertyNames" not in node:
                node["propertyNames"] = names
            pending.append((t.value_type, node.get("additionalProperties")))
        elif isinstance(t, mi.CollectionType):
            pending.append((t.item_type, node.get("items")))
        elif isinstance(t, mi.TupleType):
            items = node.get("prefixItems") or ()
            pending.extend(zip(t.item_types, items, strict=False))
        elif isinstance(t, mi.UnionType):
            pending.extend(_union_pairs(t, node, components))
