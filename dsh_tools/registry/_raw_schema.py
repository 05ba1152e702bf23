"""Helpers over full-vocabulary JSON Schema, as raw registrations (MCP servers, ``@tool``) carry
it: ``$ref``/``$defs``, ``anyOf``, type arrays, constraints and formats.

- ``to_subset_schema`` projects such a schema into the enforced subset (used where a schema must
  be a checkable output contract). The projection never rejects more than the original: what the
  subset cannot say is widened (a constraint is dropped, a union whose branches may overlap
  accepts any value, recursion accepts any value where it recurs).
- ``optional_null_dropper`` returns a function that removes an explicit ``null`` given for an
  optional property whose schema does not accept ``null``: that is how OpenAI's strict mode
  spells "absent" once every optional property was made required and nullable.

Both resolve local references (``#``, ``#/$defs/Name``, ``#/definitions/Name`` and other JSON
pointers into the document); a reference they cannot resolve means "any value".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._schema_predicates import _is_array, _is_map

__all__ = [
    "accepts_null",
    "annotation_subset_schema",
    "optional_null_dropper",
    "resolve_local_ref",
    "scalar_type_of",
    "to_subset_schema",
]

_MAX_DEPTH: Final = 256
_SCALARS: Final = ("string", "number", "integer", "boolean", "null")
_TYPES: Final = (*_SCALARS, "object", "array")
_KEEP_ANNOTATIONS: Final = ("description", "title", "default", "examples")


def resolve_local_ref(document: Any, ref: Any) -> Any:
    """The schema that local reference ``ref`` points at inside ``document``, or ``None``."""
    if type(ref) is not str or not ref.startswith("#"):
        return None
    pointer = ref[1:]
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        return None
    node = document
    for raw in pointer[1:].split("/"):
        segment = raw.replace("~1", "/").replace("~0", "~")
        if _is_map(node) and segment in node:
            node = node[segment]
        elif _is_array(node) and segment.isdigit() and int(segment) < len(node):
            node = node[int(segment)]
        else:
            return None
    return node if _is_map(node) else None


# --- projection into the enforced subset ------------------------------------------------------


def scalar_type_of(value: Any) -> str | None:
    """The JSON type of a scalar value (``None`` for an object, an array or anything else)."""
    t = type(value)
    if t is str:
        return "string"
    if t is bool:
        return "boolean"
    if t is int:
        return "integer"
    if t is float:
        return "number"
    if value is None:
        return "null"
    return None


def _annotations(node: Mapping[str, Any]) -> dict[str, Any]:
    return {key: node[key] for key in _KEEP_ANNOTATIONS if key in node}


def _enum_schema(entries: list[Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """``enum`` entries grouped by scalar type: one typed enum, or a ``oneOf`` of them."""
    groups: dict[str, list[Any]] = {}
    for entry in entries:
        kind = scalar_type_of(entry)
        if kind is None:
            return _annotations(node)  # an object or array entry: the subset cannot say it
        if kind == "integer" and "number" in groups:
            kind = "number"
        groups.setdefault(kind, []).append(entry)
    if "integer" in groups and "number" in groups:
        groups["number"] = groups.pop("integer") + groups["number"]
    branches: list[dict[str, Any]] = []
    for kind, values in groups.items():
        branches.append({"type": kind} if kind == "null" else {"type": kind, "enum": values})
    if len(branches) == 1:
        return {**branches[0], **_annotations(node)}
    return {"oneOf": branches, **_annotations(node)}


def _branch_kind(branch: Mapping[str, Any]) -> str | None:
    """The one JSON type a projected branch accepts, or ``None`` when it may accept several."""
    kind = branch.get("type")
    return kind if type(kind) is str else None


def _union(branches: list[dict[str, Any]], node: Mapping[str, Any]) -> dict[str, Any]:
    """``oneOf`` when the branches accept disjoint JSON types (so exactly-one equals any-of);
    ``integer`` and ``number`` merge into ``number``; otherwise any value."""
    kinds = [_branch_kind(branch) for branch in branches]
    if any(kind is None for kind in kinds):
        return _annotations(node)
    if "number" in kinds and "integer" in kinds:
        merged: list[dict[str, Any]] = []
        for branch, kind in zip(branches, kinds, strict=True):
            if kind == "integer":
                continue
            merged.append({"type": "number"} if kind == "number" else branch)
        branches = merged
        kinds = [_branch_kind(branch) for branch in branches]
    if len(set(kinds)) != len(kinds):
        return _annotations(node)
    if len(branches) == 1:
        return {**branches[0], **_annotations(node)}
    return {"oneOf": branches, **_annotations(node)}


def to_subset_schema(schema: Any) -> dict[str, Any]:
    """Project a full-vocabulary JSON Schema into the enforced subset (a fresh plain dict).

    Keeps ``type``, ``properties``, ``required``, ``items``, ``uniqueItems``, scalar
    ``enum``/``const`` and the annotations; inlines local ``$ref``s; turns type arrays and
    disjoint ``anyOf``/``oneOf`` into ``oneOf``; drops the other constraints, formats,
    ``additionalProperties`` schemas and ``$schema``/``$id``. Whatever the subset cannot
    express becomes a wider schema, never a narrower one.
    """
    return _project(schema, schema, (), 0, True)


def annotation_subset_schema(schema: Any) -> dict[str, Any]:
    """``to_subset_schema`` for the schema msgspec generates from a Python annotation, less
    ``uniqueItems``: a ``set`` holds items distinct by Python equality, not JSON equality (two
    Structs or dataclasses with ``eq=False`` that look alike, an ``Enum`` member beside its
    value), and a value the annotation accepts must never fail its own output schema."""
    return _project(schema, schema, (), 0, False)


def _project(
    node: Any, document: Any, refs: tuple[str, ...], depth: int, unique: bool
) -> dict[str, Any]:
    if not _is_map(node) or depth > _MAX_DEPTH:
        return {}
    ref = node.get("$ref")
    if ref is not None:
        target = resolve_local_ref(document, ref)
        if target is None or ref in refs:
            return _annotations(node)  # unresolvable, or where a recursive shape recurs
        projected = _project(target, document, (*refs, ref), depth + 1, unique)
        return {**projected, **_annotations(node)}
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if _is_array(branches) and branches:
            projected_branches = [_project(b, document, refs, depth + 1, unique) for b in branches]
            return _union(projected_branches, node)
    if "const" in node:
        return _enum_schema([node["const"]], node)
    if _is_array(node.get("enum")) and node["enum"]:
        return _enum_schema(list(node["enum"]), node)
    declared = node.get("type")
    if _is_array(declared):
        kinds = [kind for kind in declared if kind in _TYPES]
        if not kinds or len(kinds) != len(declared):
            return _annotations(node)
        branches = [
            _project({**node, "type": kind}, document, refs, depth, unique) for kind in kinds
        ]
        return _union(branches, node)
    if declared is None and _is_map(node.get("properties")):
        declared = "object"
    if declared not in _TYPES:
        return _annotations(node)
    out: dict[str, Any] = {"type": declared, **_annotations(node)}
    if declared == "object":
        properties = node.get("properties")
        if _is_map(properties) and properties:
            out["properties"] = {
                name: _project(child, document, refs, depth + 1, unique)
                for name, child in properties.items()
                if type(name) is str
            }
            required = node.get("required")
            if _is_array(required):
                names = [n for n in required if type(n) is str and n in out["properties"]]
                if names:
                    out["required"] = list(dict.fromkeys(names))
        if node.get("additionalProperties") is False and "properties" in out:
            out["additionalProperties"] = False
    elif declared == "array":
        items = node.get("items")
        if _is_map(items):
            out["items"] = _project(items, document, refs, depth + 1, unique)
        if unique and node.get("uniqueItems") is True:
            # Kept: the subset enforces it with the same JSON equality, so it narrows nothing.
            out["uniqueItems"] = True
    return out


# --- explicit nulls for optional properties ---------------------------------------------------


def accepts_null(node: Any, document: Any, refs: tuple[str, ...] = ()) -> bool:
    """Whether ``node`` may accept ``null`` (answers ``True`` when unsure: then nothing is
    dropped, and the tool's own validation decides)."""
    if not _is_map(node) or len(refs) > _MAX_DEPTH:
        return True
    ref = node.get("$ref")
    if ref is not None:
        target = resolve_local_ref(document, ref)
        if target is None or ref in refs:
            return True
        return accepts_null(target, document, (*refs, ref))
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if _is_array(branches):
            return any(accepts_null(branch, document, refs) for branch in branches)
    if "const" in node:
        return node["const"] is None
    if _is_array(node.get("enum")):
        return any(entry is None for entry in node["enum"])
    declared = node.get("type")
    if declared is None:
        return not _is_map(node.get("properties")) and not _is_map(node.get("items"))
    if _is_array(declared):
        return "null" in declared
    if node.get("nullable") is True:
        return True
    return bool(declared == "null")


# A dropper plan: {name: (drop_when_null, child plan or None)} for one object,
# ("items", child plan) for an array, a list of plans applied in turn (an object and the
# branches of its union), or a _Recurring stand-in for a plan still being built (a recursive
# shape). Plans are built once per schema.
_Plan = Any


class _Recurring:
    """Where a recursive shape meets itself: the plan of the shape being built, filled in
    once it is (``None`` when that shape has nothing to drop). ``kept`` are the names whose
    nulls a union keeps at its top level (``_keeping``)."""

    __slots__ = ("built", "kept", "plan", "target")

    def __init__(self, target: _Recurring | None = None, kept: frozenset[str] = frozenset()):
        self.plan: _Plan = None
        self.built = False
        self.target = target
        self.kept = kept

    def resolved(self) -> _Plan:
        if self.target is None:
            return self.plan
        plan = self.target.plan
        return None if plan is None else _keeping(plan, set(self.kept))


def _object_node(node: Any, document: Any, refs: tuple[str, ...]) -> Any:
    """Follow ``$ref`` and nullable unions to the object (or array) schema a value goes into."""
    for _ in range(_MAX_DEPTH):
        if not _is_map(node):
            return None
        ref = node.get("$ref")
        if ref is None:
            break
        if ref in refs:
            return None
        refs = (*refs, ref)
        node = resolve_local_ref(document, ref)
    else:
        return None
    branches = _union_branches(node)
    if branches is not None and len(branches) == 1:
        return _object_node(branches[0], document, refs)
    return node  # an object, an array, or a union of several branches (``_build``)


def _union_branches(node: Any) -> list[Any] | None:
    """The branches other than ``{"type": "null"}`` of ``node``'s ``anyOf`` (or ``oneOf``)."""
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if _is_array(branches):
            return [b for b in branches if not (_is_map(b) and b.get("type") == "null")]
    return None


def _build(node: Any, document: Any, depth: int, memo: dict[int, Any]) -> _Plan:
    target = _object_node(node, document, ())
    if target is None or depth > 32:
        return None
    key = id(target)
    if key in memo:
        return memo[key]
    # A recursive shape is walked once, not forever: where it meets itself, the stand-in
    # takes the plan once it is built, so nulls are dropped at every depth of the value.
    recurring = _Recurring()
    memo[key] = recurring
    plans: list[_Plan] = []
    properties = target.get("properties")
    if _is_map(properties):
        required = target.get("required")
        required_names = set(required) if _is_array(required) else set()
        entries: dict[str, tuple[bool, Any]] = {}
        for name, child in properties.items():
            droppable = name not in required_names and not accepts_null(child, document)
            child_plan = _build(child, document, depth + 1, memo)
            if droppable or child_plan is not None:
                entries[name] = (droppable, child_plan)
        if entries:
            plans.append(entries)
    elif _is_map(target.get("items")):
        child_plan = _build(target["items"], document, depth + 1, memo)
        if child_plan is not None:
            plans.append(("items", child_plan))
    branches = _union_branches(target)
    if branches:
        # Strict mode made each branch's optional properties required and nullable too. A
        # null is dropped for a property that no branch takes null for, whichever branch the
        # value was meant for (the value is validated again afterwards).
        nullable = _null_taking(branches, document)
        for branch in branches:
            branch_plan = _build(branch, document, depth + 1, memo)
            if branch_plan is not None:
                plans.append(_keeping(branch_plan, nullable))
    plan: _Plan = None if not plans else plans[0] if len(plans) == 1 else plans
    if plan is not None and _does_nothing(plan, recurring):
        plan = None  # only the shape's own recurrences, with nothing to drop in them
    recurring.plan = plan
    recurring.built = True
    memo[key] = plan
    return plan


def _does_nothing(plan: _Plan, pending: _Recurring) -> bool:
    """Whether ``plan`` drops nothing, taking the shape being built (``pending``) to drop
    nothing where it recurs."""
    if plan is None or plan is pending:
        return True
    if type(plan) is _Recurring:
        # An enclosing shape still being built may yet drop something: keep its place.
        shape = plan if plan.target is None else plan.target
        return shape is pending or (shape.built and shape.plan is None)
    if type(plan) is list:
        return all(_does_nothing(part, pending) for part in plan)
    if type(plan) is tuple:
        return _does_nothing(plan[1], pending)
    return all(
        not droppable and _does_nothing(child, pending) for droppable, child in plan.values()
    )


def _null_taking(branches: list[Any], document: Any) -> set[str]:
    """The names of the properties that some branch declares with a schema taking null."""
    names: set[str] = set()
    for branch in branches:
        target = _object_node(branch, document, ())
        properties: Any = target.get("properties") if _is_map(target) else None
        if _is_map(properties):
            names.update(n for n, child in properties.items() if accepts_null(child, document))
    return names


def _keeping(plan: _Plan, names: set[str]) -> _Plan:
    """``plan`` with the nulls of ``names`` kept at its top level."""
    if type(plan) is _Recurring:
        if plan.target is not None:
            return _Recurring(plan.target, plan.kept | frozenset(names))
        return _Recurring(plan, frozenset(names))
    if type(plan) is list:
        return [_keeping(part, names) for part in plan]
    if type(plan) is tuple:
        return plan
    return {
        name: (droppable and name not in names, child) for name, (droppable, child) in plan.items()
    }


def _apply(plan: _Plan, value: Any) -> Any:
    """``value`` without the droppable nulls; the same object when nothing changes."""
    if type(plan) is _Recurring:
        plan = plan.resolved()
        if plan is None:
            return value
    if type(plan) is list:
        for part in plan:
            value = _apply(part, value)
        return value
    if type(plan) is tuple:
        if not _is_array(value):
            return value
        child = plan[1]
        items = [_apply(child, item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return FrozenList(items) if type(value) is FrozenList else items
    if not _is_map(value):
        return value
    changed: dict[str, Any] | None = None
    for name, (droppable, child) in plan.items():
        item = value.get(name, _ABSENT)
        if item is _ABSENT:
            continue
        if item is None and droppable:
            if changed is None:
                changed = dict(value)
            del changed[name]
        elif child is not None:
            new = _apply(child, item)
            if new is not item:
                if changed is None:
                    changed = dict(value)
                changed[name] = new
    if changed is None:
        return value
    return FrozenDict(changed) if type(value) is FrozenDict else changed


_ABSENT: Final[Any] = object()


def optional_null_dropper(schema: Any) -> Callable[[Any], Any] | None:
    """A function that removes explicit ``null``s given for optional properties whose schema
    does not accept ``null`` (at any depth reachable through ``properties``, ``items``,
    ``$ref`` and nullable unions), or ``None`` when ``schema`` has no such property.

    The function returns its argument unchanged (the same object) when there is nothing to
    drop, a frozen copy for a frozen value otherwise; it never raises for any value.
    """
    plan = _build(schema, schema, 0, {})
    if plan is None:
        return None
    frozen_plan = plan

    def drop_optional_nulls(value: Any) -> Any:
        try:
            return _apply(frozen_plan, value)
        except Exception:
            return value

    return drop_optional_nulls
