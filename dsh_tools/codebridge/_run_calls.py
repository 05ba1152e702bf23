"""A run's binding calls on the host: each ``Call`` frame the worker sends calls its binding
function at once and is answered by one ``Reply`` frame when the awaitable it returns settles
(several may be in flight): from the callback of an ``asyncio.Future``, or from a task that
awaits any other awaitable.

Arguments and resolutions cross as token lists (``_tokens``): arguments arrive as frozen
values, and a resolution that is not lossless JSON is answered as a failure. A call id is
answered at most once; a reply above ``max_frame_bytes`` fails the run with ``frame-limit``, and
so do arguments of the calls in flight beyond their cap (``_inflight``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final

from ..actors import FrozenDict, FrozenList
from ._frames import Call, Reply
from ._inflight import InflightArguments
from ._outcome import quote, safe_text
from ._tokens import MAX_DEPTH_FROM_WORKER, TokenError, detokenize, not_lossless, tokenize
from ._worker_api import access_expression

__all__ = ["AnsweredFuture", "Answerer", "BindingCalls", "Track"]

_HOST_DICTS: Final = (dict, FrozenDict)
_HOST_LISTS: Final = (list, FrozenList)
_NOT_LOSSLESS_ARGS: Final = "binding arguments must be lossless JSON"
_NOT_LOSSLESS_RESOLUTION: Final = "binding resolution must be lossless JSON"
OUT_OF_SEQUENCE_LIMIT: Final = 100_000
"""How many call ids above the lowest unseen one a run may have used. The worker numbers its
calls 1, 2, 3...; ids out of that sequence come from a program writing its own frames, and each
one the host remembers (so as never to answer an id twice) costs it memory."""

Track = Callable[["asyncio.Task[None]"], None]
"""Keeps a binding task referenced until it is done."""
Answerer = Callable[[Any], object]
"""What answers a call frame, given its arguments: a binding (``BindingFunction``), whose
awaitable's value is the answer, or a namespace's describer (``help()``), which answers at
once."""


def _drop(frame: Reply, cap: int) -> int:
    return 0


def _ignore(kind: str, message: str) -> None:
    pass


class AnsweredFuture(asyncio.Future[Any]):
    """An ``asyncio.Future`` a binding may return to have its call answered as it settles, in
    the same step, rather than from a done callback a pass of the loop later: for a tool
    system's sub-call that pass costs about as much as the answer. Anyone else sees an
    ordinary future (its done callbacks are scheduled as ever)."""

    _answer: Callable[[AnsweredFuture], None] | None = None
    """What answers the call (set by ``BindingCalls`` while the future is pending)."""

    def set_result(self, result: Any, /) -> None:
        super().set_result(result)
        if self._answer is not None:
            self._answered()

    def set_exception(self, exception: type | BaseException, /) -> None:
        super().set_exception(exception)
        if self._answer is not None:
            self._answered()

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        if self._answer is not None:
            self._answered()
        return True

    def _answered(self) -> None:
        """Answer the call now that the future is done, once; a failing answer goes where the
        loop sends a failing done callback."""
        answer, self._answer = self._answer, None
        assert answer is not None
        try:
            answer(self)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.get_loop().call_exception_handler(
                {"message": f"Exception in callback {answer!r}", "exception": exc, "future": self}
            )


class BindingCalls:
    """Answers one run's ``Call`` frames.

    ``send(reply, cap)`` queues a reply to the worker unless its body is over ``cap`` bytes and
    returns the body's size (raising, with nothing queued, for one that does not encode) and
    ``fail`` settles the run with a failure kind and message. The run calls ``close()`` as it
    settles: nothing is answered from then on.
    """

    __slots__ = (
        "_answered",
        "_fail",
        "_floor",
        "_inflight",
        "_loop",
        "_max_frame_bytes",
        "_namespaces",
        "_over",
        "_send",
        "_track",
    )

    def __init__(
        self,
        *,
        namespaces: dict[str, dict[str, Answerer]],
        loop: asyncio.AbstractEventLoop,
        track: Track,
        max_frame_bytes: int,
        send: Callable[[Reply, int], int],
        fail: Callable[[str, str], None],
    ) -> None:
        self._namespaces = namespaces
        self._loop = loop
        self._track = track
        self._max_frame_bytes = max_frame_bytes
        self._send = send
        self._over = False  # the run has settled (``close``)
        self._fail = fail
        self._floor = 0  # every call id up to this one has been seen
        self._answered: set[int] = set()  # the ids seen above the floor
        self._inflight = InflightArguments()

    def close(self) -> None:
        """The run has settled: answer nothing more, and let go of the run's callbacks (they
        refer to the run, which refers to this object: reference counting frees both at
        once)."""
        self._over = True
        self._send = _drop
        self._fail = _ignore

    def unanswered(self) -> str | None:
        """The calls in flight (``InflightArguments.unanswered``)."""
        return self._inflight.unanswered()

    def on_call(self, frame: Call) -> bool:
        """Start the binding call ``frame`` asks for (or answer it as a failure at once);
        ``False`` when the host could not use it: its id was seen before (it is ignored), it
        names no binding of the run or its arguments are no value (answered as a failure).
        The worker's own code sends none of those (but arguments nested deeper than the host
        takes), and each still costs the host a decode (and a reply) for almost nothing of
        the program's: the caller bounds how many a run may send."""
        call_id = frame.id
        answered = self._answered
        if call_id == self._floor + 1 and not answered:
            self._floor = call_id  # the next id in sequence, none seen above it (the usual)
        else:
            if call_id <= self._floor or call_id in answered:
                return False  # an id seen before is never answered twice
            answered.add(call_id)
            while self._floor + 1 in answered:
                self._floor += 1
                answered.discard(self._floor)
        if len(answered) > OUT_OF_SEQUENCE_LIMIT:
            self._fail(
                "frame-limit",
                f"the program used more than {OUT_OF_SEQUENCE_LIMIT} binding call ids out of "
                "sequence",
            )
            return True
        # The binding, looked up here rather than in a method of its own: every call passes.
        functions = self._namespaces.get(frame.global_name)
        function = functions.get(frame.name) if functions is not None else None
        if function is None:
            self._reply_failure(
                call_id, "unknown binding " + quote(f"{frame.global_name}.{frame.name}")
            )
            return False
        # The call, here rather than in a method of its own for the same reason. ``False``
        # when the arguments are no value (answered as a failure: the worker's own encoder
        # writes none but values nested deeper than the host takes).
        over = self._inflight.admit(call_id, frame.args, frame.global_name, frame.name)
        if over is not None:
            self._fail("frame-limit", over)
            return True
        try:
            value = detokenize(frame.args, FrozenList, FrozenDict, MAX_DEPTH_FROM_WORKER)
        except TokenError as exc:
            self._reply_failure(call_id, f"{_NOT_LOSSLESS_ARGS}: {exc}")
            return False
        try:
            result = function(value)
        except Exception as exc:
            self._reply_failure(call_id, safe_text(exc, "<unprintable thrown value>"))
            return True
        if type(result) is AnsweredFuture and not result.done():
            result._answer = partial(self._on_future, call_id)  # as it settles
        elif isinstance(result, asyncio.Future) and result.done():
            # Settled already (a value known at once): answered now, not from a done
            # callback a pass of the loop later, which would cost a handle and a pass per
            # call, and would keep the replies of this read from the writes it queues.
            self._on_future(call_id, result)
        elif isinstance(result, asyncio.Future):
            # A binding that hands back its future is answered from the future's callback:
            # no task per call.
            result.add_done_callback(partial(self._on_future, call_id))
        elif inspect.isawaitable(result):
            self._track(self._loop.create_task(self._await(call_id, result)))
        else:
            self._resolve(call_id, result)
        return True

    async def _await(self, call_id: int, awaitable: Awaitable[Any]) -> None:
        try:
            result = await awaitable
        except asyncio.CancelledError:
            self._reply_failure(call_id, "binding call cancelled")
            raise
        except Exception as exc:
            self._reply_failure(call_id, safe_text(exc, "<unprintable thrown value>"))
            return
        self._resolve(call_id, result)

    def _on_future(self, call_id: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self._reply_failure(call_id, "binding call cancelled")
            return
        exc = future.exception()
        if exc is not None:
            self._reply_failure(call_id, safe_text(exc, "<unprintable thrown value>"))
            return
        # ``_resolve``, inline: every call of a tool system's binding settles here.
        if self._over:
            return
        result = future.result()
        tokens = tokenize(result, _HOST_DICTS, _HOST_LISTS)
        if tokens is None:
            problem = not_lossless(result, "value", _HOST_DICTS, _HOST_LISTS, awaitable_hint=False)
            self._reply_failure(call_id, f"{_NOT_LOSSLESS_RESOLUTION}: {problem}")
        else:
            # ``_reply``, less its test whether the run is over: just made.
            self._write(Reply(call_id, True, tokens), self._inflight.release(call_id))

    def _resolve(self, call_id: int, result: Any) -> None:
        if self._over:
            return
        tokens = tokenize(result, _HOST_DICTS, _HOST_LISTS)
        if tokens is None:
            problem = not_lossless(result, "value", _HOST_DICTS, _HOST_LISTS, awaitable_hint=False)
            self._reply_failure(call_id, f"{_NOT_LOSSLESS_RESOLUTION}: {problem}")
        else:
            self._reply(Reply(call_id, True, tokens))

    def _reply(self, frame: Reply) -> None:
        name = self._inflight.release(frame.id)
        if self._over:
            return
        self._write(frame, name)

    def _write(self, frame: Reply, name: tuple[str, str] | None) -> None:
        """Send ``frame``, answering a call of binding ``name`` (if known), unless it is over
        max_frame_bytes (the run fails then)."""
        try:
            size = self._send(frame, self._max_frame_bytes)
        except Exception:
            failure = Reply(frame.id, False, message=_NOT_LOSSLESS_RESOLUTION)
            size = self._send(failure, self._max_frame_bytes)
        if size > self._max_frame_bytes:
            of = f" (the result of {access_expression(*name)})" if name is not None else ""
            self._fail(
                "frame-limit",
                f"reply frame of {size} bytes{of} exceeds max_frame_bytes "
                f"({self._max_frame_bytes})",
            )
            return

    def _reply_failure(self, call_id: int, message: str) -> None:
        self._reply(Reply(call_id, False, message=message))
