"""Tool bodies on Ray versus on this process's threads, and what Ray adds per call.

- **CPU-bound batch**: ``--calls`` (200) calls of a tool whose body does ``--ms`` (50) ms of pure
  Python work (calibrated here in CPU time), one ``ExecuteBatch`` with ``max_parallel``
  ``--pool`` (16): once with plain-function bodies on the system's threads (one GIL: they take
  turns), once placed on a local Ray instance with ``--cpus`` (2) CPUs (one worker process each).
- **Per-call overhead**: ``system.execute`` of a trivial tool, one call at a time, local versus
  placed as a Ray task and on a one-actor pool; the difference is what the trip costs. The peer:
  bare ``ray.get`` round trips of a no-op task and actor call in the same run (Ray publishes
  about 0.1-0.5 ms for a 1:1 actor call on an idle machine).
- **Model**: a placed batch takes about ``ceil(calls / min(pool, cpus)) * (body + trip)``; the
  run prints the model's prediction for the measured instance next to the measurement, and its
  prediction for ``--nodes`` (10) nodes of ``--cpus`` CPUs each.

Usage: ``python benchmarks/bench_ray.py [--calls N] [--ms MS] [--pool P] [--cpus C]
[--nodes K] [--json]``. Starts (and stops) its own local Ray instance; nothing leaves 127.0.0.1
but what Ray itself binds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any

from dsh_tools import (
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)
from dsh_tools.distributed import RayPlacement


def spin(rounds: int) -> int:
    """Pure Python work that holds the GIL: ``rounds`` multiply-adds."""
    total = 0
    for i in range(rounds):
        total = (total + i * i) % 1_000_003
    return total


def calibrate(ms: float) -> int:
    """Rounds of ``spin`` that take ``ms`` milliseconds of this thread's CPU time (best of five:
    CPU time, so that other processes on a shared machine do not shorten the body)."""
    probe = 200_000
    best = min(_cpu_seconds(spin, probe) for _ in range(5))
    return max(1, int(probe * (ms / 1000) / best))


def _cpu_seconds(fn: Any, *args: Any) -> float:
    start = time.thread_time()
    fn(*args)
    return time.thread_time() - start


def timed_spin(rounds: int) -> float:
    """Run ``spin(rounds)``; its wall time in seconds (longer than its CPU time when the body
    waited for a core or for the GIL)."""
    start = time.perf_counter()
    spin(rounds)
    return time.perf_counter() - start


def cpu_tool(name: str, rounds: int, placement: Any) -> Any:
    return define_tool(
        name=name,
        description="CPU-bound work",
        parameters={},
        output=ToolOutput(schema={"type": "number"}, render=lambda a, v: []),
        execute=lambda args, ctx: timed_spin(rounds),
        is_concurrency_safe=lambda args: True,
        placement=placement,
    )


def trivial_tool(name: str, placement: Any) -> Any:
    return define_tool(
        name=name,
        description="returns its argument",
        parameters={"n": {"type": "integer"}},
        output=ToolOutput(schema={"type": "integer"}, render=lambda a, v: []),
        execute=lambda args, ctx: args["n"],
        placement=placement,
    )


def batch_seconds(system: ToolSystem, name: str, calls: int, pool: int) -> tuple[float, float]:
    """The batch's wall time and its bodies' mean wall time (seconds)."""
    batch = ExecuteBatch(
        calls=[ToolCall(f"c{i}", name, "{}") for i in range(calls)], max_parallel=pool
    )
    start = time.perf_counter()
    outcome = system.execute_batch(batch)
    elapsed = time.perf_counter() - start
    failed = [r for r in outcome.results if r.is_error]
    assert not failed, failed[0]
    return elapsed, statistics.mean(r.value for r in outcome.results)


def per_call_ms(system: ToolSystem, name: str, calls: int) -> float:
    """Median of five rounds of ``calls`` sequential calls, per call."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for i in range(calls):
            result = system.execute(ExecuteCall(call_id=f"t{i}", name=name, arguments={"n": i}))
            assert not result.is_error, result
        rounds.append((time.perf_counter() - start) / calls * 1000)
    return statistics.median(rounds)


def bare_ray_ms(ray: Any, calls: int) -> tuple[float, float]:
    """Ray alone, the peer: ``ray.get`` of a no-op task and of a no-op actor call, per call
    (median of five rounds of ``calls`` sequential round trips)."""

    def noop(frame: bytes) -> bytes:
        return frame

    class Echo:
        def echo(self, frame: bytes) -> bytes:
            return frame

    task = ray.remote(noop).options(num_cpus=1)
    actor = ray.remote(Echo).options(num_cpus=0).remote()
    figures = []
    for submit in (lambda: task.remote(b"x"), lambda: actor.echo.remote(b"x")):
        ray.get([submit() for _ in range(10)])  # warm
        rounds = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                ray.get(submit())
            rounds.append((time.perf_counter() - start) / calls * 1000)
        figures.append(statistics.median(rounds))
    ray.kill(actor)
    return figures[0], figures[1]


