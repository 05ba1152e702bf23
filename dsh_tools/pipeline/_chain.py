"""The ``next()`` waterfall every hook chain runs on (pre-execute, execute wrappers,
post-execute, the Code Mode dispatch log)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from ..actors import (
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    FrozenList,
    ToolExecutionFailure,
    ToolExecutionSuccess,
)

__all__ = ["is_awaitable", "none_from", "rest_of_chain", "run_chain"]

# What hooks and bodies usually return: known at a glance not to be awaitable.
_PLAIN: frozenset[type] = frozenset(
    (
        Accept,
        Allow,
        Ask,
        Block,
        Deny,
        FrozenList,
        ToolExecutionFailure,
        ToolExecutionSuccess,
        type(None),
        list,
        dict,
        int,
        str,
    )
)


def is_awaitable(value: Any) -> bool:
    """``inspect.isawaitable``, answered at once for coroutines and the usual plain results."""
    kind = type(value)
    if kind is types.CoroutineType:
        return True
    if kind in _PLAIN:
        return False
    return inspect.isawaitable(value)


def none_from(hooks: Sequence[Callable[..., Any]]) -> str:
    """Why a stage failed whose chain of ``hooks`` (outermost first) answered ``None``: no hook
    point takes ``None``, and the usual slip is a hook that awaits ``next()`` and forgets to
    return its answer. Any of them may have (an outer one passes on what ``next()`` gave it),
    so all are named."""
    return (
        "a hook returns its own decision or what next() answers (return await next()); "
        f"the hooks, outermost first: {hook_names(hooks)}"
    )


def answered_by(hooks: Sequence[Callable[..., Any]], answer: Any, kind: str = "hooks") -> str:
    """The tail of the message of a stage whose chain of ``hooks`` (outermost first; ``kind``
    names them) answered ``answer``, which the stage does not take: ``none_from`` for
    ``None``, else the ``hooks`` by name; nothing for an empty chain."""
    if not hooks:
        return ""
    if answer is None:
        return f" ({none_from(hooks)})"
    return f" (the {kind}, outermost first: {hook_names(hooks)})"


def hook_names(hooks: Sequence[Callable[..., Any]]) -> str:
    """The ``hooks`` of a chain that answered something no stage takes, by name, outermost
    first: any of them may have (an outer one passes on what ``next()`` gave it)."""
    return ", ".join(callable_name(hook) for hook in hooks)


def callable_name(fn: Callable[..., Any]) -> str:
    """What a message calls a harness's function: its qualified name, else its repr."""
    return getattr(fn, "__qualname__", None) or repr(fn)


async def run_chain(
    hooks: Sequence[Callable[..., Any]],
    args: tuple[Any, ...],
    end: Callable[[], Awaitable[Any]],
    index: int = 0,
) -> Any:
    """Call ``hooks[index](*args, next)``; ``next()`` runs the rest of the chain, and past the
    last hook it is ``end()``. What a hook returns is awaited for as long as it is awaitable,
    so a hook may ``return next()`` without awaiting it."""
    if index == len(hooks):
        out: Any = end()
    else:
        following = index + 1
        then = end if following == len(hooks) else partial(run_chain, hooks, args, end, following)
        out = hooks[index](*args, then)
    while is_awaitable(out):
        out = await out
    return out


def rest_of_chain(
    hooks: Sequence[Callable[..., Any]],
    args: tuple[Any, ...],
    end: Callable[[], Awaitable[Any]],
) -> Callable[[], Awaitable[Any]]:
    """The ``next`` of the outermost of several hooks: ``run_chain`` from the second hook on.

    A stage calls the outermost hook itself, ``hooks[0](*args, next)``, with ``end`` as its
    ``next`` when it is the only one, and awaits what it returns for as long as it is
    awaitable, as ``run_chain`` would: the outermost link needs no coroutine of its own."""
    return partial(run_chain, hooks, args, end, 1)
