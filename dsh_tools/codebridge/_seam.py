"""The code-runtime seam: what a Code Mode runtime is, tool-agnostically.

A runtime runs one program per ``run(request)`` with the request's binding namespaces exposed as
globals and returns a ``CodeRunResult``. Program outcomes are results, never exceptions; ``run``
raises only for misuse (a bad request, or a call after disposal), before any process starts.

Concurrency contract: ``run`` is a coroutine on the caller's event loop; binding functions are
coroutine functions ``async (value) -> value`` called on that same loop, each call as soon as
the program makes it (several may be in flight). Disposal is ``await runtime.dispose()``: live
runs settle as ``abort`` / ``runtime disposed``, workers are killed and awaited, and later runs
raise ``RuntimeError("code runtime: run() after disposal")``.
"""

from __future__ import annotations

import keyword
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

import msgspec
from msgspec import UNSET

from ..actors import AbortSignal
from ..actors._config import (  # one definition of the defaults, shared with ToolsConfig
    DEFAULT_COMPUTE_MS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_PARALLEL_RUNS,
    DEFAULT_MAX_WALL_MS,
    ISOLATIONS,
    MAX_SAFE_INTEGER,
    MIN_MAX_MEMORY_MB,
    finite_number,
    memory_floor_text,
    number_text,
)
from ..actors._keywords import KeywordChecked
from ._program import ABSENT_NAME
from ._sandbox._policy import CodeSandbox

__all__ = [
    "DEFAULT_COMPUTE_MS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_MEMORY_MB",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_PARALLEL_RUNS",
    "DEFAULT_MAX_WALL_MS",
    "ISOLATIONS",
    "MIN_MAX_MEMORY_MB",
    "BindingFunction",
    "BindingNamespace",
    "CodeRunFailure",
    "CodeRunRequest",
    "CodeRunResult",
    "CodeRuntime",
    "CodeRuntimeConfig",
    "ErrorClassSpec",
    "FailureKind",
    "runtime_config_from",
    "validate_request",
]


FailureKind = Literal[
    "exception",
    "timeout",
    "abort",
    "worker-exit",
    "invalid-output",
    "output-limit",
    "frame-limit",
]
"""Why a run failed (exactly one per failed run)."""

BindingFunction = Callable[[Any], Awaitable[Any]]
"""A binding: ``async def binding(value) -> value``, called on the run's event loop."""


class ErrorClassSpec(msgspec.Struct, metaclass=KeywordChecked, frozen=True):
    """The exception class a namespace's rejected calls raise in the program.

    ``name`` is the class's global name (``ToolCallError``); ``member_attr`` is the attribute
    naming the rejected binding (``tool_name``). ``str(error)`` and ``error.message`` are the
    rejection text.
    """

    name: str
    member_attr: str


class BindingNamespace(msgspec.Struct, metaclass=KeywordChecked, frozen=True):
    """One global of the program (``tools``) whose members are host binding functions.

    ``snapshot_functions``, when given, holds the same bindings for arguments that are already
    a snapshot: a fresh, deep-frozen tree of lossless JSON (``FrozenDict``, ``FrozenList`` and
    scalars, no shared or cyclic parts) that nothing else holds. A runtime that decodes each
    call's arguments into exactly that (the subprocess runtime does) calls these instead of
    ``functions``, which must copy and check what they are given.

    ``describe``, when given, is what ``help()`` in the program shows: called (on the run's
    event loop) with a binding's name, or ``None`` for the namespace itself, it returns the
    text (``None``: nothing to show beyond the binding's name), or an awaitable of it for a
    describer that must ask elsewhere (a Ray node's runtime asks the harness).
    """

    global_name: str
    functions: Mapping[str, BindingFunction]
    error_class: ErrorClassSpec | None = None
    snapshot_functions: Mapping[str, BindingFunction] | None = None
    describe: Callable[[str | None], str | Awaitable[str | None] | None] | None = None


class CodeRunRequest(msgspec.Struct, metaclass=KeywordChecked, frozen=True):
    """One program to run, the namespaces it sees, and the signal that aborts it."""

    program: str
    bindings: Sequence[BindingNamespace] = ()
    signal: AbortSignal | None = None


class CodeRunFailure(msgspec.Struct, frozen=True):
    """Why a run failed: a ``FailureKind`` and a message."""

    kind: str
    message: str


