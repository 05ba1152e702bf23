"""Running a program on a code runtime directly, for the sandbox tests."""

from __future__ import annotations

import asyncio
from typing import Any

from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunRequest,
    CodeRunResult,
    SubprocessCodeRuntime,
)


def run(runtime: SubprocessCodeRuntime, program: str, **functions: Any) -> CodeRunResult:
    """Run ``program`` to its result, with ``functions`` as the ``tools`` namespace if any."""
    request = CodeRunRequest(program, [BindingNamespace("tools", functions)] if functions else [])
    return asyncio.run(runtime.run(request))


def value(runtime: SubprocessCodeRuntime, program: str, **functions: Any) -> Any:
    """The value ``program`` returns; the run must succeed."""
    result = run(runtime, program, **functions)
    assert result.error is None, result.error
    return result.value


def assert_next_run_works(runtime: SubprocessCodeRuntime) -> None:
    """A fresh run on ``runtime`` imports and starts in an empty scratch directory."""
    assert value(runtime, "import json, os\nreturn [json.loads('[1]'), os.listdir('.')]") == [
        [1],
        [],
    ]
