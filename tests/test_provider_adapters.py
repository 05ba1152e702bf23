"""The provider adapters on plain dicts: every content kind, names, contexts and bad input."""

from __future__ import annotations

import base64
import subprocess
import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools import (
    BatchOutcome,
    FrozenList,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
    snapshot_json,
)
from dsh_tools.integrations import (
    ToolNameMap,
    anthropic_prompt,
    anthropic_tool_calls,
    anthropic_tool_results,
    openai_assistant_message,
    openai_prompt,
    openai_tool_calls,
    openai_tool_messages,
    responses_prompt,
    responses_tool_calls,
    responses_tool_outputs,
    to_anthropic_tools,
    to_openai_tools,
)

PDF = "JVBERi0xLjQK"  # base64 of "%PDF-1.4\n"
WAV = "UklGRgAAAABXQVZF"
PNG = "iVBORw0KGgo="
SVG = "PHN2Zy8+"

EVERY_KIND = [
    {"type": "text", "text": "plain"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "image", "data": SVG, "mimeType": "image/svg+xml"},
    {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
    {"type": "resource", "resource": {"uri": "file:///notes.md", "text": "# Notes"}},
    {
        "type": "resource",
        "resource": {"uri": "file:///docs/spec.pdf", "mimeType": "application/pdf", "blob": PDF},
    },
    {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv", "mimeType": "text/csv"},
    {"type": "reasoning", "text": "hmm"},
]


def success(call_id: str, content: list[dict[str, Any]]) -> ToolExecutionSuccess:
    return ToolExecutionSuccess(value=None, content=snapshot_json(content), call_id=call_id)


def failure(call_id: str, message: str) -> ToolExecutionFailure:
    return ToolExecutionFailure(
        error=ToolFailure(message),
        content=snapshot_json([{"type": "text", "text": f"Error: {message}"}]),
        call_id=call_id,
    )


def outcome(*results: Any, contexts: list[Any] | None = None) -> BatchOutcome:
    return BatchOutcome(results=list(results), contexts=snapshot_json(contexts or []))


def test_chat_keeps_tool_messages_text_only_and_attaches_media_to_one_user_message() -> None:
    messages: list[Any] = openai_tool_messages(
        outcome(success("c1", EVERY_KIND), failure("c2", "boom"))
    )
    tool, failed, user = messages
    assert tool["role"] == "tool" and tool["tool_call_id"] == "c1"
    assert tool["content"].splitlines() == [
        "plain",
        "[image image-2 (image/png) is attached to the next user message]",
        "[image image-3 (image/svg+xml, about 6 bytes) omitted: OpenAI Chat Completions does "
        "not accept it here]",
        "[audio audio-4 (audio/wav) is attached to the next user message]",
        "[resource file:///notes.md]",
        "# Notes",
        "[file file:///docs/spec.pdf (application/pdf) is attached to the next user message]",
        "[resource link: big.csv <file:///big.csv> (text/csv)]",
        '[content block of type "reasoning" omitted]',
    ]
    assert failed == {"role": "tool", "tool_call_id": "c2", "content": "Error: boom"}
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attachments of tool call c1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            {
                "type": "file",
                "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "spec.pdf"},
            },
        ],
    }


def test_responses_put_images_and_files_inline_and_audio_as_a_placeholder() -> None:
    (item,) = responses_tool_outputs(outcome(success("c1", EVERY_KIND[:6])))
    assert item["type"] == "function_call_output" and item["call_id"] == "c1"
    output: Any = item["output"]
    assert [part["type"] for part in output] == [
        "input_text",
        "input_image",
        "input_text",
        "input_text",
        "input_text",
        "input_file",
    ]
    assert output[1]["image_url"] == f"data:image/png;base64,{PNG}"
    assert "audio audio-4 (audio/wav" in output[3]["text"]
    assert output[5] == {
        "type": "input_file",
        "file_data": f"data:application/pdf;base64,{PDF}",
        "filename": "spec.pdf",
    }


