"""What a run can make the host hold: bounded whatever the program writes."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from typing import Any

from code_mode_support import code_system, dispatch_events, run_code

from dsh_tools import DEFAULT, ToolOutput, define_tool
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunFailure,
    CodeRunRequest,
    CodeRuntimeConfig,
    SubprocessCodeRuntime,
)
from dsh_tools.codebridge._frame_screen import (
    MAX_CALL_TOKENS,
    FrameRejected,
    worker_frame_screen,
)
from dsh_tools.codebridge._frames import (
    SKIP_FRAME,
    Call,
    Done,
    FrameReader,
    Log,
    OutputLimit,
    Reply,
    encode_frame,
    worker_frame_decoder,
)
from dsh_tools.codebridge._inflight import (
    BYTES_PER_TOKEN,
    CALL_BYTES,
    MAX_INFLIGHT_ARGUMENT_BYTES,
)
from dsh_tools.codebridge._ledger import json_size_floor, over_room, tokens_json_size
from dsh_tools.codebridge._run_pipes import UNREAD_REPLY_BYTES, ChannelWriter
from dsh_tools.codebridge._tokens import ArrayMarker, ObjectMarker, tokenize


def resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_partial_250_mb_frame_is_not_held_in_memory() -> None:
    reader = FrameReader(worker_frame_decoder(), 256 * 2**20)
    before = resident_mb()
    chunk = b"\x00" * 2**20
    assert reader.feed((250 * 2**20).to_bytes(4, "big")) == []
    for _ in range(200):
        assert reader.feed(chunk) == []
    grown = resident_mb() - before
    reader.close()
    assert grown < 30, f"the host grew by {grown:.0f} MB for a partial frame"


def test_a_complete_spilled_frame_still_decodes() -> None:
    import msgspec

    from dsh_tools.codebridge._frames import Log, encode_frame

    reader = FrameReader(worker_frame_decoder(), 64 * 2**20)
    data = bytes(encode_frame(Log("x" * (6 * 2**20)))) + bytes(encode_frame(Log("after")))
    frames = []
    for offset in range(0, len(data), 100_000):
        frames += reader.feed(data[offset : offset + 100_000])
    assert [len(frame.text) for frame in frames] == [6 * 2**20, 5]
    assert msgspec.structs.asdict(frames[1]) == {"text": "after"}


def test_a_gigabyte_of_stdout_ends_as_output_limit_and_the_host_stays_small() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_output_bytes=2**20))
    program = """
import os
block = b"y" * 2**20
for _ in range(1024):
    os.write(1, block)
"""
    try:
        asyncio.run(runtime.run(CodeRunRequest("return 1", [])))
        before = resident_mb()
        result = asyncio.run(runtime.run(CodeRunRequest(program, [BindingNamespace("tools", {})])))
        grown = resident_mb() - before
    finally:
        runtime.close()
    assert result.error is not None
    assert result.error.kind == "output-limit"
    assert isinstance(result.error, CodeRunFailure)
    assert sum(len(entry) for entry in result.logs) <= 2**20
    assert grown < 40, f"the host grew by {grown:.0f} MB for 1 GB of stdout"


def test_arguments_of_calls_in_flight_are_capped() -> None:
    async def slow(args: Any) -> int:
        await asyncio.sleep(5)
        return len(args["data"])

    async def quick(args: Any) -> int:
        return len(args["data"])

    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=30000))
    tools = [BindingNamespace("tools", {"slow": slow, "quick": quick})]
    one_by_one = """
big = 'x' * (1 << 20)
total = 0
for _ in range(100):  # 100 MiB in all, one MiB in flight at a time
    total += await tools.quick({'data': big})
return total
"""
    all_at_once = """
