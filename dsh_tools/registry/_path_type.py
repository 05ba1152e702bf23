"""``pathlib`` paths as ``@tool`` types: the one type file tools are written with that msgspec
does not describe itself.

A path is a JSON string: its schema is ``{"type": "string", "format": "path"}`` (as pydantic
spells it), an argument arrives as the path class its annotation names (``Path``,
``PurePosixPath``...), and a returned path is its text. The three hooks go wherever ``@tool``
has msgspec describe, convert or encode a tool's types; every other type is left to msgspec
(``NotImplementedError`` is how a hook says so), so nothing else changes.
"""

from __future__ import annotations

import pathlib
from typing import Any, Final

__all__ = ["PATH_SCHEMA", "path_decode", "path_encode", "path_schema"]

PATH_SCHEMA: Final = {"type": "string", "format": "path"}


def _is_path_type(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, pathlib.PurePath)


def path_schema(cls: Any) -> dict[str, Any]:
    """msgspec's ``schema_hook``: the JSON Schema of a path type."""
    if _is_path_type(cls):
        return dict(PATH_SCHEMA)
    raise NotImplementedError


def path_decode(cls: Any, value: Any) -> Any:
    """msgspec's ``dec_hook``: a path from the JSON string an argument holds (msgspec words a
    ``TypeError`` here as it words its own, with the argument's path)."""
    if not _is_path_type(cls):
        raise NotImplementedError
    if type(value) is not str:
        raise TypeError(f"Expected `str`, got `{_json_kind(value)}`")
    return cls(value)


def _json_kind(value: Any) -> str:
    """The name msgspec gives a JSON value's kind in its messages."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def path_encode(value: Any) -> Any:
    """msgspec's ``enc_hook``: a path's text."""
    if isinstance(value, pathlib.PurePath):
        return str(value)
    raise NotImplementedError