def test_anthropic_results_carry_is_error_base64_sources_and_pdf_documents() -> None:
    message: Any = anthropic_tool_results(
        outcome(success("t1", EVERY_KIND[:6]), failure("t2", "boom"))
    )
    first, second = message["content"]
    assert first["is_error"] is False and second["is_error"] is True
    blocks = first["content"]
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }
    assert blocks[2]["type"] == "text" and "image/svg+xml" in blocks[2]["text"]
    assert blocks[3]["type"] == "text" and "the Anthropic Messages API" in blocks[3]["text"]
    assert blocks[5] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        "title": "file:///docs/spec.pdf",
    }
    assert second["content"] == [{"type": "text", "text": "Error: boom"}]


BROKEN_MEDIA = [
    {"type": "image", "data": "not base64!", "mimeType": "image/png"},
    {"type": "image", "data": "iVBORw0KGgo", "mimeType": "image/png"},
    {
        "type": "resource",
        "resource": {"uri": "file:///a.pdf", "mimeType": "application/pdf", "blob": "JVBERi0é"},
    },
    {
        "type": "resource",
        "resource": {"uri": "file:///b.pdf", "mimeType": "application/pdf", "blob": ""},
    },
]
BROKEN_TEXTS = [
    "[image image-1 (image/png) omitted: its data is not valid base64: '!' at offset 10 is "
    "not a base64 character]",
    "[image image-2 (image/png) omitted: its data is not valid base64: Incorrect padding]",
    "[file file:///a.pdf (application/pdf) omitted: its data is not valid base64: 'é' at "
    "offset 7 is not a base64 character]",
    "[file file:///b.pdf (application/pdf) omitted: its data is empty]",
]


def test_media_whose_data_is_not_base64_is_named_to_the_model_not_sent() -> None:
    # The provider would refuse the whole request, far from the tool that gave the data.
    result = outcome(success("c1", BROKEN_MEDIA))
    (tool,) = openai_tool_messages(result)
    assert tool["content"] == "\n".join(BROKEN_TEXTS)
    (item,) = responses_tool_outputs(result)
    output: Any = item["output"]
    assert output == "\n".join(BROKEN_TEXTS)
    message: Any = anthropic_tool_results(result)
    assert message["content"][0]["content"] == [{"type": "text", "text": t} for t in BROKEN_TEXTS]


def test_base64_wrapped_across_lines_is_sent_unwrapped() -> None:
    wrapped = PNG[:4] + "\n" + PNG[4:8] + "\r\n" + PNG[8:]
    message: Any = anthropic_tool_results(
        outcome(success("t1", [{"type": "image", "data": wrapped, "mimeType": "image/png"}]))
    )
    assert message["content"][0]["content"][0]["source"]["data"] == PNG


def test_an_image_is_sent_as_the_type_its_bytes_are() -> None:
    # A JPEG a tool calls image/png: the Anthropic API refuses an image whose bytes are not
    # of the stated media type.
    jpeg = "/9j/4AAQSkZJRgABAQ=="  # base64 of a JPEG's first bytes
    webp = "UklGRhoAAABXRUJQVlA4"  # RIFF....WEBPVP8
    blocks = [
        {"type": "image", "data": jpeg, "mimeType": "image/png"},
        {"type": "image", "data": webp, "mimeType": "image/jpeg"},
        {"type": "image", "data": PNG, "mimeType": "image/jpg"},
        {"type": "image", "data": SVG, "mimeType": "image/svg+xml"},
    ]
    message: Any = anthropic_tool_results(outcome(success("t1", blocks)))
    sources = [block.get("source") for block in message["content"][0]["content"]]
    assert [source["media_type"] for source in sources[:3]] == [
        "image/jpeg",
        "image/webp",
        "image/png",
    ]
    assert sources[3] is None  # still a placeholder: not a type the provider takes
    (item,) = responses_tool_outputs(outcome(success("c1", blocks[:1])))
    output: Any = item["output"]
    assert output[0]["image_url"] == f"data:image/jpeg;base64,{jpeg}"


