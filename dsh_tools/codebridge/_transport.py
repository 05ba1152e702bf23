"""The model-visible pieces of the reserved ``run_code`` transport.

The name, the description texts, the parameter and output schemas (as author DSL and as raw
JSON Schema), the call presenter, and the output renderer that turns the canonical value
``{"logs": [...], "result"?: ...}`` into the content the model reads. Everything here is a pure
function of its input; the registry and the bridge assemble the tool definition from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ..registry import RUN_CODE, GenericCallView

__all__ = [
    "INVALID_DESCRIPTION_MESSAGE",
    "RUN_CODE_CODE_DESCRIPTION",
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_DESCRIPTION_DESCRIPTION",
    "RUN_CODE_NO_OUTPUT",
    "RUN_CODE_TOOL_NAME",
    "present_run_code_call",
    "pretty_json",
    "program_of",
    "render_run_code_output",
    "run_code_output_dsl",
    "run_code_output_schema",
    "run_code_parameters_dsl",
    "run_code_parameters_schema",
    "runtime_language_message",
    "runtime_required_message",
]

RUN_CODE_TOOL_NAME: Final = RUN_CODE
"""The reserved name of the Code Mode transport (the registry's ``RUN_CODE``, which keeps the
name out of the lists it gives in non-native modes)."""

RUN_CODE_DESCRIPTION: Final = (
    "Execute a Python program against the available tools. Write the BODY of an async "
    "function (top-level `await` and `return` work) and call tools as "
    "`await tools.name(args)` per the declarations in the system prompt. Only what you "
    "print or return comes back — curate it."
)
"""The model-visible description of ``run_code``."""

RUN_CODE_CODE_DESCRIPTION: Final = "The program: the body of an async Python function."
"""The description of the ``code`` parameter."""

RUN_CODE_DESCRIPTION_DESCRIPTION: Final = (
    "Clear, concise description of what this program does in active voice, 5-10 words "
    '(shown in the UI). Examples: "Count TODO markers across packages"; "Read failing test '
    'and its fixture"; "Rename config key in every cordis.yml".'
)
"""The description of the ``description`` parameter."""

RUN_CODE_NO_OUTPUT: Final = "(run_code completed with no output)"
"""The content text of a successful run that printed and returned nothing visible."""

INVALID_DESCRIPTION_MESSAGE: Final = "invalid description: expected a non-empty string"
"""The body's first precondition failure: a ``description`` argument that is blank."""


def program_of(code: str) -> str:
    """The program a ``code`` argument holds: the text after a leading byte order mark, which
    some models write first (as an editor saving "UTF-8 with signature" does) and which Python
    drops from a source file but refuses in the middle of source text."""
    return code.removeprefix("\ufeff")


def runtime_required_message(mode: str) -> str:
    """The assembly and execution error when a non-native mode has no code runtime."""
    return (
        f'dsh-tools: mode "{mode}" requires a code runtime — load a code runtime '
        'implementation (e.g. the subprocess code runtime) or set tools mode to "native"'
    )


def runtime_language_message(mode: str, language: str) -> str:
    """The assembly and execution error when the code runtime is not a Python runtime."""
    return (
        f'dsh-tools: mode "{mode}" generates a Python SDK, but the loaded code runtime\'s '
        f'language is "{language}"'
    )


def run_code_parameters_dsl() -> dict[str, Any]:
    """The parameter map of ``run_code`` in the author DSL (a fresh dict on every call)."""
    return {
        "code": {"type": "string", "description": RUN_CODE_CODE_DESCRIPTION, "required": True},
        "description": {
            "type": "string",
            "description": RUN_CODE_DESCRIPTION_DESCRIPTION,
            "required": True,
        },
    }


def run_code_parameters_schema() -> dict[str, Any]:
    """The compiled raw JSON Schema of ``run_code``'s parameters: an implicit open object
    root with two required strings (a fresh dict on every call)."""
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": RUN_CODE_CODE_DESCRIPTION},
            "description": {"type": "string", "description": RUN_CODE_DESCRIPTION_DESCRIPTION},
        },
        "required": ["code", "description"],
    }


def run_code_output_dsl() -> dict[str, Any]:
    """The output schema of ``run_code`` in the author DSL: a closed object with required
    ``logs`` (list of str) and optional ``result`` (any JSON)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "logs": {"type": "array", "items": {"type": "string"}, "required": True},
            "result": {"type": "json"},
        },
    }


def run_code_output_schema() -> dict[str, Any]:
    """The compiled raw JSON Schema of ``run_code``'s canonical value (a fresh dict)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "logs": {"type": "array", "items": {"type": "string"}},
            "result": {},
        },
        "required": ["logs"],
    }


