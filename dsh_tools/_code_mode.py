"""Wiring Code Mode into a ``ToolSystem``: the runtime, the ``run_code`` transport, assembly.

Part of the composition root: it is the one place that hands the ``run_code`` transport (built
from ``codebridge``) to the registry, which never imports ``codebridge`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Final, Protocol

import pykka

from .actors._config import ToolsConfig
from .actors._protocol import SetTransport
from .codebridge._assembly import check_runtime
from .codebridge._bridge import (
    TOOL_CALL_ERROR,
    TOOLS_NAMESPACE,
    CodeRunBridgeActor,
    binding_names,
)
from .codebridge._runtime import SubprocessCodeRuntime, namespace_wire
from .codebridge._sandbox import CodeSandbox
from .codebridge._seam import CodeRuntime, DefaultRuntime, runtime_config_from
from .codebridge._transport import (
    INVALID_DESCRIPTION_MESSAGE,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_TOOL_NAME,
    present_run_code_call,
    program_of,
    render_run_code_output,
    run_code_output_dsl,
    run_code_parameters_dsl,
)
from .pipeline import Pipeline, SpillPolicy, spill_policy
from .registry import SnapshotCell, ToolDefinition, ToolOutput, define_tool
from .registry._execution import Announced, ToolRunContext

__all__ = [
    "CodeModeHost",
    "build_run_code",
    "check_code_runtime",
    "check_code_sandbox",
    "check_runtime_settings",
    "install_code_mode",
]


class CodeModeHost(Protocol):
    """What Code Mode reads and sets on the system it is wired into (``ToolSystem``)."""

    config: ToolsConfig
    pipeline: Pipeline
    code_runtime: CodeRuntime | None
    dispatch_spill: SpillPolicy | None


def check_code_runtime(code_runtime: object) -> None:
    """Refuse a ``code_runtime`` that is not ``DEFAULT``, ``None`` or a runtime: an object with
    a ``language`` and a ``run`` method (``CodeRuntime``). Found only at the first ``run_code``
    call, anything else would fail there with a message about the runtime's language."""
    if code_runtime is None or isinstance(code_runtime, DefaultRuntime):
        return
    if isinstance(code_runtime, type):
        got = f"the class {code_runtime.__name__} (give an instance of it)"
    elif not hasattr(code_runtime, "language") or not callable(getattr(code_runtime, "run", None)):
        got = type(code_runtime).__name__
    else:
        return
    raise TypeError(
        "code_runtime must be a CodeRuntime (an object with a language and an async run "
        f"method), DEFAULT or None, got {got}"
    )


def check_code_sandbox(
    code_runtime: CodeRuntime | DefaultRuntime | None, code_sandbox: object
) -> None:
    """Refuse grants that are not a ``CodeSandbox`` or that no default runtime would use."""
    if code_sandbox is None:
        return
    if not isinstance(code_sandbox, CodeSandbox):
        raise TypeError(f"code_sandbox must be a CodeSandbox, got {type(code_sandbox).__name__}")
    if code_runtime is None:
        # Nothing runs code, so nothing would ever use the grants: not a runtime of one's own.
        raise ValueError(
            "code_sandbox must go with the default code runtime, and code_runtime=None starts "
            "no code runtime: leave code_runtime as DEFAULT to run Code Mode programs in the "
            "sandbox, or drop code_sandbox"
        )
    if not isinstance(code_runtime, DefaultRuntime):
        raise ValueError(
            "code_sandbox must go with the default code runtime; give your own runtime "
            "CodeRuntimeConfig(sandbox=...)"
        )


_RUNTIME_SETTINGS: Final = (
    "code_isolation",
    "compute_ms",
    "max_wall_ms",
    "max_output_bytes",
    "max_memory_mb",
    "max_frame_bytes",
    "max_parallel_code_runs",
)
"""The ``ToolsConfig`` settings that configure the default code runtime, and nothing else."""


def check_runtime_settings(config: ToolsConfig, code_runtime: object) -> None:
    """Refuse Code Mode settings of ``config`` that a runtime the harness gave would never
    see: they configure the default runtime only (``runtime_config_from``)."""
    if code_runtime is None or isinstance(code_runtime, DefaultRuntime):
        return
    defaults = ToolsConfig()
    given = [
        f"{name}={getattr(config, name)!r}"
        for name in _RUNTIME_SETTINGS
        if getattr(config, name) != getattr(defaults, name)
    ]
    if given:
        raise ValueError(
            f"ToolsConfig({', '.join(given)}) configures the default code runtime, which "
            f"code_runtime={type(code_runtime).__name__}(...) replaces; give that runtime "
            "these settings itself (CodeRuntimeConfig(isolation=, compute_ms=, max_wall_ms=, "
            "max_output_bytes=, max_memory_mb=, max_frame_bytes=, max_parallel_runs=))"
        )


