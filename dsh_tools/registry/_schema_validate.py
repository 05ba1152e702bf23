"""Value validation: the explicit work-stack walk of a value against a prepared plan (no
recursion, so values nested thousands of levels deep work at the default recursion limit; paths
are built lazily and rendered only for diagnostics). The entry steps live beside the loop so
the hot path reaches them as plain module globals.
"""

from __future__ import annotations

from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._compact_json import compact_json
from ._lossless import _SURROGATE, INT_MAX, INT_MIN, _float_ok, render_path
from ._lossless_check import is_json_value_memo
from ._schema_plan import _P_ANY, _P_ARRAY, _P_OBJECT, _P_ONE_OF, _P_SCALAR, _P_UNKNOWN
from ._schema_predicates import _MISSING, _in_enum, _scalar_equal
from ._unique_items import first_json_repeat


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
        elif not (
            t is float and _float_ok(value) and value.is_integer() and INT_MIN <= value <= INT_MAX
        ):
            message = "must be an integer"  # an integral float too, past the integer range
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


_OBJECTS: Final[frozenset[type]] = frozenset((dict, FrozenDict))
_PLAIN_TYPES: Final = {str: "string", int: "integer", bool: "boolean", type(None): "null"}
"""The schema type each exact Python type is a value of, where the type alone decides (an
integer's range aside)."""


def plainly_valid(plan: Any, value: Any) -> bool:
    """Whether ``value`` meets the scalar ``plan`` by its type alone: a value of the plan's own
    type (an integer in range) where no enum or const applies, as ``_scalar_violation`` finds.
    Most values of most calls are such; this answers them without building a path."""
    t = type(value)
    return (
        plan[2] is None
        and plan[3] is _MISSING
        and _PLAIN_TYPES.get(t) == plan[1]
        and (t is not int or INT_MIN <= value <= INT_MAX)
    )


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
            ti = type(item)
            violation = (
                None if plainly_valid(child, item) else _scalar_violation(child, item, path, name)
            )
            if violation is not None:
                if children is None:
                    violations.append(violation)
                else:
                    children.append(violation)
            elif ti is str and not item.isascii() and _SURROGATE.search(item) is not None:
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
    tail: list[str] | None = None
    if present != len(value):
        provable = False
        # Only then may a key be undeclared: ``present`` counts distinct declared keys.
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
            if proven is not _ALL_PROVEN:  # whose ``add`` keeps nothing
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
    # Off the path of every array whose schema does not ask for unique items.
    if plan[2] and len(value) > 1:
        repeat = first_json_repeat(value)
        if repeat is not None:
            violations.append(
                f'"{_vpath((path, repeat[1]))}" repeats "{_vpath((path, repeat[0]))}" '
                "(uniqueItems: true)"
            )
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


class _AllProven(set[int]):
    """The memo of a value known to be lossless JSON as a whole: every container in it counts
    as proven, so a ``json``-typed part costs no walk."""

    __slots__ = ()

    def __contains__(self, item: object) -> bool:
        return True

    def add(self, item: int) -> None:
        pass


_ALL_PROVEN: Final = _AllProven()


def validate_plan(
    plan: Any, value: Any, path: str = "value", *, lossless: bool = False
) -> list[str]:
    """``validate_json_schema_value`` on a plan from ``prepare_schema``. ``lossless``: the
    caller knows ``value`` is lossless JSON throughout (a ``snapshot_json`` it took), so the
    lossless checks of ``json``-typed parts are skipped."""
    if plan[0] == _P_SCALAR:
        if plainly_valid(plan, value):
            return []
        violation = _scalar_violation(plan, value, path)
        return [] if violation is None else [violation]
    if plan[0] == _P_OBJECT and plan[7] is not None and type(value) in _OBJECTS:
        # An object of plain-typed properties (most arguments): valid when every required
        # property is present, every property has its one type (an integer in range, an ASCII
        # string) and no other key is there, as the general walk finds; anything else is
        # left to that walk (a forged ``required`` that raises here too).
        try:
            present = 0
            for name, kind in plan[7]:
                item = value.get(name, _MISSING)
                if item is _MISSING:
                    continue
                if type(item) is not kind:
                    break
                if kind is int:
                    if not INT_MIN <= item <= INT_MAX:
                        break
                elif kind is str and not item.isascii():
                    break
                present += 1
            else:
                if present == len(value):
                    for name in plan[1]:
                        if name not in value:
                            break
                    else:
                        return []
        except Exception:  # the general walk says what is wrong
            pass
    proven: set[int] = _ALL_PROVEN if lossless else set()
    if plan[0] == _P_OBJECT and plan[5]:
        # An object of scalar properties (most arguments) never pushes a frame: it is checked
        # as an object property of that kind is, with the same containment of failures.
        return _enter_shallow(plan, value, path, proven)
    frames: list[list[Any]] = []
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