big = 'x' * (1 << 20)
return await asyncio.gather(*[tools.slow({'data': big}) for _ in range(100)])
"""
    try:
        assert asyncio.run(runtime.run(CodeRunRequest(one_by_one, tools))).value == 100 * 2**20
        result = asyncio.run(runtime.run(CodeRunRequest(all_at_once, tools)))
        assert result.error is not None and result.error.kind == "frame-limit", result
        assert f"more than {MAX_INFLIGHT_ARGUMENT_BYTES} bytes of arguments" in result.error.message
        assert result.error.message.startswith("a call of tools.slow (")  # the one that tipped
        assert asyncio.run(runtime.run(CodeRunRequest(one_by_one, tools))).value == 100 * 2**20
    finally:
        runtime.close()


def test_many_calls_of_empty_arguments_in_flight_are_capped_too() -> None:
    # Each call in flight costs the host a task (or a place in a tool system's pipeline), a
    # few kilobytes, whatever its arguments: counted as its 64 bytes of arguments alone, a
    # million calls of `{}` fitted the cap and held gigabytes of the host.
    async def slow(args: Any) -> int:
        await asyncio.sleep(30)
        return 1

    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=30000))
    tools = [BindingNamespace("tools", {"slow": slow})]
    flood = """
calls = [asyncio.ensure_future(tools.slow({})) for _ in range(20_000)]
await asyncio.sleep(2)
return len(calls)
"""
    try:
        result = asyncio.run(runtime.run(CodeRunRequest(flood, tools)))
        assert result.error is not None and result.error.kind == "frame-limit", result
        assert f"more than {MAX_INFLIGHT_ARGUMENT_BYTES} bytes of arguments" in result.error.message
        most = MAX_INFLIGHT_ARGUMENT_BYTES // (CALL_BYTES + BYTES_PER_TOKEN)  # 16,131
        assert f"({most} calls unanswered" in result.error.message
        few = "return len(await asyncio.gather(*[tools.quick({}) for _ in range(1000)]))"
        quick = [BindingNamespace("tools", {"quick": lambda args: 1})]
        assert asyncio.run(runtime.run(CodeRunRequest(few, quick))).value == 1000
    finally:
        runtime.close()


def test_values_that_fit_the_output_cap_pass_the_done_screen_whatever_their_shape() -> None:
    # The shapes that encode largest per byte of JSON: empty objects and arrays, floats.
    for cap in (4, 5, 9, 100, 4096):
        screen = worker_frame_screen(cap)
        units: list[Any] = [{}, [], 0.0, [[]], {"": {}}]
        for unit in units:
            items: list[Any] = []
            while True:
                tokens = tokenize([*items, unit])
                assert tokens is not None
                if tokens_json_size(tokens, cap) > cap:
                    break
                items.append(unit)
            for candidate in (unit, items):
                tokens = tokenize(candidate)
                assert tokens is not None
                if tokens_json_size(tokens, cap) <= cap:
                    body = bytes(encode_frame(Done(tokens)))[8:]
                    assert screen(body) is None, (cap, candidate)


def test_the_output_screen_settles_what_no_value_within_the_cap_could_be() -> None:
    screen = worker_frame_screen(100)
    many = tokenize(list(range(60)))  # 61 tokens: more than 100 bytes of JSON can hold
    assert many is not None
    assert isinstance(screen(bytes(encode_frame(Done(many)))[8:]), OutputLimit)
    assert isinstance(screen(bytes(encode_frame(Log("x" * 200)))[8:]), OutputLimit)
    assert screen(bytes(encode_frame(Log("x" * 90)))[8:]) is None
    assert screen(b"\x92\xa5Other" + b"\xc0" * 200) is SKIP_FRAME


def forged_call(count: int) -> str:
    return f"""
import os
count = {count}
# A Call frame by hand (msgpack): ['Call', 1, 'tools', 'quick', [None] * count].
body = bytearray(b"\\x95\\xa4Call\\x01\\xa5tools\\xa5quick\\xdd" + count.to_bytes(4, "big"))
body += b"\\xc0" * count
os.write(4, len(body).to_bytes(8, "big"))
view = memoryview(body)
while view:
    view = view[os.write(4, view[: 1 << 20]) :]
