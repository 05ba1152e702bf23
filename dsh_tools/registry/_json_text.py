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

__all__ = [
    "MAX_ARGUMENTS_CHARS",
    "MAX_ARGUMENTS_DEPTH",
    "ArgumentsTextError",
    "parse_arguments",
    "parse_json_text",
    "read_arguments",
]

MAX_ARGUMENTS_CHARS = 4 * 2**20
"""The longest argument text a batch call may carry (characters); longer is ``INVALID_ARGS``."""

MAX_ARGUMENTS_DEPTH = 10_000
"""How deep a batch call's argument text may nest arrays and objects; deeper is
``INVALID_ARGS``."""

_RAW_SURROGATE = re.compile("[\ud800-\udfff]")

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


class ArgumentsTextError(ValueError):
    """A call's argument text that the pipeline refuses; the message says what and where."""


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def read_arguments(text: str, *, gradual: bool = False) -> Any:
    """The value of a model's argument text, or ``ArgumentsTextError`` saying why it is not
    acceptable: longer than ``MAX_ARGUMENTS_CHARS``, a raw lone surrogate (not Unicode), not
    valid JSON (with the line and column), or nested deeper than ``MAX_ARGUMENTS_DEPTH``.
    ``""`` reads as ``{}``. ``gradual`` skips msgspec (which holds the GIL for the whole text)
    for the iterative reader, so that a thread reading a long text leaves other threads their
    share of the interpreter."""
    if text == "":
        return {}
    if len(text) > MAX_ARGUMENTS_CHARS:
        raise ArgumentsTextError(
            f"arguments text is {len(text):,} characters long; the limit is {MAX_ARGUMENTS_CHARS:,}"
        )
    if not text.isascii():
        raw = _RAW_SURROGATE.search(text)
        if raw is not None:
            raise ArgumentsTextError(
                f"arguments text is not valid Unicode: a lone surrogate U+{ord(raw.group()):04X} "
                f"at {_where(text, raw.start())}"
            )
    if not gradual:
        try:
            value = msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError):
            pass  # see parse_arguments: the iterative reader decides, and says where it failed
        else:
            if not _may_repeat_keys(text, value):
                return value
            # msgspec keeps the last of a repeated key's values: the iterative reader decides
    try:
        return parse_json_text(text, max_depth=MAX_ARGUMENTS_DEPTH, repeated_keys=False)
    except _Deep as exc:
        raise ArgumentsTextError(
            f"arguments nest deeper than {MAX_ARGUMENTS_DEPTH:,} levels (at "
            f"{_where(text, exc.pos)})"
        ) from None
    except _Repeated as exc:
        raise ArgumentsTextError(
            f"arguments repeat the key {msgspec.json.encode(exc.key).decode()} at "
            f"{_where(text, exc.pos)}: JSON leaves which of its values counts undefined, so "
            "send each key once"
        ) from None
    except ValueError as exc:
        pos = getattr(exc, "pos", None)
        reason = str(getattr(exc, "msg", None) or exc).removesuffix(" at")
        where = f" at {_where(text, pos)}" if type(pos) is int else ""
        raise ArgumentsTextError(f"arguments are not valid JSON: {reason}{where}") from None


class _SyntaxError(ValueError):
    """Bad JSON syntax at ``pos``."""

    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(f"{msg} at offset {pos}")
        self.msg = msg
        self.pos = pos


class _Deep(_SyntaxError):
    """Nesting deeper than allowed at ``pos``."""


class _Repeated(_SyntaxError):
    """An object's key ``key`` given a second time at ``pos``."""

    def __init__(self, key: str, pos: int) -> None:
        super().__init__(f"repeated key {key!r}", pos)
        self.key = key


def _may_repeat_keys(text: str, value: Any) -> bool:
    """Whether ``text``, which msgspec decoded to ``value``, may give an object a key twice
    (msgspec keeps the last value, and a model's text that repeats ``"path"`` would run with
    it). ``False`` is certain: each member of an object is written with one ``:`` outside
    strings, and so is each member of ``value`` when msgspec writes it back, with the same
    ``:`` inside strings, bar the text's ``\\u003a`` escapes (counted, as at most one each).
    So the text has no more members than ``value`` when it has no more ``:``. Both counts run
    in C: a walk in Python cost more than decoding. ``True`` leaves it to the iterative reader,
    which finds the key and its place."""
    colons = text.count(":")
    if colons == 0:
        return False  # no object member at all (a call without arguments)
    if "\\u" in text:
        colons += text.count("\\u003a") + text.count("\\u003A")
    try:
        return colons > msgspec.json.encode(value).count(b":")
    except RecursionError:
        return True  # as deep as msgspec goes: the iterative reader decides


def parse_json_text(text: str, max_depth: int | None = None, *, repeated_keys: bool = True) -> Any:
    """Parse strict JSON (no NaN/Infinity literals) iteratively; ``ValueError`` on bad syntax
    (or on nesting deeper than ``max_depth``, or with ``repeated_keys=False`` on an object that
    gives a key twice; otherwise its last value counts)."""
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    stack: list[Any] = []  # open containers: a list, or an _Object (dict + pending key)
    root: Any = None
    have_root = False
    n = len(text)
    while True:
        if pos >= n:
            raise _SyntaxError("unexpected end of JSON text", pos)
        if max_depth is not None and len(stack) >= max_depth:
            raise _Deep("too deep", pos)
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
                pos = _read_key(text, pos, container, repeated_keys)
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
                    raise _SyntaxError(f"unexpected character {text[pos]!r}", pos)
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
                    pos = _read_key(text, pos, top, repeated_keys)
                break
            if pos < n and text[pos] == closer:
                pos += 1
                stack.pop()
                value = top if closer == "]" else top.value
                continue
            raise _SyntaxError(f"expected ',' or '{closer}'", pos)
        if have_root:
            if pos != n:
                raise _SyntaxError("extra data after the JSON value", pos)
            return root


class _Object:
    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}
        self.key = ""


def _read_key(text: str, pos: int, container: _Object, repeated_keys: bool) -> int:
    if pos >= len(text) or text[pos] != '"':
        raise _SyntaxError("expected a string key", pos)
    start = pos
    key, pos = scanstring(text, pos + 1, True)
    if not repeated_keys and key in container.value:
        raise _Repeated(key, start)
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if pos >= len(text) or text[pos] != ":":
        raise _SyntaxError("expected ':'", pos)
    container.key = key
    return _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
