"""The ``@tool`` types msgspec does not describe itself, given to it through its hooks:
``pathlib`` paths and pydantic models, the two that tools are most often written with.

- A path is a JSON string: its schema is ``{"type": "string", "format": "path"}`` (as pydantic
  spells it), an argument arrives as the path class its annotation names (``Path``,
  ``PurePosixPath``...), and a returned path is its text.
- A pydantic model (or a union of them, a pydantic dataclass, one of pydantic's own types
  such as ``HttpUrl``) is the value its own JSON Schema describes (declared once under
  ``$defs``, as msgspec declares Structs), an argument is validated by the model as pydantic
  validates it (its own configuration: aliases, validators, ``extra="forbid"``, lax unless it
  says ``strict``) and arrives as the model instance, and a returned model is its
  ``model_dump(mode="json", by_alias=True)``.

Every other type is left to msgspec (``NotImplementedError`` is how a hook says so), so
nothing else changes. pydantic is no dependency: an annotation that names a model has imported
it, so it is looked up in ``sys.modules``.
"""

from __future__ import annotations

import functools
import inspect
import operator
import pathlib
import sys
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec

__all__ = [
    "PATH_SCHEMA",
    "SchemaHook",
    "field_folded",
    "is_field_info",
    "no_field_default",
    "pydantic_adapted",
    "type_decode",
    "type_encode",
    "with_args_mapped",
]

PATH_SCHEMA: Final = {"type": "string", "format": "path"}


def _is_path_type(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, pathlib.PurePath)


def _pydantic() -> Any:
    return sys.modules.get("pydantic")


def is_field_info(extra: Any) -> bool:
    """Whether ``extra`` is a pydantic ``Field(...)``."""
    fields = sys.modules.get("pydantic.fields")
    return fields is not None and isinstance(extra, fields.FieldInfo)


def no_field_default(value: Any) -> bool:
    """Whether a ``Field``'s ``default`` is unset (``None`` is a default like any other)."""
    core = sys.modules.get("pydantic_core")
    return core is not None and value is core.PydanticUndefined


def _is_model_type(cls: Any) -> bool:
    pydantic = _pydantic()
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


class _AdaptedType(type):
    def __instancecheck__(cls, value: Any) -> bool:
        # msgspec checks that its hook gave an instance of the type asked for: what the
        # adapter validated is one, whichever model it is.
        return cls is not PydanticAdapted or type.__instancecheck__(cls, value)

    def __repr__(cls) -> str:
        # Messages name the annotation the author wrote, not the class standing for it.
        annotation: Any = getattr(cls, "annotation", None)
        return type.__repr__(cls) if cls is PydanticAdapted else repr(annotation)


class PydanticAdapted(metaclass=_AdaptedType):
    """The base of the classes that stand, in an annotation msgspec reads, for a part only
    pydantic can read (``pydantic_adapted``): ``annotation`` is that part. The pydantic
    ``TypeAdapter`` is built on first use and kept outside the class, so the class travels
    (to a Ray worker) as its annotation alone."""

    annotation: Any = None


_ADAPTERS: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def _adapter(cls: type[PydanticAdapted]) -> Any:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = sys.modules["pydantic"].TypeAdapter(cls.annotation)
        _ADAPTERS[cls] = adapter
    return adapter


def _is_adapted(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, PydanticAdapted)


def _models_in(members: tuple[Any, ...]) -> int:
    return sum(1 for member in members if _is_model_type(_bare(member)))


def _bare(hint: Any) -> Any:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def _needs_pydantic(hint: Any) -> bool:
    """A union of two or more models (msgspec takes one custom type in a union), or a model
    or union under a pydantic ``Field`` (``discriminator=`` and the like are pydantic's)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        bare = _bare(base)
        holds_models = _is_model_type(bare) or (
            typing.get_origin(bare) in (typing.Union, types.UnionType)
            and _models_in(typing.get_args(bare)) > 0
        )
        return holds_models and any(is_field_info(extra) for extra in extras)
    if origin in (typing.Union, types.UnionType):
        return _models_in(typing.get_args(hint)) > 1
    return _pydantic_only(hint)


_PYDANTIC_PACKAGES: Final = frozenset({"pydantic", "pydantic_core", "pydantic_extra_types"})


def _pydantic_only(hint: Any) -> bool:
    """A class pydantic validates that msgspec misreads or cannot read: a pydantic dataclass
    (msgspec reads it as a plain dataclass and would skip its validators and ``Field``
    settings) or a type of pydantic's own (``HttpUrl``, ``SecretStr``...)."""
    if not isinstance(hint, type) or _is_model_type(hint) or _is_path_type(hint):
        return False
    dataclasses = sys.modules.get("pydantic.dataclasses")
    if dataclasses is not None and dataclasses.is_pydantic_dataclass(hint):
        return True
    return hint.__module__.partition(".")[0] in _PYDANTIC_PACKAGES


