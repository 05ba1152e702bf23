"""Every ```python block of README.md and docs/*.md runs and prints what its page says it prints,
so the examples cannot rot.

Each file's blocks run in order in one fresh interpreter (a reader goes down the page), in an
empty temporary folder, with this repository's interpreter and its installed extras.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import Block, Expected, expectations, fenced_blocks, mismatches, python_blocks

ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).resolve().parent / "docs_blocks.py"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_the_python_examples_of_each_document_run(document: Path, tmp_path: Path) -> None:
    if not python_blocks(document):
        pytest.skip(f"{document.name} has no python blocks")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(document)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{document.name}:\n{done.stdout}\n{done.stderr}"


def test_the_guide_and_the_readme_hold_runnable_examples() -> None:
    counts = {str(p.relative_to(ROOT)): len(python_blocks(p)) for p in DOCUMENTS}
    assert counts["README.md"] >= 1
    assert sum(counts.values()) >= 10, counts


def test_blocks_are_found_inside_list_items_and_behind_longer_fences() -> None:
    text = (
        "intro\n"
        "- item:\n"
        "\n"
        "  ```python\n"
        "  x = 1\n"
        "  if x:\n"
        "      y = 2\n"
        "  ```\n"
        "````markdown\n"
        "```python\n"
        "not a block of its own\n"
        "```\n"
        "````\n"
        "```console\n"
        "$ dsh-tools --version\n"
        "```\n"
    )
    blocks = fenced_blocks(text)
    assert [(b.language, b.line) for b in blocks] == [
        ("python", 5),
        ("markdown", 10),
        ("console", 15),
    ]
    assert blocks[0].source == "x = 1\nif x:\n    y = 2\n"
    assert blocks[1].source == "```python\nnot a block of its own\n```\n"


def test_the_guide_index_links_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    assert [page for page in pages if f"]({page})" not in index] == []


def test_a_print_says_what_it_prints_in_a_comment_after_it_or_in_the_lines_below() -> None:
    source = (
        "print(1)  # 1\n"
        "for n in [2, 3]:\n"
        "    print(\n"
        "        n\n"
        "    )\n"
        "    # 2\n"
        "    # 3\n"
        "print('no comment')\n"
        "x = 'print(4)  # a string, not a call'\n"
        "print('ab', '#', 'c')  # ab # c (prose after the printed text)\n"
        "sys.stdout.print(5)  # 5\n"
    )
    assert expectations(Block("python", 10, source)) == [
        Expected(10, ("1",), each_call=True),
        Expected(12, ("2", "3"), each_call=False),
        Expected(19, ("ab # c (prose after the printed text)",), each_call=True),
    ]


def test_what_is_printed_must_be_what_the_page_says() -> None:
    said = [
        Expected(1, ("[] (the list is empty)",), each_call=True),
        Expected(2, ("Error: ... is disconnected",), each_call=True),
        Expected(3, ("...", "class Tools:", "", "...", "end"), each_call=False),
    ]
    right = {
        1: ["[]\n"],
        2: ['Error: MCP server "x" is disconnected\n'],
        3: ["JsonValue = ...\n\n", "class Tools:\n\n    one\n    two\nend\n"],
    }
    assert mismatches(said, right) == []
    wrong = {1: ["[1]\n"], 3: ["class Tools:\nend\n"]}
    assert mismatches(said, wrong) == [
        "line 1: printed '[1]\\n'; the page says '[] (the list is empty)'",
        "line 2: the print never ran; the page says ('Error: ... is disconnected',)",
        "line 3: printed 'class Tools:\\nend\\n'; the page says "
        "('...', 'class Tools:', '', '...', 'end')",
    ]
    said_more = [Expected(1, ("Error: unknown tool",), each_call=True)]
    assert mismatches(said_more, {1: ["Error\n"]}) == [
        "line 1: printed 'Error\\n'; the page says 'Error: unknown tool'"
    ]


def test_a_remark_in_brackets_may_follow_a_line_with_an_ellipsis() -> None:
    said = [Expected(1, ("Error: ... is disconnected (a fresh server answers next)",), True)]
    assert mismatches(said, {1: ['Error: MCP server "x" is disconnected\n']}) == []
    assert mismatches(said, {1: ['Error: MCP server "x" is gone\n']}) == [
        "line 1: printed 'Error: MCP server \"x\" is gone\\n'; the page says"
        " 'Error: ... is disconnected (a fresh server answers next)'"
    ]
