"""The example tools, called directly through their definitions with a small run context.

Real files under ``tmp_path``, real shell commands. The pipeline (validation of results,
rendering, meta) is exercised end to end elsewhere; here each test checks one behaviour of a
tool body, its renderer, its classifier or its presenters.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import resource
import select
import stat
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

from dsh_tools.actors import NEVER_ABORTED, AbortController, AbortError, AbortSignal
from dsh_tools.examples import (
    DEFAULT_BASH_TIMEOUT_MS,
    DEFAULT_READ_LIMIT,
    WorkspaceError,
    _fs_read,
    _fs_write,
    bash_tool,
    edit_file_tool,
    example_tools,
    hunks,
    list_dir_tool,
    parse_bash_output,
    read_file_tool,
    write_file_tool,
)
from dsh_tools.examples._fs_common import MAX_EDIT_BYTES
from dsh_tools.examples._fs_read import MAX_READ_BYTES
from dsh_tools.examples._workspace import Workspace
from dsh_tools.registry import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    TerminalCallView,
    TerminalResultView,
    ToolResult,
    snapshot_json,
    validate_json_schema_value,
)


class RunContext:
    """The parts of a run context a body uses: a signal and ``defer_context``."""

    def __init__(self, signal: AbortSignal = NEVER_ABORTED, name: str = "tool") -> None:
        self.signal = signal
        self.call_id = "call-1"
        self.name = name
        self.arguments: Any = None
        self.agent = None
        self.parent = None
        self.token = object()
        self.deferred: list[Any] = []

    def defer_context(self, context: Any) -> None:
        self.deferred.append(context)


def call(definition: Any, args: Mapping[str, Any], signal: AbortSignal = NEVER_ABORTED) -> Any:
    """Run ``definition.execute`` like the pipeline does: frozen arguments, sync or async body.

    The returned value is checked against the definition's output schema.
    """
    frozen = snapshot_json(dict(args))
    ctx = RunContext(signal, definition.name)
    ctx.arguments = frozen
    outcome = definition.execute(frozen, ctx)
    if inspect.isawaitable(outcome):
        outcome = asyncio.run(_settle(outcome))
    value = snapshot_json(outcome)
    assert validate_json_schema_value(definition.output.schema, value) == []
    return value


async def _settle(awaitable: Any) -> Any:
    return await awaitable


def text_of(definition: Any, args: Mapping[str, Any], value: Any) -> str:
    [block] = definition.output.render(snapshot_json(dict(args)), value)
    assert block["type"] == "text"
    text: str = block["text"]
    return text


def durable(
    definition: Any, args: Mapping[str, Any], value: Any, *, is_error: bool = False
) -> ToolResult:
    """The durable result the pipeline would persist for a direct call."""
    frozen = snapshot_json(dict(args))
    content = definition.output.render(frozen, value)
    projector = definition.output.presentation_meta
    meta = projector(frozen, value) if projector is not None else UNSET
    return ToolResult(content=content, is_error=is_error, meta=meta)


def failed(message: str) -> ToolResult:
    return ToolResult(content=[{"type": "text", "text": f"Error: {message}"}], is_error=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("outside\n")
    return workspace


# --- the set -----------------------------------------------------------------------------------


def test_example_tools_are_the_five_tools_with_classifiers(root: Path) -> None:
    tools = {tool.name: tool for tool in example_tools(root)}

    assert list(tools) == ["read_file", "list_dir", "write_file", "edit_file", "bash"]
    assert tools["read_file"].is_concurrency_safe({"path": "a"}) is True
    assert tools["list_dir"].is_concurrency_safe({}) is True
    assert tools["write_file"].is_concurrency_safe({"path": "a", "content": ""}) is False
    assert (
        tools["edit_file"].is_concurrency_safe({"path": "a", "old_string": "x", "new_string": "y"})
        is False
    )
    assert tools["bash"].is_concurrency_safe({"command": "ls"}) is False


def test_bash_declares_its_timeout(root: Path) -> None:
    assert bash_tool(root).timeout_ms == DEFAULT_BASH_TIMEOUT_MS
    assert bash_tool(root, timeout_ms=500).timeout_ms == 500
    assert read_file_tool(root).timeout_ms is None


# --- workspace confinement ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../secret.txt", "sub/../../secret.txt"])
def test_relative_paths_escaping_the_workspace_are_refused(root: Path, path: str) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace") as raised:
        call(read_file_tool(root), {"path": path})

    assert raised.value.code == "PATH_OUTSIDE_WORKSPACE"


def test_absolute_paths_outside_the_workspace_are_refused(root: Path) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(read_file_tool(root), {"path": str(root.parent / "secret.txt")})


def test_absolute_paths_inside_the_workspace_are_accepted(root: Path) -> None:
    (root / "a.txt").write_text("one\n")

    value = call(read_file_tool(root), {"path": str(root / "a.txt")})

    assert value["path"] == "a.txt"


def test_symlinks_leading_out_of_the_workspace_are_refused(root: Path) -> None:
    (root / "link").symlink_to(root.parent)

    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(read_file_tool(root), {"path": "link/secret.txt"})


def test_writes_escaping_the_workspace_change_nothing(root: Path) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(write_file_tool(root), {"path": "../planted.txt", "content": "x"})

    assert not (root.parent / "planted.txt").exists()


@pytest.fixture
def swapped_after_check(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``root/d`` (holding ``victim.txt``) is replaced by a link to a folder outside the
    workspace right after each path is checked, as a program with write access to the workspace
    racing a tool would; returns that outside folder, which holds its own ``victim.txt``."""
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("outside secret\n")
    (root / "d").mkdir()
    (root / "d" / "victim.txt").write_text("inside\n")
    checked = Workspace.resolve

    def resolve_then_swap(self: Workspace, path: str) -> Path:
        resolved = checked(self, path)
        if (root / "d").is_dir() and not (root / "d").is_symlink():
            (root / "d").rename(root / "d.moved")
            (root / "d").symlink_to(outside)
        return resolved

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)
    return outside


