"""Hostile Code Mode programs against the sandbox of a harness that is not root.

Such a harness confines its runs its own way: its template first enters a user namespace that
maps the harness's user to root (so that it may make the others), its runs have no cgroups, and
``RLIMIT_NPROC`` in that namespace holds all of them. Its runs' processes are the harness's
user on the host, the very user whose files, processes and sockets the harness has. Each test
runs a harness as an unprivileged user (``unprivileged_support``; under root, ``nobody``) and
checks a promise of the README's Limits from there: the user's own files, processes and
listeners stay out of reach, nothing of a run outlives it, a fork bomb takes neither the host's
PIDs nor the harness's own processes, a kernel without user namespaces fails every run with a
message naming them, and ordinary programs and their grants work.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest
from sandbox_support import bursting_program
from unprivileged_support import give, harness, unprivileged_uid

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is Linux's"
)


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A directory of the harness's user, for its files, sockets and grants."""
    tmp_path.chmod(0o755)
    return give(tmp_path)


def made(path: Path, mode: int = 0o755) -> Path:
    """``path`` made a directory of the harness's user."""
    path.mkdir(mode=mode)
    return give(path)


def test_an_unprivileged_harness_runs_programs_with_their_grants(place: Path) -> None:
    readable = made(place / "readable")
    (readable / "data.json").write_text('{"rows": [1, 2, 3]}')
    writable = made(place / "writable")
    program = f"""
import json, os, sqlite3, subprocess
rows = json.loads(open({str(readable / "data.json")!r}).read())['rows']
with open('notes.txt', 'w') as notes:
    notes.write('scratch')
database = sqlite3.connect('own.db')
database.execute('create table t (n)')
database.executemany('insert into t values (?)', [(n,) for n in rows])
total = database.execute('select sum(n) from t').fetchone()[0]
database.commit()
database.close()
with open({str(writable / "out.txt")!r}, 'w') as out:
    out.write(str(total))
shell = subprocess.run(['sh', '-c', 'echo from a child'], capture_output=True, text=True)
return [total, sorted(os.listdir('.')), shell.stdout.strip()]
"""
    found = harness(
        f"""
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(
            read=[{str(readable)!r}], write=[{str(writable)!r}])))
        try:
            again = run(runtime, 'import os\\nreturn os.listdir(".")')
            print(json.dumps([run(runtime, {program!r}), again]))
        finally:
            runtime.close()
        """,
        paths=(place,),
    )
    assert found == [
        {"error": None, "value": [6, ["notes.txt", "own.db"], "from a child"]},
        {"error": None, "value": []},  # a fresh scratch directory for the next run
    ]
    written = writable / "out.txt"
    assert written.read_text() == "6"
    assert written.stat().st_uid == unprivileged_uid()  # the harness's user, as any file of it


def test_the_harness_users_own_files_stay_out_of_reach(place: Path) -> None:
    # The run's processes are the harness's user on the host: only the sandbox keeps what that
    # user may read and write (its home, its keys) from the program.
    home = made(place / "home", 0o700)
    secret = home / "secret"
    secret.write_text("the harness's key")
    secret.chmod(0o600)
    give(secret)
    loose = place / "loose-secret"  # in a directory every user may pass
    loose.write_text("another key")
    loose.chmod(0o600)
    give(loose)
    before = {path: path.stat() for path in (home, secret, loose)}
    program = f"""
import os
seen = {{}}
def attempt(label, action):
    try:
        action()
        seen[label] = 'done'
    except OSError as error:
        seen[label] = type(error).__name__
for name, path in (('home', {str(secret)!r}), ('loose', {str(loose)!r})):
    attempt(name + ' read', lambda: open(path).read())
    attempt(name + ' via the init root', lambda: open('/proc/1/root' + path).read())
    attempt(name + ' via a path descriptor',
            lambda: open(f'/proc/self/fd/{{os.open(path, os.O_PATH)}}').read())
    attempt(name + ' append', lambda: open(path, 'a').write('planted'))
    attempt(name + ' chmod', lambda: os.chmod(path, 0o666))
    attempt(name + ' hard link', lambda: os.link(path, name + '-link'))
    attempt(name + ' rename', lambda: os.rename(path, name + '-moved'))
    attempt(name + ' unlink', lambda: os.unlink(path))
os.symlink({str(secret)!r}, 'link')
attempt('through a link', lambda: open('link').read())
attempt('list home', lambda: os.listdir({str(home)!r}))
attempt('plant in home', lambda: open({str(home / "planted")!r}, 'w').write('x'))
attempt('plant beside', lambda: open({str(place / "planted")!r}, 'w').write('x'))
attempt('chmod home', lambda: os.chmod({str(home)!r}, 0o777))
return seen
"""
    found = harness(
        f"""
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox()))
        try:
            print(json.dumps(run(runtime, {program!r})))
        finally:
            runtime.close()
        """,
        paths=(place,),
    )
    assert found["error"] is None, found
    assert "done" not in found["value"].values(), found["value"]
    assert {path: path.stat() for path in (home, secret, loose)} == before
    assert secret.read_text() == "the harness's key" and loose.read_text() == "another key"
    assert sorted(os.listdir(home)) == ["secret"]
    assert not (place / "planted").exists()


