"""Per-run cgroups: the kernel's own count of a run's CPU, memory and tasks.

When the template may create cgroups in the v1 ``memory``, ``cpuacct`` and ``pids`` hierarchies
(root on a host that mounts them), each run's worker joins a fresh cgroup in all three before it
runs anything, and every process it starts stays in them. Then, unlike a walk over ``/proc``:

- ``cpuacct.usage`` keeps the CPU time of every process that ever ran in the run, including
  children the kernel reaped by itself (a parent that ignores ``SIGCHLD``);
- ``memory.usage_in_bytes`` includes kernel memory charged to the run: pipe and socket buffers,
  page tables, kernel stacks (``memory.limit_in_bytes`` also holds the total at a hard ceiling);
  where the kernel accounts swap, ``memory.memsw`` counts and holds the run's swapped-out pages
  with the rest, which a host short of memory would otherwise move to swap out of every count;
- ``pids.max`` holds the number of tasks (threads included) at a hard ceiling.

Layout: beneath the template's own cgroup in each hierarchy, one parent
``dsh-code-<template pid>-<template start time>`` holding one ``run-<n>`` per run. The template
removes a run's cgroups once it has reaped the run (everything of the run is gone by then). A
janitor process, forked when the parents are made, removes whatever is left (killing any
process still inside) once the template has exited, however it exited; and a template that
starts removes the parents of templates no longer alive (a janitor that was killed too).

Directory descriptors opened before the template's mount namespace turns read-only keep the
cgroup filesystems writable for the template alone: a run sees them read-only (and Landlock
refuses them to the worker altogether).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import signal
import time
from collections.abc import Iterable
from typing import Final

from ._init import task_ceiling

__all__ = ["CROWDED_MEMORY_CGROUPS", "HIERARCHIES", "CgroupMeter", "CgroupPlan", "RunCgroups"]

HIERARCHIES: Final = ("memory", "cpuacct", "pids")
_MOUNT_ROOT: Final = "/sys/fs/cgroup"
_PARENT: Final = re.compile(r"dsh-code-(\d+)-(\d+)\Z")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MEMORY_SLACK: Final = 64 * 2**20
"""Beyond twice ``max_memory_mb`` (processes and scratch), before the kernel's hard ceiling."""
_SWEEP_SECONDS: Final = 5.0
_SWAP_LIMIT: Final = "memory.memsw.limit_in_bytes"
_SWAP_USAGE: Final = "memory.memsw.usage_in_bytes"
_RUN_FD_FLOOR: Final = 512
CROWDED_MEMORY_CGROUPS: Final = 1024
"""How many memory cgroups the machine may hold (live and removed ones the kernel still keeps)
before a run's are emptied of their page cache as they are removed (``_release_page_cache``)."""
_CGROUPS_TABLE: Final = "/proc/cgroups"
_FORCE_EMPTY: Final = "memory.force_empty"


def _start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _own_path(hierarchy: str) -> str | None:
    """This process's cgroup path in the v1 ``hierarchy``, or ``None`` when not mounted."""
    try:
        with open("/proc/self/cgroup") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _number, controllers, path = line.split(":", 2)
        if hierarchy in controllers.split(","):
            return path
    return None


