"""The sandbox's per-run cgroups and its fallback, against hostile programs.

Where the runtime may make cgroups (root with the v1 ``memory``, ``cpuacct`` and ``pids``
hierarchies, as on CI), each run is measured by them: CPU of children the kernel reaps by
itself and kernel memory (socket and pipe buffers) are charged. With ``CodeSandbox(cgroups=False)``
(what a host without writable cgroups gets) the init's ``/proc`` walk measures the run and the
worker may not change ``SIGCHLD``'s action. Either way every cgroup is removed after the runs,
after the runtime and after a template that was killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import platform
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import assert_next_run_works, run, value

from dsh_tools import CodeRunRequest, CodeRuntimeConfig, CodeSandbox, SubprocessCodeRuntime
from dsh_tools.codebridge import CodeRunResult
from dsh_tools.codebridge._sandbox._cgroup import (
    CROWDED_MEMORY_CGROUPS,
    HIERARCHIES,
    CgroupMeter,
    CgroupPlan,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is Linux's"
)


def _own_cgroup(hierarchy: str, pid: int | str = "self") -> Path | None:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _number, controllers, path = line.split(":", 2)
        if hierarchy in controllers.split(","):
            return Path(f"/sys/fs/cgroup/{hierarchy}{path}")
    return None


def _cgroups_writable() -> bool:
    for hierarchy in HIERARCHIES:
        base = _own_cgroup(hierarchy)
        if base is None:
            return False
        probe = base / f"dsh-test-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return False
    return True


CGROUPS = _cgroups_writable()
needs_cgroups = pytest.mark.skipif(not CGROUPS, reason="cgroups are not writable here")


def runtime_of(
    *, cgroups: bool, max_open_files: int = 256, **budgets: float
) -> SubprocessCodeRuntime:
    settings: dict[str, float] = {"compute_ms": 20000, "max_wall_ms": 30000, "max_memory_mb": 256}
    settings.update(budgets)
    return SubprocessCodeRuntime(
        CodeRuntimeConfig(
            compute_ms=settings["compute_ms"],
            max_wall_ms=settings["max_wall_ms"],
            max_memory_mb=settings["max_memory_mb"],
            sandbox=CodeSandbox(cgroups=cgroups, max_open_files=max_open_files),
        )
    )


@pytest.fixture(scope="module")
def measured() -> Iterator[SubprocessCodeRuntime]:
    runtime = runtime_of(cgroups=True, compute_ms=1000, max_memory_mb=128)
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def fallback() -> Iterator[SubprocessCodeRuntime]:
    runtime = runtime_of(cgroups=False, compute_ms=1000, max_memory_mb=128)
    try:
        yield runtime
    finally:
        runtime.close()


def template_parents(template_pid: int) -> list[Path]:
    """The per-template parent cgroups of ``template_pid`` (in every hierarchy)."""
    found = []
    for hierarchy in HIERARCHIES:
        base = _own_cgroup(hierarchy)
        if base is not None and base.is_dir():
            found += sorted(base.glob(f"dsh-code-{template_pid}-*"))
    return found


# --- CPU of children the kernel reaps itself ------------------------------------------------

REAPED_BY_THE_KERNEL = {
    "ignore": "signal.signal(signal.SIGCHLD, signal.SIG_IGN)",
    "nocldwait": """
import ctypes
class Action(ctypes.Structure):
    _fields_ = [('handler', ctypes.c_void_p), ('mask', ctypes.c_ulong * 16),
                ('flags', ctypes.c_int), ('restorer', ctypes.c_void_p)]
action = Action(None, (ctypes.c_ulong * 16)(), 2, None)  # SIG_DFL with SA_NOCLDWAIT
if ctypes.CDLL(None, use_errno=True).sigaction(signal.SIGCHLD, ctypes.byref(action), None):
    raise OSError(ctypes.get_errno(), 'sigaction refused')
""",
}
SHORT_LIVED_CHILDREN = """
import os, signal, time
{setup}
for _ in range(245):
    child = os.fork()
    if child == 0:
        start = time.process_time()
        while time.process_time() - start < 0.015:
            pass
        os._exit(0)
    try:
        while True:  # gone without a wait: the kernel reaped it
            os.kill(child, 0)
            time.sleep(0.001)
    except ProcessLookupError:
        pass
