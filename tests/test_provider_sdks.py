"""Whole model turns through the real ``openai`` and ``anthropic`` clients and the adapters.

Each client talks to a recording server on 127.0.0.1 that answers like the provider: a first
response with text and four parallel calls (a plain tool, a tool whose registry name the
provider cannot take, an image-returning tool, a failing tool), a second with one more call,
a third with the final text. The tests read what the SDK sent back in the follow-up requests.
This module is also checked by ``mypy --strict``: the adapters' outputs go into the SDKs' typed
request parameters with no cast.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from provider_server import Event, RecordingServer, recording_server

from dsh_tools import (
    Accept,
    Block,
    ExecuteBatch,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)
from dsh_tools.integrations import (
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
)

# A real 1x1 PNG, so the image that reaches the provider is a valid one.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478"
        "9c6360f8cfc0f01f0005000201e22a5f9f0000000049454e44ae426082"
    )
).decode()
PREFERENCE = "The user prefers answers in Celsius."
RULES = "Answer in one short sentence."


def two_chat_turns(system: ToolSystem, server: RecordingServer, question: str) -> list[ToolCall]:
    """Two Chat Completions turns through the real client, as a harness's loop makes them: the
    server's first answer is read into calls, which run as a batch, and their tool messages go
    back in the second request. Returns the calls."""
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": question}]
    completion = client.chat.completions.create(
        model="gpt-test", messages=messages, tools=prompt.tools
    )
    calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
    messages.append(openai_assistant_message(completion))
    messages.extend(openai_tool_messages(system.execute_batch(ExecuteBatch(calls=calls))))
    client.chat.completions.create(model="gpt-test", messages=messages, tools=prompt.tools)
    return calls


def _fail(args: Any, ctx: Any) -> Any:
    raise RuntimeError("the disk is on fire")


async def _remember_preference(exec: Any, result: Any, next: Any) -> Any:
    decision = await next()
    if exec.name == "snapshot":
        context = {"content": [{"type": "text", "text": PREFERENCE}], "source": {"kind": "test"}}
        return Accept(additional_contexts=[context])
    return decision


def weather_tool(text: ToolOutput) -> ToolDefinition:
    """A concurrency-safe tool answering with a made-up temperature of its ``city``."""
    return define_tool(
        name="weather",
        description="Temperature of a city.",
        parameters={"city": {"type": "string", "required": True}},
        output=text,
        execute=lambda args, ctx: f"{args['city']}: {len(args['city'])} C",
        is_concurrency_safe=lambda args: True,
    )


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(ToolsConfig(mode="native")) as started:
        text = ToolOutput(
            schema={"type": "string"},
            render=lambda args, value: [{"type": "text", "text": value}],
        )
        started.tools.register(weather_tool(text))
        started.tools.register(
            define_tool(
                name="time.now",
                description="The time.",
                parameters={},
                output=text,
                execute=lambda args, ctx: "12:00",
            )
        )
        started.tools.register(
            define_tool(
                name="snapshot",
                description="A picture of the screen.",
                parameters={},
                output=ToolOutput(
                    schema={"type": "string"},
                    render=lambda args, value: [
                        {"type": "image", "data": value, "mimeType": "image/png"},
                        {"type": "text", "text": "a 1x1 screen"},
                    ],
                ),
                execute=lambda args, ctx: PIXEL,
            )
        )
        started.tools.register(
            define_tool(
                name="broken",
                description="Always fails.",
                parameters={},
                output=text,
                execute=_fail,
            )
        )
        started.tools.on_post_execute(_remember_preference)
        started.tools.section("rules", 10, RULES)
        yield started


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server() as started:
        yield started


def openai_client(server: RecordingServer) -> openai.OpenAI:
    """The real SDK client, talking to ``server`` and never retrying."""
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="test", max_retries=0)


def anthropic_client(server: RecordingServer) -> anthropic.Anthropic:
    """The real SDK client, talking to ``server`` and never retrying."""
    return anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)


FIRST_CALLS = [
    ("call_w", "weather", '{"city": "Oslo"}'),
    ("call_t", "time_now", "{}"),
    ("call_s", "snapshot", "{}"),
    ("call_b", "broken", "{}"),
]
SECOND_CALL = ("call_l", "weather", '{"city": "Lima"}')
IMAGE_URL = f"data:image/png;base64,{PIXEL}"


# --- OpenAI Chat Completions -------------------------------------------------------------------


def chat_completion(text: str | None, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def test_two_chat_completions_turns_send_tool_messages_images_and_contexts(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/chat/completions"
    server.answer(path, chat_completion("Let me look.", FIRST_CALLS))
    server.answer(path, chat_completion(None, [SECOND_CALL]))
    server.answer(path, chat_completion("Oslo is colder than Lima.", []))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": "Compare Oslo and Lima."},
    ]
    answer = None
    for _ in range(3):
        completion = client.chat.completions.create(
            model="gpt-test", messages=messages, tools=prompt.tools
        )
        calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
        if not calls:
            answer = completion.choices[0].message.content
            break
        messages.append(openai_assistant_message(completion.choices[0].message))
        outcome = system.execute_batch(ExecuteBatch(calls=calls))
        messages.extend(openai_tool_messages(outcome))
    assert answer == "Oslo is colder than Lima."

    first, second, third = server.bodies(path)
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "broken",
        "snapshot",
        "time_now",
        "weather",
    ]
    assert first["messages"][0] == {"role": "system", "content": RULES}
    sent = second["messages"][2:]
    assert sent[0]["role"] == "assistant"
    assert sent[0]["content"] == "Let me look."
    assert [call["function"]["name"] for call in sent[0]["tool_calls"]] == [
        "weather",
        "time_now",
        "snapshot",
        "broken",
    ]
    assert sent[1:5] == [
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C"},
        {"role": "tool", "tool_call_id": "call_t", "content": "12:00"},
        {
            "role": "tool",
            "tool_call_id": "call_s",
            "content": "[image image-1 (image/png) is attached to the next user message]\n"
            "a 1x1 screen",
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "Error: the disk is on fire"},
    ]
    assert sent[5] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attachments of tool call call_s:"},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            {"type": "text", "text": PREFERENCE},
        ],
    }
    assert len(sent) == 6
    assert third["messages"][len(second["messages"]) + 1 :] == [
        {"role": "tool", "tool_call_id": "call_l", "content": "Lima: 4 C"}
    ]


# --- OpenAI Responses API ----------------------------------------------------------------------


def response(
    response_id: str, text: str | None, calls: list[tuple[str, str, str]]
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    output.extend(
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": i,
            "name": n,
            "arguments": a,
            "status": "completed",
        }
        for i, n, a in calls
    )
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1767225600,
        "model": "gpt-test",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def test_two_responses_api_turns_send_function_call_outputs_with_input_images(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/responses"
    server.answer(path, response("resp_1", "Let me look.", FIRST_CALLS))
    server.answer(path, response("resp_2", None, [SECOND_CALL]))
    server.answer(path, response("resp_3", "Oslo is colder than Lima.", []))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    reply = client.responses.create(
        model="gpt-test", instructions=prompt.system, tools=prompt.tools, input="Compare."
    )
    for _ in range(2):
        calls = responses_tool_calls(reply, names=prompt.names)
        outcome = system.execute_batch(ExecuteBatch(calls=calls))
        items: list[ResponseInputItemParam] = responses_tool_outputs(outcome)
        reply = client.responses.create(
            model="gpt-test",
            instructions=prompt.system,
            tools=prompt.tools,
            previous_response_id=reply.id,
            input=items,
        )
    assert reply.output_text == "Oslo is colder than Lima."
    assert responses_tool_calls(reply, names=prompt.names) == []

    first, second, third = server.bodies(path)
    assert first["instructions"] == RULES
    assert [(tool["type"], tool["name"]) for tool in first["tools"]] == [
        ("function", "broken"),
        ("function", "snapshot"),
        ("function", "time_now"),
        ("function", "weather"),
    ]
    assert second["previous_response_id"] == "resp_1"
    assert second["input"] == [
        {"type": "function_call_output", "call_id": "call_w", "output": "Oslo: 4 C"},
        {"type": "function_call_output", "call_id": "call_t", "output": "12:00"},
        {
            "type": "function_call_output",
            "call_id": "call_s",
            "output": [
                {"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"},
                {"type": "input_text", "text": "a 1x1 screen"},
            ],
        },
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": "Error: the disk is on fire",
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": PREFERENCE}],
        },
    ]
    assert third["previous_response_id"] == "resp_2"
    assert third["input"] == [
        {"type": "function_call_output", "call_id": "call_l", "output": "Lima: 4 C"}
    ]


# --- Anthropic Messages ------------------------------------------------------------------------


def anthropic_message(
    message_id: str, text: str | None, calls: list[tuple[str, str, str]]
) -> dict[str, Any]:
    import json

    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_two_anthropic_turns_send_tool_results_with_errors_images_and_contexts(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/messages"
    server.answer(path, anthropic_message("msg_1", "Let me look.", FIRST_CALLS))
    server.answer(path, anthropic_message("msg_2", None, [SECOND_CALL]))
    server.answer(path, anthropic_message("msg_3", "Oslo is colder than Lima.", []))
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    messages: list[MessageParam] = [{"role": "user", "content": "Compare Oslo and Lima."}]
    final = None
    for _ in range(3):
        reply = client.messages.create(
            model="claude-test",
            max_tokens=1024,
            system=prompt.system,
            tools=prompt.tools,
            messages=messages,
        )
        calls = anthropic_tool_calls(reply, names=prompt.names)
        if not calls:
            final = reply
            break
        messages.append({"role": "assistant", "content": reply.content})
        messages.append(anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls))))
    assert final is not None and final.stop_reason == "end_turn"

    first, second, third = server.bodies(path)
    assert first["system"] == RULES
    assert [tool["name"] for tool in first["tools"]] == [
        "broken",
        "snapshot",
        "time_now",
        "weather",
    ]
    assert first["tools"][3]["input_schema"]["properties"] == {"city": {"type": "string"}}
    assistant, results = second["messages"][1:]
    assert [block["type"] for block in assistant["content"]] == ["text"] + ["tool_use"] * 4
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_w",
                "is_error": False,
                "content": [{"type": "text", "text": "Oslo: 4 C"}],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_t",
                "is_error": False,
                "content": [{"type": "text", "text": "12:00"}],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_s",
                "is_error": False,
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
                    },
                    {"type": "text", "text": "a 1x1 screen"},
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_b",
                "is_error": True,
                "content": [{"type": "text", "text": "Error: the disk is on fire"}],
            },
            {"type": "text", "text": PREFERENCE},
        ],
    }
    assert third["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_l",
                "is_error": False,
                "content": [{"type": "text", "text": "Lima: 4 C"}],
            }
        ],
    }


def test_an_anthropic_turn_runs_code_mode_programs_beside_a_native_call(
    server: RecordingServer,
) -> None:
    import json

    program = (
        'temps = await asyncio.gather(*[tools.weather({"city": c}) for c in ["Oslo", "Lima"]])\n'
        "print(len(temps))\n"
        "try:\n"
        "    await tools.broken({})\n"
        "except ToolCallError as error:\n"
        '    print("broken:", error.message)\n'
        "return temps"
    )
    calls = [
        ("toolu_w", "weather", '{"city": "Oslo"}'),
        ("toolu_c", "run_code", json.dumps({"code": program, "description": "Both cities"})),
        ("toolu_x", "run_code", json.dumps({"code": "1 / 0", "description": "Divide"})),
    ]
    path = "/v1/messages"
    server.answer(path, anthropic_message("msg_1", None, calls))
    server.answer(path, anthropic_message("msg_2", "Oslo 4 C, Lima 4 C.", []))
    client = anthropic_client(server)
    text = ToolOutput(
        schema={"type": "string"}, render=lambda args, value: [{"type": "text", "text": value}]
    )
    with ToolSystem.start(ToolsConfig(mode="both")) as system:
        system.tools.register(weather_tool(text))
        system.tools.register(
            define_tool(
                name="broken", description="Fails.", parameters={}, output=text, execute=_fail
            )
        )
        prompt = anthropic_prompt(system.assemble_prompt())
        messages: list[MessageParam] = [{"role": "user", "content": "Compare Oslo and Lima."}]
        reply = client.messages.create(
            model="claude-test",
            max_tokens=1024,
            system=prompt.system,
            tools=prompt.tools,
            messages=messages,
        )
        messages.append({"role": "assistant", "content": reply.content})
        outcome = system.execute_batch(
            ExecuteBatch(calls=anthropic_tool_calls(reply, names=prompt.names))
        )
        messages.append(anthropic_tool_results(outcome))
        client.messages.create(
            model="claude-test",
            max_tokens=1024,
            system=prompt.system,
            tools=prompt.tools,
            messages=messages,
        )

    first, second = server.bodies(path)
    assert "run_code" in [tool["name"] for tool in first["tools"]]
    assert "async def weather(" in first["system"]  # the Code Mode SDK is in the system prompt
    results = second["messages"][2]["content"]
    assert [block["tool_use_id"] for block in results] == ["toolu_w", "toolu_c", "toolu_x"]
    assert [block["is_error"] for block in results] == [False, False, True]
    assert results[0]["content"] == [{"type": "text", "text": "Oslo: 4 C"}]
    assert results[1]["content"] == [
        {
            "type": "text",
            "text": '2\nbroken: the disk is on fire\n[\n  "Oslo: 4 C",\n  "Lima: 4 C"\n]',
        }
    ]
    (failure,) = results[2]["content"]
    assert failure["text"].startswith("Error: code run failed (exception):")
    assert failure["text"].endswith("ZeroDivisionError: division by zero")


def test_anthropic_tool_use_input_the_sdk_decodes_as_nan_fails_that_call_alone(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The SDK's HTTP client decodes with Python's json, which reads NaN, -Infinity and an
    # escaped lone surrogate; none of them may reach the tool as something else.
    path = "/v1/messages"
    calls = [
        ("call_w", "weather", '{"city": "Oslo"}'),
        ("call_n", "weather", '{"city": NaN}'),
        ("call_i", "weather", '{"city": -Infinity}'),
        ("call_u", "weather", '{"city": "\\ud800"}'),
    ]
    server.answer(path, anthropic_message("msg_1", None, calls))
    client = anthropic_client(server)
    reply = client.messages.create(
        model="claude-test",
        max_tokens=1024,
        messages=[{"role": "user", "content": "Weather?"}],
    )
    read = anthropic_tool_calls(reply)
    assert [call.arguments for call in read] == [
        '{"city":"Oslo"}',
        '{"city":NaN}',
        '{"city":-1e400}',
        '{"city":"\\ud800"}',
    ]
    results: Any = anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=read)))["content"]
    assert [
        (block["tool_use_id"], block.get("is_error"), block.get("content"))
        for block in results
        if block["type"] == "tool_result"
    ] == [
        ("call_w", False, [{"type": "text", "text": "Oslo: 4 C"}]),
        (
            "call_n",
            True,
            [
                {
                    "type": "text",
                    "text": "Error: invalid arguments: arguments are not valid JSON: "
                    "unexpected character 'N' at line 1, column 9",
                }
            ],
        ),
        (
            "call_i",
            True,
            [
                {
                    "type": "text",
                    "text": "Error: invalid arguments: arguments are not lossless JSON: "
                    "arguments.city is float (-inf)",
                }
            ],
        ),
        (
            "call_u",
            True,
            [
                {
                    "type": "text",
                    "text": "Error: invalid arguments: arguments are not lossless JSON: "
                    "arguments.city is str (lone surrogate)",
                }
            ],
        ),
    ]


def test_a_chat_call_whose_arguments_text_holds_a_lone_surrogate_is_answered(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The SDK reads a \ud800 escape in the response as a code point that UTF-8 cannot
    # encode; the batch refuses those arguments, but the assistant message repeated them as
    # they were, and the SDK raised UnicodeEncodeError on the request that carried the answer.
    path = "/v1/chat/completions"
    calls = [("call_w", "weather", '{"city": "Oslo"}'), ("call_u", "weather", '{"city": "\ud800"}')]
    server.answer(path, chat_completion(None, calls))
    server.answer(path, chat_completion("Done.", []))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather?"}]
    for _ in range(2):
        completion = client.chat.completions.create(
            model="gpt-test", messages=messages, tools=prompt.tools
        )
        message = completion.choices[0].message
        read = openai_tool_calls(message, names=prompt.names)
        if not read:
            break
        messages.append(openai_assistant_message(message))
        messages.extend(openai_tool_messages(system.execute_batch(ExecuteBatch(calls=read))))

    assistant, *answers = server.bodies(path)[1]["messages"][1:]
    assert [call["function"]["arguments"] for call in assistant["tool_calls"]] == [
        '{"city": "Oslo"}',
        '{"city": "\\ud800"}',
    ]
    assert answers == [
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C"},
        {
            "role": "tool",
            "tool_call_id": "call_u",
            "content": "Error: invalid arguments: arguments text is not valid Unicode: a lone "
            "surrogate U+D800 at line 1, column 11",
        },
    ]


@pytest.mark.parametrize(
    ("call", "refusal"),
    [
        (
            ("call_\udc80", "weather", '{"city": "Oslo"}'),
            "response.output[1] has a call id holding a lone surrogate (U+DC80 at offset 5)",
        ),
        (
            ("call_w", "weather\ud800", '{"city": "Oslo"}'),
            "response.output[1] has a function name holding a lone surrogate (U+D800 at offset 7)",
        ),
    ],
)
def test_a_responses_call_whose_id_or_name_holds_a_lone_surrogate_is_refused_before_it_runs(
    server: RecordingServer, call: tuple[str, str, str], refusal: str
) -> None:
    # The next request repeats the call's id (and an unknown tool's error, its name), which the
    # SDK cannot encode: the tool ran, and its result could never be sent.
    path = "/v1/responses"
    server.answer(path, response("resp_1", "Let me look.", [call]))
    reply = openai_client(server).responses.create(model="gpt-test", input="Weather?")
    with pytest.raises(ValueError) as refused:
        responses_tool_calls(reply)
    assert (
        str(refused.value) == f"{refusal}, which no request can carry back: send the request again"
    )


def _open_listed(args: Any, ctx: Any) -> Any:
    # A file name that is not UTF-8, as os.listdir() gives it on a UTF-8 system.
    name = b"/data/r\xe9sum\xe9.txt".decode("utf-8", "surrogateescape")
    raise FileNotFoundError(f"cannot open {name}")


def test_a_failure_whose_message_holds_a_lone_surrogate_reaches_the_model(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The failure's text was the exception's message as it was, and the SDK raised
    # UnicodeEncodeError on the request that carried it: the turn could never be answered.
    system.tools.register(
        define_tool(
            name="open_listed",
            description="Opens a listed file.",
            parameters={},
            output=ToolOutput(
                schema={"type": "string"},
                render=lambda args, value: [{"type": "text", "text": value}],
            ),
            execute=_open_listed,
        )
    )
    path = "/v1/chat/completions"
    server.answer(path, chat_completion(None, [("call_o", "open_listed", "{}")]))
    server.answer(path, chat_completion("It is gone.", []))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Open it."}]
    completion = client.chat.completions.create(
        model="gpt-test", messages=messages, tools=prompt.tools
    )
    message = completion.choices[0].message
    read = openai_tool_calls(message, names=prompt.names)
    messages.append(openai_assistant_message(message))
    messages.extend(openai_tool_messages(system.execute_batch(ExecuteBatch(calls=read))))
    client.chat.completions.create(model="gpt-test", messages=messages, tools=prompt.tools)

    assert server.bodies(path)[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_o",
        "content": "Error: cannot open /data/r\ufffdsum\ufffd.txt",
    }


# --- streamed responses ------------------------------------------------------------------------
# Each SDK's stream manager assembles the final response from events in which a call's
# arguments arrive in pieces; the adapters read that final object like any other.

STREAMED_CALLS = [
    ("call_w", "weather", ['{"ci', 'ty": "Os', 'lo"}']),
    ("call_t", "time_now", ["{}"]),
]
ANSWERED = [("call_w", "Oslo: 4 C"), ("call_t", "12:00")]


def test_a_streamed_chat_completion_is_read_and_answered(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/chat/completions"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": "gpt-test",
            "choices": [choice],
        }

    events: list[Event] = [(None, chunk({"role": "assistant", "content": "Let me look."}))]
    for index, (call_id, name, pieces) in enumerate(STREAMED_CALLS):
        start = {"index": index, "id": call_id, "type": "function"}
        events.append(
            (None, chunk({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]}))
        )
        events.extend(
            (None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            for piece in pieces
        )
    events += [(None, chunk({}, "tool_calls")), (None, "[DONE]")]
    server.stream(path, events)
    server.answer(path, chat_completion("Done.", []))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather?"}]
    with client.chat.completions.stream(
        model="gpt-test", messages=messages, tools=prompt.tools
    ) as stream:
        final = stream.get_final_completion()
    calls = openai_tool_calls(final.choices[0].message, names=prompt.names)
    messages.append(openai_assistant_message(final.choices[0].message))
    messages.extend(openai_tool_messages(system.execute_batch(ExecuteBatch(calls=calls))))
    client.chat.completions.create(model="gpt-test", messages=messages, tools=prompt.tools)

    sent = server.bodies(path)[1]["messages"][1:]
    assert sent[0] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            },
            {
                "id": "call_t",
                "type": "function",
                "function": {"name": "time_now", "arguments": "{}"},
            },
        ],
    }
    assert sent[1:] == [
        {"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in ANSWERED
    ]


def anthropic_stream(
    message_id: str, calls: list[tuple[str, str, list[str]]], stop_reason: str
) -> list[Event]:
    """The events of a streamed message of ``tool_use`` blocks whose input arrives in the
    given pieces, ending with ``stop_reason``."""
    start = {**anthropic_message(message_id, None, []), "stop_reason": None}
    events: list[Event] = [
        ("message_start", {"type": "message_start", "message": start}),
    ]
    for index, (call_id, name, pieces) in enumerate(calls):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        events.extend(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
            for piece in pieces
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return [
        *events,
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_a_streamed_anthropic_message_is_read_and_answered(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/messages"
    events = anthropic_stream("msg_s", STREAMED_CALLS, "tool_use")
    server.stream(path, events)
    server.answer(path, anthropic_message("msg_e", "Done.", []))
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    messages: list[MessageParam] = [{"role": "user", "content": "Weather?"}]
    with client.messages.stream(
        model="claude-test", max_tokens=1024, tools=prompt.tools, messages=messages
    ) as stream:
        final = stream.get_final_message()
    calls = anthropic_tool_calls(final, names=prompt.names)
    messages.append({"role": "assistant", "content": final.content})
    messages.append(anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls))))
    client.messages.create(
        model="claude-test", max_tokens=1024, tools=prompt.tools, messages=messages
    )

    assistant, results = server.bodies(path)[1]["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_w", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_t", "name": "time_now", "input": {}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": call_id,
                "is_error": False,
                "content": [{"type": "text", "text": text}],
            }
            for call_id, text in ANSWERED
        ],
    }


def test_an_anthropic_tool_use_cut_off_by_max_tokens_is_refused_not_run(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The SDK reads a streamed input cut off mid-way as the members that were complete, so
    # the cut-off call read as {"city": "Lima"}: a call the model never finished would run.
    path = "/v1/messages"
    cut = [
        ("call_w", "weather", ['{"city": "Oslo"}']),
        ("call_l", "weather", ['{"city": "Lima", "da']),
    ]
    server.stream(path, anthropic_stream("msg_cut", cut, "max_tokens"))
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    with client.messages.stream(
        model="claude-test",
        max_tokens=20,
        tools=prompt.tools,
        messages=[{"role": "user", "content": "Weather?"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.content[1].type == "tool_use" and final.content[1].input == {"city": "Lima"}

    with pytest.raises(ValueError) as refused:
        anthropic_tool_calls(final, names=prompt.names)
    assert str(refused.value) == (
        'message.content[1] is a tool_use block (id "call_l") that the response was cut off in '
        '(stop_reason "max_tokens"): its input is incomplete, so no call of the response is '
        "run; send the request again with a larger max_tokens"
    )


def test_an_anthropic_response_cut_off_after_its_last_tool_use_runs_its_calls(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/messages"
    message = anthropic_message("msg_1", None, [("call_w", "weather", '{"city": "Oslo"}')])
    server.answer(
        path,
        {
            **message,
            "content": [*message["content"], {"type": "text", "text": "Now I will"}],
            "stop_reason": "max_tokens",
        },
    )
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    reply = client.messages.create(
        model="claude-test",
        max_tokens=20,
        tools=prompt.tools,
        messages=[{"role": "user", "content": "Weather?"}],
    )
    calls = anthropic_tool_calls(reply, names=prompt.names)
    assert [(call.call_id, call.arguments) for call in calls] == [("call_w", '{"city":"Oslo"}')]


def test_a_streamed_responses_api_response_is_read_and_answered(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/responses"
    done = response("resp_s", None, [(i, n, "".join(p)) for i, n, p in STREAMED_CALLS])
    events: list[Event] = []

    def event(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    event("response.created", response={**done, "status": "in_progress", "output": []})
    for index, item in enumerate(done["output"]):
        event("response.output_item.added", output_index=index, item={**item, "arguments": ""})
        for piece in STREAMED_CALLS[index][2]:
            event(
                "response.function_call_arguments.delta",
                output_index=index,
                item_id=item["id"],
                delta=piece,
            )
        event(
            "response.function_call_arguments.done",
            output_index=index,
            item_id=item["id"],
            name=item["name"],
            arguments=item["arguments"],
        )
        event("response.output_item.done", output_index=index, item=item)
    event("response.completed", response=done)
    server.stream(path, events)
    server.answer(path, response("resp_e", "Done.", []))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    with client.responses.stream(model="gpt-test", tools=prompt.tools, input="Weather?") as stream:
        final = stream.get_final_response()
    calls = responses_tool_calls(final, names=prompt.names)
    items = responses_tool_outputs(system.execute_batch(ExecuteBatch(calls=calls)))
    client.responses.create(
        model="gpt-test", tools=prompt.tools, previous_response_id=final.id, input=items
    )

    assert server.bodies(path)[1]["input"] == [
        {"type": "function_call_output", "call_id": call_id, "output": text}
        for call_id, text in ANSWERED
    ]


# --- a turn that repeats a call id ---------------------------------------------------------------

REPEATED_CALLS = [
    ("call_0", "weather", '{"city": "Oslo"}'),
    ("call_0", "weather", '{"city": "Lima"}'),
    ("call_0", "time_now", "{}"),
]


def test_a_chat_turn_that_repeats_a_call_id_answers_every_call_under_that_id(
    system: ToolSystem, server: RecordingServer
) -> None:
    # An OpenAI-compatible server that gives every call of a turn the same id made the whole
    # turn fail: ExecuteBatch refused the calls (call_id 'call_0' appears twice in the batch).
    path = "/v1/chat/completions"
    server.answer(path, chat_completion(None, REPEATED_CALLS))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Oslo, Lima?"}]
    completion = client.chat.completions.create(
        model="gpt-test", messages=messages, tools=prompt.tools
    )
    calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    assert openai_tool_messages(outcome) == [
        {"role": "tool", "tool_call_id": "call_0", "content": "Oslo: 4 C"},
        {"role": "tool", "tool_call_id": "call_0", "content": "Lima: 4 C"},
        {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
    ]
    assert [call["id"] for call in openai_assistant_message(completion)["tool_calls"]] == [
        "call_0"
    ] * 3


def test_a_responses_turn_that_repeats_a_call_id_answers_every_call_under_that_id(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/responses"
    server.answer(path, response("resp_1", None, REPEATED_CALLS))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    reply = client.responses.create(model="gpt-test", tools=prompt.tools, input="Oslo, Lima?")
    calls = responses_tool_calls(reply, names=prompt.names)
    items = responses_tool_outputs(system.execute_batch(ExecuteBatch(calls=calls)))
    assert items == [
        {"type": "function_call_output", "call_id": "call_0", "output": "Oslo: 4 C"},
        {"type": "function_call_output", "call_id": "call_0", "output": "Lima: 4 C"},
        {"type": "function_call_output", "call_id": "call_0", "output": "12:00"},
    ]


def test_an_anthropic_turn_that_repeats_a_tool_use_id_answers_every_call_under_that_id(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/messages"
    server.answer(path, anthropic_message("msg_1", None, REPEATED_CALLS))
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    message = client.messages.create(
        model="claude-test",
        max_tokens=100,
        tools=prompt.tools,
        messages=[{"role": "user", "content": "Oslo, Lima?"}],
    )
    calls = anthropic_tool_calls(message, names=prompt.names)
    reply = anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls)))
    blocks: list[Any] = list(reply["content"])
    assert [(block["tool_use_id"], block["content"][0]["text"]) for block in blocks] == [
        ("call_0", "Oslo: 4 C"),
        ("call_0", "Lima: 4 C"),
        ("call_0", "12:00"),
    ]


def test_a_chat_turn_with_calls_without_an_id_runs_them_and_answers_them_without_one(
    system: ToolSystem, server: RecordingServer
) -> None:
    # A compatible server that sends a call with an empty id, or none at all, made the whole
    # turn fail (message.tool_calls[0] has no call id).
    path = "/v1/chat/completions"
    turn = chat_completion(None, [("", "weather", '{"city": "Oslo"}'), *REPEATED_CALLS[1:]])
    turn["choices"][0]["message"]["tool_calls"][1].pop("id")
    server.answer(path, turn)
    server.answer(path, chat_completion("Done.", []))
    calls = two_chat_turns(system, server, "Oslo, Lima?")
    assert [call.call_id for call in calls] == ["(no id)", "(no id) (repeat 2)", "call_0"]

    assistant, *answers = server.bodies(path)[1]["messages"][1:]
    assert [call["id"] for call in assistant["tool_calls"]] == ["", "", "call_0"]
    assert answers == [
        {"role": "tool", "tool_call_id": "", "content": "Oslo: 4 C"},
        {"role": "tool", "tool_call_id": "", "content": "Lima: 4 C"},
        {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
    ]


def test_a_chat_call_whose_arguments_repeat_a_key_fails_alone(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The second "city" silently won: the tool ran for Lima, whatever read "Oslo" first.
    path = "/v1/chat/completions"
    turn = [
        ("call_1", "weather", '{"city": "Oslo", "city": "Lima"}'),
        ("call_2", "weather", '{"city": "Rome"}'),
    ]
    server.answer(path, chat_completion(None, turn))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    completion = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Weather?"}], tools=prompt.tools
    )
    calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
    assert openai_tool_messages(system.execute_batch(ExecuteBatch(calls=calls))) == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": 'Error: invalid arguments: arguments repeat the key "city" at line 1, '
            "column 18: JSON leaves which of its values counts undefined, so send each key once",
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "Rome: 4 C"},
    ]


def test_a_call_without_an_id_runs_under_none_the_turn_holds(system: ToolSystem) -> None:
    message = chat_completion(
        None, [("(no id)", "time_now", "{}"), ("", "time_now", "{}"), ("", "time_now", "{}")]
    )
    calls = openai_tool_calls(message, names=openai_prompt(system.assemble_prompt()).names)
    assert [call.call_id for call in calls] == [
        "(no id) (as sent)",
        "(no id)",
        "(no id) (repeat 2)",
    ]
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    assert [type(result).__name__ for result in outcome.results] == ["ToolExecutionSuccess"] * 3


def test_a_responses_turn_whose_ids_read_as_the_adapters_own_answers_each_call_under_its_id(
    system: ToolSystem, server: RecordingServer
) -> None:
    # A server may name its calls anything: one named "call_1 (repeat 2)" beside "call_1" was
    # answered as "call_1" (twice, the other never), and one named "(no id)" with the empty
    # id, so the API refused the next request for a call without an output.
    path = "/v1/responses"
    turn = [
        ("call_1", "weather", '{"city": "Oslo"}'),
        ("call_1 (repeat 2)", "weather", '{"city": "Lima"}'),
        ("call_1", "weather", '{"city": "Rome"}'),
        ("(no id)", "time_now", "{}"),
        ("(no id) (as sent)", "time_now", "{}"),
    ]
    server.answer(path, response("resp_1", None, turn))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    reply = client.responses.create(model="gpt-test", tools=prompt.tools, input="Weather?")
    calls = responses_tool_calls(reply, names=prompt.names)
    assert len({call.call_id for call in calls}) == 5
    items = responses_tool_outputs(system.execute_batch(ExecuteBatch(calls=calls)))
    assert items == [
        {"type": "function_call_output", "call_id": "call_1", "output": "Oslo: 4 C"},
        {"type": "function_call_output", "call_id": "call_1 (repeat 2)", "output": "Lima: 4 C"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Rome: 4 C"},
        {"type": "function_call_output", "call_id": "(no id)", "output": "12:00"},
        {"type": "function_call_output", "call_id": "(no id) (as sent)", "output": "12:00"},
    ]


def test_a_chat_turn_whose_ids_read_as_the_adapters_own_is_repeated_and_answered_as_sent(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/chat/completions"
    turn = [
        ("x", "time_now", "{}"),
        ("x (repeat 2)", "time_now", "{}"),
        ("(no id)", "time_now", "{}"),
    ]
    server.answer(path, chat_completion(None, turn))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Time?"}]
    completion = client.chat.completions.create(
        model="gpt-test", messages=messages, tools=prompt.tools
    )
    calls = openai_tool_calls(completion.choices[0].message, names=prompt.names)
    answers = openai_tool_messages(system.execute_batch(ExecuteBatch(calls=calls)))
    echoed = openai_assistant_message(completion)["tool_calls"]
    sent = ["x", "x (repeat 2)", "(no id)"]
    assert [call["id"] for call in echoed] == sent
    assert [answer["tool_call_id"] for answer in answers] == sent  # type: ignore[typeddict-item]


def test_a_repeated_call_id_runs_under_an_id_of_its_own_and_is_answered_under_the_models(
    system: ToolSystem,
) -> None:
    # An id that only looks like a repeat's is answered as itself.
    message = chat_completion(
        None,
        [
            ("a", "weather", '{"city": "Oslo"}'),
            ("b (repeat 2)", "time_now", "{}"),
            ("a", "weather", '{"city": "Rome"}'),
        ],
    )
    calls = openai_tool_calls(message, names=openai_prompt(system.assemble_prompt()).names)
    assert [call.call_id for call in calls] == ["a", "b (repeat 2) (as sent)", "a (repeat 2)"]
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    messages = openai_tool_messages(outcome)
    assert [(m["tool_call_id"], m["content"]) for m in messages] == [  # type: ignore[typeddict-item]
        ("a", "Oslo: 4 C"),
        ("b (repeat 2)", "12:00"),
        ("a", "Rome: 4 C"),
    ]


def test_each_repeat_of_a_call_id_takes_the_next_number_no_call_of_the_turn_holds(
    system: ToolSystem,
) -> None:
    # Each id keeps its own count (the search for a free number began at 2 for every
    # repeat: a turn of n calls under one id cost n * n / 2 tries).
    turn = [("a", "time_now", "{}")] * 3 + [("a (repeat 3)", "time_now", "{}")]
    turn += [("a", "time_now", "{}")] * 2 + [("b", "time_now", "{}")] * 2
    message = chat_completion(None, turn)
    calls = openai_tool_calls(message, names=openai_prompt(system.assemble_prompt()).names)
    assert [call.call_id for call in calls] == [
        "a",
        "a (repeat 2)",
        "a (repeat 3)",
        "a (repeat 3) (as sent)",
        "a (repeat 4)",
        "a (repeat 5)",
        "b",
        "b (repeat 2)",
    ]


def test_an_anthropic_failed_result_sends_only_text_and_never_none(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The API takes only text in a tool_result whose is_error is true, and refuses one without
    # content; a hook's Block([]) and a failure showing a screenshot were sent as they were,
    # and the whole request was refused.
    async def block(exec: Any, result: Any, next: Any) -> Any:
        if exec.call_id == "call_e":
            return Block([])
        if exec.call_id == "call_s":
            return Block([{"type": "text", "text": "Error: the screen is locked"}, *result.content])
        return await next()

    system.tools.on_post_execute(block, prepend=True)
    path = "/v1/messages"
    calls = [("call_e", "weather", '{"city": "Oslo"}'), ("call_s", "snapshot", "{}")]
    server.answer(path, anthropic_message("msg_1", None, calls))
    server.answer(path, anthropic_message("msg_2", "The screen is locked.", []))
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    messages: list[MessageParam] = [{"role": "user", "content": "Look at the screen."}]
    reply = client.messages.create(
        model="claude-test", max_tokens=100, tools=prompt.tools, messages=messages
    )
    calls_made = anthropic_tool_calls(reply, names=prompt.names)
    messages.append({"role": "assistant", "content": reply.content})
    messages.append(anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls_made))))
    client.messages.create(
        model="claude-test", max_tokens=100, tools=prompt.tools, messages=messages
    )
    sent = server.bodies(path)[1]["messages"][-1]["content"]
    assert sent == [
        {
            "type": "tool_result",
            "tool_use_id": "call_e",
            "is_error": True,
            "content": [{"type": "text", "text": "Error: the call failed without a message"}],
        },
        {
            "type": "tool_result",
            "tool_use_id": "call_s",
            "is_error": True,
            "content": [
                {"type": "text", "text": "Error: the screen is locked"},
                {"type": "text", "text": "[image image-2 (image/png) follows the tool results]"},
                {"type": "text", "text": "a 1x1 screen"},
            ],
        },
        {"type": "text", "text": "Attachments of tool call call_s:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
    ]


def test_a_chat_call_without_a_usable_name_fails_alone_as_an_unknown_tool(
    system: ToolSystem, server: RecordingServer
) -> None:
    # A call with an empty name (or a name that is no string) failed the whole turn in
    # openai_tool_calls, so no call ran and the model never learnt what was wrong, while a
    # call of an unknown name is answered as an error the model can correct.
    path = "/v1/chat/completions"
    turn = chat_completion(
        None,
        [
            ("call_e", "", "{}"),
            ("call_n", "placeholder", "{}"),
            ("call_w", "weather", '{"city": "Oslo"}'),
        ],
    )
    turn["choices"][0]["message"]["tool_calls"][1]["function"]["name"] = None
    server.answer(path, turn)
    server.answer(path, chat_completion("Oslo: 4 C.", []))
    two_chat_turns(system, server, "Oslo?")

    assistant, *answers = server.bodies(path)[1]["messages"][1:]
    assert [call["function"]["name"] for call in assistant["tool_calls"]] == ["", "", "weather"]
    assert answers == [
        {"role": "tool", "tool_call_id": "call_e", "content": 'Error: unknown tool ""'},
        {"role": "tool", "tool_call_id": "call_n", "content": 'Error: unknown tool ""'},
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C"},
    ]


def test_an_anthropic_tool_use_without_a_usable_name_fails_alone_as_an_unknown_tool(
    system: ToolSystem, server: RecordingServer
) -> None:
    path = "/v1/messages"
    turn = anthropic_message(
        "msg_1", None, [("toolu_e", "", "{}"), ("toolu_w", "weather", '{"city": "Lima"}')]
    )
    server.answer(path, turn)
    client = anthropic_client(server)
    prompt = anthropic_prompt(system.assemble_prompt())
    reply = client.messages.create(
        model="claude-test",
        max_tokens=100,
        tools=prompt.tools,
        messages=[{"role": "user", "content": "Lima?"}],
    )
    calls = anthropic_tool_calls(reply, names=prompt.names)
    answer = anthropic_tool_results(system.execute_batch(ExecuteBatch(calls=calls)))
    blocks: list[Any] = list(answer["content"])
    assert [(b["tool_use_id"], b["is_error"], b["content"][0]["text"]) for b in blocks] == [
        ("toolu_e", True, 'Error: unknown tool ""'),
        ("toolu_w", False, "Lima: 4 C"),
    ]


OPENAI_TEXT_LIMIT = 10_485_760
"""The most characters OpenAI takes in one text of a request (a tool message, an output)."""


def register_dump(system: ToolSystem) -> str:
    """A tool ``dump`` whose text is longer than OpenAI takes in one string; returns the text."""
    long_text = "".join(f"line {n:07}\n" for n in range(OPENAI_TEXT_LIMIT // 13 + 1000))
    system.tools.register(
        define_tool(
            name="dump",
            description="A very long log.",
            parameters={},
            output=ToolOutput(
                schema={"type": "string"},
                render=lambda args, value: [{"type": "text", "text": value}],
            ),
            execute=lambda args, ctx: long_text,
        )
    )
    return long_text


def test_a_chat_tool_message_longer_than_openai_takes_is_shortened_with_a_note(
    system: ToolSystem, server: RecordingServer
) -> None:
    # OpenAI refuses a whole request whose tool message holds more than 10,485,760
    # characters, so the conversation could not go on; the text was sent as it was.
    long_text = register_dump(system)
    path = "/v1/chat/completions"
    server.answer(path, chat_completion(None, [("call_d", "dump", "{}"), SECOND_CALL]))
    server.answer(path, chat_completion("The log is long.", []))
    two_chat_turns(system, server, "The log?")

    dumped, weather = server.bodies(path)[1]["messages"][2:]
    content = dumped["content"]
    note = (
        f"[Output truncated: {len(long_text)} characters in total; OpenAI Chat Completions "
        f"takes at most {OPENAI_TEXT_LIMIT} characters in one text]"
    )
    assert len(content) <= OPENAI_TEXT_LIMIT
    assert content.endswith("\n…\n" + note)
    assert long_text.startswith(content[: -len("\n…\n" + note)])
    assert weather == {"role": "tool", "tool_call_id": "call_l", "content": "Lima: 4 C"}


def test_a_responses_output_longer_than_openai_takes_is_shortened_with_a_note(
    system: ToolSystem, server: RecordingServer
) -> None:
    long_text = register_dump(system)
    path = "/v1/responses"
    server.answer(path, response("resp_1", None, [("call_d", "dump", "{}")]))
    server.answer(path, response("resp_2", "The log is long.", []))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    reply = client.responses.create(model="gpt-test", tools=prompt.tools, input="The log?")
    calls = responses_tool_calls(reply, names=prompt.names)
    items = responses_tool_outputs(system.execute_batch(ExecuteBatch(calls=calls)))
    client.responses.create(
        model="gpt-test", tools=prompt.tools, previous_response_id=reply.id, input=items
    )

    [output] = server.bodies(path)[1]["input"]
    text = output["output"]
    assert len(text) <= OPENAI_TEXT_LIMIT
    assert text.endswith(
        f"[Output truncated: {len(long_text)} characters in total; the OpenAI Responses API "
        f"takes at most {OPENAI_TEXT_LIMIT} characters in one text]"
    )
    assert long_text.startswith(text.split("\n…\n")[0])


# --- calls of tools the registry does not run --------------------------------------------------

NOT_RUN_ERROR = 'Error: custom tool "sql" is not one this tool registry runs; nothing was run'


def tool_calls_run(system: ToolSystem) -> list[str]:
    """The call ids the session log saw start, in order."""
    return [event.data["call_id"] for event in system.session.events if event.type == "tool/call"]


def unanswered_responses_calls(previous: list[Any], following: list[Any]) -> list[str]:
    """The call ids of ``previous`` (a response's output) that ``following`` (the next
    request's input) answers not exactly once with an output of the call's own kind, as the
    Responses API requires of a request that continues a response."""
    outputs = {
        "function_call": "function_call_output",
        "custom_tool_call": "custom_tool_call_output",
    }
    return [
        item["call_id"]
        for item in previous
        if item["type"] in outputs
        and [(o["type"], o["call_id"]) for o in following if o.get("call_id") == item["call_id"]]
        != [(outputs[item["type"]], item["call_id"])]
    ]


def test_a_responses_custom_tool_call_is_answered_with_an_error_beside_the_function_call(
    system: ToolSystem, server: RecordingServer, logs: Any
) -> None:
    # A harness that declares a custom tool beside the registry's: the model calls both. The
    # custom call is run by nothing and answered with a custom_tool_call_output saying so;
    # left unanswered, the API refuses the next request.
    path = "/v1/responses"
    first = response("resp_1", None, [("call_w", "weather", '{"city": "Oslo"}')])
    first["output"].insert(
        0,
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_c",
            "name": "sql",
            "input": "SELECT 1",
            "status": "completed",
        },
    )
    server.answer(path, first)
    server.answer(path, response("resp_2", "Oslo is cold.", []))
    client = openai_client(server)
    prompt = responses_prompt(system.assemble_prompt())
    reply = client.responses.create(model="gpt-test", tools=prompt.tools, input="Oslo?")
    calls = responses_tool_calls(reply, names=prompt.names)
    assert calls == [ToolCall("call_w", "weather", '{"city": "Oslo"}')]
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    items: list[ResponseInputItemParam] = responses_tool_outputs(outcome, response=reply)
    client.responses.create(
        model="gpt-test", tools=prompt.tools, previous_response_id=reply.id, input=items
    )

    _, second = server.bodies(path)
    assert second["input"] == [
        {"type": "function_call_output", "call_id": "call_w", "output": "Oslo: 4 C"},
        {"type": "custom_tool_call_output", "call_id": "call_c", "output": NOT_RUN_ERROR},
    ]
    assert unanswered_responses_calls(first["output"], second["input"]) == []
    assert tool_calls_run(system) == ["call_w"]
    [line] = [e for e in logs.entries if e["event"].startswith("OpenAI tool call not run")]
    assert (line["call_id"], line["type"], line["name"]) == ("call_c", "custom_tool_call", "sql")


def chat_turn_beside_a_custom_call(
    system: ToolSystem, server: RecordingServer, custom: dict[str, Any]
) -> tuple[list[ToolCall], dict[str, Any]]:
    """A Chat turn whose response holds ``custom`` before a ``weather`` function call, answered
    through the adapters with the custom call repeated (``other_calls=True``) and answered
    (``message=``): the calls read from the response and the body of the request that follows."""
    path = "/v1/chat/completions"
    first = chat_completion(None, [("call_w", "weather", '{"city": "Oslo"}')])
    first["choices"][0]["message"]["tool_calls"].insert(0, custom)
    server.answer(path, first)
    server.answer(path, chat_completion("Oslo is cold.", []))
    client = openai_client(server)
    prompt = openai_prompt(system.assemble_prompt())
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Oslo?"}]
    completion = client.chat.completions.create(
        model="gpt-test", messages=messages, tools=prompt.tools
    )
    message = completion.choices[0].message
    calls = openai_tool_calls(message, names=prompt.names)
    messages.append(openai_assistant_message(message, other_calls=True))
    outcome = system.execute_batch(ExecuteBatch(calls=calls))
    messages.extend(openai_tool_messages(outcome, message=message))
    client.chat.completions.create(model="gpt-test", messages=messages, tools=prompt.tools)
    _, second = server.bodies(path)
    return calls, second


def test_a_chat_custom_tool_call_is_repeated_and_answered_with_an_error_beside_the_function_call(
    system: ToolSystem, server: RecordingServer
) -> None:
    custom = {"id": "call_c", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}}
    calls, second = chat_turn_beside_a_custom_call(system, server, custom)
    assert calls == [ToolCall("call_w", "weather", '{"city": "Oslo"}')]
    assistant, *answers = second["messages"][1:]
    assert assistant["tool_calls"] == [
        custom,
        {
            "id": "call_w",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
        },
    ]
    # As the API requires: every call of the assistant message answered by one tool message.
    assert sorted((m["role"], m["tool_call_id"]) for m in answers) == [
        ("tool", "call_c"),
        ("tool", "call_w"),
    ]
    assert answers == [
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C"},
        {"role": "tool", "tool_call_id": "call_c", "content": NOT_RUN_ERROR},
    ]
    assert tool_calls_run(system) == ["call_w"]


def unanswered_chat_calls(messages: list[Any]) -> list[str]:
    """The ids of the calls each assistant message of a Chat request repeats that the tool
    messages right after it answer not exactly once, and the ids those answer that it does
    not repeat: the API refuses a request holding either."""
    wrong: list[str] = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        repeated = [call["id"] for call in message.get("tool_calls", [])]
        answered: list[str] = []
        for following in messages[index + 1 :]:
            if following["role"] != "tool":
                break
            answered.append(following["tool_call_id"])
        wrong += [i for i in repeated if answered.count(i) != 1]
        wrong += [i for i in answered if i not in repeated]
    return wrong


def test_a_chat_harness_that_does_not_pass_the_message_still_sends_a_request_the_api_takes(
    system: ToolSystem, server: RecordingServer
) -> None:
    # A harness written before openai_tool_messages took message=: the custom call beside the
    # function call is run by nothing and, as before, not repeated either, so the follow-up
    # request answers every call it repeats.
    path = "/v1/chat/completions"
    first = chat_completion(None, [("call_w", "weather", '{"city": "Oslo"}')])
    custom = {"id": "call_c", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}}
    first["choices"][0]["message"]["tool_calls"].insert(0, custom)
    server.answer(path, first)
    server.answer(path, chat_completion("Oslo is cold.", []))
    calls = two_chat_turns(system, server, "Oslo?")
    assert calls == [ToolCall("call_w", "weather", '{"city": "Oslo"}')]
    _, second = server.bodies(path)
    assert unanswered_chat_calls(second["messages"]) == []
    assert [call["id"] for call in second["messages"][1]["tool_calls"]] == ["call_w"]


@pytest.mark.parametrize(
    ("call_id", "name", "refusal"),
    [
        ("call_\udc80", "sql", "response.output[0] has a call id holding a lone surrogate"),
        ("call_c", "sql\ud800", "response.output[0] has a tool name holding a lone surrogate"),
    ],
)
def test_a_responses_custom_call_that_cannot_be_answered_is_refused_before_anything_runs(
    server: RecordingServer, call_id: str, name: str, refusal: str
) -> None:
    # Its answer repeats the id (and the error the name), which the SDK cannot encode: refused
    # only by responses_tool_outputs, the function call beside it had run by then, its result
    # never to be sent.
    path = "/v1/responses"
    first = response("resp_1", None, [("call_w", "weather", '{"city": "Oslo"}')])
    custom = {"type": "custom_tool_call", "id": "ctc_1", "call_id": call_id, "name": name}
    first["output"].insert(0, {**custom, "input": "SELECT 1", "status": "completed"})
    server.answer(path, first)
    reply = openai_client(server).responses.create(model="gpt-test", input="Oslo?")
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}") as refused:
        responses_tool_calls(reply)
    assert str(refused.value).endswith("which no request can carry back: send the request again")


def test_a_chat_custom_call_that_cannot_be_answered_is_refused_before_anything_runs(
    server: RecordingServer,
) -> None:
    path = "/v1/chat/completions"
    first = chat_completion(None, [("call_w", "weather", '{"city": "Oslo"}')])
    custom = {"id": "call_\udc80", "type": "custom", "custom": {"name": "sql", "input": "1"}}
    first["choices"][0]["message"]["tool_calls"].insert(0, custom)
    server.answer(path, first)
    completion = openai_client(server).chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Oslo?"}]
    )
    with pytest.raises(ValueError, match=r"^message.tool_calls\[0\] has a call id holding a lone"):
        openai_tool_calls(completion.choices[0].message)


def test_a_chat_custom_call_whose_input_holds_a_lone_surrogate_is_repeated_so_it_can_be_sent(
    system: ToolSystem, server: RecordingServer
) -> None:
    # The SDK reads a \ud800 escape as a code point UTF-8 cannot encode: repeated as it came,
    # the custom call's input made the request that answers the turn raise
    # UnicodeEncodeError. It is written back as that escape, as a function call's arguments.
    custom = {"id": "call_c", "type": "custom", "custom": {"name": "sql", "input": "x\ud800"}}
    _, second = chat_turn_beside_a_custom_call(system, server, custom)
    [repeated, _] = second["messages"][1]["tool_calls"]
    assert repeated["custom"] == {"name": "sql", "input": "x\\ud800"}
    assert unanswered_chat_calls(second["messages"]) == []