def test_media_whose_bytes_are_not_the_type_a_provider_takes_is_not_sent() -> None:
    # An HTML error page a server fetched in place of a picture or a PDF, still called
    # image/png or application/pdf: every provider would refuse the whole request for it.
    page = "PGh0bWw+NDA0PC9odG1sPg=="  # base64 of "<html>404</html>"
    blocks = [
        {"type": "image", "data": page, "mimeType": "image/png"},
        {
            "type": "resource",
            "resource": {"uri": "file:///a.jpg", "mimeType": "image/jpeg", "blob": page},
        },
        {
            "type": "resource",
            "resource": {"uri": "file:///b.pdf", "mimeType": "application/pdf", "blob": page},
        },
    ]
    said = [
        "[image image-1 (image/png) omitted: its data is not a PNG, JPEG, GIF or WebP image]",
        "[image file:///a.jpg (image/jpeg) omitted: its data is not a PNG, JPEG, GIF or WebP "
        "image]",
        "[file file:///b.pdf (application/pdf) omitted: its data is not a PDF document]",
    ]
    result = outcome(success("c1", blocks))
    assert openai_tool_messages(result) == [
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(said)}
    ]
    (item,) = responses_tool_outputs(result)
    assert item == {"type": "function_call_output", "call_id": "c1", "output": "\n".join(said)}
    message: Any = anthropic_tool_results(result)
    assert message["content"][0]["content"] == [{"type": "text", "text": text} for text in said]


def png_of(size: int) -> str:
    """The base64 text of a PNG of ``size`` bytes (its signature, then zeros)."""
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(size - 8)).decode()


def test_an_image_larger_than_a_provider_takes_is_named_to_the_model_not_sent() -> None:
    # The API refused the whole request for it: OpenAI takes images of up to 20 MB, Anthropic
    # up to 5 MB of base64 text ("image exceeds 5 MB maximum: 6500712 bytes > 5242880 bytes").
    huge, big, fine = png_of(20_000_001), png_of(3_932_161), png_of(3_932_160)
    blocks = [
        {"type": "image", "data": data, "mimeType": "image/png"} for data in (huge, big, fine)
    ]
    result = outcome(success("c1", blocks), contexts=[{"content": blocks[:1]}])
    over = "[image image-1 (image/png, 20000001 bytes) omitted: "
    tool, attachments = openai_tool_messages(result)
    chat: Any = tool["content"]
    assert chat.split("\n") == [
        over + "OpenAI Chat Completions takes images of at most 20 MB]",
        "[image image-2 (image/png) is attached to the next user message]",
        "[image image-3 (image/png) is attached to the next user message]",
    ]
    sent: Any = attachments["content"]
    assert sent[-1] == {
        "type": "text",
        "text": over + "OpenAI Chat Completions takes images of at most 20 MB]",
    }
    (item, extra) = responses_tool_outputs(result)
    output: Any = item["output"]
    assert output[0] == {
        "type": "input_text",
        "text": over + "the OpenAI Responses API takes images of at most 20 MB]",
    }
    assert [part["type"] for part in output] == ["input_text", "input_image", "input_image"]
    context: Any = extra["content"]
    assert context[0]["type"] == "input_text"
    message: Any = anthropic_tool_results(result)
    said = message["content"][0]["content"]
    assert said[:2] == [
        {
            "type": "text",
            "text": over + "the Anthropic Messages API takes images of at most 5 MB as base64]",
        },
        {
            "type": "text",
            "text": "[image image-2 (image/png, 3932161 bytes) omitted: the Anthropic Messages "
            "API takes images of at most 5 MB as base64]",
        },
    ]
    assert said[2]["type"] == "image" and len(said[2]["source"]["data"]) == 5 * 1024 * 1024
    assert message["content"][1]["type"] == "text"  # the context's image, too large as well


def png_sized(width: int, height: int) -> bytes:
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 6, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR" + ihdr + bytes(4)


