"""The ``@tool`` types msgspec does not describe itself, given to it through its hooks:
``pathlib`` paths and pydantic models, the two that tools are most often written with.

- A path is a JSON string: its schema is ``{"type": "string", "format": "path"}`` (as pydantic
  spells it), an argument arrives as the path class its annotation names (``Path``,
  ``PurePosixPath``...), and a returned path is its text.
- A pydantic model is the object its own JSON Schema describes (declared once under
  ``$defs``, as msgspec declares Structs), an argument is validated by the model as pydantic
  validates it (its own configuration: aliases, validators, ``extra="forbid"``, lax unless it
  says ``strict``) and arrives as the model instance, and a returned model is its
  ``model_dump(mode="json", by_alias=True)``.

Every other type is left to msgspec (``NotImplementedError`` is how a hook says so), so
nothing else changes. pydantic is no dependency: an annotation that names a model has imported
it, so it is looked up in ``sys.modules``.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Final, Literal

from ._lossless_copy import thaw

__all__ = ["PATH_SCHEMA", "SchemaHook", "type_decode", "type_encode"]

PATH_SCHEMA: Final = {"type": "string", "format": "path"}


def _is_path_type(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, pathlib.PurePath)


def _pydantic() -> Any:
    return sys.modules.get("pydantic")


def _is_model_type(cls: Any) -> bool:
    pydantic = _pydantic()
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


class SchemaHook:
    """msgspec's ``schema_hook`` for one schema generation: a path's schema, and a ``$ref``
    for a model whose definitions (its own and its nested models') are kept in
    ``definitions`` for the caller to put under ``$defs``."""

    def __init__(self, mode: Literal["validation", "serialization"] = "validation") -> None:
        self.mode = mode
        self.definitions: dict[str, Any] = {}

    def __call__(self, cls: Any) -> dict[str, Any]:
        if _is_path_type(cls):
            return dict(PATH_SCHEMA)
        if _is_model_type(cls):
            return self._model(cls)
        raise NotImplementedError

    def _model(self, cls: Any) -> dict[str, Any]:
        json_schema = sys.modules["pydantic.json_schema"]
        refs, top = json_schema.models_json_schema(
            [(cls, self.mode)], ref_template="#/$defs/{model}"
        )
        for name, definition in top.get("$defs", {}).items():
            self.definitions[name] = definition
        return dict(refs[(cls, self.mode)])

    def merge_into(self, components: dict[str, Any], owner: str) -> None:
        """Add the models' definitions to ``components``; ``TypeError`` when a name there
        already stands for another shape (a Struct and a model of one name)."""
        for name, definition in self.definitions.items():
            if name in components and components[name] != definition:
                raise TypeError(
                    f"{owner}: two types are named {name!r} and their schemas differ; "
                    "rename one of them"
                )
            components[name] = definition


def type_decode(cls: Any, value: Any) -> Any:
    """msgspec's ``dec_hook``: a path from the JSON string an argument holds, a model from the
    object (msgspec words a ``TypeError`` here as it words its own, with the argument's
    path)."""
    if _is_path_type(cls):
        if type(value) is not str:
            raise TypeError(f"Expected `str`, got `{_json_kind(value)}`")
        return cls(value)
    if _is_model_type(cls):
        return _validated(cls, value)
    raise NotImplementedError


def _validated(cls: Any, value: Any) -> Any:
    pydantic = _pydantic()
    try:
        # Plain lists and dicts, as a model's own input is (a field typed Any keeps them).
        return cls.model_validate(thaw(value))
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        text = f"{first['msg']} at `{where}`" if where else str(first["msg"])
        if len(errors) > 1:
            text += f" (and {len(errors) - 1} more)"
        raise TypeError(f"{cls.__name__}: {text}") from None


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
    """msgspec's ``enc_hook``: a path's text, a model's JSON data."""
    if isinstance(value, pathlib.PurePath):
        return str(value)
    pydantic = _pydantic()
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    raise NotImplementedError