return '3.7 CPU-seconds in children no one waited for'
"""


@needs_cgroups
@pytest.mark.parametrize("how", sorted(REAPED_BY_THE_KERNEL))
def test_children_the_kernel_reaps_are_charged_to_the_run(
    measured: SubprocessCodeRuntime, how: str
) -> None:
    result = run(measured, SHORT_LIVED_CHILDREN.format(setup=REAPED_BY_THE_KERNEL[how]))
    assert result.error is not None and result.error.kind == "timeout", result
    assert "compute budget exhausted" in result.error.message
    assert_next_run_works(measured)


@pytest.mark.parametrize("how", sorted(REAPED_BY_THE_KERNEL))
def test_without_cgroups_a_program_cannot_have_its_children_reaped_unseen(
    fallback: SubprocessCodeRuntime, how: str
) -> None:
    result = run(fallback, SHORT_LIVED_CHILDREN.format(setup=REAPED_BY_THE_KERNEL[how]))
    assert result.error is not None and result.error.kind == "exception", result
    assert "PermissionError" in result.error.message or "sigaction refused" in result.error.message
    assert_next_run_works(fallback)


ORDINARY_PROCESSES = """
import asyncio, os, signal, subprocess, sys
seen = {'handler': signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL}
seen['run'] = subprocess.run([sys.executable, '-c', 'print(6 * 7)'],
                             capture_output=True, text=True).stdout.strip()
seen['bash'] = subprocess.run(['bash', '-c', 'sleep 0.05 & wait; echo $(echo waited) | cat'],
                              capture_output=True, text=True).stdout.strip()
seen['pipeline'] = subprocess.run('echo a b c | wc -w', shell=True,
                                  capture_output=True, text=True).stdout.strip()
async def child():
    process = await asyncio.create_subprocess_exec(
        sys.executable, '-c', 'print("async")', stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    return out.decode().strip()
seen['asyncio'] = await child()
pid = os.fork()
if pid == 0:
    os._exit(7)
seen['fork'] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
return seen
"""


@pytest.mark.parametrize("cgroups", [True, False])
def test_ordinary_processes_keep_working_in_either_mode(
    measured: SubprocessCodeRuntime, fallback: SubprocessCodeRuntime, cgroups: bool
) -> None:
    assert value(measured if cgroups else fallback, ORDINARY_PROCESSES) == {
        "handler": True,
        "run": "42",
        "bash": "waited",
        "pipeline": "3",
        "asyncio": "async",
        "fork": 7,
    }


# --- kernel memory ---------------------------------------------------------------------------

FILLED_SOCKET_PAIRS = """
import socket
held = []
for _ in range(3000):
    left, right = socket.socketpair()
    left.setblocking(False)
    try:
        while True:
            left.send(b'x' * 65536)
    except BlockingIOError:
        pass
    held.append((left, right))
return 'over 600MB of socket buffers'
"""
FILLED_PIPES = """
import fcntl, os
held = []
for _ in range(2000):
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
    except PermissionError:
        pass  # over the user's pipe allowance: the kernel's default size, then a page
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b'x' * 65536)
    except BlockingIOError:
        pass
    held.append((read_end, write_end))
return 'pipe buffers'
"""


@needs_cgroups
@pytest.mark.parametrize("program", [FILLED_SOCKET_PAIRS, FILLED_PIPES], ids=["sockets", "pipes"])
def test_kernel_buffers_are_charged_to_the_memory_budget(program: str) -> None:
    # Small enough that pipes exceed it too: the kernel holds a user's pipes to 64 MiB of
    # buffers (then one page each) unless it may raise that. The buffers, not the descriptors,
    # are what is measured: the run may open thousands.
    runtime = runtime_of(cgroups=True, max_open_files=8192, max_memory_mb=48)
    try:
        result = run(runtime, program)
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert "memory budget exhausted" in result.error.message
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@needs_cgroups
def test_a_burst_of_many_processes_ends_as_the_memory_budget() -> None:
    runtime = runtime_of(cgroups=True, max_memory_mb=48)
    program = """
import os, time
for _ in range(48):
    if os.fork() == 0:
        block = b'x' * (8 << 20)  # 384 MiB at once, past the 160 MiB ceiling too
        time.sleep(30)
        os._exit(0)
