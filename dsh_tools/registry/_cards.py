"""The card vocabulary of tool-owned presentation: the call and result views, their supporting
types, the durable ``ToolResult``, and their encoded form.

Every view is a frozen msgspec Struct. Its encoded form uses the ``card`` tag and snake_case
field names (``raw_input``, ``old_text``, ``new_text``, ``exit_code``), like every other encoded
or persisted field of the project; absent optional fields are omitted. Constructing a view
checks its field types and snapshots its JSON payloads (``content``, ``raw_input``) into frozen
lossless JSON, so a view is immutable and safe to share between threads and to log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from ..actors import FrozenList, ToolExecutionResult
from ._lossless_copy import snapshot_json

__all__ = [
    "CALL_VIEW_TYPES",
    "CARD_KINDS",
    "RESULT_VIEW_TYPES",
    "CallView",
    "CardKind",
    "DiffCallView",
    "DiffResultView",
    "FileDiff",
    "FileLocation",
    "GenericCallView",
    "GenericResultView",
    "ResultView",
    "TerminalCallView",
    "TerminalResultView",
    "ToolResult",
    "card_to_builtins",
    "decode_call_view",
    "decode_result_view",
    "encode_card",
]

CardKind: TypeAlias = Literal[
    "read", "edit", "delete", "move", "search", "execute", "fetch", "other"
]
"""What a generic call does; consumers treat an omitted kind as ``other``."""


CARD_KINDS: frozenset[str] = frozenset(
    ("read", "edit", "delete", "move", "search", "execute", "fetch", "other")
)
"""The values ``GenericCallView.kind`` accepts."""


# --- field checks (msgspec checks types on decode, not on construction) ------------------------


def _check_str(owner: str, field: str, value: object) -> None:
    if type(value) is not str:
        raise TypeError(f"{owner}.{field} must be a str, not {type(value).__name__}")


def _check_optional_str(owner: str, field: str, value: object) -> None:
    if value is not UNSET:
        _check_str(owner, field, value)


def _freeze_json(owner: str, field: str, value: Any) -> Any:
    try:
        return snapshot_json(value, field)
    except ValueError as exc:
        raise ValueError(f"{owner}.{field} must be lossless JSON: {exc}") from None


def _freeze_blocks(owner: str, field: str, value: Any) -> FrozenList:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}.{field} must be a list of content blocks")
    frozen = _freeze_json(owner, field, list(value))
    for index, block in enumerate(frozen):
        if not isinstance(block, dict) or type(block.get("type")) is not str:
            raise TypeError(
                f"{owner}.{field}[{index}] must be a content block (an object with a str type)"
            )
    return frozen  # type: ignore[no-any-return]


def _freeze_items(owner: str, field: str, value: Any, item_type: type[Any]) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}.{field} must be a list of {item_type.__name__}")
    items = tuple(value)
    for index, item in enumerate(items):
        if type(item) is not item_type:
            raise TypeError(f"{owner}.{field}[{index}] must be a {item_type.__name__}")
    return items


_set = msgspec.structs.force_setattr


# --- supporting types --------------------------------------------------------------------------


class FileLocation(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A file a call touches: ``path`` and, optionally, a 1-based ``line``."""

    path: str
    line: int | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_str("FileLocation", "path", self.path)
        if self.line is not UNSET and (type(self.line) is not int or self.line < 1):
            raise ValueError("FileLocation.line must be a positive int (1-based)")


