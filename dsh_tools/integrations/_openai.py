"""OpenAI adapters: a response's function calls to ``ToolCall``s, a batch's results back.

Chat Completions and the Responses API each get a pair:

- ``openai_tool_calls(message)`` / ``responses_tool_calls(response)`` read the function calls
  (SDK objects or plain dicts) into ``ToolCall``s for ``ExecuteBatch``, names mapped back with
  ``names=``;
- ``openai_tool_messages(outcome)`` / ``responses_tool_outputs(outcome)`` turn the
  ``BatchOutcome`` into what the next request appends: Chat ``role: "tool"`` messages (text only,
  as that API requires) plus one user message with the results' images, audio and files and the
  batch's contexts; Responses ``function_call_output`` items (text, ``input_image`` and
  ``input_file`` inline) plus one user message with the contexts. Given the response too
  (``message=`` / ``response=``), they also answer its calls of other kinds (custom tools),
  which no registry tool runs, with an error output of each call's kind (``_other_calls``).

The return types are the ``openai`` SDK's own request ``TypedDict``s, so a typed harness checks
them; at run time nothing here imports the SDK.
"""

from __future__ import annotations

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
from ._other_calls import OtherCall, other_call
from ._prompt import (
    ProviderPrompt,
    distinct_ids,
    entry_of,
    items_of,
    make_call,
    mapped_schemas,
    model_call_id,
    response_of,
    sendable_arguments,
    system_text,
)
from ._schemas import OPENAI_MAX_TOOLS, StrictMode, to_openai_tools

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessage,
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallUnionParam,
    )
    from openai.types.responses import FunctionToolParam, Response, ResponseInputItemParam
    from openai.types.responses.response_function_call_output_item_param import (
        ResponseFunctionCallOutputItemParam,
    )
    from openai.types.responses.response_input_message_content_list_param import (
        ResponseInputContentParam,
    )
    from openai.types.shared_params import FunctionDefinition

__all__ = [
    "openai_assistant_message",
    "openai_prompt",
    "openai_tool_calls",
    "openai_tool_messages",
    "responses_prompt",
    "responses_tool_calls",
    "responses_tool_outputs",
]

CHAT = "OpenAI Chat Completions"
RESPONSES = "the OpenAI Responses API"

# Image types the OpenAI vision inputs accept (as data URLs).
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
_AUDIO_FORMATS: dict[str, Literal["wav", "mp3"]] = {"audio/wav": "wav", "audio/mpeg": "mp3"}


# The API refuses a whole request for an image over 20 MB.
_CHAT_IMAGES = ImageLimit(CHAT, 20_000_000, encoded=False, says="20 MB")
_RESPONSES_IMAGES = ImageLimit(RESPONSES, 20_000_000, encoded=False, says="20 MB")


# The API refuses a whole request for a string over 10,485,760 characters (a tool message, a
# function call output, a text part: "string too long"), naming neither the call nor the tool.
_MAX_TEXT = 10_485_760
_CUT = "\n…\n"


def _within(text: str, provider: str) -> str:
    """``text``, or, when it is longer than OpenAI takes, its first part (cut at a line end when
    one is near, as the spill preview is) and a note saying how long it was: the model reads
    that the rest is missing, and the conversation goes on. ``spill_policy`` keeps such results
    whole somewhere the model can read them back."""
    if len(text) <= _MAX_TEXT:
        return text
    note = (
        f"[Output truncated: {len(text)} characters in total; {provider} takes at most "
        f"{_MAX_TEXT} characters in one text]"
    )
    prefix = text[: _MAX_TEXT - len(_CUT) - len(note)]
    line_end = prefix.rfind("\n")
    if line_end >= len(prefix) // 2:
        prefix = prefix[:line_end]
    return prefix + _CUT + note


def _data_url(media: Media) -> str:
    return f"data:{media.mime_type};base64,{media.data}"


def _file_name(media: Media) -> str:
    tail = media.name.rstrip("/").rsplit("/", 1)[-1]
    return tail or media.name


# --- requests ----------------------------------------------------------------------------------


