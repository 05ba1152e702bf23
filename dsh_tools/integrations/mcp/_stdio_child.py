"""A stdio server's process as the connection holds it: spawned at once, and never reaped until
the connection is done signalling it.

A process that exited but was not reaped keeps its id, and so its process group's: no other
process can be given either meanwhile. So while the connection holds its child un-reaped,
``os.killpg(child.pid, ...)`` can only reach the group the child leads, never one that took its
number after it was gone. ``anyio.open_process`` gives no such hold (asyncio reaps a child the
moment it exits, on a thread of its own before Python 3.12), and it awaits the pipes' setup
after the process started: a cancellation there kills the process it started (a supervisor)
and leaves whatever that had started already running, its id unknown to anyone. Here the spawn
is one synchronous step, and its pipes are read and written as plain descriptors.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import TextIO

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ["HeldChild", "pidfd_running", "spawn_held"]

_CHUNK = 1 << 16
_POLL_S = 0.02


class _FdReceiveStream(ByteReceiveStream):
    """The read end of a pipe, non-blocking, read when the loop says it is readable."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        while True:
            fd = self._fd
            if fd is None:
                raise anyio.ClosedResourceError
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        _close(self)


class _FdSendStream(ByteSendStream):
    """The write end of a pipe, non-blocking, written as the reader takes it."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            fd = self._fd
            if fd is None:
                raise anyio.ClosedResourceError
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(fd)

    async def aclose(self) -> None:
        _close(self)


def _close(stream: _FdReceiveStream | _FdSendStream) -> None:
    fd, stream._fd = stream._fd, None
    if fd is not None:
        anyio.notify_closing(fd)  # a task waiting on it gets ClosedResourceError
        os.close(fd)


def pidfd_running(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has not exited yet (its pidfd turns readable when it
    does; poll, as select refuses a descriptor past 1023)."""
    watch = select.poll()
    watch.register(pidfd, select.POLLIN)
    return not watch.poll(0)


class HeldChild:
    """A spawned process the connection alone reaps, in ``release()``; until then its id and
    its group's name it and nothing else."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdin is not None and popen.stdout is not None  # spawned with pipes
        self.pid = popen.pid
        self._popen = popen
        # Not reaped yet, so the id is still this process's: the pidfd cannot name another.
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(popen.pid)
        except OSError:  # a kernel without pidfds: its end is looked for without reaping it
            self._pidfd = None
        self.stdin: ByteSendStream = _FdSendStream(os.dup(popen.stdin.fileno()))
        self.stdout: ByteReceiveStream = _FdReceiveStream(os.dup(popen.stdout.fileno()))
        popen.stdin.close()
        popen.stdout.close()

    def exited(self) -> bool:
        """Whether the process has exited (looked for without reaping it)."""
        if self._pidfd is None:
            ended = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            return ended is not None
        return not pidfd_running(self._pidfd)

    def wait_status(self) -> os.waitid_result | None:
        """How the process ended (looked at without reaping it), or ``None`` while it runs."""
        with contextlib.suppress(ChildProcessError):
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return None

    async def wait(self) -> None:
        """Until the process exited (it is not reaped)."""
        while not self.exited():
            if self._pidfd is None:
                await anyio.sleep(_POLL_S)
            else:
                await anyio.wait_readable(self._pidfd)

    async def release(self) -> None:
        """Close the pipes and reap the process: the caller signals it no more. One that has
        not exited is reaped by a thread once it does."""
        await self.stdin.aclose()
        await self.stdout.aclose()
        if self._pidfd is not None:
            anyio.notify_closing(self._pidfd)
            os.close(self._pidfd)
        if self._popen.poll() is None:
            threading.Thread(
                target=self._popen.wait, name=f"mcp-reap[{self.pid}]", daemon=True
            ).start()


def spawn_held(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None,
    stderr: TextIO,
    pass_fds: Sequence[int],
) -> HeldChild:
    """Start ``argv`` in a session (so a process group) of its own, with pipes for its input
    and output; raises the ``OSError`` of a command that cannot be run, as ``Popen`` does."""
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,  # the group's id is the child's process id
        pass_fds=tuple(pass_fds),
    )
    try:
        return HeldChild(popen)
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(popen.pid, signal.SIGKILL)  # not reaped yet: the group is still its own
        popen.wait()
        raise
