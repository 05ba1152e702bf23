"""Prompt assembly: the tools each presentation mode contributes and the ``tools:sdk`` section.

Native mode shows every visible tool; ``code`` shows only ``run_code`` plus the generated Python
SDK section; ``both`` shows both. Non-native modes re-check the code runtime at every assembly.
``ToolSystem.assemble_prompt`` keeps each agent's assembly per registry snapshot
(``PromptAssembler``): its tool schemas are then deep-frozen and shared, in fresh lists.
Final tool order is lexicographic, or ``tool_order`` (names plus at most one
``"<unlisted-tools>"`` marker standing for the rest, lexicographically).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..actors._config import UNLISTED_TOOLS
from ..registry import (
    RUN_CODE,
    RegistrySnapshot,
    ToolDefinition,
    TypedToolDefinition,
    project_schema,
    snapshot_json,
    thaw,
)
from ..registry._hooks import AssembledPrompt, PromptSection
from ..registry._snapshot import STOPPED_TEXT
from ._sdk import SdkTool, render_sdk
from ._seam import CodeRuntime
from ._transport import runtime_language_message, runtime_required_message

__all__ = [
    "SDK_SECTION",
    "SDK_SECTION_ORDER",
    "AssembledPrompt",
    "PromptAssembler",
    "PromptSection",
    "assemble",
]

SDK_SECTION = "tools:sdk"
SDK_SECTION_ORDER = 150


def check_runtime(mode: str, runtime: CodeRuntime | None) -> None:
    """Raise the documented refusal when a non-native mode has no Python code runtime."""
    if mode == "native":
        return
    if runtime is None:
        raise RuntimeError(runtime_required_message(mode))
    language = getattr(runtime, "language", None)
    if language != "python":
        raise RuntimeError(runtime_language_message(mode, str(language)))


def sdk_tools(snapshot: RegistrySnapshot, agent: str | None) -> list[SdkTool]:
    """The SDK inputs for ``agent``'s visible tools, ``run_code`` excluded."""
    out = []
    for name, entry in snapshot.view(agent).items():
        if name == RUN_CODE and entry is snapshot.transport:
            continue
        out.append(sdk_tool(name, entry.definition))
    return out


def sdk_tool(name: str, definition: ToolDefinition) -> SdkTool:
    """What the SDK shows of ``definition`` under ``name``: a typed tool's result as its
    annotation declares it, not the projection its output contract checks (in which a union
    or a typed map reads as ``JsonValue``)."""
    output = definition.output
    assert output is not None  # registration refuses a tool without its output contract
    declared = (
        definition.declared_output_schema if isinstance(definition, TypedToolDefinition) else None
    )
    return SdkTool(
        name=name,
        description=definition.description,
        parameters=definition.parameters,
        output_schema=output.schema if declared is None else declared,
    )


def order_tools(
    schemas: list[dict[str, Any]], tool_order: Sequence[str] | None, known: set[str]
) -> list[dict[str, Any]]:
    """Apply ``tool_order`` (validated against ``known``) or the lexicographic default."""
    by_name = {s["name"]: s for s in schemas}
    if tool_order is None:
        return [by_name[n] for n in sorted(by_name)]
    for name in tool_order:
        if name != UNLISTED_TOOLS and name not in known:
            known_text = ", ".join(sorted(known)) or "(none)"
            raise ValueError(
                f'tool_order lists unregistered tool "{name}"; known tools: {known_text}'
            )
    listed = [n for n in tool_order if n != UNLISTED_TOOLS]
    rest = sorted(n for n in by_name if n not in listed)
    ordered: list[str] = []
    marker_seen = False
    for name in tool_order:
        if name == UNLISTED_TOOLS:
            ordered.extend(rest)
            marker_seen = True
        elif name in by_name:
            ordered.append(name)
    if not marker_seen:
        ordered.extend(rest)
    return [by_name[n] for n in ordered]


_Basis = tuple[RegistrySnapshot, CodeRuntime | None, Sequence[str] | None]
_Parts = tuple[list[PromptSection], list[dict[str, Any]]]


