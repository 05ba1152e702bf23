"""A small ctypes layer over the Linux calls the sandbox needs, each raising ``OSError``.

Landlock (``landlock_create_ruleset``/``add_rule``/``restrict_self``), ``prctl`` (no new
privileges, parent-death signal, capability bounding set, seccomp), ``capset``, ``unshare`` and
``mount``. Only the standard library: the template process imports this module under a private
package name before it forks workers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from typing import Final

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "FILE_RIGHTS",
    "FS_EXECUTE",
    "FS_READ_DIR",
    "FS_READ_FILE",
    "LOG_SAME_EXEC_OFF",
    "LOG_SUBDOMAINS_OFF",
    "MOUNT_ATTR_NODEV",
    "MOUNT_ATTR_NOSUID",
    "MOUNT_ATTR_RDONLY",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "NET_BIND_TCP",
    "NET_CONNECT_TCP",
    "SCOPE_ABSTRACT_UNIX_SOCKET",
    "SCOPE_SIGNAL",
    "SockFilter",
    "drop_capabilities",
    "fs_rights",
    "landlock_abi",
    "landlock_add_path",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "leave_memory_merging",
    "leave_real_time_io",
    "mount",
    "mount_new_fs",
    "mount_setattr",
    "set_no_new_privs",
    "set_not_dumpable",
    "set_parent_death_signal",
    "set_seccomp_filter",
    "sethostname",
    "setns",
    "unshare",
]

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

# Landlock's syscall numbers are the same on every architecture (the generic table).
_SYS_LANDLOCK_CREATE_RULESET: Final = 444
_SYS_LANDLOCK_ADD_RULE: Final = 445
_SYS_LANDLOCK_RESTRICT_SELF: Final = 446
_SYS_MOUNT_SETATTR: Final = 442  # also the generic table's number
_SYS_MOVE_MOUNT: Final = 429  # these four too
_SYS_FSOPEN: Final = 430
_SYS_FSCONFIG: Final = 431
_SYS_FSMOUNT: Final = 432
_FSOPEN_CLOEXEC: Final = 1
_FSCONFIG_SET_STRING: Final = 1
_FSCONFIG_CMD_CREATE: Final = 6
_FSMOUNT_CLOEXEC: Final = 1
_MOVE_MOUNT_F_EMPTY_PATH: Final = 0x4
_MOVE_MOUNT_T_EMPTY_PATH: Final = 0x40
_SYS_CAPSET: Final = {"x86_64": 126, "aarch64": 91}.get(platform.machine(), -1)

_LANDLOCK_CREATE_RULESET_VERSION: Final = 1
_LANDLOCK_RULE_PATH_BENEATH: Final = 1

FS_EXECUTE: Final = 1 << 0
_FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
_FS_ALL_V1: Final = (1 << 13) - 1  # execute .. make_sym
_FS_REFER: Final = 1 << 13  # ABI 2
_FS_TRUNCATE: Final = 1 << 14  # ABI 3
_FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
FILE_RIGHTS: Final = FS_EXECUTE | _FS_WRITE_FILE | FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
"""The rights that apply to a file (a rule on a file may grant no others)."""
NET_BIND_TCP: Final = 1 << 0  # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1  # ABI 6
LOG_SAME_EXEC_OFF: Final = 1 << 0  # ABI 7, landlock_restrict_self's flags
LOG_SUBDOMAINS_OFF: Final = 1 << 2  # ABI 7

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000

MOUNT_ATTR_RDONLY: Final = 1
MOUNT_ATTR_NOSUID: Final = 2
MOUNT_ATTR_NODEV: Final = 4
_AT_FDCWD: Final = -100
_AT_RECURSIVE: Final = 0x8000

MS_RDONLY: Final = 1
MS_NOSUID: Final = 2
MS_NODEV: Final = 4
MS_NOEXEC: Final = 8
MS_BIND: Final = 1 << 12
MS_REC: Final = 1 << 14
MS_PRIVATE: Final = 1 << 18

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_DUMPABLE: Final = 4
_PR_CAPBSET_DROP: Final = 24
_PR_SET_SECCOMP: Final = 22
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_PR_SET_MEMORY_MERGE: Final = 67
_IOPRIO_SET: Final = 251  # x86_64, the only architecture with a seccomp table
_IOPRIO_GET: Final = 252
_IOPRIO_WHO_PROCESS: Final = 1
_IOPRIO_CLASS_SHIFT: Final = 13
_IOPRIO_CLASS_RT: Final = 1
_SECCOMP_MODE_FILTER: Final = 2
_CAPABILITY_VERSION_3: Final = 0x20080522


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class SockFilter(ctypes.Structure):
    """One classic BPF instruction (``struct sock_filter``)."""

    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    result = _syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(result), 0)


def fs_rights(abi: int) -> int:
    """Every filesystem right the given Landlock ABI knows (all of them are handled)."""
    rights = _FS_ALL_V1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def landlock_create_ruleset(abi: int) -> int:
    """A ruleset handling every right ``abi`` knows: filesystem, TCP and scopes. Returns its fd."""
    attr = _RulesetAttr(fs_rights(abi), 0, 0)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    result = _syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    return _check(int(result), "landlock_create_ruleset")


def landlock_add_path(ruleset_fd: int, path_fd: int, rights: int) -> None:
    """Allow ``rights`` beneath the file or directory open as ``path_fd``."""
    attr = _PathBeneathAttr(rights, path_fd)
    result = _syscall(
        ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
        ctypes.c_int(ruleset_fd),
        ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    _check(int(result), "landlock_add_rule")


def landlock_restrict_self(ruleset_fd: int, flags: int = 0) -> None:
    """Confine the calling thread (and its future children) to the ruleset; ``flags`` are
    ``LOG_*`` (Landlock ABI 7)."""
    result = _syscall(
        ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF),
        ctypes.c_int(ruleset_fd),
        ctypes.c_uint32(flags),
    )
    _check(int(result), "landlock_restrict_self")


def set_no_new_privs() -> None:
    """``PR_SET_NO_NEW_PRIVS``: no exec can ever grant privileges again."""
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def set_not_dumpable() -> None:
    """``PR_SET_DUMPABLE`` 0: the kernel makes no core dump of this process, piped or not,
    whatever its ``RLIMIT_CORE`` (until it runs ``execve``, which makes it dumpable again)."""
    _check(_prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def leave_memory_merging() -> None:
    """``PR_SET_MEMORY_MERGE`` 0: none of this process's memory, nor that of what it forks, is
    offered to the kernel's same-page merging (KSM). A process inherits the setting across
    ``fork`` and ``execve`` (``systemd``'s ``MemoryKSM=yes`` sets it for a whole service), so
    the host's would otherwise reach every run. Best effort: a kernel without KSM, or before
    the setting (Linux 6.4), answers ``EINVAL`` and merges nothing of it anyway."""
    _prctl(_PR_SET_MEMORY_MERGE, 0, 0, 0, 0)


def leave_real_time_io() -> None:
    """Give up the real-time I/O class (``ionice -c1``) if this process has it, for the
    best-effort class its nice value implies. A process inherits its I/O priority across
    ``fork`` and ``execve``, and a harness started under ``ionice -c1`` handed it to every run,
    whose reads then went to the disk before anything else of the machine (the ``mq-deadline``
    and ``bfq`` schedulers serve that class first); without ``CAP_SYS_ADMIN`` a process cannot
    take it, but keeps it. Giving it up needs no privilege; best effort."""
    current = int(_syscall(_IOPRIO_GET, _IOPRIO_WHO_PROCESS, 0))
    if current >= 0 and current >> _IOPRIO_CLASS_SHIFT == _IOPRIO_CLASS_RT:
        _syscall(_IOPRIO_SET, _IOPRIO_WHO_PROCESS, 0, 0)


def set_parent_death_signal(signal_number: int) -> None:
    """Receive ``signal_number`` when the parent exits."""
    _check(_prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable capability sets."""
    last = 63
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as file:
            last = int(file.read())
    except (OSError, ValueError):
        pass
    for capability in range(last + 1):
        if _prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) < 0:
            number = ctypes.get_errno()
            if number not in (22, 1):  # EINVAL: unknown capability; EPERM: none to drop
                _check(-1, "prctl(PR_CAPBSET_DROP)")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    result = _syscall(ctypes.c_long(_SYS_CAPSET), ctypes.byref(header), ctypes.byref(data))
    _check(int(result), "capset")


