"""ToolsConfig validation: TypeError for a wrong type, ValueError for a bad value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dsh_tools import (
    MIN_MAX_MEMORY_MB,
    CodeRuntimeConfig,
    CodeSandbox,
    ExecuteBatch,
    ExecuteCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
)
from dsh_tools.integrations import ReconnectPolicy


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
        ("tool_order", ["a", ""], ValueError, "tool_order[1] must be a non-empty tool name"),
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


def test_a_misspelt_keyword_names_the_config_and_the_keyword_it_most_likely_meant() -> None:
    with pytest.raises(
        TypeError,
        match=r"^ToolsConfig\(\) got an unexpected keyword argument 'max_frames'\. "
        r"Did you mean 'max_frame_bytes'\?$",
    ):
        ToolsConfig(max_frames=3)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (
            lambda: CodeSandbox(reads=["/srv"]),
            r"^CodeSandbox\(\) got an unexpected keyword argument 'reads'\. Did you mean 'read'\?$",
        ),
        (
            lambda: CodeRuntimeConfig(wall_ms=10),
            r"^CodeRuntimeConfig\(\) got an unexpected keyword argument 'wall_ms'\. "
            r"Did you mean 'max_wall_ms'\?$",
        ),
        (
            lambda: ReconnectPolicy(attempts=3),
            r"^ReconnectPolicy\(\) got an unexpected keyword argument 'attempts'\. "
            r"Did you mean 'max_attempts'\?$",
        ),
        (
            lambda: ExecuteBatch(calls=[], max_paralel=2),
            r"^ExecuteBatch\(\) got an unexpected keyword argument 'max_paralel'\. "
            r"Did you mean 'max_parallel'\?$",
        ),
        (
            lambda: ToolOutput(schema={"type": "string"}, renderer=str),
            r"^ToolOutput\(\) got an unexpected keyword argument 'renderer'\. "
            r"Did you mean 'render'\?$",
        ),
    ],
    ids=["CodeSandbox", "CodeRuntimeConfig", "ReconnectPolicy", "ExecuteBatch", "ToolOutput"],
)
def test_every_struct_an_author_writes_names_itself_for_an_unknown_keyword(
    make: Callable[[], object], text: str
) -> None:
    with pytest.raises(TypeError, match=text):
        make()


def test_a_keyword_like_none_of_them_gets_the_list_of_keywords() -> None:
    with pytest.raises(
        TypeError,
        match=r"^CodeSandbox\(\) got an unexpected keyword argument 'network'\. "
        r"Its keywords: read, write, env, max_processes, max_open_files, cgroups$",
    ):
        CodeSandbox(network=False)  # type: ignore[call-arg]


def test_positional_and_missing_arguments_name_the_struct_and_what_it_takes() -> None:
    with pytest.raises(
        TypeError,
        match=r"^ToolsConfig\(\) takes keyword arguments only, got 1 positional; "
        r"its keywords: mode, max_parallel_tool_calls, ",
    ):
        ToolsConfig("code")  # type: ignore[misc]
    with pytest.raises(
        TypeError,
        match=r"^ToolOutput\(\) missing required argument 'render'; "
        r"it takes ToolOutput\(schema, render, presentation_meta\)$",
    ):
        ToolOutput(schema={"type": "string"})  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"^ToolOutput\(\) takes at most 3 positional arguments, got 4: "
    ):
        ToolOutput({"type": "string"}, str, None, None)  # type: ignore[call-arg]


def test_a_check_of_the_struct_itself_keeps_its_own_message() -> None:
    with pytest.raises(TypeError, match=r"^code sandbox: env must be a dict of str to str$"):
        CodeSandbox(env={"HOME": 1})  # type: ignore[dict-item]


# --- the memory floor -----------------------------------------------------------------------------

_WORKER_NEEDS = (
    "must be at least 48 (the code worker, a Python interpreter, takes about 32 MB of it before "
    "the program runs), got "
)


@pytest.mark.parametrize(
    ("value", "shown"), [(47.9, "47.9"), (47, "47"), (16, "16"), (16.0, "16"), (0.5, "0.5")]
)
def test_a_memory_budget_under_what_the_worker_needs_is_refused(value: float, shown: str) -> None:
    # Under about 32 MB the worker has no room for a program's first allocation, and a run
    # failed at once with a MemoryError that did not say the budget was the cause.
    assert MIN_MAX_MEMORY_MB == 48
    with pytest.raises(ValueError) as raised:
        ToolsConfig(max_memory_mb=value)
    assert str(raised.value) == f"max_memory_mb {_WORKER_NEEDS}{shown}"
    with pytest.raises(ValueError) as raised:
        CodeRuntimeConfig(max_memory_mb=value)
    assert str(raised.value) == f"code runtime: config.max_memory_mb {_WORKER_NEEDS}{shown}"


def test_a_memory_budget_that_is_no_positive_number_keeps_its_own_message() -> None:
    with pytest.raises(
        ValueError, match=r"^max_memory_mb must be a positive finite number, got 0$"
    ):
        ToolsConfig(max_memory_mb=0)
    with pytest.raises(
        ValueError,
        match=r"^code runtime: config\.max_memory_mb must be a positive number, got -1$",
    ):
        CodeRuntimeConfig(max_memory_mb=-1)


_SMALL_PROGRAM = """
import json, re, asyncio, decimal, dataclasses
values = list(range(10_000))
text = json.dumps({"n": len(values), "total": sum(values), "first": values[:3]})
return json.loads(text)["total"]
"""


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_small_program_runs_under_the_floor_budget(isolation: str) -> None:
    config = ToolsConfig(mode="code", code_isolation=isolation, max_memory_mb=MIN_MAX_MEMORY_MB)
    assert CodeRuntimeConfig(max_memory_mb=MIN_MAX_MEMORY_MB).max_memory_mb == 48
    with ToolSystem.start(config) as system:
        for index, (program, value) in enumerate(
            [("return None", "null"), (_SMALL_PROGRAM, str(sum(range(10_000))))]
        ):
            result = system.execute(
                ExecuteCall(
                    call_id=f"floor-{index}",
                    name="run_code",
                    arguments={"code": program, "description": "Run at the memory floor"},
                )
            )
            assert not result.is_error, result.content
            assert result.content[0]["text"] == value