time.sleep(30)
"""
    try:
        result = run(runtime, program)
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert "memory budget exhausted" in result.error.message
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def _started_native(code: bytes) -> str:
    """A Code Mode program that starts ``code`` as a static x86_64 program (no libc) in a
    child and waits."""
    base = 0x400000
    headers = 64 + 56
    size = headers + len(code)
    elf = b"\x7fELF\x02\x01\x01" + bytes(9)
    elf += struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, base + headers, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    elf += struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)  # one R+X segment
    return f"""
import os, time
with open("native", "wb") as file:
    file.write({elf + code!r})
os.chmod("native", 0o755)
if os.fork() == 0:
    os.execv("native", ["native"])
time.sleep(60)
"""


def _spinning_sessions(depth: int) -> bytes:
    """``2 ** depth`` spinning processes, each of which tried to start a session of its own
    (``setsid``) before each of its forks."""
    return (
        b"\x41\xbc"
        + struct.pack("<I", depth)  # mov r12d, depth
        + b"\xb8\x70\x00\x00\x00\x0f\x05"  # again: setsid (eax 112)
        + b"\xb8\x39\x00\x00\x00\x0f\x05"  # fork (eax 57)
        + b"\x41\xff\xcc\x75\xed"  # dec r12d; jnz again
        + b"\xeb\xfe"  # spin: jmp spin
    )


OWN_SESSION = """
import os
import platform
own = os.getsid(0) == os.getpid()
try:
    os.setsid()
    refused = 0
except OSError as exc:
    refused = exc.errno
