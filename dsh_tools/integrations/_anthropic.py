"""Anthropic Messages adapters: ``tool_use`` blocks to ``ToolCall``s, a batch's results back.

- ``anthropic_tool_calls(message)`` reads the ``tool_use`` blocks of a response (SDK object or
  dict) into ``ToolCall``s, the ``input`` object as JSON text, names mapped back with ``names=``;
- ``anthropic_tool_results(outcome)`` gives the one user message that answers them: a
  ``tool_result`` block per result in call order (``is_error`` set, images as base64 sources,
  PDF files as documents), then the batch's contexts as further blocks, after the results as
  the API requires.

The return types are the ``anthropic`` SDK's own request ``TypedDict``s; at run time nothing
here imports the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from ..actors import BatchOutcome, ToolCall
from ..codebridge import AssembledPrompt
from ._content import (
    ImageLimit,
    Media,
    Part,
    Text,
    call_ids_of,
    check_outcome,
    context_parts,
    field,
    fitting,
    media_placeholder,
)
from ._content import parts_of as _parts_of
from ._names import ToolNameMap
from ._prompt import (
    ProviderPrompt,
    distinct_ids,
    entry_of,
    items_of,
    make_call,
    mapped_schemas,
    response_of,
    system_text,
)
from ._schemas import to_anthropic_tools

if TYPE_CHECKING:
    from anthropic.types import (
        ContentBlockParam,
        DocumentBlockParam,
        ImageBlockParam,
        Message,
        TextBlockParam,
        ToolParam,
        ToolResultBlockParam,
        UserMessageParam,
    )

__all__ = ["anthropic_prompt", "anthropic_tool_calls", "anthropic_tool_results"]

ANTHROPIC = "the Anthropic Messages API"

# The API refuses a whole request for an image whose base64 text is over 5 MB (5,242,880), or
# that is more than 8000 pixels wide or high (a full-page screenshot, say).
_IMAGES = ImageLimit(ANTHROPIC, 5 * 1024 * 1024, encoded=True, says="5 MB as base64", side=8000)

_ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
_IMAGE_TYPES: dict[str, _ImageType] = {
    "image/jpeg": "image/jpeg",
    "image/png": "image/png",
    "image/gif": "image/gif",
    "image/webp": "image/webp",
}


def anthropic_prompt(
    prompt: AssembledPrompt,
    *,
    cache_control: Mapping[str, Any] | None = None,
    earlier: ToolNameMap | None = None,
) -> ProviderPrompt[ToolParam]:
    """The Messages API view of ``system.assemble_prompt(agent)``.

    ``.tools`` goes to ``tools=``, ``.system`` to ``system=``, and ``.names`` to
    ``anthropic_tool_calls(..., names=)``. ``cache_control`` is as in ``to_anthropic_tools``.
    ``earlier``: the ``.names`` of the conversation's previous prompt, so that every tool keeps
    the provider name the model saw while it stays (``ToolNameMap``).
    """
    schemas, names = mapped_schemas(prompt, earlier)
    tools: list[ToolParam] = []
    for entry in to_anthropic_tools(schemas, cache_control=cache_control):
        tool: ToolParam = {
            "name": entry["name"],
            "description": entry["description"],
            "input_schema": entry["input_schema"],
        }
        if "cache_control" in entry:
            tool["cache_control"] = entry["cache_control"]
        tools.append(tool)
    return ProviderPrompt(system=system_text(prompt), tools=tools, names=names)


_CUT_OFF = {
    "max_tokens": "send the request again with a larger max_tokens",
    "model_context_window_exceeded": "the conversation fills the model's context window; "
    "shorten it before sending the request again",
}
"""The stop reasons of a response cut off mid-block, and what the harness can do about it."""


def _check_not_cut_off(message: Any, blocks: list[Any]) -> None:
    """Refuse a response cut off inside its last block when that block is a ``tool_use``.

    Its ``input`` is incomplete, yet reads as an object: the SDK's stream reader keeps the
    members that were complete (``{"city": "Lima", "da`` reads as ``{"city": "Lima"}``), so
    the call would run with arguments the model never finished. The whole response is
    refused, as Anthropic advises (send it again with a larger ``max_tokens``), rather than
    that call alone: a response cut short is one the model did not finish either."""
    stop_reason = field(message, "stop_reason")
    if (
        type(stop_reason) is not str
        or stop_reason not in _CUT_OFF
        or not blocks
        or field(blocks[-1], "type") != "tool_use"
    ):
        return
    call_id = field(blocks[-1], "id")
    named = f" (id {json.dumps(call_id)})" if type(call_id) is str else ""
    raise ValueError(
        f"message.content[{len(blocks) - 1}] is a tool_use block{named} that the response was "
        f'cut off in (stop_reason "{stop_reason}"): its input is incomplete, so no call of the '
        f"response is run; {_CUT_OFF[stop_reason]}"
    )


def anthropic_tool_calls(
    message: Message | Mapping[str, Any], *, names: ToolNameMap | None = None
) -> list[ToolCall]:
    """The ``tool_use`` blocks of a Messages API response, in order, as ``ToolCall``s.

    Takes the response message as an SDK object or a dict. ``names``
    (``anthropic_prompt(...).names``) maps provider names back to registry names. Other blocks
    (text, thinking, server tools that Anthropic runs itself) are left out. A response cut off
    (``stop_reason`` ``"max_tokens"`` or ``"model_context_window_exceeded"``) inside a
    ``tool_use`` block raises ``ValueError`` naming the block: its input is incomplete.
    """
    response_of(
        message,
        "anthropic_tool_calls",
        "a Messages API response message (an SDK object or a dict)",
        ("content",),
    )
    blocks = items_of(field(message, "content"), "message.content")
    _check_not_cut_off(message, blocks)
    calls: list[ToolCall] = []
    for index, block in enumerate(blocks):
        where = f"message.content[{index}]"
        if field(entry_of(block, where, "a content block", ("type",)), "type") != "tool_use":
            continue
        calls.append(
            make_call(
                field(block, "id"),
                field(block, "name"),
                field(block, "input"),
                names,
                where,
                arguments_at=f"{where}.input",
                parsed=True,  # `input` is the JSON value itself
            )
        )
    return distinct_ids(calls)


def _media_block(media: Media) -> ImageBlockParam | DocumentBlockParam | None:
    if media.kind == "image" and media.mime_type in _IMAGE_TYPES:
        return {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": _IMAGE_TYPES[media.mime_type],
                "data": media.data,
            },
        }
    if media.kind == "file" and media.mime_type == "application/pdf":
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": media.data},
            "title": media.name,
        }
    return None


def _block(part: Part) -> TextBlockParam | ImageBlockParam | DocumentBlockParam:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    native = _media_block(part)
    if native is not None:
        return native
    return {"type": "text", "text": media_placeholder(part, ANTHROPIC).text}


_NO_MESSAGE = "Error: the call failed without a message"
"""The text of a failed ``tool_result`` that has none (``Block([])``, say): the API refuses
one without content ("content cannot be empty if is_error is true")."""


def _follows(media: Media) -> str:
    """What a failed result says in place of ``media``, which the API takes only outside it
    ("all content must be type 'text' if 'is_error' is true")."""
    return f"[{media.kind} {media.name} ({media.mime_type}) follows the tool results]"


def _sendable(parts: list[Part]) -> list[Part]:
    """``parts`` without blank text: the API refuses a text block that is empty or only
    whitespace (in a ``tool_result`` too), which a tool that printed nothing gives."""
    return [part for part in parts if not isinstance(part, Text) or part.text.strip()]


def anthropic_tool_results(outcome: BatchOutcome) -> UserMessageParam:
    """The user message that answers a response's ``tool_use`` blocks.

    One ``tool_result`` block per result in call order, with ``is_error`` set and the content
    as ``text``, ``image`` (base64 source) and ``document`` (PDF) blocks; audio and other media
    become text placeholders. The batch's contexts follow the results as further blocks. Raises
    ``ValueError`` for an outcome with neither results nor contexts (the API refuses an empty
    message). Blank text is left out (the API refuses it), so a result with no other content
    is a ``tool_result`` without ``content``. A failed result is the exception: the API takes
    only text in it, and refuses it empty, so its images and documents follow the results
    (under a line naming its call; the result says so where each was), and one with no text
    says it failed without a message.
    """
    check_outcome(outcome, "anthropic_tool_results")
    content: list[ContentBlockParam] = []
    attached: list[ContentBlockParam] = []  # a failed result's media, after every result
    for result, call_id in zip(outcome.results, call_ids_of(outcome), strict=True):
        block: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "is_error": result.is_error,
        }
        parts: list[TextBlockParam | ImageBlockParam | DocumentBlockParam] = []
        held: list[ContentBlockParam] = []
        for part in _sendable(fitting(_parts_of(result.content), _IMAGES)):
            native = _block(part)
            if result.is_error and isinstance(part, Media) and native["type"] != "text":
                held.append(native)
                parts.append({"type": "text", "text": _follows(part)})
            else:
                parts.append(native)
        if held:
            attached.append({"type": "text", "text": f"Attachments of tool call {call_id}:"})
            attached.extend(held)
        if result.is_error and not parts:
            parts.append({"type": "text", "text": _NO_MESSAGE})
        if parts:
            block["content"] = parts
        content.append(block)
    content.extend(attached)
    content.extend(_block(part) for part in _sendable(fitting(context_parts(outcome), _IMAGES)))
    if not content:
        raise ValueError("the outcome has no results and no contexts: nothing to send")
    return {"role": "user", "content": content}
