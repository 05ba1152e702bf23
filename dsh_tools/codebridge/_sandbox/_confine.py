"""Confining one run: the template's shared preparation, the run's namespaces, the worker's
Landlock domain, capabilities and seccomp filter.

``SandboxPlan.prepare(settings)`` runs once in the template process, before any fork: it moves
the template into an empty network namespace (first into a user namespace when it is not root,
so that it may), checks the kernel features the sandbox needs, opens the granted paths and
creates the scratch mount point. Nothing of this can fail later at run time, so a kernel that
lacks a feature is reported with its name on every run instead of a run going unconfined.

``SandboxPlan.fork_run()`` forks, in the template, the child that becomes the init of the run's
new PID namespace (as root; otherwise a supervising child creates the namespace and forks the
init), and ``start_init`` runs in it: the init (``_init``) creates the run's mount, IPC and UTS
namespaces, mounts a private ``/proc`` and a size-limited tmpfs on the scratch mount point, and
forks the worker. The worker makes the scratch directory its working directory,
drops every capability, sets no-new-privileges, restricts itself with Landlock to the granted
paths and installs the seccomp filter before it reads its program.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import resource
import signal
import stat
import struct
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from . import _kernel
from ._cgroup import CgroupMeter, CgroupPlan, RunCgroups
from ._host_code import ENTRIES, mapped_code
from ._init import Meter, ProcMeter, open_locks, run_init, task_ceiling
from ._policy import lies_beneath
from ._seccomp import seccomp_program, seccomp_supported

__all__ = [
    "MIN_LANDLOCK_ABI",
    "RUN_DOMAINNAME",
    "RUN_HOSTNAME",
    "SandboxPlan",
    "SandboxUnavailable",
]

MIN_LANDLOCK_ABI: Final = 3
"""Landlock ABI 3 (Linux 6.2) is the first that also refuses ``truncate`` outside the grants."""
_OPT_OUT: Final = 'set ToolsConfig(code_isolation="process") to run Code Mode without the sandbox'
_SYSTEM_READ: Final = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
)
_SYSTEM_WRITE: Final = ("/dev/null",)
RUN_HOSTNAME: Final = "sandbox"
"""The host name a run sees (``socket.gethostname()``, ``os.uname().nodename``)."""
RUN_DOMAINNAME: Final = "(none)"
"""The NIS domain name a run sees (``/proc/sys/kernel/domainname``): the kernel's own for none."""
_RUN_NAMESPACES: Final = _kernel.CLONE_NEWNS | _kernel.CLONE_NEWIPC | _kernel.CLONE_NEWUTS
"""Unshared by each run's init; its PID namespace comes from the template (``fork_run``)."""
_FILE_RIGHTS: Final = _kernel.FILE_RIGHTS
_GRANT_FD_FLOOR: Final = 256
_READ_RIGHTS: Final = _kernel.FS_READ_FILE | _kernel.FS_READ_DIR | _kernel.FS_EXECUTE
_RUNTIME_TASK_SLACK: Final = 256
"""Tasks beyond the runs' own ceilings: the template's, and the idle and prepared workers'."""
_PROC_ALWAYS_MASKED: Final = (
    "fs",
    "keys",
    "key-users",
    "kpagecgroup",
    "kpagecount",
    "kpageflags",
    "locks",
    "pagetypeinfo",
    "sched_debug",
    "slabinfo",
    "sys/vm/stat_refresh",
    "timer_list",
    "tty/driver",
    "vmallocinfo",
)
"""Entries of ``/proc`` masked whatever their mode (``_proc_masks``): ``keys`` and
``key-users`` list the keyrings the worker's user may view (the harness user's, or root's),
descriptions included, which no program needs (the filter refuses the keyring calls);
``sys/vm/stat_refresh`` (the one sysctl below ``sys``, which is not scanned, whose reading
does something) runs work on every CPU of the machine each time root reads it, in the kernel's
own threads, outside every budget of the run (eight processes reading it made the kernel spend
as much CPU again as the run); each reading of ``locks`` takes the kernel's global lock of
every file lock for writing while it walks every lock of the machine (four processes reading
it in a loop made the host's own lock calls 28 times slower; the init counts the run's locks
through a descriptor it opened before the mask); ``fs`` holds each filesystem's statistics, and
each reading of ``ext4/<disk>/es_shrinker_info`` holds that filesystem's spinlock of its extent
caches while it walks every cached inode of the disk (300,000, 47 ms a reading: two processes
reading it in a loop made the host's creation of small files six times slower), and of
``ext4/<disk>/mb_groups`` reads the allocation bitmaps of the whole disk; the others are the
owner-only ones, named too in case a container runtime has already masked them in the
template's view (a run's fresh ``/proc`` would show them again)."""
_PROC_NOT_SCANNED: Final = ("self", "thread-self", "sys", "net")
"""Entries of ``/proc`` not scanned for owner-only files: the run's own processes, the sysctls
(whose owner-only files hold nothing of the host's: ASLR bits, the run's own network
namespace's keys) and the run's own network namespace."""


