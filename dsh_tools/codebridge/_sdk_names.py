"""Names and text in the SDK declarations: Python names from tool and schema names, unique-name
allocation, comment text, and string and scalar literals that are valid Python and JSON alike."""

from __future__ import annotations

import keyword
import re
import unicodedata
from typing import Any, Final

import msgspec

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_INDENT: Final = "    "


def _pascal(text: str) -> str:
    """Split on runs of non-alphanumeric ASCII, upper-case each piece's first character."""
    return "".join(piece[0].upper() + piece[1:] for piece in _NON_ALNUM.split(text) if piece)


def _tool_base_name(name: str) -> str:
    base = _pascal(name)
    if not base:
        return "Tool"
    if base[0].isdigit():
        return "Tool" + base
    return base


def _is_bare_name(name: str) -> bool:
    """ASCII identifier, not a hard keyword, not a dunder-style name."""
    return (
        _IDENTIFIER.fullmatch(name) is not None
        and not keyword.iskeyword(name)
        and not name.startswith("__")
    )


def _take_name(wanted: str, taken: set[str], added: list[str]) -> str:
    name = wanted
    suffix = 2
    while name in taken:
        name = f"{wanted}_{suffix}"
        suffix += 1
    taken.add(name)
    added.append(name)
    return name


def _comment_text(description: Any) -> str:
    """Collapse every whitespace run to one space, strip, and escape what a comment line
    cannot hold (control characters and lone surrogates)."""
    if type(description) is not str or not description:
        return ""
    text = " ".join(description.split())
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char.isprintable() or unicodedata.category(char) not in ("Cc", "Cs"):
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def _json_string(text: str) -> str:
    """A JSON string literal with non-ASCII kept raw; also a valid Python string literal.

    Lone surrogates are escaped (``\\udXXX``), so the literal always encodes as UTF-8.
    """
    try:
        return msgspec.json.encode(text).decode()
    except (UnicodeEncodeError, msgspec.EncodeError):
        out = ['"']
        for char in text:
            code = ord(char)
            if char == '"':
                out.append('\\"')
            elif char == "\\":
                out.append("\\\\")
            elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
                out.append(_JSON_SHORT_ESCAPES.get(char, f"\\u{code:04x}"))
            else:
                out.append(char)
        out.append('"')
        return "".join(out)


_JSON_SHORT_ESCAPES: Final = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _literal(value: Any) -> str:
    if type(value) is str:
        return _json_string(value)
    if type(value) is bool:
        return "True" if value else "False"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value)
    raise TypeError("not a scalar literal")


def _prefix_text(prefix: Any) -> str:
    """Materialize a lazy name prefix: a ``str`` or a ``(parent_prefix, segment)`` chain."""
    segments: list[str] = []
    while type(prefix) is tuple:
        prefix, segment = prefix
        segments.append(segment)
    segments.append(prefix)
    segments.reverse()
    return "".join(segments)


def _def_name(ref: str) -> str:
    """A declaration name from the last segment of a reference (``#/$defs/time_result`` ->
    ``TimeResult``)."""
    base = _pascal(ref.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~"))
    if not base:
        return "Def"
    if base[0].isdigit() or keyword.iskeyword(base):
        return "Def" + base
    return base