def test_the_harness_and_the_users_other_processes_are_out_of_reach() -> None:
    # The harness, a process it started and the run's own init all have the run's user on the
    # host (or its root in the template's namespace): none may be signalled, traced or read.
    program = """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def attempt(call):
    try:
        result = call()
        return 'done' if result is None or result >= 0 else os.strerror(ctypes.get_errno())
    except OSError as error:
        return type(error).__name__
seen = {'pids': sorted(int(name) for name in os.listdir('/proc') if name.isdigit())}
for name, pid in (('harness', HARNESS), ('sibling', SIBLING)):
    seen['kill ' + name] = attempt(lambda: os.kill(pid, signal.SIGKILL))
    seen['pidfd ' + name] = attempt(lambda: os.pidfd_open(pid))
    seen['environ ' + name] = attempt(lambda: open(f'/proc/{pid}/environ', 'rb').read() and None)
seen['init environ'] = attempt(lambda: open('/proc/1/environ', 'rb').read() and None)
seen['init mem'] = attempt(lambda: open('/proc/1/mem', 'rb').read(1) and None)
seen['ptrace init'] = attempt(lambda: libc.ptrace(16, 1, None, None))
seen['getfd init'] = attempt(lambda: libc.syscall(438, libc.syscall(434, 1, 0), 0, 0))
seen['signal init'] = attempt(lambda: os.kill(1, signal.SIGTERM))
return seen
"""
    kill_everything = """
import os, signal, time
children = []
for _ in range(2):
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    children.append(child)
os.kill(-1, signal.SIGKILL)  # every process it may signal but itself
return [os.WTERMSIG(os.waitpid(child, 0)[1]) for child in children]
"""
    found = harness(
        f"""
        import subprocess
        sibling = subprocess.Popen(['sleep', '120'])
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox()))
        try:
            program = {program!r}.replace('HARNESS', str(os.getpid()))
            result = run(runtime, program.replace('SIBLING', str(sibling.pid)))
            everything = run(runtime, {kill_everything!r})
            later = run(runtime, 'return 1')
            print(json.dumps([result, everything, later, sibling.poll()]))
        finally:
            runtime.close()
            sibling.kill()
        """
    )
    result, everything, later, sibling_status = found
    assert result["error"] is None, result
    seen = result["value"]
    assert seen.pop("pids") == [1, 2]  # the run's init and the worker, nothing else
    for check in ("kill harness", "pidfd harness", "kill sibling", "pidfd sibling"):
        assert seen[check] == "ProcessLookupError", seen
    for check in ("environ harness", "environ sibling"):
        assert seen[check] == "FileNotFoundError", seen
    for check in ("init environ", "init mem"):
        assert seen[check] == "PermissionError", seen
    assert seen["ptrace init"] == seen["getfd init"] == os.strerror(1), seen
    assert seen["signal init"] in ("PermissionError", "done"), seen  # refused or ignored
    assert everything == {"error": None, "value": [9, 9]}  # its own children alone
    assert later == {"error": None, "value": 1}
    assert sibling_status is None  # still running


