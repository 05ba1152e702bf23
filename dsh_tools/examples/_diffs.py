"""Hunks with context for the file tools' diff cards, and defensive reading of logged meta."""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..registry import FileDiff

__all__ = ["CONTEXT_LINES", "diffs_from_meta", "hunks", "meta_from_hunks", "split_lines"]

CONTEXT_LINES = 3
"""Unchanged lines kept around each change in a hunk."""


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
    a = split_lines(old)
    b = split_lines(new)
    out: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(None, a, b)
    for group in matcher.get_grouped_opcodes(context):
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
