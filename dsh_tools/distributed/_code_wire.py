"""Frames between a ``RayCodeRuntime`` in the harness and its host actor on a Ray node.

The node sends events: a program's binding call (``CallEvent``), its ``help()`` on a binding or
a namespace (``HelpEvent``), the run's result (``DoneEvent``), or a request the node's runtime
refused as misuse (``MisuseEvent``). The harness answers each call and help with ``resolve``.
Values are msgspec JSON, frozen again on arrival.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "CallEvent",
    "DoneEvent",
    "Event",
    "HelpEvent",
    "MisuseEvent",
    "NamespaceSpec",
    "decode_events",
]


class NamespaceSpec(msgspec.Struct, frozen=True, array_like=True):
    """One binding namespace: its global, member names and error class (name, member attr);
    ``described``: the harness has a describer for it (``help()``, see ``HelpEvent``)."""

    global_name: str
    members: list[str]
    error_class: tuple[str, str] | None = None
    described: bool = False


class CallEvent(msgspec.Struct, frozen=True, tag="call"):
    """The program called ``global_name.member(value)``; ``number`` identifies the answer."""

    number: int
    global_name: str
    member: str
    value: msgspec.Raw


class HelpEvent(msgspec.Struct, frozen=True, tag="help"):
    """The program asked ``help()`` of binding ``name`` of ``global_name`` (``None``: of the
    namespace); the harness's describer answers with the text (or ``None``) as call
    ``number``."""

    number: int
    global_name: str
    name: str | None


class DoneEvent(msgspec.Struct, frozen=True, tag="done"):
    """The run settled: logs, a value (when ``has_value``) or a failure kind and message."""

    logs: list[str]
    has_value: bool = False
    value: msgspec.Raw = msgspec.Raw(b"null")
    error_kind: str | None = None
    error_message: str | None = None


class MisuseEvent(msgspec.Struct, frozen=True, tag="misuse"):
    """The node's runtime raised for a misused request (``TypeError``/``ValueError``/...)."""

    type_name: str
    message: str


Event = CallEvent | HelpEvent | DoneEvent | MisuseEvent

_events = msgspec.json.Decoder(list[Event])


def decode_events(frame: bytes) -> list[Any]:
    """The events of one frame, in the order the node produced them."""
    return _events.decode(frame)
