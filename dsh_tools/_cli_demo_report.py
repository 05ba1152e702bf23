"""What ``dsh-tools demo`` prints about its turn: each call's card, which component decided
its outcome, how long it took, and the session's event log."""

from __future__ import annotations

import json
from typing import Any, TextIO

from msgspec import UNSET

from ._system import ToolSystem
from .actors import ToolExecutionFailure, ToolExecutionResult

__all__ = ["call_durations", "card_title", "outcome_source", "print_event_log"]


def card_title(system: ToolSystem, name: str, arguments: Any) -> str:
    definition = system.tools.get(name)
    presenter = getattr(definition, "present_call", None) if definition is not None else None
    if presenter is not None:
        try:
            view = presenter(arguments)
        except Exception:
            view = None
        if view is not None:
            card = type(view).__name__.replace("CallView", "").lower() or "generic"
            return f"{card} card: {getattr(view, 'title', name)}"
    return f"generic card: {name}"


def print_event_log(system: ToolSystem, out: TextIO) -> None:
    print("\nEvent log (system.session.events):", file=out)
    start = None
    for event in system.session.events:
        start = event.time if start is None else start
        data = event.data
        stamp = f"+{(event.time - start) * 1000:7.1f} ms"
        if event.type == "tool/call":
            arguments = str(data["arguments"])
            if len(arguments) > 60:
                arguments = arguments[:57] + "..."
            detail = f"{data['call_id']} {data['name']} {arguments}"
        elif event.type == "tool/result":
            status = "error" if data["is_error"] else "ok"
            code = f" ({data['error']['code']})" if "error" in data else ""
            detail = f"{data['call_id']} {status}{code}"
        elif event.type.startswith("tool/code-dispatch"):
            detail = f"{data['sub_call_id']} {data['name']}"
            if "is_error" in data:
                detail += " error" if data["is_error"] else " ok"
        else:
            detail = json.dumps(data.get("content"), ensure_ascii=False)[:80]
        print(f"  {stamp}  {event.type:<26} {detail}", file=out)


def call_durations(system: ToolSystem) -> dict[str, float]:
    """Milliseconds from each call's ``tool/call`` event to its ``tool/result``."""
    started: dict[str, float] = {}
    took: dict[str, float] = {}
    for event in system.session.events:
        call_id = event.data.get("call_id") if isinstance(event.data, dict) else None
        if event.type == "tool/call" and call_id is not None:
            started[call_id] = event.time
        elif event.type == "tool/result" and call_id in started:
            took[call_id] = (event.time - started[call_id]) * 1000
    return took


def outcome_source(result: ToolExecutionResult, call_id: str, decided_by: dict[str, str]) -> str:
    """Which component produced this outcome: a guard, the policy hook and approval, the
    timeout policy, or the tool itself."""
    if call_id in decided_by:
        return decided_by[call_id]
    info = result.error.info if isinstance(result, ToolExecutionFailure) else UNSET
    if info is not UNSET and info.code == "TOOL_TIMEOUT":
        return "timeout policy (its deadline fired)"
    return "the tool"
