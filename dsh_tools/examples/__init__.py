"""Example tools a harness author can use as they are or copy: small, real and complete.

Every tool works inside one workspace folder. The file tools refuse paths that leave it
(``..``, absolute paths elsewhere, symbolic links pointing out); ``bash`` starts its command
there, but the command can reach whatever the harness's user can: confine it with a sandbox
of your own before a model you do not trust uses it. Each declares its full parameter and
output schemas, a renderer, a concurrency classifier (reads may overlap, writes run alone) and
tool-owned presentation cards.

- ``read_file``, ``list_dir``: concurrency-safe reads (``fs_tools``);
- ``write_file``, ``edit_file``: exclusive writes with diff cards (``fs_tools``);
- ``bash``: a shell command under a supervisor that, when the command ends, is aborted or
  times out, or the harness dies, kills every process the command started.

``example_tools(root)`` returns all five definitions, ready for ``system.tools.register``.
"""

from __future__ import annotations

from pathlib import Path

from ..registry import ToolDefinition
from ._bash import (
    DEFAULT_BASH_TIMEOUT_MS,
    DEFAULT_MAX_OUTPUT_BYTES,
    bash_tool,
    format_bash_output,
    parse_bash_output,
)
from ._diffs import CONTEXT_LINES, diffs_from_meta, hunks
from ._fs import (
    DEFAULT_READ_LIMIT,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    edit_file_tool,
    fs_tools,
    list_dir_tool,
    read_file_tool,
    write_file_tool,
)
from ._workspace import Workspace, WorkspaceError

__all__ = [
    "CONTEXT_LINES",
    "DEFAULT_BASH_TIMEOUT_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_READ_LIMIT",
    "MAX_LIST_ENTRIES",
    "MAX_READ_BYTES",
    "Workspace",
    "WorkspaceError",
    "bash_tool",
    "diffs_from_meta",
    "edit_file_tool",
    "example_tools",
    "format_bash_output",
    "fs_tools",
    "hunks",
    "list_dir_tool",
    "parse_bash_output",
    "read_file_tool",
    "write_file_tool",
]


def example_tools(
    root: Path | str,
    *,
    bash_timeout_ms: float = DEFAULT_BASH_TIMEOUT_MS,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> list[ToolDefinition]:
    """All example tools over the workspace at ``root``: the file tools, then ``bash``."""
    return [
        *fs_tools(root),
        bash_tool(root, timeout_ms=bash_timeout_ms, max_output_bytes=max_output_bytes),
    ]