def jpeg_sized(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + (16).to_bytes(2, "big") + b"JFIF\x00" + bytes(9)
    sof0 = b"\xff\xc0" + (17).to_bytes(2, "big") + b"\x08" + height.to_bytes(2, "big")
    return b"\xff\xd8" + app0 + sof0 + width.to_bytes(2, "big") + bytes(10)


def gif_sized(width: int, height: int) -> bytes:
    return b"GIF89a" + width.to_bytes(2, "little") + height.to_bytes(2, "little") + bytes(4)


def webp_sized(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + bytes(4) + b"WEBPVP8X" + (10).to_bytes(4, "little") + bytes(4) + canvas


def webp_lossless_sized(width: int, height: int) -> bytes:
    bits = (width - 1) | (height - 1) << 14
    return b"RIFF" + bytes(4) + b"WEBPVP8L" + bytes(4) + b"\x2f" + bits.to_bytes(4, "little")


def webp_lossy_sized(width: int, height: int) -> bytes:
    frame = bytes(3) + b"\x9d\x01\x2a" + width.to_bytes(2, "little") + height.to_bytes(2, "little")
    return b"RIFF" + bytes(4) + b"WEBPVP8 " + bytes(4) + frame


@pytest.mark.parametrize(
    "image",
    [png_sized, jpeg_sized, gif_sized, webp_sized, webp_lossless_sized, webp_lossy_sized],
)
def test_an_image_more_than_8000_pixels_a_side_is_named_to_anthropic_not_sent(
    image: Any,
) -> None:
    # A full-page screenshot: "At least one of the image dimensions exceed max allowed size:
    # 8000 pixels", and the whole request was refused.
    tall, fine = (base64.b64encode(image(1280, h)).decode() for h in (12_000, 8_000))
    blocks = [{"type": "image", "data": data, "mimeType": "image/png"} for data in (tall, fine)]
    message: Any = anthropic_tool_results(outcome(success("t1", blocks)))
    said = message["content"][0]["content"]
    kind = said[1]["source"]["media_type"]  # as its bytes are, whatever the block says
    assert said[0] == {
        "type": "text",
        "text": f"[image image-1 ({kind}, 1280x12000 pixels) omitted: the Anthropic Messages "
        "API takes images of at most 8000 pixels a side]",
    }
    assert said[1]["type"] == "image"
    (tool,) = openai_tool_messages(outcome(success("c1", blocks)))[:1]
    assert "omitted" not in str(tool["content"])  # OpenAI scales large images itself


def test_anthropic_gets_no_blank_text_blocks_from_an_empty_result_or_context() -> None:
    # The Messages API refuses a text block that is empty or only whitespace, in a tool_result
    # as anywhere else; a tool that printed nothing answers with a tool_result without content.
    blank = [{"type": "text", "text": ""}]
    done = outcome(
        success("t1", blank),
        success("t2", [{"type": "text", "text": " \n"}, {"type": "text", "text": "done"}]),
        contexts=[{"content": blank, "source": {}}, {"content": "", "source": {}}],
    )
    message: Any = anthropic_tool_results(done)
    assert message["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": False},
        {
            "type": "tool_result",
            "tool_use_id": "t2",
            "is_error": False,
            "content": [{"type": "text", "text": "done"}],
        },
    ]


def test_contexts_follow_the_results_where_each_provider_takes_extra_context() -> None:
    contexts = [
        {"content": [{"type": "text", "text": "remember this"}], "source": {"kind": "plugin"}},
        {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}], "source": {}},
        {"note": "not a usual context"},
    ]
    done = outcome(success("c1", [{"type": "text", "text": "ok"}]), contexts=contexts)
    chat: Any = openai_tool_messages(done)
    assert chat[1]["content"] == [
        {"type": "text", "text": "remember this"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": '{"note":"not a usual context"}'},
    ]
    responses: Any = responses_tool_outputs(done)
    assert responses[1]["role"] == "user"
    assert [part["type"] for part in responses[1]["content"]] == [
        "input_text",
        "input_image",
        "input_text",
    ]
    message: Any = anthropic_tool_results(done)
    assert [block["type"] for block in message["content"]] == [
        "tool_result",
        "text",
        "image",
        "text",
    ]


def test_calls_are_read_from_plain_dicts_with_names_mapped_back() -> None:
    names = ToolNameMap(["time.now", "weather"])
    chat = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "time_now", "arguments": "{}"},
                        },
                        {"id": "b", "type": "custom", "custom": {"name": "x", "input": ""}},
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "weather", "arguments": None},
                        },
                    ],
                }
            }
        ]
    }
    assert openai_tool_calls(chat, names=names) == [
        ToolCall("a", "time.now", "{}"),
        ToolCall("c", "weather", "{}"),
    ]
    # The custom call is repeated in its place only when asked: openai_tool_messages(...,
    # message=) answers it then, and nothing does otherwise.
    assert openai_assistant_message(chat, other_calls=True) == {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "time_now", "arguments": "{}"}},
            {"id": "b", "type": "custom", "custom": {"name": "x", "input": ""}},
            {"id": "c", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
        ],
    }
    assert [call["id"] for call in openai_assistant_message(chat)["tool_calls"]] == ["a", "c"]
    output = [
        {"type": "reasoning", "id": "r"},
        {"type": "function_call", "call_id": "f1", "name": "time_now", "arguments": "{}"},
    ]
    assert responses_tool_calls({"output": output}, names=names) == [
        ToolCall("f1", "time.now", "{}")
    ]
    assert responses_tool_calls(output) == [ToolCall("f1", "time_now", "{}")]
    message = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "u1", "name": "time_now", "input": {"tz": "UTC", "n": 1.5}},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
        ]
    }
    assert anthropic_tool_calls(message, names=names) == [
        ToolCall("u1", "time.now", '{"tz":"UTC","n":1.5}')
    ]