class SandboxUnavailable(Exception):
    """The kernel lacks what the sandbox needs; the message names it and how to opt out."""


def _unavailable(feature: str, detail: object) -> SandboxUnavailable:
    return SandboxUnavailable(f"code sandbox unavailable: {feature} ({detail}); {_OPT_OUT}")


def _write_file(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


_SCRATCH_REPLACED_EXIT: Final = 75
"""How a run's init exits when its scratch mount point was replaced or removed: the template,
which reaps it, then makes a fresh one for the runs after it."""


class _ScratchReplaced(Exception):
    """The scratch mount point is no longer the directory the template made."""

    def __init__(self, path: str, detail: object) -> None:
        super().__init__(
            f"code sandbox: the scratch mount point {path!r} is not the directory the runtime "
            f"made ({detail}): something that may write where it lies replaced or removed it "
            "(a run of another harness whose write grant holds this one's temporary directory, "
            "say); the runtime makes a fresh one for its next run: keep TMPDIR out of every "
            "write grant"
        )


class _Grant:
    __slots__ = ("fd", "rights")

    def __init__(self, fd: int, rights: int) -> None:
        self.fd = fd
        self.rights = rights


class SandboxPlan:
    """The template's sandbox: prepared once, then applied to every run it forks."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.compute_ms = float(settings["compute_ms"])
        self.max_memory_mb = float(settings["max_memory_mb"])
        self.max_wall_ms = float(settings.get("max_wall_ms", math.inf))
        self.max_processes = int(settings["max_processes"])
        self.max_open_files = int(settings.get("max_open_files", 256))
        self.max_parallel_runs = int(settings.get("max_parallel_runs", 1))
        self.env = {str(k): str(v) for k, v in dict(settings.get("env") or {}).items()}
        self._read = [str(path) for path in settings.get("read") or ()]
        self._write = [str(path) for path in settings.get("write") or ()]
        self._given_scratch = str(settings.get("scratch") or "")
        self._host_code = [
            (str(path), whole if isinstance(whole, bool) else str(whole), str(what))
            for path, whole, what in settings.get("host_code") or ()
        ]
        self.error: str | None = None
        self._template = 0
        self._own_pid_namespace = -1
        self._direct = False
        self.scratch = ""
        self._abi = 0
        self._grants: list[_Grant] = []
        self._seccomp: list[_kernel.SockFilter] = []
        self._seccomp_without_cgroups: list[_kernel.SockFilter] = []
        self._cgroups = CgroupPlan(
            wanted=bool(settings.get("cgroups", True)),
            max_memory_mb=self.max_memory_mb,
            max_processes=self.max_processes,
        )
        self._run_cgroups: RunCgroups | None = None
        self._scratch_parent = -1
        self._scratch_identity = (-1, -1)
        self._proc_masks: list[tuple[str, bool]] = []

    def prepare(self) -> None:
        """Enter the shared namespaces and check the kernel; on failure keep the message."""
        try:
            self._prepare()
        except SandboxUnavailable as exc:
            self.error = str(exc)

    def _prepare(self) -> None:
        if not sys.platform.startswith("linux"):
            raise _unavailable("Linux", sys.platform)
        try:
            self._abi = _kernel.landlock_abi()
        except (OSError, AttributeError) as exc:
            raise _unavailable("Landlock", exc) from None
        if self._abi < MIN_LANDLOCK_ABI:
            found = f"ABI {self._abi}" if self._abi else "not enabled in this kernel"
            raise _unavailable(f"Landlock ABI {MIN_LANDLOCK_ABI} or later", found)
        if not seccomp_supported():
            raise _unavailable("seccomp filter for this architecture", os.uname().machine)
        self._seccomp = seccomp_program(guard_child_reaping=False, refuse_new_sessions=True)
        self._seccomp_without_cgroups = seccomp_program(
            guard_child_reaping=True, refuse_hidden_memory=True, refuse_new_sessions=True
        )
        # Inherited across fork and exec: a host whose memory KSM may merge (systemd's
        # MemoryKSM=yes) would hand that to every run, and merging is a side channel.
        _kernel.leave_memory_merging()
        # Inherited too: a harness under `ionice -c1` would hand every run the disk first.
        _kernel.leave_real_time_io()
        # Before any namespace: the cgroup filesystems stay writable through the descriptors.
        self._cgroups.prepare()
        uid, gid = os.geteuid(), os.getegid()
        self._direct = uid == 0
        if uid != 0:
            try:
                _kernel.unshare(_kernel.CLONE_NEWUSER)
                _write_file("/proc/self/setgroups", "deny")
                _write_file("/proc/self/uid_map", f"0 {uid} 1")
                _write_file("/proc/self/gid_map", f"0 {gid} 1")
            except OSError as exc:
                raise _unavailable("user namespaces", exc) from None
        try:
            _kernel.unshare(_kernel.CLONE_NEWNET)
        except OSError as exc:
            raise _unavailable("network namespaces", exc) from None
        self._grant_python()
        for path in _SYSTEM_READ:
            self._grant(path, _READ_RIGHTS, required=False)
        for path in _SYSTEM_WRITE:
            self._grant(path, _kernel.fs_rights(self._abi), required=False)
        _refuse_links_into_write_grants(self._read, self._write)
        for path in self._read:
            self._grant(path, _READ_RIGHTS, required=True)
        _refuse_host_code(self._write)
        _refuse_host_search_path(self._write, self._host_code)
        temporary = os.path.dirname(self._given_scratch) if self._given_scratch else ""
        _refuse_scratch_homes(self._write, temporary or tempfile.gettempdir())
        for path in self._write:
            self._grant(path, _kernel.fs_rights(self._abi), required=True)
        self.scratch = self._given_scratch or tempfile.mkdtemp(prefix="dsh-code-scratch-")
        # Opened before the read-only view, so that the template may still remove the scratch
        # mount point when it exits (also when the host that made it was killed); a run's
        # child closes it with every descriptor it does not keep.
        self._scratch_parent = os.open(
            os.path.dirname(self.scratch), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        )
        # Each run's init mounts its scratch tmpfs on this very directory or on nothing: the
        # temporary directory it lies in may be writable to a run of another runtime (one whose
        # write grant holds TMPDIR), which could put a symbolic link in its place.
        self._scratch_identity = self._identity(os.path.basename(self.scratch))
        self._read_only_host()
        self._proc_masks = _proc_masks()
        self._template = os.getpid()
        try:
            namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _unavailable("PID namespaces", exc) from None
        self._own_pid_namespace = fcntl.fcntl(namespace, fcntl.F_DUPFD_CLOEXEC, _GRANT_FD_FLOOR)
        os.close(namespace)

    def _read_only_host(self) -> None:
        """Give the template (and so every run) its own view of the host's mounts, all of them
        read-only but the granted ``write`` paths. Landlock does not cover ``chmod``,
        ``chown``, ``utime``, ``setxattr`` or inode flags, and the worker's user owns the host's
        files (root, or the user a user namespace maps): a read-only mount refuses them all."""
        try:
            _kernel.unshare(_kernel.CLONE_NEWNS)
            # Private first, so that nothing mounted here propagates back to the host.
            _kernel.mount("none", "/", None, _kernel.MS_REC | _kernel.MS_PRIVATE, None)
            for path in self._write:
                _kernel.mount(path, path, None, _kernel.MS_BIND | _kernel.MS_REC, None)
            readonly = _kernel.MOUNT_ATTR_RDONLY
            _kernel.mount_setattr("/", set_flags=readonly, clear_flags=0, recursive=True)
            for path in self._write:
                _kernel.mount_setattr(path, set_flags=0, clear_flags=readonly, recursive=False)
        except OSError as exc:
            raise _unavailable("a read-only mount namespace", exc) from None

    def _grant_python(self) -> None:
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        for path in sorted(prefixes):
            self._grant(path, _READ_RIGHTS, required=False)

    def _grant(self, path: str, rights: int, *, required: bool) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            if required:
                # Not a kernel feature: the grant itself is wrong, and turning the sandbox off
                # would be the wrong advice.
                raise SandboxUnavailable(
                    f"code sandbox: the granted path {path!r} cannot be opened ({exc.strerror}); "
                    "fix or remove it in CodeSandbox(read=..., write=...)"
                ) from None
            return
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= _FILE_RIGHTS
        # Above the numbers a run's descriptors are moved to, and kept by the template's child.
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _GRANT_FD_FLOOR)
        os.close(fd)
        self._grants.append(_Grant(high, rights))

    def kept_fds(self) -> list[int]:
        """The descriptors a run's supervisor must keep open (the granted paths and, during a
        spawn, the run's cgroup directories)."""
        run = self._run_cgroups
        return [grant.fd for grant in self._grants] + (run.fds if run is not None else [])

    @property
    def cgroups(self) -> str:
        """Which mechanism measures the runs: ``"cgroup-v1"``, or why ``/proc`` does."""
        return "cgroup-v1" if self._cgroups.available else f"proc ({self._cgroups.reason})"

    @property
    def template_reports_pid(self) -> bool:
        """Whether the template reports the pid of the run's child (as root: the init);
        otherwise the supervising child reports its init's pid itself."""
        return self._direct

    def ended(self, pid: int, wait_status: int) -> None:
        """The template reaped the run's child ``pid`` (which ended with ``wait_status``): its
        cgroups can go, and a scratch mount point its init found replaced is made afresh."""
        self._cgroups.ended(pid)
        if os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == _SCRATCH_REPLACED_EXIT:
            with contextlib.suppress(OSError):
                self._remake_scratch()

    def _identity(self, name: str) -> tuple[int, int]:
        made = os.stat(name, dir_fd=self._scratch_parent, follow_symlinks=False)
        return made.st_dev, made.st_ino

    def _remake_scratch(self) -> None:
        """Make a fresh scratch mount point beside the one a run of another runtime replaced
        or removed (through the descriptor of the temporary directory, writable outside the
        template's read-only view), named like it (after the host, so that a later host
        removes it if both were killed), and mount the next runs' scratch there. Whatever is
        in the old one's place is left alone, but an empty directory."""
        if self._scratch_parent < 0 or self._scratch_identity == (-1, -1):
            return
        old = os.path.basename(self.scratch)
        with contextlib.suppress(OSError):
            if self._identity(old) == self._scratch_identity:
                return  # made afresh already, for an earlier run that found the old one gone
        while True:
            name = f"{old.rsplit('-', 1)[0]}-{os.urandom(6).hex()}"
            try:
                os.mkdir(name, 0o700, dir_fd=self._scratch_parent)
                break
            except FileExistsError:
                continue
        self._scratch_identity = self._identity(name)
        self.scratch = os.path.join(os.path.dirname(self.scratch), name)
        with contextlib.suppress(OSError):
            os.rmdir(old, dir_fd=self._scratch_parent)

    @property
    def cleanup_pending(self) -> bool:
        """Whether a reaped run's cgroups still wait to be removed (``retry_cleanup``)."""
        return self._cgroups.unremoved

    def retry_cleanup(self) -> None:
        """Try again to remove reaped runs' cgroups that were still populated."""
        self._cgroups.retry()

    def unavailable(self, feature: str, detail: object) -> str:
        """The failure message for a missing ``feature`` (names the opt-out)."""
        return str(_unavailable(feature, detail))

    def cleanup(self) -> None:
        """Remove the scratch mount point (the template is exiting; every run is over). The
        host removes it too when it can, but a host that was killed cannot."""
        self._cgroups.close()
        if self._scratch_parent >= 0:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.basename(self.scratch), dir_fd=self._scratch_parent)
            os.close(self._scratch_parent)
            self._scratch_parent = -1

    # -- per run (in the template's child) ---------------------------------------------------

    def fork_run(self) -> int:
        """Fork the child that becomes (as root) or starts (otherwise) the run's init, in the
        template; ``os.fork()``'s result. Killing that child ends the whole run.

        As root the template enters a new PID namespace for this one child and returns to its
        own at once, so the child is the namespace's init. Without that right (a user
        namespace cannot return to its parent's PID namespace) the child supervises: it
        creates the namespace and forks the init, which dies with it (parent-death signal).
        Raises ``OSError`` when the namespace cannot be made.

        The run's cgroups (when this host allows them) are made first; the child keeps their
        directories for the worker to join.
        """
        run = self._run_cgroups = self._cgroups.new_run()
        try:
            pid = self._fork_child()
        except BaseException:
            if run is not None:
                self._cgroups.discard(run)
            self._run_cgroups = None
            raise
        if pid != 0:
            self._run_cgroups = None
            if run is not None:
                self._cgroups.started(pid, run)
        return pid

    def _fork_child(self) -> int:
        if not self._direct:
            return os.fork()
        _kernel.unshare(_kernel.CLONE_NEWPID)
        try:
            return os.fork()
        finally:
            if os.getpid() == self._template:
                _kernel.setns(self._own_pid_namespace, _kernel.CLONE_NEWPID)

    def start_init(self, status_fd: int, start_worker: Callable[[int], NoReturn]) -> NoReturn:
        """In ``fork_run``'s child: be (or start) the run's init.

        Descriptors 0-4 and 6 (``WHERE_FD``) are the worker's and ``status_fd`` (5) the status
        pipe; nothing else is open but the grants. The worker starts with
        ``start_worker(status_fd)``: by then that descriptor is the worker's end of the init's
        notice socket (``_init.run_init``), no longer the status pipe. The init exits once the
        worker has exited or a budget is exhausted, which ends the namespace and every process
        in it.
        """
        if self._direct:
            self._init(status_fd, start_worker)
        try:
            _kernel.set_parent_death_signal(signal.SIGKILL)
            if os.getppid() != self._template:
                os._exit(0)  # the template is already gone
            _kernel.unshare(_kernel.CLONE_NEWPID)
            init = os.fork()
        except OSError as exc:
            _report_error(status_fd, str(_unavailable("PID namespaces", exc)))
            os._exit(71)
        if init == 0:
            self._init(status_fd, start_worker)
        # The host kills the init, not this process: the init exits only once every process
        # of its namespace is gone, so this process's exit (the template's exit report) then
        # means the whole run is gone.
        with contextlib.suppress(OSError):
            os.write(status_fd, b"P" + struct.pack(">i", init))
        os.closerange(0, 1 << 16)
        status = 0
        while True:
            try:
                _pid, status = os.waitpid(init, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                pass
            break
        _exit_as(status)

    def _init(self, status_fd: int, start_worker: Callable[[int], NoReturn]) -> NoReturn:
        try:
            # The template is outside the namespace (getppid() is 0 here), so no re-check: it
            # only dies when killed, and a worker left behind then reads end of file and exits.
            _kernel.set_parent_death_signal(signal.SIGKILL)
            _kernel.unshare(_RUN_NAMESPACES)
            # The new UTS namespace starts as a copy of the host's: its name and its NIS domain
            # name (a machine's, a site's, a customer's) are no business of the program's.
            _kernel.sethostname(RUN_HOSTNAME)
            _kernel.setdomainname(RUN_DOMAINNAME)
            flags = _kernel.MS_NOSUID | _kernel.MS_NODEV | _kernel.MS_NOEXEC
            _kernel.mount("none", "/", None, _kernel.MS_REC | _kernel.MS_PRIVATE, None)
            _kernel.mount("proc", "/proc", "proc", flags, None)
            locks = open_locks()  # before the mask covers it
            self._mask_proc()
            _most_killable()
            scratch = self._mount_scratch()
            run = self._run_cgroups
            meter: Meter = (
                ProcMeter(task_ceiling(self.max_processes))
                if run is None
                else CgroupMeter(run.fds, scratch)
            )
        except _ScratchReplaced as exc:
            _report_error(status_fd, str(exc))
            os._exit(_SCRATCH_REPLACED_EXIT)
        except OSError as exc:
            _report_error(status_fd, str(_unavailable("the run's namespaces and mounts", exc)))
            os._exit(0)
        seccomp = self._seccomp if run is not None else self._seccomp_without_cgroups

        def worker(notice: int) -> NoReturn:
            try:
                # A session of the run's own, apart from its init's: where the kernel
                # schedules by session (autogroups, for the processes of the host's root
                # ``cpu`` cgroup, which a run's stay in), the run is then one entity of the
                # scheduler, and the init another, which a run of thousands of spinning
                # processes would otherwise starve of the CPU it measures them with (the
                # filter keeps the run to this session). A ``cpu`` cgroup per run would do the
                # same where autogroups are off, but made every run a millisecond slower.
                os.setsid()
                meter.join()
                self._confine(status_fd, seccomp, scratch)
                # The status pipe's number, free now: the worker's descriptors stay 0-6.
                os.dup2(notice, status_fd, inheritable=False)
                os.close(notice)
            except OSError as exc:
                _report_error(status_fd, str(_unavailable("confining the worker", exc)))
                os._exit(71)
            start_worker(status_fd)

        run_init(
            worker,
            status_fd,
            self.compute_ms,
            self.max_memory_mb,
            self.max_processes,
            meter,
            self.max_wall_ms,
            locks,
        )

    def _mount_scratch(self) -> int:
        """Mount the run's scratch tmpfs on the mount point the template made (in the init's
        own mount namespace) and return a descriptor of its root, which the worker works in
        and is granted. Neither is looked up by path after the check: a mount point replaced
        by a symbolic link (to ``/proc/self/cwd``, say, the harness's working directory) would
        otherwise have the tmpfs mounted over one place and the worker granted another."""
        try:
            target = os.open(
                self.scratch, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except OSError as exc:
            raise _ScratchReplaced(self.scratch, exc.strerror) from None
        try:
            found = os.fstat(target)
            if (found.st_dev, found.st_ino) != self._scratch_identity:
                raise _ScratchReplaced(self.scratch, "another directory is in its place")
            size = max(int(self.max_memory_mb), 1)
            options = {"size": f"{size}m", "nr_inodes": "16384", "mode": "0700"}
            flags = _kernel.MOUNT_ATTR_NOSUID | _kernel.MOUNT_ATTR_NODEV
            return _kernel.mount_new_fs("tmpfs", options, flags, target)
        finally:
            os.close(target)

    def _mask_proc(self) -> None:
        """Cover the run's ``/proc`` files that only their owner may read (``_proc_masks``)
        with ``/dev/null``, and such directories with an empty read-only tmpfs. Each is best
        effort: an entry this kernel will not let the init cover stays as readable as it was
        before these masks existed, where failing would fail every run of such a host."""
        for path, directory in self._proc_masks:
            with contextlib.suppress(OSError):
                if directory:
                    flags = _kernel.MS_RDONLY | _kernel.MS_NOSUID | _kernel.MS_NODEV
                    flags |= _kernel.MS_NOEXEC
                    _kernel.mount("none", path, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555")
                else:
                    _kernel.mount("/dev/null", path, None, _kernel.MS_BIND, None)

    def _confine(self, status_fd: int, seccomp: list[_kernel.SockFilter], scratch: int) -> None:
        os.fchdir(scratch)
        ruleset = _kernel.landlock_create_ruleset(self._abi)
        _kernel.landlock_add_path(ruleset, scratch, _kernel.fs_rights(self._abi))
        proc = os.open("/proc", os.O_PATH | os.O_CLOEXEC)  # the namespace's own /proc
        _kernel.landlock_add_path(ruleset, proc, _READ_RIGHTS)
        os.close(proc)
        for grant in self._grants:
            _kernel.landlock_add_path(ruleset, grant.fd, grant.rights)
        # Lowering a limit needs no privilege; with CAP_SYS_RESOURCE gone it cannot be raised.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        files = self.max_open_files
        if hard != resource.RLIM_INFINITY:
            files = min(files, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if not self._direct:
            # Nothing caps a run's processes between two samples of its tree without cgroups
            # (which a harness that is not root never has), and a native fork burst makes
            # thousands in that time, up to the host's pid_max. In the template's own user
            # namespace RLIMIT_NPROC counts the tasks of every run of this runtime (and of
            # nothing else), so the kernel holds them all to the runtime's bound. (Root is
            # exempt from it; its runs have cgroups where the host lets it make them.)
            tasks = _runtime_task_ceiling(self.max_processes, self.max_parallel_runs)
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            if hard != resource.RLIM_INFINITY:
                tasks = min(tasks, hard)
            resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
        _kernel.drop_capabilities()
        _kernel.set_no_new_privs()
        # Where the kernel's audit is on (auditd), Landlock records every access it refuses
        # the process that made the domain, and those of any domain the program makes: a
        # loop of refused opens would write records to the host's disk as fast as it runs.
        quiet = _kernel.LOG_SAME_EXEC_OFF | _kernel.LOG_SUBDOMAINS_OFF if self._abi >= 7 else 0
        _kernel.landlock_restrict_self(ruleset, quiet)
        _kernel.set_seccomp_filter(seccomp)
        os.close(ruleset)
        os.close(scratch)
        for grant in self._grants:
            os.close(grant.fd)
        os.close(status_fd)
        os.environ.clear()
        os.environ.update(self.env)
        sys.dont_write_bytecode = True


def _refuse_links_into_write_grants(read: list[str], write: list[str]) -> None:
    """Refuse a grant that symbolic links lead beneath a ``write`` grant (``CodeSandbox``
    refuses one whose path lies there), or through it and out again. A run may replace what
    lies beneath its ``write`` grant with a link to anywhere, which the next template would
    follow and grant: the grant's target (covered already) or any step on the way to it."""
    roots = [(given, os.path.realpath(given)) for given in write]
    for path in (*read, *write):
        real = os.path.realpath(path)
        for given, root in roots:
            if lies_beneath(real, root):
                raise SandboxUnavailable(
                    f"code sandbox: the granted path {path!r} leads beneath the write grant "
                    f"{given!r} (to {real!r}), which covers it already: a run could make it lead "
                    "anywhere; remove it"
                )
        for step in _resolution_steps(path):
            for given, root in roots:
                if lies_beneath(step, root):
                    raise SandboxUnavailable(
                        f"code sandbox: the granted path {path!r} leads through the write grant "
                        f"{given!r} (at {step!r}): a run could make it lead anywhere; grant "
                        f"what it leads to ({real!r}) instead"
                    )


def _resolution_steps(path: str) -> list[str]:
    """Every path the kernel looks up while resolving ``path`` (each with its directory
    already resolved, as ``os.path.realpath`` resolves it): the symbolic links followed and
    the directories passed on the way, ``..`` of a link's target included."""
    steps: list[str] = []
    pending = list(reversed(path.split("/")))
    resolved = "/"
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        step = os.path.join(resolved, name)
        steps.append(step)
        try:
            target = os.readlink(step) if links < 40 else None
        except OSError:  # not a link, or nothing there: the rest is looked up beneath it
            target = None
        # The kernel gives up after 40 links (ELOOP); the template's open then fails anyway.
        if target is None:
            resolved = step
            continue
        links += 1
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(target.split("/")))
    return steps


def _refuse_host_code(write: list[str]) -> None:
    """Refuse a ``write`` grant that holds the code the host runs outside the sandbox: the
    Python installation (a virtual environment inside a granted project directory, say) and
    this package, which every template loads again when it starts, and the interpreter and
    the shared libraries it has mapped (``libc``, the dynamic loader: outside the Python
    installation, in ``/usr/lib``, they are what the next ``python`` the host starts runs
    first). A run could change them, and its code would then run as the host: in the
    harness's next import, or the template of its next tool system."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    libraries = [sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib")]
    libraries += [sysconfig.get_path("platlib"), package]
    prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    # Found and resolved once, for every grant (the mapped files are dozens).
    codes = [
        (code, os.path.realpath(code), code in libraries)
        for code in (*prefixes, *libraries, sys.executable, *mapped_code())
    ]
    held = _write_grant_holding(write, codes)
    if held is not None:
        granted, code = held
        raise SandboxUnavailable(
            f"code sandbox: the write grant {granted!r} holds code the host runs "
            f"({code!r}): a run could change what the harness or its next template "
            "runs, outside the sandbox; grant a directory that does not hold it"
        )


def _refuse_host_search_path(write: list[str], places: list[tuple[str, bool | str, str]]) -> None:
    """Refuse a ``write`` grant that holds a place where the host looks for code to run by name
    (``_host_code.search_places``: its ``sys.path``, its user's Python directories, home
    directory and what is hidden there, ``PATH`` and ``LD_LIBRARY_PATH``). A run could leave
    code there (a ``.pth`` file in the user's ``site-packages``, a ``sitecustomize.py``, a
    ``json.py`` beside the harness script, a ``.bashrc``, a git configuration, a ``git`` on the
    ``PATH``, a ``libz.so.1`` where the dynamic loader looks first) that runs as the host's
    user, outside the sandbox, the next time the harness, or any Python or command of that
    user, starts."""
    if not write:
        return
    held = _write_grant_holding(
        write, [(path, os.path.realpath(path), whole) for path, whole, _what in places]
    )
    if held is not None:
        granted, path = held
        what = next(what for place, _whole, what in places if place == path)
        raise SandboxUnavailable(
            f"code sandbox: the write grant {granted!r} holds {path!r}, {what}: a run could "
            "leave code there that the host runs next, outside the sandbox; grant a directory "
            "that does not hold it"
        )


_SCRATCH_HOMES: Final = ("/tmp", "/var/tmp")
"""The temporary directories of the usual ``TMPDIR``: where the runtimes of other harnesses on
the machine keep their scratch mount points, whatever this one's ``TMPDIR`` is."""


def _refuse_scratch_homes(write: list[str], temporary: str) -> None:
    """Refuse a ``write`` grant that holds a temporary directory where runtimes keep their
    scratch mount points: ``temporary`` (the host's ``TMPDIR``, shared by every tool system of
    the harness) and the usual ``/tmp`` and ``/var/tmp``. A run may remove or replace what
    lies beneath its grant, and so another runtime's empty mount point (the worker's user owns
    it, which the sticky bit lets remove), failing that runtime's next run, as often as it
    likes. The grant itself cannot be removed by a run, so a ``write`` grant beneath the
    temporary directory is fine."""
    homes = {os.path.realpath(path): path for path in (temporary, *_SCRATCH_HOMES)}
    held = _write_grant_holding(write, [(home, real, False) for real, home in homes.items()])
    if held is not None:
        granted, home = held
        raise SandboxUnavailable(
            f"code sandbox: the write grant {granted!r} holds the temporary directory "
            f"{home!r}, where the runtimes of every tool system keep their scratch "
            "mount points: a run could remove another runtime's and fail its runs; "
            "grant a directory of its own beneath it instead (a run's own temporary "
            "files go to its scratch directory)"
        )


def _write_grant_holding(
    write: list[str], places: Sequence[tuple[str, str, bool | str]]
) -> tuple[str, str] | None:
    """The first ``write`` grant that holds one of ``places`` (each as given, resolved, and
    whether a grant beneath it holds part of it too: ``True``, ``False``, or ``ENTRIES`` for a
    file granted directly in it), with that place; ``None`` if none."""
    for granted in write:
        root = os.path.realpath(granted)
        for place, real, whole in places:
            if real == root or lies_beneath(real, root):
                return granted, place
            if whole is True and lies_beneath(root, real):
                return granted, place
            if whole == ENTRIES and os.path.dirname(root) == real and not os.path.isdir(root):
                return granted, place
    return None


def _proc_masks() -> list[tuple[str, bool]]:
    """The entries of ``/proc`` (and of its directories, one level down) outside the
    processes' own that only their owner may read, as ``(path, is_directory)``; a run's init
    masks them (``SandboxPlan._mask_proc``). Under a root harness the worker is root without
    capabilities, and root owns them: ``slabinfo``, ``vmallocinfo``, ``kpageflags``,
    ``kpagecount``, ``pagetypeinfo``, ``timer_list`` and ``tty/driver`` would tell a run how
    the host's kernel lays out its memory (what exploits of the kernel look for), the flags of
    every physical page, the host's timers and its serial lines' traffic. Read once, in the
    template: the kernel's ``/proc`` is the same for every run."""
    found = [
        (f"/proc/{name}", os.path.isdir(f"/proc/{name}"))
        for name in _PROC_ALWAYS_MASKED
        if os.path.lexists(f"/proc/{name}")
    ]
    directories = ["/proc"]
    for directory in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = f"{directory}/{name}"
            if directory == "/proc" and (name.isdigit() or name in _PROC_NOT_SCANNED):
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if not mode & stat.S_IROTH or not mode & stat.S_IXOTH:
                    found.append((path, True))
                elif directory == "/proc":
                    directories.append(path)
            elif stat.S_ISREG(mode) and not mode & stat.S_IROTH and mode & stat.S_IRUSR:
                found.append((path, False))
    return sorted(set(found))


def _most_killable() -> None:
    """Make this process, and so every process of the run, the first the kernel's OOM killer
    picks (raising the score needs no privilege). As inherited, a harness that had shielded
    itself (``-1000``: never killed) would shield its runs too: a run at its cgroup's memory
    limit would then stall in reclaim instead of being killed, and a machine out of memory
    would kill the harness before a run. Best effort: a kernel without the file keeps what
    it has."""
    with contextlib.suppress(OSError):
        _write_file("/proc/self/oom_score_adj", "1000")


def _exit_as(wait_status: int) -> NoReturn:
    """End as the init ended (``wait_status``), so that the template's exit report of this
    process tells the host how its init ended, as it does where the template's child is the
    init. A signal is raised again with no core dump (not dumpable, whatever its
    ``RLIMIT_CORE``: that is 0 rather than 1 where the harness's hard limit is 0, and at 0 the
    kernel still hands a process's memory to a ``core_pattern`` that is a pipe); one that would
    not end this process (no init dies of those) falls back to the shell's convention, 128 +
    its number."""
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        for step in (
            _kernel.set_not_dumpable,
            lambda: signal.signal(number, signal.SIG_DFL),  # refused for SIGKILL: no matter
            lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, {number}),
            lambda: os.kill(os.getpid(), number),
        ):
            with contextlib.suppress(OSError, ValueError):
                step()
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else 0)


def _runtime_task_ceiling(max_processes: int, max_parallel_runs: int) -> int:
    """The tasks every run of a runtime may have together: each run's ceiling, plus the
    template, the idle and prepared workers and their inits."""
    return task_ceiling(max_processes) * max_parallel_runs + _RUNTIME_TASK_SLACK


def _report_error(fd: int, message: str) -> None:
    data = message.encode("utf-8", "replace")[:4000]
    with contextlib.suppress(OSError):
        os.write(fd, b"E" + struct.pack(">H", len(data)) + data)
