"""The code runtime's wire pieces without a process: tokens, ledger, frames, compilation."""

from __future__ import annotations

import asyncio
import math
import os
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_tools.actors import FrozenDict, FrozenList
from dsh_tools.codebridge._frames import (
    Call,
    Done,
    DoneError,
    FrameReader,
    Log,
    encode_frame,
    worker_frame_decoder,
)
from dsh_tools.codebridge._inflight import InflightArguments, argument_bytes
from dsh_tools.codebridge._ledger import (
    MAX_LOG_ENTRIES,
    OutputLedger,
    json_prefix,
    json_str_size,
    limit_message,
    tokens_json_size,
)
from dsh_tools.codebridge._program import (
    ABSENT_NAME,
    FUNCTION_NAME,
    ProgramError,
    compile_program,
)
from dsh_tools.codebridge._run_readers import RunReaders
from dsh_tools.codebridge._tokens import (
    INT_MAX,
    INT_MIN,
    ArrayMarker,
    ObjectMarker,
    TokenError,
    detokenize,
    not_lossless,
    tokenize,
)
from dsh_tools.pipeline._epoll import PreciseEpoll
from dsh_tools.pipeline._loop import new_pool_loop

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: not (f == 0.0 and math.copysign(1.0, f) < 0)
    )
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def _compact(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _deep_list(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# --- tokens ----------------------------------------------------------------------------------


@given(json_values)
def test_tokens_round_trip_every_lossless_value(value: Any) -> None:
    tokens = tokenize(value)
    assert tokens is not None
    assert detokenize(tokens) == value


@given(json_values)
def test_token_size_equals_compact_json_size(value: Any) -> None:
    tokens = tokenize(value)
    assert tokens is not None
    assert tokens_json_size(tokens, 10**9) == len(_compact(value))


def test_tokens_of_an_object_are_a_marker_then_values_in_key_order() -> None:
    assert tokenize({"b": 1, "a": [True, None]}) == [
        ObjectMarker(["b", "a"]),
        1,
        ArrayMarker(2),
        True,
        None,
    ]


def test_a_5000_deep_value_tokenizes_and_rebuilds_without_recursion() -> None:
    value = _deep_list(5000, {"leaf": [1, 2.5, "x"]})
    tokens = tokenize(value)
    assert tokens is not None
    assert len(tokens) == 5000 + 5
    # Python's own == recurses, so compare the rebuilt value through its (iterative) tokens.
    assert tokenize(detokenize(tokens)) == tokens


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        {1: "x"},
        float("inf"),
        float("nan"),
        -0.0,
        {"s": {1}},
        object(),
        b"bytes",
        2**64,
        -(2**63) - 1,
        "lone \ud800 surrogate",
        {"key \udfff": 1},
    ],
    ids=repr,
)
def test_values_that_are_not_lossless_json_have_no_tokens(value: Any) -> None:
    assert tokenize(value) is None


def test_subclasses_are_rejected_unless_the_caller_accepts_them() -> None:
    frozen = FrozenDict(a=FrozenList([1]))
    assert tokenize(frozen) is None
    tokens = tokenize(frozen, (dict, FrozenDict), (list, FrozenList))
    assert tokens is not None
    assert detokenize(tokens) == {"a": [1]}


def test_cycles_are_rejected_but_shared_references_are_copied() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert tokenize(cyclic) is None
    shared = [1]
    tokens = tokenize({"x": shared, "y": shared})
    assert tokens is not None
    rebuilt = detokenize(tokens)
    assert rebuilt == {"x": [1], "y": [1]}
    assert rebuilt["x"] is not rebuilt["y"]


@pytest.mark.parametrize(
    "tokens",
    [
        [],
        [-0.0],
        [float("nan")],
        [ArrayMarker(3), 1, 2],
        [ObjectMarker(["a", "a"]), 1, 2],
        [1, 2],
        [ArrayMarker(1), 1, 2],
        [2**64],
        [object()],
    ],
    ids=repr,
)
def test_invalid_token_lists_are_refused(tokens: list[Any]) -> None:
    with pytest.raises(TokenError):
        detokenize(tokens)


def test_detokenize_builds_frozen_containers_when_asked() -> None:
    tokens = tokenize({"a": [1, {"b": None}]})
    assert tokens is not None
    value = detokenize(tokens, FrozenList, FrozenDict)
    assert type(value) is FrozenDict
    assert type(value["a"]) is FrozenList
    assert type(value["a"][1]) is FrozenDict
    with pytest.raises(TypeError):
        value["a"].append(2)


