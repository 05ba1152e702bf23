"""The init of a run's PID namespace: reaps, charges the whole tree, ends the run.

PID 1 of the namespace starts the worker (PID 2) and then only waits: it reaps every process
(orphans of the run are reparented to it), and once the worker has its program (it says so on
its notice socket before running any of it; a pre-forked worker may wait long for its run, and
its init sleeps until then) it measures the tree every ``TICK_SECONDS`` with its ``Meter``: the
run's cgroups when it has them (``_cgroup.CgroupMeter``), otherwise ``ProcMeter``, which sums
over the namespace's private ``/proc`` the CPU time of every live process (its own and its
reaped children's) plus what the init has reaped itself, the resident anonymous and shared
memory and the page tables, the number of processes and the number of tasks (threads included:
without cgroups nothing else holds them, and a tree of threads could take every PID of the
host). Over a budget it reports which one and exits; when the worker exits it reports the
worker's wait status (or the memory budget, when the kernel's memory ceiling killed it) and
exits. Its exit makes the kernel kill everything left in the namespace, so nothing a run
started (a ``setsid()`` grandchild included) outlives it.

The worker tells the init that its run is over by writing another byte to its notice socket (the
descriptor ``start_worker`` receives) once its ``Done`` frame is in the host's channel, so the
init ends the run while the host is still reading that frame; the host asks for the end of a
settled run too, by closing its end of the channel to the worker (which the init watches for the
hang-up). Whichever comes first ends it: a program that writes to the notice socket itself only
ends its own run early. However the run ends, the init sends ``SIGKILL`` to
every other process of the namespace, then reports why (if it knows) and ``b"K"``: from then
on nothing the program started runs again, and the host's result may be delivered. It then
reaps them all and reports ``b"G"``. Waiting for their exit, or for the init's own, would add
the kernel's teardown of their memory and of the run's namespaces to every run.

The host also closes that channel when the worker's own channel to the host reaches end of
file before any ``Done``: the program closed it, or the worker is exiting. The init tells the
two apart, which the host cannot (it does not know the worker's pid): a worker that is exiting
on its own (``process_exiting``) is reaped first and its exit reported as usual; otherwise the
init ends the run and reports ``b"H"``, the hang-up, as its reason.

Over the compute budget, or past the wall backstop, the init first asks the worker where the
program is (``ask_where``): the worker writes its stacks to its where pipe (``WHERE_FD``, a
descriptor of its own that the host reads only then), never to its output. The init empties
that pipe before it asks, through a read end it opens then, so that nothing the program wrote
there before names the line.

Reports on the run's status pipe: ``b"W"`` + wait status (``>i``), or ``b"B"`` + budget code, or
``b"H"``; then ``b"K"`` once every other process has ``SIGKILL`` pending (left out when none is
left), then ``b"G"`` once all are reaped.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import select
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import Final, NoReturn, Protocol

__all__ = [
    "BUDGET_COMPUTE",
    "BUDGET_MEMORY",
    "BUDGET_PROCESSES",
    "BUDGET_WALL",
    "NOTICE_HELD",
    "NOTICE_STARTED",
    "TICK_SECONDS",
    "WHERE_FD",
    "WHERE_PIPE_BYTES",
    "WHERE_SECONDS",
    "WHERE_SIGNAL",
    "Meter",
    "ProcMeter",
    "ask_where",
    "namespace_worker",
    "process_exiting",
    "run_init",
    "task_ceiling",
]

TICK_SECONDS: Final = 0.025
NOTICE_STARTED: Final = b"S"
"""What the worker writes to the notice socket once its program may run (before it runs any of
it): the init measures the run, wall clock included, from then on. Any byte but this and
``NOTICE_HELD`` ends the run."""
NOTICE_HELD: Final = b"H"
"""What the worker writes on a held boot (its program compiles, the run may never come): the
init measures CPU time, memory and processes from then on, and the wall clock only from
``NOTICE_STARTED``, which the worker writes once the run has come: waiting for a run that is
not due to start is no part of its wall time."""
WHERE_SIGNAL: Final = signal.SIGRTMIN + 6
"""The signal on which the worker writes the Python stack of each of its threads to its
where pipe (``WHERE_FD``; ``faulthandler``, from C: it comes even from a loop in C that holds
the GIL). The run's end sends it when the compute budget has run out or the wall ceiling is
reached, so that the failure can say which line of the program the time ran out on
(``_run_crash_dump``)."""
WHERE_FD: Final = 6
"""The worker's descriptor of the where pipe, which the host reads only for where the program
was as a budget ran out. Not descriptor 2: a stack written there showed under the program's
output, and could not be told from a crash's by its text (a fatal error's stack must show).
The init keeps its own copy (it writes nothing to it) to empty the pipe before it asks."""
WHERE_PIPE_BYTES: Final = 1 << 20
"""What the where pipe is made to hold as the worker is asked (``widen_where``): the stacks
come newest thread first, the program's main thread last, and a program of a few dozen threads
deep in calls has more than the 64 KiB a pipe holds by default written before it, which no one
reads while they are written (the writes are non-blocking: the dump was cut short there, and
the failure named another thread's line). A megabyte, what ``/proc/sys/fs/pipe-max-size``
allows by default; the host reads that much of it at most."""
WHERE_SECONDS: Final = 0.05
"""How long the worker is given to write that stack before the run is ended: a spinning
process takes a signal at its next tick, a waiting one once it is scheduled. It adds this
much to a compute budget's or wall ceiling's failure, and the program this much CPU time
past the budget."""
BUDGET_COMPUTE: Final = 1
BUDGET_MEMORY: Final = 2
BUDGET_PROCESSES: Final = 3
BUDGET_WALL: Final = 4
WALL_BACKSTOP_SECONDS: Final = 1.0
"""How long past the wall ceiling (from the program's start) the init ends a run by itself.
The host's own timer (from spawn, a little earlier) normally ends it first; this holds when
nothing on the host runs that timer any more (the event loop the run belongs to stopped for
good), so that no process of the run outlives its ceiling by more than this."""
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")
_TASKS_PER_PROCESS: Final = 32
"""Threads allowed per allowed process (a thread pool's size)."""
_TASK_SLACK: Final = 64
_KILL_AGAIN_SECONDS: Final = 0.01
"""How often the end of a run repeats its ``kill(-1)`` while processes of it remain."""
_PF_EXITING: Final = 0x4
"""The kernel's flag of a thread that has begun to exit (``/proc/<pid>/task/<tid>/stat``'s
ninth field), set before the exit closes any descriptor."""
_NOTICE_READ_BYTES: Final = 1 << 16
"""What one read of the notice socket takes at most."""
_F_SETPIPE_SZ: Final[int | None] = getattr(fcntl, "F_SETPIPE_SZ", None)
"""Linux's; other systems' pipes keep their size."""
_WHERE_DROP_READS: Final = 16
"""How many such reads the init makes at most to empty the where pipe before it asks (the
pipe holds 64 KiB unless the program enlarged it, to a megabyte at most by default)."""
MAX_LOCKS: Final = 1_024
"""How many file locks (``fcntl``, ``lockf``, ``flock``) a run's processes may hold together; more
end the run with its memory budget. Each is kernel memory (about 200 bytes) that neither a
resident set nor a cgroup counts (the kernel charges its lock cache to no cgroup), so without
a bound one run of the default budgets held 1.5 GB of the host's memory in eight million locks
beside its 512 MB budget. A program's own databases (``sqlite3``) hold a handful.

Counting them costs the init (outside every budget) in proportion to the square of the locks:
each read of ``/proc/locks`` returns at most a page (about sixty lines), and the kernel walks
the machine's whole list of locks from its start for every read, holding every file lock call
of the machine meanwhile. Under a bound of 16,384, counting 16,000 locks took 216 reads and
27 ms of the init's CPU, four times a second, and four runs that slept holding 10,000 locks
each kept their inits busy on more than a core (9.3 s of CPU in 4 s)."""
_LOCKS_EVERY: Final = 10
"""Measurings between two counts of the run's locks (a count reads ``/proc/locks``)."""
_LOCKS_READ_BYTES: Final = 1 << 16
REPORT_HANG_UP: Final = b"H"
"""The init's report that it ended the run on the host's hang-up while its worker lived."""


def _drop_where() -> None:
    """Empty the where pipe, through a read end opened anew from the init's write end (kept
    for this): opened only as a budget runs out, no other run pays for it. Best effort."""
    try:
        where = os.open(f"/proc/self/fd/{WHERE_FD}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with contextlib.suppress(OSError):
        for _ in range(_WHERE_DROP_READS):
            if not os.read(where, _NOTICE_READ_BYTES):
                break
    os.close(where)


def widen_where(fd: int) -> None:
    """Make the where pipe (``fd``, either end) hold ``WHERE_PIPE_BYTES``; best effort (a
    system whose ``pipe-max-size`` is lower, or whose user has used up its pipe pages, keeps
    its size). Called only as a budget runs out: no other run pays the system call, and the
    pages (allocated as the pipe fills) live only until the run's end."""
    if _F_SETPIPE_SZ is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, WHERE_PIPE_BYTES)


def ask_where(pid: int) -> None:
    """Have worker ``pid`` write where its threads are (``WHERE_SIGNAL``) and give it
    ``WHERE_SECONDS`` to; best effort (a program may have taken the signal over). What the
    where pipe held before is dropped first: only what the worker writes from now on names
    the line (the host reads it once the run has ended)."""
    _drop_where()
    widen_where(WHERE_FD)
    try:
        os.kill(pid, WHERE_SIGNAL)
    except OSError:
        return
    time.sleep(WHERE_SECONDS)


def namespace_worker(init: int) -> int | None:
    """A pidfd of the worker of the namespace whose init is ``init`` (the init's child that is
    PID 2 in the namespace, its first fork), which the caller closes; ``None`` when ``/proc``
    does not tell (no ``children`` file, or the worker is gone). The child is held by its
    pidfd before its status is read: a pid read from ``children`` may be reaped and taken by
    another process meanwhile, which must not get the signal. Read only as a run's wall
    ceiling ends it: no run that ends otherwise pays for it."""
    try:
        with open(f"/proc/{init}/task/{init}/children", "rb") as children:
            pids = children.read().split()
    except OSError:
        return None
    for pid in pids:
        try:
            handle = os.pidfd_open(int(pid))
        except (OSError, ValueError):
            continue
        if _is_namespace_worker(int(pid), init):
            return handle
        os.close(handle)
    return None


def _is_namespace_worker(pid: int, init: int) -> bool:
    """Whether process ``pid`` (held by a pidfd, so still the process it was) is ``init``'s
    child and PID 2 in its namespace."""
    parent = namespaced = False
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"PPid:"):
                    parent = line.split()[-1] == str(init).encode()
                elif line.startswith(b"NSpid:"):
                    fields = line.split()
                    namespaced = len(fields) > 2 and fields[-1] == b"2"
                    break
    except OSError:
        return False
    return parent and namespaced


def task_ceiling(max_processes: int) -> int:
    """How many tasks (threads included) a run of ``max_processes`` may have: the cgroups'
    ``pids.max``, and the ``/proc`` walk's ceiling where there are no cgroups."""
    return _TASKS_PER_PROCESS * max_processes + _TASK_SLACK


def _kilobytes(status: bytes, key: bytes) -> int:
    start = status.find(key)
    if start < 0:
        return 0  # a zombie has no memory lines
    start += len(key)
    return int(status[start : status.index(b"kB", start)])


def _threads(status: bytes) -> int:
    start = status.find(b"\nThreads:")
    if start < 0:
        return 1
    start += len(b"\nThreads:")
    return int(status[start : status.index(b"\n", start)])


class Meter(Protocol):
    """How the init measures its run."""

    def join(self) -> None:
        """In the freshly forked worker, before it runs anything."""

    def close_dirs(self) -> None:
        """In the init, once the worker is forked."""

    def usage(self) -> tuple[float, int, int]:
        """(CPU seconds, memory bytes, process count) of the run but its init."""

    def oom_killed(self) -> bool:
        """Whether the kernel ended a process of the run for memory."""

    def over_task_ceiling(self) -> bool:
        """Whether the last ``usage`` saw more tasks (threads included) than the run may have
        (with cgroups the kernel's ``pids.max`` holds them instead)."""


class ProcMeter:
    """The walk over the namespace's ``/proc`` (no cgroups); ``max_tasks`` is the ceiling on
    tasks, threads included (``task_ceiling``)."""

    def __init__(self, max_tasks: int) -> None:
        self._max_tasks = max_tasks
        self._tasks = 0

    def join(self) -> None:
        pass

    def close_dirs(self) -> None:
        pass

    def usage(self) -> tuple[float, int, int]:
        cpu, memory, count, self._tasks = _tree_usage()
        return cpu, memory, count

    def oom_killed(self) -> bool:
        return False

    def over_task_ceiling(self) -> bool:
        return self._tasks > self._max_tasks


def _tree_usage() -> tuple[float, int, int, int]:
    """(CPU seconds, resident anonymous and shared-memory bytes, swapped-out anonymous bytes and
    page tables, process count, task count) of the namespace but PID 1. Shared memory counts too
    (a shared mapping of a scratch file: its pages are not anonymous to the kernel); shared
    anonymous mappings, whose pages outlive their mapped part, are refused where this walk
    measures (``_seccomp``)."""
    ticks = 0
    kilobytes = 0
    count = 0
    tasks = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
            with open(f"/proc/{name}/status", "rb") as file:
                status = file.read()
        except OSError:
            continue  # exited between the listing and the read
        fields = stat[stat.rindex(b")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        threads = _threads(status)
        if threads > 1 and b"\nRssAnon:" not in status:
            status = _live_thread_status(name)
        kilobytes += _kilobytes(status, b"\nRssAnon:") + _kilobytes(status, b"\nRssShmem:")
        kilobytes += _kilobytes(status, b"\nVmSwap:")  # moved out by a host short of memory
        # Page tables, kernel memory that neither the resident set nor RLIMIT_AS counts: a
        # one-page mapping in a gigabyte of its own, read once, maps the shared zero page and
        # costs two page table pages, and one process under a 256 MB budget held 449 MB so.
        kilobytes += _kilobytes(status, b"\nVmPTE:")
        count += 1
        tasks += threads
    times = os.times()
    cpu = ticks / _CLOCK_TICKS + times.children_user + times.children_system
    return cpu, kilobytes * 1024, count, tasks


def _live_thread_status(pid: str) -> bytes:
    """The ``status`` of a thread of process ``pid`` that still has the process's memory, or
    ``b""``. A process whose main thread alone has exited (the raw ``exit`` call, not the C
    library's ``exit``) lives on in its other threads, but its own ``status`` is the main
    thread's, a zombie's, without memory lines: each of a run's processes could otherwise hold
    memory up to its ``RLIMIT_AS`` unseen (measured: two such processes held 160 MB under a
    128 MB budget). Its threads share one memory, which any live one's ``status`` shows."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return b""
    for tid in tids:
        if tid == pid:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/status", "rb") as file:
                status = file.read()
        except OSError:
            continue  # exited between the listing and the read
        if b"\nRssAnon:" in status:
            return status
    return b""


def process_exiting(pid: int, proc: str = "/proc") -> bool:
    """Whether process ``pid`` (as ``proc`` numbers it) is ending on its own: it is gone, or
    every thread of it is a zombie or has begun to exit. An exit sets a thread's exiting flag
    before it closes a descriptor, so a process whose descriptor was closed by its exit shows
    it; ``False`` when ``proc`` cannot tell."""
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as it is read
        return True
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"{proc}/{pid}/task/{task}/stat", "rb") as file:
                stat = file.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] not in (b"Z", b"X") and not int(fields[6]) & _PF_EXITING:
                return False
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread is gone, or going as it is read
        except (OSError, ValueError, IndexError):
            return False
    return True


def open_locks() -> int:
    """A descriptor of the run's ``/proc/locks`` for ``_over_lock_ceiling``, opened before the
    run's view of it is masked; -1 where it cannot be opened (nothing is counted then)."""
    try:
        return os.open("/proc/locks", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _over_lock_ceiling(locks: int) -> bool:
    """Whether the run's processes hold more than ``MAX_LOCKS`` file locks. The run's
    ``/proc/locks`` (``locks``, of its own PID namespace) lists only the locks whose holder it
    can see (open file description locks, which it lists for every process of the host, are
    not counted: the filter refuses them to the run), one ``POSIX`` or ``FLOCK`` line each
    (``flock`` locks too: one per open file, but a mapping keeps its file, and so the lock,
    after the descriptor is closed). Read no further than the ceiling."""
    if locks < 0:
        return False
    try:
        os.lseek(locks, 0, os.SEEK_SET)
        lines = 0
        while lines <= MAX_LOCKS:
            chunk = os.read(locks, _LOCKS_READ_BYTES)
            if not chunk:
                return False
            lines += chunk.count(b" POSIX ") + chunk.count(b" FLOCK ")
        return True
    except OSError:
        return False


def _memory_killed(meter: Meter) -> bool:
    try:
        return meter.oom_killed()
    except (OSError, ValueError):
        return False


def _end_every_process(*, wait: bool) -> bool:
    """Send ``SIGKILL`` to every other process of the namespace and reap them; return whether
    none is left. ``wait=False`` reaps only what has exited already (the worker that exited is
    reaped before this), ``wait=True`` until every one is gone.

    ``kill(-1)`` from the init reaches every process of the namespace, and for each it makes
    the kill pending in every thread before it returns: from then on no thread of the run
    executes the program again (a system call already under way may complete). Every process
    of the namespace descends from the init (orphans are reparented to it), so no child left
    means no process left. The kill is repeated in case one was forked as it came, at most
    every ``_KILL_AGAIN_SECONDS``: each ``kill(-1)`` visits every process, and repeating it
    for every child reaped took 12 s to end a burst of 8,000 processes."""
    if wait:
        # A child's exit is then waited for with a timeout (``sigtimedwait``), which a blocked
        # SIGCHLD keeps pending from the last non-blocking wait on; the init exits after this.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    killed_at = time.monotonic()
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return True
        if not wait:
            return False
        if time.monotonic() - killed_at >= _KILL_AGAIN_SECONDS:
            killed_at = time.monotonic()
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        else:
            signal.sigtimedwait({signal.SIGCHLD}, _KILL_AGAIN_SECONDS)


def _notice_pair() -> tuple[int, int]:
    """The notice channel: the init's end and the worker's. A unix socket pair, not a pipe: a
    pipe's end can be opened again from ``/proc/self/fd`` with the other access mode (a socket
    cannot be opened there at all), so a program reading its worker's end of a notice pipe as
    its first line took ``NOTICE_STARTED`` before the init woke for it, about every other run,
    and the init never measured that run (measured: three children spun 12 s of CPU and held
    600 MB under budgets of 2 s and 256 MB). What the worker writes on its end reaches the
    init's alone."""
    init_end, worker_end = socket.socketpair(
        socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
    )
    return init_end.detach(), worker_end.detach()


def _read_notice(notice: int) -> bytes | None:
    """What the notice socket holds: ``None`` when nothing, ``b""`` at end of file (every writer
    gone: the worker exited, which its wait status reports)."""
    try:
        return os.read(notice, _NOTICE_READ_BYTES)
    except BlockingIOError:
        return None


def _rehearse_the_end(poller: select.poll, worker: int, status_fd: int) -> None:
    """Take, while the worker starts, the steps of the run's end that change nothing (the
    poll, the notice's bytes, the kill's system call, the report's bytes), so that their pages
    are the init's own before the end comes: the init shares every page with the template it
    was forked from, and its first write to each copies it, on the core the end notice woke it
    on, while the host waits for its report."""
    ready = [fd for fd, _events in poller.poll(0)]
    heard = (NOTICE_STARTED + b"D").strip(NOTICE_STARTED + NOTICE_HELD)
    with contextlib.suppress(OSError):
        os.kill(worker, 0)
    (heard + struct.pack(">i", len(ready)) + b"K").startswith(b"W")
    os.fstat(status_fd)
    time.monotonic()


def _yield_on_wake() -> None:
    """Schedule the init as a batch process (the worker, forked already, keeps the usual
    policy): woken by the worker's notices, or by its tick, it waits for the worker to block or
    for the scheduler's next tick rather than take the CPU from it at once. The notices come as
    the worker reads its program and as it starts it, when it has most to do on a machine whose
    every core may be busy: the init's wake-up then cut into the run (a scheduler trace of an
    empty run showed the init taking the worker's core for 0.13 ms while the other core idled).
    The run's end costs nothing: the worker blocks right after its end notice. Where the kernel
    refuses (a policy it lacks), the init keeps the usual one."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def run_init(
    start_worker: Callable[[int], NoReturn],
    status_fd: int,
    compute_ms: float,
    max_memory_mb: float,
    max_processes: int,
    meter: Meter,
    max_wall_ms: float = math.inf,
    locks: int = -1,
) -> NoReturn:
    """Be PID 1: start the worker (``start_worker`` gets its end of the notice channel),
    watch the tree, report, exit (which ends the namespace). ``locks``: the run's
    ``/proc/locks`` (``open_locks``), which the worker does not inherit."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    notice, notice_w = _notice_pair()
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    worker = os.fork()
    if worker == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (wake_r, wake_w, notice, locks):
            if fd >= 0:
                os.close(fd)
        start_worker(notice_w)
    os.close(notice_w)
    _yield_on_wake()
    meter.close_dirs()
    channel = os.dup(3)  # the host->worker channel's read end: its hang-up ends the run
    for fd in range(5):  # (not ``WHERE_FD``, which ``ask_where`` reads through)
        with contextlib.suppress(OSError):
            os.close(fd)
    memory_limit = max_memory_mb * 2**20
    report = b""
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    poller.register(channel, 0)  # hang-up and errors only: the worker reads the data
    poller.register(notice, select.POLLIN)
    _rehearse_the_end(poller, worker, status_fd)
    started = False  # the worker has its program: measure from now on
    measured_at = 0.0  # the last measuring (or the start, which puts the first one off a tick)
    deadline = math.inf  # the wall backstop, once the program may run (``NOTICE_STARTED``)
    muted_at: float | None = None  # when a repeated notice took the notice socket off the poll
    measurings = 0
    while not report:
        if muted_at is not None and time.monotonic() - muted_at >= TICK_SECONDS:
            poller.register(notice, select.POLLIN)
            muted_at = None
        timeout = None
        if started:
            timeout = max(0.0, measured_at + TICK_SECONDS - time.monotonic()) * 1000
        ready = [fd for fd, _events in poller.poll(timeout)]
        if channel in ready and notice not in ready:  # (with the end notice: a run's usual end)
            if not process_exiting(worker):
                report = REPORT_HANG_UP
                break
            # The worker is exiting on its own (the host may have seen its channel close as it
            # went): its exit, reaped below, is what the host must hear.
            poller.unregister(channel)
        if notice in ready:
            heard = _read_notice(notice)
            if heard == b"":
                poller.unregister(notice)
            elif heard is not None:
                if heard.strip(NOTICE_STARTED + NOTICE_HELD):
                    break  # anything else is the end of the run
                # Each of the two notices may put the next measuring off once (a program that
                # writes them itself gets no more out of that).
                put_off = not started
                if NOTICE_STARTED in heard and deadline == math.inf:
                    deadline = time.monotonic() + max_wall_ms / 1000 + WALL_BACKSTOP_SECONDS
                    put_off = True
                elif started:
                    # Only the program repeats a notice: each would wake the init for a
                    # measuring of its own, outside the run's budgets (a program that kept
                    # the socket full, at almost no CPU of its own, kept the init busy on a
                    # whole core). The socket waits for the next tick instead.
                    poller.unregister(notice)
                    muted_at = time.monotonic()
                if not started:
                    measured_at = time.monotonic()
                started = True
                if put_off and ready == [notice]:
                    # Nothing of the program has run yet: the measuring waits a tick. Measured
                    # now, it took the init most of a millisecond (the pages it touches are
                    # copied on first write) on a core the host needs once the program's
                    # result arrives.
                    continue
        with contextlib.suppress(OSError):
            while os.read(wake_r, 512):
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = worker, 0
            if pid == 0:
                break
            if pid == worker:
                report = b"W" + struct.pack(">i", status)
                break
        if _memory_killed(meter):
            report = b"B" + bytes([BUDGET_MEMORY])
        if report:
            break
        if not started:
            continue  # nothing of the program has run: an idle worker costs no measuring
        if time.monotonic() >= deadline:
            report = b"B" + bytes([BUDGET_WALL])
            ask_where(worker)  # as for the compute budget: the failure names the line
            break
        now = time.monotonic()
        if now - measured_at < TICK_SECONDS:
            # Woken early, by a child's exit (reaped above): the measuring waits for its tick.
            # Measured on every wake-up, a program whose children exited as fast as it could
            # make them kept the init (outside the run's budgets) measuring as much CPU time
            # as the program spent itself, most of a /proc walk of 50 processes per child.
            continue
        measured_at = now
        try:
            cpu, memory, count = meter.usage()
        except (OSError, ValueError, IndexError):
            continue
        if cpu * 1000 >= compute_ms:
            report = b"B" + bytes([BUDGET_COMPUTE])
            ask_where(worker)
        elif memory > memory_limit:
            report = b"B" + bytes([BUDGET_MEMORY])
        elif count > max_processes or meter.over_task_ceiling():
            report = b"B" + bytes([BUDGET_PROCESSES])
        measurings += 1
        if not report and measurings % _LOCKS_EVERY == 0 and _over_lock_ceiling(locks):
            report = b"B" + bytes([BUDGET_MEMORY])
    if _end_every_process(wait=False):
        # The usual end when the worker exited on its own and started nothing that lives on:
        # one write, so the host wakes once for the reason and the all-clear.
        report += b"G"
    else:
        # Every other process has SIGKILL pending: none of them returns to the program again,
        # which is what the host waits for; their exit (the kernel tearing their memory down,
        # milliseconds on some machines) follows.
        with contextlib.suppress(OSError):
            os.write(status_fd, report + b"K")
        _end_every_process(wait=True)
        report = b"G"
    with contextlib.suppress(OSError):
        os.write(status_fd, report)
    os._exit(0)