def openai_prompt(
    prompt: AssembledPrompt,
    *,
    strict: StrictMode = False,
    max_tools: int | None = OPENAI_MAX_TOOLS,
    earlier: ToolNameMap | None = None,
) -> ProviderPrompt[ChatCompletionFunctionToolParam]:
    """The Chat Completions view of ``system.assemble_prompt(agent)``.

    ``.tools`` goes to ``tools=``, ``.system`` into the system (or developer) message, and
    ``.names`` to ``openai_tool_calls(..., names=)``. ``strict`` and ``max_tools`` are as in
    ``to_openai_tools``. ``earlier``: the ``.names`` of the conversation's previous prompt,
    so that every tool keeps the provider name the model saw while it stays (``ToolNameMap``).
    """
    schemas, names = mapped_schemas(prompt, earlier)
    tools: list[ChatCompletionFunctionToolParam] = []
    for entry in to_openai_tools(schemas, strict=strict, max_tools=max_tools):
        exported: dict[str, Any] = entry["function"]
        function: FunctionDefinition = {
            "name": exported["name"],
            "description": exported["description"],
            "parameters": exported["parameters"],
        }
        if "strict" in exported:
            function["strict"] = exported["strict"]
        tools.append({"type": "function", "function": function})
    return ProviderPrompt(system=system_text(prompt), tools=tools, names=names)


def responses_prompt(
    prompt: AssembledPrompt,
    *,
    strict: StrictMode = False,
    max_tools: int | None = OPENAI_MAX_TOOLS,
    earlier: ToolNameMap | None = None,
) -> ProviderPrompt[FunctionToolParam]:
    """The Responses API view of ``system.assemble_prompt(agent)``.

    ``.tools`` goes to ``tools=``, ``.system`` to ``instructions=``, and ``.names`` to
    ``responses_tool_calls(..., names=)``. ``strict`` and ``max_tools`` are as in
    ``to_openai_tools``. ``earlier``: the ``.names`` of the conversation's previous prompt,
    so that every tool keeps the provider name the model saw while it stays (``ToolNameMap``).
    """
    schemas, names = mapped_schemas(prompt, earlier)
    tools: list[FunctionToolParam] = [
        {
            "type": "function",
            "name": entry["name"],
            "description": entry["description"],
            "parameters": entry["parameters"],
            "strict": entry["strict"],
        }
        for entry in to_openai_tools(schemas, api="responses", strict=strict, max_tools=max_tools)
    ]
    return ProviderPrompt(system=system_text(prompt), tools=tools, names=names)


# --- Chat Completions --------------------------------------------------------------------------


def _chat_message(message: Any, adapter: str) -> Any:
    """The assistant message of a completion (one choice) or the message itself; what is
    neither raises, naming ``adapter`` or the place in the completion."""
    response_of(
        message,
        adapter,
        "a Chat Completions assistant message or a one-choice completion (an SDK object or a dict)",
        ("tool_calls", "choices"),
    )
    choices = field(message, "choices")
    if choices is None:
        return message
    listed = items_of(choices, "completion.choices")
    if len(listed) != 1:
        raise ValueError(
            f"the completion has {len(listed)} choices; pass the message of the one you continue "
            "(completion.choices[i].message)"
        )
    choice = entry_of(listed[0], "completion.choices[0]", "a choice", ("message",))
    return entry_of(
        field(choice, "message"),
        "completion.choices[0].message",
        "an assistant message",
        ("tool_calls",),
    )


def _tool_call(item: Any, where: str) -> Any:
    return entry_of(item, where, "a tool call", ("type", "function"))


def _chat_other_call(item: Any, kind: object, where: str) -> OtherCall:
    """A tool call of the assistant message that is no function call (a ``custom`` one)."""
    name = field(field(item, "custom"), "name") if kind == "custom" else None
    return other_call(item, str(kind), name, where, id_field="id")


def _chat_other_calls(assistant: Any) -> list[OtherCall]:
    found: list[OtherCall] = []
    for index, item in enumerate(items_of(field(assistant, "tool_calls"), "message.tool_calls")):
        where = f"message.tool_calls[{index}]"
        kind = field(_tool_call(item, where), "type")
        if kind not in (None, "function"):
            found.append(_chat_other_call(item, kind, where))
    return found


def _chat_other_echo(
    item: Any, call: OtherCall, where: str
) -> ChatCompletionMessageToolCallUnionParam:
    """A call of another kind as the next request repeats it: a custom call in the SDK's
    shape, one of a kind the SDK does not type as it came."""
    if call.kind == "custom":
        tool_input = field(field(item, "custom"), "input")
        return {
            "id": call.call_id,
            "type": "custom",
            "custom": {
                "name": call.name if call.name is not None else "",
                # A lone surrogate the SDK read would make the request unsendable.
                "input": sendable_arguments(tool_input) if isinstance(tool_input, str) else "",
            },
        }
    if isinstance(item, Mapping):
        plain: Any = dict(item)
    elif callable(getattr(item, "to_dict", None)):
        plain = item.to_dict()  # an SDK object: its JSON form
    else:
        raise ValueError(f"{where} is a tool call of type {call.kind!r} that cannot be repeated")
    plain["id"] = call.call_id
    echo: ChatCompletionMessageToolCallUnionParam = plain
    return echo