@pytest.mark.parametrize("given", ["Oslo", '{"city": "Oslo"}', 5, True, [1, 2]], ids=repr)
def test_a_tool_use_whose_input_is_not_an_object_fails_that_call_alone(given: Any) -> None:
    # Anthropic sends `input` as the JSON value itself: a string is that string, never JSON
    # text to read again, and a number or a boolean is a value like any other.
    from dsh_tools import ExecuteBatch, ToolOutput, define_tool

    message = {
        "content": [
            {"type": "tool_use", "id": "u1", "name": "weather", "input": given},
            {"type": "tool_use", "id": "u2", "name": "weather", "input": {"city": "Lima"}},
        ]
    }
    calls = anthropic_tool_calls(message)
    assert [call.call_id for call in calls] == ["u1", "u2"]
    with ToolSystem.start(ToolsConfig(mode="native"), code_runtime=None) as system:
        system.tools.register(
            define_tool(
                name="weather",
                description="The weather in a city.",
                parameters={"city": {"type": "string", "required": True}},
                output=ToolOutput(
                    schema={"type": "string"},
                    render=lambda args, value: [{"type": "text", "text": value}],
                ),
                execute=lambda args, ctx: f"{args['city']}: mild",
            )
        )
        reply = anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls)))
    first, second = reply["content"]
    assert first["is_error"] is True
    assert first["content"][0]["text"] == 'Error: invalid arguments: "arguments" must be an object'
    assert (second["is_error"], second["content"][0]["text"]) == (False, "Lima: mild")


def test_a_stop_reason_that_is_no_cut_off_leaves_a_last_tool_use_to_run() -> None:
    # Only a string can name a cut-off: a hand-built message may hold anything there.
    for stop_reason in (["max_tokens"], None, "tool_use", "end_turn"):
        message = {
            "stop_reason": stop_reason,
            "content": [{"type": "tool_use", "id": "u", "name": "n", "input": {"a": 1}}],
        }
        assert [call.arguments for call in anthropic_tool_calls(message)] == ['{"a":1}']


