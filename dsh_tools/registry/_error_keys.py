"""Naming the entry a conversion failed at where msgspec only says ``[...]``.

msgspec's paths name struct fields (``.y``) and array indexes (``[1]``) but not the key of a
dict entry, nor the item of a set: ``arguments.points[...].y`` leaves the model to guess which
of its points was wrong. ``named_entries`` finds it after the fact, on the failure path only:
each ``[...]`` is tried entry by entry (the container cut down to that one entry), and the first
entry that alone fails with the same message is the one named (``.key`` for a key that reads as
a name, ``["key"]`` otherwise, ``[i]`` for an item given in an array). Where no entry alone
fails the same way (a constraint on the container's size, say), or the search would cost more
than a few milliseconds, the ``[...]`` stays.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any, Final

import msgspec

__all__ = ["named_entries", "render_key"]

_AT: Final = " - at `"
_SEGMENT: Final = re.compile(r"\.([^.\[`]+)|\[(\d+)\]|\[\.\.\.\]")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MOST_ENTRIES: Final = 256
"""How many entries of one container are tried: past that the ``[...]`` stays."""
_BUDGET_S: Final = 0.005
"""How long the tries of one message may take in all: each converts the whole arguments, so
arguments large beside the container (a megabyte list next to a wrong dict entry) would make a
refused call cost the host hundreds of conversions. Past it the ``[...]`` stays."""


def named_entries(convert: Callable[[Any], Any], args: Any, error: msgspec.ValidationError) -> str:
    """The message of ``error`` (from ``convert(args)``) with each ``[...]`` of its path
    replaced by the entry that fails, where one entry alone fails the same way."""
    message = str(error)
    head, at, path = message.rpartition(_AT)
    if not at or "[...]" not in path or not path.endswith("`"):
        return message
    path = path[:-1]
    segments = list(_SEGMENT.finditer(path))
    if not segments or "".join(m.group(0) for m in segments) != path.lstrip("$"):
        return message  # a field name this does not read (one holding a dot, say)
    named: list[str] = [path[: segments[0].start()]]
    deadline = time.perf_counter() + _BUDGET_S
    trail: list[Any] = []  # the keys and indexes walked so far
    node = args
    for match in segments:
        field, index = match.group(1), match.group(2)
        if field is not None or index is not None:
            step: Any = field if field is not None else int(index)
            walkable = (
                isinstance(node, Mapping) and step in node
                if field is not None
                else isinstance(node, list | tuple) and step < len(node)
            )
            if not walkable:
                return message
            named.append(match.group(0))
            trail.append(step)
            node = node[step]
        else:
            found = _failing_entry(convert, args, trail, node, message, deadline)
            if found is None:
                return message
            entry, step, args, node = found
            named.append(render_key(entry))
            trail.append(step)
    return f"{head}{_AT}{''.join(named)}`"


def _failing_entry(
    convert: Callable[[Any], Any],
    args: Any,
    trail: list[Any],
    node: Any,
    message: str,
    deadline: float,
) -> tuple[Any, Any, Any, Any] | None:
    """The entry of ``node`` (at ``trail`` in ``args``) that alone fails with ``message``: its
    key or index, the step to it in the cut-down container (an item cut down to a one-item
    array is at index 0), the arguments with ``node`` cut down to it, and its value."""
    entries: list[tuple[Any, Any]]
    # Only the entries tried are listed: a container may be large.
    if isinstance(node, Mapping):
        entries = list(islice(node.items(), _MOST_ENTRIES))
        keyed = True
    elif isinstance(node, list | tuple):
        entries = list(islice(enumerate(node), _MOST_ENTRIES))
        keyed = False
    else:
        return None
    for entry, value in entries:
        if time.perf_counter() > deadline:
            return None
        trial = _replaced(args, trail, {entry: value} if keyed else [value])
        try:
            convert(trial)
        except msgspec.ValidationError as exc:
            if str(exc) == message:
                return entry, entry if keyed else 0, trial, value
        except Exception:  # a trial failing otherwise is no answer
            continue
    return None


def _replaced(args: Any, trail: list[Any], new: Any) -> Any:
    """A copy of ``args`` with what ``trail`` leads to replaced by ``new`` (only the
    containers along the trail are copied)."""
    if not trail:
        return new
    step = trail[0]
    if isinstance(args, Mapping):
        copy: Any = dict(args)
    else:
        copy = list(args)
    copy[step] = _replaced(args[step], trail[1:], new)
    return copy


def render_key(entry: Any) -> str:
    """A path segment for a dict key (``.key``, or ``["key"]`` when it does not read as a
    name) or, given an ``int``, an array index (``[i]``)."""
    if type(entry) is int:
        return f"[{entry}]"
    key = str(entry)
    return f".{key}" if _NAME.fullmatch(key) else f"[{json.dumps(key, ensure_ascii=False)}]"
