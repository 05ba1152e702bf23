"""What a provider request needs from an assembled prompt, and reading a response's calls.

``system.assemble_prompt(agent)`` gives the prompt sections and the tool schemas of one agent;
``ProviderPrompt`` holds them in a provider's shape: the system text, the provider's ``tools``
list (names mapped to provider-safe forms) and the ``ToolNameMap`` that maps a response's calls
back. The name map is a pure function of the exposed names (and of the map of the turns before,
when given one), so it agrees with every exporter built from the same tools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

import msgspec

from ..actors import ToolCall
from ..codebridge import AssembledPrompt
from ._arguments import arguments_text
from ._names import ToolNameMap

__all__ = [
    "ProviderPrompt",
    "check_sendable",
    "distinct_ids",
    "entry_of",
    "items_of",
    "make_call",
    "mapped_schemas",
    "model_call_id",
    "response_of",
    "sendable_arguments",
    "system_text",
]

ToolT = TypeVar("ToolT")


class ProviderPrompt(msgspec.Struct, Generic[ToolT], frozen=True):
    """One request's inputs in a provider's shape.

    ``system`` is the text of the prompt sections in order (blank-line separated; empty when
    there are none), ``tools`` the provider's tools list, ``names`` the map that the
    ``*_tool_calls`` adapters take as ``names=`` to turn provider names back into registry names.
    """

    system: str
    tools: list[ToolT]
    names: ToolNameMap


def system_text(prompt: AssembledPrompt) -> str:
    """The prompt sections' text in order, separated by blank lines."""
    return "\n\n".join(section.text for section in prompt.sections if section.text)


def mapped_schemas(
    prompt: AssembledPrompt, earlier: ToolNameMap | None = None
) -> tuple[list[dict[str, Any]], ToolNameMap]:
    """The prompt's tool schemas under their provider names, and the map between the two
    (continuing ``earlier``, the map of the conversation's turns before)."""
    if not isinstance(prompt, AssembledPrompt):
        raise TypeError(
            "expected the AssembledPrompt that system.assemble_prompt(agent) returns, got "
            f"{type(prompt).__name__}"
        )
    names = ToolNameMap.from_schemas(prompt.tools, earlier=earlier)
    schemas = [{**schema, "name": names.to_provider(schema["name"])} for schema in prompt.tools]
    return schemas, names


def _arguments_text(arguments: object, at: str) -> str:
    if arguments is None:
        return "{}"  # a call without arguments; the tool's schema decides whether that is valid
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, (Mapping, list)):
        return arguments_text(arguments, at)
    raise ValueError(f"{at} must be JSON text or a JSON object, got {type(arguments).__name__}")


def _value_text(value: object, at: str) -> str:
    """The JSON text of a provider's already-parsed arguments, whatever JSON value the model
    sent (a string or a number is that value, never text to parse again): the batch then
    fails that call alone if it is not an object."""
    if value is None:
        return "{}"  # a call without arguments; the tool's schema decides whether that is valid
    return arguments_text(value, at)


_NO_ID = "(no id)"
"""The id a call the model gave none runs under (``distinct_ids`` numbers its repeats)."""
_AS_SENT = " (as sent)"
"""Marks an id the model gave that reads as one of those the adapters give (``_reserved``)."""
_REPEAT_ID = re.compile(r"(.+) \(repeat [1-9][0-9]*\)", re.DOTALL)


def _reserved(call_id: str) -> bool:
    """Whether ``call_id`` reads as an id the adapters give: ``(no id)``, a repeat's
    ``<id> (repeat <n>)``, or such an id marked ``(as sent)``. A model that gives one itself
    (a server may name its ids anything) has it run marked, ``<id> (as sent)``, so that
    ``model_call_id`` never answers it under another call's id."""
    if not call_id.endswith(")"):
        return False  # the common case, without a regular expression
    if call_id == _NO_ID or _REPEAT_ID.fullmatch(call_id) is not None:
        return True
    return call_id.endswith(_AS_SENT) and _reserved(call_id[: -len(_AS_SENT)])


def _as_sent(call_id: str) -> str:
    return call_id + _AS_SENT


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A code point no UTF-8 text holds: Python's ``json``, which the SDKs decode responses with,
reads a ``\\ud800`` escape as one, and the SDKs send requests as UTF-8, so a request that
repeats it raises ``UnicodeEncodeError``."""


def check_sendable(text: str, what: str, where: str) -> None:
    """Refuse the response when the call id or function name ``text`` cannot be sent back:
    the next request repeats both (the assistant message, each result's id, an unknown tool's
    error), so the call's result could never be delivered, even after its tool ran."""
    if text.isascii():
        return  # the common case, without a regular expression
    found = _SURROGATE.search(text)
    if found is not None:
        raise ValueError(
            f"{where} has a {what} holding a lone surrogate (U+{ord(found.group()):04X} at "
            f"offset {found.start()}), which no request can carry back: send the request again"
        )


