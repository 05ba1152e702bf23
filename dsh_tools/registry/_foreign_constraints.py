"""``@tool`` parameters constrained the way pydantic users write them: ``Annotated[int,
Field(ge=1, description=...)]``, ``annotated_types.MaxLen(3)``, ``n: int = Field(default=3,
ge=1)``.

msgspec, which generates a tool's schema and validates its arguments, reads only
``msgspec.Meta`` in an ``Annotated``; it passes over any other object there without a word, so
such a constraint would vanish from the schema and from validation while the author believes
it holds (and a ``typing_extensions.Doc`` would describe nothing). ``constrained_parameter``
rewrites what has a ``msgspec.Meta`` equivalent into one (in the parameter's own annotation
and in the type arguments inside it: ``list[Annotated[int, Gt(0)]]``) and refuses the rest
with a ``TypeError`` naming the parameter. Inside a class (a dataclass's, a TypedDict's or a
Struct's fields) msgspec reads the annotations itself, so nothing can be rewritten there: any
such constraint is refused, naming the field and the ``msgspec.Meta`` to write instead (a
``Doc`` there, only a text, is left as it is).

Neither pydantic nor ``annotated_types`` is a dependency: an annotation that holds their
objects has imported them, so they are looked up in ``sys.modules`` and matched by their
public classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from ._type_hooks import is_field_info, no_field_default, with_args_mapped

__all__ = ["constrained_parameter"]

_ONE_TO_ONE: Final = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length")
"""The ``annotated_types`` constraints whose field is a ``msgspec.Meta`` keyword of the same
name (``Ge(ge=1)`` is ``Meta(ge=1)``)."""
_FIELD_TEXTS: Final = ("description", "title", "examples")
"""What a pydantic ``Field`` says to the model that ``msgspec.Meta`` says too."""
_FIELD_UNREAD: Final = (
    "alias",
    "validation_alias",
    "serialization_alias",
    "discriminator",
    "json_schema_extra",
    "default_factory",
)
"""``Field`` settings with no ``msgspec.Meta`` equivalent: refused rather than dropped."""
_HELD_ALREADY: Final = {"strict": True, "allow_inf_nan": False}
"""pydantic settings that every ``@tool`` call meets anyway: msgspec validates the arguments
in strict mode, and arguments are lossless JSON, which has no NaN or infinity."""
_NOTHING: Final = object()
_LEAVES: Final = (typing.Literal,)
"""Generic forms whose arguments are values, not types."""


class _Unreadable(Exception):
    """An object in an ``Annotated`` that carries a constraint msgspec cannot take."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(what, reason)
        self.what = what
        self.reason = reason


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _is_doc(extra: Any) -> bool:
    """``typing_extensions.Doc("...")``: a parameter's description (PEP 727)."""
    extensions = _module("typing_extensions")
    doc = getattr(extensions, "Doc", None) if extensions is not None else None
    return isinstance(doc, type) and isinstance(extra, doc)


def _is_foreign(extra: Any) -> bool:
    """Whether ``extra`` is a constraint of pydantic or ``annotated_types``, or a ``Doc``."""
    if is_field_info(extra) or _is_doc(extra):
        return True
    annotated_types = _module("annotated_types")
    if annotated_types is not None and isinstance(
        extra, (annotated_types.BaseMetadata, annotated_types.GroupedMetadata)
    ):
        return True
    return type(extra).__module__.partition(".")[0] == "pydantic"


def _undefined(value: Any) -> bool:
    """Whether a ``Field`` setting other than ``default`` is unset."""
    return value is None or no_field_default(value)


def _metadata_keywords(item: Any) -> dict[str, Any]:
    """The ``msgspec.Meta`` keywords of one ``annotated_types`` constraint (or one of
    pydantic's, which are that kind of object), else ``_Unreadable``."""
    annotated_types = _module("annotated_types")
    if annotated_types is not None and isinstance(item, annotated_types.GroupedMetadata):
        keywords: dict[str, Any] = {}
        for part in item:  # ``Interval``, ``Len``: a group of single constraints
            keywords.update(_metadata_keywords(part))
        return keywords
    if _is_doc(item) or (annotated_types is not None and isinstance(item, annotated_types.DocInfo)):
        return {"description": item.documentation}
    # ``annotated_types`` constraints are dataclasses; pydantic's general metadata
    # (``Field(pattern=...)``) holds its settings as its attributes.
    if dataclasses.is_dataclass(item):
        settings = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    else:
        settings = dict(vars(item)) if hasattr(item, "__dict__") else {}
    keywords = {}
    held = False
    for key, value in settings.items():
        if value is None:
            continue
        if _HELD_ALREADY.get(key, _NOTHING) is value:
            held = True
        elif key in _ONE_TO_ONE or key == "pattern":
            keywords[key] = value
        else:
            raise _Unreadable(repr(item), f"msgspec has no constraint for {key}={value!r}")
    if not keywords and not held:
        raise _Unreadable(repr(item), "msgspec has no constraint like it")
    return keywords


def _field_keywords(field: Any, *, as_default: bool = False) -> dict[str, Any]:
    """The ``msgspec.Meta`` keywords of a pydantic ``Field`` (in an ``Annotated``, or the
    parameter's default, whose own default is then the parameter's)."""
    for name in _FIELD_UNREAD:
        if not _undefined(getattr(field, name, None)):
            raise _Unreadable(
                repr(field), f"msgspec has no equivalent of {name}= in a tool's arguments"
            )
    if not as_default and not no_field_default(getattr(field, "default", None)):
        raise _Unreadable(repr(field), "give the default in the signature (name: T = default)")
    keywords = {name: getattr(field, name) for name in _FIELD_TEXTS}
    keywords = {name: value for name, value in keywords.items() if value is not None}
    for item in field.metadata:
        keywords.update(_metadata_keywords(item))
    return keywords