def test_bad_responses_get_errors_that_name_the_place() -> None:
    with pytest.raises(
        ValueError, match=r"message.tool_calls\[0\] has no call id \(a str, got int\)"
    ):
        openai_tool_calls(
            {"tool_calls": [{"id": 7, "type": "function", "function": {"name": "x"}}]}
        )
    with pytest.raises(ValueError, match="2 choices"):
        openai_tool_calls({"choices": [{"message": {}}, {"message": {}}]})
    with pytest.raises(ValueError, match=r"message\.content must be a list"):
        anthropic_tool_calls({"content": "just text"})
    with pytest.raises(TypeError, match="names must be a ToolNameMap"):
        anthropic_tool_calls(
            {"content": [{"type": "tool_use", "id": "u", "name": "n", "input": {}}]},
            names=["n"],  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match=r"results\[0\] has no call_id"):
        openai_tool_messages(BatchOutcome(results=[ToolExecutionSuccess(None, FrozenList())]))
    with pytest.raises(ValueError, match="nothing to send"):
        anthropic_tool_results(BatchOutcome(results=[]))


def test_a_call_without_a_usable_name_is_read_as_the_empty_name() -> None:
    # The empty name is no tool's, so the batch answers that call alone as an unknown tool.
    assert responses_tool_calls({"output": [{"type": "function_call", "call_id": "x"}]}) == [
        ToolCall("x", "", "{}")
    ]
    message = {"content": [{"type": "tool_use", "id": "u", "name": 7, "input": {}}]}
    assert anthropic_tool_calls(message) == [ToolCall("u", "", "{}")]


CHAT_EXPECTED = (
    "a Chat Completions assistant message or a one-choice completion (an SDK object or a dict)"
)


