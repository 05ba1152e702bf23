"""Pre-forked workers: a few runs' processes already spawned (and, under the sandbox, already
confined), each waiting for its ``Boot`` frame.

A slot is one spawn request already answered by the template: the host's ends of the six pipes
and the template that took the request. ``take()`` hands out a live slot (a slot whose status
pipe shows anything beyond the pid report, or end of file, is stale: its template died or its
worker failed to start, so it is closed and skipped) and asks the template for a replacement,
which the template forks in the background while the run proceeds. Every worker serves exactly
one run and then exits, so each run starts from the same clean state. Slots are plain
descriptors, not bound to any event loop; the pool is thread-safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
import time
from typing import Final

from ._run_status import PidReport, take_report
from ._template_host import FORK_GUARD, TemplateHandle, close_host_fds, keep_host_fds

__all__ = ["Slot", "WorkerPool", "open_slot"]

_PID_REPORT_BYTES: Final = 5
_REFILL_DELAY_SECONDS: Final = 0.003


class Slot:
    """One spawned worker: host-side descriptors, its template, status bytes already read."""

    __slots__ = ("delivered", "fds", "status", "template")

    def __init__(self, fds: dict[str, int], template: subprocess.Popen[bytes]) -> None:
        self.fds = fds
        self.template = template
        self.status = b""
        self.delivered = 0  # bytes ``write_early`` put in the worker's channel

    def alive(self) -> bool:
        """Whether its worker is still waiting (see ``_alive``)."""
        return _alive(self)

    def write_early(self, data: bytes) -> int:
        """Write what the worker's channel takes of ``data`` now, without waiting; return how
        many bytes that was (0 when the write failed: the run's own writer then tries, and its
        failure is the run's)."""
        try:
            written = os.write(self.fds["to_worker"], data)
        except OSError:
            return 0
        self.delivered += written
        return written

    def end(self, *, kill_group: bool) -> None:
        """End the worker of a run it will never serve, which may have its program already:
        ``kill_group`` (process isolation) kills its process group first, since a worker busy
        compiling or running reads no end of file (a sandboxed worker's init watches the
        channel's hang-up and ends the run's namespace itself); then ``close()``."""
        if kill_group and self.fds:
            _alive(self)  # reads the pid report if it has come since
            report = take_report(bytearray(self.status)) if self.status else None
            if isinstance(report, PidReport):
                with contextlib.suppress(OSError):
                    os.killpg(report.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        """Close the host's descriptors (an idle worker then reads end of file and exits)."""
        close_host_fds(self.fds.values())
        self.fds = {}


def open_slot(template: TemplateHandle) -> Slot:
    """Create the six pipes and have ``template`` spawn a worker on them; raises ``OSError``.
    A fork of the host waits for this (``FORK_GUARD``): a child would otherwise keep copies of
    pipes it does not know of, and the worker would never see the host close them."""
    with FORK_GUARD:
        pipes: list[tuple[int, int]] = []
        try:
            for _ in range(6):
                pipes.append(_pipe())
        except BaseException:
            for pair in pipes:
                for fd in pair:
                    os.close(fd)
            raise
        (to_worker_r, to_worker_w), (from_worker_r, from_worker_w) = pipes[0], pipes[1]
        (out_r, out_w), (err_r, err_w), (status_r, status_w) = pipes[2], pipes[3], pipes[4]
        where_r, where_w = pipes[5]
        worker_ends = [to_worker_r, from_worker_w, out_w, err_w, status_w, where_w]
        host = {
            "to_worker": to_worker_w,
            "from_worker": from_worker_r,
            "out": out_r,
            "err": err_r,
            "status": status_r,
            # Read only as a budget runs out (``RunProcess._where_pipe``), never watched.
            "where": where_r,
        }
        try:
            process = template.spawn(worker_ends)
        except BaseException:
            for fd in host.values():
                os.close(fd)
            raise
        finally:
            for fd in worker_ends:
                os.close(fd)
        keep_host_fds(host.values())
    return Slot(host, process)


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are non-inheritable, as every Python descriptor, and non-blocking, as
    the host reads and writes its own: with ``pipe2`` one system call, not one per end more.
    The template makes the worker's ends blocking again as it takes them."""
    if _PIPE2:
        return os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    ends = os.pipe()
    for fd in ends:
        # One ``fcntl`` each, not ``os.set_blocking``'s two (it reads the flags first): a
        # fresh pipe end has no status flag to keep (the access mode is not one).
        fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)
    return ends


_PIPE2: Final = hasattr(os, "pipe2")  # not on macOS


def _alive(slot: Slot) -> bool:
    """Read what the status pipe holds; a live idle worker has sent its pid report only, and
    is live only while its template is: a template killed before it forked the worker leaves
    a slot that would otherwise look idle for ever (its status pipe may never reach end of
    file), and one killed after it leaves a worker whose status pipe is not closed yet (a
    sandboxed one is dying with it; its run could not tell whether it read its program
    first)."""
    fd = slot.fds["status"]
    try:
        while True:
            data = os.read(fd, 4096)
            if not data:
                return False
            slot.status += data
    except BlockingIOError:
        pass
    except OSError:
        return False
    return len(slot.status) <= _PID_REPORT_BYTES and slot.template.poll() is None


class WorkerPool:
    """Up to ``size`` idle slots of one template; refilled after every run."""

    def __init__(self, template: TemplateHandle, size: int) -> None:
        self._template = template
        self._size = size
        self._idle: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        # Released when a fill is wanted, taken back by the pool's thread as it starts one: a
        # lock used as an event, whose release (one C call) is all a run's end costs, where an
        # ``Event.set()`` ran a dozen Python calls on the run's loop.
        self._wanted = threading.Lock()
        self._wanted.acquire()
        self._filler: threading.Thread | None = None

    @property
    def idle(self) -> int:
        """How many slots are idle (live or not: ``take`` tells)."""
        with self._lock:
            return len(self._idle)

    def take(self) -> Slot | None:
        """A live idle slot, or ``None`` when none is ready (the caller spawns directly)."""
        with self._lock:
            while self._idle:
                slot = self._idle.pop(0)
                if _alive(slot):
                    return slot
                slot.close()
            return None

    def fill(self) -> None:
        """Spawn slots until ``size`` are idle (quietly stops when the template cannot)."""
        with self._lock:
            stale = [slot for slot in self._idle if not _alive(slot)]
            for slot in stale:
                self._idle.remove(slot)
                slot.close()
        while True:
            with self._lock:
                if self._closed or len(self._idle) >= self._size:
                    return
            try:
                slot = open_slot(self._template)
            except OSError:
                return
            with self._lock:
                if self._closed:
                    slot.close()
                    return
                self._idle.append(slot)

    def fill_soon(self) -> None:
        """Have the pool's own thread ``fill()``. The spawn request wakes the template, which
        forks at once: sent from the run's loop it held that loop up (about half a millisecond
        per run, measured end to end) before the caller got its result."""
        with self._lock:
            if self._closed:
                return
            if self._filler is None:
                self._filler = threading.Thread(
                    target=self._fill_when_wanted, name="dsh-code-worker-pool", daemon=True
                )
                self._filler.start()
            self._want()

    def _want(self) -> None:
        """Wake the pool's thread (under ``_lock``, which keeps two releases apart)."""
        if self._wanted.locked():  # else released already: a fill is wanted
            self._wanted.release()

    def _fill_when_wanted(self) -> None:
        while True:
            self._wanted.acquire()
            # Let the run that asked deliver its result first: the request and the fork it
            # starts compete with the run's last steps for the GIL and for the machine's
            # cores (an empty run's median was 10-25% longer on the project's 2-core machine,
            # measured in turns). A run that comes sooner takes the pool's other worker.
            time.sleep(_REFILL_DELAY_SECONDS)
            with self._lock:
                if self._closed:
                    return
            self.fill()

    def close(self) -> None:
        """Close every idle slot and stop the pool's thread; later fills do nothing."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            filler, self._filler = self._filler, None
            self._want()
        if filler is not None and filler is not threading.current_thread():
            filler.join(timeout=5)
        for slot in idle:
            slot.close()
