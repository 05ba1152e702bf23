"""How a run settled (``Outcome``) and how that becomes a ``CodeRunResult`` through the ledger."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET

from ..actors import FrozenList, message_of
from ._ledger import OutputLedger, clean_text
from ._seam import CodeRunFailure, CodeRunResult

__all__ = ["LIMIT", "Outcome", "materialize", "quote", "safe_text"]


def safe_text(value: Any, fallback: str) -> str:
    """``message_of(value)`` made fit for the wire: lone surrogates (which a hostile or careless
    ``__str__`` may return) replaced, one U+FFFD each as in captured output, so encoding it to
    JSON or msgpack cannot fail."""
    return clean_text(message_of(value, fallback))


def quote(text: str) -> str:
    return msgspec.json.encode(safe_text(text, "")).decode("utf-8")


class Outcome:
    """How a run settled: a failure, the output limit, or a completion (tokens absent = none)."""

    __slots__ = ("failure", "limit", "tokens", "value")

    def __init__(
        self,
        *,
        failure: tuple[str, str] | None = None,
        limit: bool = False,
        tokens: list[Any] | None = None,
        value: Any = UNSET,
    ) -> None:
        self.failure = failure
        self.limit = limit
        self.tokens = tokens
        self.value = value


LIMIT: Final = Outcome(limit=True)


def materialize(ledger: OutputLedger, outcome: Outcome) -> CodeRunResult:
    if not outcome.limit and not ledger.overflowed:
        if outcome.failure is not None:
            kind, message = outcome.failure
            if ledger.fits_message(message):
                return CodeRunResult(FrozenList(ledger.logs), error=CodeRunFailure(kind, message))
        elif outcome.tokens is None:
            return CodeRunResult(FrozenList(ledger.logs))
        elif ledger.fits_value(outcome.tokens, outcome.value):
            return CodeRunResult(FrozenList(ledger.logs), value=outcome.value)
    logs, message = ledger.limited()
    return CodeRunResult(FrozenList(logs), error=CodeRunFailure("output-limit", message))
