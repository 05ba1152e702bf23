"""Hostile Code Mode programs aimed at what a run's budgets and ceilings must hold for the host.

Each program tries to take more of the host than its run is allowed (tasks, which share the
host's PIDs; memory no process shows; privileges planted for later in a ``write`` grant) and
must end as a clean failed run or meet the kernel's refusal, leaving the next run unharmed. The
task and memory cases run with the run's own cgroups and with the ``/proc`` walk that hosts
without writable cgroups get. A host killed with a run in flight leaves nothing behind either.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import run, value

from dsh_tools import CodeRuntimeConfig, CodeSandbox, SubprocessCodeRuntime
from dsh_tools.codebridge import CodeRunRequest, CodeRunResult

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is Linux's"
)

MAX_PROCESSES = 2
TASK_CEILING = 32 * MAX_PROCESSES + 64
"""Tasks (threads included) a run of ``MAX_PROCESSES`` may hold, as docs/sandbox.md states."""


@pytest.fixture(params=[True, False], ids=["cgroups", "proc-walk"])
def runtime(request: pytest.FixtureRequest) -> Iterator[SubprocessCodeRuntime]:
    sandbox = CodeSandbox(max_processes=MAX_PROCESSES, cgroups=request.param)
    config = CodeRuntimeConfig(
        compute_ms=20000, max_wall_ms=30000, max_memory_mb=256, sandbox=sandbox
    )
    runtime = SubprocessCodeRuntime(config)
    try:
        yield runtime
    finally:
        runtime.close()


def test_a_thread_swarm_cannot_take_the_host_pids(runtime: SubprocessCodeRuntime) -> None:
    # Small stacks and one malloc arena make a thread cost a few pages: under RLIMIT_AS alone a
    # process holds thousands, and max_processes of them would take every PID of the host.
    program = """
import ctypes, threading, time
ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX
threading.stack_size(32768)
release = threading.Event()
started = 0
try:
    for _ in range(1500):
        threading.Thread(target=release.wait).start()
        started += 1
except RuntimeError:
    pass
time.sleep(1)
release.set()
return started
"""
    result = run(runtime, program)
    if result.error is None:
        assert result.value < TASK_CEILING, "the kernel's pids.max refuses the thread beyond"
    else:
        assert result.error.kind == "worker-exit", result
        assert "process budget exhausted" in result.error.message
    later = run(runtime, "import threading\nreturn threading.active_count()")
    assert later.error is None and later.value == 1


def test_descriptors_hold_at_most_their_limit_of_the_host_file_table() -> None:
    # Every open() takes an entry of the machine-wide open-file table; with the host's own
    # limit (often tens of thousands per process) a few runs of forked openers could fill it
    # and make the harness's own opens fail with ENFILE.
    sandbox = CodeSandbox(max_processes=4, max_open_files=64)
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=sandbox))
    program = """
import os, resource
def open_all():
    fds = []
    try:
        while len(fds) < 100_000:
            fds.append(os.open(".", os.O_RDONLY))
    except OSError as exc:
        return len(fds), exc.errno
read, write = os.pipe()
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        held, errno = open_all()
        os.write(write, f"{held} {errno}\\n".encode())
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
seen = [line.split() for line in os.read(read, 4096).decode().splitlines()]
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (100_000, 100_000))
    raised = "raised"
except (OSError, ValueError):
    raised = "refused"
return [resource.getrlimit(resource.RLIMIT_NOFILE)[0], raised, seen]
"""
    try:
        limit, raised, seen = value(runtime, program)
        assert (limit, raised) == (64, "refused")
        assert len(seen) == 3
        for held, errno in seen:
            assert int(held) < 64 and int(errno) == 24  # EMFILE: this process's limit
        assert value(runtime, "return 1") == 1
    finally:
        runtime.close()


def test_no_set_id_file_is_left_in_a_write_grant(tmp_path: Path) -> None:
    # The worker's user owns what it creates in a write grant (root under a root harness): a
    # set-user-ID copy of an interpreter left there would give any local user that user.
    config = CodeRuntimeConfig(sandbox=CodeSandbox(write=(str(tmp_path),)))
    runtime = SubprocessCodeRuntime(config)
    program = f"""
import os, shutil, stat
os.chdir({str(tmp_path)!r})
outcomes = {{}}
def attempt(label, action):
    try:
        action()
        outcomes[label] = "done"
    except OSError as exc:
        outcomes[label] = exc.errno