def _meta(extra: Any) -> msgspec.Meta:
    keywords = _field_keywords(extra) if is_field_info(extra) else _metadata_keywords(extra)
    try:
        return msgspec.Meta(**keywords)
    except (TypeError, ValueError) as exc:
        raise _Unreadable(repr(extra), str(exc)) from None


def _constrained(hint: Any, metas: list[msgspec.Meta]) -> Any:
    """``hint`` under ``metas``; for ``T | None``, ``T`` under them, as pydantic reads
    ``Field(max_length=8)`` on an optional string (msgspec takes a constraint only on the
    type it constrains; a description there still describes the whole parameter)."""
    if not metas:
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        others = [member for member in members if member is not type(None)]
        if len(others) == 1 and len(members) == 2:
            return typing.Optional[typing.Annotated[(others[0], *metas)]]  # noqa: UP045
    return typing.Annotated[(hint, *metas)]


def _translated(hint: Any) -> Any:
    """``hint`` with every foreign constraint as a ``msgspec.Meta``, inside type arguments
    too; ``_Unreadable`` for one that has none."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        inner = _translated(base)
        if inner is base and not any(_is_foreign(extra) for extra in extras):
            return hint
        metas = [_meta(extra) for extra in extras if _is_foreign(extra)]
        others = [extra for extra in extras if not _is_foreign(extra)]
        inner = _constrained(inner, metas)
        return typing.Annotated[(inner, *others)] if others else inner
    try:
        return with_args_mapped(hint, _translated)
    except (AttributeError, TypeError):
        # Dropping the rewritten arguments would drop their constraints without a word.
        raise _Unreadable(repr(hint), "@tool cannot rebuild this type with them") from None


def _class_fields(cls: type) -> dict[str, Any]:
    """The annotations msgspec reads of a dataclass, TypedDict, Struct, NamedTuple or attrs
    class (an empty dict for any other type)."""
    is_class = (
        dataclasses.is_dataclass(cls)
        or issubclass(cls, msgspec.Struct)
        or typing.is_typeddict(cls)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
        or hasattr(cls, "__attrs_attrs__")
    )
    if not is_class:
        return {}
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return {}  # msgspec's own resolution names what it cannot find


def _class_constraints(hint: Any) -> Iterator[tuple[str, str, Any]]:
    """``(class name, field name, foreign constraint)`` for every constraint that sits in a
    class's fields anywhere inside ``hint``."""
    seen: set[int] = set()
    todo: list[tuple[Any, tuple[str, str] | None]] = [(hint, None)]
    while todo:
        current, place = todo.pop()
        origin = typing.get_origin(current)
        if origin is typing.Annotated:
            base, *extras = typing.get_args(current)
            if place is not None:
                for extra in extras:
                    if _is_foreign(extra) and not _is_doc(extra):
                        yield place[0], place[1], extra
            todo.append((base, place))
            continue
        if origin is not None:
            if origin not in _LEAVES:
                todo.extend((arg, place) for arg in typing.get_args(current))
            continue
        if isinstance(current, type) and id(current) not in seen:
            seen.add(id(current))
            for name, field in _class_fields(current).items():
                todo.append((field, (current.__qualname__, name)))


def _suggestion(extra: Any) -> str:
    try:
        meta = _meta(extra)
    except _Unreadable as unreadable:
        return f"msgspec cannot enforce it ({unreadable.reason})"
    return f"write it as {meta!r}"


def constrained_parameter(owner: str, pname: str, hint: Any, default: Any) -> tuple[Any, Any]:
    """``(hint, default)`` of a parameter with its pydantic and ``annotated_types`` constraints
    as ``msgspec.Meta``; a pydantic ``Field(...)`` default becomes the default it holds (or
    none: ``inspect.Parameter.empty``) and its constraints join the annotation. ``TypeError``
    naming the parameter for a constraint msgspec cannot hold."""
    if is_field_info(default):
        try:
            keywords = _field_keywords(default, as_default=True)
            meta = msgspec.Meta(**keywords) if keywords else None
        except (_Unreadable, TypeError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, _Unreadable) else str(exc)
            raise TypeError(
                f"{owner}: parameter {pname!r} has {default!r} as its default, which @tool "
                f"cannot enforce: {reason} (write the constraint with msgspec.Meta, or check "
                "it in the body)"
            ) from None
        field_default = default.default
        default = inspect.Parameter.empty if no_field_default(field_default) else field_default
        if meta is not None:
            hint = _constrained(hint, [meta])
    try:
        translated = _translated(hint)
    except _Unreadable as unreadable:
        raise TypeError(
            f"{owner}: parameter {pname!r} has {unreadable.what} in its annotation, which "
            f"@tool cannot enforce: {unreadable.reason} (write the constraint with "
            "msgspec.Meta, or check it in the body)"
        ) from None
    for cls_name, field_name, extra in _class_constraints(translated):
        raise TypeError(
            f"{owner}: parameter {pname!r}: field {field_name!r} of {cls_name} has "
            f"{extra!r} in its annotation, which msgspec does not read in a class's fields "
            f"(the constraint would silently not hold): {_suggestion(extra)}"
        )
    return translated, default
