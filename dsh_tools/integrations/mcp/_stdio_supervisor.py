"""The process a stdio MCP server runs under: it makes itself the reaper of everything the server
starts, runs the server, and once the server exits ends every process left below it, those
that left the server's process group and session, and cleared their environment, included
(``setsid`` and a double fork, ``env -i``), before it exits as the server did.

On Linux a process marked a "child subreaper" inherits the orphans of its descendants instead
of ``init``, so nothing the server starts can leave it: the descendants are found by their
parents in ``/proc``, with no mark of their own needed. The supervisor shares the server's
process group, which the connection signals to stop the server, and ignores that signal (as
it ignores a server's ``kill 0``): it lives on until the server exits, so that until then
every descendant is still found below it, by the connection as by itself. A ``SIGKILL`` of
the supervisor takes its cleanup with it; the connection then ends the group and the
processes that carry its environment variable, as without it.

It runs as ``python -I -S PATH FD COMMAND ARG...``, so it imports nothing of the package
and only modules that start fast. ``FD`` is the write end of a pipe that tells the connection
that the supervisor runs (a ``+`` first: an ``sys.executable`` that is no Python, such as an
embedding's program, would close it without) and whether the server's command could be run: it
closes with the ``exec`` that runs it, or first carries the ``errno`` of the ``exec`` that failed
(an executable file with no ``#!`` line, say), which the connection raises as the spawn's
``OSError``, as without the supervisor. The server
gets the environment the supervisor was started with (not the locale Python's start-up adds to
it), its standard streams (of which the supervisor keeps no copy of the input and output) and
its working directory, so that it runs as it would have run without it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_KILL_AFTER_S = 1.5
"""From the server's exit to ``SIGKILL`` of what is left: under the connection's 2 s between
its ``SIGTERM`` and ``SIGKILL`` of the group."""
_GIVE_UP_S = 5.0
"""Killing a descendant that forks faster than it is killed: stop trying then."""
_TICK_MS = 50
_IDLE_TICK_MS = 1000
"""How often the supervisor wakes while the server runs, when a pidfd of the server and one of
the host wake it as either exits: only to reap the orphans that ended below it meanwhile (each
a zombie until then). Each server has one supervisor for its whole life, so waking every
``_TICK_MS`` would keep an idle harness's CPU waking 20 times a second per server."""
_IGNORED_HERE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec.
_RESET_SIGNALS = (*_IGNORED_HERE, signal.SIGPIPE, signal.SIGXFSZ)


def _held_descendants(root: int) -> dict[int, int | None]:
    """Pidfds of every process below ``root``, by process id, read from ``/proc`` (none
    without it). Each is held only if, once its pidfd is open, its parent is ``root`` or one
    held that still runs: a process the server reaped may have its number taken by a stranger
    between the reading of ``/proc`` and the signal, and a pidfd held so never names one."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if entry.isdigit():
            parent = _parent(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    held: dict[int, int | None] = {}
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            try:
                pidfd = os.pidfd_open(child)
            except ProcessLookupError:  # gone meanwhile
                continue
            except OSError:  # no pidfds in this kernel: its number is all there is
                held[child] = None
                frontier.append(child)
                continue
            # Read once the pidfd is open: the parent of the process it holds, while it runs.
            parent = _parent(child)
            if parent == root or (parent in held and _running(held[parent])):
                held[child] = pidfd
                frontier.append(child)
            else:
                os.close(pidfd)
    return held


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError):  # gone meanwhile
        return None


def _running(pidfd: int | None) -> bool:
    if pidfd is None:
        return True
    watch = select.poll()
    watch.register(pidfd, select.POLLIN)
    return not watch.poll(0)


def _signal_all(held: dict[int, int | None], signum: int) -> None:
    """Signal each held process, then let go of the pidfds. ``SIGTERM`` is followed by
    ``SIGCONT``: a stopped process acts on no other signal until it is continued."""
    signals = (signum, signal.SIGCONT) if signum == signal.SIGTERM else (signum,)
    for pid, pidfd in held.items():
        for each in signals:
            try:
                if pidfd is None:
                    os.kill(pid, each)
                else:
                    signal.pidfd_send_signal(pidfd, each)
            except (ProcessLookupError, PermissionError):
                pass
        if pidfd is not None:
            os.close(pidfd)


def _reap(server: int) -> int | None:
    """Reap whatever ended below; the server's wait status if it was among them."""
    status: int | None = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == server:
            status = code