shutil.copyfile("/usr/bin/env", "env")
attempt("chmod", lambda: os.chmod("env", 0o4755))
attempt("chmod-group", lambda: os.chmod("env", 0o2755))
attempt("fchmod", lambda: os.fchmod(os.open("env", os.O_RDONLY), 0o6755))
attempt("open", lambda: os.close(os.open("created", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("mknod", lambda: os.mknod("made", stat.S_IFREG | 0o4755))
attempt("ordinary", lambda: os.chmod("env", 0o750))
return outcomes
"""
    try:
        outcomes = value(runtime, program)
        assert outcomes["ordinary"] == "done"
        assert {label for label, outcome in outcomes.items() if outcome == "done"} == {"ordinary"}
        for path in tmp_path.iterdir():
            assert not path.stat().st_mode & (stat.S_ISUID | stat.S_ISGID), path
        assert oct((tmp_path / "env").stat().st_mode & 0o7777) == oct(0o750)
    finally:
        runtime.close()


LIBC_MAPPING = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
"""
"""The start of a program that maps memory itself, through the C library."""


def test_shared_memory_unmapped_but_one_page_is_still_charged(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The pages of a shared anonymous mapping belong to a hidden memory object that lives as
    # long as any page of the mapping stays mapped: only the run's cgroup sees them.
    program = (
        LIBC_MAPPING
        + """
size = 32 << 20
held = 0
for _ in range(20):
    address = libc.mmap(None, size, 3, 0x01 | 0x20, -1, 0)  # MAP_SHARED | MAP_ANONYMOUS
    if address in (None, ctypes.c_void_p(-1).value):
        return ['refused', ctypes.get_errno(), held]
    ctypes.memset(address, 1, size)
    libc.munmap(address + 4096, size - 4096)
    held += 32
return ['held', held]
"""
    )
    result = run(runtime, program)
    if result.error is None:
        assert result.value == ["refused", 1, 0], "shared anonymous memory held unseen"
    else:
        assert result.error.kind == "worker-exit", result
        assert "memory budget exhausted" in result.error.message
    assert value(runtime, "return 1") == 1


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroups", "proc-walk"])
def test_memory_held_by_a_process_whose_main_thread_exited_is_still_charged(
    cgroups: bool,
) -> None:
    # A process whose main thread alone exits (the raw exit call, not the C library's exit)
    # lives on in its other threads, but its /proc/<pid>/status, the main thread's, is a
    # zombie's, with no memory lines: each of the run's processes could hold up to its
    # RLIMIT_AS beside the budget, unseen.
    sandbox = CodeSandbox(max_processes=4, cgroups=cgroups)
    config = CodeRuntimeConfig(
        compute_ms=20000, max_wall_ms=30000, max_memory_mb=128, sandbox=sandbox
    )
    runtime = SubprocessCodeRuntime(config)
    program = """
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)

def hold(ready):
    blob = bytearray(80 << 20)
    for offset in range(0, len(blob), 4096):
        blob[offset] = 1
    os.write(ready, b"x")
    time.sleep(60)

for _ in range(2):
    ready, told = os.pipe()
    if os.fork() == 0:
        threading.Thread(target=hold, args=(told,)).start()
        libc.syscall(60, 0)  # SYS_exit: the main thread alone
    os.close(told)
    os.read(ready, 1)
time.sleep(1)
return "160 MB held under a 128 MB budget"
"""
    try:
        result = run(runtime, program)
        assert result.error is not None, result.value
        assert result.error.kind == "worker-exit", result
        assert "memory budget exhausted" in result.error.message
        assert value(runtime, "return 1") == 1
    finally:
        runtime.close()


def test_page_tables_of_scattered_mappings_are_charged(runtime: SubprocessCodeRuntime) -> None:
    # A one-page mapping in a gigabyte of its own, read once, maps the kernel's shared zero
    # page: no resident set shows it, but the kernel makes two page table pages for it (8 KiB)
    # that RLIMIT_AS does not count either. One process under a 256 MB budget held 449 MB of
    # page tables this way, and every process of a run could.
    program = (
        LIBC_MAPPING
        + """
import time
MAP_FIXED_NOREPLACE = 0x100000
made = 0
for index in range(65000):
    address = libc.mmap((1 << 40) + (index << 30), 4096, 1, 0x02 | 0x20 | MAP_FIXED_NOREPLACE,
                        -1, 0)  # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.c_ubyte.from_address(address).value
    made += 1
time.sleep(1)
tables = [line for line in open("/proc/self/status") if line.startswith("VmPTE")]
return [made, tables]
"""
    )
    result = run(runtime, program)
    assert result.error is not None, f"page tables held unseen: {result.value}"
    assert result.error.kind == "worker-exit", result
    assert "memory budget exhausted" in result.error.message
    assert value(runtime, "return 1") == 1


def test_pages_put_into_a_pipe_by_reference_are_refused_without_cgroups() -> None:
    # vmsplice puts a page into a pipe by reference: one byte of a 2 MiB huge page keeps the
    # whole page in the pipe's buffer after the process unmaps it, where no resident set shows
    # it (1 GiB held this way from a 20 MB process). Without cgroups nothing would charge it,
    # so the calls that do this are refused; copying files still works (``shutil`` falls back
    # from ``sendfile``).
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_memory_mb=256, sandbox=CodeSandbox(cgroups=False))
    )
    program = (
        LIBC_MAPPING
        + """
import os
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.syscall.restype = ctypes.c_long
class Piece(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]
huge = 2 << 20
held = 0
reader, writer = os.pipe()
for _ in range(512):
    address = libc.mmap(None, 2 * huge, 3, 0x22, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    page = (address + huge - 1) & ~(huge - 1)
    libc.madvise(page, huge, 14)  # MADV_HUGEPAGE
    ctypes.memset(page, 1, huge)
    piece = Piece(page, 1)
    put = libc.syscall(ctypes.c_long(278), ctypes.c_long(writer), ctypes.byref(piece),
                       ctypes.c_long(1), ctypes.c_long(2))  # vmsplice, SPLICE_F_NONBLOCK
    if put != 1:
        return ['refused', ctypes.get_errno(), held]
    libc.munmap(address, 2 * huge)
    held += 2
    if held % 16 == 0:  # a fresh pipe before this one's 16 slots run out
        reader, writer = os.pipe()
return ['held', held]
"""
    )
    copy = """
import os, shutil
with open("source", "wb") as file:
    file.write(b"x" * 100_000)
shutil.copyfile("source", "copy")
reader, writer = os.pipe()
source = os.open("source", os.O_RDONLY)
try:
    os.splice(source, writer, 1)
    spliced = "spliced"
except PermissionError:
    spliced = "refused"
return [os.path.getsize("copy"), spliced]
"""
    try:
        assert value(runtime, program) == ["refused", 1, 0]
        assert value(runtime, copy) == [100_000, "refused"]
    finally:
        runtime.close()


PIN_CACHED_PAGES = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.syscall.restype = ctypes.c_long
class Piece(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]
source = os.open(CACHED, os.O_RDONLY)
size = os.fstat(source).st_size
held = {}
for way in ("splice", "sendfile", "vmsplice"):
    pieces = 0
    try:
        for offset in range(0, size, 2 << 20):  # one byte per large folio of the cache
            reader, writer = os.pipe()
            if way == "splice":
                os.splice(source, writer, 1, offset_src=offset)
            elif way == "sendfile":
                os.sendfile(writer, source, offset, 1)
            else:
                mapped = libc.mmap(None, 4096, 1, 2, source, offset)  # PROT_READ, MAP_PRIVATE
                piece = Piece(mapped, 1)
                if libc.syscall(278, writer, ctypes.byref(piece), 1, 0) != 1:  # vmsplice
                    raise OSError(ctypes.get_errno(), "vmsplice")
            pieces += 1
        held[way] = pieces
    except OSError as exc:
        held[way] = errno.errorcode[exc.errno]
return held
"""


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroups", "proc-walk"])
def test_a_run_cannot_pin_the_hosts_cached_file_pages_in_pipes(
    tmp_path: Path, cgroups: bool
) -> None:
    # A pipe buffer holds the whole large folio of the page cache that one spliced byte lies
    # in. Pages the host had cached are charged to no cgroup of the run, and no reclaim frees
    # them while the pipe holds them: 256 bytes spliced 2 MiB apart from a file the host had
    # read kept 487 MB of the host's cache beside a 64 MB budget.
    cached = tmp_path / "dataset.bin"
    cached.write_bytes(os.urandom(1 << 20) * 32)
    assert len(cached.read_bytes()) == 32 << 20  # in the host's page cache now
    sandbox = CodeSandbox(read=[str(tmp_path)], cgroups=cgroups)
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_memory_mb=64, sandbox=sandbox))
    try:
        held = value(runtime, PIN_CACHED_PAGES.replace("CACHED", repr(str(cached))))
        assert held == {"splice": "EPERM", "sendfile": "EPERM", "vmsplice": "EPERM"}
        copy = f"import shutil\nreturn shutil.copyfile({str(cached)!r}, 'copy')"
        assert value(runtime, copy) == "copy"  # falls back to reading and writing
    finally:
        runtime.close()


def test_memory_policies_cannot_hold_kernel_memory_no_budget_counts(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each range of a shared mapping given a memory policy of its own keeps a policy node and a
    # policy (about 340 bytes) with the file after the mapping is gone, charged to no cgroup:
    # 200,000 calls over a sparse scratch file took 63 MB of the host in 1.7 s of CPU. The
    # policy calls answer as on a kernel without NUMA.
    program = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.syscall.restype = ctypes.c_long
node = ctypes.c_ulong(1)
fd = os.open('policies', os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 1 << 40)  # sparse: none of the scratch directory's size
base = libc.mmap(None, 64 << 20, 3, 1, fd, 0)  # MAP_SHARED
held = 0
for page in range(0, 64 << 20, 8192):
    mode = 2 if page % 16384 else 3  # MPOL_BIND, MPOL_INTERLEAVE: one range each
    if libc.syscall(237, ctypes.c_void_p(base + page), ctypes.c_ulong(4096), ctypes.c_int(mode),
                    ctypes.byref(node), ctypes.c_ulong(64), ctypes.c_uint(0)) != 0:  # mbind
        return ['refused', errno.errorcode[ctypes.get_errno()], held]
    held += 1
return ['held', held]
"""
    assert value(runtime, program) == ["refused", "ENOSYS", 0]
    assert value(runtime, "import os\nreturn len(os.sched_getaffinity(0)) > 0") is True


def test_prctl_options_cannot_hold_kernel_memory_or_change_the_machines_scheduling(
    runtime: SubprocessCodeRuntime,
) -> None:
    # PR_FUTEX_HASH gives a process a private futex hash of as many 64-byte slots as it asks,
    # in kernel memory no resident set shows: without cgroups one process held 256 MB beside
    # its 256 MB budget, and each process of a run may hold one. PR_SET_VMA (named anonymous
    # mappings, uncharged strings) and PR_SCHED_CORE (core scheduling for the whole machine)
    # reach beyond the run where the kernel has them. All three are refused; threads, whose
    # futexes the kernel hashes by itself, keep working.
    program = """
import ctypes, errno, mmap, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
area = mmap.mmap(-1, 1 << 20, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
address = ctypes.addressof(ctypes.c_char.from_buffer(area))
name = ctypes.create_string_buffer(b'x' * 79)
attempts = {
    'futex hash': (78, 1, 1 << 22, 0, 0),  # PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS: 256 MB
    'vma name': (0x53564D41, 0, address, 4096, ctypes.addressof(name)),  # PR_SET_VMA
    'core cookie': (62, 1, 0, 0, 0),  # PR_SCHED_CORE, PR_SCHED_CORE_CREATE for this thread
}
seen = {}
for what, arguments in attempts.items():
    held = libc.prctl(*arguments) == 0
    seen[what] = 'held' if held else errno.errorcode[ctypes.get_errno()]
done = []
workers = [threading.Thread(target=done.append, args=(n,)) for n in range(8)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
seen['threads'] = len(done)
return seen
"""
    assert value(runtime, program) == {
        "futex hash": "EPERM",
        "vma name": "EPERM",
        "core cookie": "EPERM",
        "threads": 8,
    }


def test_landlock_rulesets_of_the_programs_own_cannot_hold_kernel_memory(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each rule of a Landlock ruleset is about 100 bytes of kernel memory, held while the
    # ruleset's descriptor is open, that no resident set shows: without cgroups the files of
    # /usr added to rulesets held 23 MB per 1.5 s of CPU beside the run's budget. The calls
    # answer as on a kernel without Landlock; the run is confined already.
    program = """
import ctypes, errno, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
handled = ctypes.create_string_buffer(struct.pack('QQQ', 1 << 2, 0, 0))  # READ_FILE
ruleset = libc.syscall(444, handled, 24, 0)  # landlock_create_ruleset
if ruleset < 0:
    return ['refused', errno.errorcode[ctypes.get_errno()]]
held = 0
for folder, _, names in os.walk('/usr/lib'):
    for name in names:
        try:
            target = os.open(os.path.join(folder, name), os.O_PATH)
        except OSError:
            continue
        rule = ctypes.create_string_buffer(struct.pack('=Qi', 1 << 2, target))
        held += libc.syscall(445, ruleset, 1, rule, 0) == 0  # landlock_add_rule
        os.close(target)
        if held == 20000:
            return ['held', held]
return ['held', held]
"""
    assert value(runtime, program) == ["refused", "ENOSYS"]


HOST_KILLED_MIDWAY = """
import asyncio, sys
from dsh_tools import CodeRunRequest, CodeRuntimeConfig, SubprocessCodeRuntime
runtime = SubprocessCodeRuntime(CodeRuntimeConfig())
assert asyncio.run(runtime.run(CodeRunRequest("return 1", []))).value == 1
print("running", flush=True)
asyncio.run(runtime.run(CodeRunRequest("import time\\ntime.sleep(600)", [])))
"""


def test_no_run_takes_the_hosts_pool_of_huge_pages(runtime: SubprocessCodeRuntime) -> None:
    # MAP_HUGETLB pages come from the machine's pool (vm.nr_hugepages, reserved for a
    # database, say), which neither a resident set nor a run's cgroups count: measured, a run
    # took the whole pool from the host. Refused whatever the pool holds (here, where it is
    # empty, the kernel itself answers ENOMEM); ordinary mappings keep working.
    program = """
import mmap
seen = {}
for name, flags in (('private', mmap.MAP_PRIVATE), ('shared', mmap.MAP_SHARED)):
    try:
        mmap.mmap(-1, 2 << 20, flags | mmap.MAP_ANONYMOUS | 0x40000)  # MAP_HUGETLB
        seen[name] = 'mapped'
    except OSError as error:
        seen[name] = error.errno
ordinary = mmap.mmap(-1, 4 << 20, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
ordinary[-1] = 1
with open('file', 'w+b') as file:
    file.truncate(1 << 20)
    shared = mmap.mmap(file.fileno(), 1 << 20)
    shared[0] = 2
seen['ordinary'] = [ordinary[-1], shared[0]]
return seen
"""
    assert value(runtime, program) == {"private": 1, "shared": 1, "ordinary": [1, 2]}  # EPERM


def test_a_killed_host_leaves_no_scratch_mount_point(tmp_path: Path) -> None:
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_KILLED_MIDWAY], env=environment, stdout=subprocess.PIPE
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline() == b"running\n"
        assert [path.name[:17] for path in tmp_path.iterdir()] == ["dsh-code-scratch-"]
    finally:
        host.kill()
        host.wait()
    # The template notices its host is gone and removes what it can before it exits.
    deadline = time.monotonic() + 30
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.iterdir()) == []


def test_a_scratch_mount_point_left_by_a_host_killed_with_its_template_goes_with_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A supervisor that ends a whole process tree kills the template with its host: neither
    # can remove the mount point then. The next template start does, if it is empty and its
    # host is gone; anything else stays.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(gone.stdout)
    left = tmp_path / f"dsh-code-scratch-{dead}-abc123"
    kept = [tmp_path / f"dsh-code-scratch-{os.getpid()}-def456", tmp_path / "dsh-code-scratch-x"]
    not_empty = tmp_path / f"dsh-code-scratch-{dead}-ghi789"
    for path in [left, *kept, not_empty]:
        path.mkdir()
    (not_empty / "file").write_text("not ours to remove")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig())
    try:
        assert value(runtime, "return 1") == 1
        names = {path.name for path in tmp_path.iterdir()}
        assert left.name not in names
        assert {path.name for path in [*kept, not_empty]} <= names
        (mount_point,) = names - {path.name for path in [*kept, not_empty]}
        assert mount_point.startswith(f"dsh-code-scratch-{os.getpid()}-")  # named after its host
    finally:
        runtime.close()


