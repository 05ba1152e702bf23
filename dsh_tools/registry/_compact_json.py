"""``compact_json``: compact JSON text of a lossless value for diagnostics and logs, numbers
printed the way JavaScript prints them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._lossless import PathNode, _fail, _key_problem, _scalar_problem

__all__ = ["compact_json", "write_json"]

_encode_str: Final[Callable[[str], str]] = json.encoder.encode_basestring


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


def _key_text(key: Any, node: PathNode) -> str:
    problem = _key_problem(key)
    if problem is not None:
        raise _fail(node, problem)
    return str(_encode_str(key))


def compact_json(value: Any, root: str = "value") -> str:
    """Compact JSON text of a lossless value for diagnostics and logs.

    No spaces, non-ASCII kept, integral floats printed without ``.0`` (``json.dumps`` with
    ``separators=(",", ":")`` and ``ensure_ascii=False``, numbers as JavaScript prints them).
    Iterative, so deep values work; raises ``LosslessJsonError`` for values that are not
    lossless JSON.
    """
    return write_json(value, root, _scalar_text, _key_text)


def write_json(
    value: Any,
    root: PathNode,
    scalar: Callable[[Any, PathNode], str],
    key: Callable[[Any, PathNode], str],
    *,
    subclasses: bool = False,
) -> str:
    """Compact JSON text of ``value``, written by an explicit stack so that any depth works.

    Dicts, lists and their frozen kinds are the containers (``subclasses``: any subclass of
    ``dict`` or ``list`` too, such as the ``OrderedDict`` a JSON decoder's hook makes);
    ``scalar(item, node)`` writes everything else and ``key(key, node of its dict)`` each key,
    raising for what they refuse. A container inside itself raises ``LosslessJsonError``
    (``cycle``) at its path.
    """
    t = type(value)
    if not (
        t is dict
        or t is FrozenDict
        or t is list
        or t is FrozenList
        or (subclasses and isinstance(value, dict | list))
    ):
        return scalar(value, root)
    out: list[str] = []
    # Stack entries: [iterator, is_dict, path node, source id, first-item flag].
    stack: list[list[Any]] = []
    ancestors: set[int] = set()
    pending: Any = value
    pending_node: PathNode = root
    while True:
        if pending is not None:
            t = type(pending)
            is_dict = t is dict or t is FrozenDict or (subclasses and isinstance(pending, dict))
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
                out.append(key(slot, entry[2]))
                out.append(":")
            ti = type(item)
            if (
                ti is dict
                or ti is FrozenDict
                or ti is list
                or ti is FrozenList
                or (subclasses and isinstance(item, dict | list))
            ):
                if id(item) in ancestors:
                    raise _fail((entry[2], slot), "cycle")
                pending = item
                pending_node = (entry[2], slot)
                break
            out.append(scalar(item, (entry[2], slot)))
        else:
            stack.pop()
            ancestors.discard(entry[3])
            out.append("}" if entry[1] else "]")
    return "".join(out)