def _write_at(dir_fd: int, name: str, text: str) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read_at(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _close_all_but(kept: list[int]) -> None:
    start = 0
    for fd in sorted(kept):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


def _empty_and_remove(parent_fd: int, name: str, deadline: float) -> bool:
    """Kill every process in the cgroup ``name`` beneath ``parent_fd`` until it is empty (up
    to ``deadline``), then remove it. Whether it is gone."""
    while True:
        try:
            os.rmdir(name, dir_fd=parent_fd)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False  # not ours to remove (another user's, a read-only mount)
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            return False
        try:
            for nested in os.listdir(child):
                if os.path.isdir(f"/proc/self/fd/{child}/{nested}"):
                    _empty_and_remove(child, nested, deadline)
            for pid in _read_at(child, "cgroup.procs").split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(child)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _memory_cgroups() -> int:
    """How many memory cgroups the kernel holds, removed ones it still keeps included (0 when
    it does not say)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(_CGROUPS_TABLE, "rb") as table:
        for line in table:
            fields = line.split()
            if fields[0] == b"memory":
                return int(fields[2])
    return 0


def _sweep_parent(base_fd: int, name: str) -> None:
    """Remove the per-template parent ``name`` beneath ``base_fd`` and every run in it."""
    _empty_and_remove(base_fd, name, time.monotonic() + _SWEEP_SECONDS)


class RunCgroups:
    """One run's cgroup directories (template side): a descriptor per hierarchy."""

    __slots__ = ("fds", "name")

    def __init__(self, name: str, fds: list[int]) -> None:
        self.name = name
        self.fds = fds

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


class CgroupPlan:
    """The template's cgroups: a parent per hierarchy, a ``RunCgroups`` per run."""

    def __init__(self, *, wanted: bool, max_memory_mb: float, max_processes: int) -> None:
        self._wanted = wanted
        self._memory_limit = int(2 * max_memory_mb * 2**20) + _MEMORY_SLACK
        self._task_limit = task_ceiling(max_processes)
        self._base: list[int] = []
        self._parents: list[int] = []
        self._parent_name = ""
        self._runs = 0
        self._pending: dict[int, RunCgroups] = {}
        self._unremoved: list[str] = []
        self._janitor_pipe = -1
        self._janitor = 0
        self._swap_accounted = False
        self.reason = "not requested (CodeSandbox(cgroups=False))"

    @property
    def available(self) -> bool:
        return bool(self._parents)

    def prepare(self) -> None:
        """Make the parents (before any namespace is entered); on failure keep the reason and
        leave the plan unavailable (the runs then use the ``/proc`` walk)."""
        if not self._wanted:
            return
        try:
            self._prepare()
        except OSError as exc:
            self.reason = f"{exc.strerror or exc} ({exc.filename or 'cgroup'})"
            self.close()

    def _prepare(self) -> None:
        for hierarchy in HIERARCHIES:
            path = _own_path(hierarchy)
            if path is None:
                raise OSError(0, f"no v1 {hierarchy} hierarchy", f"{_MOUNT_ROOT}/{hierarchy}")
            self._base.append(os.open(f"{_MOUNT_ROOT}/{hierarchy}{path}", _DIR_FLAGS))
        self._sweep_stale()
        pid = os.getpid()
        self._parent_name = f"dsh-code-{pid}-{_start_time(pid)}"
        for base in self._base:
            os.mkdir(self._parent_name, 0o755, dir_fd=base)
            self._parents.append(os.open(self._parent_name, _DIR_FLAGS, dir_fd=base))
        self._swap_accounted = os.path.exists(f"/proc/self/fd/{self._parents[0]}/{_SWAP_LIMIT}")
        self._start_janitor()

    def _sweep_stale(self) -> None:
        for base in self._base:
            for name in os.listdir(base):
                match = _PARENT.match(name)
                if match is None:
                    continue
                owner, started = int(match[1]), int(match[2])
                if _start_time(owner) != started:
                    _sweep_parent(base, name)

    def _start_janitor(self) -> None:
        """Fork the process that removes the parents once the template has exited."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _close_all_but([read_end, *self._base])
                os.setsid()
                with contextlib.suppress(OSError):
                    while os.read(read_end, 64):
                        pass
                for base in self._base:
                    _sweep_parent(base, self._parent_name)
            finally:
                os._exit(0)
        os.close(read_end)
        self._janitor = pid
        # Held by the template alone (close-on-exec, and closed in every run's child): end of
        # file on it is the template's exit.
        self._janitor_pipe = write_end

    def new_run(self) -> RunCgroups | None:
        """Create the next run's cgroups with their ceilings; ``None`` when unavailable or
        when creating them failed (that run then uses the ``/proc`` walk)."""
        if not self.available:
            return None
        self._runs += 1
        name = f"run-{self._runs}"
        fds: list[int] = []
        try:
            for parent in self._parents:
                os.mkdir(name, 0o755, dir_fd=parent)
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                # Above the numbers a run's child moves its descriptors to (and the grants').
                fds.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _RUN_FD_FLOOR))
                os.close(fd)
            memory, _cpuacct, pids = fds
            _write_at(memory, "memory.limit_in_bytes", str(self._memory_limit))
            if self._swap_accounted:
                # The same ceiling for memory and swap together: at it the kernel's OOM killer
                # acts within the run instead of moving the excess to the host's swap.
                _write_at(memory, _SWAP_LIMIT, str(self._memory_limit))
            _write_at(pids, "pids.max", str(self._task_limit))
        except OSError:
            run = RunCgroups(name, fds)
            run.close()
            self._remove(name)
            return None
        return RunCgroups(name, fds)

    def started(self, pid: int, run: RunCgroups) -> None:
        """The run's child is ``pid``: close the template's descriptors, remember the names."""
        run.close()
        self._pending[pid] = run

    def discard(self, run: RunCgroups) -> None:
        """A run that never started: close and remove its cgroups."""
        run.close()
        self._remove(run.name)

    def ended(self, pid: int) -> None:
        """The template reaped ``pid``: remove its run's cgroups (and retry earlier ones)."""
        run = self._pending.pop(pid, None)
        self.retry()
        if run is not None:
            self._remove(run.name)

    @property
    def unremoved(self) -> bool:
        """Whether a reaped run's cgroups could not be removed yet (still populated)."""
        return bool(self._unremoved)

    def retry(self) -> None:
        """Try again to remove the cgroups that were still populated: the kernel detaches a
        killed run's last processes a little after its init is reaped, and no later reap may
        come to retry them (an idle pool)."""
        retry, self._unremoved = self._unremoved, []
        for name in retry:
            self._remove(name)

    def _remove(self, name: str) -> None:
        self._release_page_cache((name,))
        for parent in self._parents:
            try:
                os.rmdir(name, dir_fd=parent)
            except FileNotFoundError:
                pass
            except OSError:
                # Still populated (a run whose processes outlived its reaped child); the next
                # reap retries, and the janitor removes it at the end in any case.
                if name not in self._unremoved:
                    self._unremoved.append(name)

    def _release_page_cache(self, names: Iterable[str]) -> None:
        """On a machine crowded with memory cgroups, reclaim the page cache charged to the
        memory cgroups of the runs ``names`` before they are removed. The kernel keeps a
        removed memory cgroup, offline, for as long as a page charged to it stays cached: a run
        that read one page of a file nothing had cached (the Python installation's, ``/usr``'s,
        a ``read`` grant's) left its cgroup behind, kernel memory no budget counts, and the
        machine has room for 65,535 memory cgroups in all (then no one, ``systemd`` included,
        can make one). Below the crowding mark those pages stay cached for later runs (a
        package the first run imported)."""
        if not self._parents or _memory_cgroups() <= CROWDED_MEMORY_CGROUPS:
            return
        for name in names:
            with contextlib.suppress(OSError, ValueError):
                memory = os.open(name, _DIR_FLAGS, dir_fd=self._parents[0])
                try:
                    # Most runs leave no page cache: the reclaim (which first drains every
                    # CPU's page lists) only for those that do.
                    for line in _read_at(memory, "memory.stat").splitlines():
                        key, _space, number = line.partition(b" ")
                        if key == b"cache" and int(number) > 0:
                            _write_at(memory, _FORCE_EMPTY, "0")
                            break
                finally:
                    os.close(memory)

    def close(self) -> None:
        """The template is exiting: remove what it can now, then let the janitor sweep the
        rest and wait for it."""
        for index, (parent, base) in enumerate(zip(self._parents, self._base, strict=False)):
            runs = [
                name
                for name in os.listdir(parent)
                if os.path.isdir(f"/proc/self/fd/{parent}/{name}")
            ]
            if index == 0:
                self._release_page_cache(runs)  # the pre-forked workers' that never ran
            for name in runs:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=parent)
            with contextlib.suppress(OSError):
                os.rmdir(self._parent_name, dir_fd=base)
        for fd in (*self._parents, *self._base):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._parents = []
        self._base = []
        if self._janitor_pipe >= 0:
            os.close(self._janitor_pipe)
            self._janitor_pipe = -1
        if self._janitor:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._janitor, 0)
            self._janitor = 0


