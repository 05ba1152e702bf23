"""``ToolsConfig``: every setting of a tool system, validated at construction."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ._keywords import KeywordChecked

__all__ = [
    "MAX_SAFE_INTEGER",
    "MIN_MAX_MEMORY_MB",
    "UNLISTED_TOOLS",
    "ToolsConfig",
    "finite_number",
    "memory_floor_text",
    "number_text",
]

UNLISTED_TOOLS = "<unlisted-tools>"
"""The ``tool_order`` marker that stands for every tool not listed, in lexicographic order."""

_MODES = ("native", "code", "both")

# Code Mode's defaults, here at the bottom layer so that the configuration and the code runtime
# (which reads its own settings from them) share one definition.
DEFAULT_COMPUTE_MS: Final = 60_000
"""Default CPU budget of a run's worker, in milliseconds of busy time."""
DEFAULT_MAX_WALL_MS: Final = 600_000
"""Default wall-clock ceiling of a run, from spawn."""
DEFAULT_MAX_OUTPUT_BYTES: Final = 64 * 2**20
"""Default cap on the outer output (logs plus value or message), in JSON bytes."""
DEFAULT_MAX_MEMORY_MB: Final = 512
"""Default address-space limit of a worker."""
WORKER_OWN_MB: Final = 32
"""About what a code worker takes of ``max_memory_mb`` before the program's first line: its
address space, which ``RLIMIT_AS`` counts under either isolation, measured 30.0 MB under
``"process"`` and 31.0 MB under ``"sandbox"`` on Python 3.11, and 31.2 MB once a small program
had imported ``json``, ``re``, ``decimal`` and ``dataclasses`` and built 10,000 integers (32.8
MB was measured earlier on Python 3.12). Under less, a program's first new allocation fails
with ``MemoryError``."""
MIN_MAX_MEMORY_MB: Final = 48
"""The smallest ``max_memory_mb`` a configuration takes. Measured on Python 3.11, 20 runs each:
``return None`` ran under every budget down to 4 MB (it allocates nothing new), but that small
program failed every time at 30 MB (``"process"``) and 31 MB (``"sandbox"``) and below, and ran
every time from 31 and 31.5 MB, with under 1 MB to spare. Half the worker's own size again as
margin, for a newer Python's larger interpreter, the harness's platform and the modules and
first data of a small program: a budget this small still runs one, where one near the
worker's own size fails it at its first allocation."""
DEFAULT_MAX_FRAME_BYTES: Final = 256 * 2**20
"""Default cap on one channel frame, either direction."""
DEFAULT_MAX_PARALLEL_RUNS: Final = 8
"""Default number of code runs one runtime has in flight at once; more wait their turn."""
DEFAULT_MAX_SUB_CALLS: Final = 10_000
"""Default number of tool calls one code run may make (a few tenths of a second of host CPU)."""
MAX_SAFE_INTEGER: Final = 2**53 - 1
"""The largest byte count a code run's settings take: the worker and the host agree on every
integer up to it (a JSON number past it may be read back rounded)."""
ISOLATIONS: Final = ("sandbox", "process")
"""The isolation levels of the subprocess runtime, strictest first."""
_ISOLATIONS = ISOLATIONS


def number_text(value: object) -> str:
    """``value`` as an error message shows it: an integer too long for ``str`` (past Python's
    4,300 digits) by its length, since writing it out would raise a ``ValueError`` of its
    own."""
    if type(value) is int:
        try:
            return str(value)
        except ValueError:
            return f"an integer of {value.bit_length()} bits"
    if type(value) is float and value.is_integer():
        return str(int(value))
    return repr(value)


