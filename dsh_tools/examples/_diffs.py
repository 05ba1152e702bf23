"""Hunks with context for the file tools' diff cards, and defensive reading of logged meta."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import Any

from ..registry import FileDiff

__all__ = [
    "CONTEXT_LINES",
    "DIFF_WORK",
    "diffs_from_meta",
    "hunks",
    "meta_from_hunks",
    "split_lines",
]

CONTEXT_LINES = 3
"""Unchanged lines kept around each change in a hunk."""

DIFF_WORK = 2_000_000
"""How many lines in all the searches for matching lines may look at (a few tenths of a
second of the host's CPU at most); a change that needs more is shown as one hunk."""


_LINE = re.compile(r"[^\n]*\n|[^\n]+")


def split_lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` (kept); other separators such as ``\\r`` or form feeds
    stay inside their line, so line numbers agree with editors and ``read_file``."""
    return _LINE.findall(text)


def hunks(old: str, new: str, context: int = CONTEXT_LINES) -> list[dict[str, Any]]:
    """The changed regions between ``old`` and ``new``, each with ``context`` lines around it.

    A hunk is ``{"old_start", "old_text", "new_start", "new_text"}`` with 1-based line numbers
    and the texts of the region (line endings kept). Equal texts give no hunks.
    """
    if old == new:
        return []
    a = split_lines(old)
    b = split_lines(new)
    out: list[dict[str, Any]] = []
    try:
        groups = list(_BoundedMatcher(a, b).get_grouped_opcodes(context))
    except _TooCostly:
        # Matching the lines of some changes takes time quadratic in their size (a rewrite
        # that interleaves a 16,000-line file took 20 s of the host's CPU): one hunk shows
        # everything between the texts' common head and tail instead.
        head, tail = _common_ends(a, b)
        i1, j1 = max(0, head - context), max(0, head - context)
        i2, j2 = min(len(a), len(a) - tail + context), min(len(b), len(b) - tail + context)
        groups = [[("replace", i1, i2, j1, j2)]]
    for group in groups:
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(
            {
                "old_start": i1 + 1,
                "old_text": "".join(a[i1:i2]),
                "new_start": j1 + 1,
                "new_text": "".join(b[j1:j2]),
            }
        )
    return out


class _TooCostly(Exception):
    """Raised by ``_BoundedMatcher`` once its work is over ``DIFF_WORK``."""


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """A ``SequenceMatcher`` of lines that gives up (``_TooCostly``) before its searches for
    the longest match would look at more than ``DIFF_WORK`` lines in all.

    A search over the old lines ``alo:ahi`` looks at each of them and at every place in the new
    text where it occurs (a line repeated hundreds of times costs hundreds): ``_work_before``
    sums that per old line, so the cost of a search is known before it runs."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        self._work_left = DIFF_WORK
        super().__init__(None, a, b)
        occurs = Counter(b)
        # The documented "autojunk" rule: in 200 lines or more, a line making up more than 1%
        # of them is never looked up.
        popular = len(b) // 100 + 1 if len(b) >= 200 else len(b)
        total = 0
        work_before = [0]
        for line in a:
            places = occurs.get(line, 0)
            total += 1 + (places if places <= popular else 0)
            work_before.append(total)
        self._work_before = work_before

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        end = len(self._work_before) - 1 if ahi is None else ahi
        self._work_left -= self._work_before[end] - self._work_before[alo]
        if self._work_left < 0:
            raise _TooCostly
        return super().find_longest_match(alo, ahi, blo, bhi)


def _common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many lines ``a`` and ``b`` share at their head, and then at their tail."""
    shorter = min(len(a), len(b))
    head = 0
    while head < shorter and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shorter - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def meta_from_hunks(path: str, applied: Any) -> dict[str, Any]:
    """The presentation metadata of applied hunks: ``{"diffs": [{path, old_text, new_text}]}``."""
    return {
        "diffs": [
            {"path": path, "old_text": hunk["old_text"], "new_text": hunk["new_text"]}
            for hunk in applied
        ]
    }


def diffs_from_meta(meta: Any) -> list[FileDiff] | None:
    """The diffs in logged metadata, or ``None`` unless it holds a non-empty list of well-formed
    diffs. Metadata is read back verbatim from a log and may come from an older tool version."""
    if not isinstance(meta, dict):
        return None
    raw = meta.get("diffs")
    if not isinstance(raw, list) or not raw:
        return None
    diffs: list[FileDiff] = []
    for item in raw:
        if not isinstance(item, dict):
            return None
        path, old_text, new_text = item.get("path"), item.get("old_text"), item.get("new_text")
        if type(path) is not str or type(new_text) is not str:
            return None
        if old_text is not None and type(old_text) is not str:
            return None
        diffs.append(FileDiff(path=path, old_text=old_text, new_text=new_text))
    return diffs
