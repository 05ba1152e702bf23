"""Property test of batch scheduling.

Hypothesis generates batches mixing concurrency-safe and exclusive calls (plain bodies on worker
threads and coroutine bodies on the system loop), latencies of 0-3 ms, pool sizes and abort
points (before the batch, inside a pre-execute listener, inside a body). Every batch must keep
the ordering guarantees and the pool bound, observed from inside the bodies and hooks:

- one ``tool/call`` and one ``tool/result`` per call, each in model order, call before result;
- pre-execute, post-execute and ``result`` observers see calls in model order, and the
  coordinator never runs two of them at once;
- never more than ``max_parallel`` bodies at once; an exclusive body runs alone, after every
  earlier call committed, and its ``tool/result`` directly follows its ``tool/call``;
- contexts drain after the last result, in commit order;
- a denial takes no slot and runs no body, but passes post-execute;
- on abort nothing starts afterwards, every unstarted call (a suffix of the batch) gets a
  synthetic ``ABORTED_BEFORE_DISPATCH`` pair the registry never saw, and a started call ends as
  a success, ``ABORTED`` (its body ran) or ``ABORTED_BEFORE_DISPATCH`` (it did not).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import block, fixture
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from pool_support import code, context_text, plugin_context, safe, tool_call, trace

from dsh_tools import AbortController, Accept, Deny, ExecuteBatch, ToolSystem

TOOLS = ("par_sync", "par_async", "excl_sync", "excl_async")


@dataclass(frozen=True)
class Plan:
    """One generated batch: ``(tool, latency_ms, denied)`` per call, the pool size, the abort
    point."""

    calls: tuple[tuple[str, int, bool], ...]
    max_parallel: int
    abort: tuple[str, int] | None  # ("before", 0), ("pre", k), ("body", k) or None


class Recorder:
    """What the bodies and hooks of the current batch observed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(Plan((), 1, None))

    def reset(self, plan: Plan) -> None:
        self.plan = plan
        self.controller = AbortController()
        self.running: set[str] = set()
        self.exclusive_running = False
        self.peak = 0
        self.bodies: list[str] = []
        self.pre: list[str] = []
        self.post: list[str] = []
        self.observed: list[str] = []
        self.coordinating = 0
        self.violations: list[str] = []

    def maybe_abort(self, where: str, call_id: str) -> None:
        if self.plan.abort == (where, int(call_id[1:])):
            self.controller.abort(f"abort in {where} of {call_id}")

    # --- bodies --------------------------------------------------------------------------------

    def enter(self, call_id: str, exclusive: bool) -> None:
        with self.lock:
            if self.exclusive_running:
                self.violations.append(f"{call_id} started while an exclusive body ran")
            if exclusive and self.running:
                self.violations.append(f"exclusive {call_id} started beside {self.running}")
            self.running.add(call_id)
            self.exclusive_running = self.exclusive_running or exclusive
            self.peak = max(self.peak, len(self.running))
            self.bodies.append(call_id)
        self.maybe_abort("body", call_id)

    def leave(self, call_id: str, exclusive: bool) -> None:
        with self.lock:
            self.running.discard(call_id)
            if exclusive:
                self.exclusive_running = False

    # --- the coordinator's hooks ---------------------------------------------------------------

    def coordinate(self, label: str) -> None:
        self.coordinating += 1
        if self.coordinating > 1:
            self.violations.append(f"{label} overlapped another prepare or commit")

    def release(self) -> None:
        self.coordinating -= 1


def register(system: ToolSystem, recorder: Recorder) -> None:
    for name in TOOLS:
        exclusive = name.startswith("excl")
        if name.endswith("sync") and not name.endswith("async"):

            def body(args: Any, ctx: Any, exclusive: bool = exclusive) -> Any:
                recorder.enter(ctx.call_id, exclusive)
                try:
                    if args["ms"]:
                        time.sleep(args["ms"] / 1000)  # the tool's own work, not a wait
                finally:
                    recorder.leave(ctx.call_id, exclusive)
                return [block(f"ok:{ctx.call_id}")]

        else:

            async def body(args: Any, ctx: Any, exclusive: bool = exclusive) -> Any:
                recorder.enter(ctx.call_id, exclusive)
                try:
                    await asyncio.sleep(args["ms"] / 1000)
                finally:
                    recorder.leave(ctx.call_id, exclusive)
                return [block(f"ok:{ctx.call_id}")]

        system.tools.register(fixture(name, body, is_concurrency_safe=None if exclusive else safe))

    async def pre(exec: Any, next: Any) -> Any:
        recorder.coordinate(f"pre-execute of {exec.call_id}")
        try:
            recorder.pre.append(exec.call_id)
            recorder.maybe_abort("pre", exec.call_id)
            await asyncio.sleep(0)
            if recorder.plan.calls[int(exec.call_id[1:])][2]:
                return Deny("denied by plan")
            return await next()
        finally:
            recorder.release()

    async def post(exec: Any, result: Any, next: Any) -> Any:
        recorder.coordinate(f"post-execute of {exec.call_id}")
        try:
            recorder.post.append(exec.call_id)
            await asyncio.sleep(0)
            await next()
            return Accept(additional_contexts=[plugin_context(f"ctx-{exec.call_id}")])
        finally:
            recorder.release()

    system.tools.on_pre_execute(pre)
    system.tools.on_post_execute(post)
    system.tools.on_result(lambda exec, result: recorder.observed.append(exec.call_id))