@pytest.mark.parametrize(
    ("make", "args"),
    [
        (read_file_tool, {"path": "d/victim.txt"}),
        (list_dir_tool, {"path": "d"}),
        (write_file_tool, {"path": "d/victim.txt", "content": "OWNED"}),
        (write_file_tool, {"path": "d/planted.txt", "content": "OWNED"}),
        (edit_file_tool, {"path": "d/victim.txt", "old_string": "inside", "new_string": "OWNED"}),
    ],
    ids=["read", "list", "overwrite", "create", "edit"],
)
def test_a_folder_swapped_for_a_link_after_the_check_leads_nowhere_outside(
    root: Path, swapped_after_check: Path, make: Any, args: dict[str, Any]
) -> None:
    with pytest.raises(WorkspaceError, match="changed while in use") as raised:
        call(make(root), args)

    assert raised.value.code == "PATH_OUTSIDE_WORKSPACE"
    assert sorted(os.listdir(swapped_after_check)) == ["victim.txt"]
    assert (swapped_after_check / "victim.txt").read_text() == "outside secret\n"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("make", [read_file_tool, edit_file_tool, write_file_tool])
def test_a_fifo_in_the_workspace_is_refused_without_waiting_for_a_writer(
    root: Path, make: Any
) -> None:
    os.mkfifo(root / "pipe")
    args: dict[str, Any] = {"path": "pipe"}
    if make is edit_file_tool:
        args |= {"old_string": "a", "new_string": "b"}
    elif make is write_file_tool:
        args["content"] = "x"

    with pytest.raises(WorkspaceError, match="not a regular file") as raised:
        call(make(root), args)

    assert raised.value.code == "NOT_A_FILE"
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)


def test_bash_workdir_escaping_the_workspace_is_refused(root: Path) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(bash_tool(root), {"command": "pwd", "workdir": ".."})


# --- read_file ---------------------------------------------------------------------------------


def test_read_file_returns_numbered_lines(root: Path) -> None:
    (root / "a.txt").write_text("alpha\nbeta\n")
    tool = read_file_tool(root)

    value = call(tool, {"path": "a.txt"})

    assert value == {
        "path": "a.txt",
        "text": "alpha\nbeta\n",
        "start_line": 1,
        "line_count": 2,
        "has_more": False,
    }
    assert text_of(tool, {"path": "a.txt"}, value) == "     1\talpha\n     2\tbeta"


def test_read_file_says_how_many_bytes_of_the_lines_it_shows_are_not_utf8(root: Path) -> None:
    # Latin-1 "café" and a lone continuation byte; the third line is plain, and an honest
    # U+FFFD in the file is not counted.
    (root / "a.txt").write_bytes(b"caf\xe9\n\x80 and \xef\xbf\xbd\nplain\n")
    tool = read_file_tool(root)

    value = call(tool, {"path": "a.txt"})

    assert value["text"] == "caf\ufffd\n\ufffd and \ufffd\nplain\n"
    assert value["not_utf8_bytes"] == 2
    assert text_of(tool, {"path": "a.txt"}, value).splitlines()[-1] == (
        "(2 bytes are not UTF-8 in these lines, shown as U+FFFD: edit_file refuses this file, "
        "and write_file would replace the file's bytes with what you write)"
    )
    # Only the lines returned count.
    assert "not_utf8_bytes" not in call(tool, {"path": "a.txt", "offset": 3})
    assert call(tool, {"path": "a.txt", "limit": 1})["not_utf8_bytes"] == 1


@pytest.mark.parametrize(
    ("ending", "undecodable"),
    [
        (b"\xff", 1),  # a byte no character starts with, at the end of the file
        (b"\xe2\x82", 2),  # a character the file itself cut short
        (b"\xc3\n", 1),  # the same, before the newline
        (b"\xff" + b"b" * 10 + b"\n", 1),  # cut there, but not inside a character
    ],
)
def test_read_file_counts_undecodable_bytes_at_the_cap(
    root: Path, ending: bytes, undecodable: int
) -> None:
    data = b"a" * (MAX_READ_BYTES - len(ending.rstrip(b"\n").rstrip(b"b"))) + ending
    (root / "long.txt").write_bytes(data)
    assert call(read_file_tool(root), {"path": "long.txt"})["not_utf8_bytes"] == undecodable


def test_read_file_says_which_lines_it_cut(root: Path) -> None:
    # A model (or a program parsing the text) learns that a line is not whole: no offset
    # reaches the rest of it.
    (root / "long.txt").write_bytes(b"a" * (MAX_READ_BYTES + 5) + b"\nnext\n")
    tool = read_file_tool(root)

    value = call(tool, {"path": "long.txt", "limit": 1})

    assert value["text"] == "a" * MAX_READ_BYTES + "\n"
    assert value["cut_lines"] == [1]
    assert text_of(tool, {"path": "long.txt", "limit": 1}, value).splitlines()[-1] == (
        f"(line 1 is longer than {MAX_READ_BYTES} bytes: only its first {MAX_READ_BYTES} bytes"
        " are shown, and no offset reaches the rest)"
    )
    assert "cut_lines" not in call(tool, {"path": "long.txt", "offset": 2})


def test_read_file_keeps_a_last_line_exactly_as_long_as_the_cap(root: Path) -> None:
    (root / "cap.txt").write_bytes(b"a" * MAX_READ_BYTES)
    value = call(read_file_tool(root), {"path": "cap.txt"})
    assert value["text"] == "a" * MAX_READ_BYTES
    assert "cut_lines" not in value


@pytest.mark.parametrize("character", ["\u20ac", "\U0001f600", "\u00e9"])
def test_read_file_cuts_an_overlong_line_between_characters(root: Path, character: str) -> None:
    # The cut at MAX_READ_BYTES falls inside the character: valid text is not reported as
    # undecodable.
    line = b"a" * (MAX_READ_BYTES - 1) + character.encode() * 10
    (root / "long.txt").write_bytes(line + b"\nnext\n")
    value = call(read_file_tool(root), {"path": "long.txt", "limit": 1})
    assert "not_utf8_bytes" not in value
    assert value["text"] == "a" * (MAX_READ_BYTES - 1) + "\n"


def test_read_file_numbers_lines_only_at_newlines(root: Path) -> None:
    (root / "a.txt").write_bytes(b"page\x0cbreak\r\nlast")
    tool = read_file_tool(root)

    value = call(tool, {"path": "a.txt"})

    assert value["line_count"] == 2
    assert text_of(tool, {"path": "a.txt"}, value) == "     1\tpage\x0cbreak\n     2\tlast"