return [own, refused]
"""
"""Whether the worker leads a session of its own (not its init's), and how a new one fails."""


def _autogroups() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


SPINNING_FORK_BOMB = b"\xb8\x39\x00\x00\x00\x0f\x05\xeb\xf7"  # again: fork (eax 57); jmp again
"""Every process forks for ever, failed forks included, never pausing: as many spinning
processes as the kernel lets the run have."""


@needs_cgroups
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the bomb is x86_64 machine code")
@pytest.mark.skipif(not _autogroups(), reason="the kernel does not schedule by session here")
def test_a_spinning_fork_bomb_ends_by_its_budget_not_its_wall_ceiling() -> None:
    # Two thousand spinning processes (the run's task ceiling) in its init's session had two
    # thousand shares of the CPU against one for the init: its measuring came so late that the
    # run went on, every core of the host busy, until its wall ceiling. In a session of their
    # own they are one entity of the scheduler, and the process budget ends the run.
    runtime = runtime_of(cgroups=True, max_wall_ms=8000)
    try:
        result = run(runtime, _started_native(SPINNING_FORK_BOMB))
        assert result.error is not None and result.error.kind == "worker-exit", result.error
        assert "budget exhausted" in result.error.message
        assert value(runtime, OWN_SESSION) == [True, errno.EPERM]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the bomb is x86_64 machine code")
@pytest.mark.skipif(not _autogroups(), reason="the kernel does not schedule by session here")
def test_without_cgroups_spinning_processes_in_sessions_of_their_own_end_by_the_budget() -> None:
    # Where the kernel schedules by session (autogroups), each session is one entity. Under a
    # harness that is not root, 17,000 spinning processes (the runtime's task ceiling), each
    # in a session of its own, had 17,000 shares of the CPU against one for the host and one
    # for the run's init, which measured too late for any budget: the run went on until its
    # wall ceiling, the host standing still for 15 s. In its init's session they starved the
    # init alone. Without cgroups the run keeps to its worker's own session (setsid is
    # refused), apart from the init's.
    runtime = runtime_of(cgroups=False, max_wall_ms=8000)
    try:
        result = run(runtime, _started_native(_spinning_sessions(11)))
        assert result.error is not None and result.error.kind == "worker-exit", result.error
        assert "budget exhausted" in result.error.message
        assert value(runtime, OWN_SESSION) == [True, errno.EPERM]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.fixture
def scratch_root(tmp_path: Path) -> Iterator[int]:
    """A descriptor of the directory a meter takes for its run's scratch tmpfs."""
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


@needs_cgroups
def test_the_kernel_ceiling_ends_what_the_sampling_would_miss(scratch_root: int) -> None:
    plan = CgroupPlan(wanted=True, max_memory_mb=16, max_processes=4)  # ceiling: 96 MiB
    plan.prepare()
    run_cgroups = plan.new_run()
    assert run_cgroups is not None
    meter = CgroupMeter(run_cgroups.fds, scratch_root)
    child = os.fork()
    if child == 0:
        try:
            meter.join()
            block = b"x" * (400 << 20)
            os.write(1, block[:0])
        finally:
            os._exit(0)
    try:
        plan.started(child, run_cgroups)  # closes the directories (the meter's too, here)
        _pid, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        assert meter.oom_killed()
    finally:
        plan.ended(child)
        plan.close()


@needs_cgroups
def test_swapped_out_memory_counts_and_is_held_with_the_rest() -> None:
    # A host short of memory moves a run's pages to swap: memory.usage_in_bytes no longer
    # shows them, so the run could go on allocating until the host's swap was full, past its
    # budget and its kernel ceiling alike. Where the kernel accounts swap, the run's memory and
    # swap together are held at the ceiling and measured for the budget.
    plan = CgroupPlan(wanted=True, max_memory_mb=16, max_processes=4)
    plan.prepare()
    run_cgroups = plan.new_run()
    assert run_cgroups is not None
    memory = f"/proc/self/fd/{run_cgroups.fds[0]}"
    try:
        if not os.path.exists(f"{memory}/memory.memsw.limit_in_bytes"):
            pytest.skip("this kernel does not account swap to cgroups")
        ceiling = Path(f"{memory}/memory.limit_in_bytes").read_text()
        assert int(ceiling) == 96 << 20  # twice the budget and 64 MiB
        assert Path(f"{memory}/memory.memsw.limit_in_bytes").read_text() == ceiling
    finally:
        plan.discard(run_cgroups)
        plan.close()


@needs_cgroups
def test_a_reaped_runs_cgroup_still_holding_a_process_is_removed_on_a_retry(
    scratch_root: int,
) -> None:
    # A run's child is reaped while another process of the run is still attached (the kernel
    # detaches killed processes a moment later): removal waits, and a retry (the template makes
    # one every few milliseconds while any waits) removes it once the cgroup is empty.
    plan = CgroupPlan(wanted=True, max_memory_mb=64, max_processes=4)
    plan.prepare()
    run_cgroups = plan.new_run()
    assert run_cgroups is not None
    meter = CgroupMeter(run_cgroups.fds, scratch_root)
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            meter.join()
            if os.fork() == 0:  # a straggler: stays in the run's cgroup until told to go
                os.read(go_r, 1)
        finally:
            os._exit(0)
    parents = template_parents(os.getpid())
    assert len(parents) == len(HIERARCHIES)
    try:
        plan.started(child, run_cgroups)
        os.waitpid(child, 0)
        plan.ended(child)
        assert plan.unremoved
        os.write(go_w, b"x")
        for _ in range(200):
            plan.retry()
            if not plan.unremoved:
                break
            time.sleep(0.01)
        assert not plan.unremoved
        assert all(runs_in(parent) == [] for parent in parents)
    finally:
        os.write(go_w, b"x")
        os.close(go_r)
        os.close(go_w)
        plan.close()


def anonymous_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for {pid}")


@needs_cgroups
def test_the_meter_counts_pipe_and_socket_buffers(scratch_root: int) -> None:
    """What the cgroup charges on this kernel: a child that fills pipes and socket pairs
    raises the run's figure by at least what it queued, while its resident set stays small."""
    plan = CgroupPlan(wanted=True, max_memory_mb=512, max_processes=4)
    plan.prepare()
    assert plan.available, plan.reason
    run_cgroups = plan.new_run()
    assert run_cgroups is not None
    meter = CgroupMeter(run_cgroups.fds, scratch_root)
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            meter.join()
            os.read(go_r, 1)
            import socket

            held = []
            queued = 0
            for _ in range(200):
                read_end, write_end = os.pipe()
                os.set_blocking(write_end, False)
                with contextlib.suppress(BlockingIOError):
                    queued += os.write(write_end, b"x" * 65536)
                held.append((read_end, write_end))
            for _ in range(40):
                left, right = socket.socketpair()
                left.sendall(b"y" * (100 << 10))
                queued += 100 << 10
                held.append((left.detach(), right.detach()))
            os.write(done_w, queued.to_bytes(8, "big"))
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        plan.started(child, run_cgroups)  # closes the directories (the meter's too, here)
        time.sleep(0.1)
        _cpu, before, _count = meter.usage()
        anon_before = anonymous_bytes(child)
        os.write(go_w, b"!")
        queued = int.from_bytes(os.read(done_r, 8), "big")
        _cpu, after, _count = meter.usage()
        anon_growth = anonymous_bytes(child) - anon_before
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        plan.ended(child)
        plan.close()
    assert queued >= 4 << 20
    assert after - before >= queued, (before, after, queued)
    assert anon_growth < queued / 4, anon_growth  # the figure is the kernel's buffers


# --- nothing left behind ---------------------------------------------------------------------


def runs_in(parent: Path) -> list[Path]:
    return [path for path in parent.iterdir() if path.is_dir()]


@needs_cgroups
def test_no_cgroup_outlives_runs_aborts_timeouts_or_the_runtime() -> None:
    runtime = runtime_of(cgroups=True, compute_ms=300, max_wall_ms=1500, max_memory_mb=64)
    programs = [
        "return 1",
        "while True:\n    pass",  # compute budget
        "import time\ntime.sleep(10)",  # wall ceiling
        "import os\nos.fork() == 0 and os.setpgid(0, 0)\nimport time\ntime.sleep(10)",
        "block = bytearray(200 << 20)",  # memory
        "import os\nos._exit(3)",
    ]
    try:
        for _ in range(3):
            for program in programs:
                run(runtime, program)
        template = runtime.template_pid
        assert template is not None
        parents = template_parents(template)
        assert len(parents) == len(HIERARCHIES)
        for parent in parents:  # only the pre-forked workers' runs remain
            # The last run's go once the template has reaped its init and the kernel has
            # detached its killed processes: on a loaded machine that took over 10 s once.
            for _ in range(600):
                if len(runs_in(parent)) <= 2:
                    break
                time.sleep(0.05)
            assert len(runs_in(parent)) <= 2, runs_in(parent)
        assert_next_run_works(runtime)
    finally:
        runtime.close()
    for _ in range(200):  # the template (or, at the latest, its janitor) removes them
        if not template_parents(template):
            break
        time.sleep(0.05)
    assert template_parents(template) == []


@needs_cgroups
def test_a_killed_template_leaves_no_cgroup_and_no_process() -> None:
    runtime = runtime_of(cgroups=True)
    marker = f"dsh-cgroup-orphan-{os.getpid()}"
    program = f"""
import os, subprocess, sys
print('started')  # seen by the host: the run is not retried on a fresh template
if os.fork() == 0:
    os.setpgid(0, 0)  # a group of its own (a session of its own is refused)
    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])
    os._exit(0)
import time
time.sleep(60)
"""
    try:
        assert_next_run_works(runtime)
        template = runtime.template_pid
        assert template is not None

        async def killed_midway() -> CodeRunResult:
            running = asyncio.ensure_future(runtime.run(CodeRunRequest(program, [])))
            await asyncio.sleep(1.0)
            os.kill(template, signal.SIGKILL)
            return await running

        result = asyncio.run(killed_midway())
        assert result.error is not None and result.error.kind == "worker-exit", result
        for _ in range(200):  # the janitor empties and removes them once the template is gone
            if not template_parents(template):
                break
            time.sleep(0.05)
        assert template_parents(template) == []
        assert not any(
            marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes()
            for name in os.listdir("/proc")
            if name.isdigit() and Path(f"/proc/{name}/cmdline").exists()
        )
        assert_next_run_works(runtime)  # a fresh template
    finally:
        runtime.close()


@needs_cgroups
def test_a_new_template_removes_the_cgroups_of_dead_ones() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = []
    for hierarchy in HIERARCHIES:
        base = _own_cgroup(hierarchy)
        assert base is not None
        parent = base / f"dsh-code-{dead.pid}-1"
        (parent / "run-1").mkdir(parents=True)
        stale.append(parent)
    runtime = runtime_of(cgroups=True)
    try:
        assert_next_run_works(runtime)
        assert [parent for parent in stale if parent.exists()] == []
    finally:
        runtime.close()
        for parent in stale:
            for path in (parent / "run-1", parent):
                if path.exists():
                    path.rmdir()


@needs_cgroups
def test_a_run_can_neither_raise_its_cgroup_limits_nor_leave_its_cgroups(
    measured: SubprocessCodeRuntime,
) -> None:
    # The run's cgroups are named in its /proc/self/cgroup; writing their limits, or moving
    # itself to the parent cgroup (outside every ceiling of the run), must fail.
    program = """
import os
import platform
seen = {}
before = open('/proc/self/cgroup').read()
for line in before.split():
    _number, controllers, path = line.split(':', 2)
    if 'run-' not in path:
        continue
    run = f'/sys/fs/cgroup/{controllers}{path}'
    for name, text in (('memory.limit_in_bytes', '-1'), ('memory.memsw.limit_in_bytes', '-1'),
                       ('pids.max', 'max'), ('cgroup.procs', '0'), ('../cgroup.procs', '0'),
                       ('../tasks', str(os.getpid()))):
        try:
            with open(f'{run}/{name}', 'w') as file:
                file.write(text)
            seen[f'{controllers} {name}'] = 'written'
        except OSError as error:
            seen[f'{controllers} {name}'] = type(error).__name__
seen['moved'] = open('/proc/self/cgroup').read() != before
return seen
"""
    seen = dict(value(measured, program))
    assert seen.pop("moved") is False
    assert seen and "written" not in seen.values(), seen
    assert_next_run_works(measured)


def _memory_cgroups() -> int:
    """How many memory cgroups the kernel holds, removed ones it still keeps included."""
    for line in Path("/proc/cgroups").read_text().splitlines():
        fields = line.split()
        if fields[0] == "memory":
            return int(fields[2])
    raise AssertionError("no memory controller in /proc/cgroups")


@pytest.fixture
def crowded_machine() -> Iterator[None]:
    """More memory cgroups on the machine than ``CROWDED_MEMORY_CGROUPS`` while the test runs
    (empty ones of the test's own, which go at once when removed)."""
    base = _own_cgroup("memory")
    assert base is not None
    crowd = base / f"dsh-test-crowd-{os.getpid()}"
    crowd.mkdir()
    made: list[Path] = []
    try:
        while _memory_cgroups() <= CROWDED_MEMORY_CGROUPS + 64:
            made.append(crowd / f"c{len(made)}")
            made[-1].mkdir()
        yield
    finally:
        for path in made:
            path.rmdir()
        crowd.rmdir()


def _cold_file(path: Path, size: int) -> None:
    """A file of ``size`` bytes that is not in the page cache (so a reader brings it in)."""
    path.write_bytes(os.urandom(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # written back first: the kernel drops only clean pages
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _charged_file_cache(memory_cgroup: Path) -> int:
    """The page cache charged to ``memory_cgroup`` and everything beneath it, removed cgroups
    the kernel still keeps included."""
    stat = dict(line.split() for line in (memory_cgroup / "memory.stat").read_text().splitlines())
    return int(stat["total_active_file"]) + int(stat["total_inactive_file"])


@needs_cgroups
def test_runs_leave_no_removed_memory_cgroup_behind_on_a_crowded_machine(
    tmp_path: Path, crowded_machine: None
) -> None:
    # The kernel keeps a removed memory cgroup, offline, for as long as a page charged to it
    # stays cached, and the machine has room for 65,535 memory cgroups in all: a run that
    # read one page of a file nothing had cached left its cgroup behind, so a hostile run
    # repeated (or many ordinary ones) could use them up, for everyone on the machine. What
    # keeps a removed run's cgroup still counts in its parent's (the template's).
    cold = tmp_path / "cold"
    cold.mkdir()
    runs = 6
    for number in range(runs):
        _cold_file(cold / f"{number}.bin", 1 << 20)
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(read=[str(cold)]))
    )
    try:
        for number in range(runs):
            program = f"return len(open({str(cold / f'{number}.bin')!r}, 'rb').read())"
            assert value(runtime, program) == 1 << 20
        template = runtime.template_pid
        assert template is not None
        [parent] = [path for path in template_parents(template) if "/memory/" in str(path)]
        for _ in range(600):  # until the template has removed the runs (but the pre-forked)
            if len(runs_in(parent)) <= 2:
                break
            time.sleep(0.05)
        assert len(runs_in(parent)) <= 2, runs_in(parent)
        # Each kept cgroup would hold the mebibyte its run read.
        assert _charged_file_cache(parent) < (runs << 20) // 2, _charged_file_cache(parent)
        assert_next_run_works(runtime)
    finally:
        runtime.close()
