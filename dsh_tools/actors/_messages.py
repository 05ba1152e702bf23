"""The message catalog: frozen msgspec Structs exchanged between the harness and the actors.

Results and decisions live here too, because they travel in messages (``BatchOutcome``, the
pool's ``CommitDone``) and every layer above reads them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NoReturn

import msgspec
from msgspec import UNSET, UnsetType

from ._config import number_text
from ._frozen import EMPTY_LIST, FrozenList
from ._keywords import KeywordChecked
from ._signal import NEVER_ABORTED, AbortSignal

__all__ = [
    "Accept",
    "Allow",
    "Ask",
    "BatchOutcome",
    "Block",
    "Deny",
    "ExecuteBatch",
    "ExecuteCall",
    "ExecutionToken",
    "ToolCall",
    "ToolErrorInfo",
    "ToolExecutionFailure",
    "ToolExecutionResult",
    "ToolExecutionSuccess",
    "ToolFailure",
]

_token_ids = itertools.count(1)


class ExecutionToken:
    """An opaque identity minted per execution; ``parent`` links a nested call to its caller.

    Tokens compare and hash by identity, are immutable, and refuse pickling and encoding: they
    never cross a process, model or log boundary. ``id`` is a process-unique number for logs.
    """

    __slots__ = ("__weakref__", "id")

    id: int

    def __init__(self) -> None:
        object.__setattr__(self, "id", next(_token_ids))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ExecutionToken is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ExecutionToken is immutable")

    def __reduce__(self) -> Any:
        raise TypeError("ExecutionToken cannot be pickled")

    def __repr__(self) -> str:
        return f"<ExecutionToken {self.id}>"


# --- results -----------------------------------------------------------------------------------


class ToolErrorInfo(msgspec.Struct, frozen=True):
    """The machine-readable part of a failure: the error class ``name`` and its ``code``."""

    name: str
    code: str


class ToolFailure(msgspec.Struct, frozen=True, omit_defaults=True):
    """Why a call failed: the ``message`` and, for harness errors, ``info``."""

    message: str
    info: ToolErrorInfo | UnsetType = UNSET


def _with_optional_fields(result: Any, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` completed with the optional fields every result shares, when present."""
    if result.meta is not UNSET:
        out["meta"] = result.meta
    if result.additional_contexts:
        out["additional_contexts"] = result.additional_contexts
    return out


class ToolExecutionSuccess(msgspec.Struct, frozen=True, omit_defaults=True):
    """A successful call: the frozen canonical ``value`` and the model-visible ``content``.

    ``call_id`` names the call this result answers; the pipeline sets it on every result it
    returns (a Code Mode sub-call's result carries the sub-call's id). It takes part in
    equality (the result of one call is not the result of another) but not in ``to_dict()``,
    which is the result's contract projection; the session's ``tool/result`` event carries
    the id beside it.
    """

    value: Any
    content: Sequence[Any]
    meta: Any = UNSET
    additional_contexts: Sequence[Any] = EMPTY_LIST
    call_id: str = ""

    @property
    def is_error(self) -> Literal[False]:
        """Always ``False`` (typed so that ``if result.is_error:`` narrows a result)."""
        return False

    def to_dict(self) -> dict[str, Any]:
        """The JSON projection: absent fields are omitted."""
        return _with_optional_fields(
            self, {"content": self.content, "is_error": False, "value": self.value}
        )


class ToolExecutionFailure(msgspec.Struct, frozen=True, omit_defaults=True):
    """A failed call: ``error`` says why and ``content`` is what the model sees.

    ``call_id`` names the call this result answers, as on ``ToolExecutionSuccess``. Four
    more fields are for the harness only; the model never sees them and ``to_dict()`` leaves
    them out, so ``error`` keeps its fixed shape:

    - ``exception_type``: the type of the exception the failure was made from (``"KeyError"``,
      ``"mypkg.errors.QuotaError"``), or ``""`` when no exception was involved (a denial, a
      block, a cancellation).
    - ``abort_reason``: for ``ABORTED`` / ``ABORTED_BEFORE_DISPATCH``, ``str()`` of the abort's
      reason (the signal's reason, ``"the awaiting task was cancelled"``, ``"the tool system is
      stopping"``), also when the body answered the abort with its own ``AbortError``; ``None``
      otherwise (an ``AbortError`` raised while nothing aborted the call included).
    - ``settled_with``: for ``ABORTED``, what the body settled with when cancellation replaced
      it (a ``ToolExecutionSuccess`` whose value the model was not shown: a read that finished
      before the user pressed stop, say); ``None`` when the body ended by its cancellation.
    - ``refused_by``: for a call a policy refused, the stage that refused it: ``"pre-execute"``
      (a hook's ``Deny``), ``"approval"`` (an ``Ask`` not granted), ``"guard"`` or
      ``"post-execute"`` (a ``Block``); ``None`` for every other failure (a fault, a body's
      failure, a cancellation), which ``error`` and ``exception_type`` describe.
    """

    error: ToolFailure
    content: Sequence[Any]
    meta: Any = UNSET
    additional_contexts: Sequence[Any] = EMPTY_LIST
    call_id: str = ""
    exception_type: str = ""
    abort_reason: str | None = None
    settled_with: Any = None
    refused_by: str | None = None

    @property
    def is_error(self) -> Literal[True]:
        """Always ``True`` (typed so that ``if result.is_error:`` narrows a result)."""
        return True

    def to_dict(self) -> dict[str, Any]:
        """The JSON projection: absent fields are omitted."""
        error: dict[str, Any] = {"message": self.error.message}
        if self.error.info is not UNSET:
            error["info"] = {"name": self.error.info.name, "code": self.error.info.code}
        return _with_optional_fields(
            self, {"content": self.content, "is_error": True, "error": error}
        )