class FileDiff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One file change: ``old_text`` is ``None`` for a new file (or an unseen overwrite)."""

    path: str
    old_text: str | None
    new_text: str

    def __post_init__(self) -> None:
        _check_str("FileDiff", "path", self.path)
        if self.old_text is not None:
            _check_str("FileDiff", "old_text", self.old_text)
        _check_str("FileDiff", "new_text", self.new_text)


class _CardView(
    msgspec.Struct,
    tag_field="card",
    frozen=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
):
    """The encoding every view shares: tagged by ``card`` (each view names its ``tag``),
    frozen, absent optional fields omitted, unknown fields rejected on decode.

    Each view restates ``frozen=True``: type checkers do not inherit it.
    """


# --- call views ---------------------------------------------------------------------------------


class GenericCallView(_CardView, tag="generic", frozen=True):
    """A pending call shown as a titled card, with optional kind, salient input and content.

    ``raw_input`` is shown as is when it is a str and as pretty JSON otherwise.
    """

    title: str
    kind: CardKind | UnsetType = UNSET
    raw_input: Any = UNSET
    content: Sequence[Any] | UnsetType = UNSET
    locations: Sequence[FileLocation] | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_str("GenericCallView", "title", self.title)
        if self.kind is not UNSET and self.kind not in CARD_KINDS:
            raise ValueError(f"GenericCallView.kind must be one of {sorted(CARD_KINDS)}")
        if self.raw_input is not UNSET:
            _set(self, "raw_input", _freeze_json("GenericCallView", "raw_input", self.raw_input))
        if self.content is not UNSET:
            _set(self, "content", _freeze_blocks("GenericCallView", "content", self.content))
        if self.locations is not UNSET:
            _set(
                self,
                "locations",
                _freeze_items("GenericCallView", "locations", self.locations, FileLocation),
            )


class TerminalCallView(_CardView, tag="terminal", frozen=True):
    """A pending shell command: ``title`` is the command.

    ``description`` is one line shown above the card. ``cwd`` is used as is when absolute and
    resolved against the session workspace by the UI when relative; omitted means the workspace.
    """

    title: str
    description: str | UnsetType = UNSET
    cwd: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_str("TerminalCallView", "title", self.title)
        _check_optional_str("TerminalCallView", "description", self.description)
        _check_optional_str("TerminalCallView", "cwd", self.cwd)


class DiffCallView(_CardView, tag="diff", frozen=True):
    """A pending file change: ``diffs`` holds the intended edits."""

    title: str
    diffs: Sequence[FileDiff]
    locations: Sequence[FileLocation] | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_str("DiffCallView", "title", self.title)
        _set(self, "diffs", _freeze_items("DiffCallView", "diffs", self.diffs, FileDiff))
        if self.locations is not UNSET:
            _set(
                self,
                "locations",
                _freeze_items("DiffCallView", "locations", self.locations, FileLocation),
            )


CallView: TypeAlias = GenericCallView | TerminalCallView | DiffCallView
"""What ``present_call`` returns (or ``None`` for the generic fallback)."""


CALL_VIEW_TYPES: tuple[type[Any], ...] = (GenericCallView, TerminalCallView, DiffCallView)
"""The call view classes, for ``isinstance`` checks."""


# --- result views -------------------------------------------------------------------------------


class GenericResultView(_CardView, tag="generic", frozen=True):
    """A settled call: an omitted ``title`` keeps the pending title, an omitted ``content``
    shows the raw result content."""

    title: str | UnsetType = UNSET
    content: Sequence[Any] | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_optional_str("GenericResultView", "title", self.title)
        if self.content is not UNSET:
            _set(self, "content", _freeze_blocks("GenericResultView", "content", self.content))


class TerminalResultView(_CardView, tag="terminal", frozen=True):
    """A finished command: the raw captured ``output`` (not fenced) and how it ended.

    ``exit_code`` and ``signal`` are mutually exclusive.
    """

    title: str | UnsetType = UNSET
    output: str | UnsetType = UNSET
    exit_code: int | UnsetType = UNSET
    signal: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_optional_str("TerminalResultView", "title", self.title)
        _check_optional_str("TerminalResultView", "output", self.output)
        if self.exit_code is not UNSET and type(self.exit_code) is not int:
            raise TypeError("TerminalResultView.exit_code must be an int")
        _check_optional_str("TerminalResultView", "signal", self.signal)
        if self.exit_code is not UNSET and self.signal is not UNSET:
            raise ValueError("TerminalResultView.exit_code and signal are mutually exclusive")


class DiffResultView(_CardView, tag="diff", frozen=True):
    """An applied file change: ``diffs`` holds what actually changed."""

    diffs: Sequence[FileDiff]
    title: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        _set(self, "diffs", _freeze_items("DiffResultView", "diffs", self.diffs, FileDiff))
        _check_optional_str("DiffResultView", "title", self.title)


ResultView: TypeAlias = GenericResultView | TerminalResultView | DiffResultView
"""What ``present_result`` returns (or ``None`` for the generic fallback)."""


RESULT_VIEW_TYPES: tuple[type[Any], ...] = (GenericResultView, TerminalResultView, DiffResultView)
"""The result view classes, for ``isinstance`` checks."""


# --- the durable result -------------------------------------------------------------------------


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """The durable part of a call's result, as ``present_result`` receives it.

    ``content`` is the model-visible content, ``is_error`` whether the call failed and ``meta``
    the persisted presentation metadata (``UNSET`` when absent, ``None`` when the projector
    returned null). ``from_event`` reads it back from a replayed ``tool/result`` event.
    """

    content: Sequence[Any]
    is_error: bool
    meta: Any = UNSET

    def __post_init__(self) -> None:
        if type(self.is_error) is not bool:
            raise TypeError("ToolResult.is_error must be a bool")
        _set(self, "content", _freeze_blocks("ToolResult", "content", self.content))
        if self.meta is not UNSET:
            _set(self, "meta", _freeze_json("ToolResult", "meta", self.meta))

    @classmethod
    def from_execution(cls, result: ToolExecutionResult) -> ToolResult:
        """The durable projection of an execution result (the canonical value is dropped)."""
        return cls(content=result.content, is_error=result.is_error, meta=result.meta)

    @classmethod
    def from_event(cls, data: Mapping[str, Any]) -> ToolResult:
        """Read the durable result back from a logged ``tool/result`` event's data.

        Other fields (``call_id``, ``error``, ...) are ignored; ``meta`` is taken verbatim.
        Raises ``msgspec.ValidationError`` when ``content`` or ``is_error`` is missing or
        malformed.
        """
        return msgspec.convert(data, cls)


# --- encoding -----------------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_call_decoder = msgspec.json.Decoder(CallView)
_result_decoder = msgspec.json.Decoder(ResultView)


def encode_card(view: CallView | ResultView | FileDiff | FileLocation | ToolResult) -> bytes:
    """Encode a view as JSON: the ``card`` tag first, snake_case names, absent fields omitted.
    ``TypeError`` for anything else (which would encode as JSON that is no card)."""
    if not isinstance(view, _CardView | FileDiff | FileLocation | ToolResult):
        raise TypeError(
            "encode_card() takes a call or result view, a FileDiff, a FileLocation or a "
            f"ToolResult, got {type(view).__name__}"
        )
    return _encoder.encode(view)


def card_to_builtins(
    view: CallView | ResultView | FileDiff | FileLocation | ToolResult,
) -> dict[str, Any]:
    """The plain-dict form of a view, as it is stored in a session event."""
    out: dict[str, Any] = msgspec.to_builtins(view)
    return out


def decode_call_view(data: bytes | str | Mapping[str, Any]) -> CallView:
    """Decode a call view from JSON text or a mapping; an unknown ``card`` or a bad field
    raises ``msgspec.ValidationError`` (a ``ValueError``)."""
    if isinstance(data, (bytes, bytearray, memoryview, str)):
        return _call_decoder.decode(data)
    view: CallView = msgspec.convert(data, CallView)
    return view


def decode_result_view(data: bytes | str | Mapping[str, Any]) -> ResultView:
    """Decode a result view from JSON text or a mapping; an unknown ``card`` or a bad field
    raises ``msgspec.ValidationError`` (a ``ValueError``)."""
    if isinstance(data, (bytes, bytearray, memoryview, str)):
        return _result_decoder.decode(data)
    view: ResultView = msgspec.convert(data, ResultView)
    return view
