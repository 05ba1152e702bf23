"""The validation plan: a subset schema translated once into tuples and lists, cached for
frozen schemas, so the value walk indexes instead of looking keywords up."""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict
from ._lossless import _SURROGATE
from ._schema_predicates import _MISSING, _SCALAR_TYPES, _SCHEMA_TYPES, _is_array

# Validation walks a *plan*: the schema translated once into tuples and lists, so the hot loop
# indexes instead of looking keywords up. Plans are built iteratively, shared subschemas share
# one plan, and a forged cyclic schema gives a cyclic plan (validation then behaves exactly as a
# walk of the schema would). Plan kinds:
#   (_P_ANY,)                                      annotation-only: any lossless JSON value
#   (_P_SCALAR, type, enum or None, const or _MISSING)
#   [_P_OBJECT, required, [[name, plan], ...], closed, properties, shallow, clean names, plain]
#       (shallow: every declared property is a scalar plan, so the object is checked inline;
#       clean names: every declared name is an encodable str; plain: when shallow with clean
#       names and every property a plain type (below) with no enum or const, each property's
#       name and the one Python type its values have, else None)
#   [_P_ARRAY, items plan or None, unique items]
#   [_P_ONE_OF, [plan, ...], catches]
#   (_P_UNKNOWN, type)                             forged: a type outside the subset
#   (_P_BROKEN, description)                       forged: a node that is not a mapping

_P_ANY: Final = 0
_P_SCALAR: Final = 1
_P_OBJECT: Final = 2
_P_ARRAY: Final = 3
_P_ONE_OF: Final = 4
_P_UNKNOWN: Final = 5
_P_BROKEN: Final = 6
_ANY_PLAN: Final = (_P_ANY,)
_EMPTY: Final[Any] = FrozenDict()


def _build_plan(schema: Any) -> Any:
    memo: dict[int, Any] = {}
    objects: list[Any] = []
    holder: list[Any] = [None]
    tasks: list[tuple[Any, Any, Any]] = [(schema, holder, 0)]
    while tasks:
        node, target, slot = tasks.pop()
        plan = memo.get(id(node))
        if plan is not None:
            target[slot] = plan
            continue
        t = type(node)
        if t is not dict and t is not FrozenDict:
            plan = (_P_BROKEN, f"schema node is {_type_name(node)}, not a mapping")
            target[slot] = plan
            continue
        schema_type = node.get("type")
        branches = node.get("oneOf")
        if branches is not None:
            known = schema_type is None or schema_type in _SCHEMA_TYPES
            if not _is_array(branches) and type(branches) is not tuple:
                plan = (
                    (_P_BROKEN, "oneOf is not an array") if not known else [_P_ONE_OF, None, True]
                )
            else:
                plan = [_P_ONE_OF, [None] * len(branches), known]
                for index in range(len(branches) - 1, -1, -1):
                    tasks.append((branches[index], plan[1], index))
        elif schema_type is None:
            plan = _ANY_PLAN
        elif schema_type in _SCALAR_TYPES:
            entries = node.get("enum")
            plan = (_P_SCALAR, schema_type, entries, node.get("const", _MISSING))
        elif schema_type == "object":
            properties = node.get("properties")
            if type(properties) is not dict and type(properties) is not FrozenDict:
                properties = _EMPTY
            pairs: list[list[Any]] = [[name, None] for name in properties]
            plan = [
                _P_OBJECT,
                node.get("required") or (),
                pairs,
                node.get("additionalProperties") is False,
                properties,
                False,
                False,
                None,
            ]
            objects.append(plan)
            children = list(properties.values())
            for index in range(len(children) - 1, -1, -1):
                tasks.append((children[index], pairs[index], 1))
        elif schema_type == "array":
            plan = [_P_ARRAY, None, node.get("uniqueItems") is True]
            items = node.get("items")
            if items is not None:
                tasks.append((items, plan, 1))
        else:
            plan = (_P_UNKNOWN, schema_type)
        memo[id(node)] = plan
        target[slot] = plan
    for plan in objects:
        plan[5] = all(child[0] == _P_SCALAR for _, child in plan[2])
        plan[6] = all(
            type(name) is str and (name.isascii() or _SURROGATE.search(name) is None)
            for name, _ in plan[2]
        )
        if plan[5] and plan[6]:
            plain = tuple(
                (name, _PLAIN_TYPE.get(child[1]))
                for name, child in plan[2]
                if child[2] is None and child[3] is _MISSING
            )
            if len(plain) == len(plan[2]) and all(kind is not None for _, kind in plain):
                plan[7] = plain
    return holder[0]


_PLAIN_TYPE: Final[dict[Any, type]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "null": type(None),
}
"""The scalar schema types whose values are exactly one Python type (an integer's range and a
string's surrogates aside; a float is an integer only past the general check)."""


def _type_name(value: Any) -> str:
    return str(type.__dict__["__name__"].__get__(type(value)))


_PLAN_CACHE: dict[int, tuple[Any, Any]] = {}
_PLAN_CACHE_LIMIT: Final = 1024


def prepare_schema(schema: Any) -> Any:
    """The validation plan of ``schema``; frozen schemas keep theirs in a bounded cache.

    Frozen schemas (``FrozenDict`` roots: compiled and registered ones) are treated as the
    immutable values they are; a plain ``dict`` schema may change, so it is planned afresh.
    """
    if type(schema) is not FrozenDict:
        return _build_plan(schema)
    cached = _PLAN_CACHE.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    plan = _build_plan(schema)
    if len(_PLAN_CACHE) >= _PLAN_CACHE_LIMIT:
        _PLAN_CACHE.clear()
    _PLAN_CACHE[id(schema)] = (schema, plan)
    return plan
