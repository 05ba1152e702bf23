"""The lossless JSON boundary: what crosses it, and the error and path that name what does not.

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

This module holds the rules (the scalar and key checks, the error and its lazy paths); the walkers
are ``_lossless_copy`` (``snapshot_json``, ``thaw``), ``_lossless_check`` (``is_json_value``) and
``_compact_json``. Every walker is an explicit work-stack loop, so values nested 5,000 levels
deep work at the default recursion limit. The walkers never invoke user code: they test exact
types, iterate exact ``dict``/``list`` instances and read type names through the ``type``
descriptor.
"""

from __future__ import annotations

import re
from math import copysign
from typing import Any, Final

__all__ = ["INT_MAX", "INT_MIN", "LosslessJsonError", "render_path"]

INT_MIN: Final = -(2**63)
"""The smallest integer that crosses a lossless boundary (msgspec's lower bound)."""
INT_MAX: Final = 2**64 - 1
"""The largest integer that crosses a lossless boundary (msgspec's upper bound)."""

_INF: Final = float("inf")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_TYPE_NAME: Final = type.__dict__["__name__"].__get__

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