def openai_tool_calls(
    message: ChatCompletionMessage | ChatCompletion | Mapping[str, Any],
    *,
    names: ToolNameMap | None = None,
) -> list[ToolCall]:
    """The function calls of a Chat Completions assistant message, in the model's order.

    Takes ``completion.choices[0].message`` or a one-choice completion, as SDK objects or
    dicts. ``names`` (``openai_prompt(...).names``) maps provider names back to registry names;
    without it the names are taken as they are. Calls of other kinds (custom tools) are not
    function calls of this registry and are left out: nothing runs them, and
    ``openai_tool_messages(outcome, message=message)`` answers each with an error.
    """
    assistant = _chat_message(message, "openai_tool_calls")
    calls: list[ToolCall] = []
    for index, item in enumerate(items_of(field(assistant, "tool_calls"), "message.tool_calls")):
        where = f"message.tool_calls[{index}]"
        kind = field(_tool_call(item, where), "type")
        if kind not in (None, "function"):
            # Read now, though not run: an id or name its answer cannot carry refuses the
            # response before the batch runs the calls beside it, as for a function call.
            _chat_other_call(item, kind, where)
            continue
        function = field(item, "function")
        if function is None:
            raise ValueError(f"{where} has no function")
        calls.append(
            make_call(
                field(item, "id"),
                field(function, "name"),
                field(function, "arguments"),
                names,
                where,
                arguments_at=f"{where}.function.arguments",
            )
        )
    return distinct_ids(calls)


def openai_assistant_message(
    message: ChatCompletionMessage | ChatCompletion | Mapping[str, Any],
    *,
    other_calls: bool = False,
) -> ChatCompletionAssistantMessageParam:
    """The assistant message as the next Chat request repeats it: its text and its function
    calls under the names the model used (SDK object or dict in, request ``TypedDict`` out).

    ``other_calls=True`` repeats its calls of other kinds (custom tools) too, in their place,
    for a harness that passes ``message=`` to ``openai_tool_messages``, which answers them.
    They are left out otherwise, as the API refuses a request that repeats a call no tool
    message answers (a harness that does not pass ``message=`` sends none for them)."""
    assistant = _chat_message(message, "openai_assistant_message")
    echo: ChatCompletionAssistantMessageParam = {"role": "assistant"}
    content = field(assistant, "content")
    if isinstance(content, str):
        echo["content"] = content
    refusal = field(assistant, "refusal")
    if isinstance(refusal, str):
        echo["refusal"] = refusal
    calls: list[ChatCompletionMessageToolCallUnionParam] = []
    for index, item in enumerate(items_of(field(assistant, "tool_calls"), "message.tool_calls")):
        where = f"message.tool_calls[{index}]"
        kind = field(_tool_call(item, where), "type")
        if kind not in (None, "function"):
            if other_calls:
                calls.append(_chat_other_echo(item, _chat_other_call(item, kind, where), where))
            continue
        function = field(item, "function")
        call = make_call(
            field(item, "id"),
            field(function, "name"),
            field(function, "arguments"),
            None,
            f"message.tool_calls[{index}]",
            arguments_at=f"message.tool_calls[{index}].function.arguments",
        )
        calls.append(
            {
                "id": model_call_id(call.call_id, set()),  # a call without one: empty
                "type": "function",
                "function": {"name": call.name, "arguments": sendable_arguments(call.arguments)},
            }
        )
    if calls:
        echo["tool_calls"] = calls
    return echo


def _chat_attachment(media: Media) -> ChatCompletionContentPartParam | None:
    """``media`` as a user-message content part, or ``None`` when Chat cannot take it."""
    if media.kind == "image" and media.mime_type in _IMAGE_TYPES:
        return {"type": "image_url", "image_url": {"url": _data_url(media)}}
    if media.kind == "audio" and media.mime_type in _AUDIO_FORMATS:
        audio_format = _AUDIO_FORMATS[media.mime_type]
        return {"type": "input_audio", "input_audio": {"data": media.data, "format": audio_format}}
    if media.kind == "file" and media.mime_type == "application/pdf":
        return {
            "type": "file",
            "file": {"file_data": _data_url(media), "filename": _file_name(media)},
        }
    return None