class CodeRunResult(msgspec.Struct, frozen=True):
    """A settled run: its logs, its value (``UNSET`` = no result) or its failure.

    ``logs`` is a ``FrozenList`` of strings; a present ``value`` is built from ``FrozenDict`` and
    ``FrozenList`` (``None`` is an explicit null result). At most one of ``value`` and ``error``
    is set. The logs plus the value or failure message fit the runtime's ``max_output_bytes``.
    """

    logs: list[str]
    value: Any = UNSET
    error: CodeRunFailure | None = None

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.error is None


@runtime_checkable
class CodeRuntime(Protocol):
    """A Code Mode runtime (see the module docstring for the concurrency contract)."""

    @property
    def language(self) -> str:
        """The program language (``"python"`` for the shipped runtime)."""
        ...

    @property
    def isolation(self) -> str:
        """Where programs run: ``"sandbox"`` (the shipped runtime's default, see
        ``docs/sandbox.md``) or ``"process"`` (a separate process, not a security boundary)."""
        ...

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        """Run one program; outcomes are results, misuse raises before anything starts."""
        ...

    async def dispose(self) -> None:
        """Settle live runs as ``abort`` / ``runtime disposed``, kill and await workers."""
        ...


def _check_positive(key: str, value: object) -> None:
    message = f"code runtime: config.{key} must be a positive number, got {number_text(value)}"
    if type(value) not in (int, float):
        raise TypeError(message)
    if not finite_number(value) or value <= 0:  # type: ignore[arg-type, operator]
        raise ValueError(message)


def _check_count(key: str, value: object, what: str) -> None:
    """An integer of 1 up to the largest safe integer: ``TypeError`` or ``ValueError``."""
    message = f"code runtime: config.{key} must be {what}, got {number_text(value)}"
    if type(value) is not int:
        raise TypeError(message)
    if not 1 <= value <= MAX_SAFE_INTEGER:
        raise ValueError(message)