def field_folded(hint: Any, default: Any) -> tuple[Any, Any]:
    """``(hint, default)`` of a parameter whose default is a pydantic ``Field(...)`` and whose
    type holds models (``pet: Cat | Dog = Field(discriminator="kind")``): the ``Field`` joins
    the annotation, where pydantic reads it alike, and the default it holds (if any) stays the
    default. Any other parameter is returned as it is."""
    if not is_field_info(default) or not _needs_pydantic(typing.Annotated[hint, default]):
        return hint, default
    value = default.default
    return typing.Annotated[hint, default], (
        inspect.Parameter.empty if no_field_default(value) else value
    )


def pydantic_adapted(hint: Any) -> Any:
    """``hint`` with every part only pydantic can read (``_needs_pydantic``) replaced by a
    ``PydanticAdapted`` class standing for it; ``hint`` itself when there is none."""
    if _pydantic() is None:
        return hint
    if _needs_pydantic(hint):
        bare = _bare(hint)
        names = [getattr(member, "__name__", "") for member in _union_members(bare)]
        name = "Or".join(filter(None, names)) or "Adapted"
        namespace: dict[str, Any] = {"annotation": hint}
        if isinstance(bare, type):  # named as the class it stands for, in every message
            namespace.update(__module__=bare.__module__, __qualname__=bare.__qualname__)
        return type(name, (PydanticAdapted,), namespace)
    return with_args_mapped(hint, pydantic_adapted)


