"""Harness code written as the docs write it type-checks under ``mypy --strict``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from mypy import api

SANDBOX_GRANTS = """
from dsh_tools import CodeRuntimeConfig, CodeSandbox, ToolsConfig, ToolSystem

grants = CodeSandbox(read=["/usr/share"], write=["/tmp/out"], env={"LANG": "C.UTF-8"})
also = CodeSandbox(read=("/usr/share",))
config = CodeRuntimeConfig(sandbox=grants)
paths: list[str] = list(grants.read) + list(also.write)


def start() -> ToolSystem:
    return ToolSystem.start(ToolsConfig(mode="code"), code_sandbox=grants)
"""


RESULT_NARROWING = """
from typing import Any

from dsh_tools import ExecuteCall, ToolExecutionResult, ToolSystem


def report(result: ToolExecutionResult) -> str:
    if result.is_error:
        return f"{result.error.message} {result.abort_reason}"
    value: Any = result.value
    return str(value)


def first_error(system: ToolSystem) -> str:
    result = system.execute(ExecuteCall(call_id="c1", name="t", arguments={}))
    assert result.is_error and result.error.message
    return result.error.message
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module's checks: the first builds it (the library and its
    dependencies, most of a check's time), the others reuse it."""
    return tmp_path_factory.mktemp("mypy") / ".mypy_cache"


def mypy_strict(tmp_path: Path, cache: Path, source: str) -> tuple[str, int]:
    """What ``mypy --strict`` says of ``source``, and its exit status."""
    module = tmp_path / "harness.py"
    module.write_text(textwrap.dedent(source))
    # mypy raises the process's recursion limit for good; tests that run after this one in the
    # same process (deep schemas handled without recursion) rely on the usual limit.
    limit = sys.getrecursionlimit()
    try:
        out, err, status = api.run(["--strict", "--cache-dir", str(cache), str(module)])
    finally:
        sys.setrecursionlimit(limit)
    return out + err, status


def check(tmp_path: Path, cache: Path, source: str) -> None:
    said, status = mypy_strict(tmp_path, cache, source)
    assert status == 0, said


def test_code_sandbox_grants_given_as_lists_type_check(tmp_path: Path, mypy_cache: Path) -> None:
    check(tmp_path, mypy_cache, SANDBOX_GRANTS)


def test_is_error_narrows_a_result_to_its_failure_or_success(
    tmp_path: Path, mypy_cache: Path
) -> None:
    check(tmp_path, mypy_cache, RESULT_NARROWING)


DEFINE_TOOL_WITHOUT_ITS_CONTRACT = """
from dsh_tools import define_tool

no_output = define_tool(name="t", description="d", parameters={}, execute=lambda a, c: "x")
"""


def test_define_tool_without_its_output_contract_fails_the_type_check(
    tmp_path: Path, mypy_cache: Path
) -> None:
    # Typed optional, it passed the check and raised TypeError on every run.
    said, status = mypy_strict(tmp_path, mypy_cache, DEFINE_TOOL_WITHOUT_ITS_CONTRACT)
    assert status == 1
    assert 'Missing positional argument "output" in call to "define_tool"' in said