class CodeRuntimeConfig(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """Budgets of a code runtime, validated at construction.

    ``compute_ms``: CPU budget of the worker (busy time); ``max_wall_ms``: wall ceiling from
    spawn; ``max_output_bytes``: cap on logs plus value or message (an integer >= 4);
    ``max_memory_mb``: worker address-space limit (under the sandbox also the memory of the
    whole process tree and the size of the scratch directory), at least ``MIN_MAX_MEMORY_MB``
    (the worker takes about 32 MB of it itself); ``max_frame_bytes``: cap on one
    channel frame in either direction; ``isolation``: ``"sandbox"`` (the default: Landlock,
    namespaces, seccomp, see ``docs/sandbox.md``) or ``"process"`` (own process group, limits
    and a clean environment only); ``sandbox``: the grants under ``"sandbox"``;
    ``max_parallel_runs``: how many runs the runtime has in flight at once (more wait their
    turn in arrival order, their wall ceiling not yet started; see ``_run_slots``). A wrong type
    raises ``TypeError``, a bad value ``ValueError``, both with ``code runtime: config.<key>
    must be ...``.
    """

    compute_ms: float = DEFAULT_COMPUTE_MS
    max_wall_ms: float = DEFAULT_MAX_WALL_MS
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_memory_mb: float = DEFAULT_MAX_MEMORY_MB
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    isolation: str = "sandbox"
    sandbox: CodeSandbox = msgspec.field(default_factory=CodeSandbox)
    max_parallel_runs: int = DEFAULT_MAX_PARALLEL_RUNS

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            error = TypeError if type(self.isolation) is not str else ValueError
            raise error(
                "code runtime: config.isolation must be one of sandbox, process; "
                f"got {self.isolation!r}"
            )
        if not isinstance(self.sandbox, CodeSandbox):
            raise TypeError(
                "code runtime: config.sandbox must be a CodeSandbox, "
                f"got {type(self.sandbox).__name__}"
            )
        for key in ("compute_ms", "max_wall_ms", "max_output_bytes", "max_memory_mb"):
            _check_positive(key, getattr(self, key))
        floor = memory_floor_text(self.max_memory_mb)
        if floor is not None:
            raise ValueError(f"code runtime: config.max_memory_mb {floor}")
        for key in ("compute_ms", "max_wall_ms", "max_memory_mb"):
            # Kept as floats: the worker's boot frame carries them as such, and an integer
            # budget past 64 bits (a "no limit" as good as 1e30) would fail every run there.
            msgspec.structs.force_setattr(self, key, float(getattr(self, key)))
        output = self.max_output_bytes
        if type(output) is not int or not 4 <= output <= MAX_SAFE_INTEGER:
            raise ValueError(
                "code runtime: config.max_output_bytes must be a safe integer of at least 4, "
                f"got {number_text(output)}"
            )
        _check_count("max_frame_bytes", self.max_frame_bytes, "a positive safe integer")
        _check_count(
            "max_parallel_runs",
            self.max_parallel_runs,
            f"a positive integer of at most {MAX_SAFE_INTEGER}",
        )


class DefaultRuntime:
    """The type of ``DEFAULT``: "the shipped subprocess runtime" where a runtime is chosen."""

    _instance: DefaultRuntime | None = None

    def __new__(cls) -> DefaultRuntime:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = DefaultRuntime()
"""Stands for "the default code runtime" in ``ToolSystem.start(code_runtime=...)``."""


def runtime_config_from(config: Any, sandbox: CodeSandbox | None = None) -> CodeRuntimeConfig:
    """The runtime settings of a ``ToolsConfig`` (or any object with the same five budgets;
    ``code_isolation`` defaults to ``"sandbox"``, ``max_parallel_code_runs`` to its default),
    with ``sandbox``'s grants."""
    return CodeRuntimeConfig(
        isolation=getattr(config, "code_isolation", "sandbox"),
        sandbox=CodeSandbox() if sandbox is None else sandbox,
        compute_ms=config.compute_ms,
        max_wall_ms=config.max_wall_ms,
        max_output_bytes=config.max_output_bytes,
        max_memory_mb=config.max_memory_mb,
        max_frame_bytes=config.max_frame_bytes,
        max_parallel_runs=getattr(config, "max_parallel_code_runs", DEFAULT_MAX_PARALLEL_RUNS),
    )


_INJECTED: Final = frozenset({"print", "asyncio", ABSENT_NAME})
_RESERVED_MEMBERS: Final = frozenset({"args", "message", "with_traceback", "add_note"})


def _usable_identifier(name: object) -> bool:
    """An identifier that is no keyword, no injected name and no dunder (``__builtins__``)."""
    return (
        type(name) is str
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and name not in _INJECTED
        and not (name.startswith("__") and name.endswith("__"))
    )


def validate_request(request: CodeRunRequest) -> None:
    """Raise ``TypeError``/``ValueError`` for a misused request."""
    if not isinstance(request, CodeRunRequest):
        raise TypeError(
            f"code runtime: run() expects a CodeRunRequest, got {type(request).__name__}"
        )
    if type(request.program) is not str:
        raise TypeError(
            f"code runtime: program must be a str, got {type(request.program).__name__}"
        )
    if request.signal is not None and not isinstance(request.signal, AbortSignal):
        raise TypeError(
            f"code runtime: signal must be an AbortSignal or None, got "
            f"{type(request.signal).__name__}"
        )
    globals_seen: set[str] = set()
    classes_seen: set[str] = set()
    for namespace in request.bindings:
        if not isinstance(namespace, BindingNamespace):
            raise TypeError(
                "code runtime: bindings must be BindingNamespace objects, got "
                f"{type(namespace).__name__}"
            )
        name = namespace.global_name
        if not _usable_identifier(name):
            raise ValueError(f"code runtime: binding global {name!r} is not a usable identifier")
        if name in globals_seen:
            raise ValueError(f"code runtime: binding global {name!r} is declared twice")
        globals_seen.add(name)
        if not isinstance(namespace.functions, Mapping):
            raise TypeError(f"code runtime: functions of {name!r} must be a mapping")
        for member, function in namespace.functions.items():
            if type(member) is not str:
                raise TypeError(f"code runtime: binding names of {name!r} must be str")
            if not callable(function):
                raise TypeError(f"code runtime: binding {name}.{member} is not callable")
        if namespace.describe is not None and not callable(namespace.describe):
            raise TypeError(f"code runtime: describe of {name!r} must be callable or None")
        spec = namespace.error_class
        if spec is None:
            continue
        if not isinstance(spec, ErrorClassSpec):
            raise TypeError(
                f"code runtime: error_class of {name!r} must be an ErrorClassSpec or None"
            )
        if not _usable_identifier(spec.name):
            raise ValueError(f"code runtime: error class {spec.name!r} is not a usable identifier")
        if spec.name in classes_seen:
            raise ValueError(f"code runtime: error class {spec.name!r} is declared twice")
        classes_seen.add(spec.name)
        member_attr = spec.member_attr
        if (
            type(member_attr) is not str
            or not member_attr.isidentifier()
            or keyword.iskeyword(member_attr)
            or member_attr.startswith("_")
            or member_attr in _RESERVED_MEMBERS
        ):
            raise ValueError(
                f"code runtime: error class member {member_attr!r} is empty or reserved"
            )
    clash = globals_seen & classes_seen
    if clash:
        raise ValueError(f"code runtime: error class {min(clash)!r} collides with a binding global")
