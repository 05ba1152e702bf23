"""Hostile Code Mode programs against the sandbox, each written as an attacker would write it.

Every attack must end as a clean error inside the program (which then reports what it saw) or
as a clean failed run, and leave the host and the next run unharmed. The programs run through
the public runtime (``SubprocessCodeRuntime``), through ``ToolSystem`` and through the
``dsh-tools run-code -`` command, as the user the suite runs as (root on CI).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import mmap
import os
import platform
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from code_mode_support import echo_tool, failure_of
from sandbox_support import assert_next_run_works, bursting_program, run, value

from dsh_tools import (
    CodeRunFailure,
    CodeRuntimeConfig,
    CodeSandbox,
    ExecuteCall,
    SubprocessCodeRuntime,
    ToolsConfig,
    ToolSystem,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is Linux's"
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SubprocessCodeRuntime]:
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, max_wall_ms=20000, max_memory_mb=256)
    )
    try:
        yield runtime
    finally:
        runtime.close()


# --- files: what Landlock does not cover ---------------------------------------------------


def test_a_host_file_keeps_its_mode_times_and_attributes(
    sandbox: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("hunter2")
    secret.chmod(0o600)
    os.setxattr(secret, "user.note", b"kept in an attribute")
    before = secret.stat()
    program = f"""
import os
seen = []
for attack in (
    lambda: os.chmod({str(secret)!r}, 0o666),
    lambda: os.chmod('/dev/null', 0o666),
    lambda: os.utime({str(secret)!r}, (0, 0)),
    lambda: os.setxattr({str(secret)!r}, 'user.planted', b'1'),
    lambda: os.removexattr({str(secret)!r}, 'user.note'),
    lambda: os.chown({str(secret)!r}, 0, 0),
    lambda: os.getxattr({str(secret)!r}, 'user.note'),
    lambda: os.listxattr({str(secret)!r}),
):
    try:
        seen.append(repr(attack()))
    except OSError as error:
        seen.append(error.errno)
return seen
"""
    seen = value(sandbox, program)
    assert all(isinstance(item, int) for item in seen), seen
    after = secret.stat()
    assert stat.S_IMODE(after.st_mode) == 0o600
    assert (after.st_mtime_ns, after.st_atime_ns) == (before.st_mtime_ns, before.st_atime_ns)
    assert os.listxattr(secret) == ["user.note"]
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666


_F_GET_RW_HINT = 1035
_F_SET_RW_HINT = 1036


def _write_hint(path: str, new: int | None = None) -> int:
    """The write-lifetime hint the kernel keeps on the inode of ``path`` (set to ``new`` first,
    if given)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if new is not None:
            hint = ctypes.c_uint64(new)
            assert libc.fcntl(fd, _F_SET_RW_HINT, ctypes.byref(hint)) == 0, ctypes.get_errno()
        hint = ctypes.c_uint64(99)
        assert libc.fcntl(fd, _F_GET_RW_HINT, ctypes.byref(hint)) == 0, ctypes.get_errno()
    finally:
        os.close(fd)
    return hint.value


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_host_file_keeps_its_write_lifetime_hint(tmp_path: Path) -> None:
    # fcntl(F_SET_RW_HINT) asks only that the caller own the file, not that it may write it,
    # and the worker's user owns the host's files: from a read-only descriptor a run set the
    # hint of the interpreter and of a read grant, kept on their inodes after the run and sent
    # with every later write of the host to them (where the disk places them, on a drive with
    # placement streams). The run's own scratch files keep the hint's default too.
    granted = tmp_path / "granted.txt"
    granted.write_text("the host's")
    interpreter = os.path.realpath(sys.executable)
    before = [_write_hint(str(granted)), _write_hint(interpreter)]
    planted = next(hint for hint in (5, 4) if hint not in before)  # RWH_WRITE_LIFE_EXTREME, LONG
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(granted)]))
    )
    program = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open('own.txt', 'w').close()
seen = []
for path in ({str(granted)!r}, {interpreter!r}, 'own.txt'):
    fd = os.open(path, os.O_RDONLY)
    hint = ctypes.c_uint64({planted})
    ctypes.set_errno(0)
    seen.append(ctypes.get_errno() if libc.fcntl(fd, {_F_SET_RW_HINT}, ctypes.byref(hint)) else 0)
return seen
"""
    try:
        assert value(runtime, program) == [errno.EINVAL] * 3  # as a kernel without hints
        assert_next_run_works(runtime)
        assert [_write_hint(str(granted)), _write_hint(interpreter)] == before
    finally:
        runtime.close()
        if _write_hint(interpreter) != before[1]:  # as it was, whatever the run did
            _write_hint(interpreter, before[1])


def test_a_path_only_descriptor_opens_nothing_outside_the_grants(tmp_path: Path) -> None:
    # Landlock does not check an O_PATH open, so a program holds a descriptor of any file it
    # can name. Reopening it (through /proc/self/fd), opening beneath it, entering it, or
    # linking what it names into the scratch directory or a write grant on the same
    # filesystem must all still meet Landlock.
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.key"
    secret.write_text("hunter2")
    grant = tmp_path / "grant"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(
            compute_ms=3000, max_wall_ms=20000, sandbox=CodeSandbox(write=[str(grant)])
        )
    )
    program = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
file = os.open({str(secret)!r}, os.O_PATH)
folder = os.open({str(outside)!r}, os.O_PATH | os.O_DIRECTORY)
seen = {{'size through O_PATH': os.fstat(file).st_size}}
def attempt(name, action):
    try:
        seen[name] = repr(action())
    except OSError as error:
        seen[name] = error.errno
attempt('reopen', lambda: open(f'/proc/self/fd/{{file}}').read())
attempt('open beneath', lambda: os.read(os.open('secret.key', os.O_RDONLY, dir_fd=folder), 9))
def link_empty_path(target):
    if libc.linkat(file, b'', -100, target.encode(), 0x1000) == 0:  # AT_EMPTY_PATH
        return 'linked'
    raise OSError(ctypes.get_errno(), 'linkat')
for target in ('stolen', {str(grant / "stolen")!r}):
    attempt('link to ' + target, lambda: os.link(f'/proc/self/fd/{{file}}', target))
    attempt('link empty path to ' + target, lambda: link_empty_path(target))
attempt('enter', lambda: (os.fchdir(folder), open('secret.key').read()))
return seen
"""
    try:
        seen = dict(value(runtime, program))
    finally:
        runtime.close()
    assert seen.pop("size through O_PATH") == 7  # metadata stays visible, as documented
    assert all(isinstance(outcome, int) for outcome in seen.values()), seen
    assert os.listdir(grant) == []
    assert secret.read_text() == "hunter2"


def test_scratch_files_keep_every_ordinary_file_operation(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import os, shutil
open('a.sh', 'w').write('#!/bin/sh\\necho hi\\n')
os.chmod('a.sh', 0o755)
shutil.copy2('a.sh', 'b.sh')
shutil.copytree('.', 'tree', ignore=shutil.ignore_patterns('tree'))
os.utime('b.sh', (1, 1))
import subprocess
return [subprocess.run(['./b.sh'], capture_output=True, text=True).stdout,
        sorted(os.listdir('tree')), os.stat('b.sh').st_mtime]
"""
    assert value(sandbox, program) == ["hi\n", ["a.sh", "b.sh"], 1.0]


def test_nothing_written_reaches_a_later_run_or_the_python_installation(
    sandbox: SubprocessCodeRuntime,
) -> None:
    import json

    cache = Path(json.__file__).parent / "__pycache__"
    planted = [
        str(cache / "poison.cpython.pyc"),
        str(Path(sys.prefix) / "poison.pth"),
        "/dev/shm/poison",
        "/tmp/poison",
        "/var/tmp/poison",
    ]
    program = f"""
import os
refused = []
for path in {planted!r}:
    try:
        open(path, 'w').write('import os; os.system("id")')
    except OSError as error:
        refused.append(error.errno)
open('left-for-the-next-run', 'w').write('x')
os.symlink('/etc', 'etc-link')
try:
    open('etc-link/poison', 'w')
except OSError as error:
    refused.append(error.errno)
try:
    os.link(os.path.realpath({sys.executable!r}), 'python-link')
except OSError as error:
    refused.append(error.errno)
return refused
"""
    assert len(value(sandbox, program)) == len(planted) + 2
    assert not any(os.path.exists(path) for path in planted)
    assert not os.path.exists("/etc/poison")
    assert_next_run_works(sandbox)


def test_the_scratch_directory_fills_up_cleanly(tmp_path: Path) -> None:
    # A small budget keeps the scratch directory (at most max_memory_mb) quick to fill; under 32
    # the worker's own interpreter took nearly all of it (31.7 MB on Python 3.11, 32.8 on 3.12).
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_memory_mb=48, compute_ms=5000))
    program = """
import errno
import fcntl
chunk = b'x' * (1 << 20)
try:
    with open('fill', 'wb') as file:
        for _ in range(64):
            file.write(chunk)
except OSError as error:
    full = error.errno
try:
    for index in range(20000):
        open(f'f{index}', 'w').close()
except OSError as error:
    inodes = error.errno
return [full == errno.ENOSPC, inodes == errno.ENOSPC]
"""
    try:
        assert value(runtime, program) == [True, True]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


# --- network ---------------------------------------------------------------------------------


def test_no_socket_reaches_a_host_listener(sandbox: SubprocessCodeRuntime, tmp_path: Path) -> None:
    tcp = socket.create_server(("127.0.0.1", 0))
    stream_path = str(tmp_path / "stream.sock")
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind(stream_path)
    stream.listen()
    datagram_path = str(tmp_path / "datagram.sock")
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagram.bind(datagram_path)
    datagram.setblocking(False)
    port = tcp.getsockname()[1]
    program = f"""
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
seen = []
def attempt(label, action):
    try:
        action()
        seen.append(label + ': reached')
    except OSError as error:
        seen.append(label + ': ' + type(error).__name__)
def tcp():
    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'exfil')
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'exfil', ('127.0.0.1', {port}))
def unix_stream():
    socket.socket(socket.AF_UNIX).connect({stream_path!r})
def datagram_pair(kind):
    def send():
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.sendto(b'exfil', {datagram_path!r})
    return send
def abstract():
    socket.socket(socket.AF_UNIX).connect('\\0dsh-host-service')
def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def direct_syscall():
    if libc.syscall(41, 2, 1, 0) < 0:  # socket(AF_INET, SOCK_STREAM) without the wrapper
        raise OSError(ctypes.get_errno(), 'socket')
def stream_pair_with_address():
    a, b = socket.socketpair()
    a.sendto(b'exfil', {datagram_path!r})
for label, action in [('tcp', tcp), ('udp', udp), ('unix', unix_stream),
                      ('dgram pair', datagram_pair(socket.SOCK_DGRAM)),
                      ('raw pair', datagram_pair(socket.SOCK_RAW)), ('abstract', abstract),
                      ('netlink', netlink), ('raw', raw), ('syscall', direct_syscall),
                      ('stream pair', stream_pair_with_address)]:
    attempt(label, action)
return seen
"""
    try:
        seen = value(sandbox, program)
        assert not [line for line in seen if line.endswith("reached")], seen
        tcp.settimeout(0.2)
        with pytest.raises(TimeoutError):
            tcp.accept()
        with pytest.raises(BlockingIOError):
            datagram.recv(100)
    finally:
        for server in (tcp, stream, datagram):
            server.close()


def test_asyncio_still_has_its_stream_pair(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import socket, threading
a, b = socket.socketpair()
a.sendall(b'ping')
thread = threading.Thread(target=asyncio.run, args=(asyncio.sleep(0),))  # a loop of its own
thread.start()
thread.join()
return b.recv(4).decode()
"""
    assert value(sandbox, program) == "ping"


def test_a_socket_pair_of_any_other_family_is_refused(sandbox: SubprocessCodeRuntime) -> None:
    # Only unix pairs: another family's socket code would run in the kernel (and could load a
    # module for it) before failing.
    program = """
import socket
seen = {}
for name in ('AF_INET', 'AF_INET6', 'AF_VSOCK', 'AF_PACKET', 'AF_NETLINK'):
    try:
        socket.socketpair(getattr(socket, name), socket.SOCK_STREAM)
        seen[name] = 'allowed'
    except OSError as error:
        seen[name] = error.errno
return seen
"""
    assert set(value(sandbox, program).values()) == {1}


def test_a_socket_pair_reaches_no_bridge_or_vlan_code(sandbox: SubprocessCodeRuntime) -> None:
    # Any socket's descriptor reaches the bridge and VLAN ioctl requests without privilege,
    # and where that code is a module not loaded yet the kernel has the host's modprobe load
    # it first. A run answers as a kernel without them.
    program = """
import fcntl, socket, struct
pair, _other = socket.socketpair()
seen = {}
for name, request, argument in (
    ('SIOCGIFBR', 0x8940, struct.pack('3Q', 0, 0, 0)),  # BRCTL_GET_VERSION
    ('SIOCBRADDBR', 0x89A0, b'run0'.ljust(16, b'\\0')),
    ('SIOCGIFVLAN', 0x8982, bytes(40)),
    ('SIOCSIFVLAN', 0x8983, bytes(40)),
):
    try:
        fcntl.ioctl(pair.fileno(), request, argument)
        seen[name] = 'answered'
    except OSError as error:
        seen[name] = error.errno
return seen
"""
    assert set(value(sandbox, program).values()) == {errno.ENOPKG}


def test_a_socket_pair_carries_no_out_of_band_byte(sandbox: SubprocessCodeRuntime) -> None:
    # The out-of-band byte of unix stream sockets (MSG_OOB) is kernel code no program of a run
    # needs, and where use-after-free bugs were found more than once: one was used to leave a
    # browser's sandbox for the kernel. A run answers as a kernel without it.
    program = """
import socket
pair, other = socket.socketpair()
seen = {}
for name, attempt in (
    ('send', lambda: pair.send(b'!', socket.MSG_OOB)),
    ('sendmsg', lambda: pair.sendmsg([b'!'], [], socket.MSG_OOB)),
    ('recv', lambda: other.recv(1, socket.MSG_OOB)),
    ('recvmsg', lambda: other.recvmsg(1, 0, socket.MSG_OOB)),
):
    try:
        attempt()
        seen[name] = 'done'
    except OSError as error:
        seen[name] = error.errno
pair.sendmsg([b'in band'])  # the ordinary paths still work
seen['pair'] = other.recv(7).decode()
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("pair") == "in band"
    assert seen == dict.fromkeys(("send", "sendmsg", "recv", "recvmsg"), errno.EOPNOTSUPP)


def test_a_socket_pair_takes_no_compiled_filter_from_the_machines_pool(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # A classic BPF filter attached to a socket is compiled to machine code held in the
    # machine's one pool for the filters of processes without privilege (bpf_jit_limit),
    # which no budget of the run counts; the seccomp filters of every such process come from
    # it too, and where the kernel has no interpreter to fall back to they fail once it is
    # used up. A run answers as for every other refused call.
    program = """
