"""The lossless JSON boundary: validate, copy and deep-freeze in one iterative pass.

A value is *lossless JSON* when encoding and decoding it gives back an equal value with the same
Python types. Accepted, by exact type (never ``isinstance``):

- ``None``, ``bool``;
- ``int`` within -2**63 .. 2**64-1 (what msgspec encodes);
- ``float`` that is finite and not ``-0.0``;
- ``str`` without lone surrogates (U+D800..U+DFFF cannot be UTF-8 encoded);
- ``dict`` or ``FrozenDict`` whose keys are exact ``str`` (same surrogate rule) and whose values
  are accepted;
- ``list`` or ``FrozenList`` whose items are accepted.

Everything else is rejected: subclasses, tuples, sets, bytes, NaN and infinities, ``-0.0``, other
mappings and sequences, arbitrary objects, and containers that contain themselves (a cycle on the
ancestor path; the same container shared in sibling places is fine and is copied independently).

Every walker here is an explicit work-stack loop, so values nested 5,000 levels deep work at the
default recursion limit. The walkers never invoke user code: they test exact types, iterate exact
``dict``/``list`` instances and read type names through the ``type`` descriptor.

Already-frozen input is copied like plain input. A ``FrozenDict`` or ``FrozenList`` proves nothing
about its contents (anyone can build ``FrozenList([float("nan")])``, and ``dict.__setitem__`` still
writes into a ``FrozenDict``), so reusing one without a full walk would not be provably safe, and
after a full walk the copy is nearly free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from math import copysign
from typing import Any, Final

from ..actors import FrozenDict, FrozenList

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "LosslessJsonError",
    "compact_json",
    "is_json_value",
    "render_path",
    "snapshot_json",
    "thaw",
]

INT_MIN: Final = -(2**63)
"""The smallest integer that crosses a lossless boundary (msgspec's lower bound)."""
INT_MAX: Final = 2**64 - 1
"""The largest integer that crosses a lossless boundary (msgspec's upper bound)."""

_INF: Final = float("inf")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_TYPE_NAME: Final = type.__dict__["__name__"].__get__
_dict_set: Final = dict.__setitem__
_list_set: Final = list.__setitem__
_encode_str: Final[Callable[[str], str]] = json.encoder.encode_basestring

# A path node is either the root label (a ``str``) or ``(parent, segment)`` where a ``str``
# segment is an object key and an ``int`` segment is an array index. Paths are built lazily:
# the string is only rendered when a diagnostic needs it.
PathNode = Any


class LosslessJsonError(ValueError):
    """A value that is not lossless JSON.

    ``path`` locates the offending part (``value.a[3]``; the root label is the walker's
    ``root`` argument) and ``type_name`` says what was found there: a type name such as
    ``tuple`` or ``OrderedDict``, or one of ``float (NaN)``, ``float (inf)``, ``float (-inf)``,
    ``float (-0.0)``, ``int (out of range)``, ``str (lone surrogate)``, ``dict with <T> key``
    and ``cycle``. The message is ``<path> is <type_name>``, so a boundary can append it to its
    own pinned text as ``<pinned>: <message>``.
    """

    path: str
    type_name: str

    def __init__(self, path: str, type_name: str) -> None:
        super().__init__(f"{path} is {type_name}")
        self.path = path
        self.type_name = type_name

    def __reduce__(self) -> tuple[Any, ...]:
        return (LosslessJsonError, (self.path, self.type_name))


def render_path(node: PathNode, empty_root: str = "") -> str:
    """Render a lazy path node: ``.key`` for object keys, ``[i]`` for array indexes.

    With an empty root label the first key has no leading dot, and the bare root renders as
    ``empty_root``.
    """
    segments: list[Any] = []
    while type(node) is tuple:
        segments.append(node[1])
        node = node[0]
    root: str = node
    if not segments:
        return root if root else empty_root
    parts = [root]
    for segment in reversed(segments):
        if type(segment) is int:
            parts.append(f"[{segment}]")
        elif parts[-1] == "" and len(parts) == 1:
            parts.append(segment)
        else:
            parts.append("." + segment)
    return "".join(parts)


def _scalar_problem(value: Any) -> str | None:
    """``None`` when ``value`` is an accepted scalar, else the type name for the diagnostic.

    Containers are not scalars: they get their type name, which callers only use for the types
    they do not walk.
    """
    t = type(value)
    if t is str:
        if value.isascii() or _SURROGATE.search(value) is None:
            return None
        return "str (lone surrogate)"
    if t is int:
        if INT_MIN <= value <= INT_MAX:
            return None
        return "int (out of range)"
    if t is float:
        if value != value:
            return "float (NaN)"
        if value == _INF:
            return "float (inf)"
        if value == -_INF:
            return "float (-inf)"
        if value == 0.0 and copysign(1.0, value) < 0.0:
            return "float (-0.0)"
        return None
    if t is bool or value is None:
        return None
    return str(_TYPE_NAME(t))


def _key_problem(key: Any) -> str | None:
    """``None`` for an accepted object key, else the type name for the diagnostic."""
    if type(key) is str:
        if key.isascii() or _SURROGATE.search(key) is None:
            return None
        return "dict with str (lone surrogate) key"
    return f"dict with {_TYPE_NAME(type(key))} key"


def _fail(node: PathNode, type_name: str) -> LosslessJsonError:
    return LosslessJsonError(render_path(node, "value"), type_name)


def _float_ok(value: float) -> bool:
    return -_INF < value < _INF and (value != 0.0 or copysign(1.0, value) > 0.0)


def _copy_tree(value: Any, root: PathNode, frozen: bool, top: Any = None) -> Any:
    """Validate ``value`` and copy it; containers become frozen when ``frozen`` is true.

    Each source container is read exactly once (one C-level copy); the walk then checks and
    completes the private copy in place, so what is returned is exactly what was checked.
    ``top`` is the root's copy when the caller already made it.
    """
    t = type(value)
    if t is dict or t is FrozenDict:
        if top is None:
            top = FrozenDict(value) if frozen else dict(value)
        top_is_dict = True
    elif t is list or t is FrozenList:
        if top is None:
            top = FrozenList(value) if frozen else list(value)
        top_is_dict = False
    else:
        problem = _scalar_problem(value)
        if problem is not None:
            raise _fail(root, problem)
        return value

    result = top
    # Stack entries: [iterator over the copy, the copy, is_dict, path node, source id].
    stack: list[list[Any]] = [
        [iter(top.items()) if top_is_dict else enumerate(top), top, top_is_dict, root, id(value)]
    ]
    ancestors = {id(value)}
    while stack:
        entry = stack[-1]
        descended = False
        for slot, item in entry[0]:
            if entry[2] and (type(slot) is not str or not slot.isascii()):
                problem = _key_problem(slot)
                if problem is not None:
                    raise _fail(entry[3], problem)
            ti = type(item)
            if ti is str:
                if item.isascii() or _SURROGATE.search(item) is None:
                    continue
                raise _fail((entry[3], slot), "str (lone surrogate)")
            if ti is int:
                if INT_MIN <= item <= INT_MAX:
                    continue
                raise _fail((entry[3], slot), "int (out of range)")
            if ti is bool or item is None:
                continue
            if ti is float:
                if _float_ok(item):
                    continue
                raise _fail((entry[3], slot), str(_scalar_problem(item)))
            if ti is dict or ti is FrozenDict:
                child: Any = FrozenDict(item) if frozen else dict(item)
                child_is_dict = True
            elif ti is list or ti is FrozenList:
                child = FrozenList(item) if frozen else list(item)
                child_is_dict = False
            else:
                raise _fail((entry[3], slot), str(_TYPE_NAME(ti)))
            item_id = id(item)
            if item_id in ancestors:
                raise _fail((entry[3], slot), "cycle")
            if entry[2]:
                _dict_set(entry[1], slot, child)
            else:
                _list_set(entry[1], slot, child)
            ancestors.add(item_id)
            stack.append(
                [
                    iter(child.items()) if child_is_dict else enumerate(child),
                    child,
                    child_is_dict,
                    (entry[3], slot),
                    item_id,
                ]
            )
            descended = True
            break
        if not descended:
            stack.pop()
            ancestors.discard(entry[4])
    return result


def _flat_child(item: Any) -> Any:
    """A frozen copy of ``item`` when it is a container of accepted scalars, else ``None``.

    Objects and arrays share the scalar check: an object's keys are checked first, then its
    values are checked like an array's items.
    """
    ti = type(item)
    if ti is dict or ti is FrozenDict:
        child: Any = FrozenDict(item)
        for key in child:
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
                return None
        members: Iterable[Any] = child.values()
    elif ti is list or ti is FrozenList:
        child = members = FrozenList(item)
    else:
        return None
    for member in members:
        tm = type(member)
        if tm is str:
            if not member.isascii() and _SURROGATE.search(member) is not None:
                return None
        elif tm is int:
            if not INT_MIN <= member <= INT_MAX:
                return None
        elif tm is bool or member is None:
            pass
        elif tm is float:
            if not _float_ok(member):
                return None
        else:
            return None
    return child


def snapshot_json(value: Any, root: str = "value") -> Any:
    """Validate ``value`` as lossless JSON and return a deep-frozen copy of it.

    Objects become ``FrozenDict`` and arrays ``FrozenList``; scalars are returned as they are.
    The caller's value is only read, never retained or changed. Raises ``LosslessJsonError``
    naming the path (rooted at ``root``) and the offending type.
    """
    t = type(value)
    # Fast path: two levels of scalars (most arguments, values and content blocks). Anything
    # else, including every problem, continues in the general walker from the same root copy;
    # children replaced here are flat private copies, which cannot take part in a cycle.
    # The object and array loops are written out separately on purpose: one loop behind an
    # ``is_dict`` test costs about 4% per call on this path.
    if t is dict or t is FrozenDict:
        copy: Any = FrozenDict(value)
        for key, item in copy.items():
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
                break
            ti = type(item)
            if ti is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    break
            elif ti is int:
                if not INT_MIN <= item <= INT_MAX:
                    break
            elif ti is bool or item is None:
                pass
            elif ti is float:
                if not _float_ok(item):
                    break
            else:
                child = _flat_child(item)
                if child is None:
                    break
                _dict_set(copy, key, child)
        else:
            return copy
        return _copy_tree(value, root, True, copy)
    if t is list or t is FrozenList:
        copy = FrozenList(value)
        for index, item in enumerate(copy):
            ti = type(item)
            if ti is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    break
            elif ti is int:
                if not INT_MIN <= item <= INT_MAX:
                    break
            elif ti is bool or item is None:
                pass
            elif ti is float:
                if not _float_ok(item):
                    break
            else:
                child = _flat_child(item)
                if child is None:
                    break
                _list_set(copy, index, child)
        else:
            return copy
        return _copy_tree(value, root, True, copy)
    if t is str:
        if value.isascii() or _SURROGATE.search(value) is None:
            return value
        raise _fail(root, "str (lone surrogate)")
    return _copy_tree(value, root, True)


def thaw(value: Any, root: str = "value") -> Any:
    """Return a fresh plain ``dict``/``list`` copy of a frozen or plain lossless JSON tree.

    The walk validates as it copies (it is the same walker as ``snapshot_json``), so a value
    that is not lossless JSON raises ``LosslessJsonError`` instead of looping on a cycle.
    """
    return _copy_tree(value, root, False)


def _is_json(value: Any, proven: set[int] | None) -> bool:
    """The lossless predicate. ``proven`` holds ids of containers already known to pass; the
    walk skips them, and a container root that passes is added to it."""
    t = type(value)
    if t is dict or t is FrozenDict:
        is_dict = True
    elif t is list or t is FrozenList:
        is_dict = False
    else:
        return _scalar_problem(value) is None
    if proven is not None and id(value) in proven:
        return True
    # Flat pass first: most containers hold scalars and already-proven children only.
    for slot, item in value.items() if is_dict else enumerate(value):
        if is_dict and type(slot) is not str:
            return False
        ti = type(item)
        if ti is str:
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return False
        elif ti is int:
            if not INT_MIN <= item <= INT_MAX:
                return False
        elif ti is bool or item is None:
            pass
        elif ti is float:
            if not _float_ok(item):
                return False
        elif (
            (ti is dict or ti is FrozenDict or ti is list or ti is FrozenList)
            and proven is not None
            and id(item) in proven
        ):
            pass
        else:
            break
    else:
        if is_dict:
            for slot in value:
                if not slot.isascii() and _SURROGATE.search(slot) is not None:
                    return False
        if proven is not None:
            proven.add(id(value))
        return True
    stack: list[list[Any]] = [
        [iter(value.items()) if is_dict else enumerate(value), is_dict, id(value)]
    ]
    ancestors = {id(value)}
    while stack:
        entry = stack[-1]
        descended = False
        for slot, item in entry[0]:
            if (
                entry[1]
                and (type(slot) is not str or not slot.isascii())
                and _key_problem(slot) is not None
            ):
                return False
            ti = type(item)
            if ti is str:
                if item.isascii() or _SURROGATE.search(item) is None:
                    continue
                return False
            if ti is int:
                if INT_MIN <= item <= INT_MAX:
                    continue
                return False
            if ti is bool or item is None:
                continue
            if ti is float:
                if _float_ok(item):
                    continue
                return False
            if ti is dict or ti is FrozenDict:
                child_is_dict = True
            elif ti is list or ti is FrozenList:
                child_is_dict = False
            else:
                return False
            item_id = id(item)
            if proven is not None and item_id in proven:
                continue
            if item_id in ancestors:
                return False
            ancestors.add(item_id)
            stack.append(
                [iter(item.items()) if child_is_dict else enumerate(item), child_is_dict, item_id]
            )
            descended = True
            break
        if not descended:
            stack.pop()
            ancestors.discard(entry[2])
    if proven is not None:
        proven.add(id(value))
    return True


def is_json_value(value: Any) -> bool:
    """Whether ``value`` is lossless JSON. Total: never raises, never invokes user code."""
    try:
        return _is_json(value, None)
    except Exception:  # e.g. a container resized by another thread while being read
        return False


def is_json_value_memo(value: Any, proven: set[int]) -> bool:
    """``is_json_value`` sharing a memo of containers already proven within one validation."""
    try:
        return _is_json(value, proven)
    except Exception:
        return False


def _js_number(value: float) -> str:
    """Format a finite float the way JavaScript's ``Number#toString`` does (``1`` not ``1.0``)."""
    text = repr(value)
    if "e" not in text and "E" not in text:
        return text[:-2] if text.endswith(".0") else text
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exp_text = text.lstrip("-").partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    # n: the decimal point's position relative to the digits (ECMA-262 Number::toString).
    n = int(exp_text) + len(whole)
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    exponent = n - 1
    exp_sign = "+" if exponent >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{exp_sign}{abs(exponent)}"


def _scalar_text(value: Any, node: PathNode) -> str:
    problem = _scalar_problem(value)
    if problem is not None:
        raise _fail(node, problem)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is str:
        return str(_encode_str(value))
    if type(value) is float:
        return _js_number(value)
    return str(value)


def compact_json(value: Any, root: str = "value") -> str:
    """Compact JSON text of a lossless value for diagnostics and logs.

    No spaces, non-ASCII kept, integral floats printed without ``.0`` (``json.dumps`` with
    ``separators=(",", ":")`` and ``ensure_ascii=False``, numbers as JavaScript prints them).
    Iterative, so deep values work; raises ``LosslessJsonError`` for values that are not
    lossless JSON.
    """
    t = type(value)
    if not (t is dict or t is FrozenDict or t is list or t is FrozenList):
        return _scalar_text(value, root)
    out: list[str] = []
    # Stack entries: [iterator, is_dict, path node, source id, first-item flag].
    stack: list[list[Any]] = []
    ancestors: set[int] = set()
    pending: Any = value
    pending_node: PathNode = root
    while True:
        if pending is not None:
            is_dict = type(pending) is dict or type(pending) is FrozenDict
            ancestors.add(id(pending))
            out.append("{" if is_dict else "[")
            stack.append(
                [
                    iter(pending.items()) if is_dict else enumerate(pending),
                    is_dict,
                    pending_node,
                    id(pending),
                    True,
                ]
            )
            pending = None
        if not stack:
            break
        entry = stack[-1]
        for slot, item in entry[0]:
            if entry[4]:
                entry[4] = False
            else:
                out.append(",")
            if entry[1]:
                problem = _key_problem(slot)
                if problem is not None:
                    raise _fail(entry[2], problem)
                out.append(str(_encode_str(slot)))
                out.append(":")
            ti = type(item)
            if ti is dict or ti is FrozenDict or ti is list or ti is FrozenList:
                if id(item) in ancestors:
                    raise _fail((entry[2], slot), "cycle")
                pending = item
                pending_node = (entry[2], slot)
                break
            out.append(_scalar_text(item, (entry[2], slot)))
        else:
            stack.pop()
            ancestors.discard(entry[3])
            out.append("}" if entry[1] else "]")
    return "".join(out)
