"""The enforced raw JSON Schema subset: the assertion, the object-root guard and the validator
(whose plan and value walk live in ``_schema_plan`` and ``_schema_validate``).

Supported vocabulary: ``type`` (one of ``object``, ``array``, ``string``, ``number``,
``integer``, ``boolean``, ``null``), ``oneOf``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``uniqueItems`` (JSON equality: ``1`` equals ``1.0``,
``true`` never equals ``1``, key order is irrelevant), ``enum``, ``const`` and the annotations
``description``, ``title``, ``default`` and ``examples``. A node with neither ``type`` nor
``oneOf`` accepts any lossless JSON value.

Schema records are exact ``dict`` or ``FrozenDict`` with exact ``str`` keys; schema arrays are
exact ``list`` or ``FrozenList``. Every walk of the subset is an explicit work-stack loop (no
recursion), so schemas and values nested thousands of levels deep work at the default recursion
limit. Paths are built lazily and rendered only for diagnostics.
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import JsonSchemaError
from ._lossless import _SURROGATE, INT_MAX, INT_MIN, _float_ok
from ._lossless_check import is_json_value
from ._schema_plan import prepare_schema
from ._schema_predicates import (
    _MISSING,
    _SCALAR_TYPES,
    _SCHEMA_TYPES,
    _in_enum,
    _is_array,
    _is_record,
    _spath,
)
from ._schema_validate import validate_plan

__all__ = [
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "validate_json_schema_value",
]

_CONSTRAINTS: Final = frozenset(
    {
        "type",
        "oneOf",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "uniqueItems",
        "enum",
        "const",
    }
)
_ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples"})
_SIBLINGS: Final = (
    "properties",
    "required",
    "additionalProperties",
    "items",
    "uniqueItems",
    "enum",
    "const",
)
_PLACEMENT: Final = (
    ("properties", frozenset({"object"})),
    ("required", frozenset({"object"})),
    ("additionalProperties", frozenset({"object"})),
    ("items", frozenset({"array"})),
    ("uniqueItems", frozenset({"array"})),
    ("enum", _SCALAR_TYPES),
    ("const", _SCALAR_TYPES),
)
_UNSUPPORTED_KEYWORD: Final = (
    " is not a supported keyword (subset: type/oneOf/properties/required/"
    "additionalProperties/items/uniqueItems/enum/const + annotations)"
)


def _scalar_matches(schema_type: str, value: Any) -> bool:
    """The type predicates shared by enum/const entries and value validation."""
    t = type(value)
    if schema_type == "string":
        return t is str and (value.isascii() or _SURROGATE.search(value) is None)
    if schema_type == "number":
        if t is int:
            return bool(INT_MIN <= value <= INT_MAX)
        return t is float and _float_ok(value)
    if schema_type == "integer":
        if t is int:
            return bool(INT_MIN <= value <= INT_MAX)
        return (
            t is float
            and _float_ok(value)
            and value.is_integer()
            and bool(INT_MIN <= value <= INT_MAX)
        )
    if schema_type == "boolean":
        return t is bool
    return value is None


# --- the assertion -----------------------------------------------------------------------------

_ENTER: Final = 0
_LEAVE: Final = 1
_ONE_OF_TAIL: Final = 2
_OBJECT_TAIL: Final = 3


def _check_object_tail(node: Any, path: Any, properties: Any, out: list[str]) -> None:
    if "required" in node:
        required = node["required"]
        if not _is_array(required) or any(type(name) is not str for name in required):
            out.append(f"{_spath(path)}.required must be an array of strings")
        else:
            declared = properties if _is_record(properties) else {}
            for name in required:
                if name not in declared:
                    out.append(f'{_spath(path)}.required names "{name}" which is not in properties')
    if "additionalProperties" in node and type(node["additionalProperties"]) is not bool:
        out.append(f"{_spath(path)}.additionalProperties must be a boolean")


def _schema_violations(schema: Any, root: str = "schema") -> list[str]:
    """Every subset violation of ``schema`` in walk order (pre-order, keys in insertion order,
    tail checks after their subtree)."""
    out: list[str] = []
    seen: set[int] = set()
    tasks: list[tuple[Any, ...]] = [(_ENTER, schema, root)]
    while tasks:
        task = tasks.pop()
        kind = task[0]
        if kind == _LEAVE:
            seen.discard(task[1])
            continue
        if kind == _ONE_OF_TAIL:
            node, path = task[1], task[2]
            for key in _SIBLINGS:
                if key in node:
                    out.append(f"{_spath(path)}.{key} is not supported beside oneOf")
            continue
        if kind == _OBJECT_TAIL:
            _check_object_tail(task[1], task[2], task[3], out)
            continue
        node, path = task[1], task[2]
        if not _is_record(node):
            out.append(f"{_spath(path)} must be a schema object")
            continue
        if id(node) in seen:
            out.append(f"{_spath(path)} is circular")
            continue
        seen.add(id(node))
        tasks.append((_LEAVE, id(node)))
        for key in node:
            if key in _CONSTRAINTS:
                continue
            if key in _ANNOTATIONS:
                if not is_json_value(node[key]):
                    out.append(f"{_spath(path)}.{key} annotation must be lossless JSON data")
                continue
            out.append(f"{_spath(path)}.{key}{_UNSUPPORTED_KEYWORD}")
        if "description" in node and type(node["description"]) is not str:
            out.append(f"{_spath(path)}.description must be a string")
        if "title" in node and type(node["title"]) is not str:
            out.append(f"{_spath(path)}.title must be a string")
        has_type = "type" in node
        has_one_of = "oneOf" in node
        if has_type and has_one_of:
            out.append(f"{_spath(path)} cannot declare both type and oneOf")
            continue
        if not has_type and not has_one_of:
            for key in _SIBLINGS:
                if key in node:
                    out.append(f"{_spath(path)}.{key} requires type or oneOf")
            continue
        if has_one_of:
            branches = node["oneOf"]
            tasks.append((_ONE_OF_TAIL, node, path))
            if not _is_array(branches) or len(branches) < 2:
                out.append(f"{_spath(path)}.oneOf must be an array of at least two schemas")
            else:
                for index in range(len(branches) - 1, -1, -1):
                    tasks.append((_ENTER, branches[index], (path, f".oneOf[{index}]")))
            continue
        schema_type = node["type"]
        if type(schema_type) is not str or schema_type not in _SCHEMA_TYPES:
            if _is_array(schema_type) or type(schema_type) is tuple:
                out.append(
                    f"{_spath(path)}.type must be a single type string "
                    "(type arrays are not supported)"
                )
            else:
                out.append(f"{_spath(path)}.type must be one of {'/'.join(_SCHEMA_TYPES)}")
            continue
        for key, allowed in _PLACEMENT:
            if key in node and schema_type not in allowed:
                out.append(f'{_spath(path)}.{key} is not supported on type "{schema_type}"')
        if schema_type == "object":
            properties = node.get("properties", _MISSING)
            tasks.append((_OBJECT_TAIL, node, path, properties))
            if properties is not _MISSING:
                if not _is_record(properties):
                    out.append(f"{_spath(path)}.properties must be an object of schemas")
                else:
                    entries = list(properties.items())
                    for name, child in reversed(entries):
                        tasks.append((_ENTER, child, (path, f".properties.{name}")))
        elif schema_type == "array":
            if "uniqueItems" in node and type(node["uniqueItems"]) is not bool:
                out.append(f"{_spath(path)}.uniqueItems must be a boolean")
            if "items" in node:
                tasks.append((_ENTER, node["items"], (path, ".items")))
        else:
            entries = node.get("enum", _MISSING)
            enum_valid = (
                _is_array(entries)
                and len(entries) > 0
                and all(_scalar_matches(schema_type, entry) for entry in entries)
            )
            if entries is not _MISSING and not enum_valid:
                out.append(f"{_spath(path)}.enum must be a non-empty array of {schema_type} values")
            if "const" in node:
                const = node["const"]
                if not _scalar_matches(schema_type, const):
                    out.append(f"{_spath(path)}.const must be a {schema_type} value")
                elif enum_valid and not _in_enum(const, entries):
                    out.append(
                        f"{_spath(path)}.const must be one of {_spath(path)}.enum "
                        "when both are declared"
                    )
    return out


def assert_supported_json_schema(schema: Any) -> None:
    """Raise ``JsonSchemaError`` listing every way ``schema`` leaves the supported subset.

    Any JSON root is allowed; an annotation-only node means "any lossless JSON value".
    """
    violations = _schema_violations(schema)
    if violations:
        raise JsonSchemaError(violations)


def assert_object_json_schema(schema: Any) -> None:
    """``assert_supported_json_schema`` plus the object-root rule of structured outputs."""
    violations = _schema_violations(schema)
    if not violations and not (_is_record(schema) and schema.get("type", _MISSING) == "object"):
        violations.append('schema.type must be "object" (structured output is object-rooted)')
    if violations:
        raise JsonSchemaError(violations)


def validate_json_schema_value(schema: Any, value: Any, path: str = "value") -> list[str]:
    """Validate ``value`` against an asserted subset schema; violations in walk order.

    Total over values: it returns a list for any Python object and never raises, except for a
    schema that never passed ``assert_supported_json_schema`` and names an unknown ``type``
    outside any container (or has a node that is not a mapping): a programming error, raised
    as ``ValueError`` naming the type. ``path`` is the root label; an empty label renders as
    ``arguments`` and its children without a leading dot. If inspecting the value raises, the
    innermost node with a recognized type contributes ``"<p>" must be a lossless JSON value``.
    """
    return validate_plan(prepare_schema(schema), value, path)
