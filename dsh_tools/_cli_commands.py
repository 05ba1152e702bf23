"""The small commands of ``dsh-tools``: ``sdk``, ``catalog`` and ``run-code``, each against
a system holding the example tools."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TextIO

from ._cli_output import content_text
from ._system import ToolSystem
from .actors import ExecuteCall
from .actors._config import ToolsConfig
from .codebridge._seam import DEFAULT_COMPUTE_MS, DEFAULT_MAX_WALL_MS
from .pipeline import timeout_policy

__all__ = ["run_catalog", "run_code_file", "run_program", "run_sdk"]


def _example_system(mode: str, root: Path, config: ToolsConfig | None = None) -> ToolSystem:
    from .examples import example_tools

    system = ToolSystem.start(config if config is not None else ToolsConfig(mode=mode))
    for definition in example_tools(root):
        system.tools.register(definition)
    system.tools.on_execute(timeout_policy())
    return system


def run_sdk(out: TextIO) -> int:
    """Print the generated Code Mode SDK for the example tools."""
    with tempfile.TemporaryDirectory() as tmp, _example_system("code", Path(tmp)) as system:
        for section in system.assemble_prompt().sections:
            if section.name == "tools:sdk":
                print(section.text, file=out)
    return 0


def run_catalog(out: TextIO) -> int:
    """Print the tool catalog as Markdown."""
    from ._catalog import render_default_catalog

    print(render_default_catalog(), end="", file=out)
    return 0


def run_code_file(path: Path, out: TextIO, *, workspace: Path) -> int:
    """Run the program in ``path`` in Code Mode against the example tools."""
    return run_program(path.read_text(encoding="utf-8-sig"), path.name, out, workspace=workspace)


def run_program(
    program: str,
    name: str,
    out: TextIO,
    *,
    workspace: Path,
    compute_ms: float = DEFAULT_COMPUTE_MS,
    max_wall_ms: float = DEFAULT_MAX_WALL_MS,
    isolation: str = "sandbox",
) -> int:
    """Run ``program`` (the body of an async function) in Code Mode against the example tools."""
    config = ToolsConfig(
        mode="code", compute_ms=compute_ms, max_wall_ms=max_wall_ms, code_isolation=isolation
    )
    with _example_system("code", workspace, config) as system:
        result = system.execute(
            ExecuteCall(
                call_id="run-1",
                name="run_code",
                arguments={"code": program, "description": f"Run {name}"},
                agent="cli",
            )
        )
        print(content_text(result), file=out)
        return 1 if result.is_error else 0
