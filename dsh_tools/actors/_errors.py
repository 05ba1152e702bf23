"""The error vocabulary shared by every layer.

Every error the pipeline turns into a result carries ``code`` and ``name`` (``name`` defaults to
the concrete class name), so a failure's ``info`` is ``ToolErrorInfo(name, code)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn, ParamSpec, TypeVar

__all__ = [
    "AbortError",
    "CodeRunFailedError",
    "HarnessError",
    "JsonSchemaError",
    "ToolArgsError",
    "ToolNotFoundError",
    "ToolOutputError",
    "ToolTimeoutError",
    "format_ms",
    "message_of",
    "without_stop_iteration",
]

UNPRINTABLE = "<unprintable thrown value>"
_SURROGATES = re.compile("[\ud800-\udfff]")

_P = ParamSpec("_P")
_T = TypeVar("_T")


def without_stop_iteration(
    what: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``fn(*args, **kwargs)``, with a ``StopIteration`` it raises turned into
    ``RuntimeError("<what> raised StopIteration")``, as Python does for a generator or a
    coroutine (PEP 479). User code run on a worker thread needs it: asyncio refuses to set
    ``StopIteration`` on the future its caller awaits, which then never settles."""
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        raise RuntimeError(f"{what} raised StopIteration") from exc


def message_of(value: object, unprintable: str = UNPRINTABLE) -> str:
    """``str(value)`` (of an exception, an abort reason...), or ``unprintable`` when that
    raises or gives something other than a plain ``str``: the one way this package turns
    something user code threw or passed into text, so that a hostile ``__str__`` never turns
    a result into a crash. Lone surrogates become U+FFFD."""
    try:
        text = str(value)
    except Exception:
        return unprintable
    if type(text) is not str:
        return unprintable
    if text.isascii():
        return text
    # A lone surrogate (a file name os.listdir() decoded with surrogateescape, say) has no
    # UTF-8 form, and a result's text goes to a provider, the session log and the wire as
    # UTF-8: each becomes U+FFFD, as in a Code Mode run's output.
    return _SURROGATES.sub("\ufffd", text)


def format_ms(ms: float) -> str:
    """Format a millisecond count like a JS number: ``100`` not ``100.0``."""
    if isinstance(ms, float) and ms.is_integer():
        return str(int(ms))
    return str(ms)


def _refuse_text(owner: str, rule: str, value: object) -> NoReturn:
    """``TypeError`` for a value that is no str, ``ValueError`` for a str (the empty one)."""
    if isinstance(value, str):
        raise ValueError(f"{owner} {rule}, got {value!r}")
    raise TypeError(f"{owner} {rule}, got {type(value).__name__}")


class HarnessError(Exception):
    """An error with a machine-readable ``code``; the base of every error this package raises.

    ``name`` is what a failure's ``info.name`` shows; it defaults to the class name and may be
    overridden per instance.
    """

    code: str
    name: str

    def __init__(self, message: str, code: str, *, name: str | None = None) -> None:
        # Refused here, where the author wrote it: raised from a body, a message that is no
        # str left the model "<unprintable thrown value>", and a code that is none the failure
        # without its info.
        if not isinstance(message, str):
            _refuse_text(type(self).__name__, "message must be a str", message)
        if not isinstance(code, str) or not code:
            _refuse_text(type(self).__name__, "code must be a non-empty str", code)
        if name is not None and (not isinstance(name, str) or not name):
            _refuse_text(type(self).__name__, "name must be a non-empty str or None", name)
        super().__init__(message)
        self.message = message
        self.code = code
        self.name = name if name is not None else type(self).__name__

    def __str__(self) -> str:
        return self.message


class JsonSchemaError(HarnessError):
    """A schema outside the supported subset (code ``UNSUPPORTED_SCHEMA``)."""

    def __init__(self, violations: Iterable[str]) -> None:
        self.violations: list[str] = list(violations)
        super().__init__(
            "unsupported JSON schema: " + "; ".join(self.violations), "UNSUPPORTED_SCHEMA"
        )


class ToolArgsError(HarnessError):
    """Arguments that fail a typed tool's parameter schema (code ``INVALID_ARGS``)."""

    def __init__(self, violations: Iterable[str]) -> None:
        self.violations: list[str] = list(violations)
        super().__init__("invalid arguments: " + "; ".join(self.violations), "INVALID_ARGS")


class ToolOutputError(HarnessError):
    """A body value, render or presentation projection that breaks the output contract."""

    def __init__(
        self, tool_name: str, violations: Iterable[str], *, source: str | None = None
    ) -> None:
        self.tool_name = tool_name
        self.violations: list[str] = list(violations)
        # ``source`` names what produced the output when it was not the tool's body (a
        # post-execute hook's replacement), so the message does not blame the tool.
        what = (
            f'tool "{tool_name}" returned invalid output: '
            if source is None
            else f'tool "{tool_name}": {source} is invalid output: '
        )
        super().__init__(what + "; ".join(self.violations), "INVALID_TOOL_OUTPUT")


class ToolNotFoundError(HarnessError):
    """No visible definition for a call's name and agent (code ``UNKNOWN_TOOL``)."""

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(f'unknown tool "{tool_name}"', "UNKNOWN_TOOL")


class AbortError(HarnessError):
    """A call cancelled before (``ABORTED_BEFORE_DISPATCH``) or after (``ABORTED``) dispatch."""

    def __init__(self, code: str = "ABORTED") -> None:
        if code == "ABORTED_BEFORE_DISPATCH":
            message = "tool call aborted before dispatch"
        else:
            message = "tool call aborted"
        super().__init__(message, code)


class ToolTimeoutError(HarnessError):
    """The timeout policy's own deadline fired (code ``TOOL_TIMEOUT``)."""

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(f"tool call timed out after {format_ms(timeout_ms)}ms", "TOOL_TIMEOUT")


class CodeRunFailedError(HarnessError):
    """A Code Mode run that failed as a whole (code ``CODE_RUN_FAILED``).

    ``kind`` is one of ``exception``, ``timeout``, ``abort``, ``worker-exit``,
    ``invalid-output``, ``output-limit`` or ``frame-limit``; ``logs`` is the output captured
    before the failure and is appended to the message after ``Captured output:``.
    """

    def __init__(self, kind: str, message: str, logs: Sequence[str] = ()) -> None:
        self.kind = kind
        self.detail = message
        self.logs: tuple[str, ...] = tuple(logs)
        text = f"code run failed ({kind}): {message}"
        if self.logs:
            text += "\nCaptured output:\n" + "\n".join(self.logs)
        super().__init__(text, "CODE_RUN_FAILED")
