"""The public names are importable from ``dsh_tools`` and documented."""

from __future__ import annotations

import inspect

import pytest

import dsh_tools

PROMISED = [
    "ToolSystem", "ToolsConfig", "ToolsHandle", "AgentScope", "ExecuteCall", "ExecuteBatch",
    "ToolCall", "BatchOutcome", "AbortController", "AbortSignal", "define_tool", "ToolOutput",
    "ToolDefinition", "ToolExecutionSuccess", "ToolExecutionFailure", "ToolFailure",
    "ToolErrorInfo", "Allow", "Deny", "Ask", "Accept", "Block", "HarnessError", "ToolArgsError",
    "ToolOutputError", "ToolNotFoundError", "AbortError", "ToolTimeoutError", "JsonSchemaError",
    "CodeRunFailedError", "UNSET", "FrozenDict", "FrozenList", "snapshot_json", "thaw",
    "assert_supported_json_schema", "validate_json_schema_value", "assert_object_json_schema",
    "compile_schema", "timeout_policy", "SessionLog", "SessionEvent", "AssembledPrompt",
    "PromptSection", "LosslessJsonError", "CodeRuntime", "CodeRunRequest", "CodeRunResult",
    "ExecutionToken", "ToolExecution", "ToolRunContext", "DispatchExecution",
]  # fmt: skip


@pytest.mark.parametrize("name", PROMISED)
def test_promised_name_is_exported(name: str) -> None:
    assert name in dsh_tools.__all__
    assert getattr(dsh_tools, name) is not None


def test_every_exported_class_and_function_has_a_docstring() -> None:
    missing = [
        name
        for name in dsh_tools.__all__
        if (inspect.isclass(obj := getattr(dsh_tools, name)) or inspect.isfunction(obj))
        and not (obj.__doc__ or "").strip()
    ]
    assert missing == []


def test_the_package_ships_type_information() -> None:
    from importlib.resources import files

    assert files("dsh_tools").joinpath("py.typed").is_file()


def test_error_constructors_match_the_contract() -> None:
    assert str(dsh_tools.HarnessError("disk full", "ENOSPC")) == "disk full"
    assert dsh_tools.ToolArgsError(["a"]).code == "INVALID_ARGS"
    assert dsh_tools.ToolOutputError("t", ["v"]).message == 'tool "t" returned invalid output: v'
    assert dsh_tools.JsonSchemaError(["x"]).code == "UNSUPPORTED_SCHEMA"
    assert dsh_tools.ToolNotFoundError("ghost").message == 'unknown tool "ghost"'
    assert dsh_tools.AbortError().code == "ABORTED"
    assert dsh_tools.AbortError("ABORTED_BEFORE_DISPATCH").message == (
        "tool call aborted before dispatch"
    )
    assert dsh_tools.ToolTimeoutError(100.0).message == "tool call timed out after 100ms"
    failed = dsh_tools.CodeRunFailedError("timeout", "wall-clock ceiling reached (5ms)", ["a"])
    assert failed.message == (
        "code run failed (timeout): wall-clock ceiling reached (5ms)\nCaptured output:\na"
    )
    assert failed.code == "CODE_RUN_FAILED"


def test_the_waits_the_cancellation_page_names_are_exported_with_their_values() -> None:
    # A harness sizes its own shutdown wait from them (read-only: the library's own copies
    # decide).
    waits = {
        name: getattr(dsh_tools, name)
        for name in (
            "STOP_GRACE_S",
            "ABANDONED_SETTLE_S",
            "WORKER_EXIT_S",
            "BODY_WIND_DOWN_S",
            "HOOK_WIND_DOWN_S",
        )
    }
    assert waits == {
        "STOP_GRACE_S": 5.0,
        "ABANDONED_SETTLE_S": 1.0,
        "WORKER_EXIT_S": 2.0,
        "BODY_WIND_DOWN_S": 1.0,
        "HOOK_WIND_DOWN_S": 1.0,
    }
    assert set(waits) <= set(dsh_tools.__all__)
