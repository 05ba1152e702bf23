"""Tool names as providers accept them, and back.

OpenAI and Anthropic accept function names matching ``^[a-zA-Z0-9_-]{1,64}$``; the registry
accepts more (MCP plugins prefix their tools, ``time.now``). A ``ToolNameMap`` built from the
names one request exposes gives every name a provider form and maps a model's call back:

- a name that providers already accept is its own provider form (nothing changes for it);
- any other name has its other characters replaced by ``_`` (``time.now`` -> ``time_now``),
  truncated to 64 characters;
- where that form collides with another name of the same map, or was truncated, the form is
  made unique with ``_`` and eight hex digits of the name's SHA-256 (hashed again, with a
  counter, in the rare case that another name of the map has that form already).

The map is a pure function of the set of names, so the exporter and the adapters that read a
response agree whenever they are built from the same tools.

Between the turns of one conversation the set can change (an MCP server's ``list_changed``, a
tool registered or disposed), and a map built from the new set alone could give a name the model
has seen to another tool, or move a name to its hashed form. ``ToolNameMap(names,
earlier=map)`` continues ``map``, the map of the turns before: every name it gave a provider form
keeps it, and no provider form it gave goes to another name (a new tool whose name is such a form
is sent hashed), so within the conversation a provider name always means the same tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

__all__ = ["PROVIDER_NAME_PATTERN", "ToolNameMap", "is_provider_name"]

PROVIDER_NAME_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_OTHER_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LENGTH = 64
_DIGEST_LENGTH = 8


def is_provider_name(name: str) -> bool:
    """Whether OpenAI and Anthropic accept ``name`` as a function name unchanged."""
    return PROVIDER_NAME_PATTERN.fullmatch(name) is not None


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_LENGTH]


def _with_digest(base: str, name: str) -> str:
    return f"{base[: _MAX_LENGTH - _DIGEST_LENGTH - 1]}_{_digest(name)}"


class ToolNameMap:
    """The reversible mapping between registry names and provider function names.

    Invariants: ``to_registry(to_provider(n)) == n`` for every name of the map; every provider
    form matches ``PROVIDER_NAME_PATTERN``; two names never share a provider form.
    """

    __slots__ = ("_given", "_to_provider", "_to_registry")

    _to_provider: dict[str, str]
    _to_registry: dict[str, str]
    _given: dict[str, str]
    """Every provider form this map or an ``earlier`` one gave, by registry name: the names of
    the map and the names earlier turns had that this one no longer has."""

    def __init__(self, names: Iterable[str], *, earlier: ToolNameMap | None = None) -> None:
        # A str iterates too, into a map of its characters as names.
        if isinstance(names, str | bytes | Mapping) or not isinstance(names, Iterable):
            raise TypeError(
                f"ToolNameMap takes a list of tool names, got {type(names).__name__}: "
                "ToolNameMap([...]) or ToolNameMap.from_schemas(system.tools.schemas())"
            )
        ordered = list(dict.fromkeys(names))
        for index, name in enumerate(ordered):
            if type(name) is not str or not name:
                raise ValueError(f"tool names[{index}] must be a non-empty str, got {name!r}")
        if earlier is not None and not isinstance(earlier, ToolNameMap):
            raise TypeError(f"earlier must be a ToolNameMap or None, got {type(earlier).__name__}")
        given = dict(earlier._given) if earlier is not None else {}
        # A name the conversation has seen keeps its form; the others' forms stay reserved.
        to_provider: dict[str, str] = {name: given[name] for name in ordered if name in given}
        taken = set(given.values())
        for name in ordered:
            if name not in to_provider and is_provider_name(name) and name not in taken:
                to_provider[name] = name
                taken.add(name)
        pending = [name for name in ordered if name not in to_provider]
        # Candidates first, so a collision is settled the same way whatever the order of names.
        candidates = {name: _OTHER_CHARACTERS.sub("_", name) for name in pending}
        counts: dict[str, int] = {}
        for candidate in candidates.values():
            counts[candidate] = counts.get(candidate, 0) + 1
        hashed: list[str] = []
        for name in pending:
            candidate = candidates[name]
            if len(candidate) > _MAX_LENGTH or counts[candidate] > 1 or candidate in taken:
                hashed.append(name)
            else:
                to_provider[name] = candidate
                taken.add(candidate)
        # In sorted order, so that the map stays a function of the set of names: a hashed form
        # that another name already has (``x.y`` beside a tool called ``x_y_b24ca9b7``, its own
        # hashed form) is hashed again with a counter until it is free.
        for name in sorted(hashed):
            candidate = _with_digest(candidates[name], name)
            again = 0
            while candidate in taken:
                again += 1
                candidate = _with_digest(candidates[name], f"{name}\x00{again}")
            to_provider[name] = candidate
            taken.add(candidate)
        self._to_provider = to_provider
        given.update(to_provider)
        self._given = given
        # Forms of names the map no longer has map back too, so that a call of a tool the model
        # saw in an earlier turn fails as an unknown tool under the tool's own name.
        self._to_registry = {provider: name for name, provider in given.items()}

    @classmethod
    def from_schemas(
        cls, schemas: Iterable[Mapping[str, object]], *, earlier: ToolNameMap | None = None
    ) -> ToolNameMap:
        """The map of the ``{"name", ...}`` entries that ``tools.schemas()`` returns
        (``earlier``: the map of the conversation's turns before, which it continues)."""
        if isinstance(schemas, str | bytes | Mapping) or not isinstance(schemas, Iterable):
            raise TypeError(
                "ToolNameMap.from_schemas takes the list of tool schemas that "
                f"system.tools.schemas() returns, got {type(schemas).__name__}"
            )
        names: list[str] = []
        for index, schema in enumerate(schemas):
            if not isinstance(schema, Mapping):
                raise TypeError(
                    f"tools[{index}] must be a tool schema dict, got {type(schema).__name__}"
                )
            name = schema.get("name")
            if type(name) is not str or not name:
                raise ValueError(f"tools[{index}].name must be a non-empty str")
            names.append(name)
        return cls(names, earlier=earlier)

    def to_provider(self, name: str) -> str:
        """The provider form of registry name ``name``; a name outside the map is refused."""
        try:
            return self._to_provider[name]
        except KeyError:
            raise KeyError(f'tool "{name}" is not in this name map') from None

    def to_registry(self, provider_name: str) -> str:
        """The registry name behind ``provider_name`` (also for a form an ``earlier`` map gave a
        name this one no longer has); an unknown name is returned unchanged, so the pipeline
        reports it as an unknown tool under the name the model used."""
        return self._to_registry.get(provider_name, provider_name)

    def __contains__(self, name: object) -> bool:
        return name in self._to_provider

    def __len__(self) -> int:
        return len(self._to_provider)

    def __repr__(self) -> str:
        renamed = {n: p for n, p in self._to_provider.items() if n != p}
        return f"ToolNameMap({len(self._to_provider)} names, renamed={renamed!r})"