def test_byte_range_locks_no_cgroup_charges_end_the_run_as_its_memory(
    runtime: SubprocessCodeRuntime,
) -> None:
    # Each lock is kernel memory the kernel charges to no cgroup: eight million of them, made
    # within the default compute budget, held 1.5 GB of the host beside a 512 MB budget.
    program = """
import fcntl, os, time
fd = os.open('locks', os.O_RDWR | os.O_CREAT)
for start in range(2 * 20_000, 0, -2):  # apart, so that none merges with the next
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, start)
time.sleep(10)
return 'held'
"""
    result = run(runtime, program)
    assert result.error is not None and result.error.kind == "worker-exit", result
    assert "memory budget exhausted" in result.error.message


def test_flock_locks_kept_past_their_descriptors_end_the_run_as_its_memory(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A mapping keeps its file, and the file its flock lock, after the descriptor is closed:
    # the descriptor limit does not bound them, and each is the same uncharged kernel memory.
    program = """
import ctypes, fcntl, os, time
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
for name in range(100):
    with open(f'locked-{name}', 'wb') as file:
        file.truncate(4096)
for count in range(20_000):
    fd = os.open(f'locked-{count % 100}', os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    libc.mmap(None, 4096, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE
    os.close(fd)
time.sleep(10)
return 'held'
"""
    result = run(runtime, program)
    assert result.error is not None and result.error.kind == "worker-exit", result
    assert "memory budget exhausted" in result.error.message


def test_locks_left_by_exited_processes_on_a_shared_descriptor_table_are_not_hidden(
    runtime: SubprocessCodeRuntime,
) -> None:
    # The init counts the run's locks in its /proc/locks, which shows no lock whose holder's
    # pid is gone. A POSIX lock belongs to a descriptor table, not to the process that took it:
    # children sharing the worker's table (clone with CLONE_FILES, not a thread) that each took
    # a thousand locks and exited left them all to the worker, uncounted, and a run so held
    # 400,000 locks (77 MB of kernel memory no cgroup charges) beside a 64 MB budget.
    program = """
import ctypes, errno, fcntl, os, signal, time
libc = ctypes.PyDLL(None, use_errno=True)  # holds the GIL across the call, for the child too
CLONE_FILES = 0x400
fds = [os.open(f'locks-{n}', os.O_RDWR | os.O_CREAT) for n in range(100)]
for batch in range(20):
    child = libc.syscall(56, CLONE_FILES | signal.SIGCHLD, 0, 0, 0, 0)
    if child == 0:
        for fd in fds:  # ten apart at each file, so that none merges with the next
            for start in range(20 * batch, 20 * batch + 20, 2):
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, start)
        os._exit(0)
    if child < 0:
        return errno.errorcode[ctypes.get_errno()]
    os.waitpid(child, 0)
time.sleep(2)  # several counts of the run's locks
return 'held'
"""
    result = run(runtime, program)
    if result.error is None:
        assert result.value == "EPERM", result  # not a thread: no table of the worker's shared
    else:
        assert result.error.kind == "worker-exit", result
        assert "memory budget exhausted" in result.error.message


@pytest.mark.parametrize(("locks", "held"), [(1_000, True), (10_000, False)])
def test_concurrent_runs_may_hold_a_thousand_locks_each_but_not_ten_thousand(
    locks: int, held: bool
) -> None:
    # A run's init counts its locks by reading the run's /proc/locks, which returns a page
    # (about sixty lines) a read while the kernel walks the machine's list of locks from its
    # start for every read, holding every file lock call of the host meanwhile: the cost grows
    # with the square of the locks. Under the former bound of 16,384, four runs that slept
    # holding 10,000 locks each kept their inits, outside every budget, busy on more than a
    # core (9.3 s of CPU in 4 s; 0.7 s under this bound). A thousand locks, which no program
    # of a run comes near (a database takes a few), still work.
    config = CodeRuntimeConfig(
        compute_ms=20000,
        max_wall_ms=30000,
        max_parallel_runs=4,
        sandbox=CodeSandbox(cgroups=False),
    )
    program = f"""
import fcntl, os, time
fd = os.open('locks', os.O_RDWR | os.O_CREAT)
for start in range(0, 2 * {locks}, 2):  # apart, so that none merges with the next
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, start)
time.sleep(4)
return 'held'
"""

    async def runs(runtime: SubprocessCodeRuntime) -> list[CodeRunResult]:
        requests = [runtime.run(CodeRunRequest(program, [])) for _ in range(4)]
        return list(await asyncio.gather(*requests))

    runtime = SubprocessCodeRuntime(config)
    try:
        results = asyncio.run(runs(runtime))
    finally:
        runtime.close()
    for result in results:
        if held:
            assert result.value == "held", result
        else:
            assert result.error is not None and result.error.kind == "worker-exit", result
            assert "memory budget exhausted" in result.error.message


def test_a_program_keeps_its_databases_and_classic_locks(runtime: SubprocessCodeRuntime) -> None:
    # Open file description locks, which /proc/locks shows for every process of the host and
    # so cannot be counted as the run's, answer as a kernel before them: programs fall back.
    program = """
import errno, fcntl, os, sqlite3, struct
fd = os.open('data', os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
try:
    fcntl.fcntl(fd, 37, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 20, 10, 0))  # F_OFD_SETLK
    open_description = 'allowed'
except OSError as exc:
    open_description = errno.errorcode[exc.errno]
db = sqlite3.connect('notes.db')
with db:
    db.execute('create table notes (text)')
    db.executemany('insert into notes values (?)', [('a',), ('b',)])
return [open_description, db.execute('select count(*) from notes').fetchone()[0]]
"""
    assert value(runtime, program) == ["EINVAL", 2]


def test_access_control_lists_cannot_hold_memory_no_budget_counts(
    runtime: SubprocessCodeRuntime,
) -> None:
    # A POSIX ACL is kernel memory (8,000 users: 64 KiB) that neither the run's cgroup nor its
    # scratch tmpfs's size counts: 3,000 directories took 444 MB beside a 128 MB budget.
    program = """
import os, struct
everyone = 0xFFFFFFFF
entries = [struct.pack('<HHI', 1, 7, everyone)]  # owner
entries += [struct.pack('<HHI', 2, 7, uid) for uid in range(1000, 9000)]  # named users
entries += [struct.pack('<HHI', tag, 7, everyone) for tag in (4, 0x10, 0x20)]
acl = struct.pack('<I', 2) + b''.join(entries)
made = 0
try:
    for n in range(3000):
        os.mkdir(f'd{n}')
        os.setxattr(f'd{n}', 'system.posix_acl_access', acl)
        os.setxattr(f'd{n}', 'system.posix_acl_default', acl)
        made += 1
except OSError as exc:
    return ['refused', made, exc.errno]
return ['held', made]
"""
    assert value(runtime, program) == ["refused", 0, errno.EOPNOTSUPP]


REDIRECT_OTHER_SCRATCH = """
import os
planted = []
for name in os.listdir(SHARED):
    path = os.path.join(SHARED, name)
    if name.startswith('dsh-code-scratch-') and not os.path.ismount(path):  # not this run's
        os.rename(path, path + '.moved')
        os.symlink('/proc/self/cwd', path)
        planted.append(name)
return planted
"""


REMOVE_OTHER_SCRATCH = """
import os
removed = []
for name in os.listdir(SHARED):
    if name.startswith('dsh-code-scratch-') and not os.path.ismount(os.path.join(SHARED, name)):
        os.rmdir(os.path.join(SHARED, name))
        removed.append(name)
return removed
"""


@pytest.mark.parametrize("granted", ["temporary directory", "its parent"])
def test_a_run_cannot_remove_the_scratch_mount_point_of_another_tool_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, granted: str
) -> None:
    # One tool system of a harness is granted the harness's temporary directory (or a
    # directory holding it), where every runtime keeps its empty scratch mount point: its
    # run would remove the other tool system's, whose every later run then failed.
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    grant = str(shared if granted == "temporary directory" else tmp_path)
    victim = SubprocessCodeRuntime(CodeRuntimeConfig())
    attacker = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[grant])))
    try:
        assert value(victim, "return 1") == 1
        result = run(attacker, REMOVE_OTHER_SCRATCH.replace("SHARED", repr(str(shared))))
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert f"the write grant {grant!r} holds the temporary directory" in result.error.message
        assert [value(victim, "return 2") for _ in range(4)] == [2, 2, 2, 2]
        assert len(os.listdir(shared)) == 2  # both mount points, neither removed
    finally:
        victim.close()
        attacker.close()


