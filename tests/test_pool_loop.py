"""The loop machinery under the pool: stages that start at once, in their own context, and
stay referenced until they end."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import weakref
from typing import Any

from conftest import WAIT, block, fixture
from pool_support import batch, in_background, safe

from dsh_tools import ToolSystem

current_call: contextvars.ContextVar[str] = contextvars.ContextVar("current_call", default="-")


def test_each_dispatch_runs_in_its_own_context(system: ToolSystem) -> None:
    seen: dict[str, tuple[str, str]] = {}

    async def body(args: Any, ctx: Any) -> Any:
        before = current_call.get()
        current_call.set(ctx.call_id)
        await asyncio.sleep(0)
        seen[ctx.call_id] = (before, current_call.get())
        return [block("ok")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    outcome = system.execute_batch(batch("c1", "c2", "c3"))
    assert [r.is_error for r in outcome.results] == [False] * 3
    assert seen == {c: ("-", c) for c in ("c1", "c2", "c3")}


def test_a_body_that_finishes_without_suspending_is_committed(system: ToolSystem) -> None:
    async def body(args: Any, ctx: Any) -> Any:
        return [block(f"ran:{ctx.call_id}")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    outcome = system.execute_batch(batch("c1", "c2", max_parallel=1))
    assert [r.content[0]["text"] for r in outcome.results] == ["ran:c1", "ran:c2"]


def test_a_body_awaiting_a_future_nobody_else_holds_is_not_collected(
    system: ToolSystem,
) -> None:
    parked = threading.Event()
    futures: list[weakref.ref[asyncio.Future[int]]] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def body(args: Any, ctx: Any) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        futures.append(weakref.ref(done))  # only the body's own frame holds it
        loops.append(loop)
        parked.set()
        return [block(f"woken with {await done}")]

    system.tools.register(fixture("x", body, is_concurrency_safe=safe))
    with in_background(system, batch("c1")) as pending:
        assert parked.wait(WAIT)
        for _ in range(3):
            gc.collect()
        done = futures[0]()
        assert done is not None, "the pool let a running dispatch be garbage-collected"
        loops[0].call_soon_threadsafe(done.set_result, 7)
        del done
        outcome = pending.result()
    assert outcome.results[0].content[0]["text"] == "woken with 7"