import ctypes, socket, struct
count = 4096
code = struct.pack('HBBI', 0x04, 0, 0, 1) * (count - 1) + struct.pack('HBBI', 0x06, 0, 0, 0)
instructions = ctypes.create_string_buffer(code)
program = struct.pack('HL', count, ctypes.addressof(instructions))
pair, other = socket.socketpair()
seen = {}
for name, option in (
    ('SO_ATTACH_FILTER', 26),
    ('SO_ATTACH_BPF', 50),
    ('SO_ATTACH_REUSEPORT_CBPF', 51),
    ('SO_ATTACH_REUSEPORT_EBPF', 52),
):
    try:
        pair.setsockopt(socket.SOL_SOCKET, option, program)
        seen[name] = 'attached'
    except OSError as error:
        seen[name] = error.errno
pair.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)  # other options still work
pair.sendall(b'ping')
seen['pair'] = other.recv(4).decode()
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("pair") == "ping"
    assert seen == dict.fromkeys(
        (
            "SO_ATTACH_FILTER",
            "SO_ATTACH_BPF",
            "SO_ATTACH_REUSEPORT_CBPF",
            "SO_ATTACH_REUSEPORT_EBPF",
        ),
        errno.EPERM,
    )


# --- processes -------------------------------------------------------------------------------


def test_the_host_the_template_and_the_init_are_out_of_reach(
    sandbox: SubprocessCodeRuntime,
) -> None:
    host = os.getpid()
    program = f"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
seen = {{'pids': sorted(int(name) for name in os.listdir('/proc') if name.isdigit())}}
def outcome(call):
    try:
        result = call()
        return 'done' if result is None or result >= 0 else os.strerror(ctypes.get_errno())
    except OSError as error:
        return type(error).__name__
seen['kill host'] = outcome(lambda: os.kill({host}, signal.SIGKILL))
seen['pidfd host'] = outcome(lambda: os.pidfd_open({host}))
seen['init environ'] = outcome(lambda: open('/proc/1/environ', 'rb').read() and None)
seen['init mem'] = outcome(lambda: open('/proc/1/mem', 'rb').read(1) and None)
seen['init fds'] = outcome(lambda: open('/proc/1/fd/5', 'wb') and None)  # its status pipe
seen['own mem write'] = outcome(lambda: open('/proc/self/mem', 'r+b') and None)
seen['core pattern'] = outcome(lambda: open('/proc/sys/kernel/core_pattern', 'w') and None)
seen['ptrace init'] = outcome(lambda: libc.ptrace(16, 1, None, None))
iov = (ctypes.c_char * 8)()
seen['vm readv init'] = outcome(lambda: libc.syscall(310, 1, None, 0, None, 0, 0))
pidfd = libc.syscall(434, 1, 0)
seen['pidfd getfd init'] = outcome(lambda: libc.syscall(438, pidfd, 0, 0))
for number in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):
    seen['signal init ' + str(int(number))] = outcome(lambda: os.kill(1, number))
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("pids") == [1, 2]  # the run's init and the worker, nothing else
    for check in ("kill host", "pidfd host"):
        assert seen[check] == "ProcessLookupError", seen
    for check in ("init environ", "init mem", "init fds", "own mem write", "core pattern"):
        assert seen[check] == "PermissionError", seen
    for check in ("ptrace init", "vm readv init", "pidfd getfd init"):
        assert seen[check] == os.strerror(1), seen
    for number in (9, 19, 15):  # refused, or ignored by the init: the run went on either way
        assert seen[f"signal init {number}"] in ("PermissionError", "done"), seen
    assert_next_run_works(sandbox)