await asyncio.sleep(30)
"""


def test_the_json_size_floor_never_exceeds_the_size() -> None:
    # What a completion is held against before its value is built: a lower bound, exact for
    # the costliest shape to build.
    values: list[Any] = [
        0,
        "",
        "é\n",
        [],
        {},
        [[[]]],
        {"": {"": []}},
        [1.5, True, None, "abc", -7],
        {"a": [1, {"bb": None}], "c": "x"},
        [{f"k{n}": [n, {}]} for n in range(50)],
        [{}] * 1000,
    ]
    for candidate in values:
        tokens = tokenize(candidate)
        assert tokens is not None
        assert json_size_floor(tokens) <= tokens_json_size(tokens, 10**9), candidate
    empty_objects = tokenize([{}] * 1000)
    assert empty_objects is not None
    assert json_size_floor(empty_objects) == tokens_json_size(empty_objects, 10**9)


def test_a_completion_far_from_the_room_is_judged_by_its_length_as_the_floor_would() -> None:
    # over_room answers from the token count alone when that settles it (the floor lies
    # between 2n - 1 and 5n for n tokens), and must agree with the floor everywhere.
    values: list[Any] = [
        [0] * 300,
        [{}] * 300,
        [[]] * 300,
        {f"key{n}": "v" * n for n in range(60)},
        [{f"k{n}": [n, {}]} for n in range(50)],
        ["é" * 40] * 20,
    ]
    for candidate in values:
        tokens = tokenize(candidate)
        assert tokens is not None
        floor = json_size_floor(tokens)
        for room in range(0, 6 * len(tokens) + 2):
            assert over_room(tokens, room) is (floor > room), (candidate, room)


def forged_done_of_empty_objects(count: int) -> str:
    return f"""
import os
count = {count}
# A Done frame by hand (msgpack): ['Done', [['array', count], ['object', []] * count], None].
body = bytearray(b"\\x93\\xa4Done\\xdd" + (count + 1).to_bytes(4, "big"))
body += b"\\x92\\xa5array\\xce" + count.to_bytes(4, "big")
body += b"\\x92\\xa6object\\x90" * count
body += b"\\xc0"
os.write(4, len(body).to_bytes(8, "big"))
view = memoryview(body)
while view:
    view = view[os.write(4, view[: 1 << 20]) :]
await asyncio.sleep(30)
"""


def test_a_forged_completion_over_the_cap_is_not_built_into_a_value() -> None:
    # As many empty objects as the screen lets a completion hold (one value per two bytes of
    # the cap), three JSON bytes each: over the cap. Their tokens cost the host about 105 bytes
    # each; building the value as well cost about 73 more, past the documented 60 bytes per
    # byte of max_output_bytes.
    cap = 10**6
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_output_bytes=cap, max_wall_ms=30000))
    tools = [BindingNamespace("tools", {})]
    try:
        asyncio.run(runtime.run(CodeRunRequest("return 1", [])))
        tracemalloc.start()
        try:
            program = forged_done_of_empty_objects(cap // 2)
            result = asyncio.run(runtime.run(CodeRunRequest(program, tools)))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        runtime.close()
    assert result.error is not None and result.error.kind == "output-limit", result
    assert peak < 70 * cap, f"the host held {peak / cap:.0f} bytes per byte of the cap"


def test_a_forged_call_of_millions_of_tiny_values_fails_undecoded() -> None:
    calls: list[Any] = []

    async def quick(args: Any) -> int:
        calls.append(args)
        return 0

    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=30000))
    tools = [BindingNamespace("tools", {"quick": quick})]
    try:
        asyncio.run(runtime.run(CodeRunRequest("return 1", [])))
        before = resident_mb()
        result = asyncio.run(runtime.run(CodeRunRequest(forged_call(24 << 20), tools)))
        grown = resident_mb() - before
    finally:
        runtime.close()
    assert result.error is not None and result.error.kind == "frame-limit", result
    assert f"({MAX_CALL_TOKENS} values)" in result.error.message
    assert calls == []
    assert grown < 100, f"the host grew by {grown:.0f} MB for a forged call"


def test_a_ten_megabyte_string_argument_still_reaches_its_binding() -> None:
    written: list[str] = []

    async def write_file(args: Any) -> int:
        written.append(args["content"])
        return len(args["content"])

    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=30000))
    tools = [BindingNamespace("tools", {"write_file": write_file})]
    program = """