def set_seccomp_filter(program: list[SockFilter]) -> None:
    """Install a seccomp filter (requires no-new-privileges or ``CAP_SYS_ADMIN``)."""
    array = (SockFilter * len(program))(*program)
    fprog = _SockFprog(len(program), ctypes.cast(array, ctypes.POINTER(SockFilter)))
    result = _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)
    _check(result, "prctl(PR_SET_SECCOMP)")


def unshare(flags: int) -> None:
    """``unshare(2)``."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def sethostname(name: str) -> None:
    """``sethostname(2)`` (of the caller's UTS namespace)."""
    data = name.encode()
    _check(_libc.sethostname(data, ctypes.c_size_t(len(data))), "sethostname")


def setdomainname(name: str) -> None:
    """``setdomainname(2)`` (of the caller's UTS namespace)."""
    data = name.encode()
    _check(_libc.setdomainname(data, ctypes.c_size_t(len(data))), "setdomainname")


def setns(fd: int, nstype: int) -> None:
    """``setns(2)``."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    """``mount(2)``."""
    result = _libc.mount(
        source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        None if data is None else data.encode(),
    )
    _check(result, f"mount {target}")


def mount_setattr(path: str, *, set_flags: int, clear_flags: int, recursive: bool) -> None:
    """``mount_setattr(2)`` on the mount at ``path`` (and every mount beneath when
    ``recursive``): set and clear ``MOUNT_ATTR_*`` flags."""
    attr = _MountAttr(set_flags, clear_flags, 0, 0)
    result = _syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR),
        ctypes.c_int(_AT_FDCWD),
        path.encode(),
        ctypes.c_uint(_AT_RECURSIVE if recursive else 0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(int(result), f"mount_setattr {path}")


def mount_new_fs(fstype: str, options: dict[str, str], attr_flags: int, target_fd: int) -> int:
    """Mount a new filesystem of ``fstype`` with ``options`` (and ``MOUNT_ATTR_*`` flags) on
    the directory open as ``target_fd`` (``fsopen``, ``fsconfig``, ``fsmount``,
    ``move_mount``); return a descriptor of the new mount's root. Neither the target nor the
    root is looked up by path, so no symbolic link put in their place can redirect them."""
    context = _check(
        int(_syscall(ctypes.c_long(_SYS_FSOPEN), fstype.encode(), ctypes.c_uint(_FSOPEN_CLOEXEC))),
        f"fsopen {fstype}",
    )
    try:
        for key, value in options.items():
            setting = f"{fstype} {key}={value}"
            _fsconfig(context, _FSCONFIG_SET_STRING, key.encode(), value.encode(), setting)
        _fsconfig(context, _FSCONFIG_CMD_CREATE, None, None, f"{fstype} create")
        result = _syscall(
            ctypes.c_long(_SYS_FSMOUNT),
            ctypes.c_int(context),
            ctypes.c_uint(_FSMOUNT_CLOEXEC),
            ctypes.c_uint(attr_flags),
        )
        root = _check(int(result), f"fsmount {fstype}")
    finally:
        os.close(context)
    result = _syscall(
        ctypes.c_long(_SYS_MOVE_MOUNT),
        ctypes.c_int(root),
        b"",
        ctypes.c_int(target_fd),
        b"",
        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH),
    )
    try:
        _check(int(result), f"move_mount {fstype}")
    except OSError:
        os.close(root)
        raise
    return root


def _fsconfig(
    context: int, command: int, key: bytes | None, value: bytes | None, what: str
) -> None:
    """One ``fsconfig`` of the filesystem context ``context``; ``what`` names it in an error."""
    result = _syscall(
        ctypes.c_long(_SYS_FSCONFIG),
        ctypes.c_int(context),
        ctypes.c_uint(command),
        key,
        value,
        ctypes.c_int(0),
    )
    _check(int(result), f"fsconfig {what}")