def test_the_limits_of_the_init_and_of_every_other_process_stay_as_they_are(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # The init has the worker's user: without the filter, no descriptors left killed it at its
    # next measure, no CPU time at once. The program's own limits stay its own to lower.
    program = """
import os, resource, time
seen = {}
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
for name, pid in (('init', 1), ('child', child), ('self by pid', os.getpid())):
    for which, limit in (('files', resource.RLIMIT_NOFILE), ('cpu', resource.RLIMIT_CPU)):
        try:
            resource.prlimit(pid, limit, (0, 0))
            seen[name + ' ' + which] = 'lowered'
        except PermissionError:
            seen[name + ' ' + which] = 'refused'
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE)
    seen['init read'] = 'read'
except PermissionError:
    seen['init read'] = 'refused'
time.sleep(0.5)  # the init measures the run meanwhile, as it would after any change
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
seen['own'] = [list(resource.getrlimit(resource.RLIMIT_NOFILE)),
               list(resource.prlimit(0, resource.RLIMIT_NOFILE, (32, 32))),
               list(resource.getrlimit(resource.RLIMIT_NOFILE))]
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("own") == [[64, 64], [64, 64], [32, 32]]
    assert set(seen.values()) == {"refused"}, seen
    assert_next_run_works(sandbox)


def test_a_crash_hands_no_core_to_the_host_and_the_core_limit_stays_1(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Where /proc/sys/kernel/core_pattern is a pipe (systemd-coredump, apport) the kernel
    # ignores RLIMIT_CORE 0 and hands a crashing process's memory to the host's handler, which
    # writes it to the host's disk with the host's CPU; it skips piped dumps at exactly 1 (and
    # a core file needs a page). So every process of a run has 1, which it may not change,
    # not even to 0. (The pattern is machine-wide: this test leaves it as it is.)
    program = """
import ctypes, os, resource, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
seen = {'own': list(resource.getrlimit(resource.RLIMIT_CORE))}
for limit in ((0, 0), (0, 1), (1, 1), (4096, 4096), (resource.RLIM_INFINITY,) * 2):
    for name, change in (
        ('setrlimit', lambda: resource.setrlimit(resource.RLIMIT_CORE, limit)),
        ('prlimit', lambda: resource.prlimit(0, resource.RLIMIT_CORE, limit)),
    ):
        try:
            change()
            seen[f'{name} {limit[0]}'] = 'changed'
        except (OSError, ValueError) as error:  # setrlimit's EPERM is a ValueError
            seen[f'{name} {limit[0]}'] = type(error).__name__
new = (ctypes.c_ulong * 2)(0, 0)
seen['setrlimit call'] = libc.syscall(160, 4, new) == 0 or ctypes.get_errno()
seen['read by prlimit'] = list(resource.prlimit(0, resource.RLIMIT_CORE))
crashes = []
for crash in (os.abort, lambda: os.kill(os.getpid(), signal.SIGSEGV)):
    child = os.fork()
    if child == 0:
        crash()
        os._exit(0)
    status = os.waitpid(child, 0)[1]
    crashes.append([os.WTERMSIG(status), os.WCOREDUMP(status)])
seen['crashes'] = crashes
lower = 'import resource\\ntry:\\n    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\\n' \\
        'except ValueError:\\n    pass\\nprint(*resource.getrlimit(resource.RLIMIT_CORE))'
child = subprocess.run([sys.executable, '-c', lower], capture_output=True, text=True)
seen['executed child'] = child.stdout.split()
seen['after'] = list(resource.getrlimit(resource.RLIMIT_CORE))
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("own") == seen.pop("read by prlimit") == seen.pop("after") == [1, 1]
    assert seen.pop("executed child") == ["1", "1"]
    assert seen.pop("crashes") == [[signal.SIGABRT, False], [signal.SIGSEGV, False]]
    assert seen.pop("setrlimit call") == 1  # EPERM
    assert {key for key, outcome in seen.items() if outcome == "changed"} == set(), seen
    assert_next_run_works(sandbox)


def test_the_init_that_measures_the_run_cannot_be_deprioritized(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # The init has the worker's user. Reniced to 19, made SCHED_IDLE or pinned to a CPU the
    # run's spinners fill, it would measure the budgets (and end the run) late; the kernel
    # refuses a process without capabilities any change of the scheduling of one with them.
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(call):
    return 'changed' if call() == 0 else ctypes.get_errno()
seen = {
    'nice': attempt(lambda: libc.setpriority(0, 1, 19)),  # PRIO_PROCESS
    'group nice': attempt(lambda: libc.setpriority(1, 0, 19)),  # PRIO_PGRP: its own group
    'idle': attempt(lambda: libc.sched_setscheduler(1, 5, ctypes.byref(ctypes.c_int(0)))),
    'io idle': attempt(lambda: libc.syscall(251, 1, 1, 3 << 13)),  # ioprio_set
}
try:
    os.sched_setaffinity(1, {0})
    seen['affinity'] = 'changed'
except OSError as error:
    seen['affinity'] = error.errno
fields = open('/proc/1/stat').read().rsplit(')', 1)[1].split()
seen['init'] = [fields[16], fields[38]]  # its nice value and scheduling policy
seen['init group'] = os.getpgid(0) == os.getpgid(1)
return seen
"""
    seen = dict(value(sandbox, program))
    # Nice 0 and ``SCHED_BATCH`` (3), as the init set them: a batch process has the usual
    # share of the CPU and takes it at the scheduler's tick rather than at once when woken.
    assert seen.pop("init") == ["0", str(os.SCHED_BATCH)]
    if not seen.pop("init group"):
        # Without cgroups the worker leads a session (and group) of its own: it renices the
        # run alone.
        assert seen.pop("group nice") == "changed"
    assert set(seen.values()) == {1}, seen  # EPERM
    assert_next_run_works(sandbox)


def test_every_process_of_a_run_is_the_first_the_oom_killer_picks(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Inherited, a harness's shield from the OOM killer (down to -1000: never killed) would
    # shield its runs too, and a run at its memory limit would stall instead of being killed.
    host_score = Path("/proc/self/oom_score_adj").read_text()
    program = """
import os
def score(pid='self'):
    with open(f'/proc/{pid}/oom_score_adj') as file:
        return file.read().strip()
seen = {'worker': score()}
child = os.fork()
if child == 0:
    os._exit(0 if score() == '1000' else 1)
seen['child'] = os.waitpid(child, 0)[1] == 0
try:
    with open('/proc/self/oom_score_adj', 'w') as file:
        file.write('-1000')
    seen['lowered'] = score()
except OSError as exc:
    seen['lowered'] = type(exc).__name__
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen == {"worker": "1000", "child": True, "lowered": "PermissionError"}
    assert Path("/proc/self/oom_score_adj").read_text() == host_score
    assert_next_run_works(sandbox)


def test_proc_files_only_root_may_read_show_a_run_nothing(sandbox: SubprocessCodeRuntime) -> None:
    # Under a root harness the worker is root without capabilities, and root owns these: what
    # exploits of the kernel look for (its heap's layout, the flags of every physical page,
    # its vmalloc areas), the host's timers and its serial lines' traffic, and the keyrings
    # the user may view.
    paths = [
        "/proc/slabinfo",
        "/proc/vmallocinfo",
        "/proc/pagetypeinfo",
        "/proc/kpageflags",
        "/proc/kpagecount",
        "/proc/timer_list",
        "/proc/keys",
        "/proc/key-users",
        "/proc/tty/driver",
    ]
    program = f"""
import os
seen = {{}}
for path in {paths!r}:
    try:
        if os.path.isdir(path):
            seen[path] = sorted(os.listdir(path))
        else:
            with open(path, 'rb') as file:
                seen[path] = file.read(64).decode('latin-1')
    except FileNotFoundError:
        seen[path] = 'absent'
    except PermissionError:
        seen[path] = 'refused'
seen['cpuinfo'] = 'processor' in open('/proc/cpuinfo').read()
seen['own status'] = open('/proc/self/status').read().startswith('Name:')
return seen
"""
    seen = dict(value(sandbox, program))
    assert seen.pop("cpuinfo") is seen.pop("own status") is True
    readable = {
        path: text for path, text in seen.items() if text not in ("", [], "absent", "refused")
    }
    assert readable == {}
    assert_next_run_works(sandbox)


def test_reading_the_statistics_refresh_makes_no_work_for_every_cpu(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Reading /proc/sys/vm/stat_refresh, as root may, runs work on every CPU of the machine in
    # the kernel's own threads and waits for it: measured, eight processes reading it for 3 s
    # (2.25 s of the run's CPU) made the kernel's workers spend 2 s more, charged to no run,
    # on cores the host needs. In a run it is /dev/null (or refused, where the harness is
    # not root and so not its owner).
    program = """
import os, stat
path = '/proc/sys/vm/stat_refresh'
if not os.path.exists(path):
    return 'absent'
try:
    os.close(os.open(path, os.O_RDONLY))
except PermissionError:
    return 'refused'
return 'masked' if stat.S_ISCHR(os.stat(path).st_mode) else 'the kernel file'
"""
    assert value(sandbox, program) in ("absent", "refused", "masked")
    assert_next_run_works(sandbox)


def test_reading_the_file_locks_list_holds_no_lock_call_of_the_host(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Each reading of /proc/locks takes the kernel's global lock of every file lock for
    # writing while it walks every lock of the machine: measured, four processes of a run
    # reading it in a loop made the host's own lock and unlock calls 28 times slower, a cost
    # no budget of the run counts. In a run it is /dev/null (the init counts the run's locks
    # through a descriptor of its own).
    program = """
import os, stat
return [stat.S_ISCHR(os.stat('/proc/locks').st_mode), open('/proc/locks').read()]
"""
    assert value(sandbox, program) == [True, ""]
    assert_next_run_works(sandbox)


def test_reading_the_filesystems_statistics_holds_no_lock_of_the_host(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Each reading of /proc/fs/ext4/<disk>/es_shrinker_info holds the filesystem's spinlock of
    # its extent caches while it walks every cached inode of the disk (300,000 here: 47 ms a
    # reading): measured, two processes of a run reading it in a loop made the host's creation
    # of small files six times slower, one of them taking 0.2 s, where two processes spinning
    # slowed it by a tenth. A run sees /proc/fs empty.
    program = """
import os
read = {}
for folder, _, names in os.walk('/proc/fs'):
    for name in names:
        try:
            with open(os.path.join(folder, name), 'rb') as file:
                read[os.path.join(folder, name)] = len(file.read())
        except OSError as error:
            read[os.path.join(folder, name)] = error.errno
return [os.listdir('/proc/fs'), read]
"""
    assert value(sandbox, program) == [[], {}]
    assert_next_run_works(sandbox)


def test_a_traced_child_cannot_trace_anything(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
read, write = os.pipe()
child = os.fork()
if child == 0:
    result = libc.ptrace(0, 0, None, None)  # PTRACE_TRACEME
    os.write(write, str(ctypes.get_errno() if result < 0 else 0).encode())
    os._exit(0)
os.waitpid(child, 0)
return int(os.read(read, 10))
"""
    assert value(sandbox, program) == 1  # EPERM


def test_no_namespace_and_no_kernel_interface_is_reachable(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    'unshare user': (272, 0x10000000),
    'clone new user': (56, 0x10000000 | 17, 0, 0, 0, 0),
    'clone new pid': (56, 0x20000000 | 17, 0, 0, 0, 0),
    'clone new net': (56, 0x40000000 | 17, 0, 0, 0, 0),
    'setns': (308, 0, 0),
    'mount': (165, 0, 0, 0, 0, 0),
    'umount scratch': (166, 0, 0),
    'keyctl': (250, 0, 0, 0, 0, 0),
    'add_key': (248, 0, 0, 0, 0, 0),
    'userfaultfd': (323, 0),
    'bpf': (321, 0, 0, 0),
    'perf_event_open': (298, 0, 0, 0, 0, 0),
    'io_uring_setup': (425, 1, 0),
    'open_by_handle_at': (304, 0, 0, 0),
    'name_to_handle_at': (303, -100, b'/etc', 0, 0, 0),
    'fsopen': (430, 0, 0),
    'open_tree_attr': (467, -100, b'/', 0, 0, 0),  # open_tree's newer twin (Linux 6.15)
    'init_module': (175, 0, 0, 0),
    'x32 getpid': (0x40000000 | 39,),
    'memfd_create': (319, 0, 0),
    'inotify_init1': (294, 0),
    'modify_ldt write': (154, 1, 0, 0),
}
seen = {}
for name, (number, *args) in calls.items():
    ctypes.set_errno(0)  # modify_ldt's own failures come back as a positive number, no errno
    result = libc.syscall(number, *args)
    seen[name] = ctypes.get_errno() if result < 0 else 'allowed'
seen['clone3'] = libc.syscall(435, 0, 0) < 0 and ctypes.get_errno()
how = (ctypes.c_uint64 * 3)(0, 0, 0x08)  # RESOLVE_NO_MAGICLINKS: what openat2 adds to openat
seen['openat2'] = libc.syscall(437, -100, b'/etc/passwd', how, 24) < 0 and ctypes.get_errno()
return seen
"""
    seen = dict(value(sandbox, program))
    clone3, openat2 = seen.pop("clone3"), seen.pop("openat2")
    assert set(seen.values()) == {1}, seen  # EPERM everywhere
    assert clone3 == 38  # ENOSYS: the C library falls back to clone, whose flags are checked
    assert openat2 == 38  # ENOSYS too (its mode and resolve flags live in memory), so openat


def test_a_run_cannot_make_the_host_flush_its_disks(sandbox: SubprocessCodeRuntime) -> None:
    # sync() writes back every dirty page of the machine, syncfs() those of the filesystem a
    # descriptor is on (the host's, from /usr): in a loop, the host's disks never stop flushing.
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
for name, number, args in (('sync', 162, ()), ('syncfs', 306, (os.open('/usr', os.O_RDONLY),))):
    ctypes.set_errno(0)
    seen[name] = ctypes.get_errno() if libc.syscall(number, *args) < 0 else 'allowed'
with open('own.txt', 'w') as handle:
    handle.write('kept')
    handle.flush()
    os.fsync(handle.fileno())
os.sync()  # the C library's sync() ignores the refusal
return seen
"""
    assert value(sandbox, program) == {"sync": 1, "syncfs": 1}  # EPERM


def _disk_writes(path: str) -> int | None:
    """Write requests the block device holding ``path`` has completed, or ``None`` where it is
    on no block device (an overlay, a tmpfs)."""
    device = os.stat(path).st_dev
    try:
        fields = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat").read_text()
    except OSError:
        return None
    return int(fields.split()[4])


def test_a_run_cannot_make_the_hosts_disk_flush_through_a_file_it_may_only_read(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # fsync of a read-only descriptor of a clean host file made the disk take a write request
    # (and flush its cache) each time: a loop of them made 73,000 in 3 s for 0.7 s of CPU,
    # without any write grant. The calls return at once; a program's own database still
    # commits.
    interpreter = os.path.realpath(sys.executable)
    before = _disk_writes(interpreter)
    if before is None:
        pytest.skip("the Python installation is on no block device here")
    program = f"""
import mmap, os, sqlite3
host = os.open({interpreter!r}, os.O_RDONLY)
for _ in range(20_000):
    os.fsync(host)
    os.fdatasync(host)
shared = mmap.mmap(host, 4096, prot=mmap.PROT_READ)
for _ in range(5_000):
    shared.flush()  # msync
db = sqlite3.connect('notes.db')
with db:
    db.execute('create table notes (text)')
    db.execute("insert into notes values ('kept')")
return db.execute('select text from notes').fetchall()[0][0]
"""
    assert value(sandbox, program) == "kept"
    after = _disk_writes(interpreter)
    assert after is not None and after - before < 10_000, after - before


def test_a_run_cannot_make_the_hosts_disk_flush_through_synchronous_writes(
    tmp_path: Path,
) -> None:
    # fsync returns having done nothing, but a file of a write grant opened with O_DSYNC (or
    # O_SYNC), or written with RWF_DSYNC, is flushed by the kernel at each write itself: 3,000
    # one-byte writes each way made 18,000 write requests of the host's disk (the data, the
    # journal's commit, the cache flush), where plain writes and fsync made none.
    before = _disk_writes(str(tmp_path))
    if before is None:
        pytest.skip("the temporary directory is on no block device here")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=10_000, sandbox=CodeSandbox(write=[str(tmp_path)]))
    )
    program = f"""
import errno, os
seen = {{}}
try:
    synchronous = os.open({str(tmp_path / "log")!r}, os.O_WRONLY | os.O_CREAT | os.O_DSYNC)
except OSError as exc:
    seen['O_DSYNC'] = errno.errorcode[exc.errno]
else:
    for offset in range(3_000):
        os.pwrite(synchronous, b'x', offset)
    seen['O_DSYNC'] = 'written'
plain = os.open({str(tmp_path / "data")!r}, os.O_WRONLY | os.O_CREAT)
try:
    for offset in range(3_000):
        os.pwritev(plain, [b'x'], offset, os.RWF_DSYNC)
    seen['RWF_DSYNC'] = 'written'
except OSError as exc:
    seen['RWF_DSYNC'] = errno.errorcode[exc.errno]
os.pwritev(plain, [b'kept'], 0)  # without the flag, as before
return seen
"""
    try:
        seen = value(runtime, program)
    finally:
        runtime.close()
    after = _disk_writes(str(tmp_path))
    # (A margin for the machine's other writes meanwhile: the flushing writes made 18,000.)
    assert after is not None and after - before < 6_000, (after - before, seen)
    assert (tmp_path / "data").read_bytes().startswith(b"kept")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_the_hosts_disk_take_each_write_of_its_grant_at_once(
    ext4_filesystem: Path,
) -> None:
    # An uncached write (RWF_DONTCACHE, Linux 6.14) starts writing its range back to the disk
    # as it returns, so that the page can be dropped: 3,000 page writes to a file of a write
    # grant on ext4 made 3,000 write requests of its disk, where plain writes made none before
    # the kernel's own writeback. So did ext4's request to allocate a file's delayed blocks
    # now (EXT4_IOC_ALLOC_DA_BLKS), after each page appended: 500 made 988. The answer of a
    # filesystem without them, so the caller writes as usual.
    grant = ext4_filesystem / "out"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=10_000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import fcntl, os
seen = {{}}
uncached = 0x80  # RWF_DONTCACHE
written = os.open({str(grant / "written")!r}, os.O_RDWR | os.O_CREAT)
try:
    for offset in range(3_000):
        os.pwritev(written, [b'x' * 4096], offset * 4096, uncached)
    seen['write'] = 'written'
except OSError as exc:
    seen['write'] = exc.errno
try:
    os.preadv(written, [bytearray(4096)], 0, uncached)
    seen['read'] = 'read'
except OSError as exc:
    seen['read'] = exc.errno
appended = os.open({str(grant / "appended")!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
try:
    for _ in range(500):
        os.write(appended, b'x' * 4096)
        fcntl.ioctl(appended, 0x660C)  # EXT4_IOC_ALLOC_DA_BLKS
    seen['allocate'] = 'allocated'
except OSError as exc:
    seen['allocate'] = exc.errno
os.pwritev(written, [b'kept'], 0)  # without the flag, as before
return seen
"""
    with device_writes_while_host_appends(runtime, grant / "host.log", ext4_filesystem) as writes:
        assert value(runtime, program) == {
            "write": errno.EOPNOTSUPP,
            "read": errno.EOPNOTSUPP,
            "allocate": errno.EOPNOTSUPP,
        }
        # The journal's own commit every 5 s is a few requests; each loop made hundreds.
        assert writes() < 40
    assert (grant / "written").read_bytes() == b"kept"


def test_a_run_cannot_make_every_filesystem_flush_through_the_quota_call(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # quotactl(Q_SYNC) asks for no privilege and no file: with no device named it syncs every
    # filesystem of the machine that has quota operations (ext4's, even with no quota on),
    # and quotactl_fd does the same for the filesystem of any descriptor, a read-only one of
    # /usr included. Each call was a write request and a cache flush of the host's disk.
    before = _disk_writes(sys.executable)
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
q_sync_user = (0x800001 << 8) | 0  # QCMD(Q_SYNC, USRQUOTA)
usr = os.open('/usr', os.O_RDONLY)
seen = {}
for name, number, args in (
    ('quotactl', 179, (q_sync_user, None, 0, None)),  # no device: every filesystem
    ('quotactl_fd', 443, (usr, q_sync_user, 0, None)),
):
    for _ in range(2_000):
        ctypes.set_errno(0)
        outcome = libc.syscall(number, *args)
    seen[name] = ctypes.get_errno() if outcome < 0 else 'allowed'
return seen
"""
    assert value(sandbox, program) == {"quotactl": 1, "quotactl_fd": 1}  # EPERM
    after = _disk_writes(sys.executable)
    if before is not None and after is not None:
        assert after - before < 2_000, after - before


def test_the_32_bit_system_call_entry_reaches_nothing_and_is_not_logged(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Any foreign ABI answers ENOSYS. A kill would do as well for the run, but the kernel
    # writes an audit record for every seccomp kill (to the host's disk where auditd runs),
    # as often as a program forks children to die that way; a refusal is not recorded.
    program = """
import ctypes, mmap, os
code = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (getpid); int 0x80; ret
flags = mmap.MAP_PRIVATE
page = mmap.mmap(-1, 4096, flags, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
child = os.fork()
if child == 0:
    os._exit(-ctypes.CFUNCTYPE(ctypes.c_int)(address)())
_, status = os.waitpid(child, 0)
return [os.WIFSIGNALED(status) and os.WTERMSIG(status),
        os.WIFEXITED(status) and os.WEXITSTATUS(status)]
"""
    assert value(sandbox, program) == [False, 38]  # ENOSYS, no SIGSYS


def test_a_program_installs_no_seccomp_filter_of_its_own(sandbox: SubprocessCodeRuntime) -> None:
    # The run's filter already holds it; one of its own could only log, and the kernel
    # writes an audit record (to the host's disk where auditd runs) for every system call a
    # filter answers with SECCOMP_RET_LOG, as fast as a loop of getpid() runs. Asking which
    # actions exist still works.
    program = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Filter(ctypes.Structure):
    _fields_ = [('code', ctypes.c_uint16), ('jt', ctypes.c_uint8), ('jf', ctypes.c_uint8),
                ('k', ctypes.c_uint32)]
class Program(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.POINTER(Filter))]
log = (Filter * 1)(Filter(0x06, 0, 0, 0x7FFC0000))  # return SECCOMP_RET_LOG
program = Program(1, ctypes.cast(log, ctypes.POINTER(Filter)))
def attempt(call):
    return 'installed' if call() == 0 else ctypes.get_errno()
child = os.fork()
if child == 0:  # where a filter would be installed, it logs only this child's calls
    seen = [
        attempt(lambda: libc.syscall(317, 1, 0, ctypes.byref(program))),  # SET_MODE_FILTER
        attempt(lambda: libc.syscall(317, 1, 2, ctypes.byref(program))),  # ... FLAG_LOG
        attempt(lambda: libc.prctl(22, 2, ctypes.byref(program), 0, 0)),  # PR_SET_SECCOMP
    ]
    os._exit(0 if seen == [1, 1, 1] else 1)
refused = os.waitpid(child, 0)[1] == 0
action = ctypes.c_uint32(0x7FFC0000)
return [refused, libc.syscall(317, 2, 0, ctypes.byref(action))]  # GET_ACTION_AVAIL
"""
    assert value(sandbox, program) == [True, 0]


def test_inotify_leases_ipc_memory_and_shared_kernel_tables_are_refused(
    sandbox: SubprocessCodeRuntime,
) -> None:
    program = """
import ctypes, fcntl, os, sys
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
fd = os.open(os.path.realpath(sys.executable), os.O_RDONLY)
for name, command in (('lease', 1024), ('notify', 1026)):
    try:
        fcntl.fcntl(fd, command, 0)
        seen[name] = 'allowed'
    except OSError as error:
        seen[name] = error.errno
for name, call in (('shmget', lambda: libc.shmget(0, 1 << 20, 0o1600)),
                   ('semget', lambda: libc.semget(0, 32000, 0o1600)),
                   ('io_setup', lambda: libc.syscall(206, 32768, ctypes.byref(ctypes.c_ulong()))),
                   ('epoll_create1', lambda: libc.epoll_create1(0)),
                   ('msgget', lambda: libc.msgget(0, 0o1600)),
                   ('inotify', lambda: libc.inotify_init())):
    seen[name] = ctypes.get_errno() if call() < 0 else 'allowed'
try:
    os.memfd_create('hidden')
    seen['memfd'] = 'allowed'
except OSError as error:
    seen['memfd'] = error.errno
return seen
"""
    assert set(value(sandbox, program).values()) == {1}


_KSM_HARNESS = '''
import asyncio, ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(67, 1, 0, 0, 0) != 0:  # PR_SET_MEMORY_MERGE, as systemd's MemoryKSM=yes sets it
    print(json.dumps('no KSM'))
    raise SystemExit
from dsh_tools import CodeRuntimeConfig, SubprocessCodeRuntime
from dsh_tools.codebridge import CodeRunRequest
program = """
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
seen = {'merging handed down': libc.prctl(68, 0, 0, 0, 0)}  # PR_GET_MEMORY_MERGE
ctypes.set_errno(0)
libc.prctl(67, 1, 0, 0, 0)
seen['PR_SET_MEMORY_MERGE'] = ctypes.get_errno()
page = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE)
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
ctypes.set_errno(0)
libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(1 << 20), 12)  # MADV_MERGEABLE
seen['MADV_MERGEABLE'] = ctypes.get_errno()
return seen
"""
runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=3000))
try:
    result = asyncio.run(runtime.run(CodeRunRequest(program, [])))
finally:
    runtime.close()
print(json.dumps(result.value if result.error is None else result.error.message))
'''


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_no_memory_of_a_run_is_offered_to_same_page_merging() -> None:
    # Where the kernel's same-page merging (KSM) runs, a page merged with an identical one
    # elsewhere is copied again when written, measurably slower: a run filling pages with
    # guesses learns by timing what another process of the machine holds. Neither the run's
    # own request nor a harness's merge-everything setting (inherited across fork and exec)
    # offers a run's memory.
    harness = subprocess.run(
        [sys.executable, "-c", _KSM_HARNESS], capture_output=True, text=True, timeout=60
    )
    assert harness.returncode == 0, harness.stderr
    seen = json.loads(harness.stdout)
    if seen == "no KSM":
        pytest.skip("this kernel has no same-page merging to ask for")
    assert seen == {
        "merging handed down": 0,
        "PR_SET_MEMORY_MERGE": errno.EINVAL,  # as a kernel without KSM answers
        "MADV_MERGEABLE": errno.EINVAL,
    }


def _pages_cached(path: Path) -> tuple[int, int]:
    """How many pages of ``path`` the host's page cache holds, and how many it has."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        start = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert start not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            assert libc.mincore(start, size, vector) == 0, ctypes.get_errno()
        finally:
            libc.munmap(start, size)
    finally:
        os.close(fd)
    return sum(byte & 1 for byte in vector), pages


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_the_hosts_page_cache_of_a_readable_file_stays(tmp_path: Path) -> None:
    # A read-only descriptor or mapping was enough to drop a file's pages from the page cache
    # of the whole machine (posix_fadvise DONTNEED, madvise or process_madvise MADV_PAGEOUT,
    # the latter through a pidfd of the caller itself): a run could evict everything it may
    # read, the Python installation included, over and over, and the host's processes would
    # read it all from disk again.
    data = tmp_path / "data.bin"
    with open(data, "wb") as file:
        file.write(os.urandom(4 * 2**20))
        file.flush()
        os.fsync(file.fileno())  # clean pages, which the kernel may drop
    data.read_bytes()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(data)]))
    )
    program = f"""
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
class IoVec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('length', ctypes.c_size_t)]
def process_madvise(pidfd, mapped, advice):
    start = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
    if libc.syscall(440, pidfd, ctypes.byref(IoVec(start, len(mapped))), 1, advice, 0) < 0:
        raise OSError(ctypes.get_errno(), 'process_madvise')
fd = os.open({str(data)!r}, os.O_RDONLY)
mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
seen = []
for attempt in (
    lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED),
    lambda: mapped.madvise(21),  # MADV_PAGEOUT
    lambda: process_madvise(os.pidfd_open(os.getpid()), mapped, 21),
    lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL),
    lambda: mapped.madvise(mmap.MADV_WILLNEED),
):
    try:
        attempt()
        seen.append('allowed')
    except PermissionError:
        seen.append('refused')
return seen
"""
    try:
        assert _pages_cached(data)[0] == _pages_cached(data)[1]
        assert value(runtime, program) == ["refused", "refused", "refused", "allowed", "allowed"]
        cached, pages = _pages_cached(data)
        assert cached == pages, f"{pages - cached} of {pages} pages dropped from the page cache"
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def _pages_active(path: Path) -> tuple[int, int]:
    """How many cached pages of ``path`` are on the kernel's active list (``KPF_ACTIVE`` of
    ``/proc/kpageflags``, found through this process's ``/proc/self/pagemap``), and how many
    pages it has; the file is mapped only while they are looked up."""
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    active = 0
    with (
        open(path, "rb") as file,
        mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ) as mapped,
        open("/proc/self/pagemap", "rb") as pagemap,
        open("/proc/kpageflags", "rb") as flags,
    ):
        [start] = [
            int(line.split("-")[0], 16)
            for line in Path("/proc/self/maps").read_text().splitlines()
            if line.endswith(str(path))
        ]
        for page in range(pages):
            mapped[page * mmap.PAGESIZE]  # mapped, so that the page map shows its frame
            pagemap.seek((start // mmap.PAGESIZE + page) * 8)
            frame = struct.unpack("Q", pagemap.read(8))[0] & (2**55 - 1)
            flags.seek(frame * 8)
            active += struct.unpack("Q", flags.read(8))[0] >> 6 & 1  # KPF_ACTIVE
    return active, pages


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
@pytest.mark.skipif(os.geteuid() != 0, reason="the page flags are root's to read")
def test_a_run_cannot_put_the_hosts_cached_pages_first_in_line_to_be_dropped(
    tmp_path: Path,
) -> None:
    # madvise(MADV_COLD) on a mapping of a file no other process maps moves its cached pages
    # to the inactive list, the first the kernel drops once memory is short: a run could do
    # that to every file it may read and the host reads (not maps) over and over, and the
    # host would read them from disk again.
    data = tmp_path / "data.bin"
    with open(data, "wb") as file:
        file.write(os.urandom(4 * 2**20))
        file.flush()
        os.fsync(file.fileno())
    for _ in range(3):  # read often enough for the kernel to keep its pages active
        data.read_bytes()
    active, pages = _pages_active(data)
    if active < pages:
        pytest.skip(f"this kernel keeps {active} of {pages} pages read three times active")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(data)]))
    )
    program = f"""
import mmap, os
fd = os.open({str(data)!r}, os.O_RDONLY)
mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
seen = []
for advice in (20, mmap.MADV_WILLNEED):  # MADV_COLD
    try:
        mapped.madvise(advice)
        seen.append('allowed')
    except PermissionError:
        seen.append('refused')
return seen
"""
    try:
        assert value(runtime, program) == ["refused", "allowed"]
        active, pages = _pages_active(data)
        assert active == pages, f"{pages - active} of {pages} active pages made inactive"
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_see_which_pages_of_a_shared_file_others_read(tmp_path: Path) -> None:
    # The kernel tells which pages of a file are cached (mincore, cachestat, the EAGAIN of a
    # RWF_NOWAIT read) only to a process that could write the file or owns it, so that no one
    # learns when others read it. The worker owns the host's files under a root harness: one
    # call showed a run exactly which pages of a granted file the host had just read, as often
    # as it liked, without bringing any in. Reading the file stays as it was.
    shared = tmp_path / "shared.bin"
    with open(shared, "wb") as file:
        file.write(os.urandom(64 * mmap.PAGESIZE))
        file.flush()
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    with open(shared, "rb") as file:
        os.pread(file.fileno(), 8 * mmap.PAGESIZE, 8 * mmap.PAGESIZE)  # pages 8 to 15
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(shared)]))
    )
    program = f"""
import ctypes, errno, mmap, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
size = 64 * mmap.PAGESIZE
fd = os.open({str(shared)!r}, os.O_RDONLY)
learned = {{}}
span = ctypes.create_string_buffer(struct.pack('QQ', 0, size))
counts = ctypes.create_string_buffer(40)
if libc.syscall(451, fd, span, counts, 0) == 0:  # cachestat
    learned['cachestat'] = struct.unpack('5Q', counts.raw)[0]
else:
    learned['cachestat'] = errno.errorcode[ctypes.get_errno()]
mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
start = ctypes.addressof(ctypes.c_char.from_buffer_copy(b'.'))
for line in open('/proc/self/maps'):
    if line.rstrip().endswith({str(shared)!r}):
        start = int(line.split('-')[0], 16)
vector = (ctypes.c_ubyte * 64)()
if libc.mincore(ctypes.c_void_p(start), size, vector) == 0:
    learned['mincore'] = ''.join(str(byte & 1) for byte in vector)
else:
    learned['mincore'] = errno.errorcode[ctypes.get_errno()]
answers = set()
for page in range(32):
    try:
        os.preadv(fd, [bytearray(mmap.PAGESIZE)], page * mmap.PAGESIZE, os.RWF_NOWAIT)
        answers.add('read')
    except OSError as error:
        answers.add(errno.errorcode[error.errno])
learned['nowait'] = sorted(answers)
learned['read'] = len(os.pread(fd, size, 0))
return learned
"""
    try:
        assert value(runtime, program) == {
            "cachestat": "ENOSYS",
            "mincore": "ENOSYS",
            "nowait": [errno.errorcode[errno.EOPNOTSUPP]],
            "read": 64 * mmap.PAGESIZE,
        }
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_a_run_cannot_pin_the_hosts_cached_pages(tmp_path: Path) -> None:
    # Pages of a file the host has cached stay charged where they were first read, so no
    # budget of the run sees them, but mlock made them unevictable: under the usual 8 MiB of
    # RLIMIT_MEMLOCK a process, a run of 24 processes pinned 168 MB of the host's cache beside
    # a 128 MB memory budget. A run may lock 64 KiB a process, enough for a key or two.
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(8 * 2**20))
    data.read_bytes()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(data)]))
    )
    program = f"""
import ctypes, mmap, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
fd = os.open({str(data)!r}, os.O_RDONLY)
cached = libc.mmap(None, 8 << 20, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
key = ctypes.create_string_buffer(16 << 10)
return [
    max(resource.getrlimit(resource.RLIMIT_MEMLOCK)) <= 64 << 10,
    libc.mlock(cached, 8 << 20) == 0,
    libc.mlock(ctypes.addressof(key), len(key)) == 0,
]
"""
    try:
        assert value(runtime, program) == [True, False, True]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_a_setsid_double_fork_does_not_outlive_the_run(sandbox: SubprocessCodeRuntime) -> None:
    marker = f"dsh-attack-survivor-{os.getpid()}"
    program = f"""
import os, subprocess, sys
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # a run starts no session of its own
        pass
    if os.fork() == 0:
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])
    os._exit(0)
import time
time.sleep(0.3)
return 'left a sleeper'
"""
    assert value(sandbox, program) == "left a sleeper"
    # A result means every process of the run has SIGKILL pending (it runs none of the program
    # again; see test_nothing_of_a_run_writes_after_its_result); the kernel then tears it down,
    # which takes a moment on a loaded machine, never the sleeper's two minutes.
    deadline = time.monotonic() + 30
    while survivors_named(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert survivors_named(marker) == []


def test_nothing_of_a_run_writes_after_its_result(tmp_path: Path) -> None:
    grant = tmp_path / "granted"
    grant.mkdir()
    log = grant / "log"
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(
            compute_ms=20000, max_wall_ms=20000, sandbox=CodeSandbox(write=[str(grant)])
        )
    )
    program = f"""
import os, time
for _ in range(4):
    if os.fork() == 0:
        try:
            os.setsid()
        except PermissionError:  # a run starts no session of its own
            pass
        if os.fork() == 0:
            with open({str(log)!r}, 'a') as log:
                while True:  # stamps on the clock the host shares
                    log.write(f'{{time.monotonic()}}\\n')
                    log.flush()
        os._exit(0)
while not os.path.exists({str(log)!r}) or os.path.getsize({str(log)!r}) < 4096:
    time.sleep(0.01)
return 'writers left running'
"""
    try:
        for _ in range(5):
            log.unlink(missing_ok=True)
            assert value(runtime, program) == "writers left running"
            answered = time.monotonic()
            stamps = [float(line) for line in log.read_text().split()[:-1]]
            assert max(stamps) < answered
            size = log.stat().st_size
            time.sleep(0.2)
            assert log.stat().st_size == size
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def survivors_named(marker: str) -> list[str]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(name)
            except OSError:
                pass
    return found


def test_a_forged_notice_to_the_init_ends_only_its_own_run(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Descriptor 5 tells the run's init that the worker's Done is in the channel. Written by
    # the program before any Done, it ends the program's own run early, nothing else.
    program = "import os, time\nos.write(5, b'D')\ntime.sleep(10)\nreturn 'still running'"
    result = run(sandbox, program)
    assert result.error is not None and result.error.kind == "worker-exit", result
    assert_next_run_works(sandbox)


def test_a_repeated_start_notice_changes_nothing_and_the_budget_still_holds(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # "S" only starts the init's measuring, which the worker started before the program ran:
    # repeating it neither ends the run nor stops the compute budget.
    assert value(sandbox, "import os\nos.write(5, b'SSS')\nreturn 'on'") == "on"
    budgeted = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=300, max_wall_ms=20_000))
    try:
        spinning = run(budgeted, "import os\nos.write(5, b'S')\nwhile True:\n    pass")
    finally:
        budgeted.close()
    assert spinning.error is not None and spinning.error.kind == "timeout", spinning
    assert "compute" in spinning.error.message, spinning


def test_a_program_cannot_take_the_start_notice_from_its_init() -> None:
    # The worker tells its init "S" just before the program's first line, and the init
    # measures the run (CPU time, memory, processes, its wall backstop) only from then on. A
    # notice pipe could be opened again for reading through /proc/self/fd/5, and a program
    # whose first line read it before the init woke (about every other run) went unmeasured:
    # three children spun 12 s of CPU and held 600 MB under budgets of 2 s and 256 MB. Each run
    # tries; none may outlast its compute budget.
    program = """
import os, time
try:
    notice = os.open('/proc/self/fd/5', os.O_RDONLY | os.O_NONBLOCK)
    taken = os.read(notice, 16)
except OSError as error:
    taken = error.errno
spin_until = time.process_time() + 1.5
while time.process_time() < spin_until:
    pass
return repr(taken)
"""
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=500, max_wall_ms=20_000))
    try:
        results = [run(runtime, program) for _ in range(10)]
    finally:
        runtime.close()
    for result in results:
        assert result.error is not None, f"unmeasured after taking {result.value}"
        assert "compute budget exhausted" in result.error.message, result


def test_a_flood_of_repeated_notices_does_not_keep_the_init_busy(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # The init is outside the run's budgets: a program that kept its notice socket full of "S"
    # (at almost no CPU of its own, blocked in its writes) woke the init for a measuring per
    # 64 bytes, a whole core of the host for as long as the wall ceiling allowed. The init
    # now takes repeated notices at most once a tick, so 3 MiB of them cost it a few
    # milliseconds. Its CPU time is read in clock ticks (10 ms) from its /proc/1/stat.
    program = """
import os
def cpu_of_init():
    with open('/proc/1/stat') as stat:
        fields = stat.read().rsplit(')', 1)[1].split()
    return int(fields[11]) + int(fields[12])
os.set_blocking(5, True)
before = cpu_of_init()
for _ in range(48):
    os.write(5, b'S' * 65536)
return [cpu_of_init() - before, os.sysconf('SC_CLK_TCK')]
"""
    ticks, per_second = value(sandbox, program)
    assert ticks / per_second < 0.25, ticks
    assert_next_run_works(sandbox)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="clone's number is x86_64's")
def test_children_that_exit_at_once_do_not_keep_the_init_measuring() -> None:
    # Each child's exit wakes the init (its SIGCHLD), which is outside the run's budgets. A
    # program whose children were made the init's own (CLONE_PARENT) and exited at once, with
    # 40 idle processes for the /proc walk to read, had the init spend about as much CPU time
    # measuring the tree on every wake-up as the program spent making them. The init still
    # reaps on every wake-up but measures once a tick. That measuring costs the init the same
    # per tick whatever the program does, and a loaded machine stretches the program's wall
    # time (so the ticks) and not its CPU time: what the exits add is the init's CPU time over
    # the loop less its CPU time over as long a spell with no exit.
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(
            compute_ms=20000,
            max_wall_ms=30000,
            # Room for the children not yet gone: on a loaded machine the exited ones the init
            # has not reaped yet outnumbered the usual budget's 24 spare places, and those not
            # yet run to their exit, each a copy of the worker's memory to the /proc walk,
            # outgrew the usual 512 MB (the suite on a load of 7 on two cores): neither is what
            # this test is about.
            max_memory_mb=4096,
            sandbox=CodeSandbox(cgroups=False, max_processes=256),
        )
    )
    program = """
import ctypes, os, subprocess, time
def cpu_of_init():
    with open('/proc/1/stat') as stat:
        fields = stat.read().rsplit(')', 1)[1].split()
    return int(fields[11]) + int(fields[12])
sleepers = [subprocess.Popen(['sleep', '60']) for _ in range(40)]
libc = ctypes.CDLL(None, use_errno=True)
before, own, started = cpu_of_init(), time.process_time(), time.monotonic()
for _ in range(3000):
    if libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0) == 0:  # clone(CLONE_PARENT | SIGCHLD)
        libc.syscall(231, 0)  # exit_group in the child
init, own = cpu_of_init() - before, time.process_time() - own
before = cpu_of_init()
time.sleep(time.monotonic() - started)
ticks = os.sysconf('SC_CLK_TCK')
return [init / ticks, (cpu_of_init() - before) / ticks, own]
"""
    try:
        init, idle, own = value(runtime, program)
        assert init - idle < own / 4, (init, idle, own)
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_the_notice_never_lands_in_a_file_the_program_opened(tmp_path: Path) -> None:
    # A program that closes the notice socket and opens a file under its number: the worker
    # checks the descriptor before it tells the init, and the host ends the run instead.
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=(str(tmp_path),))))
    program = f"""
import os
os.close(5)
return os.open({str(tmp_path / "kept")!r}, os.O_CREAT | os.O_WRONLY, 0o600)
"""
    try:
        assert value(runtime, program) == 5
        assert (tmp_path / "kept").read_bytes() == b""
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_killing_everything_it_can_see_fails_only_its_own_run(
    sandbox: SubprocessCodeRuntime,
) -> None:
    alone = run(sandbox, "import os, signal\nos.kill(-1, signal.SIGKILL)")
    assert alone.error is not None and "ProcessLookupError" in alone.error.message  # no one else
    program = """
import os, signal, time
if os.fork() == 0:
    os.kill(-1, signal.SIGKILL)  # the child kills the worker
time.sleep(5)
"""
    with_child = run(sandbox, program)
    assert with_child.error is not None and with_child.error.kind == "worker-exit", with_child
    assert_next_run_works(sandbox)


def test_a_program_that_closes_its_channel_to_the_host_gives_its_slot_back() -> None:
    # With its channel to the host closed the run can never complete; held here until the wall
    # ceiling, it would keep the runtime's only slot. Its init ends it when the host hangs up,
    # which the program also withholds: it keeps a write end of the host's channel open.
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_parallel_runs=1, max_wall_ms=20_000))
    program = """
import os, time
keep = os.open('/proc/self/fd/3', os.O_WRONLY)
os.close(4)
time.sleep(3600)
"""
    try:
        result = run(runtime, program)
        assert result.error == CodeRunFailure(
            "worker-exit", "worker closed its channel before completing"
        ), result
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_an_init_killed_from_outside_fails_its_run_naming_the_init(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Something outside the run (an administrator, the kernel's out-of-memory killer) kills the
    # run's init while the program waits: the init's exit is not the worker's.
    async def kill_init(namespace: Any) -> Any:
        for name in os.listdir("/proc"):
            try:
                if not name.isdigit() or os.stat(f"/proc/{name}/ns/pid").st_ino != namespace:
                    continue
                status = Path(f"/proc/{name}/status").read_text()
            except OSError:
                continue
            ids = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            if ids.split()[-1] == "1":
                os.kill(int(name), signal.SIGKILL)
                return "killed"
        return "no init found"

    program = """
import os, time
await tools.kill_init(os.stat('/proc/self/ns/pid').st_ino)
time.sleep(30)
"""
    result = run(sandbox, program, kill_init=kill_init)
    assert result.error == CodeRunFailure(
        "worker-exit",
        "the sandbox's init failed: it exited with signal SIGKILL before the run completed",
    ), result
    assert_next_run_works(sandbox)


def test_a_run_that_keeps_its_own_channel_open_still_ends_alone() -> None:
    # The init ends a settled run when the host's channel to the worker hangs up. A program
    # that reopens that channel for writing through /proc/self/fd withholds the hang-up: the
    # host then kills the init itself, and neither the template nor a concurrent run suffers.
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_output_bytes=4096, max_wall_ms=20_000))
    hostile = """
import os, time
keep = os.open('/proc/self/fd/3', os.O_WRONLY)
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # a run starts no session of its own
        pass
    time.sleep(3600)
print('x' * 5000, flush=True)
time.sleep(3600)
"""
    honest = "import time\ntime.sleep(2)\nreturn 'honest ok'"
    results: dict[str, Any] = {}
    try:
        assert value(runtime, "return 0") == 0
        template = runtime.template_pid
        thread = threading.Thread(target=lambda: results.update(honest=run(runtime, honest)))
        thread.start()
        try:
            time.sleep(0.3)  # the honest run is under way
            settled = run(runtime, hostile)
        finally:
            thread.join(30)
        assert settled.error is not None and settled.error.kind == "output-limit", settled
        assert results["honest"].error is None and results["honest"].value == "honest ok"
        assert runtime.template_pid == template
        assert_next_run_works(runtime)
    finally:
        runtime.close()


# --- budgets of the whole tree -------------------------------------------------------------


def test_shared_memory_of_the_tree_is_charged() -> None:
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(max_memory_mb=160, compute_ms=20000, max_wall_ms=20000)
    )
    program = """
import mmap, os, time
try:
    mmap.mmap(-1, 4096)
except PermissionError:
    return 'refused'  # without cgroups: shared anonymous memory is refused outright
for _ in range(4):
    if os.fork() == 0:
        block = mmap.mmap(-1, 60 << 20)  # MAP_SHARED: shared memory, not anonymous pages
        for offset in range(0, 60 << 20, 4096):
            block[offset] = 1
        time.sleep(30)
        os._exit(0)
time.sleep(30)
return 'kept 240MB'
"""
    try:
        result = run(runtime, program)
        if result.error is None:
            assert result.value == "refused", result
        else:
            assert result.error.kind == "worker-exit"
            assert "memory budget exhausted" in result.error.message
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_a_fork_bomb_ends_the_run_and_nothing_else() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=20000, max_wall_ms=20000))
    program = """
import os, time
for _ in range(12):
    try:
        os.fork()
    except OSError:
        break
time.sleep(30)
return 'thousands of processes'
"""
    try:
        result = run(runtime, program)
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert "budget exhausted" in result.error.message
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the burst is x86_64 machine code")
def test_a_burst_of_thousands_of_processes_ends_at_once_without_cgroups() -> None:
    # Without cgroups nothing caps a run's processes between two samples of its tree, so a
    # native program makes thousands before the budget sees them. Ending them must not take
    # long: repeating kill(-1), which visits every process, for each child reaped took 12 s
    # for 8,192 processes (quadratic); the run now ends in well under a second.
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=20000, max_wall_ms=20000, sandbox=CodeSandbox(cgroups=False))
    )
    program = bursting_program(13)
    try:
        runtime.warm_up()
        started = time.monotonic()
        result = run(runtime, program)
        took = time.monotonic() - started
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert "process budget exhausted" in result.error.message
        assert took < 6, f"ending the burst took {took:.1f} s"
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_spinning_children_are_charged_to_the_run() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=600, max_wall_ms=20000))
    program = """
import os
for _ in range(2):
    if os.fork() == 0:
        try:
            os.setsid()
        except PermissionError:  # a run starts no session of its own
            pass
        while True:
            pass
import time
time.sleep(30)
"""
    try:
        result = run(runtime, program)
        assert result.error is not None and result.error.kind == "timeout", result
        assert "compute budget exhausted" in result.error.message
    finally:
        runtime.close()


# --- the channel and the host's memory -----------------------------------------------------


def test_a_program_that_never_reads_its_replies_cannot_fill_the_host(
    sandbox: SubprocessCodeRuntime,
) -> None:
    program = """
asyncio.get_running_loop().remove_reader(3)  # stop reading replies
big = 'x' * (1 << 20)
for _ in range(3000):
    tools.echo(big)
import time
time.sleep(30)
"""
    result = run(sandbox, program, echo=lambda args: args)
    assert result.error is not None and result.error.kind == "frame-limit", result
    assert "replies unread" in result.error.message
    assert_next_run_works(sandbox)


@pytest.mark.parametrize(
    ("frame", "what"),
    [
        ("bytes([0xC0])", "undecodable"),
        ("msgspec.msgpack.encode(['Done', None, ['no-such-kind', 'x']])", "ill-typed"),
        ("msgspec.msgpack.encode(['Call', 1, 'tools', 'echo', ['x']])", "repeated call id"),
    ],
)
def test_a_flood_of_frames_the_host_drops_ends_the_run(
    sandbox: SubprocessCodeRuntime, frame: str, what: str
) -> None:
    # Frames the host drops cost it a decode each and the program almost nothing: without a
    # bound the host would decode junk for the whole wall ceiling.
    program = f"""
import os, time, msgspec
body = {frame}
chunk = (len(body).to_bytes(8, 'big') + body) * 1000
for _ in range(1000):
    os.write(4, chunk)
time.sleep(30)
return 'the host kept decoding'
"""
    result = run(sandbox, program, echo=lambda args: args)
    assert result.error is not None and result.error.kind == "frame-limit", (what, result)
    assert "frames the host could not use" in result.error.message
    assert_next_run_works(sandbox)


@pytest.mark.parametrize(
    ("name", "args", "what"),
    [
        ("'nope'", "[None]", "no binding"),
        ("'echo'", "[['object', ['a', 'a']], 1, 2]", "arguments that are no value"),
    ],
)
def test_a_flood_of_calls_the_host_cannot_make_ends_the_run(
    sandbox: SubprocessCodeRuntime, name: str, args: str, what: str
) -> None:
    # Each such call has a fresh id, so the host answers it (as a failure) rather than drop
    # it, a decode and a reply for each: a program that wrote them in bulk kept a host core
    # busy, at a tenth of that of its own, until its wall ceiling. The worker sends neither
    # (``tools.nope`` raises AttributeError, a repeated key cannot be encoded).
    program = f"""
import os, time, msgspec
os.set_blocking(4, True)
frames = bytearray()
for call_id in range(1, 20_001):
    body = msgspec.msgpack.encode(['Call', call_id, 'tools', {name}, {args}])
    frames += len(body).to_bytes(8, 'big') + body
view = memoryview(frames)
while view:
    view = view[os.write(4, view):]
time.sleep(30)
return 'the host kept answering'
"""
    calls: list[Any] = []
    result = run(sandbox, program, echo=calls.append)
    assert result.error is not None and result.error.kind == "frame-limit", (what, result)
    assert "frames the host could not use" in result.error.message
    assert calls == []
    assert_next_run_works(sandbox)


def test_native_output_floods_end_at_the_output_cap() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_output_bytes=64 * 1024))
    program = """
import os
chunk = b'x' * (1 << 20)
for _ in range(200):
    os.write(1, chunk)
"""
    try:
        result = run(runtime, program)
        assert result.error is not None and result.error.kind == "output-limit", result
        many = run(runtime, "for i in range(200000):\n    print(i)")
        assert many.error is not None and many.error.kind == "output-limit", many
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_forged_frames_reach_only_the_run_own_bindings() -> None:
    agent_b_only: list[str] = []

    def secret(args: Any, ctx: Any) -> str:
        agent_b_only.append("ran")
        return "secret"

    from dsh_tools import ToolOutput, define_tool

    secret_tool = define_tool(
        name="secret",
        description="Only for agent B.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: []),
        execute=secret,
    )
    program = """
import msgspec, os
def frame(*fields):
    body = msgspec.msgpack.encode(list(fields))
    return len(body).to_bytes(8, 'big') + body
os.write(4, frame('Call', 999, 'tools', 'secret', []))
os.write(4, frame('Call', 998, 'admin', 'secret', []))
os.write(4, frame('Done', None, ['exception', 'forged']))
try:
    return await tools.secret({})
except Exception as error:
    return str(error)
"""
    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(echo_tool())
        system.tools.register(secret_tool)
        system.agent("A").tools.restrict(deny=["secret"])
        result = system.execute(
            ExecuteCall(
                call_id="c1",
                name="run_code",
                arguments={"code": program, "description": "forge frames"},
                agent="A",
            )
        )
    assert agent_b_only == []
    failure = failure_of(result)
    assert "forged" in failure.message or "secret" in failure.message


def run_code_on_the_command_line(program: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    """``dsh-tools run-code --workspace WORKSPACE -`` with ``program`` on its stdin."""
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("dsh-tools")),
            "run-code",
            "--workspace",
            str(workspace),
            "-",
        ],
        input=program,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_line_runs_a_hostile_program_in_the_sandbox(tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("hunter2")
    program = f"""
import os
try:
    return open({str(secret)!r}).read()
except PermissionError:
    return 'refused'
"""
    done = run_code_on_the_command_line(program, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


def test_the_command_line_shows_terminal_controls_escaped(tmp_path: Path) -> None:
    # Printed raw, the program's output would reach the user's terminal from inside the
    # sandbox: OSC 52 writes the clipboard, a clear screen or a carriage return fakes what
    # the run did, a C1 CSI recolours, a right-to-left override reorders the line.
    program = (
        'print("a\\x1b]52;c;cm0gLXJmIH4=\\x07b\\x1b[2J\\rc\\x9b31m\\u202ed\\x00\\x7f")\n'
        'return "\\x1b]0;title\\x07\\tkept"\n'
    )
    done = run_code_on_the_command_line(program, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "a\\x1b]52;c;cm0gLXJmIH4=\\x07b\\x1b[2J\\rc\\x9b31m\\u202ed\\x00\\x7f\n"
        "\\x1b]0;title\\x07\tkept\n"
    )


def test_concurrent_runs_do_not_see_each_other(sandbox: SubprocessCodeRuntime) -> None:
    holder = """
import os, time
open('mine', 'w').write('run one')
time.sleep(1.5)
return sorted(os.listdir('.'))
"""
    peeker = """
import os
return [sorted(os.listdir('.')), sorted(n for n in os.listdir('/proc') if n.isdigit())]
"""
    results: dict[str, Any] = {}

    def hold() -> None:
        results["holder"] = value(sandbox, holder)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        results["peeker"] = value(sandbox, peeker)
    finally:
        thread.join(30)
    assert results["holder"] == ["mine"]
    assert results["peeker"] == [[], ["1", "2"]]


def test_a_run_does_not_learn_the_hosts_name(sandbox: SubprocessCodeRuntime) -> None:
    # A run's UTS namespace starts as a copy of the host's, whose name can tell a program
    # which machine (or whose) it runs on.
    program = """
import os, socket
return [socket.gethostname(), os.uname().nodename,
        open('/proc/sys/kernel/hostname').read().strip()]
"""
    assert value(sandbox, program) == ["sandbox"] * 3
    assert socket.gethostname() == os.uname().nodename  # the host's own is unchanged


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="giving a harness a domain name of its own needs root and unshare",
)
def test_a_run_does_not_learn_the_hosts_domain_name() -> None:
    # The run's UTS namespace is a copy of the host's, which also holds the host's NIS domain
    # name (a site's or a customer's, like the host name). The harness runs in a UTS namespace
    # of its own here, so that the machine's own domain name stays as it is.
    harness = """
import asyncio, ctypes, os, sys
sys.path.insert(0, sys.argv[1])
from sandbox_support import value
from dsh_tools import CodeRuntimeConfig, SubprocessCodeRuntime
name = b"corp.example.internal"
if ctypes.CDLL(None, use_errno=True).setdomainname(name, len(name)) != 0:
    raise OSError(ctypes.get_errno(), "setdomainname")
runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=3000))
try:
    names = "[open('/proc/sys/kernel/domainname').read().strip(), os.uname().nodename]"
    print(list(value(runtime, "import os\\nreturn " + names)))
finally:
    runtime.close()
"""
    tests = str(Path(__file__).parent)
    done = subprocess.run(
        ["unshare", "--uts", sys.executable, "-c", harness, tests],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['(none)', 'sandbox']"


def test_the_worker_holds_only_its_own_descriptors_and_no_device(
    sandbox: SubprocessCodeRuntime,
) -> None:
    program = """
import os
fds = {}
for fd in os.listdir('/proc/self/fd'):
    try:
        fds[fd] = os.readlink('/proc/self/fd/' + fd).split(':')[0]
    except FileNotFoundError:
        pass  # the listing's own descriptor, closed already
refused = {}
for path in ('/sys/kernel/notes', '/sys/class/net', '/dev/mem', '/dev/kmsg', '/dev/tty',
             '/dev/shm', '/proc/kcore', '/proc/sysrq-trigger', '/etc/hostname'):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, 'rb').close()
        refused[path] = 'opened'
    except OSError as error:
        refused[path] = type(error).__name__
