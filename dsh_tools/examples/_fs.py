"""File tools confined to a workspace: ``read_file``, ``list_dir``, ``write_file``, ``edit_file``.

Reads are concurrency-safe (they may overlap in a batch); writes are exclusive (each runs alone,
as an ordered barrier). Every body checks the call's abort signal between units of work and
before it changes anything, so an aborted write never lands.

Presenters follow the reference tools:

- ``read_file``: a generic card ``Read <path>`` (plus the line range), kind ``read``, located
  at the first line read;
- ``list_dir``: a generic card ``List <path>``, kind ``read``;
- ``write_file``: a diff card ``Write <path>``; the result shows the applied hunks (3 lines of
  context) from the persisted metadata, or the whole file for a create;
- ``edit_file``: a diff card ``Edit <path>``; the result shows the applied hunks.

This module declares the four tools (names, descriptions, schemas, classifiers); their bodies,
renderers and cards live in ``_fs_read`` and ``_fs_write``, the text I/O they share in
``_fs_common``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..registry import ToolDefinition, ToolOutput, define_tool
from ._fs_read import (
    DEFAULT_READ_LIMIT,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    list_dir,
    present_list_dir_call,
    present_read_file_call,
    read_file,
    render_list_dir,
    render_read_file,
)
from ._fs_write import (
    edit_file,
    edit_file_meta,
    present_edit_file_call,
    present_edit_file_result,
    present_write_file_call,
    present_write_file_result,
    render_edit_file,
    render_write_file,
    write_file,
    write_file_meta,
)
from ._workspace import Workspace

__all__ = [
    "DEFAULT_READ_LIMIT",
    "MAX_LIST_ENTRIES",
    "MAX_READ_BYTES",
    "edit_file_tool",
    "fs_tools",
    "list_dir_tool",
    "read_file_tool",
    "write_file_tool",
]

# The ``path`` parameter of the tools that name one file (read, write, edit).
_FILE_PATH_PARAMETER: dict[str, Any] = {
    "type": "string",
    "required": True,
    "description": "File path, relative to the workspace root (or absolute inside it).",
}

_HUNK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "old_start": {"type": "integer", "required": True},
        "old_text": {"type": "string", "required": True},
        "new_start": {"type": "integer", "required": True},
        "new_text": {"type": "string", "required": True},
    },
}


def _always_parallel(args: Mapping[str, Any]) -> bool:
    return True


def _always_exclusive(args: Mapping[str, Any]) -> bool:
    return False


def read_file_tool(root: Path | str) -> ToolDefinition:
    """``read_file``: numbered lines of a UTF-8 text file, optionally a range of them."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        return read_file(workspace, args, run_ctx)

    return define_tool(
        name="read_file",
        description=(
            "Read a UTF-8 text file from the workspace. Returns its lines (at most"
            f" {DEFAULT_READ_LIMIT} unless `limit` says otherwise), shown numbered; the value's"
            " `text` holds them as they are in the file, the first being `start_line`. Use"
            " `offset` and `limit` to page through long files."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "offset": {
                "type": "integer",
                "description": "1-based line number to start reading at (default 1).",
            },
            "limit": {"type": "integer", "description": "Maximum number of lines to return."},
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "text": {"type": "string", "required": True},
                    "start_line": {"type": "integer", "required": True},
                    "line_count": {"type": "integer", "required": True},
                    "has_more": {"type": "boolean", "required": True},
                    # present when some bytes of the lines returned are not UTF-8
                    "not_utf8_bytes": {"type": "integer"},
                    # present when a returned line was longer than MAX_READ_BYTES: its numbers
                    "cut_lines": {"type": "array", "items": {"type": "integer"}},
                },
            },
            render=render_read_file,
        ),
        execute=execute,
        is_concurrency_safe=_always_parallel,
        present_call=present_read_file_call,
    )


def list_dir_tool(root: Path | str) -> ToolDefinition:
    """``list_dir``: the entries of a workspace directory, sorted by name."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        return list_dir(workspace, args, run_ctx)

    return define_tool(
        name="list_dir",
        description=(
            "List a directory of the workspace: names sorted, each with its `type` (the text"
            " listing marks directories with `/`; the names themselves never end in it), file"
            f" sizes in bytes, at most {MAX_LIST_ENTRIES} entries."
        ),
        parameters={
            "path": {
                "type": "string",
                "description": "Directory path relative to the workspace root (default `.`).",
            },
            "include_hidden": {
                "type": "boolean",
                "description": "Also list entries whose name starts with a dot.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "entries": {
                        "type": "array",
                        "required": True,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string", "required": True},
                                "type": {
                                    "type": "string",
                                    "required": True,
                                    "enum": ["file", "directory", "symlink", "other"],
                                },
                                "size": {
                                    "oneOf": [{"type": "integer"}, {"type": "null"}],
                                    "required": True,
                                },
                            },
                        },
                    },
                    "total": {"type": "integer", "required": True},
                },
            },
            render=render_list_dir,
        ),
        execute=execute,
        is_concurrency_safe=_always_parallel,
        present_call=present_list_dir_call,
    )


def write_file_tool(root: Path | str) -> ToolDefinition:
    """``write_file``: create or overwrite a UTF-8 text file (parent folders are created)."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        return write_file(workspace, args, run_ctx)

    return define_tool(
        name="write_file",
        description=(
            "Create or overwrite a UTF-8 text file in the workspace with `content`, creating "
            "missing parent folders. Prefer `edit_file` for small changes to an existing file."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "content": {
                "type": "string",
                "required": True,
                "description": "The complete new content of the file.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "created": {"type": "boolean", "required": True},
                    "bytes_written": {"type": "integer", "required": True},
                    "hunks": {"type": "array", "required": True, "items": _HUNK_SCHEMA},
                },
            },
            render=render_write_file,
            presentation_meta=write_file_meta,
        ),
        execute=execute,
        is_concurrency_safe=_always_exclusive,
        present_call=present_write_file_call,
        present_result=present_write_file_result,
    )


def edit_file_tool(root: Path | str) -> ToolDefinition:
    """``edit_file``: replace an exact string in a text file (or create a file from nothing)."""
    workspace = Workspace(root)

    def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        return edit_file(workspace, args, run_ctx)

    return define_tool(
        name="edit_file",
        description=(
            "Replace `old_string` with `new_string` in a UTF-8 text file of the workspace. "
            "`old_string` must match exactly once (quote enough surrounding lines), unless "
            "`replace_all` is true. An empty `old_string` creates a new file holding "
            "`new_string`."
        ),
        parameters={
            "path": _FILE_PATH_PARAMETER,
            "old_string": {
                "type": "string",
                "required": True,
                "description": "The exact text to replace, whitespace included.",
            },
            "new_string": {
                "type": "string",
                "required": True,
                "description": "The text to put in its place.",
            },
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one.",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "required": True},
                    "created": {"type": "boolean", "required": True},
                    "replacements": {"type": "integer", "required": True},
                    "hunks": {"type": "array", "required": True, "items": _HUNK_SCHEMA},
                },
            },
            render=render_edit_file,
            presentation_meta=edit_file_meta,
        ),
        execute=execute,
        is_concurrency_safe=_always_exclusive,
        present_call=present_edit_file_call,
        present_result=present_edit_file_result,
    )


def fs_tools(root: Path | str) -> list[ToolDefinition]:
    """The four file tools over the workspace at ``root``."""
    return [
        read_file_tool(root),
        list_dir_tool(root),
        write_file_tool(root),
        edit_file_tool(root),
    ]