ToolExecutionResult = ToolExecutionSuccess | ToolExecutionFailure


# --- decisions ---------------------------------------------------------------------------------
#
# Each decision checks its fields when built, so a hook that builds a wrong one raises in the
# hook, naming the decision and the field. The pipeline checks again what it is given at call
# time (``check_reason``): a hook may return an object whose fields were changed after.

_SEQUENCES: tuple[type, ...] = (FrozenList, list, tuple)


def check_reason(decision: Deny | Ask) -> None:
    """``TypeError`` unless ``decision.reason`` is a ``str`` (or ``None`` for an ``Ask``)."""
    reason = decision.reason
    if type(reason) is str:
        return
    if type(decision) is Ask:
        if reason is None:
            return
        raise TypeError(f"Ask.reason must be a str or None, got {type(reason).__name__}")
    raise TypeError(f"Deny.reason must be a str, got {type(reason).__name__}")


def _check_sequence(owner: str, field: str, value: object, of: str) -> None:
    if type(value) not in _SEQUENCES:
        raise TypeError(
            f"{owner}.{field} must be a list or tuple of {of}, got {type(value).__name__}"
        )


class Allow(msgspec.Struct, frozen=True):
    """A pre-execute decision: let the call proceed to guards and dispatch."""


class Deny(msgspec.Struct, frozen=True):
    """A pre-execute decision: refuse the call with ``reason`` (model sees ``Error: <reason>``)."""

    reason: str

    def __post_init__(self) -> None:
        check_reason(self)


class Ask(msgspec.Struct, frozen=True):
    """A pre-execute decision: route the call through the approval seam."""

    reason: str | None = None

    def __post_init__(self) -> None:
        check_reason(self)


class Accept(msgspec.Struct, frozen=True):
    """A post-execute decision: keep the result, optionally replacing ``content`` or ``value``."""

    content: Any = UNSET
    value: Any = UNSET
    additional_contexts: Sequence[Any] = ()

    def __post_init__(self) -> None:
        if self.content is not UNSET:
            _check_sequence("Accept", "content", self.content, "content blocks")
        _check_sequence("Accept", "additional_contexts", self.additional_contexts, "contexts")


class Block(msgspec.Struct, frozen=True):
    """A post-execute decision: replace the result with a failure showing ``feedback``."""

    feedback: Sequence[Any]
    additional_contexts: Sequence[Any] = ()

    def __post_init__(self) -> None:
        _check_sequence("Block", "feedback", self.feedback, "content blocks")
        _check_sequence("Block", "additional_contexts", self.additional_contexts, "contexts")


# --- requests ----------------------------------------------------------------------------------


def _bad_call_id(owner: str, call_id: object) -> NoReturn:
    """Raise for a call id that is no non-empty ``str``: ``TypeError`` for another type,
    ``ValueError`` for the empty one (a str, a bad value)."""
    if type(call_id) is str:
        raise ValueError(f"{owner}.call_id must be a non-empty str, got ''")
    raise TypeError(f"{owner}.call_id must be a non-empty str, got {type(call_id).__name__}")


def _check_signal_and_agent(request: Any, owner: str) -> None:
    """The checks every request shares: a ``None`` signal becomes ``NEVER_ABORTED``, any other
    must be an ``AbortSignal``; ``agent`` is a str or ``None``."""
    if request.signal is None:
        msgspec.structs.force_setattr(request, "signal", NEVER_ABORTED)
    elif not isinstance(request.signal, AbortSignal):
        raise TypeError(
            f"{owner}.signal must be an AbortSignal or None, got {type(request.signal).__name__}"
        )
    if request.agent is not None and type(request.agent) is not str:
        raise TypeError(f"{owner}.agent must be a str or None, got {type(request.agent).__name__}")