def with_args_mapped(hint: Any, mapped: Callable[[Any], Any]) -> Any:
    """``hint`` with ``mapped`` applied to each of its type arguments (an ``Annotated``'s
    metadata included, ``...`` left as it is, a ``Literal``'s values never), rebuilt only when
    one of them changed; ``hint`` itself otherwise. ``TypeError`` or ``AttributeError`` for a
    generic that cannot be rebuilt."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is None or origin is typing.Literal or not args:
        return hint
    changed = tuple(mapped(arg) if arg is not Ellipsis else arg for arg in args)
    if all(new is old for new, old in zip(changed, args, strict=True)):
        return hint
    if origin is typing.Annotated:
        return typing.Annotated[changed]
    if origin is typing.Union:
        return typing.Union[changed]  # noqa: UP007
    if origin is types.UnionType:
        return functools.reduce(operator.or_, changed)
    if isinstance(hint, types.GenericAlias):
        return origin[changed]
    return hint.copy_with(changed)


def _union_members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(_bare(member) for member in typing.get_args(hint))
    return (hint,)


_SERIALIZER_FUNCTIONS = frozenset({"function-plain", "function-wrap"})
"""The ``serialization`` of a class's core schema that is a function of its own: what it
writes is not its fields as declared."""


@functools.cache
def _written_fields_generator(base: Any) -> Any:
    """pydantic's JSON Schema generator ``base``, requiring in serialization mode every field
    of a model or dataclass that ``model_dump`` always writes: all but one it leaves out by a
    condition (``exclude_if``). pydantic marks a field with a default optional there too (its
    ``json_schema_serialization_defaults_required`` is off unless a model turns it on), which
    told a program reading a tool's result that a key it always has might be missing. A
    ``TypedDict``'s keys stay as declared: the dict returned may leave them out, and so do the
    fields of a model or dataclass with a serializer function of its own (``@model_serializer``
    with no return type, such as one that drops ``None`` values), whose dump may lack any."""

    class GenerateWrittenFieldsSchema(base):  # type: ignore[misc]
        # One entry per model or dataclass being generated (they nest): whether its fields are
        # written by pydantic's own serializer.
        _written_as_declared: list[bool]

        def model_schema(self, schema: Any) -> Any:
            return self._class_schema(schema, super().model_schema)

        def dataclass_schema(self, schema: Any) -> Any:
            return self._class_schema(schema, super().dataclass_schema)

        def _class_schema(self, schema: Any, generate: Any) -> Any:
            serializer = schema.get("serialization")
            own = isinstance(serializer, dict) and serializer.get("type") in _SERIALIZER_FUNCTIONS
            stack = self.__dict__.setdefault("_written_as_declared", [])
            stack.append(not own)
            try:
                return generate(schema)
            finally:
                stack.pop()

        def field_is_required(self, field: Any, total: bool) -> bool:
            stack = self.__dict__.get("_written_as_declared") or [True]
            if self.mode == "serialization" and field["type"] != "typed-dict-field" and stack[-1]:
                return field.get("serialization_exclude_if") is None
            required: bool = super().field_is_required(field, total)
            return required

    return GenerateWrittenFieldsSchema


class SchemaHook:
    """msgspec's ``schema_hook`` for one schema generation: a path's schema, and a ``$ref``
    for a model whose definitions (its own and its nested models') are kept in
    ``definitions`` for the caller to put under ``$defs``.

    Each pydantic generation names its definitions by class name alone, so two of them (two
    models whose nested enums are both ``Kind``), or one of them and msgspec's own (an enum a
    model holds that is also a parameter), can give one name two shapes. The later shape is
    then kept under a name of its own (``Kind_2``) and the references that meant it follow,
    rather than one shape standing for both."""

    def __init__(self, mode: Literal["validation", "serialization"] = "validation") -> None:
        self.mode = mode
        self._generator: Any = None
        self.definitions: dict[str, Any] = {}
        # Names the schemas given back to msgspec refer to: msgspec holds those references,
        # so these names cannot move when merged.
        self._pinned: set[str] = set()

    def __call__(self, cls: Any) -> dict[str, Any]:
        if _is_path_type(cls):
            return dict(PATH_SCHEMA)
        if _is_model_type(cls):
            return self._model(cls)
        if _is_adapted(cls):
            schema = dict(
                _adapter(cls).json_schema(
                    ref_template="#/$defs/{model}",
                    mode=self.mode,
                    schema_generator=self._schema_generator(),
                )
            )
            return self._kept(schema.pop("$defs", {}), schema)
        raise NotImplementedError

    def _schema_generator(self) -> Any:
        """pydantic's schema generator for this mode: in serialization mode (a result's
        schema), one that requires the fields every ``model_dump`` writes."""
        if self._generator is None:
            json_schema = sys.modules["pydantic.json_schema"]
            self._generator = (
                _written_fields_generator(json_schema.GenerateJsonSchema)
                if self.mode == "serialization"
                else json_schema.GenerateJsonSchema
            )
        return self._generator

    def _model(self, cls: Any) -> dict[str, Any]:
        json_schema = sys.modules["pydantic.json_schema"]
        refs, top = json_schema.models_json_schema(
            [(cls, self.mode)],
            ref_template="#/$defs/{model}",
            schema_generator=self._schema_generator(),
        )
        return self._kept(top.get("$defs", {}), dict(refs[(cls, self.mode)]))

    def _kept(self, definitions: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
        """Keep one pydantic generation's ``definitions``; ``schema``, what msgspec is given,
        with its references following any definition renamed."""
        renames = _renames(definitions, self.definitions, frozenset())
        for name, definition in definitions.items():
            self.definitions[renames.get(name, name)] = _with_refs_renamed(definition, renames)
        given: dict[str, Any] = _with_refs_renamed(schema, renames)
        self._pinned.update(_refs_in(given))
        return given

    def merge_into(self, components: dict[str, Any], owner: str) -> None:
        """Add the models' definitions to ``components`` (msgspec's), renaming any whose name
        msgspec gave another shape; ``TypeError`` when that name is a model's own, which two
        different classes then share."""
        try:
            renames = _renames(self.definitions, components, frozenset(self._pinned))
        except TypeError as exc:
            raise TypeError(f"{owner}: {exc}") from None
        for name, definition in self.definitions.items():
            components[renames.get(name, name)] = _with_refs_renamed(definition, renames)
        self.definitions = {}
        self._pinned = set()


def _renames(
    definitions: dict[str, Any], taken: dict[str, Any], pinned: frozenset[str]
) -> dict[str, str]:
    """New names for the ``definitions`` whose names ``taken`` holds with another shape once
    their references follow the renames (a model is renamed too when only a nested type it
    refers to was); ``TypeError`` for a ``pinned`` name, which cannot move. A shape already
    kept under a name of its own (msgspec asks for a model once per place it appears) takes
    that name again rather than a new one."""
    renames: dict[str, str] = {}
    for _ in range(len(definitions) + 2):
        chosen: dict[str, str] = {}
        for name, definition in definitions.items():
            if name not in taken:
                continue
            rewritten = _with_refs_renamed(definition, renames)
            if taken[name] == rewritten:
                continue
            if name in pinned:
                raise _named_twice(name)
            same = [n for n in _renamed_forms(name, taken) if taken[n] == rewritten]
            if same:
                chosen[name] = same[0]
            elif renames.get(name, name) not in taken:
                chosen[name] = renames[name]  # a new name given in an earlier round
            else:
                chosen[name] = _fresh(name, taken, definitions, chosen)
        if chosen == renames:
            return renames
        renames = chosen
    # The rounds did not settle (shapes that refer to each other): a new name for each.
    return _fresh_renames(definitions, taken, pinned)


def _named_twice(name: str) -> TypeError:
    """The refusal of a clash under a name that cannot move (``pinned``)."""
    return TypeError(f"two types are named {name!r} and their schemas differ; rename one of them")


def _renamed_forms(name: str, taken: dict[str, Any]) -> list[str]:
    """The names a shape first named ``name`` was kept under (``Kind_2``, ``Kind_3``...)."""
    forms = []
    number = 2
    while f"{name}_{number}" in taken:
        forms.append(f"{name}_{number}")
        number += 1
    return forms


def _fresh(
    name: str, taken: dict[str, Any], definitions: dict[str, Any], chosen: dict[str, str]
) -> str:
    used = set(taken) | set(definitions) | set(chosen.values())
    number = 2
    while f"{name}_{number}" in used:
        number += 1
    return f"{name}_{number}"


def _fresh_renames(
    definitions: dict[str, Any], taken: dict[str, Any], pinned: frozenset[str]
) -> dict[str, str]:
    """``_renames`` without taking names again: a new name for every definition that clashes
    once its references follow the renames."""
    renames: dict[str, str] = {}
    while True:
        clashes = [
            name
            for name, definition in definitions.items()
            if name not in renames
            and name in taken
            and taken[name] != _with_refs_renamed(definition, renames)
        ]
        if not clashes:
            return renames
        for name in clashes:
            if name in pinned:
                raise _named_twice(name)
            renames[name] = _fresh(name, taken, definitions, renames)


def _with_refs_renamed(node: Any, renames: dict[str, str]) -> Any:
    """``node`` with every ``$ref`` to a renamed definition following it (``node`` itself
    when nothing is renamed)."""
    if not renames:
        return node
    if isinstance(node, dict):
        ref = node.get("$ref")
        out = {key: _with_refs_renamed(value, renames) for key, value in node.items()}
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            target = ref[len(_REF_PREFIX) :]
            if target in renames:
                out["$ref"] = _REF_PREFIX + renames[target]
        return out
    if isinstance(node, list):
        return [_with_refs_renamed(item, renames) for item in node]
    return node


def _refs_in(node: Any) -> set[str]:
    """The definition names ``node``'s ``$ref``s point at."""
    found: set[str] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            ref = current.get("$ref")
            if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
                found.add(ref[len(_REF_PREFIX) :])
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return found