try:
    os.mknod('null-copy', 0o20666, os.makedev(1, 3))
    refused['mknod'] = 'made'
except OSError as error:
    refused['mknod'] = type(error).__name__
return [fds, refused]
"""
    fds, refused = value(sandbox, program)
    kinds = {int(fd): kind for fd, kind in fds.items()}
    # /dev/null, output pipes, channel pipes, the notice socket to the run's own init (which no
    # program can open again through /proc for reading), the pipe of the stacks the host asks
    # for as a budget runs out; then only the event loop's pair
    expected = ["/dev/null", "pipe", "pipe", "pipe", "pipe", "socket", "pipe"]
    assert [kinds.pop(fd) for fd in range(7)] == expected
    assert sorted(kinds.values()) == ["socket", "socket"], kinds
    assert set(refused.values()) <= {"PermissionError", "FileNotFoundError"}, refused  # or absent
    assert refused["/sys/class/net"] == refused["/dev/shm"] == refused["mknod"] == "PermissionError"


def _can_raise_hard_limits() -> bool:
    """Whether this process may raise its hard limits (``CAP_SYS_RESOURCE``)."""
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) >> 24 & 1)


@pytest.mark.skipif(
    not _can_raise_hard_limits(), reason="raising a hard limit takes CAP_SYS_RESOURCE"
)
def test_no_real_time_scheduling_or_raised_priority_reaches_a_run() -> None:
    # The runs inherit the harness's limits. Where its hard RLIMIT_RTPRIO is above 0 (a
    # container started with `--ulimit rtprio=...`, a service with LimitRTPRIO=), a program
    # could make itself SCHED_FIFO: a real-time process that spins leaves every other process
    # of its CPU (the host's, and the run's init that would end it) 5% of it until compute_ms
    # runs out. A raised RLIMIT_NICE likewise let it put itself ahead of the host.
    program = """
