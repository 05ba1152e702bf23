"""How the command line shows a tool result: its text content, indented and clipped."""

from __future__ import annotations

from .actors import ToolExecutionResult

__all__ = ["content_text", "indent"]


def content_text(result: ToolExecutionResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type') if isinstance(block, dict) else '?'} content]")
    return "\n".join(parts)


def indent(text: str, prefix: str = "      ") -> str:
    lines = text.splitlines() or [""]
    if len(lines) > 12:
        lines = [*lines[:12], f"... ({len(lines) - 12} more lines)"]
    return "\n".join(prefix + line for line in lines)
