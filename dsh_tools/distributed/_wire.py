"""What crosses between the calling process and a Ray worker: msgspec-encoded JSON frames.

Arguments go out as the frozen snapshot's JSON and come back frozen again; a value comes back as
JSON after the worker has checked it is lossless (the same check and message as locally); a
body's exception comes back as a ``RemoteFault`` (its class, message, harness code and a pickle
when one round-trips) and is raised again here as itself. Deferred contexts travel with either.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

import msgspec

from ..actors import HarnessError, ToolOutputError, message_of
from ..registry import LosslessJsonError, snapshot_json
from ._errors import RemoteToolError

__all__ = [
    "RemoteCall",
    "RemoteFault",
    "RemoteReply",
    "UnsentContext",
    "decode_call",
    "decode_reply",
    "encode_call",
    "fault_of",
    "rebuild_exception",
    "snapshot_value",
]

_NULL = msgspec.Raw(b"null")
_NO_CONTEXTS = msgspec.Raw(b"[]")


class RemoteCall(msgspec.Struct, frozen=True):
    """One body invocation: the call's identity and its arguments as JSON."""

    call_id: str
    name: str
    agent: str | None
    arguments: msgspec.Raw


class RemoteFault(msgspec.Struct, frozen=True):
    """A body's exception: enough to raise the same exception (or a faithful stand-in) here."""

    module: str
    qualname: str
    message: str
    code: str | None = None
    name: str | None = None
    pickled: bytes | None = None
    traceback: str = ""


class RemoteReply(msgspec.Struct, frozen=True):
    """A settled body: its value (JSON) or its fault, and the contexts it deferred.

    A deferred context that is not lossless JSON travels pickled (``odd_contexts``, by its
    index; ``null`` in ``contexts``): kept as given, it fails the result here exactly as it
    fails a local body's."""

    value: msgspec.Raw = _NULL
    fault: RemoteFault | None = None
    contexts: msgspec.Raw = _NO_CONTEXTS
    odd_contexts: dict[int, bytes] = msgspec.field(default_factory=dict)


class UnsentContext:
    """Stands in for a deferred context that was neither lossless JSON nor picklable on the
    worker (or cannot be unpickled here): it is not JSON either, so the result fails as a
    local body's would. Where the worker could, it sent the context with only its parts that
    cannot be pickled replaced, each by an instance of a subclass named as the part's own
    class (see ``_unsent_parts``): the failure then names the part and its place as locally."""


Dumps = Callable[[Any], bytes]
"""Pickles an object (the worker's cloudpickle)."""
Loads = Callable[[bytes], Any]
"""Unpickles what ``Dumps`` made."""

_encoder = msgspec.json.Encoder()
_call_decoder = msgspec.json.Decoder(RemoteCall)
_reply_decoder = msgspec.json.Decoder(RemoteReply)


def encode_call(call_id: str, name: str, agent: str | None, arguments: Any) -> bytes:
    """The frame for one invocation; ``arguments`` is the call's frozen snapshot."""
    raw = msgspec.Raw(_encoder.encode(arguments))
    return _encoder.encode(RemoteCall(call_id, name, agent, raw))


def decode_call(frame: bytes) -> tuple[RemoteCall, Any]:
    """The invocation and its arguments frozen again (as the body would see them locally)."""
    call = _call_decoder.decode(frame)
    return call, snapshot_json(msgspec.json.decode(call.arguments))


def encode_reply(
    value: Any, fault: RemoteFault | None, contexts: list[Any], odd: set[int], dumps: Dumps
) -> bytes:
    """The frame for a settled body; ``value`` must already be a lossless snapshot, and so must
    the contexts but those at the indexes in ``odd`` (pickled by ``dumps``)."""
    sent: list[Any] = []
    pickled: dict[int, bytes] = {}
    for index, context in enumerate(contexts):
        if index in odd:
            try:
                pickled[index] = dumps(context)
            except Exception:
                try:
                    pickled[index] = dumps(_unsent_parts(context, dumps))
                except (Exception, RecursionError):
                    pickled[index] = b""  # an ``UnsentContext`` here
            context = None
        sent.append(context)
    return _encoder.encode(
        RemoteReply(
            value=msgspec.Raw(_encoder.encode(value)) if fault is None else _NULL,
            fault=fault,
            contexts=msgspec.Raw(_encoder.encode(sent)) if sent else _NO_CONTEXTS,
            odd_contexts=pickled,
        )
    )


def _unsent_parts(value: Any, dumps: Dumps) -> Any:
    """``value`` with its dicts, lists and tuples walked, and each other part that cannot be
    pickled replaced by an ``UnsentContext`` whose class has that part's class name."""
    kind = type(value)
    if kind is dict:
        return {key: _unsent_parts(item, dumps) for key, item in value.items()}
    if kind is list or kind is tuple:
        return kind(_unsent_parts(item, dumps) for item in value)
    try:
        dumps(value)
    except Exception:
        # Made here, the class travels by value (its module has no such name).
        named = {"__qualname__": kind.__qualname__, "__module__": __name__}
        return type(kind.__name__, (UnsentContext,), named)()
    return value


def decode_reply(frame: bytes, loads: Loads) -> tuple[Any, RemoteFault | None, list[Any]]:
    """``(value, fault, contexts)``; the value is plain JSON, and so are the contexts but
    those that were not lossless JSON on the worker (unpickled by ``loads``)."""
    reply = _reply_decoder.decode(frame)
    contexts: list[Any] = msgspec.json.decode(reply.contexts)
    for index, pickled in reply.odd_contexts.items():
        context: Any = UnsentContext()
        if pickled:
            with contextlib.suppress(Exception):
                context = loads(pickled)
        if 0 <= index < len(contexts):
            contexts[index] = context
    if reply.fault is not None:
        return None, reply.fault, contexts
    return msgspec.json.decode(reply.value), None, contexts


