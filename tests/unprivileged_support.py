"""Running a harness as a user that is not root, for the sandbox tests of such harnesses.

A harness that is not root confines its runs differently (a user namespace first, no cgroups,
``RLIMIT_NPROC`` over its runs), and the suite usually runs as root: ``harness`` starts a
Python process as an unprivileged user (``nobody``) that runs the given code against a
``SubprocessCodeRuntime`` and prints what it found. Under root the process gets a mount
namespace of its own first, in which every directory on the way to the interpreter, this
checkout and the test's files that the user could not pass through (a ``/root`` of mode
``0700`` holding the interpreter, a root-only pytest temporary directory) is replaced by an
open directory holding only those paths, so the harness sees the same files without any
permission changed on the host. Under another user it runs as that user.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import pwd
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dsh_tools.codebridge._sandbox import _kernel

REPOSITORY = Path(__file__).resolve().parents[1]
_READY = "harness-ready"
_NO_USER_NAMESPACES = "no-user-namespaces:"
_PRELUDE = f"""
import asyncio, json, os, sys
from dsh_tools import CodeRuntimeConfig, CodeSandbox, SubprocessCodeRuntime
from dsh_tools.codebridge import CodeRunRequest
from dsh_tools.codebridge._sandbox import _kernel

def run(runtime, program):
    result = asyncio.run(runtime.run(CodeRunRequest(program, [])))
    error = None if result.error is None else [result.error.kind, result.error.message]
    return {{'error': error, 'value': None if error else result.value}}

def user_namespaces():
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        try:
            _kernel.unshare(_kernel.CLONE_NEWUSER)
            _kernel.unshare(_kernel.CLONE_NEWNET)
        except OSError as error:
            os.write(write_end, str(error).encode())
        os._exit(0)
    os.close(write_end)
    refused = os.read(read_end, 4096).decode()
    os.wait()
    return refused

print({_READY!r}, flush=True)
print({_NO_USER_NAMESPACES!r} + user_namespaces(), flush=True)
"""


def unprivileged_uid() -> int:
    """The user the harness runs as: ``nobody`` under root, else the current user."""
    if os.geteuid() != 0:
        return os.geteuid()
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


def give(path: Path) -> Path:
    """Make ``path`` (made by the test) the harness user's, as that user's own files are."""
    if os.geteuid() == 0:
        os.chown(path, unprivileged_uid(), unprivileged_uid())
    return path


def harness(
    body: str, *, paths: tuple[Path, ...] = (), refuse_user_namespaces: bool = False
) -> Any:
    """Run ``body`` (Python, which has ``run(runtime, program)`` and the public API at hand and
    must ``print(json.dumps(...))`` its findings last) in a harness process of an unprivileged
    user that can reach ``paths`` too; return what it printed last, decoded.

    ``refuse_user_namespaces`` gives the harness a kernel that refuses it user namespaces
    (``EPERM``, as ``kernel.unprivileged_userns_clone=0`` or an AppArmor restriction does)."""
    if refuse_user_namespaces and platform.machine() != "x86_64":
        pytest.skip("the user namespace refusal is written for x86_64's unshare")
    reachable = (
        Path(os.path.realpath(sys.executable)),
        Path(sys.prefix),
        Path(sys.base_prefix),
        REPOSITORY,
        *paths,
    )
    # Compiled once the prelude has said it is ready: a mistake in the body fails the test.
    code = _PRELUDE + f"exec(compile({textwrap.dedent(body)!r}, '<harness>', 'exec'))\n"
    who = f"an unprivileged user (uid {unprivileged_uid()})"
    try:
        completed = subprocess.run(
            [sys.executable, "-I", "-c", code],
            capture_output=True,
            text=True,
            timeout=240,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TMPDIR": "/tmp"},
            preexec_fn=lambda: _become_harness(
                [str(path) for path in reachable], refuse_user_namespaces
            ),
        )
    except PermissionError as exc:
        pytest.skip(f"{who} may not run this Python: {exc}")
    lines = completed.stdout.splitlines()
    if _READY not in lines and "Permission denied" in completed.stderr:
        pytest.skip(f"{who} may not read this Python or dsh_tools: {completed.stderr[-600:]}")
    assert _READY in lines, completed.stderr
    mark = next(line for line in lines if line.startswith(_NO_USER_NAMESPACES))
    refused = mark.removeprefix(_NO_USER_NAMESPACES)
    if refused and not refuse_user_namespaces:
        # The sandbox then fails every run with this (test_sandbox_unprivileged checks that).
        pytest.skip(f"the kernel refuses {who} a user namespace: {refused}")
    assert completed.returncode == 0, completed.stderr
    return json.loads(lines[-1])


def _become_harness(reachable: list[str], refuse_user_namespaces: bool) -> None:
    """In the child, before ``exec``: open the way to ``reachable``, then drop to the user."""
    if os.geteuid() == 0:
        _kernel.unshare(_kernel.CLONE_NEWNS)
        _kernel.mount("none", "/", None, _kernel.MS_REC | _kernel.MS_PRIVATE, None)
        _open_the_way(reachable)
    if refuse_user_namespaces:
        _kernel.set_no_new_privs()
        _kernel.set_seccomp_filter(_refuse_new_user_namespaces())
    if os.geteuid() == 0:
        uid = unprivileged_uid()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def _open_the_way(reachable: list[str]) -> None:
    """Replace each directory others may not pass through on the way to ``reachable`` (the
    shallowest first) with an open tmpfs holding only the entries on the way, each a bind
    mount of the original."""
    while True:
        closed: dict[str, set[str]] = {}
        for path in reachable:
            parts = Path(path).parts
            for depth in range(1, len(parts)):
                directory = os.path.join(*parts[:depth])
                if not os.stat(directory).st_mode & stat.S_IXOTH:
                    closed.setdefault(directory, set()).add(parts[depth])
                    break
        if not closed:
            return
        directory = min(closed, key=lambda name: name.count("/"))
        kept = {}
        for name in closed[directory]:
            kept[name] = os.open(os.path.join(directory, name), os.O_PATH | os.O_CLOEXEC)
        _kernel.mount("none", directory, "tmpfs", 0, "mode=0755,size=64k")
        for name, fd in kept.items():
            target = os.path.join(directory, name)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target)
            else:
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            bind = _kernel.MS_BIND | _kernel.MS_REC
            _kernel.mount(f"/proc/self/fd/{fd}", target, None, bind, None)
            os.close(fd)


_AUDIT_ARCH_X86_64 = 0xC000003E
_UNSHARE = 272
_CLONE = 56
_CLONE3 = 435
_EPERM = 1


def _refuse_new_user_namespaces() -> list[_kernel.SockFilter]:
    """A seccomp filter under which ``unshare``/``clone`` with ``CLONE_NEWUSER`` fail with
    ``EPERM`` (and ``clone3``, whose flags it cannot read, with ``ENOSYS``)."""
    load, jump_eq, jump_set, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | _EPERM, 0x00050000 | 38

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> _kernel.SockFilter:
        return _kernel.SockFilter(code, jt, jf, k)

    return [
        op(load, 4),  # arch
        op(jump_eq, _AUDIT_ARCH_X86_64, 1, 0),
        op(ret, allow),
        op(load, 0),  # nr
        op(jump_eq, _CLONE3, 0, 1),
        op(ret, enosys),
        op(jump_eq, _UNSHARE, 1, 0),
        op(jump_eq, _CLONE, 0, 3),
        op(load, 16),  # args[0], low half
        op(jump_set, _kernel.CLONE_NEWUSER, 0, 1),
        op(ret, eperm),
        op(ret, allow),
    ]
