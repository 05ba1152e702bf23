"""What a failed MCP call shows the model beside its error text.

A server may flag a result ``isError`` and send more than text with it: a screenshot of the
failure, a recording, the log as an embedded resource. A failed call's content is
``Error: <message>`` (the pipeline makes it from the body's exception), and the contract gives
a tool one place to change it: its ``finalize_content``, which sees the final result once
post-execute has run. So the body keeps the blocks the message cannot carry, keyed by its call's
execution token, and the tool's finalizer puts them after the error text, or after the spill
policy's preview of it (the same text, shortened: the blocks are no part of what it saved). A
post-execute hook that replaced the failure's content otherwise (an ``Accept(content=...)``, a
``Block``) has decided what the model sees: the blocks stay out then.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import UNSET

from ...actors import ExecutionToken, ToolExecutionResult
from ...pipeline import ToolExecution, is_preview_of
from ._content import content_blocks

__all__ = ["ERROR_CODE", "finalize_error_content", "keep_error_blocks"]

ERROR_CODE = "MCP_TOOL_ERROR"
"""The code of a failure the server flagged ``isError``."""

_KEPT: weakref.WeakKeyDictionary[ExecutionToken, list[dict[str, Any]]] = weakref.WeakKeyDictionary()
"""The non-text blocks of a call's error result, until its finalizer takes them. Weak: a call
whose finalizer never runs for this body (the tool was replaced after the call entered, which
captured the old definition's finalizer) leaves nothing behind once its token is gone."""


def keep_error_blocks(token: ExecutionToken, content: Sequence[Any]) -> None:
    """Keep the blocks of an error result's ``content`` (wire form) that are not text, in the
    MCP shapes (one of a kind the protocol lacks says so, as in a success), for the call's
    finalizer: the text blocks are the error's message already."""
    others = [b for b in content if not (isinstance(b, Mapping) and b.get("type") == "text")]
    if others:
        _KEPT[token] = content_blocks(others)
    else:
        _KEPT.pop(token, None)


def finalize_error_content(
    execution: ToolExecution, result: ToolExecutionResult
) -> list[Any] | None:
    """The ``finalize_content`` of every MCP tool: a failure the server flagged ``isError``
    shows its error text (or the spill policy's preview of it) followed by the result's other
    blocks (``None``: content unchanged)."""
    blocks = _KEPT.pop(execution.token, None)
    if blocks is None or not result.is_error:
        return None
    error = result.error
    if error.info is UNSET or error.info.code != ERROR_CODE:
        return None
    shown = result.content
    text = "Error: " + error.message
    if len(shown) != 1 or shown[0] != {"type": "text", "text": text}:
        block = shown[0] if len(shown) == 1 else None
        if not isinstance(block, Mapping) or block.get("type") != "text":
            return None  # a post-execute hook replaced what the model sees
        seen = block.get("text")
        if type(seen) is not str or not is_preview_of(seen, text):
            return None
    return [*shown, *blocks]
