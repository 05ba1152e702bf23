"""Whether a ``oneOf`` the SDK renders as a union needs a word on what its ``|`` cannot say.

``A | B`` reads as "either, or both" (``anyOf``); a ``oneOf`` refuses a value that matches
two of its types. That matters only where two types can take one value: ``str | None`` or
objects told apart by a tag (``{"kind": "cat"}`` against ``{"kind": "dog"}``, the shape of a
discriminated union) cannot, and their comment stays as it was. Wherever this cannot be told
(a type nested past the walk's budget, a pattern, a ``$ref`` it cannot follow), the note is
given: it is true of every ``oneOf``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from ..registry import resolve_local_ref
from ._sdk_schema import _SHAPE_KEYS, _UNION_KEYS, _is_list, _is_map

__all__ = ["ONE_OF_NOTE", "one_of_note", "one_of_notes"]

ONE_OF_NOTE: Final = "must match exactly one of the union's types"
_MAX_BRANCHES: Final = 64  # pairs compared: beyond this the note is given
_WALK_BUDGET: Final = 256  # schema nodes read to tell what one branch accepts
_MAX_REF_HOPS: Final = 32
_KIND_OF_TYPE: Final = {
    "null": "null",
    "boolean": "boolean",
    "integer": "number",  # an integer is a number: the two overlap
    "number": "number",
    "string": "string",
    "array": "array",
    "object": "object",
}

_Literal = tuple[str, Any]


class _Accepts:
    """What one branch accepts, as far as it can be told: the JSON kinds of its values, the
    values themselves when it lists them, and for an object the values of its required
    properties that list them (its tags: a discriminated union's ``kind``)."""

    __slots__ = ("kinds", "tags", "values")

    def __init__(
        self,
        kinds: frozenset[str],
        values: frozenset[_Literal] | None = None,
        tags: dict[str, frozenset[_Literal]] | None = None,
    ) -> None:
        self.kinds = kinds
        self.values = values
        self.tags = tags


def one_of_notes(node: Any, document: Any) -> list[str]:
    """The note of ``node``'s ``oneOf``, and of its items' and its map values', for the comment
    above it (``items must match...``)."""
    if not _is_map(node):
        return []
    notes: list[str] = []
    for label, source in (
        ("", node),
        ("items ", node.get("items")),
        ("values ", node.get("additionalProperties")),
    ):
        note = one_of_note(source, document) if _is_map(source) else ""
        if note:
            notes.append(label + note)
    return notes


def one_of_note(node: Any, document: Any) -> str:
    """``ONE_OF_NOTE`` when ``node``'s ``oneOf`` renders as a union whose types may share a
    value; ``""`` otherwise."""
    if not _is_map(node) or not _is_list(node.get("oneOf")):
        return ""
    branches: list[Any] = list(node["oneOf"])
    if len(branches) < 2:
        return ""
    if not any(not _is_map(b) or _SHAPE_KEYS & b.keys() for b in branches):
        return ""  # keys alone, not types: the comment says which ("requires exactly one of")
    if len(branches) > _MAX_BRANCHES:
        return ONE_OF_NOTE
    accepted: list[_Accepts] = []
    for branch in branches:
        accepts = _accepts(branch, document)
        if accepts is None:
            return ONE_OF_NOTE
        accepted.append(accepts)
    for index, first in enumerate(accepted):
        for second in accepted[index + 1 :]:
            if not _disjoint(first, second):
                return ONE_OF_NOTE
    return ""


def _disjoint(first: _Accepts, second: _Accepts) -> bool:
    if not first.kinds & second.kinds:
        return True
    if first.values is not None and second.values is not None:
        return not first.values & second.values
    if first.tags and second.tags:
        return any(
            not values & second.tags[key]
            for key, values in first.tags.items()
            if key in second.tags
        )
    return False


def _resolved(node: Any, document: Any) -> Any:
    for _ in range(_MAX_REF_HOPS):
        if not _is_map(node) or "$ref" not in node:
            return node
        ref = node["$ref"]
        node = resolve_local_ref(document, ref) if type(ref) is str else None
    return None


def _accepts(branch: Any, document: Any) -> _Accepts | None:
    """What ``branch`` accepts; ``None`` when that cannot be told within the walk's budget."""
    node = _resolved(branch, document)
    if not _is_map(node) or "allOf" in node or "not" in node:
        return None
    literals = _literals(node)
    if literals is not None:
        return _Accepts(frozenset(kind for kind, _ in literals), literals)
    kinds: set[str] = set()
    pending = [node]
    read = 0
    while pending:
        current = _resolved(pending.pop(), document)
        read += 1
        if not _is_map(current) or read > _WALK_BUDGET or "allOf" in current:
            return None
        unions = [current[key] for key in _UNION_KEYS if key in current]
        if unions:
            for union in unions:
                if not _is_list(union):
                    return None
                pending.extend(union)
            continue
        kind = _kinds(current)
        if kind is None:
            return None
        kinds |= kind
    return _Accepts(frozenset(kinds), tags=_tags(node, document) if kinds == {"object"} else None)


def _kinds(node: Any) -> set[str] | None:
    literals = _literals(node)
    if literals is not None:
        return {kind for kind, _ in literals}
    declared = node.get("type")
    names = declared if _is_list(declared) else [declared]
    if declared is None:
        if _is_map(node.get("properties")) or "additionalProperties" in node:
            return {"object"}
        if "items" in node or "prefixItems" in node:
            return {"array"}
        return None  # any value
    kinds = {_KIND_OF_TYPE.get(name) if type(name) is str else None for name in names}
    if None in kinds:
        return None
    return {kind for kind in kinds if kind is not None}


def _literals(node: Any) -> frozenset[_Literal] | None:
    """The scalar values a ``const`` or ``enum`` node allows, each with its kind, as JSON
    compares them (``1`` is ``1.0``, ``true`` is not ``1``); ``None`` for any other node or
    one that lists an array or object."""
    if "const" in node:
        values = [node["const"]]
    elif _is_list(node.get("enum")):
        values = list(node["enum"])
    else:
        return None
    literals: set[_Literal] = set()
    for value in values:
        if value is None:
            literals.add(("null", None))
        elif type(value) is bool:
            literals.add(("boolean", value))
        elif type(value) is str:
            literals.add(("string", value))
        elif type(value) is int or (type(value) is float and math.isfinite(value)):
            literals.add(("number", float(value) if abs(value) < 2**53 else value))
        else:
            return None
    return frozenset(literals)


def _tags(node: Any, document: Any) -> dict[str, frozenset[_Literal]]:
    """An object's required properties that list their values, with those values: two objects
    that require one key with no value in common never take the same value."""
    properties = node.get("properties")
    required = node.get("required")
    if not _is_map(properties) or not _is_list(required):
        return {}
    tags: dict[str, frozenset[_Literal]] = {}
    for key in required:
        if type(key) is str and key in properties:
            shape = _resolved(properties[key], document)
            literals = _literals(shape) if _is_map(shape) else None
            if literals is not None:
                tags[key] = literals
    return tags
