"""Harness code written as the docs write it type-checks under ``mypy --strict``."""

from __future__ import annotations

import textwrap
from pathlib import Path

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


def test_code_sandbox_grants_given_as_lists_type_check(tmp_path: Path) -> None:
    module = tmp_path / "harness.py"
    module.write_text(textwrap.dedent(SANDBOX_GRANTS))
    out, err, status = api.run(
        ["--strict", "--cache-dir", str(tmp_path / ".mypy_cache"), str(module)]
    )
    assert status == 0, out + err