import os, resource
seen = [list(resource.getrlimit(limit)) for limit in (resource.RLIMIT_RTPRIO, resource.RLIMIT_NICE)]
for attempt in (
    lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)),
    lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)),
    lambda: os.setpriority(os.PRIO_PROCESS, 0, -5),
    lambda: resource.setrlimit(resource.RLIMIT_RTPRIO, (1, 1)),
):
    try:
        attempt()
        seen.append('allowed')
    except (PermissionError, ValueError):
        seen.append('refused')
return seen + [os.sched_getscheduler(0) == os.SCHED_OTHER]
"""
    raised = {resource.RLIMIT_RTPRIO: (1, 1), resource.RLIMIT_NICE: (30, 30)}
    saved = {which: resource.getrlimit(which) for which in raised}
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=3000, max_wall_ms=20000))
    try:
        for which, limits in raised.items():
            resource.setrlimit(which, limits)
        try:
            assert value(runtime, "return 1") == 1  # the template starts with these limits
        finally:
            for which, limits in saved.items():
                resource.setrlimit(which, limits)
        assert value(runtime, program) == [
            [0, 0],
            [0, 0],
            "refused",
            "refused",
            "refused",
            "refused",
            True,
        ]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


REAL_TIME_HOST = """
from dsh_tools import CodeRuntimeConfig, CodeSandbox, SubprocessCodeRuntime
from sandbox_support import value
program = "import os\\nreturn [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)]"
for cgroups in (True, False):
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(cgroups=cgroups)))
    try:
        print(list(value(runtime, program)))
    finally:
        runtime.close()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may start a real-time harness here")