class ExecuteCall(msgspec.Struct, frozen=True, kw_only=True):
    """Run one call through the pipeline. ``signal`` may be omitted (never aborts)."""

    call_id: str
    name: str
    arguments: Any
    signal: AbortSignal = NEVER_ABORTED
    agent: str | None = None
    parent: ExecutionToken | None = None

    def __post_init__(self) -> None:
        if type(self.call_id) is not str or not self.call_id:
            _bad_call_id("ExecuteCall", self.call_id)
        if type(self.name) is not str:
            raise TypeError(f"ExecuteCall.name must be a str, got {type(self.name).__name__}")
        # ``_check_signal_and_agent``, its passing case inline: every call is one of these.
        signal = self.signal
        agent = self.agent
        if (
            signal is None
            or (signal is not NEVER_ABORTED and not isinstance(signal, AbortSignal))
            or (agent is not None and type(agent) is not str)
        ):
            _check_signal_and_agent(self, "ExecuteCall")
        if self.parent is not None and not isinstance(self.parent, ExecutionToken):
            raise TypeError(
                "ExecuteCall.parent must be an ExecutionToken or None, got "
                f"{type(self.parent).__name__}"
            )


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call as the model sent it: ``arguments`` is the raw JSON text."""

    call_id: str
    name: str
    arguments: str

    def __post_init__(self) -> None:
        if type(self.call_id) is not str or not self.call_id:
            _bad_call_id("ToolCall", self.call_id)
        if type(self.name) is not str:
            raise TypeError(f"ToolCall.name must be a str, got {type(self.name).__name__}")
        if type(self.arguments) is not str:
            raise TypeError(
                "ToolCall.arguments must be a str (the raw JSON text), got "
                f"{type(self.arguments).__name__}"
            )


class ExecuteBatch(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """Run one model turn's calls in the dispatcher pool; results come back in model order.

    Call ids must be unique within a batch (``ValueError`` naming the duplicate)."""

    calls: Sequence[ToolCall]
    agent: str | None = None
    signal: AbortSignal = NEVER_ABORTED
    max_parallel: int | None = None

    def __post_init__(self) -> None:
        given = self.calls
        if isinstance(given, ToolCall | str | bytes | Mapping) or not isinstance(given, Iterable):
            # One call passed as the batch, or a value that only iterates by accident.
            raise TypeError(
                f"ExecuteBatch.calls must be a sequence of ToolCall, got {type(given).__name__}"
            )
        calls = tuple(given)
        seen: set[str] = set()
        for index, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise TypeError(
                    f"ExecuteBatch.calls[{index}] must be a ToolCall, got {type(call).__name__}"
                )
            if call.call_id in seen:
                raise ValueError(
                    f"ExecuteBatch.calls[{index}]: call_id {call.call_id!r} appears twice in "
                    "the batch; call ids must be unique"
                )
            seen.add(call.call_id)
        msgspec.structs.force_setattr(self, "calls", calls)
        _check_signal_and_agent(self, "ExecuteBatch")
        if self.max_parallel is not None:
            # Named as the field the caller set, not as the ToolsConfig default it overrides.
            if type(self.max_parallel) is not int:
                raise TypeError(
                    "ExecuteBatch.max_parallel must be a positive integer or None, got "
                    f"{type(self.max_parallel).__name__}"
                )
            if self.max_parallel < 1:
                raise ValueError(
                    "ExecuteBatch.max_parallel must be a positive integer, got "
                    f"{number_text(self.max_parallel)}"
                )


class BatchOutcome(msgspec.Struct, frozen=True):
    """What a batch returns: ``results`` in model order and the drained context FIFO.

    ``outcome.by_call_id("c1")`` is the result of the call with id ``"c1"`` (``KeyError``
    naming the id when the batch had no such call); ``outcome.get("c1")`` is the same or
    ``None``. Ids are unique within a batch, so the lookup is unambiguous.
    """

    results: Sequence[ToolExecutionResult]
    contexts: FrozenList = EMPTY_LIST

    def get(self, call_id: str) -> ToolExecutionResult | None:
        """The result of the call ``call_id``, or ``None`` when the batch had no such call."""
        for result in self.results:
            if result.call_id == call_id:
                return result
        return None

    def by_call_id(self, call_id: str) -> ToolExecutionResult:
        """The result of the call ``call_id``; ``KeyError`` when the batch had no such call."""
        result = self.get(call_id)
        if result is None:
            raise KeyError(f"no call with call_id {call_id!r} in this batch")
        return result
