"""The ``tools/code-dispatch-log`` waterfall over one sub-call's logged content: what the
listeners return, frozen and checked to be content blocks."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..actors import FrozenDict, FrozenList
from ..pipeline._chain import run_chain
from ..registry import snapshot_json
from ..registry._hooks import CodeDispatchLog

__all__ = ["shaped_content"]


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
