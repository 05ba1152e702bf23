"""A stdio server's process group: watched while it serves, and ended with its connection.

The SDK starts a stdio server in a session (so a process group) of its own, and when the
connection closes it closes the server's input and signals the whole group only if the server
has not exited 2 s later. So a server that exits at once leaves behind what it started itself
(a worker, a browser, the real server behind a wrapper), and a server that dies while such a
child still holds its stdout never shows its end there: calls wait for answers that cannot
come until a keep-alive ping gives up.

``stdio_group_client`` is ``stdio_client`` that also ends the group (``SIGTERM``, then
``SIGKILL`` after the SDK's grace period) as soon as the server's process exited, which ends
its output, and once more when the connection is closed. On Linux it starts the server itself,
as the SDK would (a session of its own, the SDK's default environment, the same shutdown:
close the input, wait 2 s, end the group), with lines read in linear time (``_stdio_pipes``):
its exit is watched through a pidfd, and its environment carries a tag
(``DSH_TOOLS_MCP_SERVER``) by which the descendants that left the group (``setsid``) are found
and ended with it. Elsewhere (no ``/proc``, no pidfd) it is the SDK's ``stdio_client``.

The process it starts (the supervisor below, or the server) is held un-reaped until nothing is
signalled any more (``_stdio_child``): its group's id cannot go to a stranger's group meanwhile.

On Linux the server also runs under a supervisor (``_stdio_supervisor``): a child subreaper,
so that a descendant that left the group and cleared its environment (a double fork after
``env -i``) is still its descendant, ended once the server exits. It costs one more
interpreter per server (about 10 ms to start, 10 MB). Where ``sys.executable`` is no Python
that runs it (a frozen application, an embedding), the server runs without it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from ...actors._logging import get_logger
from . import _stdio_supervisor
from ._stdio_child import HeldChild, pidfd_running, spawn_held
from ._stdio_pipes import LINE_LIMIT, read_lines, write_lines

__all__ = ["ServerExit", "stdio_group_client"]

_log = get_logger("dsh_tools.mcp")

_TAG = "DSH_TOOLS_MCP_SERVER"
_GRACE_S = 2.0
"""Between ``SIGTERM`` and ``SIGKILL`` to what is left of the group, as the SDK waits."""
_POLL_S = 0.02
_FLUSH_S = 0.5
"""How long the messages sent last may take to be written before the server's input closes."""


class ServerExit:
    """How the process of a stdio server ended on its own, before the connection signalled
    it, as errors say it (``"it exited with status 2"``, ``"it was killed by SIGKILL"``), for
    the last connection ``stdio_group_client`` opened with it; ``None`` while that is not
    known (it runs, it was ended by the connection, or not on Linux)."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text: str | None = None


class _SupervisorDidNotRun(Exception):
    """The interpreter given the supervisor did not run it: it is no Python."""


_unfit: set[str] = set()
"""The interpreters that did not run the supervisor, which servers are no longer run under."""


@contextlib.asynccontextmanager
async def stdio_group_client(
    params: StdioServerParameters,
    errlog: TextIO,
    line_limit: int = LINE_LIMIT,
    ended_by: ServerExit | None = None,
) -> AsyncIterator[Any]:
    """The ``(read, write)`` streams of ``stdio_client(params, errlog=errlog)``, ending the
    server's process group and its descendants with it (see the module's docstring); a line of
    the server's output longer than ``line_limit`` bytes ends the connection, and ``ended_by``
    learns how the server's process ended on its own (on Linux)."""
    if sys.platform != "linux":  # no /proc, no pidfd: the SDK's own handling is all there is
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
        return
    interpreter = _interpreter()
    if interpreter is not None:
        try:
            async with _group_client(params, errlog, line_limit, interpreter, ended_by) as streams:
                yield streams
            return
        except _SupervisorDidNotRun:
            # ``sys.executable`` is the program that embeds Python (uWSGI, say): it ran
            # without running the supervisor, and what it started is ended. The server runs
            # without the supervisor from now on, found by its tag alone.
            _unfit.add(interpreter)
            _log.warning(
                "MCP stdio servers run without their supervisor: sys.executable is not a "
                "Python interpreter that runs it",
                server_command=params.command,
                executable=interpreter,
            )
    async with _group_client(params, errlog, line_limit, None, ended_by) as streams:
        yield streams


