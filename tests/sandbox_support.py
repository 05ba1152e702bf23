"""Running a program on a code runtime directly, for the sandbox tests."""

from __future__ import annotations

import asyncio
import struct
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


def fork_burst_program(depth: int) -> bytes:
    """A static x86_64 Linux program (no libc) that forks ``depth`` times, every process
    doubling the tree, then pauses: ``2 ** depth`` processes within milliseconds, faster than
    any sampled budget can see them come."""
    base = 0x400000
    code = (
        b"\x41\xbc"
        + struct.pack("<I", depth)  # mov r12d, depth
        + b"\xb8\x39\x00\x00\x00\x0f\x05"  # again: fork (mov eax, 57; syscall)
        + b"\x48\x85\xc0\x78\x05"  # test rax, rax; js pause (the fork failed)
        + b"\x41\xff\xcc\x75\xef"  # dec r12d; jnz again
        + b"\xb8\x22\x00\x00\x00\x0f\x05\xeb\xf7"  # pause: pause (eax 34); jmp pause
    )
    headers = 64 + 56
    size = headers + len(code)
    elf = b"\x7fELF\x02\x01\x01" + bytes(9)
    elf += struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, base + headers, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    elf += struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)  # one R+X segment
    return elf + code


def bursting_program(depth: int) -> str:
    """A Code Mode program that writes ``fork_burst_program(depth)`` to its scratch directory,
    starts it in a child and waits."""
    return f"""
import os, time
with open("burst", "wb") as file:
    file.write({fork_burst_program(depth)!r})
os.chmod("burst", 0o755)
if os.fork() == 0:
    os.execv("burst", ["burst"])
time.sleep(30)
return "survived"
"""