def finite_number(value: int | float) -> bool:
    """Whether ``value`` (an ``int`` or ``float``) is a finite number a ``float`` can hold: an
    integer past ``1.8e308`` is not (``math.isfinite`` raises ``OverflowError`` for it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_finite_number(owner: str, label: str, value: object, minimum: int = 0) -> None:
    """A finite number of at least ``minimum``: ``TypeError`` for another type (a ``bool``, a
    str read from a setting), ``ValueError`` for a number out of range, each naming ``owner``
    and saying what it got."""
    rule = f"a finite number >= {minimum}"
    if type(value) not in (int, float):
        raise TypeError(f"{owner}: {label} must be {rule}, got {type(value).__name__}")
    if not finite_number(value) or value < minimum:  # type: ignore[arg-type, operator]
        raise ValueError(f"{owner}: {label} must be {rule}, got {value!r}")


def _positive_int(key: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> None:
    if type(value) is not int:
        raise TypeError(f"{key} must be a positive integer, got {type(value).__name__}")
    if value < minimum:
        if minimum == 1:
            raise ValueError(f"{key} must be a positive integer, got {number_text(value)}")
        raise ValueError(
            f"{key} must be an integer of at least {minimum}, got {number_text(value)}"
        )
    if maximum is not None and value > maximum:
        raise ValueError(f"{key} must be an integer of at most {maximum}, got {number_text(value)}")


def _positive_number(key: str, value: Any) -> None:
    if type(value) not in (int, float):
        raise TypeError(f"{key} must be a positive number, got {type(value).__name__}")
    if not finite_number(value) or value <= 0:
        raise ValueError(f"{key} must be a positive finite number, got {number_text(value)}")


def memory_floor_text(value: float) -> str | None:
    """What is wrong with a positive finite ``max_memory_mb`` of ``value`` (below
    ``MIN_MAX_MEMORY_MB``), or ``None``; the caller names the setting before it."""
    if value >= MIN_MAX_MEMORY_MB:
        return None
    return (
        f"must be at least {MIN_MAX_MEMORY_MB} (the code worker, a Python interpreter, takes "
        f"about {WORKER_OWN_MB} MB of it before the program runs), got {number_text(value)}"
    )


class ToolsConfig(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """Every setting of a ``ToolSystem``: a wrong type raises ``TypeError``, a bad value
    ``ValueError``.

    - ``mode``: ``"native"`` (tools as functions), ``"code"`` (one ``run_code`` tool and a Python
      SDK) or ``"both"``.
    - ``max_parallel_tool_calls``: the dispatcher pool size of a batch.
    - ``max_parallel_sub_calls``: the pool size of one code run's sub-calls.
    - ``max_sub_calls``: the most tool calls one code run may make (at most
      ``MAX_SAFE_INTEGER``); each goes through the pipeline and the session log at the host's
      CPU, so a program looping over calls would otherwise cost the host without bound. A call
      past it fails inside the program, undispatched and unrecorded.
    - ``max_parallel_code_runs``: how many code runs are in flight at once (each with its worker
      processes and its share of host memory); more wait their turn, in arrival order (at most
      ``MAX_SAFE_INTEGER``).
    - ``max_output_bytes``: the cap on what one code run returns to the model (at least 4, at
      most ``MAX_SAFE_INTEGER``).
    - ``max_frame_bytes``: the cap on one worker frame (at most ``MAX_SAFE_INTEGER``).
    - ``compute_ms``, ``max_wall_ms``, ``max_memory_mb``: the code worker's CPU, wall-clock and
      memory budgets, positive finite numbers (an integer too large for a ``float`` is not);
      one past what the kernel's limit counts (``compute_ms=1e25``) sets no limit.
      ``max_memory_mb`` is at least ``MIN_MAX_MEMORY_MB`` (48): the worker, a Python
      interpreter, takes about 32 MB of it itself.
    - ``code_isolation``: ``"sandbox"`` (the default: each program confined to its scratch
      directory, the granted paths and its tools) or ``"process"`` (own process group, limits
      and a clean environment only: the program has the host user's powers).
    - ``max_inline_bytes``: when set, dispatch logs larger than this are spilled to the store
      given as ``system.dispatch_spill.store`` (without one they are kept whole, with a
      warning).
    - ``tool_order``: tool names in prompt order, with at most one ``"<unlisted-tools>"`` marker.
    """

    mode: str = "native"
    max_parallel_tool_calls: int = 10
    max_parallel_sub_calls: int = 10
    max_sub_calls: int = DEFAULT_MAX_SUB_CALLS
    max_parallel_code_runs: int = DEFAULT_MAX_PARALLEL_RUNS
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    compute_ms: float = DEFAULT_COMPUTE_MS
    max_wall_ms: float = DEFAULT_MAX_WALL_MS
    max_memory_mb: float = DEFAULT_MAX_MEMORY_MB
    code_isolation: str = "sandbox"
    max_inline_bytes: int | None = None
    tool_order: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if type(self.mode) is not str:
            raise TypeError(
                f"mode must be one of native, code, both; got {type(self.mode).__name__}"
            )
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of native, code, both; got {self.mode!r}")
        _positive_int("max_parallel_tool_calls", self.max_parallel_tool_calls)
        _positive_int("max_parallel_sub_calls", self.max_parallel_sub_calls)
        _positive_int("max_sub_calls", self.max_sub_calls, maximum=MAX_SAFE_INTEGER)
        _positive_int(
            "max_parallel_code_runs", self.max_parallel_code_runs, maximum=MAX_SAFE_INTEGER
        )
        # The code runtime's own bounds, checked here so that a bad setting fails where it is
        # written rather than at ``start()``.
        _positive_int(
            "max_output_bytes", self.max_output_bytes, minimum=4, maximum=MAX_SAFE_INTEGER
        )
        _positive_int("max_frame_bytes", self.max_frame_bytes, maximum=MAX_SAFE_INTEGER)
        _positive_number("compute_ms", self.compute_ms)
        _positive_number("max_wall_ms", self.max_wall_ms)
        _positive_number("max_memory_mb", self.max_memory_mb)
        floor = memory_floor_text(self.max_memory_mb)
        if floor is not None:
            raise ValueError(f"max_memory_mb {floor}")
        if type(self.code_isolation) is not str:
            raise TypeError(
                "code_isolation must be one of sandbox, process; "
                f"got {type(self.code_isolation).__name__}"
            )
        if self.code_isolation not in _ISOLATIONS:
            raise ValueError(
                f"code_isolation must be one of sandbox, process; got {self.code_isolation!r}"
            )
        if self.max_inline_bytes is not None:
            _positive_int("max_inline_bytes", self.max_inline_bytes)
        if self.tool_order is not None:
            order = self.tool_order
            if isinstance(order, str) or not isinstance(order, Sequence):
                raise TypeError("tool_order must be a list of tool names")
            names = tuple(order)
            for index, name in enumerate(names):
                if type(name) is not str:
                    raise TypeError(f"tool_order[{index}] must be a str")
                if not name:  # no tool has it: the entry would order nothing
                    raise ValueError(f"tool_order[{index}] must be a non-empty tool name, got ''")
            if names.count(UNLISTED_TOOLS) > 1:
                raise ValueError(
                    f'tool_order must be a list with the "{UNLISTED_TOOLS}" marker at most once'
                )
            duplicates = sorted({n for n in names if names.count(n) > 1} - {UNLISTED_TOOLS})
            if duplicates:
                raise ValueError(
                    f'tool_order must be a list of distinct names; "{duplicates[0]}" is listed '
                    "twice"
                )
            msgspec.structs.force_setattr(self, "tool_order", names)