def _chat_part(part: Part) -> ChatCompletionContentPartParam:
    if isinstance(part, Text):
        return {"type": "text", "text": _within(part.text, CHAT)}
    native = _chat_attachment(part)
    return native if native is not None else {"type": "text", "text": _placeholder(part, CHAT)}


def _placeholder(media: Media, provider: str) -> str:
    return media_placeholder(media, provider).text


def openai_tool_messages(
    outcome: BatchOutcome,
    *,
    message: ChatCompletionMessage | ChatCompletion | Mapping[str, Any] | None = None,
) -> list[ChatCompletionMessageParam]:
    """The messages that follow the assistant's tool calls in the next Chat request.

    One ``role: "tool"`` message per result, in call order, with the result's text (a failure's
    text is ``Error: <message>``). Tool messages take only text, so images, audio (wav, mp3)
    and PDF files of the results go, each under a line naming its call, into one user message
    after the tool messages, followed by the batch's contexts (``outcome.contexts``). Media
    Chat cannot take at all become text placeholders. A text longer than the API takes in one
    string (10,485,760 characters) is cut short, ending with a note that says so.

    ``message``: the assistant message (or one-choice completion) whose function calls the
    batch ran. Its calls of other kinds (custom tools), which ``openai_tool_calls`` leaves out,
    then get a tool message each after the results', ``Error: custom tool "<name>" is not one
    this tool registry runs; nothing was run``: the API refuses a request that leaves a call
    of the assistant message unanswered. The request must repeat them too:
    ``openai_assistant_message(message, other_calls=True)``.
    """
    check_outcome(outcome, "openai_tool_messages")
    others = (
        _chat_other_calls(_chat_message(message, "openai_tool_messages"))
        if message is not None
        else []
    )
    messages: list[ChatCompletionMessageParam] = []
    attachments: list[ChatCompletionContentPartParam] = []
    for result, call_id in zip(outcome.results, call_ids_of(outcome), strict=True):
        texts: list[str] = []
        held: list[ChatCompletionContentPartParam] = []
        for part in fitting(_parts_of(result.content), _CHAT_IMAGES):
            if isinstance(part, Text):
                texts.append(part.text)
                continue
            native = _chat_attachment(part)
            if native is None:
                texts.append(_placeholder(part, CHAT))
            else:
                held.append(native)
                texts.append(
                    f"[{part.kind} {part.name} ({part.mime_type}) is attached to the next user "
                    "message]"
                )
        content = _within("\n".join(texts), CHAT)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if held:
            attachments.append({"type": "text", "text": f"Attachments of tool call {call_id}:"})
            attachments.extend(held)
    for call in others:
        call.log()
        messages.append({"role": "tool", "tool_call_id": call.call_id, "content": call.error})
    attachments.extend(_chat_part(part) for part in fitting(context_parts(outcome), _CHAT_IMAGES))
    if attachments:
        messages.append({"role": "user", "content": attachments})
    return messages


# --- Responses API -----------------------------------------------------------------------------


def responses_tool_calls(
    response: Response | Mapping[str, Any] | list[Any],
    *,
    names: ToolNameMap | None = None,
) -> list[ToolCall]:
    """The ``function_call`` items of a Responses API response (or of its ``output`` list), in
    order, as SDK objects or dicts; ``call_id`` is the item's ``call_id``. ``names``
    (``responses_prompt(...).names``) maps provider names back to registry names. Other items
    (messages, reasoning, built-in tools) are left out; of them, ``custom_tool_call`` items
    are answered with an error by ``responses_tool_outputs(outcome, response=response)``."""
    output = _responses_output(response, "responses_tool_calls")
    calls: list[ToolCall] = []
    for index, item in enumerate(items_of(output, "response.output")):
        where = f"response.output[{index}]"
        kind = field(entry_of(item, where, "an output item", ("type",)), "type")
        if kind != "function_call":
            if kind == "custom_tool_call":
                # Read now, though not run: an id or name its answer cannot carry refuses the
                # response before the batch runs the calls beside it, as for a function call.
                _responses_other_call(item, kind, where)
            continue
        calls.append(
            make_call(
                field(item, "call_id"),
                field(item, "name"),
                field(item, "arguments"),
                names,
                where,
                arguments_at=f"{where}.arguments",
            )
        )
    return distinct_ids(calls)


