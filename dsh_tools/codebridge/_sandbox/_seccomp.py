"""The worker's seccomp filter: no sockets, no namespaces, no tracing, no kernel administration.

A classic BPF program that checks the architecture (anything but the one the tables below were
written for is killed, which also closes the 32-bit and x32 entry points) and answers ``EPERM``
for the listed system calls. ``socketpair`` stays allowed (asyncio's self-pipe needs it; a pair
reaches nothing outside), ``socket`` does not, so no TCP, UDP, raw, netlink or unix socket can be
created, whatever the address. ``io_uring`` is refused because its operations bypass this
filter. ``clone`` is refused only with a namespace flag; ``clone3`` answers ``ENOSYS`` (its flags
live in memory a filter cannot read), so the C library falls back to ``clone``.
"""

from __future__ import annotations

import errno
import platform
from typing import Final

from ._kernel import SockFilter

__all__ = ["DENIED_SYSCALLS", "seccomp_program", "seccomp_supported"]

_AUDIT_ARCH_X86_64: Final = 0xC000003E
_X32_BIT: Final = 0x40000000
_NAMESPACE_FLAGS: Final = 0x7E020080  # every CLONE_NEW* flag, CLONE_NEWTIME included

DENIED_SYSCALLS: Final = {
    "socket": 41,
    "connect": 42,
    "accept": 43,
    "bind": 49,
    "listen": 50,
    "accept4": 288,
    "ptrace": 101,
    "syslog": 103,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "init_module": 175,
    "delete_module": 176,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
"""The x86_64 numbers of the refused calls."""
_CLONE: Final = 56
_CLONE3: Final = 435

_LD_W_ABS: Final = 0x20
_JMP_JEQ_K: Final = 0x15
_JMP_JGE_K: Final = 0x35
_JMP_JSET_K: Final = 0x45
_RET_K: Final = 0x06
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_RET_KILL_PROCESS: Final = 0x80000000
_OFFSET_NR: Final = 0
_OFFSET_ARCH: Final = 4
_OFFSET_ARG0_LOW: Final = 16  # little endian: the low word of args[0]


def seccomp_supported() -> bool:
    """Whether this architecture has a filter table (x86_64 only)."""
    return platform.machine() == "x86_64"


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> SockFilter:
    return SockFilter(code, jt, jf, k)


def seccomp_program() -> list[SockFilter]:
    """The filter, as instructions for ``set_seccomp_filter``."""
    denied = sorted(DENIED_SYSCALLS.values())
    program = [
        _op(_LD_W_ABS, _OFFSET_ARCH),
        _op(_JMP_JEQ_K, _AUDIT_ARCH_X86_64, 1, 0),
        _op(_RET_K, _RET_KILL_PROCESS),
        _op(_LD_W_ABS, _OFFSET_NR),
    ]
    # Layout after the checks: [x32] [denied...] [clone3] [clone] ALLOW DENY ENOSYS CLONE-ARGS
    checks = 1 + len(denied) + 2
    allow = checks  # index, relative to the first check, of the ALLOW instruction
    for index in range(checks):
        to_deny = allow + 1 - index - 1
        if index == 0:
            program.append(_op(_JMP_JGE_K, _X32_BIT, to_deny, 0))
        elif index <= len(denied):
            program.append(_op(_JMP_JEQ_K, denied[index - 1], to_deny, 0))
        elif index == len(denied) + 1:
            program.append(_op(_JMP_JEQ_K, _CLONE3, to_deny + 1, 0))
        else:
            program.append(_op(_JMP_JEQ_K, _CLONE, to_deny + 2, 0))
    program += [
        _op(_RET_K, _RET_ALLOW),
        _op(_RET_K, _RET_ERRNO | errno.EPERM),
        _op(_RET_K, _RET_ERRNO | errno.ENOSYS),
        _op(_LD_W_ABS, _OFFSET_ARG0_LOW),
        _op(_JMP_JSET_K, _NAMESPACE_FLAGS, 0, 1),
        _op(_RET_K, _RET_ERRNO | errno.EPERM),
        _op(_RET_K, _RET_ALLOW),
    ]
    return program
