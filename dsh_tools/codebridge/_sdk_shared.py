"""When two schema roots of the SDK refer to the same named definition: a typed tool's class
used as its argument and its result (or by two tools) is a ``$defs`` entry of each root's own
document, and each root declared it again, ``User`` then ``User_2``, which a model reads as two
types. ``definition_key`` says when two such references would declare the very same thing, so
the second reuses the first's name.

Two references are the same when they share the definition's name and everything their
declaration reads is equal: the definition and, transitively, every definition it refers to.
One that reaches back to its document's root (``#``) is never shared: it renders as that
root's own name. Walks are iterative (no recursion) and bounded for a whole prompt
(``SharedDefinitions.budget``): each key reads every definition its reference reaches, so a long
chain of definitions would cost a walk per link; past the bound nothing more is shared (a
definition is declared again, as before sharing).
"""

from __future__ import annotations

from typing import Any, Final

from ..registry import resolve_local_ref
from ._sdk_schema import _is_list, _is_map

__all__ = ["SharedDefinitions", "definition_key"]

MOST_NODES_PER_PROMPT: Final = 20_000
"""The most schema nodes the keys of one prompt's declarations read, together."""


class SharedDefinitions:
    """The definitions one prompt's roots declared so far, by key, and what is left of the
    nodes their keys may read (``MOST_NODES_PER_PROMPT``)."""

    __slots__ = ("budget", "names")

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.budget = MOST_NODES_PER_PROMPT


def definition_key(name: str, ref: str, document: Any, shared: SharedDefinitions) -> str | None:
    """A text equal for two references that declare the same definition ``name`` (``ref`` into
    ``document``), or ``None`` when it cannot be shared (or ``shared``'s budget is spent)."""
    parts: list[str] = [name]
    pending = [ref]
    reached: set[str] = set()
    budget = shared.budget
    while pending:
        current = pending.pop()
        if current in reached:
            continue
        reached.add(current)
        target = resolve_local_ref(document, current)
        if target is None or target is document:
            return None
        text, refs, budget = _canonical(target, budget)
        shared.budget = budget
        if text is None:
            return None
        parts.append(f"{current}={text}")
        pending.extend(refs)
    parts[1:] = sorted(parts[1:])
    return "\n".join(parts)


def _canonical(node: Any, budget: int) -> tuple[str | None, list[str], int]:
    """``node`` as one text (map keys sorted), the ``$ref`` strings inside it, and what is
    left of ``budget``; ``None`` for the text once the budget is spent."""
    out: list[str] = []
    refs: list[str] = []
    # Each step: a value to write (``_VALUE``), a map's key (``_KEY``) or a closing bracket.
    work: list[tuple[int, Any]] = [(_VALUE, node)]
    while work:
        step, item = work.pop()
        if step != _VALUE:
            out.append(repr(item) + ":" if step == _KEY else item)
            continue
        budget -= 1
        if budget < 0:
            return None, refs, 0
        if _is_map(item):
            ref = item.get("$ref")
            if type(ref) is str:
                refs.append(ref)
            out.append("{")
            work.append((_CLOSE, "}"))
            keys = list(item)
            if any(type(key) is not str for key in keys):
                return None, refs, 0
            for key in sorted(keys, reverse=True):
                work.append((_VALUE, item[key]))
                work.append((_KEY, key))
        elif _is_list(item):
            out.append("[")
            work.append((_CLOSE, "]"))
            work.extend((_VALUE, child) for child in reversed(item))
        else:
            out.append(f"{type(item).__name__}:{item!r}")
    return ",".join(out), refs, budget


_VALUE: Final = 0
_KEY: Final = 1
_CLOSE: Final = 2