@pytest.mark.parametrize(
    ("read", "given", "message"),
    [
        (
            openai_tool_calls,
            "I am not a completion",
            f"openai_tool_calls() takes {CHAT_EXPECTED}, got str",
        ),
        (openai_tool_calls, None, f"openai_tool_calls() takes {CHAT_EXPECTED}, got NoneType"),
        (
            openai_assistant_message,
            42,
            f"openai_assistant_message() takes {CHAT_EXPECTED}, got int",
        ),
        (
            responses_tool_calls,
            42,
            "responses_tool_calls() takes a Responses API response (an SDK object or a dict) "
            "or its output list, got int",
        ),
        (
            anthropic_tool_calls,
            [{"type": "tool_use", "id": "u", "name": "n", "input": {}}],
            "anthropic_tool_calls() takes a Messages API response message (an SDK object or a "
            "dict), got list",
        ),
    ],
    ids=["chat-str", "chat-none", "assistant-int", "responses-int", "anthropic-list"],
)
def test_a_response_of_the_wrong_kind_is_refused_not_read_as_no_calls(
    read: Any, given: Any, message: str
) -> None:
    with pytest.raises(TypeError) as refused:
        read(given)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("read", "given", "message"),
    [
        (
            anthropic_tool_calls,
            {"content": [5, "x"]},
            "message.content[0] must be a content block (an SDK object or a dict), got int",
        ),
        (
            anthropic_tool_calls,
            {"content": [{"type": "text", "text": "hi"}, "x"]},
            "message.content[1] must be a content block (an SDK object or a dict), got str",
        ),
        (
            responses_tool_calls,
            {"output": [None]},
            "response.output[0] must be an output item (an SDK object or a dict), got NoneType",
        ),
        (
            openai_tool_calls,
            {"tool_calls": ["call_1"]},
            "message.tool_calls[0] must be a tool call (an SDK object or a dict), got str",
        ),
        (
            openai_tool_calls,
            {"choices": [7]},
            "completion.choices[0] must be a choice (an SDK object or a dict), got int",
        ),
        (
            openai_tool_calls,
            {"choices": [{"index": 0}]},
            "completion.choices[0].message must be an assistant message (an SDK object or a "
            "dict), got NoneType",
        ),
    ],
    ids=[
        "anthropic-int",
        "anthropic-str",
        "responses-none",
        "chat-tool-call-str",
        "chat-choice-int",
        "chat-choice-without-message",
    ],
)
def test_an_entry_of_the_wrong_kind_is_refused_naming_where(
    read: Any, given: Any, message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        read(given)
    assert str(refused.value) == message


def test_responses_read_from_objects_with_the_sdk_attributes_are_still_read() -> None:
    block = types.SimpleNamespace(type="tool_use", id="u1", name="weather", input={"city": "Oslo"})
    assert anthropic_tool_calls(types.SimpleNamespace(content=[block])) == [  # type: ignore[arg-type]
        ToolCall("u1", "weather", '{"city":"Oslo"}')
    ]
    item = types.SimpleNamespace(type="function_call", call_id="c1", name="f", arguments="{}")
    response: Any = types.SimpleNamespace(output=[item])
    assert responses_tool_calls(response) == [ToolCall("c1", "f", "{}")]
    answer: Any = types.SimpleNamespace(tool_calls=None, content="no calls")
    assert openai_tool_calls(answer) == []


@pytest.mark.parametrize(
    "write",
    [openai_tool_messages, responses_tool_outputs, anthropic_tool_results],
    ids=lambda write: write.__name__,
)
@pytest.mark.parametrize("given", [None, [], {"results": []}], ids=["None", "list", "dict"])
def test_writing_results_takes_only_a_batch_outcome(write: Any, given: Any) -> None:
    with pytest.raises(TypeError) as refused:
        write(given)
    assert str(refused.value) == (
        f"{write.__name__}() takes the BatchOutcome that system.execute_batch(...) returns, "
        f"got {type(given).__name__}"
    )


def test_prompts_map_names_the_provider_refuses_and_carry_the_sections() -> None:
    from dsh_tools import ToolOutput, define_tool

    with ToolSystem.start(ToolsConfig(mode="native")) as system:
        for name in ("time.now", "weather"):
            system.tools.register(
                define_tool(
                    name=name,
                    description=f"The {name} tool.",
                    parameters={},
                    output=ToolOutput(
                        schema={"type": "string"},
                        render=lambda args, value: [{"type": "text", "text": value}],
                    ),
                    execute=lambda args, ctx: "ok",
                )
            )
        system.tools.section("style", 2, "Be brief.")
        system.tools.section("intro", 1, "You help.")
        assembled = system.assemble_prompt()
    chat = openai_prompt(assembled, strict=True)
    assert chat.system == "You help.\n\nBe brief."
    assert [tool["function"]["name"] for tool in chat.tools] == ["time_now", "weather"]
    assert chat.tools[0]["function"].get("strict") is True
    assert chat.names.to_registry("time_now") == "time.now"
    assert [tool["name"] for tool in responses_prompt(assembled).tools] == ["time_now", "weather"]
    claude = anthropic_prompt(assembled, cache_control={"type": "ephemeral"})
    assert [tool["name"] for tool in claude.tools] == ["time_now", "weather"]
    assert claude.tools[-1].get("cache_control") == {"type": "ephemeral"}
    with pytest.raises(TypeError, match="AssembledPrompt"):
        openai_prompt(assembled.tools)  # type: ignore[arg-type]


def test_the_adapters_import_and_work_without_any_provider_sdk() -> None:
    program = (
        "import sys\n"
        "sys.modules['openai'] = None\n"
        "sys.modules['anthropic'] = None\n"
        "from dsh_tools.integrations import anthropic_tool_calls\n"
        "msg = {'content': [{'type': 'tool_use', 'id': 'u', 'name': 'n', 'input': {}}]}\n"
        "print(anthropic_tool_calls(msg)[0].arguments)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "{}\n"


def test_the_openai_prompts_take_more_tools_than_openai_for_a_server_that_does() -> None:
    with ToolSystem.start(ToolsConfig(mode="native"), code_runtime=None) as system:
        for number in range(130):
            system.tools.register(
                define_tool(
                    name=f"tool_{number}",
                    description="One of many.",
                    parameters={},
                    output=ToolOutput(
                        schema={"type": "string"},
                        render=lambda args, value: [{"type": "text", "text": value}],
                    ),
                    execute=lambda args, ctx: "done",
                )
            )
        prompt = system.assemble_prompt()
        with pytest.raises(ValueError, match="at most 128 tools in one request, got 130"):
            openai_prompt(prompt)
        assert len(openai_prompt(prompt, max_tools=None).tools) == 130
        assert len(responses_prompt(prompt, max_tools=None).tools) == 130
        with pytest.raises(ValueError, match="max_tools=None for a server that takes more"):
            responses_prompt(prompt)


TRICKY_IDS = [
    "a",
    "",
    None,
    "(no id)",
    "a (repeat 2)",
    "a (repeat 3)",
    "(no id) (repeat 2)",
    "a (as sent)",
    "(no id) (as sent)",
    "a (repeat 2) (as sent)",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TRICKY_IDS), min_size=1, max_size=6))
