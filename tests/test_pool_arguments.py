"""A batch's argument text: how the raw JSON text the model sent becomes the arguments.

``""`` is ``{}``; valid JSON is its value; a syntax error (``NaN`` and ``Infinity`` included)
is ``INVALID_ARGS`` saying the text is not valid JSON and where, and the body never runs; valid
JSON that is not lossless (``-0.0``, ``1e400``, an integer out of range, an escaped lone
surrogate) is an argument-snapshot failure. Text that gives an object a key twice is
``INVALID_ARGS`` naming the key and where. Text nested 5,000 levels deep parses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import block, echo, fixture, text
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_support import batch, code, of_type, safe, tool_call

from dsh_tools import AbortController, ExecuteBatch, ToolSystem, tool
from dsh_tools.registry._json_text import (
    ArgumentsTextError,
    parse_arguments,
    parse_json_text,
    read_arguments,
)


class Receiver:
    """A raw tool that records the arguments each body received."""

    def __init__(self, system: ToolSystem, name: str = "x") -> None:
        self.received: dict[str, Any] = {}

        def body(args: Any, ctx: Any) -> Any:
            self.received[ctx.call_id] = args
            return [block("ok")]

        system.tools.register(fixture(name, body, is_concurrency_safe=safe))


def run(system: ToolSystem, *texts: str) -> Any:
    calls = [tool_call(f"c{i}", "x", t) for i, t in enumerate(texts, 1)]
    return system.execute_batch(ExecuteBatch(calls=calls))


def test_rp115_empty_text_is_an_empty_object(system: ToolSystem) -> None:
    receiver = Receiver(system)
    run(system, "")
    assert receiver.received == {"c1": {}}


def test_text_that_is_not_json_is_invalid_args_saying_where(system: ToolSystem) -> None:
    receiver = Receiver(system)
    outcome = run(system, "not json")
    assert receiver.received == {}
    assert code(outcome.results[0]) == "INVALID_ARGS"
    assert text(outcome.results[0]) == (
        "Error: invalid arguments: arguments are not valid JSON: unexpected character 'n' "
        "at line 1, column 1"
    )
    [call_event] = [e for e in system.session.events if e.type == "tool/call"]
    assert call_event.data["arguments"] == "not json"


def test_truncated_json_names_the_line_and_column_where_it_ends(system: ToolSystem) -> None:
    Receiver(system)
    outcome = run(system, '{\n  "path": "notes.md",\n  "text": "unfinished')
    assert code(outcome.results[0]) == "INVALID_ARGS"
    assert "arguments are not valid JSON" in text(outcome.results[0])
    assert "line 3, column 11" in text(outcome.results[0])


@pytest.mark.parametrize(
    "raw",
    ["NaN", "Infinity", "-Infinity", '{"a": NaN}', "[1,]", "{'a': 1}", " ", "01", "1.", "+1"],
)
def test_syntax_errors_are_invalid_args(system: ToolSystem, raw: str) -> None:
    receiver = Receiver(system)
    outcome = run(system, raw)
    assert receiver.received == {}
    assert code(outcome.results[0]) == "INVALID_ARGS"
    assert "arguments are not valid JSON" in text(outcome.results[0])


def test_valid_json_arrives_as_its_value_and_the_event_keeps_the_raw_text(
    system: ToolSystem,
) -> None:
    receiver = Receiver(system)
    raw = ' {"text": "hi", "n": [1, 2.5, true, null]} '
    run(system, raw)
    assert receiver.received == {"c1": {"text": "hi", "n": [1, 2.5, True, None]}}
    assert [e.data["arguments"] for e in system.session.events if e.type == "tool/call"] == [raw]


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ("-0.0", "arguments is float (-0.0)"),
        ("1e400", "arguments is float (inf)"),
        ("-1e400", "arguments is float (-inf)"),
        ('{"a": [1e400]}', "arguments.a[0] is float (inf)"),
        ("18446744073709551616", "arguments is int (out of range)"),
        ("-9223372036854775809", "arguments is int (out of range)"),
        ('"\\ud800"', "arguments is str (lone surrogate)"),
        ('{"a": "x\\udc00y"}', "arguments.a is str (lone surrogate)"),
    ],
)
def test_valid_json_that_is_not_lossless_is_invalid_args_naming_the_value(
    system: ToolSystem, raw: str, where: str
) -> None:
    receiver = Receiver(system)
    pre_seen: list[str] = []

    async def pre(exec: Any, next: Any) -> Any:
        pre_seen.append(exec.call_id)
        return await next()

    system.tools.on_pre_execute(pre)
    outcome = run(system, raw)
    [result] = outcome.results
    message = f"invalid arguments: arguments are not lossless JSON: {where}"
    assert result.to_dict() == {
        "content": [block(f"Error: {message}")],
        "is_error": True,
        "error": {"message": message, "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"}},
    }
    assert receiver.received == {}
    assert pre_seen == []
    assert [e.data["arguments"] for e in system.session.events if e.type == "tool/call"] == [raw]


def test_text_that_repeats_a_key_is_invalid_args_naming_the_key_and_where(
    system: ToolSystem,
) -> None:
    # Both values reached the decoder and the last one silently won: a model (or whatever
    # wrote its text) that sent "path" twice ran the tool on the second, whatever a reader of
    # the text took from the first.
    receiver = Receiver(system)

    @tool
    def typed(path: str) -> str:
        """Reads a path."""
        return path

    system.tools.register(typed)
    repeated = '{"path": "notes.md", "path": "/etc/passwd"}'
    outcome = system.execute_batch(
        batch(
            tool_call("c1", "x", repeated),
            tool_call("c2", "typed", repeated),
            tool_call("c3", "x", '{"a": {"k:": 1, "k\\u003a": 2}}'),
            tool_call("c4", "x", '{"url": "http://a:80", "b": [{"k": "12:00"}], "k": 1}'),
        )
    )
    assert [code(result) for result in outcome.results] == [
        "INVALID_ARGS",
        "INVALID_ARGS",
        "INVALID_ARGS",
        None,
    ]
    assert text(outcome.results[0]) == (
        'Error: invalid arguments: arguments repeat the key "path" at line 1, column 22: JSON '
        "leaves which of its values counts undefined, so send each key once"
    )
    assert text(outcome.results[1]) == text(outcome.results[0])
    assert 'repeat the key "k:" at line 1, column 17' in text(outcome.results[2])
    assert list(receiver.received) == ["c4"]


def test_an_argument_failure_beats_an_aborted_turn(system: ToolSystem) -> None:
    Receiver(system)
    controller = AbortController()
    controller.abort()
    outcome = system.execute_batch(batch(tool_call("c1", "x", "-0.0"), signal=controller.signal))
    assert code(outcome.results[0]) == "ABORTED_BEFORE_DISPATCH"


def depth_of(value: Any) -> int:
    depth = 0
    while isinstance(value, list | dict):
        depth += 1
        value = value[0] if isinstance(value, list) else value["a"]
    return depth


def test_text_nested_5000_levels_deep_parses(system: ToolSystem) -> None:
    receiver = Receiver(system)
    arrays = "[" * 5000 + "1" + "]" * 5000
    objects = '{"a":' * 5000 + "1" + "}" * 5000
    outcome = run(system, arrays, objects)
    assert [r.is_error for r in outcome.results] == [False, False]
    assert depth_of(receiver.received["c1"]) == 5000
    assert depth_of(receiver.received["c2"]) == 5000


def test_deep_text_with_a_syntax_error_is_invalid_args(system: ToolSystem) -> None:
    receiver = Receiver(system)
    broken = "[" * 5000 + "]" * 4999
    outcome = run(system, broken)
    assert receiver.received == {}
    assert "not valid JSON: expected ',' or ']' at line 1, column 10000" in text(outcome.results[0])


def test_deep_text_that_is_not_lossless_is_invalid_args_with_a_shortened_path(
    system: ToolSystem,
) -> None:
    receiver = Receiver(system)
    outcome = run(system, "[" * 5000 + "-0.0" + "]" * 5000)
    message = text(outcome.results[0])
    assert code(outcome.results[0]) == "INVALID_ARGS"
    assert message.startswith("Error: invalid arguments: arguments are not lossless JSON: ")
    assert message.endswith("[0][0] is float (-0.0)")
    assert len(message) < 300
    assert receiver.received == {}


def test_raw_text_fails_a_typed_tools_validation(system: ToolSystem) -> None:
    system.tools.register(echo())
    outcome = system.execute_batch(batch(tool_call("c1", "echo", "not json")))
    assert code(outcome.results[0]) == "INVALID_ARGS"


def test_each_call_gets_the_batch_agent_and_signal(system: ToolSystem) -> None:
    seen: list[tuple[str, Any, Any]] = []

    def body(args: Any, ctx: Any) -> Any:
        seen.append((ctx.call_id, ctx.agent, ctx.signal))
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    controller = AbortController()
    system.execute_batch(batch("c1", "c2", agent="A", signal=controller.signal))
    assert [(c, a) for c, a, _ in seen] == [("c1", "A"), ("c2", "A")]
    assert all(signal is controller.signal for _, _, signal in seen)


def test_the_classifier_sees_the_parsed_arguments(system: ToolSystem) -> None:
    classified: list[Any] = []

    def classifier(args: Any) -> bool:
        classified.append(args)
        return True

    system.tools.register(fixture("x", lambda a, c: [block("ok")], is_concurrency_safe=classifier))
    system.execute_batch(batch(tool_call("c1", "x", '{"mode": "read"}')))
    assert classified and all(args == {"mode": "read"} for args in classified)
    assert of_type(system, "tool/result") == ["c1"]


# --- the parser against the standard library as an oracle ------------------------------------


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def oracle(raw: str) -> Any:
    """Strict JSON per the standard library (no NaN/Infinity literals)."""
    return json.loads(raw, parse_constant=_no_constants)


def same(a: Any, b: Any) -> bool:
    """Equal with types (1 is not 1.0, -0.0 is not 0.0), iteratively."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif isinstance(x, float):
            if repr(x) != repr(y):
                return False
        elif x != y:
            return False
    return True


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)
separators = st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
fragments = st.sampled_from(
    [*'{}[],:"\\ -+.eE0123456789', "true", "false", "null", "NaN", "\\u", "\\ud800"]
)