def _responses_output(response: Any, adapter: str) -> Any:
    if isinstance(response, list):
        return response
    response_of(
        response,
        adapter,
        "a Responses API response (an SDK object or a dict) or its output list",
        ("output",),
    )
    return field(response, "output")


def _responses_other_calls(response: Any) -> list[OtherCall]:
    """The ``custom_tool_call`` items of ``response``: calls of tools the registry lacks."""
    found: list[OtherCall] = []
    output = _responses_output(response, "responses_tool_outputs")
    for index, item in enumerate(items_of(output, "response.output")):
        where = f"response.output[{index}]"
        kind = field(entry_of(item, where, "an output item", ("type",)), "type")
        if kind == "custom_tool_call":
            found.append(_responses_other_call(item, kind, where))
    return found


def _responses_other_call(item: Any, kind: str, where: str) -> OtherCall:
    return other_call(item, kind, field(item, "name"), where, id_field="call_id")


# The Responses API types a function call's output parts and a message's content parts as two
# families of TypedDicts with the same wire shapes, so each gets its own (identical) builder.
def _responses_output_part(part: Part) -> ResponseFunctionCallOutputItemParam:
    if isinstance(part, Text):
        return {"type": "input_text", "text": _within(part.text, RESPONSES)}
    if part.kind == "image" and part.mime_type in _IMAGE_TYPES:
        return {"type": "input_image", "image_url": _data_url(part), "detail": "auto"}
    if part.kind == "file" and part.mime_type == "application/pdf":
        return {"type": "input_file", "file_data": _data_url(part), "filename": _file_name(part)}
    return {"type": "input_text", "text": _placeholder(part, RESPONSES)}


def _responses_message_part(part: Part) -> ResponseInputContentParam:
    if isinstance(part, Text):
        return {"type": "input_text", "text": _within(part.text, RESPONSES)}
    if part.kind == "image" and part.mime_type in _IMAGE_TYPES:
        return {"type": "input_image", "image_url": _data_url(part), "detail": "auto"}
    if part.kind == "file" and part.mime_type == "application/pdf":
        return {"type": "input_file", "file_data": _data_url(part), "filename": _file_name(part)}
    return {"type": "input_text", "text": _placeholder(part, RESPONSES)}


def responses_tool_outputs(
    outcome: BatchOutcome,
    *,
    response: Response | Mapping[str, Any] | list[Any] | None = None,
) -> list[ResponseInputItemParam]:
    """The input items that answer a response's function calls in the next Responses request.

    One ``function_call_output`` per result, in call order: its text as a string, or, when the
    result holds images or PDF files, a list of ``input_text`` / ``input_image`` /
    ``input_file`` parts (audio becomes a text placeholder). The batch's contexts follow as
    one user message. A text longer than the API takes in one string (10,485,760 characters)
    is cut short, ending with a note that says so.

    ``response``: the response (or its ``output`` list) whose function calls the batch ran.
    Its ``custom_tool_call`` items, which ``responses_tool_calls`` leaves out, then get a
    ``custom_tool_call_output`` each after the function call outputs, ``Error: custom tool
    "<name>" is not one this tool registry runs; nothing was run``: the API refuses a request
    that leaves a call of the previous response unanswered. (Built-in tools OpenAI runs need
    no answer; the computer, shell and apply-patch tools are the harness's to run.)
    """
    check_outcome(outcome, "responses_tool_outputs")
    others = _responses_other_calls(response) if response is not None else []
    items: list[ResponseInputItemParam] = []
    for result, call_id in zip(outcome.results, call_ids_of(outcome), strict=True):
        parts = fitting(_parts_of(result.content), _RESPONSES_IMAGES)
        if all(isinstance(part, Text) for part in parts):
            text = _within("\n".join(p.text for p in parts if isinstance(p, Text)), RESPONSES)
            items.append({"type": "function_call_output", "call_id": call_id, "output": text})
        else:
            output = [_responses_output_part(part) for part in parts]
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    for call in others:
        call.log()
        items.append(
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": call.error}
        )
    extra = fitting(context_parts(outcome), _RESPONSES_IMAGES)
    if extra:
        content = [_responses_message_part(part) for part in extra]
        items.append({"type": "message", "role": "user", "content": content})
    return items
