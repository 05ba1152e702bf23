"""The author schema DSL: plain dicts compiled to the enforced raw JSON Schema subset.

Two author forms exist. A *value schema* is a dict with exactly one of ``type`` (``string``,
``number``, ``integer``, ``boolean``, ``null``, ``array``, ``object``, ``json``) or ``oneOf``.
A *parameter schema* maps property names to value schemas, each of which may also say
``"required": True``; the map is the implicit, open object root of a tool's arguments.
Every object node must state ``additionalProperties`` explicitly. ``json`` compiles to an
annotation-only node (any lossless JSON value).

Compilation is fail-fast (one ``JsonSchemaError`` violation at the first problem in depth-first
document order) and iterative; the raw-subset assertion that follows is exhaustive. The result
is built from fresh dicts and lists (annotation payloads detached), then deep-frozen, so it can
be shared across threads.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from ..actors import JsonSchemaError
from ._json_schema import assert_supported_json_schema
from ._lossless import LosslessJsonError
from ._lossless_copy import snapshot_json, thaw
from ._schema_plan import _build_plan
from ._schema_predicates import _is_array, _is_record, _spath
from ._schema_validate import validate_plan

__all__ = ["compile_parameters", "compile_schema", "validate_args"]

_ANNOTATION_KEYS: Final = ("description", "title", "default", "examples")
_SCALAR_KEYS: Final = frozenset({"type", "enum", "const", *_ANNOTATION_KEYS})
_ARRAY_KEYS: Final = frozenset({"type", "items", "uniqueItems", *_ANNOTATION_KEYS})
_OBJECT_KEYS: Final = frozenset({"type", "properties", "additionalProperties", *_ANNOTATION_KEYS})
_JSON_KEYS: Final = frozenset({"type", *_ANNOTATION_KEYS})
_UNION_KEYS: Final = frozenset({"type", "oneOf", *_ANNOTATION_KEYS})
_SCALAR_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null"})

_VALUE: Final = 0
_MAP: Final = 1
_PROPERTY: Final = 2
_MAP_TAIL: Final = 3
_LEAVE: Final = 4


def _author_error(path: Any, suffix: str) -> JsonSchemaError:
    return JsonSchemaError([f"{_spath(path)}{suffix}"])


def _check_keys(node: Any, path: Any, allowed: frozenset[str], allow_required: bool) -> None:
    for key in node:
        if key not in allowed and not (allow_required and key == "required"):
            raise _author_error(path, f".{key} is not supported by the value schema DSL")


def _copy_annotations(source: Any, target: dict[str, Any]) -> None:
    """Copy the annotations present, in canonical order. ``default`` and ``examples`` are
    detached with the lossless walker; a lossy payload is kept as given so that the raw-subset
    assertion reports it."""
    for key in _ANNOTATION_KEYS:
        if key in source:
            payload = source[key]
            if key == "default" or key == "examples":
                with contextlib.suppress(LosslessJsonError):
                    payload = thaw(payload)
            target[key] = payload


def _run_compiler(initial: tuple[Any, ...]) -> None:
    """Execute the compile task graph with an explicit stack (no recursion)."""
    seen: set[int] = set()
    tasks: list[tuple[Any, ...]] = [initial]
    while tasks:
        task = tasks.pop()
        kind = task[0]
        if kind == _LEAVE:
            seen.discard(task[1])
            continue
        if kind == _MAP_TAIL:
            # (kind, node to receive "required" or None, required names)
            if task[2] and task[1] is not None:
                task[1]["required"] = task[2]
            continue
        if kind == _PROPERTY:
            # (kind, property schema, path, name, compiled properties, required names)
            prop, path, name, properties, required = task[1:]
            if not _is_record(prop):
                raise _author_error(path, " must be a value schema object")
            if "required" in prop:
                if prop["required"] is not True:
                    raise _author_error(path, ".required must be true when present")
                required.append(name)
            tasks.append((_VALUE, prop, path, True, properties, name))
            continue
        if kind == _MAP:
            # (kind, property map, path, compiled properties, required names, tail node)
            source, path, properties, required, tail_node = task[1:]
            if not _is_record(source):
                raise _author_error(path, " must be an object of value schemas")
            if id(source) in seen:
                raise _author_error(path, " is circular")
            seen.add(id(source))
            tasks.append((_LEAVE, id(source)))
            tasks.append((_MAP_TAIL, tail_node, required))
            entries = list(source.items())
            for name, prop in reversed(entries):
                tasks.append((_PROPERTY, prop, (path, f".{name}"), name, properties, required))
            continue

        # (kind, value schema, path, allow_required, target container, slot in target)
        source, path, allow_required, target, slot = task[1:]
        if not _is_record(source):
            raise _author_error(path, " must be a value schema object")
        if id(source) in seen:
            raise _author_error(path, " is circular")
        seen.add(id(source))
        tasks.append((_LEAVE, id(source)))
        node: dict[str, Any] = {}
        target[slot] = node

        if "oneOf" in source:
            _check_keys(source, path, _UNION_KEYS, allow_required)
            if "type" in source:
                raise _author_error(path, " cannot declare both type and oneOf")
            branches = source["oneOf"]
            if not _is_array(branches):
                raise _author_error(path, ".oneOf must be an array of at least two value schemas")
            compiled_branches: list[Any] = [None] * len(branches)
            node["oneOf"] = compiled_branches
            _copy_annotations(source, node)
            for index in range(len(branches) - 1, -1, -1):
                tasks.append(
                    (
                        _VALUE,
                        branches[index],
                        (path, f".oneOf[{index}]"),
                        False,
                        compiled_branches,
                        index,
                    )
                )
            continue

        schema_type = source.get("type")
        if type(schema_type) is not str:
            schema_type = None
        if schema_type == "json":
            _check_keys(source, path, _JSON_KEYS, allow_required)
            _copy_annotations(source, node)
        elif schema_type == "object":
            _check_keys(source, path, _OBJECT_KEYS, allow_required)
            if type(source.get("additionalProperties")) is not bool:
                raise _author_error(path, ".additionalProperties must be explicitly true or false")
            node["type"] = "object"
            _copy_annotations(source, node)
            node["additionalProperties"] = source["additionalProperties"]
            if "properties" in source:
                compiled_properties: dict[str, Any] = {}
                node["properties"] = compiled_properties
                tasks.append(
                    (
                        _MAP,
                        source["properties"],
                        (path, ".properties"),
                        compiled_properties,
                        [],
                        node,
                    )
                )
        elif schema_type == "array":
            _check_keys(source, path, _ARRAY_KEYS, allow_required)
            node["type"] = "array"
            _copy_annotations(source, node)
            if "items" in source:
                node["items"] = None  # its place in the canonical order; compiled below
                tasks.append((_VALUE, source["items"], (path, ".items"), False, node, "items"))
            if "uniqueItems" in source:
                node["uniqueItems"] = source["uniqueItems"]  # the assertion wants a boolean
        elif schema_type in _SCALAR_TYPES:
            _check_keys(source, path, _SCALAR_KEYS, allow_required)
            node["type"] = schema_type
            _copy_annotations(source, node)
            if "enum" in source:
                entries = source["enum"]
                if not _is_array(entries):
                    raise _author_error(path, ".enum must be a non-empty array of scalar values")
                node["enum"] = list(entries)
            if "const" in source:
                node["const"] = source["const"]
        else:
            raise _author_error(
                path,
                ".type must be string/number/integer/boolean/null/array/object/json, or use oneOf",
            )


def _freeze(compiled: Any) -> Any:
    """Assert the compiled tree, then deep-freeze it (it is lossless once asserted)."""
    assert_supported_json_schema(compiled)
    return snapshot_json(compiled, "schema")


def compile_schema(dsl: Any) -> Any:
    """Compile one DSL value schema to raw JSON Schema (a deep-frozen ``FrozenDict``).

    Raises ``JsonSchemaError``: author errors at the first problem, rooted at ``schema``, then
    every raw-subset violation of the result.
    """
    holder: list[Any] = [None]
    _run_compiler((_VALUE, dsl, "schema", False, holder, 0))
    return _freeze(holder[0])


def compile_parameters(dsl: Any) -> Any:
    """Compile a DSL property map to the object-rooted raw parameter schema.

    The result is ``{"type": "object", "properties": {...}}`` plus ``"required"`` when any
    property says ``"required": True``; it never has ``additionalProperties`` (the implicit
    root is open). Author errors are rooted at ``parameters``.
    """
    if _is_record(dsl) and dsl.get("type") == "object":
        # No property's schema is the str "object": this is a whole JSON Schema, the form a
        # raw ToolDefinition takes, which would otherwise be read as a property named "type".
        raise _author_error(
            "parameters",
            ' is a JSON Schema object ({"type": "object", "properties": ...}); the DSL takes '
            'the property map itself, {name: value schema} with "required": true on each '
            "required one (a raw JSON Schema goes to ToolDefinition(parameters=...))",
        )
    properties: dict[str, Any] = {}
    required: list[str] = []
    _run_compiler((_MAP, dsl, "parameters", properties, required, None))
    compiled: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        compiled["required"] = required
    return _freeze(compiled)


def validate_args(spec: Any, args: Any) -> list[str]:
    """Validate ``args`` against a DSL parameter map; violations in walk order.

    The spec is compiled on every call (a malformed spec raises ``JsonSchemaError``); paths
    are rooted at the arguments themselves (``path``, ``config.host``, ``tags[1]``) and a
    non-object gives exactly ``"arguments" must be an object``.
    """
    return validate_plan(_build_plan(compile_parameters(spec)), args, "")