def install_code_mode(
    system: CodeModeHost,
    code_runtime: CodeRuntime | DefaultRuntime | None,
    *,
    registry: pykka.ActorRef[Any],
    cell: SnapshotCell,
    code_sandbox: CodeSandbox | None = None,
) -> bool:
    """Resolve the code runtime and, in ``code``/``both`` mode, install ``run_code``; return
    whether the system owns (and must dispose) the runtime.

    ``code_runtime`` is ``DEFAULT`` (the subprocess runtime, started only for non-native modes),
    ``None`` (no runtime: non-native assemblies refuse) or any ``CodeRuntime``.
    ``code_sandbox`` is the default runtime's grants (under ``code_isolation="sandbox"``).
    """
    config = system.config
    owns_runtime = False
    check_code_sandbox(code_runtime, code_sandbox)
    if isinstance(code_runtime, DefaultRuntime):
        if config.mode == "native":
            system.code_runtime = None
        else:
            system.code_runtime = SubprocessCodeRuntime(runtime_config_from(config, code_sandbox))
            owns_runtime = True
    else:
        system.code_runtime = code_runtime
    # The dispatch-log spill arm: configured by max_inline_bytes, applied by the
    # bridge after the tools/code-dispatch-log waterfall. ``system.dispatch_spill`` is read at
    # every run, so a harness may give it a store (``system.dispatch_spill.store = store``) or
    # replace it (``system.dispatch_spill = spill_policy(n, store)``) at any time.
    if config.max_inline_bytes is not None:
        system.dispatch_spill = spill_policy(config.max_inline_bytes, None)
    if config.mode != "native":
        definition = build_run_code(system, cell)
        system.pipeline.announcers[RUN_CODE_TOOL_NAME] = partial(_prepare_run, system)
        registry.ask(SetTransport(definition, True))
    return owns_runtime


def _prepare_run(system: CodeModeHost, arguments: Any, agent: str | None) -> Announced | None:
    """A ``run_code`` call has begun: the runtime, if it pre-forks workers, prepares the run
    its body will ask for (``SubprocessCodeRuntime.prepare``) with the same program and the
    same bindings, so that the run finds it; what it returns releases it as the call ends."""
    runtime = system.code_runtime
    if not isinstance(runtime, SubprocessCodeRuntime):
        return None
    program = arguments.get("code") if isinstance(arguments, Mapping) else None
    if not isinstance(program, str):
        return None
    names = binding_names(system.pipeline, agent)
    namespaces = [namespace_wire(TOOLS_NAMESPACE, names, TOOL_CALL_ERROR)]
    return runtime.prepare(program_of(program), namespaces)


def build_run_code(system: CodeModeHost, cell: SnapshotCell) -> ToolDefinition:
    """The reserved ``run_code`` tool definition bound to ``system``."""
    mode = system.config.mode

    async def run_code(args: Any, run_ctx: ToolRunContext) -> Any:
        description = args.get("description")
        if not isinstance(description, str) or not description.strip():
            raise ValueError(INVALID_DESCRIPTION_MESSAGE)
        runtime = system.code_runtime
        check_runtime(mode, runtime)
        assert runtime is not None  # check_runtime refuses a missing runtime
        bridge = CodeRunBridgeActor(
            pipeline=system.pipeline,
            runtime=runtime,
            outer=run_ctx,
            max_parallel=system.config.max_parallel_sub_calls,
            dispatch_log_hooks=lambda: cell.current.hooks_of(run_ctx.agent).code_dispatch_log,
            spill=system.dispatch_spill,
            max_calls=system.config.max_sub_calls,
        )
        return await bridge.run(program_of(args["code"]))

    return define_tool(
        name="run_code",
        description=RUN_CODE_DESCRIPTION,
        parameters=run_code_parameters_dsl(),
        output=ToolOutput(schema=run_code_output_dsl(), render=render_run_code_output),
        execute=run_code,
        present_call=present_run_code_call,
    )
