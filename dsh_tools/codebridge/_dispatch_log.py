"""What the session log keeps of a sub-call: its arguments up to a bound, and the
``tools/code-dispatch-log`` waterfall over its content (what the listeners return, frozen and
checked to be content blocks).

The arguments come straight from the program, which can send a call frame of up to
``max_frame_bytes`` per call and make as many calls as it likes; the log lives as long as the
system. So the logged copy of one call's arguments is kept whole only up to
``LOGGED_ARGUMENTS_LIMIT`` JSON bytes and ``LOGGED_VALUES_LIMIT`` values (a decoded value costs
far more than its JSON: an empty object is 3 bytes of JSON and about 64 bytes of host memory);
larger ones are logged as a preview string (the first ``PREVIEW_CHARS`` characters of their
compact JSON and a notice), beside ``arguments_bytes``. The tool itself always receives the
whole arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

import msgspec

from ..actors import FrozenDict, FrozenList
from ..pipeline._chain import run_chain
from ..registry import snapshot_json
from ..registry._hooks import CodeDispatchLog

__all__ = [
    "LOGGED_ARGUMENTS_LIMIT",
    "LOGGED_VALUES_LIMIT",
    "PREVIEW_CHARS",
    "logged_arguments",
    "shaped_content",
]

LOGGED_ARGUMENTS_LIMIT: Final = 64 * 1024
"""The most JSON bytes of one sub-call's arguments that its dispatch events keep whole."""
LOGGED_VALUES_LIMIT: Final = 8192
"""The most values (objects, arrays and scalars, the arguments object included) of one
sub-call's arguments that its dispatch events keep whole."""
PREVIEW_CHARS: Final = 1024
"""How much of larger arguments' compact JSON the dispatch events keep."""
_CONTAINERS: Final = (dict, FrozenDict, list, FrozenList)


def logged_arguments(dispatched: Any) -> tuple[Any, int | None]:
    """What the dispatch events record for a sub-call whose tool gets ``dispatched`` (its
    checked, frozen arguments): ``(copy, None)``, a copy of its own, when their compact JSON is
    within ``LOGGED_ARGUMENTS_LIMIT`` bytes and they hold at most ``LOGGED_VALUES_LIMIT``
    values, else ``(preview, size)`` with the JSON's size in bytes (a lower bound for values
    nested deeper than the encoder goes). Larger arguments are never copied: a program could
    make the host copy up to a frame's worth per call."""
    try:
        encoded = msgspec.json.encode(dispatched)
    except RecursionError:  # nested deeper than the C encoder recurses; rare, so walk it
        size = _json_size_beyond(dispatched, LOGGED_ARGUMENTS_LIMIT)
        if size <= LOGGED_ARGUMENTS_LIMIT and _values_within(dispatched, LOGGED_VALUES_LIMIT):
            return snapshot_json(dispatched, "arguments"), None
        return _notice("", size), size
    size = len(encoded)
    if (
        size <= LOGGED_ARGUMENTS_LIMIT
        and type(dispatched) is FrozenDict
        and len(dispatched) < LOGGED_VALUES_LIMIT
    ):
        # The usual arguments, an object of scalars: checked already, so a copy of the object
        # is all ``snapshot_json`` would make, and it holds one value per member besides itself.
        for item in dispatched.values():
            if type(item) in _CONTAINERS:
                break
        else:
            return FrozenDict(dispatched), None
    if size <= LOGGED_ARGUMENTS_LIMIT and _values_within(dispatched, LOGGED_VALUES_LIMIT):
        return snapshot_json(dispatched, "arguments"), None
    return _notice(encoded[:PREVIEW_CHARS].decode("utf-8", "ignore"), size), size


def _notice(preview: str, size: int) -> str:
    return (
        f"{preview}... [arguments of {size} JSON bytes; the session log keeps at most "
        f"{LOGGED_ARGUMENTS_LIMIT} bytes and {LOGGED_VALUES_LIMIT} values per call]"
    )


def _values_within(value: Any, limit: int) -> bool:
    """Whether ``value`` holds at most ``limit`` values, itself included; walks iteratively
    and stops past the limit, so it costs at most ``limit`` steps."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _json_size_beyond(value: Any, limit: int) -> int:
    """``value``'s compact JSON size in bytes, counted exactly (escapes and UTF-8 included) up
    to the point where it passes ``limit``: walks iteratively and stops there."""
    size = 0
    stack = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, dict):
            size += 1 + max(len(item), 1)  # the braces and the commas between members
            for key, child in item.items():
                size += _scalar_size(key, limit) + 1  # the key and its colon
                stack.append(child)
        elif isinstance(item, list):
            size += 1 + max(len(item), 1)  # the brackets and the commas between items
            stack.extend(item)
        else:
            size += _scalar_size(item, limit)
    return size


def _scalar_size(item: Any, limit: int) -> int:
    if isinstance(item, str) and len(item) > limit:
        return limit + 1  # every character costs at least a byte
    return len(msgspec.json.encode(item))


async def shaped_content(hooks: tuple[Callable[..., Any], ...], log: CodeDispatchLog) -> Any:
    """The content ``hooks`` make of ``log.content`` (raises what a listener raises, or
    ``TypeError`` for what is not a list of content blocks)."""
    return _content_blocks(await run_chain(hooks, (log,), partial(_logged, log)))


async def _logged(log: CodeDispatchLog) -> Any:
    """The end of the dispatch-log chain: the content as it is."""
    return log.content


def _content_blocks(value: Any) -> Any:
    """Freeze what a dispatch-log waterfall returned: a list (or tuple) of content blocks."""
    if type(value) is tuple:
        value = list(value)
    if type(value) not in (list, FrozenList):
        raise TypeError(
            f"a code-dispatch-log listener returned {type(value).__name__}; expected a list of "
            "content blocks"
        )
    frozen = snapshot_json(value)
    for block in frozen:
        if type(block) is not FrozenDict or type(block.get("type")) is not str:
            raise TypeError(
                "a code-dispatch-log listener returned a content block that is not a dict "
                'with a "type"'
            )
    return frozen