@pytest.fixture(scope="module")
def pool() -> Iterator[tuple[ToolSystem, Recorder]]:
    with ToolSystem.start(code_runtime=None) as system:
        recorder = Recorder()
        register(system, recorder)
        yield system, recorder


def plans() -> st.SearchStrategy[Plan]:
    tool = st.sampled_from((*TOOLS, "par_sync", "par_async"))  # parallel calls twice as likely
    denied = st.sampled_from([False] * 5 + [True])
    calls = st.lists(st.tuples(tool, st.integers(0, 3), denied), min_size=1, max_size=8)
    abort = (
        st.none()
        | st.just(("before", 0))
        | st.tuples(st.sampled_from(["pre", "body"]), st.integers(0, 7))
    )
    return st.builds(
        Plan,
        calls.map(tuple),
        st.integers(1, 4),
        abort,  # type: ignore[arg-type]
    )


def is_subsequence_in_order(seen: list[str], ids: list[str]) -> bool:
    positions = [ids.index(c) for c in seen]
    return positions == sorted(set(positions))


@settings(max_examples=150, deadline=None)
@given(plan=plans())
# An abort inside a pre-execute hook that then waits: the post-execute hook of that call still
# runs, waits in turn, and its context is kept.
@example(plan=Plan((("par_sync", 0, False),), 1, ("pre", 0)))
def test_batches_keep_the_ordering_guarantees_and_the_pool_bound(
    pool: tuple[ToolSystem, Recorder], plan: Plan
) -> None:
    system, recorder = pool
    system.session.clear()
    recorder.reset(plan)
    if plan.abort == ("before", 0):
        recorder.controller.abort("before the batch")
    ids = [f"c{i}" for i in range(len(plan.calls))]
    request = ExecuteBatch(
        calls=[
            tool_call(call_id, name, f'{{"ms": {ms}}}')
            for call_id, (name, ms, _) in zip(ids, plan.calls, strict=True)
        ],
        signal=recorder.controller.signal,
        max_parallel=plan.max_parallel,
    )
    outcome = system.execute_batch(request, timeout=30)
    aborted = recorder.controller.signal.aborted
    event(f"aborted: {aborted}; pool bound reached: {recorder.peak == plan.max_parallel}")
    events = trace(system)
    exclusive = {c for c, (name, _, _) in zip(ids, plan.calls, strict=True) if "excl" in name}
    denied = {c for c, (_, _, deny) in zip(ids, plan.calls, strict=True) if deny}

    # Inside the bodies and hooks: the pool bound, barriers, one coordinator.
    assert recorder.violations == []
    assert recorder.peak <= plan.max_parallel
    assert len(recorder.bodies) == len(set(recorder.bodies))

    # One tool/call and one tool/result per call, each stream in model order.
    calls = [label for kind, label in events if kind == "tool/call"]
    results = [label for kind, label in events if kind == "tool/result"]
    assert calls == ids and results == ids
    for call_id in ids:
        assert events.index(("tool/call", call_id)) < events.index(("tool/result", call_id))
    assert len(outcome.results) == len(ids)

    # Hooks and observers follow model order; contexts drain after the last result.
    for seen in (recorder.pre, recorder.post, recorder.observed):
        assert is_subsequence_in_order(seen, ids)
    assert set(recorder.post) <= set(recorder.observed)
    last_result = max(i for i, (kind, _) in enumerate(events) if kind == "tool/result")
    drained = events[last_result + 1 :]
    assert drained == [("user/message", f"ctx-{c}") for c in recorder.post]
    assert [context_text(c) for c in outcome.contexts] == [f"ctx-{c}" for c in recorder.post]

    # Barriers: an exclusive call starts after every earlier result and commits before any
    # later call starts.
    for call_id in exclusive:
        at = events.index(("tool/call", call_id))
        assert events[at + 1] == ("tool/result", call_id)
        earlier = ids[: ids.index(call_id)]
        assert all(events.index(("tool/result", c)) < at for c in earlier)

    # The registry saw exactly the started calls; the rest are synthetic, a suffix. A denial
    # takes no slot, runs no body, still passes post-execute, and beats cancellation.
    assert set(recorder.bodies) <= set(recorder.observed) - denied
    by_id = dict(zip(ids, outcome.results, strict=True))
    for call_id in denied & set(recorder.pre):
        assert call_id in recorder.post
        assert by_id[call_id].content[0]["text"] == "Error: denied by plan"
    synthetic = [c for c in ids if c not in recorder.observed]
    assert synthetic == ids[len(ids) - len(synthetic) :]
    for call_id in synthetic:
        at = events.index(("tool/call", call_id))
        assert events[at + 1] == ("tool/result", call_id)
    if not aborted:
        assert synthetic == [] and set(recorder.bodies) == set(ids) - denied
        assert [r.content[0]["text"] for r in outcome.results] == [
            "Error: denied by plan" if c in denied else f"ok:{c}" for c in ids
        ]
        return
    for call_id in synthetic:
        assert code(by_id[call_id]) == "ABORTED_BEFORE_DISPATCH"
    for call_id in recorder.observed:
        if call_id in recorder.bodies:
            assert code(by_id[call_id]) in (None, "ABORTED")
        elif call_id not in denied or call_id not in recorder.pre:
            assert code(by_id[call_id]) == "ABORTED_BEFORE_DISPATCH"
    where, index = plan.abort or ("", 0)
    if where == "before":
        assert recorder.pre == [] and recorder.observed == [] and recorder.bodies == []
    elif where == "pre" or ids[index] in exclusive:
        # Nothing starts after the call whose prepare (or exclusive body) aborted the turn.
        assert set(recorder.observed) <= set(ids[: index + 1])