# --- ledger ----------------------------------------------------------------------------------


@given(st.text())
def test_json_string_size_is_the_msgspec_encoding_size(text: str) -> None:
    assert json_str_size(text, 10**9) == len(msgspec.json.encode(text))


def test_json_string_size_exits_early_over_the_limit() -> None:
    assert json_str_size("x" * 1_000_000, 100) == 101
    assert json_str_size('"' * 200_000, 300_000) == 300_001


@given(st.text(), st.integers(min_value=2, max_value=200))
def test_json_prefix_is_the_longest_prefix_that_fits(text: str, room: int) -> None:
    prefix = json_prefix(text, room)
    assert prefix is not None
    assert text.startswith(prefix)
    assert len(msgspec.json.encode(prefix)) <= room
    if prefix != text:
        assert len(msgspec.json.encode(text[: len(prefix) + 1])) > room


def test_json_prefix_has_nothing_below_two_bytes() -> None:
    assert json_prefix("abc", 1) is None
    assert json_prefix("abc", 2) == ""


def test_ledger_counts_logs_as_a_json_array() -> None:
    ledger = OutputLedger(11)
    assert ledger.admit("abc")
    assert ledger.room == 4  # '["abc"]' is 7 bytes
    assert ledger.fits_message("xy")
    assert not ledger.fits_message("xyz")


def test_ledger_limit_reserves_the_message_then_keeps_a_prefix_of_the_logs() -> None:
    ledger = OutputLedger(300)
    for index in range(1000):
        if not ledger.admit(f"spam line {index}"):
            break
    logs, message = ledger.limited()
    assert message == limit_message(300)
    assert logs
    assert len(_compact(logs)) + len(_compact(message)) <= 300


@pytest.mark.parametrize("cap", [4, 5, 6, 10, 33, 64])
def test_ledger_limit_result_always_fits_the_cap(cap: int) -> None:
    ledger = OutputLedger(cap)
    ledger.admit("abc")
    ledger.admit("d" * 100)
    logs, message = ledger.limited()
    assert len(_compact(logs)) + len(_compact(message)) <= cap
    assert limit_message(cap).startswith(message)


def test_ledger_overflow_prefix_leaves_room_for_the_limit_message() -> None:
    ledger = OutputLedger(96)
    assert not ledger.admit("start-" + '😀"\\\n' * 100)
    prefix = ledger.overflow_prefix()
    assert prefix.startswith("start-")
    assert len(_compact([prefix])) + len(_compact(limit_message(96))) <= 96


# --- frames ----------------------------------------------------------------------------------


def test_frames_reassemble_across_arbitrary_chunk_boundaries() -> None:
    frames = [Log("one"), Call(1, "tools", "echo", [ObjectMarker(["v"]), "x"]), Done(value=[3])]
    stream = b"".join(bytes(encode_frame(frame)) for frame in frames)
    reader = FrameReader(worker_frame_decoder(), 1 << 20)
    received: list[Any] = []
    for index in range(0, len(stream), 3):
        received.extend(reader.feed(stream[index : index + 3]))
    assert received == frames


def test_an_oversized_prefix_is_refused_before_its_body_arrives() -> None:
    reader = FrameReader(worker_frame_decoder(), 64)
    first = bytes(encode_frame(Log("ok")))
    assert reader.feed(first + (65).to_bytes(8, "big")) == [Log("ok")]
    assert reader.oversize is not None
    assert reader.oversize.size == 65
    assert reader.feed(b"x" * 65) == []


def test_undecodable_and_ill_typed_bodies_are_skipped() -> None:
    reader = FrameReader(worker_frame_decoder(), 1 << 20)

    def framed(body: bytes) -> bytes:
        return len(body).to_bytes(8, "big") + body

    stream = (
        framed(b"\xc1")
        + framed(msgspec.msgpack.encode(["Log", 5]))
        + framed(msgspec.msgpack.encode(["Done", None, ["exception", 5]]))
        + framed(msgspec.msgpack.encode(["Nope"]))
        + bytes(encode_frame(Done(error=DoneError("exception", "real"))))
    )
    assert reader.feed(stream) == [Done(error=DoneError("exception", "real"))]


# --- program compilation ---------------------------------------------------------------------


