"""The template process: imports the worker once, then forks one clean child per run.

Run by path (``python -I -X utf8 _template.py <control fd>``) with an empty environment, it loads
the worker modules under a private package name (so ``dsh_tools`` itself is never imported),
freezes the garbage collector's view of its heap (cheaper copy-on-write) and serves spawn
requests on its control socket (``AF_UNIX``/``SOCK_SEQPACKET``). It never runs model code.

The first message on the control socket is ``b"C"`` + JSON settings: ``isolation``
(``"sandbox"`` or ``"process"``) and, for the sandbox, the budgets and the grants (see
``_sandbox``). Under ``"sandbox"`` the template prepares the sandbox once (an empty network
namespace, the granted paths, the kernel checks); a failure there is answered to every spawn
request as an ``E`` report naming the missing feature, so no run ever goes unconfined.

A spawn request is one message ``b"S"`` carrying six descriptors: host->worker channel (read
end), worker->host channel (write end), native stdout and stderr (write ends), the run's
status pipe (write end) and the where pipe (write end: the stacks the worker writes when asked
where the program is, ``WHERE_FD``). The template forks; the child calls ``setsid()`` and moves
its descriptors to 0-4 (0 = ``/dev/null``), the status pipe to 5 and the where pipe to 6,
closing every other descriptor.
Under ``"process"`` it reports ``b"P"`` + its pid, clears the environment and enters
``_worker_start.main()``. Under ``"sandbox"`` the child is forked into a new PID namespace, of which
it is the init: the template reports ``b"P"`` + its pid (killing that process ends the whole
run), and the init creates the run's other namespaces, forks the confined worker and reports
``b"W"`` + the worker's wait status or ``b"B"`` + the budget it ended the run for. The template
closes its copies of the run's descriptors except the status pipe, reaps the child (and, as a
child subreaper, any orphaned grandchild) and reports ``b"X"`` + wait status + CPU seconds (of
the child and everything it reaped: under the sandbox, the whole run) on the status pipe, then
closes it. Failures are ``b"E"`` + a 2-byte length + message.

When the control socket reaches end of file (the host disposed the runtime or died) the template
kills every live child's process group, reaps them and exits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import types
from typing import Any, NoReturn

_PACKAGE = "_dsh_codebridge_worker"
_PR_SET_CHILD_SUBREAPER = 36
_CLEANUP_RETRY_MS = 50  # how often a populated cgroup of a reaped run is retried


def _load_worker() -> Any:
    here = os.path.dirname(os.path.abspath(__file__))
    while here in sys.path:
        sys.path.remove(here)
    package = types.ModuleType(_PACKAGE)
    package.__path__ = [here]
    package.__package__ = _PACKAGE
    sys.modules[_PACKAGE] = package
    return importlib.import_module(_PACKAGE + "._worker_start")


def _become_subreaper() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass  # orphans then go to init instead


def _no_core_dumps() -> None:
    """``RLIMIT_CORE`` at 1 byte, soft and hard, for this run's every process (inherited across
    ``fork`` and ``execve``; under the sandbox its seccomp filter refuses any change of it).
    At 0 the kernel still hands a crashing process's memory to a ``core_pattern`` that is a
    pipe (``systemd-coredump``, ``apport``): the host's handler then writes it to the host's
    disk with the host's CPU, outside every budget of the run. The kernel skips piped dumps
    at exactly 1, and a core file needs at least a page, so 1 means no dump of either kind.
    Best effort: a harness that is not root and whose hard limit is 0 cannot raise it to 1."""
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (1, 1))


def _ordinary_scheduling() -> None:
    """No real-time policy and no nice value below 0 for this run's every process, whatever
    the harness's are (both are inherited across ``fork``): the worker's ``RLIMIT_RTPRIO`` and
    ``RLIMIT_NICE`` at 0 keep a process from taking them, not from keeping them. A harness
    started under ``SCHED_FIFO`` (``chrt``) handed it to the program, whose spinning leaves
    every other process of its CPU, the host's included, 5% of it; and the run's ``cpu``
    cgroup refuses a real-time task, which failed every run. Giving either up needs no
    privilege; best effort."""
    with contextlib.suppress(OSError):
        if os.sched_getscheduler(0) not in (os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_IDLE):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with contextlib.suppress(OSError):
        if os.getpriority(os.PRIO_PROCESS, 0) < 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)


def _write_quiet(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, data)


def _close_quiet(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _error_report(message: str) -> bytes:
    data = message.encode("utf-8", "replace")[:4000]
    return b"E" + struct.pack(">H", len(data)) + data


def _close_all_but(first: int, kept: list[int]) -> None:
    """Close every descriptor from ``first`` on, except ``kept``."""
    start = first
    for fd in sorted(kept):
        if fd >= start:
            os.closerange(start, fd)
            start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


def _child(worker: Any, control: socket.socket, fds: list[int], plan: Any) -> NoReturn:
    status = 70
    try:
        os.setsid()
        _no_core_dumps()
        _ordinary_scheduling()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.detach()  # the descriptor is closed below; the object must never close it
        channel_in, channel_out, out_w, err_w, status_w, where_w = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        sources = [devnull, out_w, err_w, channel_in, channel_out, status_w, where_w]
        lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in sources]
        where_fd: int = worker.WHERE_FD  # 6, the last of them
        for target, fd in enumerate(lifted):
            # The where pipe is the worker's alone: no program it starts inherits it.
            os.dup2(fd, target, inheritable=target != where_fd)
        _close_all_but(where_fd + 1, [] if plan is None else plan.kept_fds())
        os.environ.clear()
        if plan is not None:
            plan.start_init(5, worker.main)
        os.write(5, b"P" + struct.pack(">i", os.getpid()))
        os.close(5)
        worker.main()
    except BaseException:
        pass
    os._exit(status)


def _serve(worker: Any, control: socket.socket, plan: Any) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    children: dict[int, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = children.pop(pid, None)
            if fd is not None:
                if plan is not None:  # before the report: a settled run has left nothing
                    plan.ended(pid, status)
                cpu = usage.ru_utime + usage.ru_stime
                _write_quiet(fd, b"X" + struct.pack(">id", status, cpu))
                _close_quiet(fd)

    def spawn(fds: list[int]) -> None:
        if len(fds) != 6:
            for fd in fds:
                _close_quiet(fd)
            return
        for fd in fds[:5]:
            # The host makes the pipes non-blocking (its ends are); the worker's are blocking,
            # as a program's standard streams are. One ``fcntl`` each: a fresh pipe end has
            # no other status flag to keep (the access mode is not one). The where pipe stays
            # non-blocking: a dump that finds it full is cut short rather than stall the worker.
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, 0)
        if plan is not None and plan.error is not None:
            _write_quiet(fds[4], _error_report(plan.error))
            for fd in fds:
                _close_quiet(fd)
            return
        try:
            pid = os.fork() if plan is None else plan.fork_run()
        except OSError as exc:
            message = f"fork failed: {exc}"
            if plan is not None:
                message = plan.unavailable("PID namespaces", exc)
            _write_quiet(fds[4], _error_report(message))
            for fd in fds:
                _close_quiet(fd)
            return
        if pid == 0:
            _child(worker, control, fds, plan)
        if plan is not None and plan.template_reports_pid:
            # The init cannot know its pid outside its namespace.
            _write_quiet(fds[4], b"P" + struct.pack(">i", pid))
        for fd in (*fds[:4], fds[5]):
            _close_quiet(fd)
        children[pid] = fds[4]

    poller = select.poll()
    # The exits first: a run's child reaped before the next spawn request is served may have
    # left something for the next run to start from (``plan.ended``).
    poller.register(wake_r, select.POLLIN)
    poller.register(control.fileno(), select.POLLIN)
    control_fd = control.fileno()
    running = True
    while running:
        # While a reaped run's cgroups are still populated (the kernel detaches its killed
        # processes a moment later), wake up to retry their removal even if nothing comes.
        retrying = plan is not None and plan.cleanup_pending
        ready = poller.poll(_CLEANUP_RETRY_MS if retrying else None)
        if not ready and plan is not None:
            plan.retry_cleanup()
        for fd, _events in ready:
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
            elif fd == control_fd:
                try:
                    message, fds, _flags, _address = socket.recv_fds(control, 64, 8)
                except OSError as exc:
                    if exc.errno in (errno.EINTR, errno.EAGAIN):
                        continue
                    running = False
                    break
                if not message:
                    running = False
                    break
                if message == b"S":
                    spawn(fds)
                else:
                    for extra in fds:
                        _close_quiet(extra)
        reap()
    for pid in list(children):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid, fd in list(children.items()):
        try:
            _pid, status, usage = os.wait4(pid, 0)
        except ChildProcessError:
            status, usage = 0, None
        cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
        if plan is not None:
            plan.ended(pid, status)
        _write_quiet(fd, b"X" + struct.pack(">id", status, cpu))
        _close_quiet(fd)
    children.clear()
    reap()


def _read_settings(control: socket.socket) -> dict[str, Any]:
    message = control.recv(1 << 20)
    if not message.startswith(b"C"):
        raise SystemExit(70)
    settings = json.loads(message[1:])
    if not isinstance(settings, dict):
        raise SystemExit(70)
    return settings


def main() -> None:
    """Entry point: ``_template.py <control fd>``."""
    control = socket.socket(fileno=int(sys.argv[1]))
    settings = _read_settings(control)
    worker = _load_worker()
    worker.fit_threads()  # before any fork: every worker inherits it
    with contextlib.suppress(KeyError, TypeError, ValueError):
        worker.expect_compute_ms(float(settings["compute_ms"]))
    plan: Any = None
    if settings.get("isolation") == "sandbox":
        plan = importlib.import_module(_PACKAGE + "._sandbox").SandboxPlan(settings)
        plan.prepare()
    _become_subreaper()
    gc.collect()
    gc.freeze()
    try:
        _serve(worker, control, plan)
    finally:
        if plan is not None:
            plan.cleanup()


if __name__ == "__main__":
    main()
