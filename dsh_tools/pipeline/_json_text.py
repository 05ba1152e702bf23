"""Strict JSON text parsing for a model's tool-call arguments, at any nesting depth.

``msgspec`` parses shallow text fast but recurses (it fails near 1,000 levels), refuses numbers
out of float range and refuses escaped lone surrogates (``"\\ud800"``), all of which are valid
JSON; this module falls back to an iterative reader whenever msgspec refuses the text. Only a
syntax error makes the raw text itself the arguments. Valid JSON that is not lossless
(``-0.0``, ``1e400``, a lone surrogate) is returned as parsed so that the argument snapshot
refuses it; an integer of more digits than ``int()`` reads from text is out of the lossless
range anyway and parses to ``2**64`` (negated for a minus sign), which the snapshot refuses
alike.
"""

from __future__ import annotations

import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

import msgspec

__all__ = ["parse_arguments", "parse_json_text"]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_OUT_OF_RANGE = 2**64  # outside the lossless integer range, as any longer integer is


def parse_arguments(text: str) -> Any:
    """``""`` -> ``{}``; valid JSON -> its value; anything else -> the raw text itself."""
    if text == "":
        return {}
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        # A syntax error, or valid JSON msgspec will not take: a number out of float range
        # (1e400), an escaped lone surrogate, or text deeper than msgspec recurses.
        pass
    try:
        return parse_json_text(text)
    except ValueError:
        return text


def parse_json_text(text: str) -> Any:
    """Parse strict JSON (no NaN/Infinity literals) iteratively; ``ValueError`` on bad syntax."""
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    stack: list[Any] = []  # open containers: a list, or an _Object (dict + pending key)
    root: Any = None
    have_root = False
    n = len(text)
    while True:
        if pos >= n:
            raise ValueError("unexpected end of JSON text")
        ch = text[pos]
        value: Any
        if ch == "{":
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            if pos < n and text[pos] == "}":
                value = {}
                pos += 1
            else:
                container = _Object()
                stack.append(container)
                pos = _read_key(text, pos, container)
                continue
        elif ch == "[":
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            if pos < n and text[pos] == "]":
                value = []
                pos += 1
            else:
                stack.append([])
                continue
        elif ch == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            m = _NUMBER.match(text, pos)
            if m is not None and m.end() > pos:
                token = m.group(0)
                if m.group(1) or m.group(2):
                    value = float(token)
                else:
                    try:
                        value = int(token)
                    except ValueError:  # more digits than int() reads from text
                        value = -_OUT_OF_RANGE if token[0] == "-" else _OUT_OF_RANGE
                pos = m.end()
            else:
                for literal, literal_value in _LITERALS.items():
                    if text.startswith(literal, pos):
                        value = literal_value
                        pos += len(literal)
                        break
                else:
                    raise ValueError(f"invalid JSON at offset {pos}")
        # attach the finished value, closing containers as far as the text says
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if not stack:
                root, have_root = value, True
                break
            top = stack[-1]
            if type(top) is list:
                top.append(value)
                closer = "]"
            else:
                top.value[top.key] = value
                closer = "}"
            if pos < n and text[pos] == ",":
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                if closer == "}":
                    pos = _read_key(text, pos, top)
                break
            if pos < n and text[pos] == closer:
                pos += 1
                stack.pop()
                value = top if closer == "]" else top.value
                continue
            raise ValueError(f"expected ',' or '{closer}' at offset {pos}")
        if have_root:
            if pos != n:
                raise ValueError(f"extra data at offset {pos}")
            return root


class _Object:
    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}
        self.key = ""


def _read_key(text: str, pos: int, container: _Object) -> int:
    if pos >= len(text) or text[pos] != '"':
        raise ValueError(f"expected a string key at offset {pos}")
    key, pos = scanstring(text, pos + 1, True)
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if pos >= len(text) or text[pos] != ":":
        raise ValueError(f"expected ':' at offset {pos}")
    container.key = key
    return _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