def _outcome(source: str) -> Any:
    scope: dict[str, Any] = {ABSENT_NAME: "<absent>"}
    exec(compile_program(source), scope)
    return asyncio.run(scope[FUNCTION_NAME]())


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1", "<absent>"),
        ("return", "<absent>"),
        ("return None", None),
        ("if True:\n    return 5", 5),
        ("def f():\n    return\nreturn f()", None),
        ("class C:\n    def m(self):\n        return\nreturn C().m()", None),
        ("f = lambda: None\nreturn f()", None),
        ("for i in range(3):\n    if i == 1:\n        return\nreturn 9", "<absent>"),
    ],
)
def test_only_the_programs_own_bare_returns_mean_no_result(source: str, expected: Any) -> None:
    assert _outcome(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "return;",
        "x = 1; return",
        "return  # nothing to give",
        "return \\\n\nx = 1",
        "return\f\nx = 1",
        "return\t",
        "x = 1\rreturn\rx = 2",
        "x = 1\r\nreturn\r\n",
        "if True: return\nreturn 3",
        "return_value = 1\nif return_value:\n    return\nreturn return_value",
    ],
)
def test_a_bare_return_however_spelt_means_no_result(source: str) -> None:
    # Whether the program needs its bare returns rewritten is first judged from its text:
    # every spelling the compiler takes for a bare return must be found.
    assert _outcome(source) == "<absent>"


def test_yield_in_the_body_is_refused_but_not_in_nested_functions() -> None:
    with pytest.raises(ProgramError, match="'yield' is not allowed in a run_code program body"):
        compile_program("x = 1\nyield x")
    assert _outcome("def gen():\n    yield 1\nreturn list(gen())") == [1]


def test_a_refused_yield_is_shown_on_its_own_line() -> None:
    # A line separator inside a string literal ends no line for the compiler, nor here.
    with pytest.raises(ProgramError) as refused:
        compile_program('text = "a\u2028b"\nx = 1\nyield x\n')
    assert refused.value.message.splitlines()[:2] == ['  File "<run_code>", line 3', "    yield x"]


def test_a_helper_s_global_statement_reaches_the_program_s_top_level_variable() -> None:
    program = (
        "counter = 0\n"
        "def bump():\n"
        "    global counter\n"
        "    counter += 1\n"
        "class Tally:\n"
        "    global seen\n"
        "    seen = 'class body'\n"
        "bump()\nbump()\n"
        "return [counter, seen]"
    )
    assert _outcome(program) == [2, "class body"]


def test_a_global_of_a_helper_may_be_annotated_at_the_top_level() -> None:
    program = (
        "counter: int = 0\n"
        "total: int\n"
        "def bump():\n"
        "    global counter, total\n"
        "    counter += 1\n"
        "    total = counter * 10\n"
        "bump()\n"
        "return [counter, total]"
    )
    assert _outcome(program) == [1, 10]


def test_a_program_indented_as_a_whole_runs_with_its_strings_and_line_numbers_as_written() -> None:
    assert _outcome('    text = """a\n  b"""\n    if text:\n        return text') == "a\n  b"
    assert _outcome("\n  # a comment first\n  return 7") == 7
    with pytest.raises(ZeroDivisionError) as raised:
        _outcome("    x = 1\n    y = x / 0")
    assert raised.traceback[-1].lineno + 1 == 2  # the model's own line 2


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("  return 1\nreturn 2", "line 1\n    return 1\nIndentationError: unexpected indent"),
        ("    x = 1\n  y = 2", "line 2\n    y = 2\n         ^\nIndentationError: unindent"),
        ("    x = (\n", "line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed"),
    ],
)
def test_an_indented_program_that_is_not_one_block_keeps_its_own_error(
    source: str, error: str
) -> None:
    with pytest.raises(ProgramError) as raised:
        compile_program(source)
    assert error in raised.value.message


def test_a_run_never_reads_a_pipe_it_dropped_even_with_its_event_taken() -> None:
    loop = asyncio.new_event_loop()
    pipes = [os.pipe() for _ in range(3)]
    seen: list[int] = []
    readers = RunReaders(loop)

    def reading(index: int) -> Callable[[], None]:
        def on_readable() -> None:
            seen.append(index)
            os.read(pipes[index][0], 16)
            for other, (read_end, _) in enumerate(pipes):
                if other != index:
                    readers.drop(read_end)  # ready as well, its event possibly taken already

        return on_readable

    try:
        readers.watch({read_end: reading(index) for index, (read_end, _) in enumerate(pipes)})
        assert all(read_end in readers for read_end, _ in pipes)
        for _, write_end in pipes:
            os.write(write_end, b"x")
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(seen) == 1
        assert [read_end in readers for read_end, _ in pipes].count(True) == 1
        readers.close()
        for _, write_end in pipes:
            os.write(write_end, b"x")
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(seen) == 1  # closed: nothing more is read
    finally:
        readers.close()
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)
        loop.close()