def _wait(server: int) -> int:
    """The server's wait status, once it exits; meanwhile the orphans that end below are
    reaped. Should the host die (this process's parent changes), the server and its
    descendants are ended as after the server's exit: its input ends then, but a server that
    does not exit for that would live on with nobody left to end it."""
    host = os.getppid()
    kill_at: float | None = None  # once the host is gone: when what is left gets SIGKILL
    watch = select.poll()  # not select: a descriptor may be numbered past 1023
    pidfds: list[int] = []
    for pid in (server, host):
        try:
            pidfds.append(os.pidfd_open(pid))  # readable once the process exits
        except (AttributeError, OSError):
            break
        watch.register(pidfds[-1], select.POLLIN)
    tick = _IDLE_TICK_MS if len(pidfds) == 2 else _TICK_MS
    while True:
        watch.poll(tick)
        status = _reap(server)
        if status is not None:
            return status
        if kill_at is None and os.getppid() != host:
            kill_at = time.monotonic() + _KILL_AFTER_S
            tick = _TICK_MS
            if len(pidfds) == 2:
                watch.unregister(pidfds[1])  # readable for good now
            _signal_all(_held_descendants(os.getpid()), signal.SIGTERM)
        elif kill_at is not None and time.monotonic() >= kill_at:
            _signal_all(_held_descendants(os.getpid()), signal.SIGKILL)


def _end_descendants() -> None:
    """``SIGTERM`` to every process left below, ``SIGKILL`` to those left after the grace."""
    me = os.getpid()
    kill_at = time.monotonic() + _KILL_AFTER_S
    give_up = time.monotonic() + _GIVE_UP_S
    termed: set[int] = set()
    while time.monotonic() < give_up:
        _reap(-1)
        left = _held_descendants(me)
        if not left:
            return
        if time.monotonic() >= kill_at:
            _signal_all(left, signal.SIGKILL)
        else:
            # One that appeared since (started by one of them as it ends) gets it too.
            for pid in termed & left.keys():
                pidfd = left.pop(pid)
                if pidfd is not None:
                    os.close(pidfd)
            termed.update(left)
            _signal_all(left, signal.SIGTERM)
        time.sleep(_TICK_MS / 1000)


def _environment_started_with() -> dict[bytes, bytes] | None:
    """The environment this process was started with, which the server gets: Python's start-up
    adds ``LC_CTYPE`` to ``os.environ`` in a C locale (PEP 538), as the default environment of
    a stdio server is, and the server would otherwise start in another locale than without the
    supervisor. ``None`` where ``/proc`` does not show it."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


def _let_go_of_pipes() -> None:
    """Hand the server's input and output to the server alone: while this process holds a copy,
    a server that closes its output is never seen to end it, and one that closes its input
    never makes a write to it fail; the connection would wait on them for ever."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def main(argv: list[str]) -> None:
    status = int(argv[0])
    argv = argv[1:]
    os.write(status, b"+")  # the supervisor runs: see the module's docstring
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the descendants still seen are ended
        pass
    for signum in _IGNORED_HERE:
        signal.signal(signum, signal.SIG_IGN)
    environment = _environment_started_with()
    server = os.fork()
    if server == 0:
        try:
            for signum in _RESET_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            os.set_inheritable(status, False)  # closed by the exec that runs the server
            if environment is None:
                os.execvp(argv[0], argv)
            os.execvpe(argv[0], argv, environment)
        except OSError as exc:
            os.write(2, f"cannot run {argv[0]}: {exc.strerror or exc}\n".encode())
            if exc.errno is not None:
                os.write(status, str(exc.errno).encode())
        finally:
            os._exit(127)  # as a shell reports a command it cannot run
    os.close(status)
    _let_go_of_pipes()
    status = _wait(server)
    _end_descendants()
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))  # as a shell reports it
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
