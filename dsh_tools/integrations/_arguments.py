"""The JSON text of tool-call arguments that a provider response holds already parsed.

Anthropic sends a call's ``input`` as a JSON value, and a Chat Completions or Responses call
read from a hand-built dict may hold its ``arguments`` as one; a ``ToolCall`` carries text. The
text written here reads back as the value the response holds, so the batch judges the
arguments the model sent, not a repaired copy:

- lossless JSON (``is_json_value``) is written by msgspec, or by the walk below when it nests
  deeper than msgspec recurses;
- a value that a JSON decoder produces but that is not lossless keeps a spelling that reads
  back as the same value, so the batch fails that call alone and names the argument
  (``arguments are not lossless JSON: arguments.x is float (inf)``): an infinity as ``1e400``
  or ``-1e400``, ``-0.0``, an integer out of range, a lone surrogate as a ``\\ud800`` escape;
- NaN, which no JSON number spells, is written ``NaN``: the batch fails that call alone as
  arguments that are not valid JSON, at the line and column of the ``NaN``, as it does for a
  Chat Completions call whose arguments text holds ``NaN``;
- subclasses of ``dict`` and ``list`` (the ``OrderedDict`` of a decoder's
  ``object_pairs_hook``) are objects and arrays like any other;
- anything no JSON decoder produces (a tuple, a set, a non-``str`` key, a cycle, another
  object) raises ``ValueError`` naming its path: that is a bug in the code that built the
  response, with no model to tell.

msgspec alone will not do: it writes NaN and the infinities as ``null``, so the tool would run
with ``None``, and it refuses lone surrogates, which Python's ``json`` (what the SDKs' HTTP
client decodes with) produces from a ``\\ud800`` escape.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from typing import Any, Final

import msgspec

from ..registry import LosslessJsonError, is_json_value
from ..registry._compact_json import write_json
from ..registry._lossless import render_path

__all__ = ["arguments_text"]

_INF: Final = float("inf")
# Read back, each is the value it stands for (``float("1e400")`` is ``inf``).
_POSITIVE_INFINITY: Final = "1e400"
_NEGATIVE_INFINITY: Final = "-1e400"
_NAN: Final = "NaN"
# An integer with more digits than ``str()`` writes is far outside the lossless range; the
# batch reads any such integer text as 2**64 (negated) too, and refuses it as out of range.
_TOO_LONG: Final = str(2**64)


def arguments_text(value: object, at: str) -> str:
    """The JSON text of ``value``, the arguments of one call found at ``at`` (for example
    ``message.content[0].input``); see the module docstring for what each value becomes.
    Raises ``ValueError`` for a value that no JSON decoder produces."""
    if is_json_value(value):
        try:
            return msgspec.json.encode(value).decode()
        except RecursionError:
            pass  # deeper than msgspec recurses: the walk writes the same value
    return _walk(value, at)


def _string(text: str) -> str:
    try:
        return msgspec.json.encode(text).decode()
    except UnicodeEncodeError:
        # A lone surrogate: the escaped spelling reads back as the same string.
        return str(encode_basestring_ascii(text))


def _scalar(value: Any, node: Any) -> str:
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        try:
            return str(value)
        except ValueError:
            return f"-{_TOO_LONG}" if value < 0 else _TOO_LONG
    if kind is float:
        if value != value:
            return _NAN
        if value == _INF:
            return _POSITIVE_INFINITY
        if value == -_INF:
            return _NEGATIVE_INFINITY
        return msgspec.json.encode(value).decode()
    raise LosslessJsonError(render_path(node), kind.__name__)


def _key(key: Any, node: Any) -> str:
    if type(key) is not str:
        raise LosslessJsonError(render_path(node), f"dict with {type(key).__name__} key")
    return _string(key)


def _walk(value: Any, at: str) -> str:
    """The text of ``value`` by an explicit stack, so any depth works."""
    try:
        return write_json(value, at, _scalar, _key, subclasses=True)
    except LosslessJsonError as exc:
        raise ValueError(f"tool call arguments are not JSON: {exc}") from None