def model_seconds(calls: int, pool: int, cpus: int, body_s: float, trip_s: float) -> float:
    """``ceil(calls / min(pool, cpus)) * (body + trip)``: waves of concurrent calls."""
    return math.ceil(calls / min(pool, cpus)) * (body_s + trip_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--ms", type=float, default=50.0)
    parser.add_argument("--pool", type=int, default=16)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--trivial-calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    # A local instance on 127.0.0.1 only (Ray reads this when first imported).
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    rounds = calibrate(options.ms)
    ray.init(num_cpus=options.cpus, include_dashboard=False, log_to_driver=False)
    figures: dict[str, Any] = {}
    try:
        config = ToolsConfig(max_parallel_tool_calls=options.pool)
        with ToolSystem.start(config, code_runtime=None) as system:
            system.tools.register(cpu_tool("cpu_local", rounds, None))
            system.tools.register(cpu_tool("cpu_ray", rounds, RayPlacement(num_cpus=1)))
            system.tools.register(trivial_tool("trivial_local", None))
            system.tools.register(trivial_tool("trivial_task", RayPlacement(num_cpus=1)))
            pool = RayPlacement(num_cpus=0, actor_pool=1)
            system.tools.register(trivial_tool("trivial_actor", pool))

            # warm up: worker processes started, functions exported, actor created
            batch_seconds(system, "cpu_ray", options.cpus * 2, options.pool)
            per_call_ms(system, "trivial_task", 10)
            per_call_ms(system, "trivial_actor", 10)

            body_s = options.ms / 1000
            local_s, local_body_s = batch_seconds(system, "cpu_local", options.calls, options.pool)
            ray_s, ray_body_s = batch_seconds(system, "cpu_ray", options.calls, options.pool)
            local_ms = per_call_ms(system, "trivial_local", options.trivial_calls)
            task_ms = per_call_ms(system, "trivial_task", options.trivial_calls)
            actor_ms = per_call_ms(system, "trivial_actor", options.trivial_calls)
            bare_task_ms, bare_actor_ms = bare_ray_ms(ray, options.trivial_calls)
            trip_s = (task_ms - local_ms) / 1000
            # the model with the body time the workers really saw (a shared machine slows them)
            predicted_here = model_seconds(
                options.calls, options.pool, options.cpus, ray_body_s, trip_s
            )
            cluster_cpus = options.nodes * options.cpus
            predicted_cluster = model_seconds(
                options.calls, options.pool, cluster_cpus, body_s, trip_s
            )
            unbounded = model_seconds(options.calls, cluster_cpus, cluster_cpus, body_s, trip_s)
            figures = {
                "calls": options.calls,
                "body_ms": options.ms,
                "pool": options.pool,
                "ray_cpus": options.cpus,
                "machine_cores": os.cpu_count(),
                "cpu_batch_local_threads_s": round(local_s, 3),
                "cpu_batch_ray_s": round(ray_s, 3),
                "cpu_batch_speedup": round(local_s / ray_s, 2),
                "body_wall_ms_local_threads": round(local_body_s * 1000, 1),
                "body_wall_ms_ray": round(ray_body_s * 1000, 1),
                "trivial_local_ms": round(local_ms, 3),
                "trivial_ray_task_ms": round(task_ms, 3),
                "trivial_ray_actor_ms": round(actor_ms, 3),
                "ray_task_overhead_ms": round(task_ms - local_ms, 3),
                "ray_actor_overhead_ms": round(actor_ms - local_ms, 3),
                "bare_ray_task_ms": round(bare_task_ms, 3),
                "bare_ray_actor_ms": round(bare_actor_ms, 3),
                "model_here_s": round(predicted_here, 3),
                "model_cluster_nodes": options.nodes,
                "model_cluster_s": round(predicted_cluster, 3),
                "model_cluster_pool_at_cpus_s": round(unbounded, 3),
            }
    finally:
        ray.shutdown()

    if options.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures
    print(
        f"{f['calls']} calls x {f['body_ms']:g} ms CPU-bound body, pool {f['pool']}, "
        f"{f['machine_cores']} cores on this machine"
    )
    print(f"  local, threads (one GIL)          {f['cpu_batch_local_threads_s']:8.3f} s")
    print(
        f"  Ray, local instance, {f['ray_cpus']} CPUs        {f['cpu_batch_ray_s']:8.3f} s"
        f"   ({f['cpu_batch_speedup']:.2f}x; model {f['model_here_s']:.3f} s)"
    )
    print(
        f"  mean body wall time: {f['body_wall_ms_local_threads']:.1f} ms on threads, "
        f"{f['body_wall_ms_ray']:.1f} ms on Ray ({f['body_ms']:g} ms of CPU each)"
    )
    print("trivial tool, one call at a time (system.execute)")
    print(f"  local                             {f['trivial_local_ms']:8.3f} ms/call")
    print(
        f"  Ray task                          {f['trivial_ray_task_ms']:8.3f} ms/call"
        f"   (+{f['ray_task_overhead_ms']:.3f} ms)"
    )
    print(
        f"  Ray actor                         {f['trivial_ray_actor_ms']:8.3f} ms/call"
        f"   (+{f['ray_actor_overhead_ms']:.3f} ms)"
    )
    print(
        f"  bare Ray (ray.get, no pipeline)   {f['bare_ray_task_ms']:8.3f} ms task, "
        f"{f['bare_ray_actor_ms']:.3f} ms actor"
    )
    print(
        f"model, {f['model_cluster_nodes']} nodes x {f['ray_cpus']} CPUs: "
        f"{f['model_cluster_s']:.3f} s at pool {f['pool']}, "
        f"{f['model_cluster_pool_at_cpus_s']:.3f} s with the pool raised to the CPU count"
    )


if __name__ == "__main__":
    main()