@pytest.mark.skipif(shutil.which("chrt") is None, reason="needs chrt(1)")
def test_a_real_time_harness_hands_neither_its_policy_nor_its_priority_to_a_run() -> None:
    # Policy and nice value are inherited across fork, which no limit of the run's undoes: a
    # harness started under SCHED_FIFO at nice -10 gave both to the program (a spinning one
    # leaves every other process of its CPU 5% of it), and the run's cpu cgroup, which refuses
    # a real-time task, failed every run.
    host = subprocess.run(
        ["chrt", "-f", "10", "nice", "-n", "-10", sys.executable, "-c", REAL_TIME_HOST],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
        timeout=120,
    )
    assert host.stdout.split("\n")[:2] == ["[0, 0]", "[0, 0]"], host  # SCHED_OTHER, nice 0


REAL_TIME_IO_HOST = """
from dsh_tools import CodeRuntimeConfig, SubprocessCodeRuntime
from sandbox_support import value
program = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
priority = libc.syscall(252, 1, 0)  # ioprio_get(IOPRIO_WHO_PROCESS, self)
return priority >> 13  # its class
'''
runtime = SubprocessCodeRuntime(CodeRuntimeConfig())
try:
    print(value(runtime, program))
finally:
    runtime.close()
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the ioprio calls' numbers are x86_64's")
@pytest.mark.skipif(os.geteuid() != 0, reason="only root may start a real-time I/O harness")
@pytest.mark.skipif(shutil.which("ionice") is None, reason="needs ionice(1)")
def test_a_harness_of_real_time_io_hands_its_io_class_to_no_run() -> None:
    # The I/O priority is inherited across fork and exec too: a harness started under
    # `ionice -c1` gave every run the real-time class, whose reads the disk's scheduler
    # (mq-deadline, bfq) serves before anything else of the machine; the run cannot take it,
    # but kept it.
    host = subprocess.run(
        ["ionice", "-c1", "-n0", sys.executable, "-c", REAL_TIME_IO_HOST],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
        timeout=120,
    )
    assert host.stdout.split("\n")[0] in ("0", "2"), host  # none (by nice) or best effort


def test_queued_signals_take_a_bounded_share_of_the_users_allowance(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # Real-time signals queue one entry each, counted against the (shared) user's allowance;
    # the host's own sigqueue and timer_create would fail once a run had taken all of it. The
    # loop stops at 5,000 so that a run without the bound does not starve the host either.
    program = """
import signal, threading
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
queued = 0
try:
    while queued < 5000:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        queued += 1
except OSError as error:
    return [queued, error.errno]
return [queued, None]
"""
    queued, errno = value(sandbox, program)
    assert errno == 11  # EAGAIN
    assert queued <= 1024
    assert_next_run_works(sandbox)


# --- keys of encrypted directories ---------------------------------------------------------

_ADD_ENCRYPTION_KEY = 0xC0506617
_SET_ENCRYPTION_POLICY = 0x800C6613
_KEY_SPEC_IDENTIFIER = 2


def _mounted_filesystem(tmp_path: Path, mkfs: list[str], megabytes: int) -> Iterator[Path]:
    """A filesystem made by ``mkfs`` (its command, the image's path appended) in a file of
    ``tmp_path``, mounted through a loop device while the caller holds it."""
    if os.geteuid() != 0 or shutil.which(mkfs[0]) is None:
        pytest.skip(f"mounting a filesystem of one's own needs root and {mkfs[0]}")
    image = tmp_path / "disk.img"
    with open(image, "wb") as file:
        file.truncate(megabytes * 2**20)
    subprocess.run([*mkfs, str(image)], check=True, capture_output=True)
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    if subprocess.run(["mount", "-o", "loop", str(image), str(mounted)]).returncode != 0:
        pytest.skip("this machine cannot mount a loop device")
    try:
        yield mounted
    finally:
        # Lazily: a template just closed may still hold a granted path open for a moment.
        subprocess.run(["umount", "--lazy", str(mounted)], check=True)


@pytest.fixture
def encrypting_filesystem(tmp_path: Path) -> Iterator[Path]:
    """An ext4 filesystem with encryption on, mounted from a file of ``tmp_path``."""
    yield from _mounted_filesystem(tmp_path, ["mkfs.ext4", "-q", "-F", "-O", "encrypt"], 16)


def _add_encryption_key(path: Path, key: bytes) -> bytes:
    """Add ``key`` for the filesystem of ``path`` (as the caller's user); its identifier."""
    argument = bytearray(struct.pack("II32sII32x", _KEY_SPEC_IDENTIFIER, 0, b"", len(key), 0))
    argument += key
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, _ADD_ENCRYPTION_KEY, argument, True)
    finally:
        os.close(fd)
    return bytes(argument[8:24])


def test_a_run_can_neither_remove_nor_add_the_keys_of_encrypted_directories(
    encrypting_filesystem: Path,
) -> None:
    # A key of an encrypted directory belongs to the filesystem and is claimed by user, and
    # the worker's user is the harness's: from a descriptor of any file of that filesystem a
    # run removed the key the host had added (its directory was then locked to the host), and
    # added keys of its own by the hundred thousand, which stayed with the filesystem after
    # the run, in kernel memory and in the key quota the host's keys share.
    identifier = _add_encryption_key(encrypting_filesystem, os.urandom(64))
    vault = encrypting_filesystem / "vault"
    vault.mkdir()
    fd = os.open(vault, os.O_RDONLY)
    try:  # a version 2 policy: AES-256-XTS contents, AES-256-CTS names, 32-byte padding
        fcntl.ioctl(fd, _SET_ENCRYPTION_POLICY, struct.pack("BBBB4x16s", 2, 1, 4, 2, identifier))
    finally:
        os.close(fd)
    (vault / "note.txt").write_text("the host's own")
    granted = encrypting_filesystem / "granted.txt"
    granted.write_text("readable")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(granted)]))
    )
    program = f"""
import fcntl, os, struct
fd = os.open({str(granted)!r}, os.O_RDONLY)
def attempt(request, argument):
    try:
        fcntl.ioctl(fd, request, argument, True)
        return 'done'
    except OSError as error:
        return error.errno
removal = bytearray(64)
struct.pack_into('II16s', removal, 0, 2, 0, {identifier!r})
addition = bytearray(struct.pack('II32sII32x', 2, 0, b'', 64, 0) + os.urandom(64))
return {{
    'remove': attempt(0xC0406618, removal),
    'remove for every user': attempt(0xC0406619, removal),
    'add': attempt(0xC0506617, addition),
    'status': attempt(0xC080661A, bytearray(128)),
}}
"""
    try:
        assert set(value(runtime, program).values()) == {errno.EOPNOTSUPP}
        assert (vault / "note.txt").read_text() == "the host's own"
        assert_next_run_works(runtime)
    finally:
        runtime.close()


