"""Adversarial review of Code Mode: hostile programs against the contract (faults become
results, the template and the host survive)."""

from __future__ import annotations

import asyncio
import os

import pytest

from dsh_tools.codebridge import (
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    SubprocessCodeRuntime,
)


def test_a_program_that_stops_the_template_still_settles_and_the_next_run_works() -> None:
    # The worker's parent is the template process; a program can freeze it (SIGSTOP), so the
    # worker's exit report never comes. The run must still settle (faults become results,
    # never hangs), and later runs must get a working template. Under the process isolation,
    # where the template is reachable (the sandbox refuses the signal; its tests check that).
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=10_000, max_wall_ms=20_000, isolation="process")
    )
    freeze_parent = (
        "import os, signal\n"
        "parent = os.getppid()\n"
        "os.kill(parent, signal.SIGSTOP)\n"
        "return parent\n"
    )

    async def scenario() -> tuple[CodeRunResult, CodeRunResult]:
        frozen = await runtime.run(CodeRunRequest(freeze_parent, []))
        after = await runtime.run(CodeRunRequest("return 2\n", []))
        return frozen, after

    try:
        frozen, after = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        runtime.close()
    assert frozen.error is None, frozen
    assert after.error is None and after.value == 2, after
    with pytest.raises(ProcessLookupError):  # the frozen template was killed and reaped
        os.kill(frozen.value, 0)
