"""What the SDK renderer reads from full JSON Schema besides its types: ``allOf`` merged into
one object shape, constraint and format notes for the comment above a property, and which
union branches are shapes of their own."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ..actors import FrozenDict, FrozenList
from ..registry import resolve_local_ref

_UNION_KEYS: Final = ("anyOf", "oneOf")
_NOTE_KEYS: Final = (
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "default",
    "contentEncoding",
    "contentMediaType",
)
# A map's ``propertyNames``: its string constraints, and the keys it lists.
_KEY_NOTE_KEYS: Final = ("enum", "const", "format", "pattern", "minLength", "maxLength")
# Notes whose string values are shown as they are, not as JSON.
_TEXT_NOTE_KEYS: Final = frozenset({"format", "pattern", "contentEncoding", "contentMediaType"})
_NOTE_LIMIT: Final = 80
# Keywords that make an ``anyOf``/``oneOf`` branch a type of its own (rather than a constraint
# on the enclosing node, as in ``{"type": "object", "anyOf": [{"required": ["a"]}, ...]}``).
_SHAPE_KEYS: Final = frozenset(
    {"type", "$ref", "properties", "items", "enum", "const", "anyOf", "oneOf", "allOf"}
)


def _is_map(value: Any) -> bool:
    return type(value) is dict or type(value) is FrozenDict


def _is_list(value: Any) -> bool:
    return type(value) is list or type(value) is FrozenList


def _extra_schema(node: Any) -> Any:
    """The schema of an object's keys beyond its ``properties``, in ``additionalProperties``'
    terms: ``False`` (no other key), a schema, or anything else (any key, any value).

    ``unevaluatedProperties`` stands in for an absent ``additionalProperties`` (the draft
    2020-12 spelling of a closed object); ``patternProperties`` widen it with the values of
    the keys they match: a closed object with patterns takes those keys, typed as the union of
    the patterns' values (their note names the patterns)."""
    additional = node.get("additionalProperties")
    if additional is None:
        additional = node.get("unevaluatedProperties")
    patterns = node.get("patternProperties")
    if not _is_map(patterns) or not patterns:
        return additional
    if additional is not False and not _is_map(additional):
        return additional
    values = [value for value in patterns.values() if value is not False]
    if _is_map(additional):
        values.append(additional)
    if not values:
        return False
    if any(not _is_map(value) or not (_SHAPE_KEYS & value.keys()) for value in values):
        return {}  # a value that may be anything
    return values[0] if len(values) == 1 else {"anyOf": values}


def _pattern_note(shape: Any) -> str:
    """What the keys of a closed object with ``patternProperties`` must match, beside its
    listed properties: its type says only ``str``."""
    patterns = shape.get("patternProperties")
    if not _is_map(patterns) or not patterns:
        return ""
    if shape.get("additionalProperties", shape.get("unevaluatedProperties")) is not False:
        return ""
    shown = " or ".join(_note_value("pattern", key) for key in patterns)
    listed = _is_map(shape.get("properties")) and shape["properties"]
    return f"{'other keys' if listed else 'keys'} pattern: {shown}"


def _note_value(key: str, value: Any) -> str:
    try:
        raw = type(value) is str and key in _TEXT_NOTE_KEYS
        text = value if raw else msgspec.json.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError):
        return "?"
    return text if len(text) <= _NOTE_LIMIT else text[: _NOTE_LIMIT - 3] + "..."


def _constraint_notes(node: Any) -> str:
    """``key: value`` notes for the constraints and formats of a property (and of its union
    branches, and of the array items and map values of each), for the comment above it."""
    if not _is_map(node):
        return ""
    notes: list[str] = []
    shapes: list[Any] = [node]
    for key in _UNION_KEYS:
        branches = node.get(key)
        if _is_list(branches):
            shapes.extend(branch for branch in branches if _is_map(branch))
    sources: list[tuple[str, Any]] = []
    for shape in shapes:
        sources.append(("", shape))
        if _is_map(shape.get("items")):
            sources.append(("items ", shape["items"]))
        if _is_map(shape.get("additionalProperties")):
            sources.append(("values ", shape["additionalProperties"]))
        # A map's keys are typed ``str`` (JSON keys are text): only this note tells a program
        # that the keys of a ``dict[int, T]`` parameter must be numbers, or which keys exist.
        if _is_map(shape.get("propertyNames")):
            sources.append(("keys ", shape["propertyNames"]))
        pattern_note = _pattern_note(shape)
        if pattern_note and pattern_note not in notes:
            notes.append(pattern_note)
    for label, source in sources:
        for key in _KEY_NOTE_KEYS if label == "keys " else _NOTE_KEYS:
            if key in source:
                note = f"{label}{key}: {_note_value(key, source[key])}"
                if note not in notes:
                    notes.append(note)
    for key, lead in (("anyOf", "requires: "), ("oneOf", "requires exactly one of: ")):
        alternatives = _required_alternatives(node.get(key))
        if alternatives:
            notes.append(lead + alternatives)
    return "; ".join(notes)


def _required_alternatives(branches: Any) -> str:
    """``a or b and c`` for union branches that only require keys (``{"anyOf": [{"required":
    ["a"]}, {"required": ["b", "c"]}]}``): which keys an object needs, which its type, every
    key ``NotRequired``, cannot say."""
    if not _is_list(branches) or not branches:
        return ""
    shown: list[str] = []
    for branch in branches:
        if not _is_map(branch) or _SHAPE_KEYS & branch.keys():
            return ""
        required = branch.get("required")
        if not _is_list(required) or not required or any(type(k) is not str for k in required):
            return ""
        shown.append(" and ".join(required))
    return " or ".join(shown)


def _merge_all_of(node: Any, document: Any) -> Any:
    """One schema for an ``allOf``: a single branch merged with the node's own keywords, or the
    object shapes of every branch merged; ``None`` when the branches are not object shapes."""
    branches = node.get("allOf")
    own = {key: value for key, value in node.items() if key != "allOf"}
    if not _is_list(branches) or not branches:
        return own
    if len(branches) == 1 and _is_map(branches[0]) and not (_SHAPE_KEYS & own.keys()):
        return {**own, **branches[0]}
    properties: dict[str, Any] = {}
    patterns: dict[str, Any] = {}
    required: list[str] = []
    closed = own.get("unevaluatedProperties") is False
    for part in [own, *branches]:
        seen: set[int] = set()
        while _is_map(part) and "$ref" in part and id(part) not in seen:
            seen.add(id(part))
            part = resolve_local_ref(document, part["$ref"])
        if not _is_map(part):
            return None
        declared = part.get("type")
        if declared not in (None, "object") or any(k in part for k in ("anyOf", "oneOf", "allOf")):
            return None
        if _is_map(part.get("properties")):
            properties.update(part["properties"])
        if _is_map(part.get("patternProperties")):
            patterns.update(part["patternProperties"])
        if _is_list(part.get("required")):
            required.extend(name for name in part["required"] if type(name) is str)
        closed = closed or part.get("additionalProperties") is False
    merged: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        merged["required"] = list(dict.fromkeys(required))
    if patterns:
        merged["patternProperties"] = patterns
    if closed:
        merged["additionalProperties"] = False
    return merged
