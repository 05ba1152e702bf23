"""Which fields of a ``@tool``'s result are always there: its output schema's ``required``.

msgspec describes a Struct or dataclass as a value to read: a field with a default may be left
out of the input, so it is not ``required``. A tool's result is a value written: the returned
instance is converted with ``msgspec.to_builtins``, which writes every field, its default
included. Left as generated, a program reading the Code Mode SDK saw ``NotRequired`` on a key
its result always has (and guarded reads of it). A field is marked required here unless it can
indeed be absent from the converted value: a Struct with ``omit_defaults=True`` leaves out a
field that holds its default, and a field that holds ``msgspec.UNSET`` (its default, or a
value its annotation allows) is left out too. A ``TypedDict``'s ``NotRequired`` keys may be
missing from the dict returned and stay as they are; a pydantic model's fields are decided by
pydantic's own serialization schema (``_type_hooks``). Read once, at definition time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgspec

__all__ = ["require_written_fields"]

_Shape = tuple[str, frozenset[str]]
"""A ``$defs`` entry as msgspec names it: its title (the class name) and its properties."""


def require_written_fields(schema: dict[str, Any], return_type: Any) -> None:
    """Add to ``required`` of each Struct or dataclass in ``schema``'s ``$defs`` (generated
    by msgspec for ``return_type``) the fields every converted value holds. A ``$defs`` entry
    is matched to its class by title and properties; two classes that match one entry keep
    only the fields both always write."""
    definitions = schema.get("$defs")
    if not isinstance(definitions, dict):
        return
    written = _written_fields(return_type)
    if not written:
        return
    for definition in definitions.values():
        if not isinstance(definition, dict) or definition.get("type") != "object":
            continue
        properties = definition.get("properties")
        title = definition.get("title")
        if not isinstance(properties, dict) or type(title) is not str:
            continue
        always = written.get((title, frozenset(properties)))
        if not always:
            continue
        required = list(definition.get("required") or ())
        required.extend(name for name in properties if name in always and name not in required)
        definition["required"] = required


def _written_fields(return_type: Any) -> dict[_Shape, frozenset[str]]:
    """For each Struct and dataclass ``return_type`` holds (anywhere inside it), the names of
    the fields that have a default and are always written."""
    try:
        root = msgspec.inspect.type_info(return_type)
    except (TypeError, ValueError):
        return {}
    written: dict[_Shape, frozenset[str]] = {}
    seen: set[Any] = set()
    pending: list[msgspec.inspect.Type] = [root]
    while pending:
        info = pending.pop()
        if isinstance(
            info,
            msgspec.inspect.StructType
            | msgspec.inspect.DataclassType
            | msgspec.inspect.TypedDictType
            | msgspec.inspect.NamedTupleType,
        ):
            if info.cls in seen:
                continue
            seen.add(info.cls)
            pending.extend(field.type for field in info.fields)
            fields = _always_written(info)
            if fields is not None:
                names = [field.encode_name for field in info.fields]
                if isinstance(info, msgspec.inspect.StructType) and info.tag_field is not None:
                    names.append(info.tag_field)
                shape = (info.cls.__name__, frozenset(names))
                known = written.get(shape)
                written[shape] = fields if known is None else known & fields
        elif isinstance(info, msgspec.inspect.UnionType):
            pending.extend(info.types)
        elif isinstance(info, msgspec.inspect.TupleType):
            pending.extend(info.item_types)
        elif isinstance(info, msgspec.inspect.Metadata):
            pending.append(info.type)
        else:
            for name in ("item_type", "key_type", "value_type"):
                inner = getattr(info, name, None)
                if isinstance(inner, msgspec.inspect.Type):
                    pending.append(inner)
    return written


def _always_written(info: msgspec.inspect.Type) -> frozenset[str] | None:
    """The encoded names of the fields with a default that ``to_builtins`` always writes for
    a Struct or dataclass ``info``; ``None`` for any other type (and a generic alias, which
    msgspec titles with its arguments)."""
    cls = getattr(info, "cls", None)
    if not isinstance(cls, type):
        return None
    if isinstance(info, msgspec.inspect.StructType) and issubclass(cls, msgspec.Struct):
        if info.array_like or cls.__struct_config__.omit_defaults:
            return frozenset()
        return frozenset(
            field.encode_name
            for field in msgspec.structs.fields(cls)
            if (
                field.default is not msgspec.NODEFAULT
                or field.default_factory is not msgspec.NODEFAULT
            )
            and field.default is not msgspec.UNSET
            and not _may_be_unset(field.type)
        )
    if isinstance(info, msgspec.inspect.DataclassType) and dataclasses.is_dataclass(cls):
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # an annotation that does not resolve: nothing is known of it
            return frozenset()
        defaulted = {
            field.name
            for field in dataclasses.fields(cls)
            if (
                field.default is not dataclasses.MISSING
                or field.default_factory is not dataclasses.MISSING
            )
            and field.default is not msgspec.UNSET
            and not _may_be_unset(hints.get(field.name, Any))
        }
        return frozenset(field.encode_name for field in info.fields if field.name in defaulted)
    return None


def _may_be_unset(annotation: Any) -> bool:
    """Whether a field annotated ``annotation`` may hold ``msgspec.UNSET`` (and so be left
    out): ``UnsetType`` is one of its union's members (under ``Annotated`` too)."""
    pending = [annotation]
    while pending:
        current = pending.pop()
        if current is msgspec.UnsetType:
            return True
        origin = typing.get_origin(current)
        if origin is typing.Annotated:
            pending.append(typing.get_args(current)[0])
        elif origin is typing.Union or isinstance(current, types.UnionType):
            pending.extend(typing.get_args(current))
    return False
