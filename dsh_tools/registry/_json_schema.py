"""The enforced raw JSON Schema subset: the assertion, the object-root guard and the validator.

Supported vocabulary: ``type`` (one of ``object``, ``array``, ``string``, ``number``,
``integer``, ``boolean``, ``null``), ``oneOf``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``const`` and the annotations ``description``,
``title``, ``default`` and ``examples``. A node with neither ``type`` nor ``oneOf`` accepts any
lossless JSON value.

Schema records are exact ``dict`` or ``FrozenDict`` with exact ``str`` keys; schema arrays are
exact ``list`` or ``FrozenList``. Every walk here is an explicit work-stack loop (no recursion),
so schemas and values nested thousands of levels deep work at the default recursion limit. Paths
are built lazily and rendered only for diagnostics.
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict, FrozenList, JsonSchemaError
from ._lossless import (
    _SURROGATE,
    INT_MAX,
    INT_MIN,
    _float_ok,
    compact_json,
    is_json_value,
    is_json_value_memo,
    render_path,
)

__all__ = [
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "validate_json_schema_value",
]

_CONSTRAINTS: Final = frozenset(
    {"type", "oneOf", "properties", "required", "additionalProperties", "items", "enum", "const"}
)
_ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples"})
_SCHEMA_TYPES: Final = ("object", "array", "string", "number", "integer", "boolean", "null")
_SCALAR_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null"})
_SIBLINGS: Final = ("properties", "required", "additionalProperties", "items", "enum", "const")
_PLACEMENT: Final = (
    ("properties", frozenset({"object"})),
    ("required", frozenset({"object"})),
    ("additionalProperties", frozenset({"object"})),
    ("items", frozenset({"array"})),
    ("enum", _SCALAR_TYPES),
    ("const", _SCALAR_TYPES),
)
_UNSUPPORTED_KEYWORD: Final = (
    " is not a supported keyword (subset: type/oneOf/properties/required/"
    "additionalProperties/items/enum/const + annotations)"
)
_MISSING: Final[Any] = object()


def _is_record(value: Any) -> bool:
    """An exact dict (or ``FrozenDict``) whose keys are all exact, encodable ``str``."""
    t = type(value)
    if t is not dict and t is not FrozenDict:
        return False
    for key in value:
        if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
            return False
    return True


def _is_array(value: Any) -> bool:
    return type(value) is list or type(value) is FrozenList


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
        return t is float and _float_ok(value) and value.is_integer()
    if schema_type == "boolean":
        return t is bool
    return value is None


def _scalar_equal(a: Any, b: Any) -> bool:
    """Type-aware JSON equality of scalars: ``True`` never equals ``1``; ``1`` equals ``1.0``."""
    ta = type(a)
    tb = type(b)
    if ta is bool or tb is bool:
        return a is b
    if (ta is int or ta is float) and (tb is int or tb is float):
        return bool(a == b)
    if ta is str and tb is str:
        return bool(a == b)
    return a is None and b is None


def _in_enum(value: Any, entries: Any) -> bool:
    return any(_scalar_equal(value, entry) for entry in entries)


def _spath(node: Any) -> str:
    """Render an assertion path node: ``(parent, suffix)`` pairs under the root label."""
    suffixes: list[str] = []
    while type(node) is tuple:
        suffixes.append(node[1])
        node = node[0]
    suffixes.append(node)
    suffixes.reverse()
    return "".join(suffixes)


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


# --- value validation --------------------------------------------------------------------------


class _UnknownSchemaType(Exception):
    """A forged schema node with a type outside the subset: a programming error."""

    def __init__(self, schema_type: Any) -> None:
        super().__init__(
            f"schema type {schema_type!r} is not in the supported subset "
            "(validate only schemas that passed assert_supported_json_schema)"
        )
        self.schema_type = schema_type


def _vpath(node: Any) -> str:
    return render_path(node, "arguments")


# --- prepared plans ----------------------------------------------------------------------------
#
# Validation walks a *plan*: the schema translated once into tuples and lists, so the hot loop
# indexes instead of looking keywords up. Plans are built iteratively, shared subschemas share
# one plan, and a forged cyclic schema gives a cyclic plan (validation then behaves exactly as a
# walk of the schema would). Plan kinds:
#   (_P_ANY,)                                      annotation-only: any lossless JSON value
#   (_P_SCALAR, type, enum or None, const or _MISSING)
#   [_P_OBJECT, required, [[name, plan], ...], closed, properties, shallow, clean names]
#       (shallow: every declared property is a scalar plan, so the object is checked inline;
#       clean names: every declared name is an encodable str)
#   [_P_ARRAY, items plan or None]
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
            ]
            objects.append(plan)
            children = list(properties.values())
            for index in range(len(children) - 1, -1, -1):
                tasks.append((children[index], pairs[index], 1))
        elif schema_type == "array":
            plan = [_P_ARRAY, None]
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
    return holder[0]


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


def _scalar_violation(plan: Any, value: Any, parent: Any, key: Any = _MISSING) -> str | None:
    """The single violation of a scalar plan (type check, then enum, then const), or ``None``.

    The path is ``parent`` itself, or ``(parent, key)`` when a key is given; it is rendered only
    when there is a violation.
    """
    schema_type = plan[1]
    t = type(value)
    message: str | None = None
    if schema_type == "string":
        if t is not str:
            message = "must be a string"
    elif schema_type == "number":
        if t is int:
            if not INT_MIN <= value <= INT_MAX:
                message = "must be a finite JSON number"
        elif t is float:
            if not _float_ok(value):
                message = "must be a finite JSON number"
        else:
            message = "must be a number"
    elif schema_type == "integer":
        if t is int:
            if not INT_MIN <= value <= INT_MAX:
                message = "must be an integer"
        elif not (t is float and _float_ok(value) and value.is_integer()):
            message = "must be an integer"
    elif schema_type == "boolean":
        if t is not bool:
            message = "must be a boolean"
    elif value is not None:
        message = "must be null"
    if message is None:
        entries = plan[2]
        if entries is not None and not _in_enum(value, entries):
            message = f"must be one of {compact_json(entries)}"
        else:
            const = plan[3]
            if const is not _MISSING and not _scalar_equal(value, const):
                message = f"must be {compact_json(const)}"
            else:
                return None
    return f'"{_vpath(parent if key is _MISSING else (parent, key))}" {message}'


# A validation frame is a list: [kind, value, path, violations, children, next child index,
# tail violations, provable (containers) or matched branches (oneOf)]. ``children`` holds
# pending (plan, value, path) triples and, in document order between them, violations of
# children that were checked inline.
_OBJECT: Final = 0
_ARRAY: Final = 1
_ONE_OF: Final = 2


def _enter_object(
    plan: Any, value: Any, path: Any, frames: list[list[Any]], proven: set[int]
) -> list[str] | None:
    t = type(value)
    if t is not dict and t is not FrozenDict:
        return [f'"{_vpath(path)}" must be an object']
    violations: list[str] = []
    for name in plan[1]:
        if name not in value:
            violations.append(f'missing required property "{_vpath((path, name))}"')
    children: list[Any] | None = None
    # ``provable``: once every child is valid, the object is lossless without another walk
    # (all its keys are declared, clean names, and no accepted string hides a lone surrogate).
    provable = plan[6]
    present = 0
    for name, child in plan[2]:
        item = value.get(name, _MISSING)
        if item is _MISSING:
            continue
        present += 1
        kind = child[0]
        if kind == _P_SCALAR:
            violation = _scalar_violation(child, item, path, name)
            if violation is not None:
                if children is None:
                    violations.append(violation)
                else:
                    children.append(violation)
            elif type(item) is str and not item.isascii() and _SURROGATE.search(item) is not None:
                provable = False
        elif kind == _P_OBJECT and child[5]:
            inline = _enter_shallow(child, item, (path, name), proven)
            if inline:
                if children is None:
                    violations.extend(inline)
                else:
                    children.extend(inline)
        else:
            if kind == _P_ONE_OF and type(item) is str:
                provable = False
            if children is None:
                children = [(child, item, (path, name))]
            else:
                children.append((child, item, (path, name)))
    if present != len(value):
        provable = False
    tail: list[str] | None = None
    if plan[3]:
        declared = plan[4]
        tail = [
            f'"{_vpath((path, key))}" is not a declared property (additionalProperties: false)'
            for key in value
            if type(key) is str and key not in declared
        ]
    if children is None:
        if tail:
            violations.extend(tail)
        if violations:
            return violations
        if provable:
            proven.add(id(value))
            return []
        if is_json_value_memo(value, proven):
            return []
        return [f'"{_vpath(path)}" must be a lossless JSON object']
    frames.append([_OBJECT, value, path, violations, children, 0, tail, provable])
    return None


def _enter_shallow(plan: Any, value: Any, path: Any, proven: set[int]) -> list[str]:
    """A shallow object checked inline: it never pushes a frame, and it contains its own
    inspection failures as the innermost node with a recognized type."""
    try:
        result = _enter_object(plan, value, path, [], proven)
    except Exception:
        return [f'"{_vpath(path)}" must be a lossless JSON value']
    return result or []


def _enter_array(
    plan: Any, value: Any, path: Any, frames: list[list[Any]], proven: set[int]
) -> list[str] | None:
    t = type(value)
    if t is not list and t is not FrozenList:
        return [f'"{_vpath(path)}" must be an array']
    items = plan[1]
    violations: list[str] = []
    provable = False
    if items is not None and value:
        provable = True
        if items[0] == _P_SCALAR:
            for index, item in enumerate(value):
                violation = _scalar_violation(items, item, path, index)
                if violation is not None:
                    violations.append(violation)
                elif (
                    type(item) is str and not item.isascii() and _SURROGATE.search(item) is not None
                ):
                    provable = False
        elif items[0] == _P_OBJECT and items[5]:
            for index, item in enumerate(value):
                inline = _enter_shallow(items, item, (path, index), proven)
                if inline:
                    violations.extend(inline)
        else:
            children = [(items, item, (path, index)) for index, item in enumerate(value)]
            frames.append(
                [_ARRAY, value, path, violations, children, 0, None, items[0] != _P_ONE_OF]
            )
            return None
    if violations:
        return violations
    if provable:
        proven.add(id(value))
        return []
    if is_json_value_memo(value, proven):
        return []
    return [f'"{_vpath(path)}" must be a dense lossless JSON array']


def _finish_container(frame: list[Any], proven: set[int]) -> list[str]:
    violations: list[str] = frame[3]
    tail = frame[6]
    if tail:
        violations.extend(tail)
    if violations:
        return violations
    if frame[7]:
        proven.add(id(frame[1]))
        return []
    if is_json_value_memo(frame[1], proven):
        return []
    if frame[0] == _OBJECT:
        return [f'"{_vpath(frame[2])}" must be a lossless JSON object']
    return [f'"{_vpath(frame[2])}" must be a dense lossless JSON array']


def _one_of_result(path: Any, matches: int) -> list[str]:
    if matches == 1:
        return []
    return [f'"{_vpath(path)}" must match exactly one oneOf branch (matched {matches})']


def validate_plan(plan: Any, value: Any, path: str = "value") -> list[str]:
    """``validate_json_schema_value`` on a plan from ``prepare_schema``."""
    if plan[0] == _P_SCALAR:
        violation = _scalar_violation(plan, value, path)
        return [] if violation is None else [violation]
    frames: list[list[Any]] = []
    proven: set[int] = set()
    current_plan: Any = plan
    current: Any = value
    current_path: Any = path
    entering = True
    while True:
        result: list[str] | None = None
        was_entering = entering
        catches = False
        try:
            if entering:
                entering = False
                kind = current_plan[0]
                if kind == _P_SCALAR:
                    catches = True
                    violation = _scalar_violation(current_plan, current, current_path)
                    result = [] if violation is None else [violation]
                elif kind == _P_OBJECT:
                    catches = True
                    result = _enter_object(current_plan, current, current_path, frames, proven)
                elif kind == _P_ARRAY:
                    catches = True
                    result = _enter_array(current_plan, current, current_path, frames, proven)
                elif kind == _P_ANY:
                    catches = True
                    if is_json_value_memo(current, proven):
                        result = []
                    else:
                        result = [f'"{_vpath(current_path)}" must be a lossless JSON value']
                elif kind == _P_ONE_OF:
                    catches = current_plan[2]
                    matches = 0
                    pending: list[Any] = []
                    for branch in current_plan[1]:
                        if branch[0] == _P_SCALAR:
                            if _scalar_violation(branch, current, current_path) is None:
                                matches += 1
                        else:
                            pending.append((branch, current, current_path))
                    if pending:
                        frames.append(
                            [_ONE_OF, current, current_path, None, pending, 0, None, matches]
                        )
                    else:
                        result = _one_of_result(current_path, matches)
                elif kind == _P_UNKNOWN:
                    raise _UnknownSchemaType(current_plan[1])
                else:
                    raise TypeError(current_plan[1])
            else:
                frame = frames[-1]
                children = frame[4]
                index = frame[5]
                if index < len(children):
                    frame[5] = index + 1
                    child = children[index]
                    if type(child) is str:
                        frame[3].append(child)
                    else:
                        current_plan, current, current_path = child
                        entering = True
                    continue
                if frame[0] == _ONE_OF:
                    result = _one_of_result(frame[2], frame[7])
                else:
                    result = _finish_container(frame, proven)
                frames.pop()
        except Exception as exc:
            # Containment: the node being entered answers for itself when its type is
            # recognized (it pushed no frame: pushing is its last step); otherwise the
            # innermost open frame does. With neither, the schema itself is broken.
            if was_entering and catches:
                failed_path = current_path
            elif frames:
                failed_path = frames.pop()[2]
            else:
                raise ValueError(str(exc)) from None
            result = [f'"{_vpath(failed_path)}" must be a lossless JSON value']
        if result is None:
            continue
        if not frames:
            return result
        parent = frames[-1]
        if parent[0] == _ONE_OF:
            if not result:
                parent[7] += 1
        elif result:
            parent[3].extend(result)


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
