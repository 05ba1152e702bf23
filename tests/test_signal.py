"""AbortController / AbortSignal semantics: reasons, callbacks, waiting and awaiting."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

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