def test_no_listener_of_the_harness_user_is_reached(place: Path) -> None:
    listening = made(place / "sockets")
    program = """
import socket
seen = {}
def attempt(label, action):
    try:
        action()
        seen[label] = 'reached'
    except OSError as error:
        seen[label] = type(error).__name__
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', PORT), timeout=1).sendall(b'x'))
udp = socket.AF_INET, socket.SOCK_DGRAM
attempt('udp', lambda: socket.socket(*udp).sendto(b'x', ('127.0.0.1', PORT)))
attempt('unix', lambda: socket.socket(socket.AF_UNIX).connect(STREAM))
unix = socket.AF_UNIX, socket.SOCK_DGRAM
attempt('unix datagram', lambda: socket.socket(*unix).sendto(b'x', DATAGRAM))
attempt('pair to a path', lambda: socket.socketpair()[0].sendto(b'x', DATAGRAM))
attempt('abstract', lambda: socket.socket(socket.AF_UNIX).connect(ABSTRACT))
return seen
"""
    found = harness(
        f"""
        import socket
        tcp = socket.create_server(('127.0.0.1', 0))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(('127.0.0.1', tcp.getsockname()[1]))
        stream = socket.socket(socket.AF_UNIX)
        stream.bind({str(listening / "stream.sock")!r})
        stream.listen()
        datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        datagram.bind({str(listening / "datagram.sock")!r})
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind('\\0dsh-harness-' + str(os.getpid()))
        abstract.listen()
        program = {program!r}
        for name, server in (('STREAM', stream), ('DATAGRAM', datagram), ('ABSTRACT', abstract)):
            program = program.replace(name, repr(server.getsockname()))
        program = program.replace('PORT', str(tcp.getsockname()[1]))
        sandbox = CodeSandbox(read=[{str(listening)!r}])
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=sandbox))
        try:
            result = run(runtime, program)
        finally:
            runtime.close()
        for server in (tcp, udp, stream, datagram, abstract):
            server.setblocking(False)
        got = []
        for server, take in ((tcp, tcp.accept), (udp, udp.recv), (stream, stream.accept),
                             (datagram, datagram.recv), (abstract, abstract.accept)):
            try:
                take(*([100] if take in (udp.recv, datagram.recv) else []))
                got.append(server.family.name)
            except BlockingIOError:
                pass
        print(json.dumps([result, got]))
        """,
        paths=(place,),
    )
    result, got = found
    assert result["error"] is None, result
    assert "reached" not in result["value"].values(), result["value"]
    assert got == []


def test_a_double_forked_grandchild_of_a_run_does_not_outlive_it() -> None:
    # Its processes are the harness's user: one left behind would keep that user's powers.
    program = """
import os, time
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # a run starts no session of its own
        os.setpgid(0, 0)
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '120', MARKER])
    os._exit(0)
time.sleep(0.3)
return 'left a sleeper'
"""
    found = harness(
        f"""
        import time

        marker = 'dsh-unprivileged-survivor-' + str(os.getpid())  # in no command line but theirs

        def survivors():
            found = []
            for name in filter(str.isdigit, os.listdir('/proc')):
                try:
                    if marker.encode() in open(f'/proc/{{name}}/cmdline', 'rb').read():
                        found.append(name)
                except OSError:
                    pass
            return found

        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox()))
        try:
            result = run(runtime, {program!r}.replace('MARKER', repr(marker)))
            deadline = time.monotonic() + 30  # the kernel's teardown, on a loaded machine
            while survivors() and time.monotonic() < deadline:
                time.sleep(0.01)
            print(json.dumps([result, survivors()]))
        finally:
            runtime.close()
        """
    )
    assert found == [{"error": None, "value": "left a sleeper"}, []]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the burst is x86_64 machine code")
