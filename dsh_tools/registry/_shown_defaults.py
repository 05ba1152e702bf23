"""Field defaults msgspec cannot write into a schema, written as the JSON they stand for.

msgspec's schema generator shows the default of a Struct's or dataclass's field as
``msgspec.to_builtins(default)``, without the hooks ``@tool`` gives msgspec for the types it
does not know (``pathlib`` paths, pydantic models). So a parameter typed with a dataclass whose
field reads ``root: Path = Path(".")`` failed at definition as an unsupported annotation,
although the same default on the parameter itself is shown, and a path anywhere in the type is
supported.

``with_shown_defaults(hint)`` is ``hint`` with each such class replaced, for the schema alone,
by a twin of the same name, docstring, fields and options whose defaults are their JSON form
(what a model would send); every class that holds one is twinned too, so that the twin is what
the schema reaches. Arguments are still converted to the classes the author wrote. A type with
no such default is returned as it is; ``@tool`` asks only once msgspec has failed to write a
schema, so a type msgspec describes by itself costs nothing more.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import msgspec
from msgspec import inspect as mi

from ..actors import FrozenDict, FrozenList
from ._type_hooks import type_encode, with_args_mapped

__all__ = ["with_shown_defaults"]

_CLASS_TYPES = (mi.StructType, mi.DataclassType)


def with_shown_defaults(hint: Any) -> Any:
    """``hint`` with every class whose field default msgspec cannot show replaced by its twin
    (see the module); ``hint`` itself when there is none. ``TypeError`` naming the field for a
    class that cannot be twinned (a recursive one, or one that is neither a Struct nor a
    dataclass: an attrs class, a NamedTuple)."""
    try:
        info = mi.type_info(hint)
    except Exception:  # msgspec's schema names what it cannot read, as before
        return hint
    children: dict[type, set[type]] = {}
    infos: dict[type, mi.Type] = {}
    unshown: dict[type, tuple[str, Any]] = {}
    _collect(info, children, infos, unshown, set())
    if not unshown:
        return hint
    twinned = set(unshown)
    grew = True
    while grew:
        grew = False
        for cls, held in children.items():
            if cls not in twinned and held & twinned:
                twinned.add(cls)
                grew = True
    for cls in infos:  # in the order met, so that the first refused is the one named
        if cls not in twinned:
            continue
        twinnable = isinstance(infos[cls], mi.StructType) or dataclasses.is_dataclass(cls)
        if not twinnable or _reaches(cls, cls, children, twinned):
            raise TypeError(_refusal(cls, unshown, children, twinned))
    twins: dict[type, type] = {}

    def mapped(annotation: Any) -> Any:
        if isinstance(annotation, type) and annotation in twinned:
            twin = twins.get(annotation)
            if twin is None:
                twin = twins[annotation] = _twin(annotation, infos[annotation], mapped)
            return twin
        return with_args_mapped(annotation, mapped)

    return mapped(hint)


def _collect(
    t: Any,
    children: dict[type, set[type]],
    infos: dict[type, mi.Type],
    unshown: dict[type, tuple[str, Any]],
    seen: set[int],
    owner: type | None = None,
) -> None:
    """Walk the type tree: which class holds which, and each class's first unshowable
    default."""
    if isinstance(t, mi.Field):
        _collect(t.type, children, infos, unshown, seen, owner)
        return
    if isinstance(t, tuple):
        for item in t:
            _collect(item, children, infos, unshown, seen, owner)
        return
    if not isinstance(t, mi.Type):
        return
    cls = getattr(t, "cls", None)
    if isinstance(t, (*_CLASS_TYPES, mi.NamedTupleType, mi.TypedDictType)) and isinstance(
        cls, type
    ):
        if owner is not None:
            children.setdefault(owner, set()).add(cls)
        if id(t) in seen:
            return
        seen.add(id(t))
        infos[cls] = t
        children.setdefault(cls, set())
        for field in t.fields:
            default = getattr(field, "default", msgspec.NODEFAULT)
            if default is not msgspec.NODEFAULT and cls not in unshown and not _showable(default):
                unshown[cls] = (field.name, default)
            _collect(field.type, children, infos, unshown, seen, cls)
        return
    if id(t) in seen:
        return
    seen.add(id(t))
    # The field names the class keeps: ``msgspec.structs.fields`` would evaluate the
    # annotations of msgspec's own inspection classes at every node, doubling the cost of
    # defining every tool.
    for name in t.__struct_fields__:
        _collect(getattr(t, name), children, infos, unshown, seen, owner)


def _showable(default: Any) -> bool:
    try:
        msgspec.to_builtins(default, str_keys=True)
    except (TypeError, ValueError):
        return False
    return True


def _reaches(start: type, target: type, children: dict[type, set[type]], within: set[type]) -> bool:
    stack = [child for child in children.get(start, ()) if child in within]
    visited: set[type] = set()
    while stack:
        cls = stack.pop()
        if cls is target:
            return True
        if cls not in visited:
            visited.add(cls)
            stack.extend(child for child in children.get(cls, ()) if child in within)
    return False


def _refusal(
    cls: type,
    unshown: dict[type, tuple[str, Any]],
    children: dict[type, set[type]],
    within: set[type],
) -> str:
    """The refusal of ``cls``, naming its own unshowable default or else one of a class it
    holds (not that of another class the annotation names)."""
    for owner, (name, default) in unshown.items():
        if owner is not cls and not _reaches(cls, owner, children, within):
            continue
        return (
            f"field {name!r} of {owner.__qualname__} has the default {default!r}, which its "
            f"schema cannot show within {cls.__qualname__}; give it as a factory "
            f"(default_factory=lambda: {default!r}) where the class takes one, or leave the "
            "default out"
        )
    raise AssertionError("no unshowable default")  # pragma: no cover - called only with one


def _twin_default(default: Any) -> Any:
    """The twin's default: the author's when msgspec shows it (``UNSET`` included, which
    msgspec reads as no default at all), else its JSON form."""
    return default if default is msgspec.UNSET or _showable(default) else _shown(default)


def _shown(default: Any) -> Any:
    """A default as the JSON the schema shows, frozen so that a class may hold it."""
    return _frozen(msgspec.to_builtins(default, str_keys=True, enc_hook=type_encode))


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(_frozen(item) for item in value)
    return value


def _twin(cls: type, info: mi.Type, mapped: typing.Callable[[Any], Any]) -> type:
    hints = _field_hints(cls)
    # The qualified name too: msgspec names two classes of one name apart by it.
    namespace = {
        "__doc__": cls.__doc__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    if isinstance(info, mi.StructType):
        return _struct_twin(cls, hints, namespace, mapped)
    return _dataclass_twin(cls, hints, namespace, mapped)


def _field_hints(cls: type) -> dict[str, Any]:
    """The annotations of the fields of ``cls``, each type variable of a generic base that
    ``cls`` parametrizes (``class PathSlot(Slot[int])``) replaced by its argument, as msgspec
    reads them: the twin has no such base, and would show ``item: Item`` as any value."""
    hints = typing.get_type_hints(cls, include_extras=True)
    bindings: dict[type, dict[Any, Any]] = {}
    _bind(cls, {}, bindings)
    for name, hint in hints.items():
        # The class whose own annotation it is (a subclass may annotate a field again).
        owner = next((c for c in cls.__mro__ if name in inspect.get_annotations(c)), None)
        binding = bindings.get(owner) if owner is not None else None
        if binding:
            hints[name] = _substituted(hint, binding)
    return hints


def _bind(cls: type, binding: dict[Any, Any], bindings: dict[type, dict[Any, Any]]) -> None:
    """What each type variable of each generic base of ``cls`` stands for within it."""
    if cls in bindings:
        return
    bindings[cls] = binding
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin = typing.get_origin(base)
        if not isinstance(origin, type) or origin is typing.Generic:
            continue
        arguments = [_substituted(argument, binding) for argument in typing.get_args(base)]
        parameters = getattr(origin, "__parameters__", ())
        _bind(origin, dict(zip(parameters, arguments, strict=False)), bindings)


def _substituted(hint: Any, binding: dict[Any, Any]) -> Any:
    if isinstance(hint, typing.TypeVar):
        return binding.get(hint, hint)
    return with_args_mapped(hint, lambda argument: _substituted(argument, binding))


def _struct_twin(
    cls: Any, hints: dict[str, Any], namespace: dict[str, Any], mapped: typing.Callable[[Any], Any]
) -> type:
    config: msgspec.structs.StructConfig = cls.__struct_config__
    infos = msgspec.structs.fields(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for field in infos:
        annotation = mapped(hints[field.name])
        if field.default is not msgspec.NODEFAULT:
            shown = _twin_default(field.default)
            fields.append((field.name, annotation, shown))
        elif field.default_factory is not msgspec.NODEFAULT:
            fields.append(
                (field.name, annotation, msgspec.field(default_factory=field.default_factory))
            )
        else:
            fields.append((field.name, annotation))
    twin: type = msgspec.defstruct(
        cls.__name__,
        fields,
        namespace=namespace,
        module=cls.__module__,
        kw_only=True,
        rename={field.name: field.encode_name for field in infos},
        omit_defaults=config.omit_defaults,
        forbid_unknown_fields=config.forbid_unknown_fields,
        array_like=config.array_like,
        tag=config.tag,
        tag_field=config.tag_field,
    )
    return twin


def _dataclass_twin(
    cls: Any, hints: dict[str, Any], namespace: dict[str, Any], mapped: typing.Callable[[Any], Any]
) -> type:
    fields: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(cls):
        spec: Any = dataclasses.field(init=field.init)
        if field.default is not dataclasses.MISSING:
            shown = _twin_default(field.default)
            spec = dataclasses.field(default=shown, init=field.init)
        elif field.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=field.default_factory, init=field.init)
        fields.append((field.name, mapped(hints[field.name]), spec))
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, kw_only=True)