class PromptAssembler:
    """Assembles prompts, keeping each agent's assembly for as long as the registry snapshot,
    the code runtime and ``tool_order`` stay the same (a snapshot never changes; any change to
    the registry publishes a new one).

    What is kept is shared read-only: the tool schemas are deep-frozen (``FrozenDict`` /
    ``FrozenList``, equal to plain dicts and lists, encoding as they are; a mutation raises
    ``TypeError``), and every call returns fresh ``sections`` and ``tools`` lists, so a caller
    cannot change what the next caller gets. Assemble hooks still run on every call, on fresh
    plain (mutable) copies of the schemas, as before."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        # What the kept assemblies were made from, and the assemblies by agent. One attribute,
        # read and replaced whole: a thread that read it before another thread replaced it
        # stores into the old dict, never into the one kept for the new basis.
        self._state: tuple[_Basis, dict[str | None, _Parts]] | None = None

    def assemble(
        self,
        snapshot: RegistrySnapshot,
        agent: str | None,
        *,
        runtime: CodeRuntime | None,
        tool_order: Sequence[str] | None,
    ) -> AssembledPrompt:
        """``assemble(...)``, reusing what this snapshot gave before."""
        if snapshot.closed:
            raise RuntimeError(STOPPED_TEXT)
        check_runtime(snapshot.mode, runtime)
        state = self._state
        if (
            state is None
            or state[0][0] is not snapshot
            or state[0][1] is not runtime
            or state[0][2] is not tool_order
        ):
            state = self._state = ((snapshot, runtime, tool_order), {})
        kept = state[1]
        # An agent nothing applies to alone shares the assembly of calls without an agent, so
        # a new agent key per conversation keeps nothing more.
        shown = agent if snapshot.scoped(agent) else None
        parts = kept.get(shown)
        if parts is None:
            sections, tools = _parts(snapshot, shown, tool_order)
            parts = kept[shown] = (sections, [snapshot_json(tool) for tool in tools])
        hooks = snapshot.hooks_of(agent).assemble
        if hooks:
            return _run_hooks(
                hooks, AssembledPrompt(list(parts[0]), [thaw(tool) for tool in parts[1]])
            )
        return AssembledPrompt(list(parts[0]), list(parts[1]))


def assemble(
    snapshot: RegistrySnapshot,
    agent: str | None,
    *,
    runtime: CodeRuntime | None,
    tool_order: Sequence[str] | None,
) -> AssembledPrompt:
    """Assemble the prompt for ``agent`` from ``snapshot`` (see the module docstring)."""
    if snapshot.closed:
        raise RuntimeError(STOPPED_TEXT)
    check_runtime(snapshot.mode, runtime)
    sections, tools = _parts(snapshot, agent, tool_order)
    return _run_hooks(snapshot.hooks_of(agent).assemble, AssembledPrompt(sections, tools))


def _parts(
    snapshot: RegistrySnapshot, agent: str | None, tool_order: Sequence[str] | None
) -> tuple[list[PromptSection], list[dict[str, Any]]]:
    """The ordered sections and tool schemas, before assemble hooks."""
    mode = snapshot.mode
    view = snapshot.view(agent)
    schemas: list[dict[str, Any]] = []
    known: set[str]
    if mode == "native":
        schemas = [project_schema(e.definition) for e in view.values()]
        known = set(snapshot.known_names(agent))
    else:
        transport = snapshot.transport
        if mode == "both":
            schemas = [project_schema(e.definition) for e in view.values() if e is not transport]
            known = set(snapshot.known_names(agent)) | {RUN_CODE}
        else:
            known = {RUN_CODE}
        if transport is not None:
            schemas.append(project_schema(transport.definition))
    tools = order_tools(schemas, tool_order, known)
    sections: dict[str, PromptSection] = {}
    if mode != "native":
        sections[SDK_SECTION] = PromptSection(
            SDK_SECTION, SDK_SECTION_ORDER, render_sdk(sdk_tools(snapshot, agent))
        )
    for entry in snapshot.sections:
        if entry.agent is None:
            sections[entry.name] = PromptSection(entry.name, entry.order, entry.text)
    for entry in snapshot.sections:
        if entry.agent is not None and entry.agent == agent:
            sections[entry.name] = PromptSection(entry.name, entry.order, entry.text)
    return sorted(sections.values(), key=lambda s: s.order), tools


def _run_hooks(
    hooks: Sequence[Callable[[AssembledPrompt], AssembledPrompt]], assembly: AssembledPrompt
) -> AssembledPrompt:
    for hook in hooks:
        out = hook(assembly)
        if not isinstance(out, AssembledPrompt):
            raise TypeError(
                f"an assemble hook returned {type(out).__name__}; expected AssembledPrompt"
            )
        assembly = out
    return assembly
