"""The ```python blocks of a Markdown file, and a runner that executes them as a reader would.

``python tests/docs_blocks.py FILE.md`` runs the file's blocks in order in one fresh namespace
(the first block's imports serve the later ones, as they do for a reader going down the page).
Each block is compiled under the Markdown file's name with its own line numbers, so a failure's
traceback points at the line of the document. Fences may be indented (a block inside a list
item); the indentation is removed. Blocks in other languages are not run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")


class Block(NamedTuple):
    """One fenced block: its language, first line number (1-based) and dedented source."""

    language: str
    line: int
    source: str


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` in document order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _OPENING.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        index += 1
        start = index + 1
        while index < len(lines):
            line = lines[index]
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        blocks.append(Block(opening["info"].lower(), start, "\n".join(body) + "\n"))
        index += 1
    return blocks


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of the Markdown file ``path``."""
    return [b for b in fenced_blocks(path.read_text(encoding="utf-8")) if b.language == "python"]


def run(path: Path) -> None:
    """Execute the file's python blocks in order in one namespace."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in python_blocks(path):
        # Leading newlines put the block at its own line numbers in tracebacks.
        code = compile("\n" * (block.line - 1) + block.source, str(path), "exec")
        exec(code, namespace)


if __name__ == "__main__":
    run(Path(sys.argv[1]))
