"""Typed views for ``define_tool``: a ``TypedDict`` or ``msgspec.Struct`` checked against the
compiled schema at definition time, and the converters that build the view at call time."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import msgspec

from ..actors import ToolArgsError
from ._dataclass_defaults import defaults_filler
from ._lossless import LosslessJsonError
from ._lossless_copy import thaw
from ._tool_call import holds_custom
from ._type_hooks import type_decode


def _class_fields(owner: str, role: str, cls: Any) -> tuple[list[str], set[str]]:
    """Field names (in declaration order) and required names of a TypedDict or Struct class."""
    if typing.is_typeddict(cls):
        names = list(cls.__annotations__)
        required = set(cls.__required_keys__)
        # Under ``from __future__ import annotations`` the class sees strings and cannot tell
        # ``NotRequired[...]`` apart; the evaluated hints can.
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:
            hints = {}
        for key, hint in hints.items():
            origin = typing.get_origin(hint)
            if origin is typing.NotRequired:
                required.discard(key)
            elif origin is typing.Required:
                required.add(key)
        return names, required
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        infos = msgspec.structs.fields(cls)
        return [f.encode_name for f in infos], {f.encode_name for f in infos if f.required}
    raise TypeError(f"{owner}: {role} must be a TypedDict or msgspec.Struct class")


def _check_view(owner: str, role: str, cls: Any, schema: Any, against: str) -> None:
    """Fail at definition time when a typed view's fields differ from the compiled schema."""
    names, required = _class_fields(owner, role, cls)
    if schema.get("type") != "object":
        raise TypeError(f"{owner}: {role} {cls.__name__} needs an object-rooted {against} schema")
    declared = list(schema.get("properties", {}))
    declared_required = set(schema.get("required", ()))
    problems: list[str] = []
    only_schema = [n for n in declared if n not in names]
    only_class = [n for n in names if n not in declared]
    if only_schema:
        problems.append(f"only in {against}: {', '.join(only_schema)}")
    if only_class:
        problems.append(f"only in {cls.__name__}: {', '.join(only_class)}")
    if not only_schema and not only_class:
        req_schema = [n for n in declared if n in declared_required and n not in required]
        req_class = [n for n in declared if n in required and n not in declared_required]
        if req_schema:
            problems.append(f"required only in {against}: {', '.join(req_schema)}")
        if req_class:
            problems.append(f"required only in {cls.__name__}: {', '.join(req_class)}")
    if problems:
        raise TypeError(
            f"{owner}: {role} {cls.__name__} does not match {against}: " + "; ".join(problems)
        )


def _view_builder(cls: Any) -> Callable[[Any], Any]:
    """``args -> typed view`` via ``msgspec.convert`` on a thawed copy; failures are drift."""
    name = cls.__name__
    fill = defaults_filler(cls)
    hook = type_decode if holds_custom(cls) else None

    def view(args: Any) -> Any:
        try:
            built = msgspec.convert(thaw(args), cls, strict=False, dec_hook=hook)
        except (msgspec.ValidationError, LosslessJsonError) as exc:
            raise ToolArgsError([f"arguments do not fit {name}: {exc}"]) from None
        if fill is not None:
            fill(built)
        return built

    return view


def _output_view_builder(cls: Any) -> Callable[[Any], Any]:
    fill = defaults_filler(cls)
    hook = type_decode if holds_custom(cls) else None

    def view(value: Any) -> Any:
        built = msgspec.convert(thaw(value), cls, strict=False, dec_hook=hook)
        if fill is not None:
            fill(built)
        return built

    return view