class CgroupMeter:
    """The init's view of its run's cgroups (``fds``: memory, cpuacct, pids directories).

    The worker joins them (``join``) right after it is forked; the init, which stays outside
    (its own sampling is not the program's work, and the memory ceiling's OOM killer must never
    pick it), reads the counters every tick.
    """

    def __init__(self, fds: list[int], scratch: int) -> None:
        self._dirs = list(fds)
        memory, cpuacct, _pids = fds
        self._scratch = scratch
        try:  # memory and swap together, where the kernel accounts swap
            self._usage = os.open(_SWAP_USAGE, os.O_RDONLY | os.O_CLOEXEC, dir_fd=memory)
        except FileNotFoundError:
            self._usage = os.open(
                "memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC, dir_fd=memory
            )
        self._stat = os.open("memory.stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=memory)
        self._oom = os.open("memory.oom_control", os.O_RDONLY | os.O_CLOEXEC, dir_fd=memory)
        self._cpu = os.open("cpuacct.usage", os.O_RDONLY | os.O_CLOEXEC, dir_fd=cpuacct)

    def _own_fds(self) -> list[int]:
        return [self._usage, self._stat, self._oom, self._cpu]

    def join(self) -> None:
        """In the freshly forked worker: join every hierarchy, close the meter's descriptors."""
        try:
            for fd in self._dirs:
                _write_at(fd, "cgroup.procs", "0")
        finally:
            for fd in (*self._dirs, *self._own_fds()):
                os.close(fd)

    def close_dirs(self) -> None:
        """In the init, once the worker is forked: the directories are no longer needed."""
        for fd in self._dirs:
            os.close(fd)
        self._dirs = []

    def usage(self) -> tuple[float, int, int]:
        """(CPU seconds of every process the run ever had, memory bytes charged to the run,
        swapped out or not, but reclaimable file cache and the scratch tmpfs, live processes
        but the init)."""
        cpu = int(os.pread(self._cpu, 64, 0)) / 1e9
        charged = int(os.pread(self._usage, 64, 0))
        stat = os.pread(self._stat, 1 << 14, 0)
        for line in stat.splitlines():
            key, _space, number = line.partition(b" ")
            if key in (b"total_active_file", b"total_inactive_file"):
                charged -= int(number)
        scratch = os.fstatvfs(self._scratch)  # its root's descriptor: no path to redirect
        charged -= (scratch.f_blocks - scratch.f_bfree) * scratch.f_frsize
        count = sum(1 for name in os.listdir("/proc") if name.isdigit()) - 1
        return cpu, charged, count

    def over_task_ceiling(self) -> bool:
        """Never seen here: ``pids.max`` holds the run's tasks in the kernel."""
        return False

    def oom_killed(self) -> bool:
        """Whether the kernel's memory ceiling has killed a process of the run."""
        for line in os.pread(self._oom, 4096, 0).splitlines():
            key, _space, number = line.partition(b" ")
            if key == b"oom_kill":
                return int(number) > 0
        return False