def test_a_fork_bomb_leaves_the_harness_its_processes_and_ends_alone() -> None:
    # Without cgroups only RLIMIT_NPROC, counted in the template's user namespace, holds a
    # native burst between two samples: the whole runtime's runs to 32 x 8 + 64 + 256 tasks
    # here, which the harness's user's own allowance exceeds, so the harness keeps starting
    # threads and processes meanwhile, and the budget ends the burst's run alone.
    found = harness(
        f"""
        import subprocess, threading, time

        def host_tasks():
            with open('/proc/loadavg') as loadavg:
                return int(loadavg.read().split()[3].split('/')[1])

        peak, failures, starts, watching = 0, [], 0, True

        def watch():
            global peak, starts
            while watching:
                peak = max(peak, host_tasks())
                try:
                    threading.Thread(target=lambda: None).start()
                    subprocess.run(['true'], check=True)
                    starts += 1
                except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
                    failures.append(repr(error))

        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(
            compute_ms=20000, max_wall_ms=20000, max_parallel_runs=1,
            sandbox=CodeSandbox(max_processes=8)))
        try:
            runtime.warm_up()
            before = host_tasks()
            watcher = threading.Thread(target=watch)
            watcher.start()
            try:
                result = run(runtime, {bursting_program(12)!r})
            finally:
                watching = False
                watcher.join()
            later = run(runtime, 'return 1')
            print(json.dumps([result, peak - before, starts, failures[:3], later]))
        finally:
            runtime.close()
        """
    )
    result, grown, starts, failures, later = found
    assert result["error"][0] == "worker-exit", result
    assert "process budget exhausted" in result["error"][1]
    assert grown < 32 * 8 + 64 + 256 + 200, grown  # 200: the harness's and the machine's own
    assert failures == [] and starts > 0
    assert later == {"error": None, "value": 1}


def test_budgets_hold_the_whole_tree_of_an_unprivileged_harness_run() -> None:
    # No cgroups here: the run's init sums its processes from its /proc.
    spinners = """
import os, time
for _ in range(3):
    if os.fork() == 0:
        while True:
            pass
time.sleep(30)
"""
    hoarders = """
import os, time
for _ in range(3):
    if os.fork() == 0:
        hoard = bytearray(60 << 20)
        for offset in range(0, len(hoard), 4096):
            hoard[offset] = 1
        time.sleep(30)
time.sleep(30)
"""
    found = harness(
        f"""
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(
            compute_ms=1000, max_wall_ms=20000, max_memory_mb=128, sandbox=CodeSandbox()))
        try:
            print(json.dumps([run(runtime, {spinners!r}), run(runtime, {hoarders!r}),
                              run(runtime, 'return 1')]))
        finally:
            runtime.close()
        """
    )
    spun, hoarded, later = found
    assert spun["error"][0] == "timeout" and "compute" in spun["error"][1], spun
    assert hoarded["error"][0] == "worker-exit", hoarded
    assert "memory budget exhausted" in hoarded["error"][1]
    assert later == {"error": None, "value": 1}


def test_a_kernel_that_refuses_user_namespaces_fails_every_run_by_name(place: Path) -> None:
    # A harness that is not root needs a user namespace to make the others; without one no run
    # may go unconfined, and the failure says what is missing and how to opt out.
    grant = made(place / "grant")
    program = f"open({str(grant / 'ran')!r}, 'w').close()\nreturn 'ran'"
    found = harness(
        f"""
        sandbox = CodeSandbox(write=[{str(grant)!r}])
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=sandbox))
        try:
            print(json.dumps([run(runtime, {program!r}), run(runtime, {program!r})]))
        finally:
            runtime.close()
        """,
        paths=(place,),
        refuse_user_namespaces=True,
    )
    for result in found:
        kind, message = result["error"]
        assert kind == "worker-exit", result
        assert "code sandbox unavailable: user namespaces" in message, message
        assert 'code_isolation="process"' in message, message
    assert not (grant / "ran").exists()


def test_the_harness_of_these_tests_is_another_user_without_capabilities() -> None:
    # What the tests above rest on: their harness is not root and has no capability.
    found = harness(
        """
        status = dict(line.split(':', 1) for line in open('/proc/self/status'))
        print(json.dumps([os.geteuid(), status['CapEff'].strip()]))
        """
    )
    assert found == [unprivileged_uid(), "0000000000000000"]
    assert found[0] != 0