@contextlib.asynccontextmanager
async def _group_client(
    params: StdioServerParameters,
    errlog: TextIO,
    line_limit: int,
    interpreter: str | None,
    ended_by: ServerExit | None,
) -> AsyncIterator[Any]:
    """``stdio_group_client`` on Linux, the server run under the supervisor by ``interpreter``
    (unless it is ``None``); raises ``_SupervisorDidNotRun`` when the interpreter did not run
    it, having ended whatever it started."""
    if ended_by is not None:
        ended_by.text = None  # a reconnect's process is another
    tag = secrets.token_hex(16)
    status, status_end = os.pipe()  # whether the command ran: see _stdio_supervisor
    try:
        plain = params.model_copy(update={"env": {**(params.env or {}), _TAG: tag}})
        tagged = _supervised(plain, interpreter, status_end)
        try:
            # One synchronous step, so no cancellation comes between the process's start and
            # the hold below: whatever it starts is ended with it.
            child = spawn_held(
                [tagged.command, *tagged.args],
                env=get_default_environment() | (tagged.env or {}),
                cwd=tagged.cwd,
                stderr=errlog,
                pass_fds=(status_end,) if tagged is not plain else (),
            )
        finally:
            os.close(status_end)  # the supervisor's is the only write end left
    except BaseException:
        os.close(status)
        raise
    leader = child.pid  # and the group's id, which stays the group's until ``release``
    noted = _ExitNote(child, ended_by, supervised=tagged is not plain)
    ended = anyio.Event()  # the watch has ended the group after the server's exit
    encoding, errors = tagged.encoding, tagged.encoding_error_handler
    written = anyio.Event()  # the writer is done
    try:
        await _command_ran(status, params.command, supervised=tagged is not plain)
        messages, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_lines, child.stdout, messages, encoding, errors, line_limit)
            tasks.start_soon(
                write_lines, child.stdin, outgoing, messages, encoding, errors, written
            )
            try:
                async with anyio.create_task_group() as watching:
                    watching.start_soon(_end_group_after_exit, child, tag, ended, noted)
                    try:
                        yield read, write
                    finally:
                        watching.cancel_scope.cancel()
            finally:
                # Every wait below is bounded, and must finish even when the caller is
                # cancelled: else the server would be left running.
                with anyio.CancelScope(shield=True):
                    await _stop(child, read, write, written, tag, ended, noted)
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if not ended.is_set():
                await _end_group(leader, tag)
            with anyio.move_on_after(_GRACE_S):
                await child.wait()
            await child.release()  # only now: the group is signalled no more


async def _stop(
    child: HeldChild,
    read: MemoryObjectReceiveStream[SessionMessage | Exception],
    write: MemoryObjectSendStream[SessionMessage],
    written: anyio.Event,
    tag: str,
    ended: anyio.Event,
    noted: _ExitNote,
) -> None:
    """The MCP shutdown: close the server's input, give it ``_GRACE_S`` to exit, then end its
    group (``SIGTERM``, ``SIGKILL`` after as long again) and what escaped it."""
    read.close()
    write.close()  # the writer ends once it wrote what it had (a cancellation, say)
    with anyio.move_on_after(_FLUSH_S):
        await written.wait()
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await child.stdin.aclose()
    with anyio.move_on_after(_GRACE_S):
        await child.wait()
    if not ended.is_set():
        noted.note()  # before the group is signalled: an exit after that is the signal's
        await _end_group(child.pid, tag)
        ended.set()


class _ExitNote:
    """Notes how ``child`` ended in ``ended_by``, once it exited on its own."""

    __slots__ = ("child", "ended_by", "supervised")

    def __init__(self, child: HeldChild, ended_by: ServerExit | None, *, supervised: bool) -> None:
        self.child = child
        self.ended_by = ended_by
        self.supervised = supervised

    def note(self) -> None:
        if self.ended_by is not None:
            self.ended_by.text = _how_it_ended(self.child.wait_status(), supervised=self.supervised)


def _how_it_ended(status: os.waitid_result | None, *, supervised: bool) -> str | None:
    """``status`` as errors say it; under the supervisor, which exits as a shell reports its
    command (``128 + n`` for signal ``n``), a status past 128 names the signal."""
    if status is None:
        return None
    if status.si_code == os.CLD_EXITED:
        code = status.si_status
        if supervised and code > 128 and code - 128 in _SIGNALS:
            return f"it was killed by {signal.Signals(code - 128).name}"
        return f"it exited with status {code}"
    if status.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        signum = status.si_status
        name = signal.Signals(signum).name if signum in _SIGNALS else f"signal {signum}"
        return f"it was killed by {name}"
    return None


_SIGNALS = frozenset(signal.Signals)


_INTERPRETER_NAMES = ("python", "pypy")
"""How the programs that are Python interpreters are named (``python3.12``, ``pypy3``...)."""
_SUPERVISOR = os.path.abspath(_stdio_supervisor.__file__)
"""Run by its path, not as ``-c`` source: ``ps`` shows the server's command line after it,
not the supervisor's source. Absolute, as the server's working directory may be another."""


