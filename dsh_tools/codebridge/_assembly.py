"""Prompt assembly: the tools each presentation mode contributes and the ``tools:sdk`` section.

Native mode shows every visible tool; ``code`` shows only ``run_code`` plus the generated Python
SDK section; ``both`` shows both. Non-native modes re-check the code runtime at every assembly.
Final tool order is lexicographic, or ``tool_order`` (names plus at most one
``"<unlisted-tools>"`` marker standing for the rest, lexicographically).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..actors._config import UNLISTED_TOOLS
from ..registry import RUN_CODE, RegistrySnapshot, project_schema
from ._sdk import SdkTool, render_sdk
from ._transport import runtime_language_message, runtime_required_message

__all__ = ["SDK_SECTION", "SDK_SECTION_ORDER", "AssembledPrompt", "PromptSection", "assemble"]

SDK_SECTION = "tools:sdk"
SDK_SECTION_ORDER = 150


class PromptSection(msgspec.Struct, frozen=True):
    """One named block of the system prompt; sections are sorted by ``order``."""

    name: str
    order: float
    text: str


class AssembledPrompt(msgspec.Struct, frozen=True):
    """What a model turn is given: the prompt ``sections`` and the ``tools`` schemas in order."""

    sections: list[PromptSection]
    tools: list[dict[str, Any]]


def check_runtime(mode: str, runtime: Any) -> None:
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
        definition = entry.definition
        out.append(
            SdkTool(
                name=name,
                description=definition.description,
                parameters=definition.parameters,
                output_schema=definition.output.schema,
            )
        )
    return out


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


def assemble(
    snapshot: RegistrySnapshot,
    agent: str | None,
    *,
    runtime: Any,
    tool_order: Sequence[str] | None,
) -> AssembledPrompt:
    """Assemble the prompt for ``agent`` from ``snapshot`` (see the module docstring)."""
    if snapshot.closed:
        raise RuntimeError("the tool system is stopped: nothing to assemble")
    mode = snapshot.mode
    check_runtime(mode, runtime)
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
    ordered = sorted(sections.values(), key=lambda s: s.order)
    assembly = AssembledPrompt(ordered, tools)
    hooks: tuple[Callable[..., Any], ...] = snapshot.hooks_for("assemble", agent)
    for hook in hooks:
        out = hook(assembly)
        if not isinstance(out, AssembledPrompt):
            raise TypeError(
                f"an assemble hook returned {type(out).__name__}; expected AssembledPrompt"
            )
        assembly = out
    return assembly
