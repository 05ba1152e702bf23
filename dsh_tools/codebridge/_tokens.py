"""Flat pre-order token lists: how JSON values cross the host/worker channel.

A JSON value travels as a flat list of tokens in pre-order: scalars (``None``, ``bool``, ``int``,
``float``, ``str``) stand for themselves; a container is one marker followed by its children's
tokens: ``ArrayMarker(length)`` (encoded ``["array", length]``) or ``ObjectMarker(keys)``
(encoded ``["object", [key, ...]]``, values follow in key order).

Both directions are iterative (no recursion), so a 5,000-deep value survives the trip even though
``msgspec`` and ``json`` stop near Python's recursion limit. Validation happens here, before any
encoder sees the value: ``msgspec.json`` would silently write NaN as ``null``.

Lossless JSON, checked by exact type: ``None``; ``bool``;
``int`` in -2**63 .. 2**64-1; a finite ``float`` other than ``-0.0``; a ``str`` without lone
surrogates; ``list`` and ``dict`` with ``str`` keys (plus the caller's own frozen container types
on the host side). Shared references are copied; cycles are rejected.

This module imports only the standard library and ``msgspec``: the worker loads it by path.
"""

from __future__ import annotations

import collections.abc
import datetime
import decimal
import enum
import fractions
import itertools
import math
import types
from collections.abc import Callable
from typing import Annotated, Any, Final

import msgspec

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH_FROM_WORKER",
    "ArrayMarker",
    "ObjectMarker",
    "Token",
    "TokenError",
    "detokenize",
    "not_lossless",
    "tokenize",
]

INT_MIN: Final = -(2**63)
"""The smallest integer that crosses a boundary."""
INT_MAX: Final = 2**64 - 1
"""The largest integer that crosses a boundary."""


class ArrayMarker(msgspec.Struct, frozen=True, array_like=True, tag="array", tag_field="kind"):
    """Announces an array whose ``length`` items follow in pre-order."""

    length: Annotated[int, msgspec.Meta(ge=0)]


class ObjectMarker(msgspec.Struct, frozen=True, array_like=True, tag="object", tag_field="kind"):
    """Announces an object; one value per key follows, in key order."""

    keys: list[str]


Token = None | bool | int | float | str | ArrayMarker | ObjectMarker
"""One element of a token list."""


class TokenError(ValueError):
    """A token list that does not describe exactly one lossless JSON value."""


class _Exit:
    """Stack entry that ends a container's visit (cycle detection tracks the current path)."""

    __slots__ = ("key",)

    def __init__(self, key: int) -> None:
        self.key = key


_INF = math.inf