def test_a_pool_loop_again_skips_its_zero_waits_once_a_run_s_readers_are_gone() -> None:
    # A loop made by new_pool_loop (each thread's private loop among them) makes no system
    # call for a zero wait while it watches nothing but its wake-up descriptors: a call whose
    # hooks merely pass through makes one such pass. The epoll instance the loop's runs share
    # must not stay watched between runs, or one run_code call would cost every later call
    # on that thread its saving.
    if PreciseEpoll is None:
        pytest.skip("no epoll on this platform")
    loop = new_pool_loop()
    selector: Any = loop._selector  # type: ignore[attr-defined]
    pipes = [os.pipe() for _ in range(2)]
    try:
        assert selector._only_wake
        for ending in ("close", "drop"):
            readers = RunReaders(loop)
            readers.watch({read_end: lambda: None for read_end, _ in pipes})
            assert not selector._only_wake  # a run's pipes need every wait's system call
            if ending == "close":
                readers.close()
            else:
                for read_end, _ in pipes:
                    readers.drop(read_end)
            assert selector._only_wake, ending
    finally:
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)
        loop.close()


def test_a_pool_loop_keeps_the_shared_epoll_instance_between_runs_unless_it_turns_readable() -> (
    None
):
    # Between runs the instance holds nothing and is never readable: the loop keeps it as a
    # descriptor that only wakes its waits, not added and removed again each run. A descriptor
    # closed while still in it (a copy open elsewhere) keeps it readable: the loop then stops
    # watching it between runs rather than wake for it again and again.
    if PreciseEpoll is None:
        pytest.skip("no epoll on this platform")
    loop = new_pool_loop()
    selector: Any = loop._selector  # type: ignore[attr-defined]
    read_end, write_end = os.pipe()
    copy = os.dup(read_end)  # as a worker's copy would be
    try:
        readers = RunReaders(loop)
        readers.watch({read_end: lambda: None})
        watched = set(selector.get_map()) - {read_end}
        readers.close()
        assert selector._only_wake
        assert set(selector.get_map()) == watched  # still watched, as a wake-up descriptor
        readers = RunReaders(loop)

        def read_to_the_end() -> None:  # as a run's last reader: it drops itself
            os.read(read_end, 16)
            readers.drop(read_end)

        readers.watch({read_end: read_to_the_end})
        assert not selector._only_wake and set(selector.get_map()) == watched
        os.write(write_end, b"x")
        loop.run_until_complete(asyncio.sleep(0.01))
        assert read_end not in readers
        assert selector._only_wake and set(selector.get_map()) == watched
        readers = RunReaders(loop)
        readers.watch({read_end: lambda: None})
        os.close(read_end)  # closed before it was dropped: it stays in the epoll instance
        readers.close()
        os.write(write_end, b"x")
        loop.run_until_complete(asyncio.sleep(0.01))
        assert len(selector.get_map()) == len(watched) - 1  # the instance is watched no more
        assert selector._only_wake
    finally:
        for fd in (copy, write_end):
            os.close(fd)
        loop.close()


def test_the_path_of_a_problem_deep_down_is_named_by_its_two_ends() -> None:
    value: Any = float("nan")
    for _ in range(200_000):
        value = [value]
    message = not_lossless({"v": value, "w": 1}, "arguments")
    assert message.startswith("arguments.v[0][0]")
    assert message.endswith("[0][0] is float (NaN)")
    assert "..." in message and len(message) < 250
    long_key = {"k" * 10_000: {"a": float("inf")}}
    assert not_lossless(long_key, "value").endswith("kkk.a is float (infinite)")


def test_entries_past_the_kept_number_join_the_last_and_show_the_same_text() -> None:
    apart = OutputLedger(10**9)
    joined = OutputLedger(10**9)
    entries = [f"line {index}" if index % 7 else "" for index in range(MAX_LOG_ENTRIES + 500)]
    for entry in entries:
        assert joined.admit(entry)
    for entry in entries[: MAX_LOG_ENTRIES - 1]:
        assert apart.admit(entry)
    logs = joined.logs
    assert len(logs) == MAX_LOG_ENTRIES
    assert logs[: MAX_LOG_ENTRIES - 1] == entries[: MAX_LOG_ENTRIES - 1]
    assert "\n".join(logs) == "\n".join(entries)
    # Counted as separate entries, as the program wrote them: the same limits apply.
    assert joined.used == len(_compact(entries))
    assert len(_compact(logs)) <= joined.used
    assert joined.has_logs and not OutputLedger(10).has_logs