def test_every_call_runs_under_an_id_of_its_own_and_is_answered_under_the_models(
    ids: list[str | None],
) -> None:
    # Whatever ids a server gives (repeated, missing, or reading as the adapters' own), each
    # call runs once under an id no other call of the turn has, and its answer and its repeat
    # in the assistant message carry the id the model gave it (the empty one for none).
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ids
        ],
    }
    calls = openai_tool_calls(message)
    assert len({call.call_id for call in calls}) == len(ids)
    answers = openai_tool_messages(
        outcome(*(success(call.call_id, [{"type": "text", "text": "ok"}]) for call in calls))
    )
    sent = [i or "" for i in ids]
    assert [answer["tool_call_id"] for answer in answers] == sent  # type: ignore[typeddict-item]
    echoed = openai_assistant_message(message)["tool_calls"]
    assert [call["id"] for call in echoed] == sent


def test_a_name_map_of_one_str_or_of_nothing_is_refused_naming_what_it_takes() -> None:
    # A str iterates: ToolNameMap("time.now") was a map of the names "t", "i", "m", ...
    with pytest.raises(TypeError, match=r"^ToolNameMap takes a list of tool names, got str: "):
        ToolNameMap("time.now")
    with pytest.raises(TypeError, match=r"^ToolNameMap takes a list of tool names, got NoneType"):
        ToolNameMap(None)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"^ToolNameMap.from_schemas takes the list of tool schemas .* got NoneType$",
    ):
        ToolNameMap.from_schemas(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^tools\[0\] must be a tool schema dict, got str$"):
        ToolNameMap.from_schemas(["time.now"])  # type: ignore[list-item]


def test_an_export_of_nothing_names_what_it_takes() -> None:
    with pytest.raises(
        TypeError, match=r"^OpenAI export takes a list of tool schemas .*, got NoneType$"
    ):
        to_openai_tools(None)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"^Anthropic export takes a list of tool schemas .*, got NoneType$"
    ):
        to_anthropic_tools(None)  # type: ignore[arg-type]


def test_a_chat_tool_call_of_a_kind_the_sdk_does_not_know_is_repeated_and_answered_not_run() -> (
    None
):
    # A compatible server's own kind of tool call: no registry tool runs it, the assistant
    # message repeats it as it came, and a tool message answers it, or the next request fails.
    chat = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "k1", "type": "browser", "browser": {"url": "https://x.test"}}],
    }
    assert openai_tool_calls(chat) == []
    assert openai_assistant_message(chat, other_calls=True)["tool_calls"] == chat["tool_calls"]
    assert openai_tool_messages(BatchOutcome(results=[]), message=chat) == [
        {
            "role": "tool",
            "tool_call_id": "k1",
            "content": 'Error: a tool call of type "browser" is not one this tool registry '
            "runs; nothing was run",
        }
    ]
    # Without the response, the adapters answer the batch's results alone, as before.
    assert openai_tool_messages(BatchOutcome(results=[])) == []
    output = [{"type": "custom_tool_call", "call_id": "c1", "name": "sql", "input": "SELECT 1"}]
    assert responses_tool_outputs(BatchOutcome(results=[]), response=output) == [
        {
            "type": "custom_tool_call_output",
            "call_id": "c1",
            "output": 'Error: custom tool "sql" is not one this tool registry runs; nothing was '
            "run",
        }
    ]
