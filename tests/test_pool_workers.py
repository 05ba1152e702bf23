"""Where a batch's stages run when worker threads carry the pool from one plain body to the next:
bodies never on the system loop; guards, hooks, finalizers and observers on the loop as ever;
anything that needs the loop (an awaitable a plain body returns, an execute wrapper) carried
onto it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from conftest import WAIT, block, fixture, text
from pool_support import batch, of_type, safe, trace

from dsh_tools import ToolSystem
from dsh_tools.pipeline import _workers


def loop_thread(system: ToolSystem) -> int | None:
    return system._system_loop.thread.ident


def test_plain_bodies_run_off_the_loop_and_user_callbacks_on_it(system: ToolSystem) -> None:
    bodies: list[int] = []
    callbacks: dict[str, set[int]] = {"guard": set(), "post": set(), "observer": set()}

    def body(args: Any, ctx: Any) -> Any:
        bodies.append(threading.get_ident())
        return [block(f"ran:{ctx.call_id}")]

    def guard(exec: Any) -> None:
        callbacks["guard"].add(threading.get_ident())

    async def post(exec: Any, result: Any, next: Any) -> Any:
        callbacks["post"].add(threading.get_ident())
        return await next()

    def observer(exec: Any, result: Any) -> None:
        callbacks["observer"].add(threading.get_ident())

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    ids = [f"c{i}" for i in range(40)]
    outcome = system.execute_batch(batch(*ids, max_parallel=4))
    assert [text(r) for r in outcome.results] == [f"ran:{i}" for i in ids]
    assert len(bodies) == 40 and loop_thread(system) not in bodies

    system.tools.guard(guard)
    system.tools.on_post_execute(post)
    system.tools.on_result(observer)
    outcome = system.execute_batch(batch(*ids, max_parallel=4))
    assert [text(r) for r in outcome.results] == [f"ran:{i}" for i in ids]
    assert len(bodies) == 80 and loop_thread(system) not in bodies
    assert callbacks == {name: {loop_thread(system)} for name in callbacks}


def test_session_events_keep_model_order_when_workers_commit(system: ToolSystem) -> None:
    def body(args: Any, ctx: Any) -> Any:
        return [block(ctx.call_id)]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    ids = [f"c{i}" for i in range(60)]
    outcome = system.execute_batch(batch(*ids, max_parallel=1))
    assert [text(r) for r in outcome.results] == ids
    assert trace(system) == [(kind, i) for i in ids for kind in ("tool/call", "tool/result")]
    system.session.clear()
    system.execute_batch(batch(*ids, max_parallel=5))
    assert of_type(system, "tool/result") == ids
    assert of_type(system, "tool/call") == ids


def test_an_awaitable_a_plain_body_returns_is_awaited_on_the_loop(system: ToolSystem) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def later(call_id: str) -> Any:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.001)
        return [block(f"late:{call_id}")]

    def body(args: Any, ctx: Any) -> Any:
        return later(ctx.call_id)

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    ids = [f"c{i}" for i in range(12)]
    outcome = system.execute_batch(batch(*ids, max_parallel=3))
    assert [text(r) for r in outcome.results] == [f"late:{i}" for i in ids]
    assert set(loops) == {system._loop}


def test_an_execute_wrapper_runs_on_the_loop_and_the_body_off_it(system: ToolSystem) -> None:
    wrapper_loops: list[asyncio.AbstractEventLoop] = []
    bodies: list[int] = []

    async def wrapper(exec: Any, next: Any) -> Any:
        wrapper_loops.append(asyncio.get_running_loop())
        return await next()

    def body(args: Any, ctx: Any) -> Any:
        bodies.append(threading.get_ident())
        return [block(ctx.call_id)]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    system.tools.on_execute(wrapper)
    ids = [f"c{i}" for i in range(12)]
    outcome = system.execute_batch(batch(*ids, max_parallel=3))
    assert [text(r) for r in outcome.results] == ids
    assert wrapper_loops == [system._loop] * 12
    assert len(bodies) == 12 and loop_thread(system) not in bodies


def test_the_threads_of_a_burst_of_plain_bodies_retire_once_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every thread a burst started stayed, idle, for the life of the system.
    monkeypatch.setattr(_workers, "IDLE_S", 0.05)
    together = threading.Barrier(50, timeout=WAIT)  # fifty bodies at once: fifty threads

    def body(args: Any, ctx: Any) -> Any:
        together.wait()
        return [block(ctx.call_id)]

    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(fixture("x", body, is_concurrency_safe=safe))
        ids = [f"c{i}" for i in range(50)]
        outcome = system.execute_batch(batch(*ids, max_parallel=50))
        assert [text(r) for r in outcome.results] == ids

        def alive() -> list[threading.Thread]:
            return [t for t in system._executor.threads() if t.is_alive()]

        deadline = time.monotonic() + WAIT
        while alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert alive() == []
        together = threading.Barrier(2, timeout=WAIT)
        again = system.execute_batch(batch("d1", "d2", max_parallel=2))
        assert [text(r) for r in again.results] == ["d1", "d2"]


def test_work_handed_to_a_thread_as_it_retires_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workers, "IDLE_S", 0.0005)  # about as long as a hand-over
    threads = _workers.BodyThreads("retiring")
    try:
        for i in range(400):
            assert threads.submit(lambda i=i: i).result(WAIT) == i
            time.sleep(0.0005 * (i % 3))
    finally:
        threads.shutdown()
    assert not any(t.is_alive() for t in threads.threads())