def present_run_code_call(args: Any) -> GenericCallView | None:
    """The call card of ``run_code``: a generic card titled with the model-written
    ``description``, kind ``execute``, with the program as its raw input.

    Arguments that do not carry both strings give ``None`` (the generic fallback card).
    """
    if not isinstance(args, Mapping):
        return None
    code = args.get("code")
    description = args.get("description")
    if type(code) is not str or type(description) is not str:
        return None
    return GenericCallView(title=description, kind="execute", raw_input=code)


def render_run_code_output(args: Any, value: Any) -> list[dict[str, Any]]:
    """Render a successful run's canonical value as one text block.

    The logs joined by newlines, then the result (a str as is, anything else as pretty
    JSON), joined by a newline; empty parts are skipped, and when nothing is left the text is
    ``(run_code completed with no output)``.
    """
    logs = value.get("logs", ()) if isinstance(value, Mapping) else ()
    parts: list[str] = []
    logs_text = "\n".join(logs)
    if logs_text:
        parts.append(logs_text)
    if isinstance(value, Mapping) and "result" in value:
        result = value["result"]
        result_text = result if type(result) is str else pretty_json(result)
        if result_text:
            parts.append(result_text)
    text = "\n".join(parts) if parts else RUN_CODE_NO_OUTPUT
    return [{"type": "text", "text": text}]


# -- pretty JSON ---------------------------------------------------------------------------------

_PRETTY_DEPTH: Final = 5
"""Containers at this depth (root = 0) and below render compact: total indentation stays at
most ten characters."""
_TOO_DEEP_MARKER: Final = "\n" + " " * (2 * _PRETTY_DEPTH + 2)
_encode = msgspec.json.encode
_format = msgspec.json.format


def pretty_json(value: Any) -> str:
    """Pretty-print a lossless JSON value the way ``run_code`` shows its result.

    Two-space indentation, ``": "`` between key and value, one member per line, empty
    containers as ``[]``/``{}``, non-ASCII kept raw, scalars in msgspec's JSON text; containers
    five or more levels deep render compact so indentation never exceeds ten characters.
    Iterative at any depth; the output size is linear in the value size.
    """
    try:
        text = _format(_encode(value), indent=2).decode()
    except RecursionError:
        pass
    else:
        if _TOO_DEEP_MARKER not in text:
            return text
    return _pretty_walk(value)


def _compact(value: Any) -> str:
    try:
        return _encode(value).decode()
    except RecursionError:
        return _compact_walk(value)


def _compact_walk(value: Any) -> str:
    """Compact JSON (``[1,{"a":[2]}]``) of a value of any depth, with an explicit stack."""
    out: list[str] = []
    work: list[Any] = [value]
    while work:
        item = work.pop()
        if type(item) is tuple:
            out.append(item[0])
            continue
        if isinstance(item, dict):
            if not item:
                out.append("{}")
                continue
            out.append("{")
            work.append(("}",))
            members = list(item.items())
            for index in range(len(members) - 1, -1, -1):
                key, child = members[index]
                work.append(child)
                separator = "," if index else ""
                work.append((separator + _encode(key).decode() + ":",))
        elif isinstance(item, list):
            if not item:
                out.append("[]")
                continue
            out.append("[")
            work.append(("]",))
            for index in range(len(item) - 1, -1, -1):
                work.append(item[index])
                if index:
                    work.append((",",))
        else:
            out.append(_encode(item).decode())
    return "".join(out)


def _pretty_walk(value: Any) -> str:
    """The pretty layout with an explicit stack; compact from depth five down."""
    out: list[str] = []
    # Work items: (value, depth) to render, or a ("text",) literal to append.
    work: list[Any] = [(value, 0)]
    while work:
        item = work.pop()
        if len(item) == 1:
            out.append(item[0])
            continue
        node, depth = item
        is_dict = isinstance(node, dict)
        if not (is_dict or isinstance(node, list)):
            out.append(_encode(node).decode())
            continue
        if not node:
            out.append("{}" if is_dict else "[]")
            continue
        if depth >= _PRETTY_DEPTH:
            out.append(_compact(node))
            continue
        inner = "\n" + "  " * (depth + 1)
        out.append("{" if is_dict else "[")
        work.append(("\n" + "  " * depth + ("}" if is_dict else "]"),))
        entries = list(node.items()) if is_dict else list(enumerate(node))
        for index in range(len(entries) - 1, -1, -1):
            key, child = entries[index]
            work.append((child, depth + 1))
            lead = ("," if index else "") + inner
            if is_dict:
                lead += _encode(key).decode() + ": "
            work.append((lead,))
    return "".join(out)
