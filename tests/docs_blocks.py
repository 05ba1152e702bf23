"""The ```python blocks of a Markdown file, and a runner that executes them as a reader would.

``python tests/docs_blocks.py FILE.md`` runs the file's blocks in order in one fresh namespace
(the first block's imports serve the later ones, as they do for a reader going down the page).
Each block is compiled under the Markdown file's name with its own line numbers, so a failure's
traceback points at the line of the document. Fences may be indented (a block inside a list
item); the indentation is removed. Blocks in other languages are not run.

A page says what a ``print`` prints in a comment, and the runner holds it to that:

- ``print(x)  # text``: every call prints the one line ``text``, or prints the start of it
  when the rest is a remark in brackets (``# [] (the list is empty)``);
- ``print(x)`` followed directly by comment lines: the calls' lines, all together, are those
  lines (``#`` alone is an empty line).

``...`` stands for any text within a line, and a comment line that is only ``...`` for any
number of lines. A print with a comment that never runs fails too.
"""

from __future__ import annotations

import builtins
import inspect
import io
import re
import sys
import tokenize
import types
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TextIO

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


class Expected(NamedTuple):
    """What a page says one ``print`` call prints."""

    line: int
    """The document line the ``print`` call starts on."""
    lines: tuple[str, ...]
    """The comment's lines, each without its ``# ``."""
    each_call: bool
    """A trailing comment (every call prints its one line), or comment lines below the call
    (all its calls print those lines together)."""


_NOT_CODE = frozenset(
    {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
    }
)


def _comment_text(comment: str) -> str:
    text = comment[1:]
    return text[1:] if text.startswith(" ") else text


def expectations(block: Block) -> list[Expected]:
    """What the block's ``print`` calls say they print, in the block's order."""
    tokens = list(tokenize.generate_tokens(io.StringIO(block.source).readline))
    comments = {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}
    code = {
        row for t in tokens if t.type not in _NOT_CODE for row in range(t.start[0], t.end[0] + 1)
    }
    found: list[Expected] = []
    for index, token in enumerate(tokens[:-1]):
        if (
            token.string != "print"
            or tokens[index + 1].string != "("
            or token.type != tokenize.NAME
        ):
            continue
        if index and tokens[index - 1].string in (".", "def"):
            continue
        depth, end = 0, token.end[0]
        for later in tokens[index + 1 :]:
            if later.type == tokenize.OP and later.string in "([{":
                depth += 1
            elif later.type == tokenize.OP and later.string in ")]}":
                depth -= 1
            if depth == 0:
                end = later.end[0]
                break
        line = block.line + token.start[0] - 1
        if end in comments:
            found.append(Expected(line, (_comment_text(comments[end]),), each_call=True))
            continue
        below: list[str] = []
        row = end + 1
        while row in comments and row not in code:
            below.append(_comment_text(comments[row]))
            row += 1
        if below:
            found.append(Expected(line, tuple(below), each_call=False))
    return found


def _fits(said: str, printed: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in said.split("..."))
    return re.fullmatch(pattern, printed, re.DOTALL) is not None


def _line_matches(said: str, printed: str, *, prose: bool) -> bool:
    if _fits(said, printed):
        return True
    # A remark in brackets after the printed text: what comes before one of the comment's
    # " (" is what is printed, its "..." standing for any text as anywhere else.
    return (
        prose
        and bool(printed)
        and any(_fits(said[: bracket.start()], printed) for bracket in re.finditer(r" \(", said))
    )


def _lines_match(said: tuple[str, ...], printed: list[str]) -> bool:
    if not said:
        return not printed
    if said[0] == "...":
        return any(_lines_match(said[1:], printed[skip:]) for skip in range(len(printed) + 1))
    return (
        bool(printed)
        and _line_matches(said[0], printed[0], prose=False)
        and _lines_match(said[1:], printed[1:])
    )


def mismatches(expected: list[Expected], printed: dict[int, list[str]]) -> list[str]:
    """How the printed text (by the document line of its ``print``) differs from the page."""
    found: list[str] = []
    for want in expected:
        calls = printed.get(want.line, [])
        if not calls:
            found.append(f"line {want.line}: the print never ran; the page says {want.lines!r}")
        elif want.each_call:
            for text in calls:
                if not _line_matches(want.lines[0], text.removesuffix("\n"), prose=True):
                    found.append(
                        f"line {want.line}: printed {text!r}; the page says {want.lines[0]!r}"
                    )
        elif not _lines_match(want.lines, "".join(calls).removesuffix("\n").split("\n")):
            found.append(
                f"line {want.line}: printed {''.join(calls)!r}; the page says {want.lines!r}"
            )
    return found


def _recording_print(path: Path, printed: dict[int, list[str]]) -> Callable[..., None]:
    """``print`` as the page's code sees it: it prints, and keeps what a line of the page
    prints to standard output under that line's number."""

    def page_print(
        *values: object,
        sep: str | None = " ",
        end: str | None = "\n",
        file: TextIO | None = None,
        flush: bool = False,
    ) -> None:
        builtins.print(*values, sep=sep, end=end, file=file, flush=flush)
        here = inspect.currentframe()
        caller = here.f_back if here is not None else None
        if caller is None or caller.f_code.co_filename != str(path):
            return
        if file is None or file is sys.stdout:
            text = (" " if sep is None else sep).join(map(str, values))
            printed.setdefault(caller.f_lineno, []).append(text + ("\n" if end is None else end))

    return page_print


def run(path: Path) -> None:
    """Execute the file's python blocks in order in one namespace, and fail when a ``print``
    printed other than what the page says."""
    # The namespace is a real module registered as ``__main__``, as a script's is: code that
    # resolves annotations through ``sys.modules[cls.__module__]`` (msgspec, dataclasses,
    # typing.get_type_hints) finds the page's imports there.
    module = types.ModuleType("__main__")
    module.__file__ = str(path)
    sys.modules["__main__"] = module
    printed: dict[int, list[str]] = {}
    module.__dict__["print"] = _recording_print(path, printed)
    blocks = python_blocks(path)
    for block in blocks:
        # Leading newlines put the block at its own line numbers in tracebacks.
        code = compile("\n" * (block.line - 1) + block.source, str(path), "exec")
        exec(code, module.__dict__)
    expected = [want for block in blocks for want in expectations(block)]
    found = mismatches(expected, printed)
    if found:
        raise SystemExit(f"{path.name}: what the page says is printed is not:\n" + "\n".join(found))


if __name__ == "__main__":
    run(Path(sys.argv[1]))