def _interpreter() -> str | None:
    """The Python interpreter that runs the supervisor: ``sys.executable``, unless there is
    none (an embedding may leave it empty), it is the program of a frozen application (which
    would start the application again), its name is no interpreter's (the program of an
    application that embeds Python, or that a compiler built: started with the supervisor's
    arguments, it would do whatever it does), or it did not run the supervisor once already."""
    executable = sys.executable
    if not executable or getattr(sys, "frozen", False) or executable in _unfit:
        return None
    if not os.path.basename(executable).startswith(_INTERPRETER_NAMES):
        return None
    return executable


def _supervised(
    params: StdioServerParameters, interpreter: str | None, status: int
) -> StdioServerParameters:
    """``params`` run under the supervisor (``_stdio_supervisor``) by ``interpreter``: an
    isolated interpreter that reaps and ends whatever the server leaves behind, and reports
    to the descriptor ``status`` that it runs and whether it could run the command. A command
    that cannot be found is started as it is, so that the spawn fails as it would without the
    supervisor (``FileNotFoundError`` naming the command); so is any command when
    ``interpreter`` is ``None``."""
    if interpreter is None or not _runnable(params):
        return params
    program = [interpreter, "-I", "-S", _SUPERVISOR, str(status)]
    return params.model_copy(
        update={"command": program[0], "args": [*program[1:], params.command, *params.args]}
    )


async def _command_ran(status: int, command: str, *, supervised: bool) -> None:
    """Wait for the supervisor to run ``command`` (closing ``status``), or raise the
    ``OSError`` of the ``exec`` that failed, as the spawn raises it without the supervisor
    (``Exec format error`` for an executable file with no ``#!`` line, say): the server's
    output would only end, with nothing to say why. Raise ``_SupervisorDidNotRun`` when
    ``status`` closed without the supervisor's first word (a ``+``): what ran was no Python.
    The server cannot answer before it runs, so the connection is no slower for the wait."""
    report = b""
    try:
        while True:
            await anyio.wait_readable(status)
            chunk = os.read(status, 32)
            if not chunk:
                break
            report += chunk
    finally:
        os.close(status)
    if not supervised:
        return
    if not report.startswith(b"+"):
        raise _SupervisorDidNotRun
    if report[1:].isdigit():
        code = int(report[1:])
        raise OSError(code, os.strerror(code), command)