def test_read_file_pages_with_offset_and_limit(root: Path) -> None:
    (root / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    tool = read_file_tool(root)
    args = {"path": "a.txt", "offset": 4, "limit": 3}

    value = call(tool, args)

    assert value["text"] == "line 4\nline 5\nline 6\n"
    assert value["has_more"] is True
    assert text_of(tool, args, value).splitlines() == [
        "     4\tline 4",
        "     5\tline 5",
        "     6\tline 6",
        "(more lines follow; continue with offset=7)",
    ]


def test_read_file_applies_its_default_line_limit(root: Path) -> None:
    (root / "long.txt").write_text("x\n" * (DEFAULT_READ_LIMIT + 5))

    value = call(read_file_tool(root), {"path": "long.txt"})

    assert value["line_count"] == DEFAULT_READ_LIMIT
    assert value["has_more"] is True


def test_read_file_reports_an_offset_past_the_end(root: Path) -> None:
    (root / "a.txt").write_text("one\n")
    tool = read_file_tool(root)

    value = call(tool, {"path": "a.txt", "offset": 9})

    assert value["line_count"] == 0
    assert text_of(tool, {"path": "a.txt"}, value) == "(no lines at offset 9 in a.txt)"


def test_read_file_refuses_missing_and_binary_files(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01")
    tool = read_file_tool(root)

    with pytest.raises(WorkspaceError, match=r'"nope\.txt" does not exist'):
        call(tool, {"path": "nope.txt"})
    with pytest.raises(WorkspaceError, match="binary file"):
        call(tool, {"path": "blob.bin"})
    with pytest.raises(WorkspaceError, match="offset"):
        call(tool, {"path": "blob.bin", "offset": 0})


def test_read_file_stops_when_the_call_is_aborted(root: Path) -> None:
    (root / "a.txt").write_text("one\n")

    with pytest.raises(AbortError):
        call(read_file_tool(root), {"path": "a.txt"}, AbortSignal.aborted_signal())


def test_a_path_that_cannot_be_resolved_is_a_workspace_error(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python's realpath raises EINVAL when a link turns into a directory as it reads it.
    def racing(path: Any, **kwargs: Any) -> str:
        raise OSError(22, "Invalid argument")

    tool = read_file_tool(root)
    monkeypatch.setattr(os.path, "realpath", racing)
    with pytest.raises(WorkspaceError) as raised:
        call(tool, {"path": "d/a.txt"})
    assert raised.value.code == "IO_ERROR"


@pytest.mark.timeout(30)
def test_read_file_jumps_over_the_holes_of_a_sparse_file(root: Path) -> None:
    # Text, then a terabyte hole, then two short lines: the hole ends no line, and reading
    # it would take hours.
    with open(root / "sparse.txt", "wb") as file:
        file.write(b"a" * 9000)
        file.seek(1 << 40)
        file.write(b"\nb\nc\n")
    tool = read_file_tool(root)
    assert call(tool, {"path": "sparse.txt", "offset": 2}) == {
        "path": "sparse.txt",
        "text": "b\nc\n",
        "start_line": 2,
        "line_count": 2,
        "has_more": False,
    }
    with open(root / "sparse.txt", "r+b") as file:
        file.truncate(1 << 40)  # now the hole runs to the end
    value = call(tool, {"path": "sparse.txt"})
    assert value["line_count"] == 1
    assert not value["has_more"]


@pytest.mark.timeout(30)
def test_read_file_skipping_an_endless_line_stops_when_the_call_is_aborted(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Text, then a terabyte hole with no newline, on a file system that cannot tell holes
    # from data: skipping the rest of that first line would read all of it.
    monkeypatch.setattr(_fs_read, "_past_hole", lambda handle: True)
    with open(root / "sparse.txt", "wb") as file:
        file.write(b"a" * 9000)
        file.truncate(1 << 40)
    controller = AbortController()
    threading.Timer(0.2, controller.abort, args=("enough",)).start()

    with pytest.raises(AbortError):
        call(read_file_tool(root), {"path": "sparse.txt", "limit": 1}, controller.signal)


@pytest.mark.parametrize(
    ("args", "title", "line"),
    [
        ({"path": "src/a.py"}, "Read src/a.py", 1),
        ({"path": "src/a.py", "limit": 10}, "Read src/a.py (1 - 10)", 1),
        ({"path": "src/a.py", "offset": 5, "limit": 10}, "Read src/a.py (5 - 14)", 5),
        ({"path": "src/a.py", "offset": 5}, "Read src/a.py (from line 5)", 5),
        ({"path": "src/a.py", "offset": 5, "limit": 0}, "Read src/a.py (from line 5)", 5),
    ],
)
def test_read_file_call_card_titles(args: dict[str, Any], title: str, line: int) -> None:
    view = read_file_tool(".").present_call(snapshot_json(args))

    assert view == GenericCallView(
        title=title, kind="read", locations=[FileLocation(path="src/a.py", line=line)]
    )


# --- list_dir ----------------------------------------------------------------------------------


def test_list_dir_lists_sorted_entries_with_types_and_sizes(root: Path) -> None:
    (root / "b.txt").write_text("12345")
    (root / "a_dir").mkdir()
    (root / ".hidden").write_text("")
    (root / "c_link").symlink_to("b.txt")
    tool = list_dir_tool(root)

    value = call(tool, {})

    assert value == {
        "path": ".",
        "entries": [
            {"name": "a_dir", "type": "directory", "size": None},
            {"name": "b.txt", "type": "file", "size": 5},
            {"name": "c_link", "type": "symlink", "size": None},
        ],
        "total": 3,
    }
    assert text_of(tool, {}, value) == ".:\n  a_dir/\n  b.txt  (5 bytes)\n  c_link@"


def test_read_file_description_says_the_value_s_text_is_not_numbered(root: Path) -> None:
    # The numbers are in the text shown to the model; a program reads the file's own lines.
    (root / "a.txt").write_text("one\ntwo\n")
    tool = read_file_tool(root)

    value = call(tool, {"path": "a.txt", "offset": 2})

    assert (value["text"], value["start_line"]) == ("two\n", 2)
    assert text_of(tool, {"path": "a.txt", "offset": 2}, value) == "     2\ttwo"
    assert "`text` holds them as they are in the file" in tool.description


def test_list_dir_description_says_how_a_program_tells_directories_apart(root: Path) -> None:
    # A Code Mode program reads the value, whose names carry no `/`: the description the model
    # is given names the `type` field rather than promising a mark on the names.
    (root / "a_dir").mkdir()
    tool = list_dir_tool(root)

    [entry] = call(tool, {})["entries"]

    assert entry == {"name": "a_dir", "type": "directory", "size": None}
    assert "each with its `type`" in tool.description
    assert "the names themselves never end in it" in tool.description


def test_list_dir_shows_hidden_entries_on_request(root: Path) -> None:
    (root / ".hidden").write_text("")

    value = call(list_dir_tool(root), {"include_hidden": True})

    assert [entry["name"] for entry in value["entries"]] == [".hidden"]


def test_list_dir_refuses_a_file(root: Path) -> None:
    (root / "a.txt").write_text("")

    with pytest.raises(WorkspaceError, match="not a directory"):
        call(list_dir_tool(root), {"path": "a.txt"})


def test_list_dir_call_card() -> None:
    tool = list_dir_tool(".")

    assert tool.present_call(snapshot_json({"path": "src"})) == GenericCallView(
        title="List src", kind="read", locations=[FileLocation(path="src")]
    )
    assert tool.present_call(snapshot_json({})).title == "List ."


# --- write_file --------------------------------------------------------------------------------

TEN_LINES = "".join(f"line {n}\n" for n in range(1, 11))


def test_write_file_creates_a_file_and_its_folders(root: Path) -> None:
    tool = write_file_tool(root)
    args = {"path": "new/dir/a.txt", "content": "hello\n"}

    value = call(tool, args)

    assert (root / "new/dir/a.txt").read_text() == "hello\n"
    assert value == {"path": "new/dir/a.txt", "created": True, "bytes_written": 6, "hunks": []}
    assert text_of(tool, args, value) == "Created new/dir/a.txt (6 bytes)"


def test_write_file_meta_of_a_create_is_an_empty_diff_list(root: Path) -> None:
    tool = write_file_tool(root)
    args = {"path": "a.txt", "content": "hello\n"}

    value = call(tool, args)

    assert tool.output.presentation_meta(snapshot_json(args), value) == {"diffs": []}


def test_write_file_overwrite_meta_holds_hunks_with_three_lines_of_context(root: Path) -> None:
    (root / "a.txt").write_text(TEN_LINES)
    tool = write_file_tool(root)
    args = {"path": "a.txt", "content": TEN_LINES.replace("line 6\n", "LINE SIX\n")}

    value = call(tool, args)

    assert value["created"] is False
    assert tool.output.presentation_meta(snapshot_json(args), value) == {
        "diffs": [
            {
                "path": "a.txt",
                "old_text": "line 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\n",
                "new_text": "line 3\nline 4\nline 5\nLINE SIX\nline 7\nline 8\nline 9\n",
            }
        ]
    }
    assert (
        text_of(tool, args, value)
        == f"Wrote {len(args['content'])} bytes to a.txt (1 changed region)"
    )


def test_write_file_keeps_the_mode_of_an_overwritten_file(root: Path) -> None:
    target = root / "run.sh"
    target.write_text("echo old\n")
    target.chmod(0o750)

    call(write_file_tool(root), {"path": "run.sh", "content": "echo new\n"})

    assert target.read_text() == "echo new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(os.listdir(root)) == ["run.sh"]


def test_write_file_aborted_changes_nothing(root: Path) -> None:
    (root / "a.txt").write_text("old\n")

    with pytest.raises(AbortError):
        call(
            write_file_tool(root),
            {"path": "a.txt", "content": "new\n"},
            AbortSignal.aborted_signal(),
        )

    assert (root / "a.txt").read_text() == "old\n"


def test_write_file_refuses_a_directory(root: Path) -> None:
    (root / "d").mkdir()

    with pytest.raises(WorkspaceError, match="is a directory"):
        call(write_file_tool(root), {"path": "d", "content": "x"})


def test_write_file_call_card_is_a_whole_file_diff() -> None:
    view = write_file_tool(".").present_call(snapshot_json({"path": "a.txt", "content": "hi\n"}))

    assert view == DiffCallView(
        title="Write a.txt",
        diffs=[FileDiff(path="a.txt", old_text=None, new_text="hi\n")],
        locations=[FileLocation(path="a.txt")],
    )


def test_write_file_result_card_shows_the_applied_hunks(root: Path) -> None:
    (root / "a.txt").write_text(TEN_LINES)
    tool = write_file_tool(root)
    args = {"path": "a.txt", "content": TEN_LINES.replace("line 2\n", "two\n")}
    value = call(tool, args)

    view = tool.present_result(snapshot_json(args), durable(tool, args, value))

    assert view == DiffResultView(
        diffs=[
            FileDiff(
                path="a.txt",
                old_text="line 1\nline 2\nline 3\nline 4\nline 5\n",
                new_text="line 1\ntwo\nline 3\nline 4\nline 5\n",
            )
        ]
    )


def test_write_file_result_card_of_a_create_is_the_whole_file(root: Path) -> None:
    tool = write_file_tool(root)
    args = {"path": "a.txt", "content": "hi\n"}
    value = call(tool, args)

    view = tool.present_result(snapshot_json(args), durable(tool, args, value))

    assert view == DiffResultView(diffs=[FileDiff(path="a.txt", old_text=None, new_text="hi\n")])


def test_write_file_result_card_is_none_on_error() -> None:
    tool = write_file_tool(".")
    args = snapshot_json({"path": "a.txt", "content": "hi\n"})

    assert tool.present_result(args, failed('"a.txt" is a directory, not a file')) is None


# --- edit_file ---------------------------------------------------------------------------------


def test_edit_file_replaces_one_exact_occurrence(root: Path) -> None:
    (root / "a.txt").write_text(TEN_LINES)
    tool = edit_file_tool(root)
    args = {"path": "a.txt", "old_string": "line 5\n", "new_string": "five\n"}

    value = call(tool, args)

    assert (root / "a.txt").read_text() == TEN_LINES.replace("line 5\n", "five\n")
    assert value["replacements"] == 1
    assert value["hunks"] == [
        {
            "old_start": 2,
            "old_text": "line 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\n",
            "new_start": 2,
            "new_text": "line 2\nline 3\nline 4\nfive\nline 6\nline 7\nline 8\n",
        }
    ]
    assert text_of(tool, args, value) == "Edited a.txt: replaced 1 occurrence"


def test_edit_file_refuses_a_missing_or_ambiguous_match(root: Path) -> None:
    (root / "a.txt").write_text("x = 1\nx = 1\n")
    tool = edit_file_tool(root)

    with pytest.raises(WorkspaceError, match="not found"):
        call(tool, {"path": "a.txt", "old_string": "y = 2", "new_string": "y = 3"})
    with pytest.raises(WorkspaceError, match="occurs 2 times"):
        call(tool, {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"})

    assert (root / "a.txt").read_text() == "x = 1\nx = 1\n"


def test_edit_file_says_when_old_string_misses_only_the_files_crlf(root: Path) -> None:
    # read_file shows the lines without their "\r": a model quoting them as shown is told why
    # the text does not match.
    (root / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    tool = edit_file_tool(root)

    with pytest.raises(WorkspaceError) as missed:
        call(tool, {"path": "a.txt", "old_string": "one\ntwo", "new_string": "1\n2"})
    assert str(missed.value) == (
        'old_string was not found in "a.txt"; the file ends its lines with \\r\\n (CRLF),'
        " which read_file does not show: write them so in old_string and new_string"
    )
    with pytest.raises(WorkspaceError) as absent:
        call(tool, {"path": "a.txt", "old_string": "three\nfour", "new_string": "x"})
    assert str(absent.value) == 'old_string was not found in "a.txt"'

    call(tool, {"path": "a.txt", "old_string": "one\r\ntwo", "new_string": "1\r\n2"})
    assert (root / "a.txt").read_bytes() == b"1\r\n2\r\n"


def test_edit_file_replace_all(root: Path) -> None:
    (root / "a.txt").write_text("x = 1\nx = 1\n")

    value = call(
        edit_file_tool(root),
        {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": True},
    )

    assert value["replacements"] == 2
    assert (root / "a.txt").read_text() == "x = 2\nx = 2\n"


def test_edit_file_with_empty_old_string_creates_a_file(root: Path) -> None:
    tool = edit_file_tool(root)
    args = {"path": "new.txt", "old_string": "", "new_string": "fresh\n"}

    value = call(tool, args)

    assert (root / "new.txt").read_text() == "fresh\n"
    assert value["created"] is True
    assert tool.output.presentation_meta(snapshot_json(args), value) == {
        "diffs": [{"path": "new.txt", "old_text": None, "new_text": "fresh\n"}]
    }


def test_edit_file_with_empty_old_string_refuses_to_clobber_content(root: Path) -> None:
    (root / "a.txt").write_text("keep\n")

    with pytest.raises(WorkspaceError, match="already has content"):
        call(edit_file_tool(root), {"path": "a.txt", "old_string": "", "new_string": "x"})

    assert (root / "a.txt").read_text() == "keep\n"


def test_edit_file_refuses_identical_strings(root: Path) -> None:
    (root / "a.txt").write_text("same\n")

    with pytest.raises(WorkspaceError, match="identical"):
        call(edit_file_tool(root), {"path": "a.txt", "old_string": "same", "new_string": "same"})


def test_edit_file_call_card() -> None:
    tool = edit_file_tool(".")

    assert tool.present_call(
        snapshot_json({"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})
    ) == DiffCallView(
        title="Edit a.py",
        diffs=[FileDiff(path="a.py", old_text="x = 1", new_text="x = 2")],
        locations=[FileLocation(path="a.py")],
    )
    created = tool.present_call(
        snapshot_json({"path": "n.py", "old_string": "", "new_string": "y"})
    )
    assert created.diffs == (FileDiff(path="n.py", old_text=None, new_text="y"),)


def test_edit_file_result_card_comes_from_meta_only(root: Path) -> None:
    (root / "a.txt").write_text("a\nb\n")
    tool = edit_file_tool(root)
    args = {"path": "a.txt", "old_string": "b", "new_string": "c"}
    value = call(tool, args)
    frozen = snapshot_json(args)

    view = tool.present_result(frozen, durable(tool, args, value))

    assert view == DiffResultView(
        diffs=[FileDiff(path="a.txt", old_text="a\nb\n", new_text="a\nc\n")]
    )
    no_meta = ToolResult(content=[{"type": "text", "text": "Edited a.txt"}], is_error=False)
    assert tool.present_result(frozen, no_meta) is None
    old_meta = ToolResult(content=no_meta.content, is_error=False, meta={"diffs": [{"p": 1}]})
    assert tool.present_result(frozen, old_meta) is None


# --- bash --------------------------------------------------------------------------------------


def _terminates(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` (not necessarily our child) is gone or exits within ``within``
    seconds, awaited through a pidfd rather than polled."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], within)
        return bool(readable)
    finally:
        os.close(fd)


def test_bash_runs_a_command_and_renders_the_exit_marker(root: Path) -> None:
    tool = bash_tool(root)

    value = call(tool, {"command": "echo hello"})

    assert value == {
        "stdout": "hello\n",
        "stderr": "",
        "exit_code": 0,
        "signal": None,
        "truncated": False,
    }
    assert text_of(tool, {}, value) == "hello\n[exit code: 0]"


def test_bash_renders_stderr_and_a_failing_exit_code(root: Path) -> None:
    tool = bash_tool(root)

    value = call(tool, {"command": "echo out; echo err >&2; exit 3"})

    assert value["exit_code"] == 3
    assert text_of(tool, {}, value) == "out\n[stderr]\nerr\n[exit code: 3]"


def test_bash_renders_a_silent_command(root: Path) -> None:
    tool = bash_tool(root)

    assert text_of(tool, {}, call(tool, {"command": "true"})) == "(no output)\n[exit code: 0]"


def test_bash_runs_in_the_workspace_or_its_workdir(root: Path) -> None:
    (root / "sub").mkdir()
    tool = bash_tool(root)

    assert call(tool, {"command": "pwd -P"})["stdout"] == f"{root.resolve()}\n"
    assert (
        call(tool, {"command": "pwd -P", "workdir": "sub"})["stdout"] == f"{root.resolve()}/sub\n"
    )


def test_bash_reports_a_command_killed_by_a_signal(root: Path) -> None:
    tool = bash_tool(root)

    value = call(tool, {"command": "kill -KILL $$"})

    assert value["exit_code"] is None
    assert value["signal"] == "SIGKILL"
    assert text_of(tool, {}, value).endswith("\n[signal: SIGKILL]")


def test_bash_caps_captured_output(root: Path) -> None:
    tool = bash_tool(root, max_output_bytes=1000)

    value = call(tool, {"command": "head -c 100000 /dev/zero | tr '\\0' a"})

    assert value["stdout"] == "a" * 1000
    assert value["truncated"] is True
    assert text_of(tool, {}, value).endswith("\n[output truncated]\n[exit code: 0]")


def test_bash_kills_background_jobs_when_the_shell_exits(root: Path) -> None:
    value = call(bash_tool(root), {"command": "sleep 30 & echo $!"})

    pid = int(value["stdout"])
    assert value["exit_code"] == 0
    assert _terminates(pid)


DETACH = (
    "setsid -f sh -c 'echo $$ > detached.pid; exec sleep 30' > /dev/null 2>&1; "
    "while [ ! -s detached.pid ]; do sleep 0.01; done"
)
"""A command leaving a sleeper in a session of its own (a fork, then ``setsid``)."""


def test_bash_kills_what_left_the_process_group_when_the_command_finishes(root: Path) -> None:
    value = call(bash_tool(root), {"command": DETACH + "; echo done"})

    assert value["stdout"] == "done\n"
    assert _terminates(int((root / "detached.pid").read_text()))


@pytest.mark.parametrize("how", ["abort", "cancel"])
def test_bash_kills_what_left_the_process_group_when_the_call_is_stopped(
    root: Path, how: str
) -> None:
    tool = bash_tool(root)
    controller = AbortController()
    args = snapshot_json({"command": DETACH + "; touch ready; sleep 30"})

    async def scenario() -> None:
        body = asyncio.ensure_future(tool.execute(args, RunContext(controller.signal, "bash")))
        while not (root / "ready").exists():
            await asyncio.sleep(0.01)
        if how == "abort":
            controller.abort("user pressed stop")
            with pytest.raises(AbortError):
                await asyncio.wait_for(body, timeout=10)
        else:
            body.cancel()
            with pytest.raises(asyncio.CancelledError):
                await body

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))

    assert _terminates(int((root / "detached.pid").read_text()))


HOST_DIES = """
import asyncio, os, signal, sys
from dsh_tools.actors import NEVER_ABORTED
from dsh_tools.examples import bash_tool
from dsh_tools.registry import snapshot_json

class Context:
    signal = NEVER_ABORTED
    call_id = "c1"
    agent = None

async def main():
    tool = bash_tool(sys.argv[1])
    command = sys.argv[2] + "; touch ready; sleep 30"
    body = asyncio.ensure_future(tool.execute(snapshot_json({"command": command}), Context()))
    while not os.path.exists(os.path.join(sys.argv[1], "ready")):
        await asyncio.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def test_bash_kills_what_it_started_when_the_host_dies(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HOST_DIES, str(root), DETACH], timeout=60, check=False
    )
    assert done.returncode == -9
    assert _terminates(int((root / "detached.pid").read_text()))


def test_bash_abort_kills_the_process_group_promptly(root: Path) -> None:
    fifo = root / "started"
    os.mkfifo(fifo)
    tool = bash_tool(root)
    controller = AbortController()
    args = snapshot_json({"command": "sleep 30 & echo $! > started; wait"})

    async def scenario() -> int:
        body = asyncio.ensure_future(tool.execute(args, RunContext(controller.signal, "bash")))
        loop = asyncio.get_running_loop()
        pid = int(await loop.run_in_executor(None, fifo.read_text))  # the job is running
        controller.abort("user pressed stop")
        with pytest.raises(AbortError):
            await asyncio.wait_for(body, timeout=10)
        return pid

    pid = asyncio.run(scenario())

    assert _terminates(pid)


def test_bash_already_aborted_starts_nothing(root: Path) -> None:
    with pytest.raises(AbortError):
        call(bash_tool(root), {"command": "touch ran"}, AbortSignal.aborted_signal())

    assert not (root / "ran").exists()


def test_bash_call_card_is_a_terminal() -> None:
    tool = bash_tool(".")

    assert tool.present_call(snapshot_json({"command": "ls"})) == TerminalCallView(title="ls")
    assert tool.present_call(
        snapshot_json({"command": "make", "description": "Build", "workdir": "src"})
    ) == TerminalCallView(title="make", description="Build", cwd="src")


def test_bash_result_card_parses_the_exit_marker(root: Path) -> None:
    tool = bash_tool(root)
    args = {"command": "echo out; exit 4"}
    value = call(tool, args)

    view = tool.present_result(snapshot_json(args), durable(tool, args, value))

    assert view == TerminalResultView(output="out\n", exit_code=4)


def test_bash_result_card_of_a_signal_death(root: Path) -> None:
    tool = bash_tool(root)
    args = {"command": "kill -TERM $$"}
    value = call(tool, args)

    view = tool.present_result(snapshot_json(args), durable(tool, args, value))

    assert view == TerminalResultView(output="", signal="SIGTERM")


def test_bash_result_marker_must_follow_a_newline() -> None:
    tool = bash_tool(".")
    result = ToolResult(content=[{"type": "text", "text": "[exit code: 5]"}], is_error=False)

    view = tool.present_result(snapshot_json({"command": "x"}), result)

    assert view == TerminalResultView(output="[exit code: 5]", exit_code=0)
    assert parse_bash_output("a\n[exit code: -1]") == ("a\n", -1, None)


def test_bash_result_card_of_an_error_is_a_console_fence() -> None:
    tool = bash_tool(".")

    view = tool.present_result(snapshot_json({"command": "x"}), failed("tool call aborted\n\n"))

    assert view == GenericResultView(
        content=[{"type": "text", "text": "```console\nError: tool call aborted\n```"}]
    )


def test_bash_result_card_declines_content_that_is_not_one_text_block() -> None:
    tool = bash_tool(".")
    args = snapshot_json({"command": "x"})
    two = ToolResult(
        content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], is_error=False
    )
    image = ToolResult(content=[{"type": "image", "data": "AAAA"}], is_error=False)

    assert tool.present_result(args, two) is None
    assert tool.present_result(args, image) is None


@pytest.mark.parametrize("make", [write_file_tool, edit_file_tool])
def test_a_file_too_large_to_read_whole_is_refused_before_it_is_read(root: Path, make: Any) -> None:
    # A sparse file claiming a terabyte: read whole to diff or edit it, it would take that much.
    with open(root / "huge.txt", "wb") as file:
        file.write(b"text\n")
        file.truncate(1 << 40)
    args: dict[str, Any] = {"path": "huge.txt"}
    if make is edit_file_tool:
        args |= {"old_string": "text", "new_string": "more"}
    else:
        args["content"] = "small\n"

    with pytest.raises(WorkspaceError, match="more than the 16777216") as raised:
        call(make(root), args)

    assert raised.value.code == "FILE_TOO_LARGE"
    assert os.path.getsize(root / "huge.txt") == 1 << 40


# --- what the write tools may cost and whose files they touch -----------------------------------


def test_a_rewrite_too_costly_to_match_line_by_line_is_shown_as_one_hunk(root: Path) -> None:
    # Matching the lines of an interleaving costs time quadratic in its size (a 16,000-line
    # file took 20 s of the host's CPU): past DIFF_WORK, everything between the common head
    # and tail is one hunk, though the first line's change alone would make a hunk of its own.
    lines = [f"line {i}\n" for i in range(4000)]
    old = "".join(lines)
    new = "".join(["top\n", *lines[1:100], *lines[100::2], *lines[101::2]])
    assert hunks(old, new) == [
        {"old_start": 1, "old_text": old, "new_start": 1, "new_text": new},
    ]
    (root / "a.txt").write_text(old)
    value = call(write_file_tool(root), {"path": "a.txt", "content": new})
    assert len(value["hunks"]) == 1
    assert (root / "a.txt").read_text() == new


def test_scattered_edits_of_a_long_file_keep_a_hunk_each() -> None:
    lines = [f"line {i}\n" for i in range(20_000)]
    edited = list(lines)
    for at in range(100, 20_000, 1000):
        edited[at] = "changed\n"
    shown = hunks("".join(lines), "".join(edited))
    assert [hunk["old_start"] for hunk in shown] == list(range(98, 20_000, 1000))
    assert all(hunk["new_text"].count("changed") == 1 for hunk in shown)


def test_edit_file_refuses_an_edit_whose_result_would_exceed_the_limit(root: Path) -> None:
    (root / "a.txt").write_text("a" * 2_000_000)
    args = {"path": "a.txt", "old_string": "a", "new_string": "b" * 500, "replace_all": True}
    with pytest.raises(WorkspaceError, match=r'^"a\.txt" would have 1000000000 bytes, more') as e:
        call(edit_file_tool(root), args)
    assert e.value.code == "FILE_TOO_LARGE"
    assert (root / "a.txt").stat().st_size == 2_000_000


def test_write_file_refuses_content_over_the_limit_before_comparing_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "big.txt").write_text("old\n")
    compared: list[int] = []
    monkeypatch.setattr(_fs_write, "hunks", lambda old, new: compared.append(1) or [])
    content = "x\n" * (MAX_EDIT_BYTES // 2 + 1)
    with pytest.raises(WorkspaceError, match="more than the 16777216 these tools write") as e:
        call(write_file_tool(root), {"path": "big.txt", "content": content})
    assert e.value.code == "FILE_TOO_LARGE"
    assert compared == []
    assert (root / "big.txt").read_text() == "old\n"


def test_equal_texts_give_no_hunks_however_long() -> None:
    text = "".join(f"line {i}\n" for i in range(401_000))
    assert hunks(text, text) == []


def test_an_existing_file_with_the_longest_name_can_be_rewritten(root: Path) -> None:
    name = "x" * 255
    (root / name).write_text("old\n")
    call(write_file_tool(root), {"path": name, "content": "new\n"})
    call(edit_file_tool(root), {"path": name, "old_string": "new", "new_string": "newer"})
    assert (root / name).read_text() == "newer\n"
    assert sorted(os.listdir(root)) == [name]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_a_rewritten_file_keeps_its_owner_and_group(root: Path) -> None:
    target = root / "theirs.txt"
    target.write_text("mine\n")
    os.chown(target, 65534, 65534)
    call(write_file_tool(root), {"path": "theirs.txt", "content": "written\n"})
    assert (target.stat().st_uid, target.stat().st_gid) == (65534, 65534)
    call(edit_file_tool(root), {"path": "theirs.txt", "old_string": "written", "new_string": "ok"})
    assert (target.stat().st_uid, target.stat().st_gid) == (65534, 65534)
    assert target.read_text() == "ok\n"


READ_ONLY_WRITER = """
import sys
from pathlib import Path
from dsh_tools.actors import NEVER_ABORTED
from dsh_tools.examples import WorkspaceError, edit_file_tool, write_file_tool
from dsh_tools.registry import snapshot_json

class Context:
    signal = NEVER_ABORTED
    call_id = "c1"
    agent = None

root = Path(sys.argv[1])
for tool, args in (
    (write_file_tool(root), {"path": "ro.txt", "content": "clobbered\\n"}),
    (edit_file_tool(root), {"path": "ro.txt", "old_string": "original", "new_string": "x"}),
):
    try:
        tool.execute(snapshot_json(args), Context())
    except WorkspaceError as exc:
        print(exc.code)
"""


def test_a_file_this_process_may_not_write_is_refused_though_its_folder_is_writable(
    root: Path,
) -> None:
    target = root / "ro.txt"
    target.write_text("original\n")
    target.chmod(0o444)
    command = [sys.executable, "-c", READ_ONLY_WRITER, str(root)]
    if os.geteuid() == 0:  # root may write any file: the tools run as another user
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run(
            [*as_nobody, sys.executable, "-c", "import dsh_tools.examples"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if probe.returncode != 0:  # an interpreter installed under root's private home, say
            pytest.skip(f"this interpreter cannot run as another user: {probe.stderr.strip()}")
        os.chown(root, 65534, 65534)
        os.chown(root.parent, 65534, 65534)
        command = [*as_nobody, *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["PERMISSION_DENIED", "PERMISSION_DENIED"], done.stderr
    assert target.read_text() == "original\n"


def test_bash_names_a_command_it_cannot_start_without_host_paths(root: Path) -> None:
    tool = bash_tool(root)
    for args, code, message in (
        ({"command": "echo a\0b"}, "INVALID_COMMAND", "the command holds a NUL character"),
        ({"command": "true " + "x" * 3_000_000}, "INVALID_COMMAND", "the command is too long"),
        ({"command": "true", "workdir": "missing"}, "NOT_FOUND", 'workdir "missing" does not'),
    ):
        with pytest.raises(WorkspaceError) as raised:
            call(tool, args)
        assert raised.value.code == code
        assert str(raised.value).startswith(message)
        assert str(root) not in str(raised.value)


def test_a_loop_of_symbolic_links_is_named_as_one(root: Path) -> None:
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    for tool in (read_file_tool(root), write_file_tool(root)):
        args = {"path": "loop1", "content": "x"} if tool.name == "write_file" else {"path": "loop1"}
        with pytest.raises(WorkspaceError, match=r'^path "loop1" is a loop of symbolic links') as e:
            call(tool, args)
        assert e.value.code == "INVALID_PATH"


def test_bash_commands_start_with_the_default_pipe_signals(root: Path) -> None:
    # Python ignores SIGPIPE, and an ignored signal stays ignored across exec: a pipeline's
    # writer would spin after its reader ended.
    tool = bash_tool(root)
    assert call(tool, {"command": "yes | head -n 1"})["stdout"] == "y\n"
    assert call(tool, {"command": "kill -PIPE $$; echo survived"})["signal"] == "SIGPIPE"
    value = call(tool, {"command": "grep SigIgn /proc/self/status"})
    assert int(value["stdout"].split()[1], 16) & (1 << 12 | 1 << 24) == 0  # PIPE, XFSZ


def test_bash_works_for_a_host_with_more_than_1024_descriptors_open(root: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        value = call(bash_tool(root), {"command": "sleep 0.2; echo late"})
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert value["stdout"] == "late\n"


def test_bash_cleans_up_after_a_command_that_kills_its_own_process_group(root: Path) -> None:
    value = call(bash_tool(root), {"command": DETACH + "; trap 'kill 0' EXIT; echo done"})

    assert value["stdout"] == "done\n"
    assert _terminates(int((root / "detached.pid").read_text()))


COUNT_ZOMBIES = (
    "import os\n"
    "parent, zombies = int(os.environ['SUPERVISOR']), 0\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        stat = open(f'/proc/{pid}/stat', 'rb').read()\n"
    "    except OSError:\n"
    "        continue\n"
    "    fields = stat[stat.rindex(b')') + 2 :].split()\n"
    "    zombies += fields[0] == b'Z' and int(fields[1]) == parent\n"
    "print(zombies)\n"
)


def test_bash_reaps_the_orphans_of_a_command_while_it_runs(root: Path) -> None:
    (root / "count.py").write_text(COUNT_ZOMBIES)
    command = (
        "for i in $(seq 300); do (true &); done; sleep 0.5; "
        f"SUPERVISOR=$PPID {sys.executable} count.py"
    )
    value = call(bash_tool(root), {"command": command})
    assert value["stdout"] == "0\n", value


def test_bash_kills_the_jobs_of_a_command_that_killed_its_supervisor(root: Path) -> None:
    command = "sleep 300 & echo $! > job.pid; kill -9 $PPID; sleep 0.2"
    value = call(bash_tool(root), {"command": command})
    assert value["signal"] == "SIGKILL"
    assert _terminates(int((root / "job.pid").read_text()))


def test_bash_kills_what_left_the_group_of_a_command_that_killed_its_supervisor(
    root: Path,
) -> None:
    value = call(bash_tool(root), {"command": DETACH + "; kill -9 $PPID; sleep 0.2"})
    assert value["signal"] == "SIGKILL"
    assert _terminates(int((root / "detached.pid").read_text()))


def test_bash_finds_what_a_command_left_without_pidfds(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfd_open = os.pidfd_open

    def refused(pid: int, flags: int = 0) -> int:
        # Refused to the tool. asyncio (Python 3.12+) watches the processes it starts through
        # pidfds too, having found them available when it first started one: on a kernel
        # without them it would never have asked.
        caller = inspect.currentframe()
        caller = caller.f_back if caller is not None else None
        if caller is not None and caller.f_globals.get("__name__", "").startswith("dsh_tools."):
            raise OSError(errno.ENOSYS, "pidfd_open is refused here")
        return pidfd_open(pid, flags)

    monkeypatch.setattr(os, "pidfd_open", refused)
    value = call(bash_tool(root), {"command": DETACH + "; kill -9 $PPID; sleep 0.2"})
    monkeypatch.undo()
    assert value["signal"] == "SIGKILL"
    assert _terminates(int((root / "detached.pid").read_text()))


_CANCEL_THEN_EXIT = """
import asyncio, sys
from pathlib import Path
from dsh_tools.actors import AbortController
from dsh_tools.examples import bash_tool
from dsh_tools.registry import snapshot_json
from test_example_tools import DETACH, RunContext

root = Path(sys.argv[1])

async def main():
    args = snapshot_json({"command": DETACH + "; touch ready; kill -STOP $PPID; sleep 30"})
    body = asyncio.ensure_future(
        bash_tool(root).execute(args, RunContext(AbortController().signal, "bash"))
    )
    while not (root / "ready").exists():
        await asyncio.sleep(0.01)
    body.cancel()
    try:
        await body
    except asyncio.CancelledError:
        pass

asyncio.run(main())
"""


def test_bash_leftovers_of_a_cancelled_call_are_gone_when_the_host_exits(root: Path) -> None:
    # The command stopped its supervisor, so the host searches for what it left, off the loop:
    # the host's exit waits for that search.
    subprocess.run(
        [sys.executable, "-c", _CANCEL_THEN_EXIT, str(root)],
        cwd=Path(__file__).parent,
        check=True,
        timeout=30,
    )
    assert _terminates(int((root / "detached.pid").read_text()), within=1.0)


@pytest.mark.parametrize("interpreter", ["", "/nonexistent/python3", "/bin/true"])
def test_bash_says_when_its_supervisor_cannot_start(
    root: Path, interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", interpreter)
    with pytest.raises(WorkspaceError, match=r"^the shell's supervisor ") as raised:
        call(bash_tool(root), {"command": "touch ran"})
    assert raised.value.code == "UNAVAILABLE"
    assert not (root / "ran").exists()