def test_a_run_cannot_encrypt_its_write_grant_with_a_key_no_one_has(
    encrypting_filesystem: Path,
) -> None:
    # A directory's encryption policy is for good, and one of the original version names its
    # key by a descriptor the kernel does not check: a run that gave its empty write grant
    # such a policy left every new file there refused (ENOKEY), the host's and later runs'.
    grant = encrypting_filesystem / "out"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import fcntl, os, struct
fd = os.open({str(grant)!r}, os.O_RDONLY | os.O_DIRECTORY)
policy = struct.pack('BBBB8s', 0, 1, 4, 2, os.urandom(8))  # version 1, a random descriptor
try:
    fcntl.ioctl(fd, 0x800C6613, policy)  # FS_IOC_SET_ENCRYPTION_POLICY
    return 'encrypted'
except OSError as error:
    return error.errno
"""
    try:
        assert value(runtime, program) == errno.EOPNOTSUPP
        (grant / "after.txt").write_text("the host writes its grant")
        write = f"open({str(grant / 'next.txt')!r}, 'w').write('x')\nreturn 'written'"
        assert value(runtime, write) == "written"
    finally:
        runtime.close()


@pytest.fixture
def ext4_filesystem(tmp_path: Path) -> Iterator[Path]:
    """An ext4 filesystem, mounted from a file of ``tmp_path``."""
    yield from _mounted_filesystem(tmp_path, ["mkfs.ext4", "-q", "-F"], 16)


_GET_FLAGS = 0x80086601  # FS_IOC_GETFLAGS
_SYNC_FLAGS = 0x8 | 0x10000  # FS_SYNC_FL, FS_DIRSYNC_FL


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_set_the_inode_flags_of_its_write_grant(ext4_filesystem: Path) -> None:
    # Inode flags set in a write grant outlive the run: a run that marked its grant
    # synchronous (inherited by everything made there later) turned each of the host's later
    # small writes there into a write request to the disk; the project inheritance flag and
    # project number decide what a project quota on the grant holds.
    grant = ext4_filesystem / "out"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
grant = {str(grant)!r}
fd = os.open(grant, os.O_RDONLY | os.O_DIRECTORY)
flags = struct.unpack('l', fcntl.ioctl(fd, {_GET_FLAGS}, bytes(8)))[0]  # reading works
seen = {{}}
for name, request, argument in (
    ('FS_IOC_SETFLAGS', 0x40086602, struct.pack('l', flags | {_SYNC_FLAGS})),
    ('FS_IOC_FSSETXATTR', 0x401C5820, struct.pack('IIIII8x', 0x20 | 0x40, 0, 0, 7, 0)),
):
    try:
        fcntl.ioctl(fd, request, argument)
        seen[name] = 'set'
    except OSError as error:
        seen[name] = error.errno
attributes = ctypes.create_string_buffer(struct.pack('QIIII', 0x20, 0, 0, 7, 0), 24)
if libc.syscall(469, -100, grant.encode(), attributes, 24, 0) == 0:  # file_setattr
    seen['file_setattr'] = 'set'
else:
    seen['file_setattr'] = ctypes.get_errno()
return seen
"""
    try:
        assert value(runtime, program) == {
            "FS_IOC_SETFLAGS": errno.EPERM,
            "FS_IOC_FSSETXATTR": errno.EPERM,
            "file_setattr": errno.EPERM,
        }
        fd = os.open(grant, os.O_RDONLY | os.O_DIRECTORY)
        try:
            flags = struct.unpack("l", fcntl.ioctl(fd, _GET_FLAGS, bytes(8)))[0]
        finally:
            os.close(fd)
        assert not flags & _SYNC_FLAGS
        assert_next_run_works(runtime)
    finally:
        runtime.close()


# --- commits of a whole filesystem ---------------------------------------------------------


@pytest.fixture
def btrfs_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A btrfs filesystem, mounted from a file of ``tmp_path``."""
    yield from _mounted_filesystem(tmp_path, ["mkfs.btrfs", "-q", "-f"], 128)


def _mounted_device_writes(mounted: Path) -> int:
    """How many write requests the device of the filesystem mounted at ``mounted`` has
    completed."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        if fields.split()[4] == str(mounted):
            device = os.path.basename(tail.split()[1])  # the source: /dev/loopN
    return int(Path(f"/sys/block/{device}/stat").read_text().split()[4])


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_a_btrfs_filesystem_commit_to_its_disk(btrfs_filesystem: Path) -> None:
    # btrfs commits every process's writes to its disk every 30 seconds; BTRFS_IOC_SYNC (and
    # BTRFS_IOC_START_SYNC) commit them at once, from a read-only descriptor of any of its
    # files, with no privilege: a run looping on it while the host appended a line every 10 ms
    # made thousands of write requests in seconds, as syncfs (refused) would have.
    granted = btrfs_filesystem / "granted.txt"
    granted.write_text("readable")
    os.sync()
    (btrfs_filesystem / "host.log").write_text("the host's line, to be committed later\n")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(granted)]))
    )
    program = f"""
import fcntl, os
fd = os.open({str(granted)!r}, os.O_RDONLY)
seen = []
for request in (0x9408, 0x80089418):  # BTRFS_IOC_SYNC, BTRFS_IOC_START_SYNC
    try:
        fcntl.ioctl(fd, request, 0)
        seen.append('committed')
    except PermissionError:
        seen.append('refused')
return seen
"""
    try:
        value(runtime, "return 1")  # the template starts before the count does
        writes = _mounted_device_writes(btrfs_filesystem)
        assert value(runtime, program) == ["refused", "refused"]
        assert _mounted_device_writes(btrfs_filesystem) == writes
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@contextlib.contextmanager
def host_appending(log: Path) -> Iterator[None]:
    """The host appending a line to ``log`` every 10 ms (and writing it out) meanwhile."""
    stop = threading.Event()

    def append() -> None:
        with open(log, "a") as file:
            while not stop.wait(0.01):
                file.write("a line of the host's log\n")
                file.flush()

    appender = threading.Thread(target=append)
    appender.start()
    try:
        yield
    finally:
        stop.set()
        appender.join()


@contextlib.contextmanager
def device_writes_while_host_appends(
    runtime: SubprocessCodeRuntime, log: Path, mounted: Path
) -> Iterator[Callable[[], int]]:
    """While the host appends to ``log`` (``host_appending``), what counts the write requests
    made to ``mounted``'s device since the block began; the template started first, so that
    its start is not counted. ``runtime`` is closed after."""
    try:
        value(runtime, "return 1")
        with host_appending(log):
            writes = _mounted_device_writes(mounted)
            yield lambda: _mounted_device_writes(mounted) - writes
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_the_host_write_back_a_file_it_may_only_read(
    ext4_filesystem: Path,
) -> None:
    # A file the host appends to holds dirty pages until the kernel writes them back. From a
    # read-only descriptor a FIEMAP request with FIEMAP_FLAG_SYNC (or ext4's extent cache
    # request, which takes the same flag), sync_file_range, and any
    # O_DIRECT read (which first writes back its range) each made the disk take the host's
    # pages at once: in a loop, hundreds of write requests a second.
    log = ext4_filesystem / "host.log"
    log.write_text("")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(read=[str(log)]))
    )
    program = f"""
import ctypes, fcntl, mmap, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
log = os.open({str(log)!r}, os.O_RDONLY)
buffer = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_PRIVATE)
def fiemap():
    request = bytearray(struct.pack('QQIIII', 0, 2**63 - 1, 1, 0, 0, 0))  # FIEMAP_FLAG_SYNC
    fcntl.ioctl(log, 0xC020660B, request)
def ext4_extent_cache():
    request = bytearray(struct.pack('QQIIII', 0, 2**63 - 1, 1, 0, 0, 0))  # FIEMAP_FLAG_SYNC
    fcntl.ioctl(log, 0xC020662A, request)  # EXT4_IOC_GET_ES_CACHE
def sync_file_range():
    if libc.syscall(277, log, ctypes.c_long(0), ctypes.c_long(0), 7) < 0:
        raise OSError(ctypes.get_errno(), 'sync_file_range')
def direct_read():
    direct = os.open({str(log)!r}, os.O_RDONLY | os.O_DIRECT)
    try:
        os.preadv(direct, [buffer], 0)
    finally:
        os.close(direct)
def direct_read_by_fcntl():
    fcntl.fcntl(log, fcntl.F_SETFL, os.O_DIRECT)
    os.preadv(log, [buffer], 0)
def direct_scratch_file():
    os.close(os.open('own.bin', os.O_RDWR | os.O_CREAT | os.O_DIRECT))
seen = {{}}
for attack in (fiemap, ext4_extent_cache, sync_file_range, direct_read, direct_read_by_fcntl,
               direct_scratch_file):
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        try:
            attack()
            seen[attack.__name__] = 'done'
        except OSError as error:
            seen[attack.__name__] = error.errno
            break
return seen
"""
    with device_writes_while_host_appends(runtime, log, ext4_filesystem) as writes:
        assert value(runtime, program) == {
            "fiemap": errno.EOPNOTSUPP,
            "ext4_extent_cache": errno.EOPNOTSUPP,
            "sync_file_range": "done",  # returns having done nothing, as fsync does
            "direct_read": errno.EINVAL,
            "direct_read_by_fcntl": errno.EINVAL,
            "direct_scratch_file": errno.EINVAL,
        }
        # The journal's own commit every 5 s is a few requests; each attack made hundreds.
        assert writes() < 40
        assert_next_run_works(runtime)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_map_the_whole_disk_of_a_file_it_may_read(ext4_filesystem: Path) -> None:
    # FS_IOC_GETFSMAP (ext4 answers it without privilege, from a read-only descriptor of any
    # file) reports which inode owns every block of the filesystem, the files of directories
    # the run may not list included: a run polling it sees where and how much the host writes
    # anywhere on that disk. Each call also walks the filesystem's block groups under their
    # locks: eight processes looping on it made the host's creation of small files on that
    # disk about twice as slow as the same load of harmless requests.
    granted = ext4_filesystem / "granted.txt"
    granted.write_text("readable")
    hidden = ext4_filesystem / "private"
    hidden.mkdir(mode=0o700)
    (hidden / "secret.bin").write_bytes(os.urandom(3 << 20))
    os.sync()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(read=[str(granted)]))
    )
    program = f"""
import fcntl, os, struct
fd = os.open({str(granted)!r}, os.O_RDONLY)
low = struct.pack('IIQQQQ24x', 0, 0, 0, 0, 0, 0)
high = struct.pack('IIQQQQ24x', 2**32 - 1, 2**32 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 0)
count = 256
request = bytearray(struct.pack('IIII48x', 0, 0, count, 0) + low + high + bytes(64 * count))
try:
    fcntl.ioctl(fd, 0xC0C0583B, request)  # FS_IOC_GETFSMAP
except OSError as error:
    return error.errno
entries = struct.unpack_from('I', request, 12)[0]
extents = [struct.unpack_from('IIQQQQ', request, 192 + 64 * n) for n in range(entries)]
return sorted(length for _dev, _flags, _physical, owner, _offset, length in extents
              if owner < 2**63)[-3:]  # the largest extents of files, by inode
"""
    try:
        assert value(runtime, program) == errno.EOPNOTSUPP
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.fixture
def xfs_filesystem(tmp_path: Path) -> Iterator[Path]:
    """An XFS filesystem (the root filesystem of many distributions), mounted from a sparse
    file of ``tmp_path`` (300 MB is the smallest XFS makes)."""
    yield from _mounted_filesystem(tmp_path, ["mkfs.xfs", "-q", "-f"], 320)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_xfs_write_back_a_file_it_may_only_read(xfs_filesystem: Path) -> None:
    # XFS's own block map requests (XFS_IOC_GETBMAP, and GETBMAPX without its flag that
    # leaves delayed allocations be, which lies in memory the filter cannot read) write back
    # the file's dirty pages first, from a read-only descriptor: in a loop against a log the
    # host appended to every 10 ms, hundreds of write requests where the appends made none.
    log = xfs_filesystem / "host.log"
    log.write_text("")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(read=[str(log)]))
    )
    program = f"""
import fcntl, os, struct, time
log = os.open({str(log)!r}, os.O_RDONLY)
whole_file = struct.pack('qqqii', 0, 0, -1, 2, 0)
seen = {{}}
for name, request, argument in (
    ('XFS_IOC_GETBMAP', 0xC0205826, whole_file),
    ('XFS_IOC_GETBMAPX', 0xC0205838, whole_file + bytes(16)),  # no BMV_IF_DELALLOC
):
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        try:
            fcntl.ioctl(log, request, bytearray(argument))
            seen[name] = 'done'
        except OSError as error:
            seen[name] = error.errno
            break
return seen
"""
    with device_writes_while_host_appends(runtime, log, xfs_filesystem) as writes:
        assert value(runtime, program) == {
            "XFS_IOC_GETBMAP": errno.EOPNOTSUPP,
            "XFS_IOC_GETBMAPX": errno.EOPNOTSUPP,
        }
        # XFS's own log flush every 30 s is a few requests; each attack made a hundred.
        assert writes() < 20
        assert_next_run_works(runtime)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_xfs_write_back_a_file_it_may_only_read_by_sharing_its_blocks(
    xfs_filesystem: Path,
) -> None:
    # On a filesystem with reflinks (XFS, btrfs) copy_file_range and the clone and dedupe
    # requests first write back, and wait for, the dirty pages of both files: from a read-only
    # descriptor of a log the host appended to every 10 ms, into a file of a write grant on
    # the same filesystem, a clone loop made the disk take every line the host appended at
    # once (295 write requests in 3 s, where the appends alone made none), and a
    # copy_file_range loop, which also flushed its own copy each time, 140,000.
    log = xfs_filesystem / "host.log"
    log.write_text("a line of the host's log\n" * 400)
    grant = xfs_filesystem / "out"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(read=[str(log)], write=[str(grant)]))
    )
    program = f"""
import fcntl, os, struct, time
log = os.open({str(log)!r}, os.O_RDONLY)
copy = os.open({str(grant / "copy")!r}, os.O_RDWR | os.O_CREAT)
os.write(copy, os.pread(log, 4096, 0))  # the same bytes: a dedupe would share them
def copy_file_range():
    os.copy_file_range(log, copy, 1 << 20, 0, 0)
def clone():
    fcntl.ioctl(copy, 0x40049409, log)  # FICLONE
def clone_range():
    fcntl.ioctl(copy, 0x4020940D, struct.pack('qQQQ', log, 0, 0, 0))  # FICLONERANGE
def dedupe():
    request = struct.pack('QQHHI', 0, 4096, 1, 0, 0) + struct.pack('qQqii', copy, 0, 0, 0, 0)
    fcntl.ioctl(log, 0xC0189436, bytearray(request))  # FIDEDUPERANGE
seen = {{}}
for attack in (copy_file_range, clone, clone_range, dedupe):
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        try:
            attack()
            seen[attack.__name__] = 'done'
        except OSError as error:
            seen[attack.__name__] = error.errno
            break
import subprocess
subprocess.run(['cp', {str(log)!r}, {str(grant / "by-cp")!r}], check=True)  # by reading
# (the host appends meanwhile: its first lines are the test)
seen['cp'] = open({str(grant / "by-cp")!r}).read(9000) == open({str(log)!r}).read(9000)
return seen
"""
    with device_writes_while_host_appends(runtime, log, xfs_filesystem) as writes:
        assert value(runtime, program) == {
            "cp": True,
            "copy_file_range": errno.ENOSYS,  # as on a kernel without it: copy by reading
            "clone": errno.EOPNOTSUPP,  # as on a filesystem without reflinks
            "clone_range": errno.EOPNOTSUPP,
            "dedupe": errno.EOPNOTSUPP,
        }
        # XFS's own log flush every 30 s is a few requests; each attack made hundreds.
        assert writes() < 20
        assert_next_run_works(runtime)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_the_disk_take_each_write_by_moving_a_files_blocks(
    xfs_filesystem: Path,
) -> None:
    # Punching a hole, zeroing, collapsing or inserting a range of a file makes XFS write back
    # (and wait for) the file's dirty pages first (ext4 does so for collapsing and inserting),
    # and writing zeroes sends the device a command of its own: a loop of a page written and
    # one of those, in a file of a write grant, made a write request of the disk each time,
    # where the same loop without them made none. The older space reservation requests and
    # MADV_REMOVE of a shared mapping punch and zero through fallocate too, and XFS's swap of
    # two files' extents writes both back before it checks anything else. The answer of a
    # filesystem without them; reserving blocks (mode 0, or keeping the size) writes nothing
    # back and works.
    grant = xfs_filesystem / "out"
    grant.mkdir()
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=10_000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import ctypes, errno, fcntl, mmap, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
fd = os.open({str(grant / "data")!r}, os.O_RDWR | os.O_CREAT)
os.pwrite(fd, b'x' * (4 << 20), 0)  # room for 500 collapses
seen = {{}}
for name, mode in (('punch hole', 0x1 | 0x2), ('zero range', 0x10), ('collapse range', 0x8),
                   ('insert range', 0x20), ('write zeroes', 0x80),
                   ('reserve', 0), ('reserve keeping the size', 0x1)):
    for _ in range(500):
        os.pwrite(fd, b'y' * 4096, 0)
        if libc.fallocate(fd, mode, 0 if mode & 0x3e else 65536, 4096) != 0:
            seen[name] = ctypes.get_errno()
            break
    else:
        seen[name] = 'done'