def test_a_write_grant_beneath_the_temporary_directory_is_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "out").mkdir()
    sandbox = CodeSandbox(write=[str(tmp_path / "out")])
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=sandbox))
    try:
        program = f"open({str(tmp_path / 'out' / 'a')!r}, 'w').write('x')\nreturn 'written'"
        assert value(runtime, program) == "written"
    finally:
        runtime.close()


@pytest.mark.parametrize("attack", [REDIRECT_OTHER_SCRATCH, REMOVE_OTHER_SCRATCH])
def test_another_harness_cannot_redirect_or_remove_the_scratch_of_a_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attack: str
) -> None:
    # Another harness on the machine (a temporary directory of its own, here another one)
    # whose tool system is granted this harness's temporary directory: a run there replaces
    # the scratch mount point of this harness's runtime with a link to /proc/self/cwd, or
    # removes it. This runtime's next worker would then have worked in, and been granted, its
    # template's working directory (the harness's own, with its secrets); refused that, every
    # later run of the runtime failed until it was started again: now it makes a fresh one.
    shared, harness, elsewhere = tmp_path / "shared", tmp_path / "harness", tmp_path / "other"
    for directory in (shared, harness, elsewhere):
        directory.mkdir()
    (harness / "secret.env").write_text("API_KEY=never granted")
    monkeypatch.chdir(harness)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    victim = SubprocessCodeRuntime(CodeRuntimeConfig())
    attacker = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[str(shared)])))
    reader = "import os\nreturn [open(name).read() for name in os.listdir('.')]"
    try:
        assert value(victim, reader) == []
        monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))  # the other harness's
        attacked = value(attacker, attack.replace("SHARED", repr(str(shared))))
        assert len(attacked) == 1, attacked
        # The workers prepared before the attack, then the run that finds the mount point
        # gone (which may fail, naming it), then the later ones on a fresh mount point. On a
        # loaded machine a worker the pool forked before that run found it may fail too,
        # a run later: eight runs leave the last three past both.
        results = [run(victim, reader) for _ in range(8)]
        failed = [result.error for result in results if result.error is not None]
        assert len(failed) <= 2, results
        assert all("the scratch mount point" in error.message for error in failed), results
        assert all(result.value == [] for result in results if result.error is None), results
        assert all(result.error is None for result in results[-3:]), results
    finally:
        victim.close()
        attacker.close()
    # The fresh mount point goes with the runtime; what the attack left is the attack's.
    made = [path for path in shared.iterdir() if not path.is_symlink() and "." not in path.name]
    assert made == []