def _sendable(text: str) -> str:
    """``text`` as JSON can carry it: a lone surrogate (a name decoded with
    ``surrogateescape``, as ``os.listdir`` gives for bytes that are not UTF-8) is escaped
    (``\\udcff``). The exception itself travels pickled, with its text as it was."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def fault_of(exc: BaseException, traceback: str, dumps: Dumps) -> RemoteFault:
    """Describe ``exc`` for the trip home; ``dumps`` pickles (cloudpickle on a worker)."""
    cls = type(exc)
    code = name = None
    if isinstance(exc, HarnessError):
        with contextlib.suppress(Exception):
            if type(exc.code) is str:
                code = _sendable(exc.code)
            if type(exc.name) is str:
                name = _sendable(exc.name)
    # The class, args and attributes rather than the exception itself: unpickling an exception
    # calls its constructor with ``args``, which fails for any class whose constructor takes
    # something else than its message. Python's own constructors take what the exception's
    # ``__reduce__`` gives (a file error's file name too, which is not in its ``args``).
    pickled: bytes | None = None
    with contextlib.suppress(Exception):
        args = exc.__reduce__()[1] if _made_by_python(cls) else exc.args
        pickled = dumps((cls, tuple(args), dict(getattr(exc, "__dict__", {}))))
    return RemoteFault(
        module=cls.__module__,
        qualname=cls.__qualname__,
        message=_sendable(message_of(exc)),
        code=code,
        name=name,
        pickled=pickled,
        traceback=_sendable(traceback),
    )


def _same(exc: BaseException, fault: RemoteFault) -> bool:
    """Whether a rebuilt exception would produce the very failure the remote one did."""
    cls = type(exc)
    if (cls.__module__, cls.__qualname__) != (fault.module, fault.qualname):
        return False
    if _sendable(message_of(exc)) != fault.message:
        return False
    if fault.code is not None:
        code, name = getattr(exc, "code", None), getattr(exc, "name", None)
        return (
            isinstance(code, str)
            and isinstance(name, str)
            and (_sendable(code), _sendable(name)) == (fault.code, fault.name)
        )
    return True


def _raisable(cls: Any) -> bool:
    """Whether ``cls`` is a body's exception to raise here: any ``BaseException`` the worker
    reports as a fault, a ``KeyboardInterrupt``, ``SystemExit`` or ``CancelledError`` the
    body raised itself included (the pipeline treats them as it treats a local body's)."""
    return isinstance(cls, type) and issubclass(cls, BaseException)


def _made_by_python(cls: type[BaseException]) -> bool:
    """Whether ``cls`` makes its instances with Python's own exception constructors (neither
    it nor a base outside ``builtins`` defines ``__new__`` or ``__init__``): calling them runs
    no code of the body's, and sets the fields Python keeps outside ``__dict__`` (an exit's
    ``code``, a file error's ``errno`` and ``filename``, a decode error's ``reason``)."""
    for method in ("__new__", "__init__"):
        owner = next(base for base in cls.__mro__ if method in vars(base))
        if owner.__module__ != "builtins":
            return False
    return True


def _import_class(module: str, qualname: str) -> Any:
    try:
        owner: Any = importlib.import_module(module)
        for part in qualname.split("."):
            owner = getattr(owner, part)
    except Exception:
        return None
    return owner


def rebuild_exception(fault: RemoteFault, loads: Loads) -> BaseException:
    """The remote exception as an exception of this process, failing the same way.

    First the original class with its args and attributes (its constructor is not called,
    unless it is Python's own); else an instance of the same class with the same message (and
    harness code and name); else a ``RemoteToolError`` carrying all three.
    """
    rebuilt: BaseException | None = None
    if fault.pickled is not None:
        with contextlib.suppress(Exception):
            cls, args, state = loads(fault.pickled)
            if _raisable(cls):
                if _made_by_python(cls):
                    candidate = cls(*args)
                else:
                    candidate = cls.__new__(cls, *args)
                    candidate.args = tuple(args)
                candidate.__dict__.update(state)
                if _same(candidate, fault):
                    rebuilt = candidate
    if rebuilt is None:
        cls = _import_class(fault.module, fault.qualname)
        if _raisable(cls):
            with contextlib.suppress(Exception):
                candidate = cls.__new__(cls)
                candidate.args = (fault.message,)
                if isinstance(candidate, HarnessError):
                    candidate.message = fault.message
                    candidate.code = fault.code or ""
                    candidate.name = fault.name or cls.__name__
                if _same(candidate, fault):
                    rebuilt = candidate
    if rebuilt is None:
        rebuilt = RemoteToolError(
            fault.message, f"{fault.module}.{fault.qualname}", fault.code, fault.name
        )
    if fault.traceback:
        with contextlib.suppress(Exception):
            rebuilt.add_note("Remote traceback (most recent call last):\n" + fault.traceback)
    return rebuilt


def snapshot_value(tool: str, value: Any) -> Any:
    """A body's value as a lossless snapshot, failing exactly as the local output check does."""
    try:
        return snapshot_json(value)
    except LosslessJsonError as exc:
        raise ToolOutputError(tool, [f"value is not lossless JSON: {exc}"]) from None
    except Exception as exc:
        raise ToolOutputError(tool, [f"value snapshot failed: {message_of(exc)}"]) from None