def test_a_limited_result_past_the_kept_number_still_fits_the_cap() -> None:
    cap = 16 * MAX_LOG_ENTRIES
    ledger = OutputLedger(cap)
    index = 0
    while ledger.admit(f"é{index}"):
        index += 1
    assert index > MAX_LOG_ENTRIES
    logs, message = ledger.limited()
    assert len(_compact(logs)) + len(_compact(message)) <= cap
    assert "\n".join(logs).startswith("é0\né1\n")


@pytest.mark.parametrize(
    "value",
    [
        list(range(40)),
        ["s"] * 30 + [None, True, False],
        {"a": [1] * 20, "b": [[2] * 17, ["x"] * 16], "c": [1, "mixed"] * 10},
        [True, 1] * 10,  # booleans beside integers: the general path
        [1.5] * 20,
        [INT_MAX] * 16 + [INT_MIN],
        [[0] * 16 for _ in range(3)] + [[]] * 16,
    ],
)
def test_long_runs_of_scalars_rebuild_the_same_value(value: Any) -> None:
    rebuilt = detokenize(tokenize(value))
    assert rebuilt == value
    assert _compact(rebuilt) == _compact(value)


@pytest.mark.parametrize(
    ("tokens", "problem"),
    [
        ([ArrayMarker(20)] + [1] * 19 + [INT_MAX + 1], "integer out of range"),
        ([ArrayMarker(20)] + [1] * 19, "more children than remain"),
        ([ArrayMarker(16)] + [1] * 16 + [2], "tokens left over"),
        ([ArrayMarker(20)] + [1.0] * 19 + [float("nan")], "non-finite float"),
    ],
)
def test_long_runs_of_scalars_are_checked_like_any_token(tokens: list[Any], problem: str) -> None:
    with pytest.raises(TokenError, match=problem):
        detokenize(tokens)


def test_a_completion_is_measured_the_same_from_its_value_as_from_its_tokens() -> None:
    deep: Any = [1.5, "é", None]
    for _ in range(3000):
        deep = [deep, {"k": True}]
    for value in ([0] * 1000, {"a": ["x\\n" * 10, 2.5e-300, -7]}, deep):
        tokens = tokenize(value)
        assert tokens is not None
        size = tokens_json_size(tokens, 10**9)
        for room in (size - 1, size):
            ledger = OutputLedger(room + 2)
            assert ledger.fits_value(tokens, value) == ledger.fits_value(tokens) == (room >= size)


@pytest.mark.parametrize(
    "value",
    [
        "\x00" * 3_000_000,  # longer than the room: over without any encoding
        "\x00" * 500_000,  # shorter, but six bytes a character in JSON
        ["ok", {"\x01" * 400_000: 1}],  # the text hides in an object key
    ],
)
def test_a_completion_of_escaped_text_is_measured_without_encoding_it_whole(value: Any) -> None:
    cap = 2**20
    tokens = tokenize(value)
    assert tokens is not None
    ledger = OutputLedger(cap)
    tracemalloc.start()
    try:
        fits = ledger.fits_value(tokens, value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fits is False
    assert fits == (tokens_json_size(tokens, 10**9) <= ledger.room)
    assert peak < cap  # the whole JSON would be 2.4 to 18 MB


def test_arguments_in_flight_count_object_keys_like_string_values() -> None:
    # A key is held like any string: a call whose object has a 48 MB key (which the program
    # may write as its own frame) counts 48 MB, not the one marker it is carried by.
    big_key = "k" * (48 * 2**20)
    tokens = tokenize({big_key: 1, "value": "x"})
    assert tokens is not None
    assert argument_bytes(tokens) >= 48 * 2**20
    inflight = InflightArguments()
    assert inflight.admit(1, tokens, "tools", "echo") is None
    refused = inflight.admit(2, tokens, "tools", "echo")
    assert refused is not None and refused.startswith("a call of tools.echo (")
    assert "would make binding calls in flight hold more than" in refused
    inflight.release(1)
    assert inflight.admit(3, tokens, "tools", "echo") is None