# The same through a shared mapping of the file, whose pages MADV_REMOVE punches out.
shared = mmap.mmap(fd, 65536)
page = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(shared)))
for _ in range(500):
    os.pwrite(fd, b'y' * 4096, 0)
    if libc.madvise(page, ctypes.c_size_t(4096), 9) != 0:  # MADV_REMOVE
        seen['MADV_REMOVE'] = ctypes.get_errno()
        break
else:
    seen['MADV_REMOVE'] = 'done'
# XFS's request to swap two files' extents writes both back first, however it then ends.
one, other = (os.open({str(grant)!r} + name, os.O_RDWR | os.O_CREAT) for name in ('/a', '/b'))
for each in (one, other):
    os.pwrite(each, b'z' * 65536, 0)
swap = struct.pack('qqqqq', 0, one, other, 0, 65536) + bytes(152)  # struct xfs_swapext
for _ in range(500):
    os.pwrite(one, b'y' * 4096, 0)
    os.pwrite(other, b'z' * 4096, 0)
    try:
        fcntl.ioctl(one, 0xC0C0586D, swap)  # XFS_IOC_SWAPEXT
    except OSError as error:
        seen['XFS_IOC_SWAPEXT'] = error.errno
        if error.errno != errno.EBUSY:  # the stale times it was given, after the writeback
            break
# The same through the older space reservation requests, which every filesystem takes.
hole = struct.pack('hhxxxxqqii16x', 0, 0, 0, 4096, 0, 0)  # struct space_resv
for name, request in (('FS_IOC_UNRESVSP', 0x40305829), ('FS_IOC_UNRESVSP64', 0x4030582B),
                      ('FS_IOC_ZERO_RANGE', 0x40305839), ('FS_IOC_RESVSP64', 0x4030582A)):
    for _ in range(500):
        os.pwrite(fd, b'y' * 4096, 0)
        try:
            fcntl.ioctl(fd, request, hole)
        except OSError as error:
            seen[name] = error.errno
            break
    else:
        seen[name] = 'done'
return seen
"""
    with device_writes_while_host_appends(runtime, grant / "host.log", xfs_filesystem) as writes:
        assert value(runtime, program) == {
            "punch hole": errno.EOPNOTSUPP,
            "zero range": errno.EOPNOTSUPP,
            "collapse range": errno.EOPNOTSUPP,
            "insert range": errno.EOPNOTSUPP,
            "write zeroes": errno.EOPNOTSUPP,
            "reserve": "done",
            "reserve keeping the size": "done",
            "MADV_REMOVE": errno.EOPNOTSUPP,
            "XFS_IOC_SWAPEXT": errno.EOPNOTSUPP,
            "FS_IOC_UNRESVSP": errno.EOPNOTSUPP,
            "FS_IOC_UNRESVSP64": errno.EOPNOTSUPP,
            "FS_IOC_ZERO_RANGE": errno.EOPNOTSUPP,
            "FS_IOC_RESVSP64": "done",
        }
        # XFS's own log flush every 30 s is a few requests; each loop made hundreds.
        assert writes() < 20
        assert_next_run_works(runtime)


_SUBVOLUME_CREATE = 0x5000940E  # BTRFS_IOC_SUBVOL_CREATE
_QUOTA_CONTROL = 0xC0109428  # BTRFS_IOC_QUOTA_CTL
_QUOTA_GROUP_LIMIT = 0x8030942B  # BTRFS_IOC_QGROUP_LIMIT


def _make_subvolume(parent: Path, name: str) -> Path:
    arguments = bytearray(4096)  # the descriptor (unused), then the name
    arguments[8 : 8 + len(name)] = name.encode()
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, _SUBVOLUME_CREATE, arguments)
    finally:
        os.close(fd)
    return parent / name


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_leave_the_quota_of_a_btrfs_write_grant(btrfs_filesystem: Path) -> None:
    # A write grant that is a btrfs subvolume can be held to a size with a quota group limit.
    # btrfs lets any user make subvolumes and snapshots of its own beneath a directory it may
    # write, each with a quota group of its own, which that limit does not hold: a run wrote
    # 32 MiB beneath one it made in a grant limited to 8 MiB.
    grant = _make_subvolume(btrfs_filesystem, "grant")
    fd = os.open(btrfs_filesystem, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, _QUOTA_CONTROL, bytearray(struct.pack("QQ", 1, 0)), True)  # enable
    finally:
        os.close(fd)
    fd = os.open(grant, os.O_RDONLY | os.O_DIRECTORY)
    try:  # the grant's own quota group, its referenced bytes at most 8 MiB
        fcntl.ioctl(fd, _QUOTA_GROUP_LIMIT, struct.pack("6Q", 0, 1, 8 * 2**20, 0, 0, 0))
    finally:
        os.close(fd)
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import fcntl, os
grant = {str(grant)!r}
def fill(path):
    written = 0
    try:
        with open(path, 'wb') as file:
            for _ in range(16):
                file.write(b'.' * 2**20)
                file.flush()
                written += 1
    except OSError:
        pass
    return written
fd = os.open(grant, os.O_RDONLY | os.O_DIRECTORY)
made = []
for request, name in ((0x5000940E, 'made'), (0x50009401, 'snapshot')):  # subvolume, snapshot
    arguments = bytearray(4096)
    arguments[0:8] = fd.to_bytes(8, 'little')  # a snapshot's source: the grant itself
    arguments[8:8 + len(name)] = name.encode()
    try:
        fcntl.ioctl(fd, request, arguments)
        made.append(fill(os.path.join(grant, name, 'beyond.bin')))
    except PermissionError:
        made.append('refused')
return [fill(os.path.join(grant, 'within.bin')), made]
"""
    try:
        within, made = value(runtime, program)
        assert within < 16  # the limit holds what is written in the grant itself
        assert made == ["refused", "refused"]
        assert_next_run_works(runtime)
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_make_its_btrfs_write_grant_read_only(btrfs_filesystem: Path) -> None:
    # The owner of a btrfs subvolume may make it read-only, and the worker's user owns its
    # write grant: one that is a subvolume then refused every write after the run, the
    # host's (root's too) and every later run's.
    grant = _make_subvolume(btrfs_filesystem, "grant")
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=3000, sandbox=CodeSandbox(write=[str(grant)]))
    )
    program = f"""
import fcntl, os
fd = os.open({str(grant)!r}, os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, 0x4008941A, (2).to_bytes(8, 'little'))  # SUBVOL_SETFLAGS: read-only
    return 'read-only'
except PermissionError:
    return 'refused'
"""
    try:
        assert value(runtime, program) == "refused"
        (grant / "after.txt").write_text("the host writes its grant")
        write = f"open({str(grant / 'next.txt')!r}, 'w').write('x')\nreturn 'written'"
        assert value(runtime, write) == "written"
    finally:
        runtime.close()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_the_btrfs_commit_and_subvolume_requests_are_refused_on_any_filesystem(
    sandbox: SubprocessCodeRuntime,
) -> None:
    # The three tests above need a btrfs filesystem of their own (root and mkfs.btrfs), and
    # are skipped where there is none; the filter refuses these requests whatever the
    # descriptor is, which any machine shows: the scratch tmpfs would answer ENOTTY.
    program = """
import errno, fcntl, os
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
seen = []
for request in (0x9408, 0x80089418, 0x50009401, 0x5000940E, 0x50009417, 0x50009418, 0x4008941A):
    try:
        fcntl.ioctl(fd, request, bytearray(4096))
        seen.append("answered")
    except OSError as exc:
        seen.append(errno.errorcode[exc.errno])
return seen
"""
    assert value(sandbox, program) == ["EPERM"] * 7


class _Timespec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


_FUTEX_WAIT = 0  # without FUTEX_PRIVATE_FLAG: keyed by the file and offset, across processes
_FUTEX_WAKE = 1


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86_64's")
def test_a_run_cannot_take_the_hosts_waiters_off_a_futex_in_a_file_it_may_read(
    tmp_path: Path,
) -> None:
    # A futex in a file mapped shared (a process-shared mutex or condition variable, such as
    # an LMDB database's lock file keeps) is keyed by the file and offset, so any process that
    # maps the file, read-only included, reaches the host's waiters there: a requeue moved
    # them onto a futex of the run's own memory, where the host's wake never came, and the
    # host's thread slept on after the run had ended.
    shared = tmp_path / "lock.bin"
    shared.write_bytes(bytes(4096))
    runtime = SubprocessCodeRuntime(
        CodeRuntimeConfig(compute_ms=5000, sandbox=CodeSandbox(read=[str(shared)]))
    )
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    with open(shared, "r+b") as file:
        address = ctypes.c_void_p(libc.mmap(None, 4096, 3, 1, file.fileno(), 0))  # shared
    outcome: dict[str, int] = {}

    def wait() -> None:
        timeout = _Timespec(10, 0)
        outcome["wait"] = libc.syscall(202, address, _FUTEX_WAIT, 0, ctypes.byref(timeout), 0, 0)

    waiter = threading.Thread(target=wait)
    waiter.start()
    program = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
fd = os.open({str(shared)!r}, os.O_RDONLY)
shared = ctypes.c_void_p(libc.mmap(None, 4096, 1, 1, fd, 0))  # PROT_READ, MAP_SHARED
own = ctypes.c_uint32(0)
every = ctypes.c_void_p(2**31 - 1)
seen = {{}}
for name, operation in (('requeue', 3), ('compare and requeue', 4)):
    moved = libc.syscall(202, shared, operation, 0, every, ctypes.byref(own), 0)
    seen[name] = moved if moved >= 0 else ctypes.get_errno()
class Waiter(ctypes.Structure):  # struct futex_waitv
    _fields_ = [('value', ctypes.c_uint64), ('address', ctypes.c_uint64),
                ('flags', ctypes.c_uint32), ('reserved', ctypes.c_uint32)]
futexes = (Waiter * 2)(Waiter(0, shared.value, 2, 0), Waiter(0, ctypes.addressof(own), 2, 0))
moved = libc.syscall(456, futexes, 0, 0, 2**31 - 1)  # futex_requeue, 32-bit shared futexes
seen['futex_requeue'] = moved if moved >= 0 else ctypes.get_errno()
return seen
"""
    try:
        task = Path(f"/proc/self/task/{waiter.native_id}/syscall")
        while not task.read_text().startswith("202 "):  # the host's thread sleeps on the futex
            time.sleep(0.001)
        seen = value(runtime, program)
        woken = libc.syscall(202, address, _FUTEX_WAKE, 1, None, 0, 0)
        waiter.join()
        assert woken == 1 and outcome["wait"] == 0, f"the host's waiter was taken off: {seen}"
        assert seen == {
            "requeue": errno.EPERM,
            "compare and requeue": errno.EPERM,
            "futex_requeue": errno.ENOSYS,
        }
        assert_next_run_works(runtime)
    finally:
        libc.syscall(202, address, _FUTEX_WAKE, 1, None, 0, 0)
        waiter.join()
        libc.munmap(address, 4096)
        runtime.close()