_REF_PREFIX: Final = "#/$defs/"


def type_decode(cls: Any, value: Any) -> Any:
    """msgspec's ``dec_hook``: a path from the JSON string an argument holds, a model from the
    object (msgspec words a ``TypeError`` here as it words its own, with the argument's
    path)."""
    if _is_path_type(cls):
        if type(value) is not str:
            raise TypeError(f"Expected `str`, got `{_json_kind(value)}`")
        return cls(value)
    if _is_model_type(cls):
        return _validated(cls, cls.model_validate_json, value)
    if _is_adapted(cls):
        return _validated(cls, _adapter(cls).validate_json, value)
    raise NotImplementedError


def _validated(cls: Any, validate: Any, value: Any) -> Any:
    pydantic = _pydantic()
    try:
        # As the JSON it is: pydantic reads JSON text by JSON's rules (a datetime, a UUID, an
        # Enum from its string, also for a strict model), which Python objects do not get.
        return validate(msgspec.json.encode(value))
    except pydantic.ValidationError as exc:
        # Every mistake, so that a model corrects them in one turn rather than one a turn; a
        # bound keeps a list of a thousand bad items to a line.
        errors = exc.errors(include_url=False)
        named = "; ".join(_error_text(error) for error in errors[:_ERRORS_NAMED])
        if len(errors) > _ERRORS_NAMED:
            named += f" (and {len(errors) - _ERRORS_NAMED} more)"
        raise TypeError(f"{cls.__name__}: {named}") from None


_ERRORS_NAMED: Final = 10


def _error_text(error: Any) -> str:
    """One pydantic error as ``<message> at `<field path>```."""
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{error['msg']} at `{where}`" if where else str(error["msg"])


def _json_kind(value: Any) -> str:
    """The name msgspec gives a JSON value's kind in its messages."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def type_encode(value: Any) -> Any:
    """msgspec's ``enc_hook``: a path's text, a model's JSON data, a pydantic type's JSON
    form (``HttpUrl``'s text)."""
    if isinstance(value, pathlib.PurePath):
        return str(value)
    pydantic = _pydantic()
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if pydantic is not None and type(value).__module__.partition(".")[0] in _PYDANTIC_PACKAGES:
        try:
            return sys.modules["pydantic_core"].to_jsonable_python(value)
        except Exception:
            pass
    # In msgspec's own words, and a TypeError as its own refusals are: msgspec passes a
    # hook's NotImplementedError on as it is, which every caller here would have to know, and
    # one that escaped failed a call as a bare "Error: ".
    raise TypeError(f"Encoding objects of type {type(value).__qualname__} is unsupported")