@settings(max_examples=300, deadline=None)
@given(json_values, separators, st.booleans())
def test_valid_text_parses_exactly_like_the_standard_library(
    value: Any, sep: tuple[str, str], ascii_only: bool
) -> None:
    raw = json.dumps(value, separators=sep, ensure_ascii=ascii_only)
    assert same(parse_json_text(raw), oracle(raw))
    assert same(parse_arguments(raw), oracle(raw))


@settings(max_examples=500, deadline=None)
@given(st.lists(fragments, max_size=12).map("".join) | st.text(max_size=12))
def test_arbitrary_text_is_refused_exactly_when_the_standard_library_refuses_it(
    raw: str,
) -> None:
    try:
        expected = oracle(raw)
    except ValueError:
        with pytest.raises(ValueError):
            parse_json_text(raw)
        assert parse_arguments(raw) == ({} if raw == "" else raw)
        return
    assert same(parse_json_text(raw), expected)
    assert same(parse_arguments(raw), expected)


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a repeated key")
    return dict(pairs)


keyed_values = st.recursive(
    st.none() | st.integers() | st.sampled_from(["a", ":", "a:b", "::", ""]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(st.tuples(st.sampled_from(["a", "b", ":", "a:"]), children), max_size=4)
    ),
    max_leaves=12,
)


def _text_of(value: Any, escape: bool) -> str:
    """JSON text of ``value``, whose lists of pairs are objects that may repeat a key."""
    if type(value) is list and value and all(type(item) is tuple for item in value):
        members = (f"{_text_of(key, escape)}: {_text_of(item, escape)}" for key, item in value)
        return "{" + ", ".join(members) + "}"
    if type(value) is list:
        return "[" + ", ".join(_text_of(item, escape) for item in value) + "]"
    text = json.dumps(value)
    return text.replace(":", "\\u003a") if escape and type(value) is str else text


@settings(max_examples=300, deadline=None)
@given(keyed_values, st.booleans())
def test_text_is_refused_for_a_repeated_key_exactly_when_it_repeats_one(
    value: Any, escape: bool
) -> None:
    raw = _text_of(value, escape)
    try:
        expected = json.loads(raw, object_pairs_hook=_refuse_repeats)
    except ValueError:
        with pytest.raises(ArgumentsTextError, match="arguments repeat the key"):
            read_arguments(raw)
        return
    assert same(read_arguments(raw), expected)
    assert same(read_arguments(raw, gradual=True), expected)