def sendable_arguments(text: str) -> str:
    """``text`` with each lone surrogate written as a ``\\uXXXX`` escape, so that the
    assistant message repeating the call can be sent (the batch refused those arguments, and
    the model reads why)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def make_call(
    call_id: object,
    name: object,
    arguments: object,
    names: ToolNameMap | None,
    where: str,
    *,
    arguments_at: str,
    parsed: bool = False,
) -> ToolCall:
    """A ``ToolCall`` from one provider call at ``where``, its name mapped back to the
    registry's. ``arguments_at``: where the arguments are, for errors; ``parsed``: the
    provider sends the arguments as a JSON value, not as JSON text. Arguments that are not
    lossless JSON keep a text the batch refuses for that call alone (``arguments_text``); a
    name that is empty or no ``str`` runs as the empty name, which the batch fails alone as an
    unknown tool."""
    if call_id is None or call_id == "":
        # Some compatible servers send none: it runs under an id of its own, answered (and
        # repeated in the assistant message) as the empty id (``model_call_id``).
        call_id = _NO_ID
    elif type(call_id) is not str:
        raise ValueError(f"{where} has no call id (a str, got {type(call_id).__name__})")
    else:
        check_sendable(call_id, "call id", where)
        if _reserved(call_id):
            call_id = _as_sent(call_id)
    if type(name) is not str:
        # No tool has the empty name: the call fails alone as an unknown tool (``unknown tool
        # ""``), as a call of any other name the registry lacks does, so the model reads what
        # was wrong and the turn's other calls run. Its echo repeats the empty name.
        name = ""
    check_sendable(name, "function name", where)
    if names is not None and not isinstance(names, ToolNameMap):
        raise TypeError(f"names must be a ToolNameMap or None, got {type(names).__name__}")
    registry_name = names.to_registry(name) if names is not None else name
    read = _value_text if parsed else _arguments_text
    return ToolCall(call_id, registry_name, read(arguments, arguments_at))


def _repeat_id(call_id: str, n: int) -> str:
    return f"{call_id} (repeat {n})"


def distinct_ids(calls: list[ToolCall]) -> list[ToolCall]:
    """``calls`` with every repeat of a call id in the turn given an id of its own,
    ``<id> (repeat <n>)``, so that the batch (whose call ids are unique) runs each call the
    model made; ``model_call_id`` answers it under the id the model gave. Some
    OpenAI-compatible servers give every call of a turn the same id, or number each tool's
    calls from ``call_0``; a call some send with an empty id or none runs as ``(no id)``
    (``make_call``), repeated as any other id."""
    taken = {call.call_id for call in calls}
    if len(taken) == len(calls):
        return calls
    # Each id's next repeat number: counting from 2 again for every repeat cost a turn of n
    # calls under one id n * n / 2 tries (4,000 took 1.4 s; a server may send any number).
    repeats: dict[str, int] = {}
    distinct: list[ToolCall] = []
    for call in calls:
        call_id = call.call_id
        n = repeats.get(call_id)
        if n is None:
            repeats[call_id] = 2
        else:
            while _repeat_id(call_id, n) in taken:
                n += 1
            taken.add(_repeat_id(call_id, n))
            call = ToolCall(_repeat_id(call_id, n), call.name, call.arguments)
            repeats[call_id] = n + 1
        distinct.append(call)
    return distinct


def model_call_id(call_id: str, answered: set[str]) -> str:
    """The id the model gave the call a result answers: ``call_id``, or for a repeat
    ``distinct_ids`` renamed, the id it repeats (one of the ``answered`` ids, those of the
    batch's results); the empty id for a call the model gave none (``(no id)``), and the id
    itself for one the model gave that ``make_call`` marked ``(as sent)``."""
    repeat = _REPEAT_ID.fullmatch(call_id)
    if repeat is not None and repeat[1] in answered:
        call_id = repeat[1]
    if call_id == _NO_ID:
        return ""
    if call_id.endswith(_AS_SENT) and _reserved(call_id[: -len(_AS_SENT)]):
        return call_id[: -len(_AS_SENT)]
    return call_id


def items_of(value: object, where: str) -> list[Any]:
    """A response's list field (SDK list or JSON array); ``None`` is an empty list."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ValueError(f"{where} must be a list, got {type(value).__name__}")
    return list(value)


def _shaped(value: object, attributes: tuple[str, ...]) -> bool:
    """Whether ``value`` is a dict, or an SDK object with one of ``attributes``."""
    return isinstance(value, Mapping) or any(hasattr(value, name) for name in attributes)


def response_of(value: object, adapter: str, expected: str, attributes: tuple[str, ...]) -> None:
    """Refuse what ``adapter`` was given when it is not ``expected``: neither a dict nor an SDK
    object with one of ``attributes`` (a string, ``None``, a number...), so that the wrong
    object never reads as a response without calls."""
    if not _shaped(value, attributes):
        raise TypeError(f"{adapter}() takes {expected}, got {type(value).__name__}")


def entry_of(item: object, where: str, expected: str, attributes: tuple[str, ...]) -> Any:
    """``item``, one entry of a response's list at ``where``, when it is a dict or an SDK object
    with one of ``attributes``; ``ValueError`` naming the place otherwise, so that a malformed
    entry is never skipped as an entry of another kind."""
    if not _shaped(item, attributes):
        raise ValueError(
            f"{where} must be {expected} (an SDK object or a dict), got {type(item).__name__}"
        )
    return item
