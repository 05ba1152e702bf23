"""How the command line shows a tool result: its text content, indented and clipped."""

from __future__ import annotations

import re
from typing import Final

from .actors import ToolExecutionResult

__all__ = ["content_text", "indent"]

_UNSHOWN: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""Characters a terminal acts on rather than shows: the C0 controls but newline and tab, DEL,
the C1 controls, and the marks that reorder text on screen. A program's output reaching a
terminal raw could clear the screen or overwrite a line (``\\r``) to fake what it did, set the
window title, or, through OSC 52, write the user's clipboard from inside the sandbox."""


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def content_text(result: ToolExecutionResult) -> str:
    """The result's text blocks, one per line, each control character shown escaped (``\\x1b``,
    ``\\r``, ``\\u202e``) the way ``backslashreplace`` shows what the terminal cannot encode."""
    parts = []
    for block in result.content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type') if isinstance(block, dict) else '?'} content]")
    return _UNSHOWN.sub(_escape, "\n".join(parts))


def indent(text: str, prefix: str = "      ") -> str:
    lines = text.splitlines() or [""]
    if len(lines) > 12:
        lines = [*lines[:12], f"... ({len(lines) - 12} more lines)"]
    return "\n".join(prefix + line for line in lines)