FLAT_DONE_FRAME = """
import os
count = 32 << 20
# A Done frame by hand (msgpack): ['Done', [ArrayMarker(count), None * count], None].
body = bytearray(b"\\x93\\xa4Done\\xdd" + (count + 1).to_bytes(4, "big"))
body += b"\\x92\\xa5array\\xce" + count.to_bytes(4, "big") + b"\\xc0" * count + b"\\xc0"
os.write(4, len(body).to_bytes(8, "big"))
view = memoryview(body)
while view:
    view = view[os.write(4, view[: 1 << 20]) :]
"""

HOST_MEASURED = """
import sys
from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem
config = ToolsConfig(mode="code", max_output_bytes=256 * 1024)
with ToolSystem.start(config) as system:
    arguments = {"code": sys.stdin.read(), "description": "forge a flat result"}
    result = system.execute(ExecuteCall(call_id="c1", name="run_code", arguments=arguments))
print("output-limit" in str(result))
# VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec.
with open("/proc/self/status") as status:
    print(next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:")))
"""


def test_a_forged_flat_result_costs_the_host_about_its_output_cap() -> None:
    # The worker writes its channel directly: one 32 MiB Done frame of one-byte tokens, far
    # beyond max_output_bytes. The host may spill its body to a file and must fail the run
    # with output-limit; its own memory should stay near the documented per-run figure.
    host = subprocess.run(
        [sys.executable, "-c", HOST_MEASURED],
        input=FLAT_DONE_FRAME.encode(),
        capture_output=True,
        check=True,
    )
    limited, peak_mb = host.stdout.split()[-2:]
    assert limited == b"True", host.stdout
    assert int(peak_mb) < 200, f"the host peaked at {peak_mb} MB"
