"""ToolsConfig validation: TypeError for a wrong type, ValueError for a bad value."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_tools import ExecuteBatch, ToolsConfig


def test_defaults() -> None:
    config = ToolsConfig()
    assert config.mode == "native"
    assert config.max_parallel_tool_calls == 10
    assert config.max_parallel_sub_calls == 10
    assert config.max_output_bytes == 64 * 2**20
    assert config.max_frame_bytes == 256 * 2**20
    assert config.tool_order is None


@pytest.mark.parametrize(
    ("key", "value", "error", "text"),
    [
        ("mode", "turbo", ValueError, "mode must be one of native, code, both"),
        ("mode", 1, TypeError, "mode must be"),
        ("max_parallel_tool_calls", 0, ValueError, "max_parallel_tool_calls must be a positive"),
        ("max_parallel_tool_calls", True, TypeError, "max_parallel_tool_calls must be a positive"),
        ("max_parallel_tool_calls", 1.5, TypeError, "max_parallel_tool_calls must be a positive"),
        ("max_parallel_sub_calls", -1, ValueError, "max_parallel_sub_calls must be a positive"),
        ("max_output_bytes", 3, ValueError, "max_output_bytes must be an integer of at least 4"),
        (
            "max_output_bytes",
            2**70,
            ValueError,
            "max_output_bytes must be an integer of at most 9007199254740991, got "
            "1180591620717411303424",
        ),
        ("max_frame_bytes", 2**53, ValueError, "max_frame_bytes must be an integer of at most"),
        ("compute_ms", float("inf"), ValueError, "compute_ms must be a positive finite number"),
        # Integers past what a float holds, or too long to write out, are named, not raised.
        pytest.param(
            "compute_ms",
            10**400,
            ValueError,
            "compute_ms must be a positive finite number, got 1" + "0" * 400,
            id="compute_ms=10**400",
        ),
        pytest.param(
            "max_memory_mb",
            10**5000,
            ValueError,
            "max_memory_mb must be a positive finite number, got an integer of 16610 bits",
            id="max_memory_mb=10**5000",
        ),
        pytest.param(
            "max_output_bytes",
            10**5000,
            ValueError,
            "max_output_bytes must be an integer of at most 9007199254740991, got an integer of "
            "16610 bits",
            id="max_output_bytes=10**5000",
        ),
        (
            "max_parallel_code_runs",
            2**53,
            ValueError,
            "max_parallel_code_runs must be an integer of at most 9007199254740991, got "
            "9007199254740992",
        ),
        ("max_wall_ms", "1", TypeError, "max_wall_ms must be a positive number"),
        ("max_inline_bytes", 0, ValueError, "max_inline_bytes must be a positive integer"),
        ("tool_order", "a", TypeError, "tool_order must be a list of tool names"),
        (
            "tool_order",
            ["<unlisted-tools>", "<unlisted-tools>"],
            ValueError,
            'tool_order must be a list with the "<unlisted-tools>" marker at most once',
        ),
        ("tool_order", ["a", "b", "a"], ValueError, "tool_order must be a list of distinct names"),
        ("tool_order", ["a", 1], TypeError, "tool_order[1] must be a str"),
    ],
)
def test_bad_settings_are_refused(key: str, value: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
        ToolsConfig(**{key: value})


def test_tool_order_is_copied_into_a_tuple() -> None:
    order = ["b", "<unlisted-tools>"]
    config = ToolsConfig(tool_order=order)
    order.append("c")
    assert config.tool_order == ("b", "<unlisted-tools>")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (-2, "-2"), pytest.param(-(10**5000), "an integer of 16610 bits", id="-10**5000")],
)
def test_batch_max_parallel_must_be_positive(value: int, shown: str) -> None:
    with pytest.raises(
        ValueError, match=rf"^ExecuteBatch\.max_parallel must be a positive integer, got {shown}$"
    ):
        ExecuteBatch(calls=[], max_parallel=value)


@pytest.mark.parametrize("value", [1.5, True])
def test_batch_max_parallel_must_be_an_int(value: Any) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^ExecuteBatch\.max_parallel must be a positive integer or None, got "
        rf"{type(value).__name__}$",
    ):
        ExecuteBatch(calls=[], max_parallel=value)
