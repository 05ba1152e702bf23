"""AbortController / AbortSignal semantics: reasons, callbacks, waiting and awaiting."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable
from typing import Any

import pytest
from conftest import WAIT

from dsh_tools import AbortController, AbortSignal, ExecuteCall
from dsh_tools.actors import NEVER_ABORTED, any_signal
from dsh_tools.actors._signal import follow


def test_default_reason_is_aborted() -> None:
    controller = AbortController()
    controller.abort()
    assert controller.signal.aborted
    assert controller.signal.reason == "aborted"


def test_second_abort_keeps_the_first_reason() -> None:
    controller = AbortController()
    controller.abort("first")
    controller.abort("second")
    assert controller.signal.reason == "first"


def test_callback_runs_once_with_the_reason_and_the_remover_works() -> None:
    controller = AbortController()
    seen: list[object] = []
    controller.signal.add_callback(seen.append)
    remove = controller.signal.add_callback(lambda r: seen.append(("removed", r)))
    remove()
    controller.abort("why")
    controller.abort("again")
    assert seen == ["why"]


def test_callback_added_after_abort_runs_at_once() -> None:
    signal = AbortSignal.aborted_signal("done")
    seen: list[object] = []
    signal.add_callback(seen.append)
    assert seen == ["done"]


def test_a_raising_callback_does_not_stop_the_others() -> None:
    controller = AbortController()
    seen: list[object] = []

    def boom(reason: object) -> None:
        raise RuntimeError("listener bug")

    controller.signal.add_callback(boom)
    controller.signal.add_callback(seen.append)
    controller.abort("x")
    assert seen == ["x"]


def test_wait_returns_true_once_aborted_from_another_thread() -> None:
    controller = AbortController()
    threading.Timer(0.01, controller.abort).start()
    assert controller.signal.wait(5) is True


def test_wait_times_out_with_false() -> None:
    assert AbortController().signal.wait(0.01) is False


def test_await_returns_the_reason_on_any_loop() -> None:
    controller = AbortController()

    async def waiter() -> object:
        asyncio.get_running_loop().call_later(0.01, controller.abort, "late")
        return await controller.signal

    assert asyncio.run(waiter()) == "late"
    assert asyncio.run(waiter()) == "late"  # a second loop, already aborted


def test_the_never_aborting_signal_stores_nothing() -> None:
    remove = NEVER_ABORTED.add_callback(lambda r: None)
    remove()
    assert not NEVER_ABORTED.aborted
    assert NEVER_ABORTED.wait(0.001) is False


def test_an_omitted_signal_is_the_shared_never_aborting_one() -> None:
    first = ExecuteCall(call_id="a", name="t", arguments={})
    second = ExecuteCall(call_id="b", name="t", arguments={}, signal=None)
    assert first.signal is NEVER_ABORTED
    assert second.signal is NEVER_ABORTED


def test_any_signal_takes_the_first_reason_and_detaches() -> None:
    a, b = AbortController(), AbortController()
    fused, detach = any_signal(a.signal, b.signal)
    b.abort("from b")
    assert fused.reason == "from b"
    c = AbortController()
    fused2, detach2 = any_signal(c.signal)
    detach2()
    c.abort("late")
    assert not fused2.aborted
    detach()


def test_an_abort_callback_raising_cancelled_error_does_not_stop_the_others(logs: Any) -> None:
    controller = AbortController()
    seen: list[Any] = []

    def cancelling(reason: Any) -> None:
        raise asyncio.CancelledError

    controller.signal.add_callback(cancelling)
    controller.signal.add_callback(seen.append)
    controller.abort("stop")

    assert seen == ["stop"]
    assert logs.warnings == ["abort callback failed"]


def test_a_signal_that_follows_another_is_aborted_as_soon_as_its_parent_is() -> None:
    parent = AbortController()
    child = AbortController()
    seen_from_parent: list[tuple[bool, Any]] = []
    child_fired: list[Any] = []

    # A callback of the parent that runs before the one that aborts the child (as an event
    # loop's wake-up may, leaving its thread waiting while other threads run) already finds
    # the child aborted, with the parent's reason.
    # Reading runs no callback: the child's run in the aborting thread, as every signal's do.
    parent.signal.add_callback(
        lambda reason: seen_from_parent.append(
            (child.signal.aborted, child.signal.reason, list(child_fired))
        )
    )
    remove = follow(child, parent.signal)
    child.signal.add_callback(child_fired.append)
    parent.abort("stop")
    assert seen_from_parent == [(True, "stop", [])]
    assert child_fired == ["stop"]
    remove()


def test_a_follower_keeps_its_parents_reason_even_when_aborted_on_its_own_meanwhile() -> None:
    parent = AbortController()
    child = AbortController()
    reasons: list[Any] = []

    def meanwhile(reason: Any) -> None:
        reasons.append(child.signal.reason)
        child.abort("its own")  # before the parent's callback reaches the child

    parent.signal.add_callback(meanwhile)
    follow(child, parent.signal)
    parent.abort("stop")
    assert reasons == ["stop"]
    assert child.signal.reason == "stop"


def test_a_follower_of_an_aborted_or_never_aborting_signal() -> None:
    aborted = AbortController()
    aborted.abort("early")
    child = AbortController()
    follow(child, aborted.signal)
    assert child.signal.aborted and child.signal.reason == "early"
    calm = AbortController()
    remove = follow(calm, NEVER_ABORTED)
    assert not calm.signal.aborted
    remove()


def test_a_follower_aborted_on_its_own_leaves_its_parent_alone() -> None:
    parent = AbortController()
    child = AbortController()
    follow(child, parent.signal)
    child.abort("settled")
    assert child.signal.reason == "settled" and not parent.signal.aborted
    parent.abort("later")
    assert child.signal.reason == "settled"


def test_a_follower_asks_a_parent_that_works_out_whether_it_aborted() -> None:
    # A placed body's signal on a Ray worker reads Ray's cancellation flag when asked (its
    # ``aborted`` is its own): a run that follows it, a Code Mode run the body starts with
    # that signal, must see the cancellation through it, not only the flag already set.
    from dsh_tools.distributed._remote import _CancelFlagSignal

    cancelled = [False]
    parent = _CancelFlagSignal(lambda: cancelled[0])
    grandchild = AbortController()
    child = AbortController()
    follow(child, parent)
    follow(grandchild, child.signal)
    assert not child.signal.aborted and not grandchild.signal.aborted
    cancelled[0] = True
    assert grandchild.signal.aborted
    assert child.signal.aborted
    assert grandchild.signal.reason == "cancelled"


@pytest.mark.parametrize("signal", [AbortController().signal, NEVER_ABORTED], ids=["own", "never"])
def test_a_callback_that_cannot_be_called_is_refused_when_it_is_added(signal: AbortSignal) -> None:
    # Not when the signal aborts, in whichever thread aborts it, as a logged warning.
    with pytest.raises(TypeError, match=r"^add_callback\(\) takes a callable, got int$"):
        signal.add_callback(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("signal", [AbortController().signal, NEVER_ABORTED], ids=["own", "never"])
def test_an_async_def_callback_is_refused_when_it_is_added(signal: AbortSignal) -> None:
    # Called in the aborting thread, it would only make a coroutine that nobody awaits: the
    # callback never ran, and Python warned, later, from inside the signal.
    async def notify_ui(reason: Any) -> None:
        pass

    with pytest.raises(
        TypeError,
        match=r"^add_callback\(\) takes a plain function, called in the thread that aborts; "
        r"\S*<locals>\.notify_ui is an async def function, whose coroutine nobody would await",
    ):
        signal.add_callback(notify_ui)


class Panel:
    def refresh(self) -> None:
        pass


@pytest.mark.parametrize(
    ("callback", "name"),
    [
        (lambda: None, r"\S*<lambda>"),
        (lambda reason, where: None, r"\S*<lambda>"),
        (lambda reason, *, where: None, r"\S*<lambda>"),
        (Panel().refresh, r"Panel\.refresh"),
    ],
    ids=["no-argument", "two-arguments", "a-keyword-too", "method-of-none"],
)
def test_a_callback_that_cannot_take_the_reason_is_refused_when_it_is_added(
    callback: Any, name: str
) -> None:
    # It used to fail as a logged warning, in whichever thread aborted, and never ran.
    with pytest.raises(
        TypeError,
        match=rf"^add_callback\(\) takes a function of one argument, the abort reason; {name} "
        r"cannot be called with it$",
    ):
        AbortController().signal.add_callback(callback)


def test_a_callback_that_can_take_the_reason_is_added_whatever_its_shape() -> None:
    controller = AbortController()
    seen: list[Any] = []
    controller.signal.add_callback(lambda *reasons: seen.append(reasons))
    controller.signal.add_callback(lambda reason, where="ui": seen.append((reason, where)))
    controller.signal.add_callback(AbortController().abort)  # a method taking it, and a default
    controller.abort("stop")
    assert seen == [("stop",), ("stop", "ui")]


def test_a_callback_that_returns_a_coroutine_is_named_and_its_coroutine_closed(
    logs: Any, recwarn: pytest.WarningsRecorder
) -> None:
    # An async function behind a lambda or a partial only shows itself when called.
    async def notify_ui(reason: Any) -> None:
        pass

    controller = AbortController()
    seen: list[Any] = []
    controller.signal.add_callback(lambda reason: notify_ui(reason))
    controller.signal.add_callback(seen.append)
    controller.abort("stop")
    gc.collect()

    assert seen == ["stop"]
    (warning,) = [entry for entry in logs.entries if entry["log_level"] == "warning"]
    assert warning["event"] == (
        "abort callback returned a coroutine, which nobody awaits: callbacks are plain "
        "functions, called in the thread that aborts"
    )
    assert "<lambda>" in warning["callback"]
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        ("x", TypeError, r"wait\(\) timeout must be a number of seconds or None, got str"),
        (True, TypeError, r"wait\(\) timeout must be a number of seconds or None, got bool"),
        (-1, ValueError, r"wait\(\) timeout must be a number of seconds from 0 to .*; got -1"),
        (float("nan"), ValueError, r"from 0 to .*TIMEOUT_MAX.*, or None to wait without one"),
        (float("inf"), ValueError, r"from 0 to .*TIMEOUT_MAX.*; got inf"),
        (10**30, ValueError, r"from 0 to .*TIMEOUT_MAX.*; got 1(0){30}"),
    ],
)
def test_wait_refuses_a_timeout_that_is_no_number_of_seconds_it_can_count(
    timeout: Any, error: type[Exception], message: str
) -> None:
    # At once, not as an OverflowError from the lock once the wait has begun.
    for signal in (AbortController().signal, NEVER_ABORTED, AbortSignal.aborted_signal()):
        with pytest.raises(error, match=message):
            signal.wait(timeout)


def test_wait_takes_a_zero_timeout_as_a_look() -> None:
    assert AbortController().signal.wait(0) is False
    assert AbortSignal.aborted_signal().wait(0) is True


class _AbortsWhenFinalized:
    """Aborts (or subscribes to) a signal from its finalizer, as a harness object may that
    owns a controller and tidies up when it goes."""

    def __init__(self, controller: AbortController, *, subscribe: list[Any] | None = None):
        self.controller = controller
        self.subscribe = subscribe

    def __call__(self, reason: Any) -> None:
        pass

    def __del__(self) -> None:
        if self.subscribe is not None:
            self.controller.signal.add_callback(self.subscribe.append)
        self.controller.abort("from a finalizer")


def _finishes(work: Callable[[], object]) -> bool:
    done = threading.Thread(target=work, daemon=True)
    done.start()
    done.join(WAIT)
    return not done.is_alive()


def test_removing_the_last_reference_to_a_callback_that_aborts_its_signal_when_finalized() -> None:
    controller = AbortController()
    seen: list[Any] = []
    remove = controller.signal.add_callback(_AbortsWhenFinalized(controller, subscribe=seen))
    assert _finishes(remove), "the callback's finalizer waits for the lock its thread holds"
    assert controller.signal.reason == "from a finalizer"
    assert seen == ["from a finalizer"]


@pytest.mark.parametrize("threshold", range(1, 7))
def test_a_collection_inside_add_callback_or_wait_may_finalize_what_aborts_the_signal(
    threshold: int,
) -> None:
    # A finalizer runs wherever the cyclic collector happens to start: at an allocation (on
    # Python 3.12+, at the next safe point after one) in any thread, also inside the signal's
    # own methods. One that aborts that very signal must neither hang them nor have them lose
    # the callback being added or the wake-up being waited for. The thresholds start the
    # collection at each allocation in turn.
    thresholds = gc.get_threshold()
    outcomes: list[tuple[str, Any]] = []

    def collect_inside(method: str) -> None:
        controller = AbortController()
        seen: list[Any] = []
        record = seen.append
        gc.disable()
        gc.collect(0)  # counts the collector's allocations from here
        garbage = _AbortsWhenFinalized(controller)
        garbage.cycle = garbage  # type: ignore[attr-defined]
        del garbage
        gc.set_threshold(threshold)
        gc.enable()
        if method == "add_callback":
            controller.signal.add_callback(record)
        else:
            record(controller.signal.wait(0.5))
            seen.append(controller.signal.aborted)  # did wait see the abort it returned after?
        gc.set_threshold(*thresholds)
        gc.collect()
        outcomes.append((method, seen))

    try:
        assert _finishes(lambda: collect_inside("add_callback")), "add_callback hangs"
        assert _finishes(lambda: collect_inside("wait")), "wait hangs"
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
    added, waited = outcomes
    assert added == ("add_callback", ["from a finalizer"])
    assert waited[1] in ([True, True], [False, False])


def test_a_collection_inside_the_signals_lock_may_finalize_what_aborts_it() -> None:
    # On Python 3.12+ a collection asked for by an allocation anywhere runs at the next safe
    # point, which may lie inside the signal's lock however little is done there.
    controller = AbortController()
    seen: list[Any] = []
    controller.signal.add_callback(seen.append)
    gc.disable()
    try:
        garbage = _AbortsWhenFinalized(controller)
        garbage.cycle = garbage  # type: ignore[attr-defined]
        del garbage

        def collect_under_the_lock() -> None:
            with controller.signal._lock:
                gc.collect()

        assert _finishes(collect_under_the_lock), "the finalizer waits for the lock"
    finally:
        gc.enable()
    assert seen == ["from a finalizer"]
