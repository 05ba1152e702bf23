"""The process a ``bash`` command runs under: it makes itself the reaper of everything the
command starts, runs the shell, and once the shell exits, or the host tells it to stop (the
call was stopped, or the host is gone), kills every process left below it, those that
left the command's process group and session included (``setsid``, a double fork), before it
exits as the shell did.

A command that kills the supervisor itself (``kill -9 $PPID``) takes this cleanup with it; the
host then kills the supervisor's process group and every process that still carries the
call's own environment variable (``_bash``).

It runs as ``python -I -S -c SOURCE COMMAND FD MARK`` (``SOURCE`` is this module's text, ``FD`` its
end of a socket pair with the host: it writes ``1`` there as it starts and ``2`` once its
cleanup is done, and it stops when that end turns readable: the host wrote to it, closed it,
or died; ``MARK`` is ``NAME=TOKEN``, the call's own variable, which it adds to the shell's
environment), so it imports nothing of the package, and only modules that start fast. On Linux a
process marked a "child subreaper" inherits the orphans of its descendants instead of
``init``: nothing the command starts can leave it. Elsewhere it still kills every descendant
it can still see.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_SIG_DFL = 0
_SIG_IGN = 1
# Numbered, not imported: the signal module would add about a quarter to the supervisor's start.
_SIGKILL = 9
_IGNORED_HERE = (1, 2, 3, 15)  # SIGHUP, SIGINT, SIGQUIT, SIGTERM: the command's to receive
# Python ignores SIGPIPE (13) and SIGXFSZ (25): ``yes | head -n 1`` must end.
_RESET_SIGNALS = (*_IGNORED_HERE, 13, 25)
_SHELL = "/bin/sh"
_CLEANUP_SECONDS = 5.0  # a descendant forking faster than it is killed: stop trying then
_REAP_MS = 100  # how often orphans that ended below the supervisor are reaped


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, read from ``/proc`` (none without it)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            found.append(child)
            frontier.append(child)
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ``try``/``except`` rather than ``contextlib.suppress`` here: importing contextlib would
# add about a tenth to the supervisor's start, which every ``bash`` call waits for.


def _kill(pid: int) -> None:
    try:  # noqa: SIM105
        os.kill(pid, _SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_everything_below(me: int) -> None:
    deadline = time.monotonic() + _CLEANUP_SECONDS
    while time.monotonic() < deadline:
        left = _descendants(me)
        if not left:
            return
        for pid in left:
            _kill(pid)
        _reap()
        time.sleep(0.001)


def _wait(shell: int, stop: int) -> int:
    """The shell's wait status, once it exits or (killed first) once ``stop`` is readable.
    Meanwhile the orphans that end below the supervisor are reaped, a few times a second, so
    that a command that keeps leaving children behind does not pile up zombies."""
    try:
        exited = os.pidfd_open(shell)
    except (AttributeError, OSError):
        exited = None
    # poll, not select: the descriptors may be numbered past select's 1024.
    watch = select.poll()
    watch.register(stop, select.POLLIN)
    if exited is not None:
        watch.register(exited, select.POLLIN)
    while True:
        ready = {fd for fd, _ in watch.poll(_REAP_MS)}
        if stop in ready:  # the call was stopped, or the host is gone
            _kill(shell)
            return os.waitpid(shell, 0)[1]
        while True:  # the shell's end, and what ended below it meanwhile
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == shell:
                return status
            if pid == 0:
                break


def _default_signals(libc: ctypes.CDLL | None) -> None:
    """In the shell's process, before exec: the signals this supervisor ignores, and those
    Python ignores, back to their defaults (an ignored signal stays ignored across exec)."""
    if libc is None:
        return
    for signum in _RESET_SIGNALS:
        libc.signal(signum, _SIG_DFL)


def main(command: str, stop: int, mark: str) -> None:
    os.set_inheritable(stop, False)
    name, _, token = mark.partition("=")
    os.environ[name] = token  # inherited by the shell and everything it starts
    os.write(stop, b"1")  # the host reads that a Python interpreter runs this source
    libc: ctypes.CDLL | None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal.restype = ctypes.c_void_p
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # The command shares this process group, so that the host's kill of the group reaches
        # it should the command kill this supervisor (``kill -9 $PPID``); its ``kill 0``
        # (``trap 'kill 0' EXIT``) reaches this supervisor too, which does not end for it.
        for signum in _IGNORED_HERE:
            libc.signal(signum, _SIG_IGN)
    except (OSError, AttributeError):  # not Linux: the descendants still to be seen are killed
        libc = None
    me = os.getpid()
    shell = os.fork()
    if shell == 0:
        try:
            _default_signals(libc)
            os.execv(_SHELL, [_SHELL, "-c", command])
        except OSError as exc:
            os.write(2, f"cannot run {_SHELL}: {exc.strerror or exc}\n".encode())
        finally:
            os._exit(127)  # as a shell reports a command it cannot run
    status = _wait(shell, stop)
    _kill_everything_below(me)
    try:  # noqa: SIM105
        os.write(stop, b"2")  # the host reads that nothing is left to kill
    except OSError:  # the host is gone
        pass
    if os.WIFSIGNALED(status):  # end as the shell did, for the host to read
        import resource
        import signal

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:  # noqa: SIM105
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL has no handler to reset
            pass
        os.kill(me, os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