def _clean_str(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def tokenize(
    value: Any,
    dict_types: tuple[type, ...] = (dict,),
    list_types: tuple[type, ...] = (list,),
) -> list[Any] | None:
    """Return the token list of ``value``, or ``None`` when it is not lossless JSON.

    ``dict_types`` and ``list_types`` are the exact container types accepted (the host adds its
    frozen containers; the worker accepts only plain ``dict`` and ``list``).
    """
    kind = type(value)
    if kind is int:  # the common shapes first: a scalar, an object of scalars
        return [value] if INT_MIN <= value <= INT_MAX else None
    if kind is str:
        return [value] if _clean_str(value) else None
    if value is None or kind is bool:
        return [value]
    if kind in dict_types:
        flat = _flat_object(value)
        if flat is not None:
            return flat
    out: list[Any] = []
    append = out.append
    stack: list[Any] = [value]
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    path: set[int] = set()
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if not _clean_str(item):
                return None
            append(item)
        elif kind is int:
            if item < INT_MIN or item > INT_MAX:
                return None
            append(item)
        elif item is None or kind is bool:
            append(item)
        elif kind is float:
            if item != item or item == _INF or item == -_INF:
                return None
            if item == 0.0 and math.copysign(1.0, item) < 0.0:
                return None
            append(item)
        elif kind is _Exit:
            path.discard(item.key)
        elif kind in list_types:
            key = id(item)
            if key in path:
                return None
            append(ArrayMarker(len(item)))
            if item:
                path.add(key)
                push(_Exit(key))
                extend(reversed(item))
        elif kind in dict_types:
            key = id(item)
            if key in path:
                return None
            keys = list(item)
            for name in keys:
                if type(name) is not str or not _clean_str(name):
                    return None
            append(ObjectMarker(keys))
            if keys:
                path.add(key)
                push(_Exit(key))
                values = list(item.values())
                values.reverse()
                extend(values)
        else:
            return None
    return out


def not_lossless(
    value: Any,
    root: str,
    dict_types: tuple[type, ...] = (dict,),
    list_types: tuple[type, ...] = (list,),
    *,
    awaitable_hint: bool = True,
    advise: bool = False,
    unawaited: Callable[[object], str | None] | None = None,
) -> str:
    """Why ``tokenize`` refused ``value``: ``"<path> is <what>"`` for its first problem in
    document order, with ``root`` naming the value (``arguments.a[1] is float (NaN)``).
    ``awaitable_hint`` tells the program to await an awaitable it left in the value; the
    host, naming a binding's resolution, has no such advice for it. ``advise`` adds what a
    program returns in its place (``value is tuple: return a list instead ...``).
    ``unawaited`` says what an awaitable is in the program's terms (a tool call it did not
    await), or ``None`` for one it does not know.

    Only called once ``tokenize`` returned ``None``. Iterative, like ``tokenize``, for deep
    values; paths are parent links, rendered only for the problem found, and a path longer
    than ``_PATH_CHARS`` keeps its two ends around an ellipsis.
    """
    stack: list[Any] = [(value, root)]
    on_path: set[int] = set()
    while stack:
        item, path = stack.pop()
        if type(item) is _Exit:
            on_path.discard(item.key)
            continue
        kind = type(item)
        problem: str | None = None
        if kind is str:
            if not _clean_str(item):
                problem = "str (lone surrogate)"
        elif kind is int:
            if item < INT_MIN or item > INT_MAX:
                # The range named: an integer is JSON, and a program that computed a large
                # one (a factorial, a hash) is told what fits, not only that it does not.
                problem = "int (out of range: JSON integers here are -2**63 to 2**64-1)"
        elif item is None or kind is bool:
            pass
        elif kind is float:
            if item != item:
                problem = "float (NaN)"
            elif item in (_INF, -_INF):
                problem = "float (infinite)"
            elif item == 0.0 and math.copysign(1.0, item) < 0.0:
                problem = "float (-0.0)"
        elif kind in list_types or kind in dict_types:
            key = id(item)
            if key in on_path:
                problem = "a cycle"
            else:
                on_path.add(key)
                stack.append((_Exit(key), path))
                if kind in list_types:
                    stack.extend(
                        (item[index], (path, index)) for index in reversed(range(len(item)))
                    )
                    continue
                for name in item:
                    if type(name) is not str:
                        problem = f"dict with {type(name).__name__} key"
                        if advise:
                            problem = f"{problem}: use str keys instead (str(key))"
                        break
                    if not _clean_str(name):
                        problem = "dict with str (lone surrogate) key"
                        break
                else:
                    children = [(child, (path, name)) for name, child in item.items()]
                    children.reverse()
                    stack.extend(children)
                    continue
        elif awaitable_hint and any("__await__" in vars(klass) for klass in kind.__mro__):
            # A tool call or coroutine the program forgot to await: say what to do about it.
            said = None if unawaited is None else unawaited(item)
            problem = f"{kind.__name__} (an awaitable: use await on it)" if said is None else said
        else:
            problem = kind.__name__
            advice = _advice(item) if advise else None
            if advice is not None:
                problem = f"{problem}: {advice}"
        if problem is not None:
            return f"{_render_path(path)} is {problem}"
    return f"{root} is not lossless JSON"


def _advice(item: object) -> str | None:
    """What a program returns in place of ``item``, an object no JSON value is, or ``None``
    when there is nothing to say (a function, a class, a module). Read from its type alone:
    ``isinstance`` would read the object's ``__class__``, which a program's object may make
    raise, and the failure being rendered must stay the one it is."""
    kind = type(item)
    try:
        if issubclass(kind, enum.Enum):  # an IntEnum or StrEnum's member too
            return "return its .value instead"
        if issubclass(kind, (str, int, float)):  # a subclass of one
            plain = next(base for base in (str, int, float) if issubclass(kind, base))
            return f"return a plain {plain.__name__} instead ({plain.__name__}(...))"
        if issubclass(kind, BaseException):
            return "return str(...) of it instead"
        if issubclass(kind, tuple):
            return "return a list instead ([...] or list(...))"
        if issubclass(kind, (set, frozenset)):
            return "return a list instead (sorted(...) or list(...))"
        if issubclass(kind, (datetime.date, datetime.time)):
            return "return a string instead (its .isoformat(), say)"
        if issubclass(kind, datetime.timedelta):
            return "return a number instead (its .total_seconds(), say)"
        if issubclass(kind, (bytes, bytearray, memoryview)):
            return "return a string instead (its .decode(), say)"
        if issubclass(kind, (decimal.Decimal, fractions.Fraction)):
            return "return a float or a string instead"
        if issubclass(kind, (type, types.ModuleType)) or callable(item):
            return None  # no fields to return in its place
        if issubclass(kind, collections.abc.Mapping):  # a Counter, a defaultdict
            return "return a plain dict instead (dict(...))"
        if issubclass(kind, collections.abc.Iterable):  # a generator, map, range, dict.keys()
            return "return a list instead (list(...))"
    except Exception:  # a class of the program's whose checks raise: nothing to advise
        return None
    return "return a dict of the fields needed instead"


_PATH_CHARS: Final = 200
"""The longest path ``not_lossless`` names whole."""


def _render_path(path: Any) -> str:
    """A path of parent links ``(parent, key or index)`` ending at the root's name."""
    segments: list[str] = []
    while type(path) is tuple:
        path, segment = path
        segments.append(f"[{segment}]" if type(segment) is int else f".{segment}")
    segments.append(path)
    segments.reverse()
    text = "".join(segments)
    if len(text) <= _PATH_CHARS:
        return text
    half = _PATH_CHARS // 2
    return f"{text[:half]}...{text[-half:]}"


def _flat_object(value: Any) -> list[Any] | None:
    """The tokens of an object whose values are all strings, integers, booleans or ``None``;
    ``None`` when it has another value (the general walk then decides)."""
    keys = list(value)
    tokens: list[Any] = [ObjectMarker(keys)]
    # ``_clean_str``'s ASCII test first, inline: nearly every key and string passes it.
    for name in keys:
        if type(name) is not str or not (name.isascii() or _clean_str(name)):
            return None
    for item in value.values():
        kind = type(item)
        if kind is str:
            if not (item.isascii() or _clean_str(item)):
                return None
        elif kind is int:
            if item < INT_MIN or item > INT_MAX:
                return None
        elif item is not None and kind is not bool:
            return None
        tokens.append(item)
    return tokens


_list_append = list.append
_list_extend = list.extend
_dict_set = dict.__setitem__
_FLAT_RUN: Final = 16
"""Arrays at least this long are first tried as a run of plain scalars, checked and copied at
C speed (a program's completion can hold millions of values)."""
_PLAIN: Final = frozenset({str, bool, type(None), int})


def _plain_scalars(run: list[Any]) -> bool:
    """Whether ``run`` holds only strings, booleans, ``None`` and in-range integers (no
    integers beside other kinds: those take the general path)."""
    kinds = set(map(type, run))
    if not kinds <= _PLAIN:
        return False
    if int not in kinds:
        return True
    return len(kinds) == 1 and min(run) >= INT_MIN and max(run) <= INT_MAX


MAX_DEPTH_FROM_WORKER: Final = 10_000
"""How deeply a value the host takes from a worker may nest (a call's arguments, a program's
completion), as deeply as a model's own arguments may. Deeper, the value is refused: every
level costs the host's later steps (snapshots, validation) a few hundred bytes and a few
microseconds, and a 16 MB completion of nested empty lists took 5 GB and 85 s of the host."""


def detokenize(
    tokens: list[Any],
    list_type: Callable[[], list[Any]] = list,
    dict_type: Callable[[], dict[str, Any]] = dict,
    max_depth: int | None = None,
) -> Any:
    """Rebuild the value a token list describes; raise ``TokenError`` when it is invalid.

    Invalid: empty; a marker announcing more children than tokens remain; repeated keys; a
    non-finite float or ``-0.0``; an out-of-range integer; an unknown token; leftover tokens;
    containers nested more than ``max_depth`` deep (when given).
    Containers are built with ``list_type()`` / ``dict_type()`` and filled through the base
    ``list``/``dict`` methods, so read-only subclasses work.
    """
    total = len(tokens)
    if total == 0:
        raise TokenError("empty token list")
    if total == 1:  # a lone scalar, the common reply
        token = tokens[0]
        kind = type(token)
        if kind is str or token is None or kind is bool:
            return token
        if kind is int and INT_MIN <= token <= INT_MAX:
            return token
    else:
        head = tokens[0]
        if type(head) is ObjectMarker and len(head.keys) == total - 1:
            # An object of scalars, a binding call's usual arguments.
            flat_keys = head.keys
            if total == 2:  # one member: no set, zip or slice for it
                item = tokens[1]
                item_kind = type(item)
                if (
                    item_kind is str
                    or item is None
                    or item_kind is bool
                    or (item_kind is int and INT_MIN <= item <= INT_MAX)
                ):
                    flat = dict_type()
                    _dict_set(flat, flat_keys[0], item)
                    return flat
            if len(set(flat_keys)) == total - 1:
                flat = dict_type()
                for name, item in zip(flat_keys, itertools.islice(tokens, 1, None), strict=True):
                    item_kind = type(item)
                    if item_kind is int:
                        if item < INT_MIN or item > INT_MAX:
                            break
                    elif item_kind is not str and item is not None and item_kind is not bool:
                        break  # anything else: the general walk decides
                    _dict_set(flat, name, item)
                else:
                    return flat
    # Each open container: [node, keys or None, next index, child count, depth]. A container
    # leaves the stack once its last child is placed, so the stack is no measure of depth.
    stack: list[list[Any]] = []
    root: Any = None
    have_root = False
    owed = 0
    positions = enumerate(tokens)
    for position, token in positions:
        if have_root and not stack:
            raise TokenError("tokens left over after the value")
        kind = type(token)
        count = 0
        keys: list[str] | None = None
        node: Any
        if kind is str or token is None or kind is bool:
            node = token
        elif kind is int:
            if token < INT_MIN or token > INT_MAX:
                raise TokenError("integer out of range")
            node = token
        elif kind is float:
            if token != token or token == _INF or token == -_INF:
                raise TokenError("non-finite float")
            if token == 0.0 and math.copysign(1.0, token) < 0.0:
                raise TokenError("negative zero")
            node = token
        elif kind is ArrayMarker:
            count = token.length
            node = list_type()
            if count >= _FLAT_RUN:
                run = tokens[position + 1 : position + 1 + count]
                if len(run) == count and _plain_scalars(run):
                    _list_extend(node, run)
                    next(itertools.islice(positions, count - 1, count))  # past the run
                    count = 0
        elif kind is ObjectMarker:
            keys = token.keys
            count = len(keys)
            if count and len(set(keys)) != count:
                raise TokenError("repeated object key")
            node = dict_type()
        else:
            raise TokenError("unknown token")
        depth = 1
        if stack:
            frame = stack[-1]
            depth = frame[4] + 1
            index = frame[2]
            frame_keys = frame[1]
            if frame_keys is None:
                _list_append(frame[0], node)
            else:
                _dict_set(frame[0], frame_keys[index], node)
            index += 1
            owed -= 1
            if index == frame[3]:
                stack.pop()
            else:
                frame[2] = index
        else:
            root = node
            have_root = True
        if count:
            owed += count
            if owed > total - position - 1:
                raise TokenError("a container announces more children than remain")
            if max_depth is not None and depth > max_depth:
                raise TokenError(f"the value nests deeper than {max_depth} levels")
            stack.append([node, keys, 0, count, depth])
    if stack or not have_root:
        raise TokenError("token list ends inside a container")
    return root