content = 'é' * (10 * 10**6)
return await tools.write_file({'path': 'big.txt', 'content': content})
"""
    try:
        result = asyncio.run(runtime.run(CodeRunRequest(program, tools)))
    finally:
        runtime.close()
    assert result.error is None, result
    assert result.value == 10 * 10**6
    assert written == ["é" * (10 * 10**6)]


def test_a_long_run_lets_go_of_each_calls_arguments_once_it_is_committed() -> None:
    # 300 sequential calls of 256 KiB each: the host may hold the call in flight and a few
    # more, never the run's history (the pool once kept its last 256 committed calls, and the
    # session log every call's arguments in full).
    live: list[int] = []

    def store(args: Any, ctx: Any) -> str:
        live.append(tracemalloc.get_traced_memory()[0])
        return "ok"

    tool = define_tool(
        name="store",
        description="Store a blob.",
        parameters={"v": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=store,
    )
    program = "for i in range(300):\n    await tools.store({'v': 'x' * 262144 + str(i)})\n"
    tracemalloc.start()
    try:
        with code_system(DEFAULT, mode="code", tools=[tool]) as system:
            result = system.execute(run_code(program))
            logged = dispatch_events(system)
    finally:
        tracemalloc.stop()
    assert not result.is_error, result.content
    assert len(live) == 300 and len(logged) == 300
    grown = (max(live[10:]) - live[10]) / 2**20
    assert grown < 16, f"the host held {grown:.0f} MB more after 300 calls of 256 KiB"
    assert all(type(event["arguments"]) is str for event in logged)


def test_small_replies_a_program_leaves_unread_cost_the_host_about_their_size() -> None:
    # Nobody reads the pipe and the loop never runs: every reply stays queued until the
    # writer reports the overflow. Held one object per reply, 200-byte replies cost more
    # than twice their size.
    read_end, write_end = os.pipe()
    loop = asyncio.new_event_loop()
    overflowed: list[str] = []
    writer = ChannelWriter(loop, overflowed.append)
    writer.attach(write_end)
    frame = encode_frame(Reply(1, False, message="x" * 180))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        while not overflowed:
            writer.send(frame)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        writer.close()
        loop.close()
        os.close(read_end)
        os.close(write_end)
    assert overflowed == [
        f"the program left more than {UNREAD_REPLY_BYTES} bytes of binding replies unread"
    ]
    assert held < 1.2 * UNREAD_REPLY_BYTES, f"{held / 2**20:.0f} MB held for 64 MiB of replies"


def _call_body(args: list[Any]) -> bytes:
    return bytes(encode_frame(Call(1, "tools", "echo", args)))[8:]


def test_object_keys_count_against_a_call_frames_values_and_are_not_all_read() -> None:
    # ['object', [22 million keys]] is one top-level token: decoded, it held 2 GB of the host.
    screen = worker_frame_screen(64 * 2**20)
    one_object = _call_body([ObjectMarker(["k"] * (3 * MAX_CALL_TOKENS)), *[None] * 3])
    rejected = screen(one_object)
    assert isinstance(rejected, FrameRejected) and rejected.kind == "frame-limit"
    assert "object keys included" in rejected.message
    assert "(the arguments of tools.echo)" in rejected.message
    # Many objects, each under the cap, together over it.
    per_object = MAX_CALL_TOKENS // 100
    objects: list[Any] = []
    for _ in range(101):
        objects += [ObjectMarker([f"k{n}" for n in range(per_object)]), *[None] * per_object]
    many = [ArrayMarker(101), *objects]
    assert isinstance(screen(_call_body(many)), FrameRejected)


def test_large_call_frames_within_the_cap_are_decoded() -> None:
    screen = worker_frame_screen(64 * 2**20)
    for args in (
        tokenize({"text": "x" * (8 * 2**20)}),  # one large string
        tokenize(list(range(MAX_CALL_TOKENS - 1))),  # as many values as a call may have
        tokenize({f"key{n}": n for n in range(MAX_CALL_TOKENS // 2 - 1)}),
    ):
        assert args is not None
        assert screen(_call_body(args)) is None


def test_object_keys_count_against_the_values_a_completion_may_have() -> None:
    screen = worker_frame_screen(4096)  # at most 2,049 values
    keys = ObjectMarker([str(n) for n in range(3000)])  # two top-level tokens, 3,000 keys
    assert isinstance(screen(bytes(encode_frame(Done([keys, None])))[8:]), OutputLimit)
    fits = tokenize({str(n): None for n in range(100)})
    assert fits is not None
    assert screen(bytes(encode_frame(Done(fits)))[8:]) is None