def _runnable(params: StdioServerParameters) -> bool:
    """Whether ``params.command`` names an executable file, looked up as the spawn will: a
    path from the server's working directory, a bare name on the server's ``PATH``."""
    command = params.command
    if os.path.dirname(command):
        path = os.path.join(params.cwd or "", command)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    search = (params.env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    return shutil.which(command, path=search) is not None


def _processes() -> Iterator[tuple[int, bytes, int, int]]:
    """``(pid, state, parent, group)`` of every process in ``/proc`` (none without it)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # "pid (command) state ppid pgrp ...": the command may hold any character.
                state, parent, group = stat.read().rsplit(b")", 1)[1].split()[:3]
            yield int(entry), state, int(parent), int(group)
        except (OSError, ValueError):  # gone meanwhile
            continue


def _carries(pid: int, wanted: bytes) -> bool | None:
    """Whether process ``pid``'s environment holds the entry ``wanted``; ``None`` when it
    cannot be read (gone meanwhile, or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return wanted in environ.read().split(b"\0")
    except OSError:
        return None


async def _end_group_after_exit(
    child: HeldChild, tag: str, ended: anyio.Event, noted: _ExitNote
) -> None:
    """Once the server's process exited, note how (``noted``), end what is left of its group
    and its escapees (then set ``ended``): a child of it that holds its stdout would keep the
    connection from seeing the server's end."""
    await child.wait()
    noted.note()
    await _end_group(child.pid, tag)
    ended.set()


async def _end_group(group: int, tag: str) -> None:
    """``SIGTERM`` to the process group and to the processes that left it, ``SIGKILL`` to what
    is left of them after the grace."""
    escaped: dict[int, int] = {}  # pidfds by process id
    try:
        # None of the group left, or some member not ours to signal: the rest still goes.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        # Apart: a member not ours to terminate may still be continued (same session).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGCONT)  # see _terminate_each
        _terminate_each(_escapees(group, tag, escaped))
        with anyio.move_on_after(_GRACE_S):
            while True:
                while _group_alive(group) or any(pidfd_running(fd) for fd in escaped.values()):
                    await anyio.sleep(_POLL_S)
                # One more look once they are gone: a process one of them started meanwhile
                # (or one caught in exec, whose environment could not be read) goes too.
                fresh = _escapees(group, tag, escaped)
                if not fresh:
                    return
                _terminate_each(fresh)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        _escapees(group, tag, escaped)
        _signal_each(list(escaped.values()), signal.SIGKILL)
    finally:
        for pidfd in escaped.values():
            os.close(pidfd)


def _escapees(group: int, tag: str, known: dict[int, int]) -> list[int]:
    """Pidfds of the server's descendants outside its process group that ``known`` does not
    hold yet (added to it): a process that called ``setsid`` (a daemon, a browser, a server
    behind a wrapper that starts it so) leaves the group that ends with the server, and one
    whose parent exited is no longer the server's descendant in ``/proc``. Each is found by the
    tag it inherited in its environment, or, one that was started with an environment of its
    own, by its parent being one of them or of the group.

    ``/proc`` is read before each pidfd is opened, so a process listed there may have ended and
    its number gone to another process meanwhile: each is held only if what its pidfd holds
    still qualifies once opened (``_hold_if_ours``), and so a pidfd never holds a stranger."""
    me = os.getpid()
    wanted = f"{_TAG}={tag}".encode()
    listed: dict[int, tuple[int, int]] = {}  # parent and group, by process id
    found: set[int] = set()
    for pid, state, parent, pgrp in _processes():
        if pid == me or state in (b"Z", b"X"):
            continue
        listed[pid] = (parent, pgrp)
        if pgrp == group or _carries(pid, wanted):
            found.add(pid)
    grown = True
    while grown:
        grown = False
        for pid, (parent, _) in listed.items():
            if parent in found and pid not in found:
                found.add(pid)
                grown = True
    # Parents before children: a child found by its parent is vouched for by its held parent.
    vouching = {listed[pid][0] for pid in found if listed[pid][1] != group}
    held = dict(known)
    members: list[int] = []  # pidfds of group members held only to vouch for their children
    fresh: list[int] = []
    waiting = [
        pid for pid in found if pid not in known and (listed[pid][1] != group or pid in vouching)
    ]
    try:
        while waiting:
            ready = [pid for pid in waiting if listed[pid][0] not in waiting]
            if not ready:  # a loop of parents, which /proc read over time may show: left
                break
            for pid in ready:
                waiting.remove(pid)
                pidfd = _hold_if_ours(pid, group, wanted, held)
                if pidfd is None:
                    continue
                held[pid] = pidfd
                if listed[pid][1] == group:
                    members.append(pidfd)
                else:
                    known[pid] = pidfd
                    fresh.append(pidfd)
    finally:
        for pidfd in members:
            os.close(pidfd)
    return fresh


def _hold_if_ours(pid: int, group: int, wanted: bytes, held: dict[int, int]) -> int | None:
    """A pidfd of process ``pid`` if the process it holds is the server's: in its group (whose
    leader the connection has not reaped, so no stranger's group has its number), carrying its
    tag, or a child of a process ``held`` still runs. Read once the pidfd is open, ``/proc``
    shows the process it holds for as long as that runs; one that ended meanwhile is held
    harmlessly, as signalling it does nothing."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone meanwhile
        return None
    seen = _stat(pid)
    if seen is not None:
        parent, pgrp = seen
        vouched = parent in held and pidfd_running(held[parent])  # read after the child: its parent
        if pgrp == group or _carries(pid, wanted) or vouched:
            return pidfd
    os.close(pidfd)
    return None


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent, group)`` of process ``pid``, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            _, parent, group = stat.read().rsplit(b")", 1)[1].split()[:3]
        return int(parent), int(group)
    except (OSError, ValueError):
        return None


def _signal_each(pidfds: list[int], signum: int) -> None:
    for pidfd in pidfds:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(pidfd, signum)


def _terminate_each(pidfds: list[int]) -> None:
    """``SIGTERM``, then ``SIGCONT``: a stopped process (``SIGSTOP``, a debugger, job control)
    acts on no signal but ``SIGKILL`` until it is continued, so without it the server would
    be killed after the grace, its ``SIGTERM`` handler never run."""
    _signal_each(pidfds, signal.SIGTERM)
    _signal_each(pidfds, signal.SIGCONT)


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs. A member that exited stays in the group until
    its parent reaps it, which for an orphan is an init that may take seconds (or, in a
    container whose first process does not reap, never): it is no longer waited for."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not os.path.isdir("/proc"):
        return True
    return any(pgrp == group and state not in (b"Z", b"X") for _, state, _, pgrp in _processes())
