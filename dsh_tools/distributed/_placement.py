"""``RayPlacement``: a tool's body runs on Ray, everything around it stays here.

``RayPlacement(...).place(tool, execute)`` (called by ``define_tool(..., placement=...)``)
returns an ``async def`` body. Each call of it sends the arguments as JSON to a Ray task (or to
one actor of a pool, for tools that keep state), awaits the reply without blocking the loop, and
returns the value or raises the body's exception, so the local pipeline (hooks, guards,
approval, wrappers, timeouts, post-hooks, the session log, batch slots and barriers) sees an
ordinary ``async def`` body.

Cancellation: when the call's signal aborts (the caller's abort, or the timeout policy's
deadline) or the awaiting task is cancelled, the Ray task is cancelled with ``ray.cancel``; if it
has not settled after ``cancel_grace_s`` it is forced (``force=True`` ends the worker process;
an actor, which Ray cannot force, is killed and replaced by a fresh one). The call then settles
as ``ABORTED`` (or ``TOOL_TIMEOUT`` through the policy), as locally.

This module holds the options and the defaults; the runners (``_ray_runners``) and the local
body (``_ray_body``) live apart.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from ..actors import FrozenDict, FrozenList
from ..actors._config import check_finite_number
from ..actors._keywords import KeywordChecked
from ._ray_body import Body, remote_body
from ._ray_runners import LazyRunner

__all__ = ["RAY_DEFAULT", "RayPlacement", "check_ray_options", "set_ray_default"]


def check_ray_options(owner: str, resources: object, runtime_env: object) -> None:
    """Refuse here the custom resources and environment Ray would refuse at every call (or
    run), saying what is wrong and whose option it is."""
    if resources is not None and (
        not isinstance(resources, dict)
        or not all(
            type(key) is str
            and type(amount) in (int, float)
            and math.isfinite(amount)
            and amount >= 0
            for key, amount in resources.items()
        )
    ):
        raise ValueError(f"{owner}: resources must map str names to numbers >= 0")
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise ValueError(f"{owner}: runtime_env must be a dict")


class RayPlacement(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """Run a tool's body on Ray.

    ``num_cpus``, ``num_gpus``, ``resources`` and ``runtime_env`` are Ray's scheduling options
    for each call (or for each actor). ``actor_pool=0`` runs every call as a Ray task; ``N > 0``
    keeps ``N`` actors holding the body, each running one call at a time, for tools that keep
    state between calls (an actor that dies or is killed on an abort is replaced by a fresh one:
    its state is lost). ``cancel_grace_s`` is how long a cancelled call may take to stop before
    it is forced; ``settle_s`` bounds the wait after forcing. ``placement_wait_s`` is how long
    an actor of the pool may wait for Ray to place it while another of the pool is placed:
    after that its calls (which have not begun) go to the placed actors. While none is placed
    and no node has the resources an actor needs, its calls fail as ``REMOTE_UNAVAILABLE``
    after that time; so does a task (``actor_pool=0``) that no live node has the resources
    for. A body runs at most once: Ray's retries are off.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    resources: dict[str, float] | None = None
    runtime_env: dict[str, Any] | None = None
    actor_pool: int = 0
    cancel_grace_s: float = 2.0
    settle_s: float = 10.0
    placement_wait_s: float = 10.0

    def __post_init__(self) -> None:
        for label in ("num_cpus", "num_gpus", "cancel_grace_s", "settle_s", "placement_wait_s"):
            check_finite_number("RayPlacement", label, getattr(self, label))
        pool = self.actor_pool
        if type(pool) is not int:
            raise TypeError(
                f"RayPlacement: actor_pool must be an int >= 0, got {type(pool).__name__}"
            )
        if pool < 0:
            raise ValueError(f"RayPlacement: actor_pool must be an int >= 0, got {pool}")
        check_ray_options("RayPlacement", self.resources, self.runtime_env)
        # Held frozen (its containers deep-frozen, other values as given): a placement is
        # data, checked once here, and must not change after that check, nor under the
        # tools that share it.
        for label in ("resources", "runtime_env"):
            value = getattr(self, label)
            if value is not None:
                msgspec.structs.force_setattr(self, label, _frozen(value))

    def __hash__(self) -> int:
        # By value, as it compares (a frozen container hashes by identity).
        return hash(tuple(_hashable(value) for value in msgspec.structs.astuple(self)))

    def place(self, tool: str, execute: Callable[[Any, Any], Any]) -> Body:
        """The ``async def`` body that runs ``execute`` on Ray with these options."""
        runner = LazyRunner(tool, execute)
        return remote_body(tool, lambda: (self, runner))

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env:
            options["runtime_env"] = _thawed(self.runtime_env)
        return options


def _frozen(value: Any) -> Any:
    """``value`` with its dicts and lists (and tuples) deep-frozen; other values as given."""
    if isinstance(value, dict):
        return FrozenDict({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return FrozenList(_frozen(item) for item in value)
    return value


def _thawed(value: Any) -> Any:
    """A plain copy of a ``_frozen`` value, for Ray (which may fill in what it was given)."""
    if isinstance(value, dict):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_thawed(item) for item in value]
    return value


def _hashable(value: Any) -> Any:
    """A hashable stand-in for a ``_frozen`` value, equal where the values are equal."""
    if isinstance(value, dict):
        return frozenset((key, _hashable(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    return value


_default_lock = threading.Lock()
_default = RayPlacement()


def set_ray_default(placement: RayPlacement) -> RayPlacement:
    """Set the options every tool placed with ``RAY_DEFAULT`` uses from its next call on;
    returns the previous default."""
    global _default
    if not isinstance(placement, RayPlacement):
        raise TypeError(f"set_ray_default needs a RayPlacement, got {type(placement).__name__}")
    with _default_lock:
        previous, _default = _default, placement
    return previous


class _RayDefault:
    """The placement of tools that opt into the system-wide default (``set_ray_default``)."""

    def place(self, tool: str, execute: Callable[[Any, Any], Any]) -> Body:
        held: list[tuple[RayPlacement, LazyRunner]] = []
        lock = threading.Lock()

        def current() -> tuple[RayPlacement, LazyRunner]:
            placement = _default
            with lock:
                if not held or held[0][0] is not placement:
                    # Only the current default's runner is kept: an earlier one's actors end
                    # once the calls still on them are done, and give their resources back
                    # (kept, they would hold them for ever, and the new default's actors
                    # might never be placed).
                    held[:] = [(placement, LazyRunner(tool, execute))]
                return held[0]

        return remote_body(tool, current)

    def __repr__(self) -> str:
        return "RAY_DEFAULT"


RAY_DEFAULT = _RayDefault()
"""Place a tool's body on Ray with the options set by ``set_ray_default`` (``RayPlacement()``
until then), read at each call."""
