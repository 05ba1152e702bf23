"""The worker's seccomp filter: no sockets, no namespaces, no tracing, no kernel administration.

A classic BPF program that checks the architecture (anything but the one the tables below were
written for answers ``ENOSYS``, which also closes the 32-bit and x32 entry points; not a kill, which
the kernel records in the audit log each time, to the host's disk where ``auditd`` runs, as often as
a program forks children to die that way; so does every call newer than the tables,
``FIRST_UNREVIEWED_SYSCALL`` on) and answers ``EPERM`` for the listed system calls
(``modify_ldt`` among them: segment descriptors of its own, which only 16-bit emulators use, are
kernel code any process could otherwise reach). ``socketpair`` stays allowed for unix stream and
sequenced-packet pairs (asyncio's self-pipe needs one; such a pair reaches nothing outside), but not
for other families (whose socket code would run, and on some kernels load a module) nor for datagram
pairs, whose ``sendto`` takes an address and so reaches any datagram socket bound on the host's
filesystem; ``socket`` is refused, so no TCP, UDP, raw, netlink or unix socket can be created,
whatever the address; nor may a socket pair carry out-of-band data (``OUT_OF_BAND_SYSCALLS``:
kernel code no program needs, with a history of use-after-free bugs) nor take a BPF program
(``FILTER_SOCKOPTS``: compiled into the machine's one pool for unprivileged BPF, which every seccomp
filter is compiled from too). ``io_uring`` is refused because its operations bypass this filter.
``memfd_create`` and System V / POSIX message queues and shared memory are refused because they hold
memory outside every process's resident set (no budget would see it). ``inotify`` and file leases
(``fcntl(F_SETLEASE)``, ``F_NOTIFY``) are refused because Landlock does not cover them: they would
report the names and activity of the host's files, or stall the host's opens. Reading extended
attributes answers ``EOPNOTSUPP`` (Landlock does not cover it either; that answer is the one
``shutil`` already treats as "none"), and so does setting them: a POSIX ACL set on a file
(``system.posix_acl_access``, and ``_default`` on a directory) is up to 64 KiB of kernel memory that
neither a cgroup nor the scratch tmpfs's size counts, so one run of 3,000 directories in its scratch
directory took 444 MB of the host's memory beside a 128 MB budget (16,384 of them, as many as the
scratch directory's inodes, would take 2 GB). Setting the set-user-ID or set-group-ID bit
(``chmod``, or ``open``/``mknod`` creating a file with it) is refused: the worker's user owns what
it creates in a ``write`` grant, and a set-user-ID copy of ``/usr/bin/python3`` left there by a run
of a root harness would give any local user root. ``openat2`` answers ``ENOSYS`` (its mode lives in
memory a filter cannot read), so the C library falls back to ``openat``. Without cgroups, shared
anonymous mappings (``mmap(-1, n)``, ``MAP_SHARED | MAP_ANONYMOUS``) are refused too: their pages
belong to a hidden memory object that outlives the part of the mapping still in place, so mapping 32
MiB, touching it and unmapping all but one page holds 32 MiB that no process's resident set shows,
as often as the process likes (the run's cgroup charges them where there is one). The calls that
put pages into a pipe by reference (``vmsplice``, ``splice``, ``tee``, ``sendfile``) are refused
everywhere: a pipe buffer holds a whole page, or a whole large folio of the page cache, for one
byte of it, outside every resident set, and pages the host had cached are charged to no cgroup of
the run, yet cannot be reclaimed while a pipe holds them. ``clone`` is refused only with a
namespace flag, or with ``CLONE_FILES`` for anything but a thread (``CLONE_THREAD``): a POSIX
lock belongs to the descriptor table, and a child sharing the worker's that took locks and
exited left them to the worker, out of the run's ``/proc/locks``, which shows no lock whose
holder's pid is gone (the init counts them there; no program needs such a child: ``fork``,
``vfork`` and ``posix_spawn`` do not share the table). ``clone3`` answers ``ENOSYS`` (its flags
live in memory a filter cannot read), so the C library falls back to ``clone``.
``prlimit64`` is refused for any process but the caller (a pid other than 0): the run's init has the
worker's user, so a program could otherwise lower the init's limits (no descriptors left, or no CPU
time, and the init died); ``setrlimit`` and ``getrlimit`` go through ``prlimit64`` with pid 0 and
keep working, except that ``RLIMIT_CORE`` may be read but not set (``prlimit64`` with a new limit,
or the older ``setrlimit`` call): a run's
processes have it at 1, at which the kernel makes no core dump, and at 0 (or anything else) a
``core_pattern`` that is a pipe would get the crashing process's memory, to be written to the host's
disk by the host's handler outside every budget. ``mmap`` with ``MAP_HUGETLB`` is refused: its pages
come from the machine's pool of huge pages (``vm.nr_hugepages``, which an administrator reserves for
a database, say), which neither a process's resident set nor a run's cgroups count, so a run could
take the whole pool from the host's own users; ``shmget`` and ``memfd_create``, the other ways to
that pool, are refused too. A program may not install seccomp filters of its own (``seccomp`` and
``prctl(PR_SET_SECCOMP)`` answer ``EPERM``; asking which actions exist still works): this filter
already holds it, and the kernel writes an audit record (to the host's disk where ``auditd`` runs)
for every system call a filter answers with ``SECCOMP_RET_LOG`` or a kill, and for a strict mode's
kill. ``posix_fadvise(POSIX_FADV_DONTNEED)``, ``madvise(MADV_PAGEOUT)`` and ``process_madvise``
(which gives the same hint through a pidfd, the caller's own included) are refused: with nothing but
a read-only descriptor or mapping they drop the cached pages of any file the run may read (the
Python installation, ``/usr``, a harness's ``read`` grants) from the host's page cache, for every
process of the machine, which then reads them from disk again; ``MADV_PAGEOUT`` would also move a
run's own memory to swap, where no budget sees it. ``madvise(MADV_COLD)`` is refused for the same
reason: it moves the cached pages of a mapped file, which no other process maps, to the end of
the machine's reclaim order (the inactive list), and a run that mapped a file the host reads
(a ``read`` grant it had read three times) made all 8,192 of its active pages inactive, the
first the kernel drops once memory is short. ``sync`` and ``syncfs`` are refused: they write
back the dirty pages of every file of the machine, or of a whole filesystem (the host's, from any
descriptor of ``/usr``), to the host's disks, outside every budget, and a loop of them keeps those
disks flushing. So are ``quotactl`` and ``quotactl_fd``: their ``Q_SYNC`` asks for no privilege and
syncs, like ``syncfs``, the filesystem of any descriptor (a read-only one of ``/usr``), or with no
device named every filesystem of the machine that has quota operations (ext4's, quotas on or not):
10,000 calls made 10,201 write requests to the host's disk, and a run has no quotas to ask about
(its scratch directory is memory). ``fsync``, ``fdatasync``, ``msync`` and ``sync_file_range``
return at once having done nothing (``SKIPPED_SYSCALLS``): with nothing but a read-only
descriptor of a host file they made the host's disk take a write request and flush its cache each
time, or wrote back the host's dirty pages of that file. For the same reason ``O_DIRECT``
(``open``, ``openat``, ``fcntl(F_SETFL)``) answers ``EINVAL``, as on a filesystem without it (a
direct read first writes back the dirty pages of its range), and the FIEMAP requests ``EOPNOTSUPP``
(``WRITEBACK_IOCTLS``: their flag that writes the file back lies in memory a filter cannot read),
and so do the requests that share blocks between files (``REMAP_IOCTLS``: clone, dedupe), as on a
filesystem without reflinks, while ``copy_file_range`` (``REMAP_SYSCALLS``, which tries the same
sharing first) answers ``ENOSYS``: on XFS and btrfs each writes back both files first, a read-only
source (a ``read`` grant) on the filesystem of a ``write`` grant included.
So do ``O_DSYNC`` and ``O_SYNC`` (``open``, ``openat``: ``EINVAL``) and ``RWF_DSYNC`` and
``RWF_SYNC`` (``preadv2``, ``pwritev2``: ``EOPNOTSUPP``, as a file without them answers): with
them the kernel flushes the file at each write itself, fsync or not, and 3,000 one-byte writes
each way to a file of a ``write`` grant made 18,000 write requests of the host's disk. So does
``RWF_DONTCACHE`` (``EOPNOTSUPP`` too), whose every write starts writing its range back: 3,000
page writes made 3,000 write requests; and so do the ``fallocate`` modes that punch, zero,
collapse or insert a range or write zeroes (``WRITEBACK_FALLOCATE_MODES``, and the older
``ioctl`` requests that punch or zero through it, ``FALLOCATE_IOCTLS``, and
``madvise(MADV_REMOVE)``, which punches a mapping's pages out of its file), as on a filesystem
without them: XFS writes the file back before each (ext4 before collapsing or inserting).
The C library's ``sync`` (``os.sync()``) ignores the refusal, as it ignores every result of that
call. Open file description locks (``F_OFD_SETLK``, ``F_OFD_SETLKW``) answer ``EINVAL``, as on a
kernel before them: the run's init bounds its byte-range locks by counting them in the run's
``/proc/locks``, which lists such
locks for every process of the host, not the run's alone. So does ``F_SET_RW_HINT``, as on a
kernel before write-lifetime hints: it asks only that the caller own the file, and the worker's
user owns the host's files, so from a read-only descriptor a run set the hint of the interpreter
and of a ``read`` grant, kept on their inodes after the run and sent with every later write of
the host to them (a drive with placement streams places those writes by it). The memory policy
calls (``mbind``, ``set_mempolicy`` and the others of ``NUMA_SYSCALLS``) answer ``ENOSYS``, as on
a kernel without NUMA: each range of a shared mapping given a policy of its own is kernel memory
that no cgroup charges, kept with the file after the mapping is gone. ``prctl`` refuses
``PR_FUTEX_HASH``, ``PR_SET_VMA`` and ``PR_SCHED_CORE`` (``_DENIED_PRCTL``): kernel memory no
budget counts, or scheduling of the whole machine. Nor may a run offer its memory to the kernel's
same-page merging (KSM): ``madvise(MADV_MERGEABLE)`` and ``prctl(PR_SET_MEMORY_MERGE)`` answer
``EINVAL``, as on a kernel without KSM (and the template leaves any merging the host handed down,
``leave_memory_merging``). Where KSM runs, a page merged with an identical one elsewhere on the
machine is copied again when written, which takes measurably longer: a run that fills pages with
guesses learns by timing which contents another process, the host's included, holds (a known side
channel), and no program of a run needs its memory merged. The Landlock calls answer ``ENOSYS``, as
on a kernel without Landlock: a program's own rulesets would hold kernel memory no budget counts,
about 100 bytes a rule (``LANDLOCK_SYSCALLS``). The calls that tell which pages of a file are cached
without reading them (``mincore``, ``cachestat``: ``PAGE_CACHE_SYSCALLS``, and ``preadv2`` or
``pwritev2`` with ``RWF_NOWAIT``, which answers ``EOPNOTSUPP``) are refused: the kernel answers them
only for files the caller could write or owns, and the worker owns the host's files, so a run
learned which pages of a shared file the host or another run had just read. The ``ioctl``
requests that add and remove the keys of encrypted directories, or encrypt a directory
(``FSCRYPT_IOCTLS``), answer ``EOPNOTSUPP``, as on a filesystem without encryption: the key
requests work on a descriptor of any file of a filesystem that has it, a read-only one included,
for the keys of the worker's user (the harness's): a run removed the key the host had added for
a directory of its own, whose files it then could no longer read, and another added 103,000 keys
in 18 s that stayed with the filesystem after the run (83 MB of kernel memory no budget counted,
and 10 MB of the user's 25 MB key quota, which the host's own keys share); and a run that gave
its empty ``write`` grant a policy of a key no one has left it refusing every new file, the
host's and later runs', for good. The ``ioctl`` requests that commit a whole
filesystem's transaction (``SYNC_IOCTLS``: btrfs's ``BTRFS_IOC_SYNC`` and
``BTRFS_IOC_START_SYNC``) are refused as ``syncfs`` is: any descriptor of a btrfs filesystem
(``/usr``, where the root filesystem is btrfs) is enough, and a run that looped on one while
the host appended a line to a file there every 10 ms made 3,738 write requests to the disk in 3
s, where the host's appends alone made none. Nor may a run make btrfs subvolumes or snapshots
(``SUBVOLUME_IOCTLS``, ``EPERM``), which btrfs allows any user beneath a directory it may write:
each has a quota group of its own, outside the limit a harness set on a ``write`` grant that is
a subvolume, and a run wrote 32 MiB into one it made in a grant limited to 8 MiB; nor change a
subvolume's flags: a run made its grant, a subvolume, read-only for the host and every later run.
The bridge and VLAN requests of a socket (``MODULE_IOCTLS``) answer ``ENOPKG``, as on a kernel
without those modules: from a socket pair's descriptor they reach the bridge's code with no
privilege, and where the bridge or VLAN code is a module not yet loaded the kernel has the
host's ``modprobe`` load it first, as socket families of their own would (the filter refuses
those). Nor may a run set a file's inode flags (``INODE_FLAG_IOCTLS`` and the ``file_setattr``
call answer ``EPERM``): the read-only view refuses them outside the ``write`` grants, and in a
grant they outlive the run: a run that marked its grant synchronous (``FS_SYNC_FL``,
``FS_DIRSYNC_FL``, inherited by everything made there later) turned the host's 200 small files
written there afterwards into 1,000 write requests to the disk, where they had made none, and a
project quota on a grant is kept by the project inheritance flag and project number these set.
Nor may it turn on fs-verity for a file (``VERITY_IOCTLS``, ``EOPNOTSUPP``), which would leave
a grant's file unwritable for good, nor make a notification pipe (``O_NOTIFICATION_PIPE``,
``ENOPKG``), nor move the waiters of a shared futex (``SHARED_REQUEUE_FUTEX_OPS``): one in a file
it may read is the host's too, and a requeue left the host's thread asleep for good.
"""

from __future__ import annotations

import errno
import platform
from typing import Final

from ._kernel import SockFilter

__all__ = [
    "DENIED_SYSCALLS",
    "FALLOCATE_IOCTLS",
    "FILTER_SOCKOPTS",
    "FIRST_UNREVIEWED_SYSCALL",
    "FSCRYPT_IOCTLS",
    "FSMAP_IOCTLS",
    "INODE_FLAG_IOCTLS",
    "LANDLOCK_SYSCALLS",
    "MODULE_IOCTLS",
    "NUMA_SYSCALLS",
    "OUT_OF_BAND_SYSCALLS",
    "O_NOTIFICATION_PIPE",
    "PAGE_CACHE_SYSCALLS",
    "PIPE_PAGE_SYSCALLS",
    "REMAP_IOCTLS",
    "REMAP_SYSCALLS",
    "SHARED_REQUEUE_FUTEX_OPS",
    "SKIPPED_SYSCALLS",
    "SUBVOLUME_IOCTLS",
    "SYNC_IOCTLS",
    "UNSUPPORTED_SYSCALLS",
    "VERITY_IOCTLS",
    "WRITEBACK_FALLOCATE_MODES",
    "WRITEBACK_IOCTLS",
    "seccomp_program",
    "seccomp_supported",
]

_AUDIT_ARCH_X86_64: Final = 0xC000003E
FIRST_UNREVIEWED_SYSCALL: Final = 470
"""The first x86_64 system call number past those this filter was written against (Linux
6.18's last is 469, ``file_setattr``). Every call from it on answers ``ENOSYS``, as on a kernel
that has not got it, which the C library and Python fall back from: a call a newer kernel adds
(``open_tree_attr`` reached the kernel's mount code for a run until it was listed) is refused
until it has been looked at and placed in the tables below."""
_X32_BIT: Final = 0x40000000
_NAMESPACE_FLAGS: Final = 0x7E020080  # every CLONE_NEW* flag, CLONE_NEWTIME included
_CLONE_FILES: Final = 0x400
_CLONE_THREAD: Final = 0x10000

DENIED_SYSCALLS: Final = {
    "socket": 41,
    "connect": 42,
    "accept": 43,
    "bind": 49,
    "listen": 50,
    "accept4": 288,
    "ptrace": 101,
    "modify_ldt": 154,
    "syslog": 103,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "process_madvise": 440,
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
    "open_tree_attr": 467,
    "io_setup": 206,
    "epoll_create": 213,
    "epoll_create1": 291,
    "shmget": 29,
    "semget": 64,
    "msgget": 68,
    "mq_open": 240,
    "inotify_init": 253,
    "inotify_add_watch": 254,
    "inotify_init1": 294,
    "fanotify_init": 300,
    "memfd_create": 319,
    "memfd_secret": 447,
    "sync": 162,
    "syncfs": 306,
    "quotactl": 179,
    "quotactl_fd": 443,
    "file_setattr": 469,
}
"""The x86_64 numbers of the refused calls."""
UNSUPPORTED_SYSCALLS: Final = {
    "getxattr": 191,
    "lgetxattr": 192,
    "fgetxattr": 193,
    "listxattr": 194,
    "llistxattr": 195,
    "flistxattr": 196,
    "getxattrat": 464,
    "listxattrat": 465,
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "setxattrat": 463,
}
"""The x86_64 numbers of the calls that answer ``EOPNOTSUPP`` (reading and setting extended
attributes)."""
NUMA_SYSCALLS: Final = {
    "mbind": 237,
    "set_mempolicy": 238,
    "get_mempolicy": 239,
    "migrate_pages": 256,
    "move_pages": 279,
    "set_mempolicy_home_node": 450,
}
"""The x86_64 numbers of the memory policy calls, which answer ``ENOSYS`` as on a kernel without
NUMA (``libnuma``'s ``numa_available()`` then says so, and its callers leave policies alone).
``mbind`` on a shared mapping gives each range of the file a policy of its own, kept on the file
(a shared policy node and a policy, about 340 bytes) after the mapping is gone, in kernel memory
no cgroup charges, and on a private mapping a policy per mapping: 200,000 calls over a sparse
scratch file took 63 MB of the host's memory in 1.7 s of CPU, about 2 GB within the default
``compute_ms``, beside any ``max_memory_mb``. The others go with it, so that a program sees one
consistent machine without NUMA."""
LANDLOCK_SYSCALLS: Final = {
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
}
"""The x86_64 numbers of the Landlock calls, which answer ``ENOSYS`` as on a kernel without
Landlock (a program that would confine itself then goes on as it is, confined already). Each rule
a program adds to a ruleset of its own is about 100 bytes of kernel memory, held while the
ruleset's descriptor is open, that no resident set shows: a run without cgroups added the 122,000
files of ``/usr`` to two rulesets (23 MB) in 1.5 s of CPU, about 1 GB within the default
``compute_ms``, beside any ``max_memory_mb``, and every process of a run may hold as many
rulesets as descriptors."""
PAGE_CACHE_SYSCALLS: Final = {"mincore": 27, "cachestat": 451}
"""The x86_64 numbers of the calls that report which pages of a file are in the page cache,
which answer ``ENOSYS`` (``cachestat`` is newer than many kernels; ``mincore`` is rarely used,
and then for a process's own memory, which it knows). The kernel reports them only to a
process that could write the file or owns it, so that no one learns when others read a file;
under a root harness the worker owns the host's files (the Python installation, ``/usr``, a
``read`` grant shared by other runs), and one call showed a run exactly which pages of a granted
file the host had just read, as often as it liked, without bringing any in."""
SKIPPED_SYSCALLS: Final = {
    "msync": 26,
    "fsync": 74,
    "fdatasync": 75,
    "sync_file_range": 277,
}
"""The x86_64 numbers of the calls that return success at once without being made. ``fsync``
of any descriptor, a read-only one of a clean host file included (``/usr/bin/python3``), made
the host's disk take a write request and flush its cache: a loop of them made 73,000 write
requests in 3 s for 0.7 s of CPU, without any ``write`` grant (``msync`` of a shared mapping is
the same call). ``sync_file_range`` writes back the dirty pages of a file, the host's included,
from a read-only descriptor too: a loop of them on a granted log the host appended to every
10 ms made 241 write requests in 3 s, where the host's appends alone made 4. Skipped, not
refused: a program's databases (``sqlite3``) fsync as they commit;
the scratch directory is memory, where it does nothing anyway, and the kernel writes a ``write``
grant's files back within seconds (what is lost is only their durability across a crash of the
host)."""
PIPE_PAGE_SYSCALLS: Final = {"sendfile": 40, "splice": 275, "tee": 276, "vmsplice": 278}
"""The x86_64 numbers of the calls that put pages into a pipe by reference, refused: a pipe
buffer holds a whole page (a 2 MiB one where transparent huge pages back the memory, or a large
folio of the page cache) for one byte of it, outside every process's resident set, so 1 GiB
vmspliced one byte per huge page from a process of 20 MB held 1 GiB that no budget saw (the
kernel's per-user pipe allowance counts buffers, not their size). A run's cgroup charges the
pages the run brought in, but not those of files the host had cached already (the Python
installation, ``/usr``, a ``read`` grant), which no reclaim can free while a pipe holds them:
256 bytes spliced 2 MiB apart from a file the host had read kept 487 MB of its page cache
beside a 64 MB budget. ``shutil`` falls back to reading and writing when ``sendfile`` is
refused."""
FSCRYPT_IOCTLS: Final = {
    "FS_IOC_ADD_ENCRYPTION_KEY": 0xC0506617,
    "FS_IOC_REMOVE_ENCRYPTION_KEY": 0xC0406618,
    "FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS": 0xC0406619,
    "FS_IOC_GET_ENCRYPTION_KEY_STATUS": 0xC080661A,
    "FS_IOC_SET_ENCRYPTION_POLICY": 0x800C6613,
}
"""The ``ioctl`` requests of the keys of encrypted directories (``fscrypt``: ext4, f2fs, ubifs,
ceph), and the one that encrypts a directory, which answer ``EOPNOTSUPP`` as on a filesystem
without encryption. A directory's policy can never be taken back, and one of the original
version names its key by a descriptor the kernel does not check: a run that gave its empty
``write`` grant such a policy left every later file there refused (``ENOKEY``), the host's and
later runs', until the directory is removed (without keys a run has no use for one). A key
belongs to the filesystem, not to a process, and is claimed by user: the worker's user is the
harness's, so a run could remove the host's own claim (and with it the key, locking the host's
encrypted directories) given only the key's identifier, which any directory it may read that
uses the key tells, and each key it added (an identifier is a hash of the key, so any random key
is a new one) was about 800 bytes of kernel memory that no budget counted, kept until the
filesystem is unmounted, up to the user's key quota (``kernel.keys.root_maxbytes``), which the
host's keys share. Reading a directory's policy still works."""
SYNC_IOCTLS: Final = {"BTRFS_IOC_SYNC": 0x9408, "BTRFS_IOC_START_SYNC": 0x80089418}
"""The ``ioctl`` requests that commit a filesystem's whole transaction to its disks, refused
with ``EPERM`` as ``syncfs`` is. Each needs no privilege and no write access: a descriptor of
any file of the filesystem, a read-only one included, makes the kernel write back the dirty
data of every process of the machine there, its metadata and superblocks, outside every
budget, where the filesystem would otherwise commit every 30 seconds."""
SUBVOLUME_IOCTLS: Final = {
    "BTRFS_IOC_SNAP_CREATE": 0x50009401,
    "BTRFS_IOC_SUBVOL_CREATE": 0x5000940E,
    "BTRFS_IOC_SNAP_CREATE_V2": 0x50009417,
    "BTRFS_IOC_SUBVOL_CREATE_V2": 0x50009418,
    "BTRFS_IOC_SUBVOL_SETFLAGS": 0x4008941A,
}
"""The ``ioctl`` requests that make a btrfs subvolume or snapshot, or change a subvolume's flags,
refused with ``EPERM``. btrfs lets any user make one beneath a directory it may write (a
``write`` grant), and each has a quota group of its own: the limit a harness sets on a grant
that is a subvolume (``btrfs qgroup limit``) does not hold what is written beneath a subvolume a
run made in it. The owner of a subvolume may make it read-only, and the worker's user owns a
grant: one that is a subvolume would then refuse every write, the host's (root's included) and
later runs', until an administrator clears the flag."""
MODULE_IOCTLS: Final = {
    "SIOCGIFBR": 0x8940,
    "SIOCSIFBR": 0x8941,
    "SIOCGIFVLAN": 0x8982,
    "SIOCSIFVLAN": 0x8983,
    "SIOCBRADDBR": 0x89A0,
    "SIOCBRDELBR": 0x89A1,
    "SIOCBRADDIF": 0x89A2,
    "SIOCBRDELIF": 0x89A3,
}
"""The socket ``ioctl`` requests of the bridge and of VLANs, which answer ``ENOPKG`` as on a
kernel without them. Any socket's descriptor (a run has its socket pairs) reaches them without
privilege, and the kernel first asks the host's ``modprobe`` for ``bridge`` or ``8021q`` when
that code is a module not loaded yet (``request_module``): a process of the host, outside every
budget, and a module left in the host's kernel after the run, which no program of a run needs.
Measured here (a kernel with both built in, so nothing to load): ``SIOCGIFBR`` answered from the
bridge's code, and ``SIOCGIFVLAN`` answered ``ENOPKG`` after asking for the module."""
WRITEBACK_IOCTLS: Final = {
    "FS_IOC_FIEMAP": 0xC020660B,
    "EXT4_IOC_GET_ES_CACHE": 0xC020662A,
    "EXT4_IOC_ALLOC_DA_BLKS": 0x660C,
    "XFS_IOC_GETBMAP": 0xC0205826,
    "XFS_IOC_GETBMAPX": 0xC0205838,
}
"""The ``ioctl`` requests that write back a file's dirty pages from any descriptor of it, which
answer ``EOPNOTSUPP`` as on a filesystem without extent maps (``filefrag`` and ``cp`` then copy
as they would there). ``FS_IOC_FIEMAP`` does so when its ``FIEMAP_FLAG_SYNC`` is set, and so
does ext4's own ``EXT4_IOC_GET_ES_CACHE`` (which takes the same request), the flag lying in
memory the filter cannot read, so the requests are refused whole: loops of them on a read-only
descriptor of a ``read`` grant the host appended to every 10 ms made 622 and 479 write requests
to the disk in 3 s, where the host's appends alone made 4. XFS's own block map requests
(``XFS_IOC_GETBMAP``, and ``XFS_IOC_GETBMAPX`` unless its ``BMV_IF_DELALLOC`` flag, in memory
too, is set) write back the file's delayed allocations first: on XFS, the root filesystem of
many distributions, loops of them against such a log made 269 and 272 write requests in 3 s,
where the appends alone made none (``XFS_IOC_GETBMAPA``, of the attribute fork, writes nothing
back and stays). No program of a run needs a file's physical layout (the standard library never
asks for it). ext4's ``EXT4_IOC_ALLOC_DA_BLKS`` allocates a file's delayed blocks at once,
which starts writing it back: outside the ``write`` grants the read-only view refuses it, but in
a file of one, a page appended and the request, 500 times, made 988 write requests of the disk,
where the appends alone made none before the kernel's own writeback."""
REMAP_SYSCALLS: Final = {"copy_file_range": 326}
"""The x86_64 number of ``copy_file_range``, which answers ``ENOSYS`` as on a kernel without it
(``cp`` and Python's ``shutil`` then copy by reading and writing). On a filesystem with
reflinks (XFS, btrfs) it first tries to share the source's blocks, and that writes back, and
waits for, the dirty pages of both files (``generic_remap_file_range_prep``), the source needing
only a read-only descriptor on the same filesystem (not the same mount): from a ``read`` grant
the host appended to every 10 ms into a file of a ``write`` grant beside it, a loop made 140,000
write requests to the disk in 3 s (each call also flushed the run's own copy), where the host's
appends alone made none (``REMAP_IOCTLS`` are the same code)."""
REMAP_IOCTLS: Final = {
    "FICLONE": 0x40049409,
    "FICLONERANGE": 0x4020940D,
    "FIDEDUPERANGE": 0xC0189436,
    "XFS_IOC_SWAPEXT": 0xC0C0586D,
}
"""The ``ioctl`` requests that share blocks between two files (clone, dedupe), which answer
``EOPNOTSUPP`` as on a filesystem without reflinks (ext4's answer; ``cp --reflink=auto`` then
copies). Each first writes back and waits for the dirty pages of both ranges, the source (or a
dedupe's caller) needing only a read-only descriptor: a clone loop from a ``read`` grant the host
appended to every 10 ms, into a ``write`` grant on the same XFS, made the disk take each line at
once (295 write requests in 3 s, none without it), as ``FIEMAP_FLAG_SYNC`` did. A clone also
leaves the host's file sharing its blocks with the run's copy after the run, so that each later
write of the host there is a copy on write. Refused by measurement on XFS; btrfs runs the same
preparation. XFS's ``XFS_IOC_SWAPEXT`` (``xfs_fsr`` swaps a file's extents with those of a
defragmented copy by it) writes both files back before it checks anything else: between two
files of a ``write`` grant, 500 calls that each then failed (``EBUSY``: the times they were given
were stale) made 1,000 write requests of the disk."""
FSMAP_IOCTLS: Final = {"FS_IOC_GETFSMAP": 0xC0C0583B}
"""The ``ioctl`` request that maps a whole filesystem's blocks to their owners, which answers
``EOPNOTSUPP`` as on a filesystem without it. ext4 answers it without privilege (XFS asks for
``CAP_SYS_ADMIN``), from a read-only descriptor of any of its files (a ``read`` grant's, the
Python installation's): it reports which inode owns every block of the disk, the files of
directories the run may not list included, so a run polling it sees where and how much the
host writes anywhere on that disk. Each call also walks the filesystem's block groups under
their locks: eight processes looping on it made the host's creation of small files there
about twice as slow as the same load of harmless requests. No program of a run needs it."""
VERITY_IOCTLS: Final = {"FS_IOC_ENABLE_VERITY": 0x40806685}
"""The ``ioctl`` request that turns on fs-verity for a file (ext4, f2fs and btrfs with the
feature), which answers ``EOPNOTSUPP`` as on a filesystem without it. It takes a read-only
descriptor and the write permission its owner has, and it cannot be undone: the file can never
be written again, only replaced. Outside the ``write`` grants the read-only view refuses it
already; within a grant (and the host's files there, which the worker's user owns) it would
leave files the host can no longer write or truncate after the run. Reading a file's verity
digest still works. Not shown on the project's machine, whose kernel has no fs-verity
(``EOPNOTSUPP`` there with or without the filter)."""
INODE_FLAG_IOCTLS: Final = {"FS_IOC_SETFLAGS": 0x40086602, "FS_IOC_FSSETXATTR": 0x401C5820}
"""The ``ioctl`` requests that set a file's inode flags and project (``chattr``), refused with
``EPERM`` as the ``file_setattr`` call is; reading them still works. Outside the ``write``
grants the read-only view refuses them already. Within a grant what they set stays after the
run: the synchronous flags, inherited by every file made beneath, make each later write there,
the host's included, a write request to the disk, and a project quota that bounds a grant holds
only the files of its project, which the project inheritance flag (``FS_PROJINHERIT_FL``) and
the project number (``fsx_projid``) decide."""
FILTER_SOCKOPTS: Final = {
    "SO_ATTACH_FILTER": 26,
    "SO_ATTACH_BPF": 50,
    "SO_ATTACH_REUSEPORT_CBPF": 51,
    "SO_ATTACH_REUSEPORT_EBPF": 52,
}
"""The ``SOL_SOCKET`` options of ``setsockopt`` that attach a BPF program to a socket, refused
with ``EPERM``. The kernel compiles a socket filter to machine code held in the machine's one
pool for the BPF programs of processes without privilege (``net.core.bpf_jit_limit``, 504 MB
here), outside every cgroup, and compiles the seccomp filter of every such process on the
machine from the same pool: once it is used up the kernel compiles no more of them, and where
it has no interpreter to fall back to (``CONFIG_BPF_JIT_ALWAYS_ON``, usual on distribution
kernels and set on this project's) installing a seccomp filter fails until the pool has room
again, a later run's worker's included. Measured: a run of the default budgets, attaching
filters of 4,096 instructions to its socket pairs, held 108 MB of the pool (about 13 KB a
filter) before its memory budget ended it, and one without cgroups 72 MB beside 233 MB of
kernel memory for the programs themselves that no budget counted: a few concurrent runs use
the pool up. A run's socket pairs need no filter (their other options are untouched)."""
OUT_OF_BAND_SYSCALLS: Final = {
    "sendto": (44, 3),
    "recvfrom": (45, 3),
    "sendmsg": (46, 2),
    "recvmsg": (47, 2),
    "recvmmsg": (299, 3),
    "sendmmsg": (307, 3),
}
"""The x86_64 numbers of the calls that send or receive on a socket, and which argument holds
their flags: with ``MSG_OOB`` they answer ``EOPNOTSUPP``, as a kernel without out-of-band data
on unix sockets (``CONFIG_AF_UNIX_OOB``) does. That code is reachable from any socket pair and
needed by no program of a run, and use-after-free bugs were found in it more than once (one,
fixed in Linux 6.16, was used to go from a browser's sandboxed renderer to the kernel)."""
_MSG_OOB: Final = 0x1
_FUTEX: Final = 202
_FUTEX_REQUEUE: Final = 456  # futex_requeue (Linux 6.7): its waiters' flags lie in memory
_FUTEX_PRIVATE_FLAG: Final = 128
_FUTEX_COMMAND: Final = 0xFFFFFFFF & ~(128 | 256)  # without FUTEX_PRIVATE_FLAG and the clock flag
SHARED_REQUEUE_FUTEX_OPS: Final = {
    "FUTEX_REQUEUE": 3,
    "FUTEX_CMP_REQUEUE": 4,
    "FUTEX_CMP_REQUEUE_PI": 12,
}
"""The ``futex`` operations that move waiters from one futex to another, refused with ``EPERM``
on a shared futex (one without ``FUTEX_PRIVATE_FLAG``), and ``futex_requeue``, which answers
``ENOSYS``. A shared futex in a file mapping is keyed by the file and offset, not by the process,
so a run that maps a file it may read (a ``read`` grant, read-only) reaches every waiter of the
machine on a futex there: a process-shared mutex or condition variable of the host's in such a
file (an LMDB database's lock file keeps them) lost its sleeping thread to a requeue onto a futex
of the run's own memory, where the host's wake never came (measured: the host's wake found no
waiter, and its thread slept until its timeout, after the run had ended). A program's own locks
are private futexes (``threading``, the C library's default), and the C library no longer
requeues (its condition variables stopped in 2017); waking and waiting on a shared futex still
work (the C library waits on a thread's exit that way)."""
_SETSOCKOPT: Final = 54
_SOL_SOCKET: Final = 1
_IOCTL: Final = 16
_RT_SIGACTION: Final = 13
_SETSID: Final = 112
_SIGCHLD: Final = 17
_CLONE: Final = 56
_CLONE3: Final = 435
_SOCKETPAIR: Final = 53
_FCNTL: Final = 72
_PRCTL: Final = 157
_PR_SET_SECCOMP: Final = 22
_PR_SET_MEMORY_MERGE: Final = 67
_MADV_MERGEABLE: Final = 12
_DENIED_PRCTL: Final = {
    "PR_SCHED_CORE": 62,
    "PR_FUTEX_HASH": 78,
    "PR_SET_VMA": 0x53564D41,
}
"""The ``prctl`` options refused besides ``PR_SET_SECCOMP``: kernel memory or machine-wide work
that no budget of the run counts. ``PR_FUTEX_HASH`` (Linux 6.16) gives a process a private futex
hash of as many slots as it asks, 64 bytes each, in kernel memory no resident set shows: one
process of a run without cgroups held 256 MB beside a 256 MB budget, and each of a run's
processes may hold one (the kernel still sizes a small one by itself for a threaded process).
``PR_SET_VMA`` names anonymous mappings with strings the kernel keeps for each mapping, charged
to no cgroup (where the kernel has ``CONFIG_ANON_VMA_NAME``). ``PR_SCHED_CORE`` turns on core
scheduling for the whole machine while any cookie lives (where the kernel has
``CONFIG_SCHED_CORE``), which then keeps a core's sibling idle beside the run's tasks."""
_SECCOMP: Final = 317
_SECCOMP_QUESTIONS: Final = (2, 3)  # SECCOMP_GET_ACTION_AVAIL, SECCOMP_GET_NOTIF_SIZES
_AF_UNIX: Final = 1
_SOCK_TYPE_MASK: Final = 0xF
_ALLOWED_PAIR_TYPES: Final = (1, 5)  # SOCK_STREAM, SOCK_SEQPACKET
_DENIED_FCNTL: Final = (1024, 1026)  # F_SETLEASE, F_NOTIFY
_F_SETFL: Final = 4
_O_DIRECT: Final = 0o40000
_O_DSYNC: Final = 0o10000  # O_SYNC is O_DSYNC with a bit of its own
_FLAGS_ARGUMENT: Final = {"open": 1, "openat": 2}
"""Which argument of ``open`` and ``openat`` holds the flags (``O_DIRECT``, ``O_DSYNC`` and
``O_SYNC`` answer ``EINVAL``)."""
_UNKNOWN_FCNTL: Final = (37, 38, 1036)  # F_OFD_SETLK, F_OFD_SETLKW, F_SET_RW_HINT
_SET_ID_BITS: Final = 0o6000  # S_ISUID | S_ISGID
_MODE_ARGUMENT: Final = {
    "open": (2, 2),
    "chmod": (90, 1),
    "fchmod": (91, 1),
    "creat": (85, 1),
    "mknod": (133, 1),
    "openat": (257, 3),
    "mknodat": (259, 2),
    "fchmodat": (268, 2),
    "fchmodat2": (452, 2),
}
"""The x86_64 numbers of the calls that set a file's mode, and which argument holds it."""
_OPENAT2: Final = 437
_PRLIMIT64: Final = 302
_SETRLIMIT: Final = 160
_RLIMIT_CORE: Final = 4
_MMAP: Final = 9
_OFFSET_MMAP_FLAGS: Final = 16 + 8 * 3
_MAP_SHARED_BIT: Final = 0x01  # MAP_SHARED and MAP_SHARED_VALIDATE; MAP_PRIVATE is 0x02
_MAP_ANONYMOUS: Final = 0x20
_MAP_HUGETLB: Final = 0x40000
_FADVISE64: Final = 221
_FALLOCATE: Final = 285
WRITEBACK_FALLOCATE_MODES: Final = {
    "FALLOC_FL_PUNCH_HOLE": 0x02,
    "FALLOC_FL_COLLAPSE_RANGE": 0x08,
    "FALLOC_FL_ZERO_RANGE": 0x10,
    "FALLOC_FL_INSERT_RANGE": 0x20,
    "FALLOC_FL_WRITE_ZEROES": 0x80,
}
"""The ``fallocate`` modes that answer ``EOPNOTSUPP``, as on a filesystem without them (tmpfs
has none but punching holes). Each makes XFS write back, and wait for, the file's dirty pages
before it moves or frees blocks (ext4 does so to collapse or insert a range), and writing
zeroes (Linux 6.17) has the device write them at once: a loop of a page written and one of
those, in a file of a ``write`` grant on XFS, made a write request of the disk each time (1,000
to 2,000 for 1,000 calls), where the same loop without them made none before the kernel's own
writeback. Reserving blocks (mode 0, ``FALLOC_FL_KEEP_SIZE``: ``os.posix_fallocate``) writes
nothing back and works; ``FALLOC_FL_UNSHARE_RANGE`` shares nothing in a run (reflinks are
refused) and stays."""
FALLOCATE_IOCTLS: Final = {
    "FS_IOC_UNRESVSP": 0x40305829,
    "FS_IOC_UNRESVSP64": 0x4030582B,
    "FS_IOC_ZERO_RANGE": 0x40305839,
}
"""The older space reservation ``ioctl`` requests that punch a hole or zero a range through
``fallocate`` on any filesystem (``XFS_IOC_UNRESVSP`` and ``XFS_IOC_ZERO_RANGE`` once), which
answer ``EOPNOTSUPP`` as the ``fallocate`` modes do (``WRITEBACK_FALLOCATE_MODES``): on XFS each
wrote the file back first, the same write request of the disk per call. Reserving space
(``FS_IOC_RESVSP``) stays."""
_PIPE2: Final = 293
O_NOTIFICATION_PIPE: Final = 0o200  # O_EXCL, as pipe2 reads it
"""The flag of ``pipe2`` that makes a notification pipe (the kernel's watch queues: key and
device events written into a pipe), which answers ``ENOPKG`` as on a kernel built without
them. No program of a run has events to watch (the key calls are refused, and the pipe takes
only what those deliver), and its code has had memory-safety flaws that gave local users
root. Every other pipe is made as usual. Refused by reasoning: the project's kernel has no
watch queues (``ENOPKG`` there with or without the filter)."""
_POSIX_FADV_DONTNEED: Final = 4
_MADVISE: Final = 28
_MADV_COLD: Final = 20
_MADV_PAGEOUT: Final = 21
_MADV_REMOVE: Final = 9
"""Punches the pages of a shared file mapping out of the file (``fallocate`` with
``FALLOC_FL_PUNCH_HOLE``), which answers ``EOPNOTSUPP`` as the mode does
(``WRITEBACK_FALLOCATE_MODES``): on XFS a page written and removed, 500 times, made 571 write
requests of the disk."""
_PREADV2: Final = 327
_PWRITEV2: Final = 328
_RWF_NOWAIT: Final = 0x8
_RWF_SYNCHRONOUS: Final = 0x2 | 0x4  # RWF_DSYNC, RWF_SYNC
_RWF_DONTCACHE: Final = 0x80
"""Uncached reads and writes (Linux 6.14): an uncached write starts writing its range back to
the disk as it returns, so that its pages can be dropped, and 3,000 page writes to a file of a
``write`` grant on ext4 made 3,000 write requests of its disk where plain writes made none
before the kernel's own writeback. Reads go with it: the answer of a filesystem without them."""
_OFFSET_ARG5_LOW: Final = 56

_LD_W_ABS: Final = 0x20
_JMP_JEQ_K: Final = 0x15
_JMP_JGE_K: Final = 0x35
_JMP_JSET_K: Final = 0x45
_ALU_AND_K: Final = 0x54
_RET_K: Final = 0x06
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_OFFSET_NR: Final = 0
_OFFSET_ARCH: Final = 4
_OFFSET_ARG0_LOW: Final = 16  # little endian: the low word of args[0]; args[i] 8 bytes on
_OFFSET_ARG1_LOW: Final = 24
_OFFSET_ARG1_HIGH: Final = 28
_OFFSET_ARG2_LOW: Final = 32
_OFFSET_ARG2_HIGH: Final = 36
_OFFSET_ARG3_LOW: Final = 40


def seccomp_supported() -> bool:
    """Whether this architecture has a filter table (x86_64 only)."""
    return platform.machine() == "x86_64"


Label = str | None
"""Where a jump goes: a label placed with ``_Assembler.place``, or ``None`` for the next one."""


class _Assembler:
    """Classic BPF with named forward jump targets (offsets are resolved at the end)."""

    def __init__(self) -> None:
        self._ops: list[tuple[int, int, Label, Label]] = []
        self._labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: Label = None, jf: Label = None) -> None:
        self._ops.append((code, k, jt, jf))

    def place(self, label: str) -> None:
        self._labels[label] = len(self._ops)

    def program(self) -> list[SockFilter]:
        program = []
        for index, (code, k, jt, jf) in enumerate(self._ops):
            offsets = [0 if to is None else self._labels[to] - index - 1 for to in (jt, jf)]
            if not all(0 <= offset <= 255 for offset in offsets):
                raise ValueError(f"seccomp jump out of range at instruction {index}")
            program.append(SockFilter(code, offsets[0], offsets[1], k))
        return program


def seccomp_program(
    *,
    guard_child_reaping: bool,
    refuse_hidden_memory: bool = False,
    refuse_new_sessions: bool = False,
) -> list[SockFilter]:
    """The filter, as instructions for ``set_seccomp_filter``.

    ``guard_child_reaping`` (for a run without cgroups): ``rt_sigaction(SIGCHLD, act)`` with an
    action answers ``EPERM``, reading the current one still works. Ignoring ``SIGCHLD`` or
    setting ``SA_NOCLDWAIT`` makes the kernel reap a process's children itself, and their CPU
    time then reaches no one's ``/proc`` figures; a filter cannot read the action to refuse
    only those, so it refuses every change of ``SIGCHLD``'s action.

    ``refuse_hidden_memory`` (for a run without cgroups): ``mmap`` with ``MAP_SHARED`` (or
    ``MAP_SHARED_VALIDATE``) and ``MAP_ANONYMOUS`` answers ``EPERM``. The calls that put pages
    into a pipe by reference (``PIPE_PAGE_SYSCALLS``) answer ``EPERM`` in either case.

    ``refuse_new_sessions``: ``setsid`` answers ``EPERM``. Where the kernel groups processes by
    session for scheduling (``kernel.sched_autogroup_enabled``, the usual default), a session is
    one entity of the scheduler however many processes it has, and a run keeps to the one its
    worker starts: a fork bomb whose every process called ``setsid`` had as many shares of the
    CPU as processes (thousands), against one for the host and one for the run's init, and the
    host stood still for seconds.
    """
    bpf = _Assembler()
    bpf.op(_LD_W_ABS, _OFFSET_ARCH)
    bpf.op(_JMP_JEQ_K, _AUDIT_ARCH_X86_64, None, "enosys")
    bpf.op(_LD_W_ABS, _OFFSET_NR)
    bpf.op(_JMP_JGE_K, _X32_BIT, "deny")
    bpf.op(_JMP_JGE_K, FIRST_UNREVIEWED_SYSCALL, "enosys")
    for number in sorted(DENIED_SYSCALLS.values()):
        bpf.op(_JMP_JEQ_K, number, "deny")
    for number in sorted(UNSUPPORTED_SYSCALLS.values()):
        bpf.op(_JMP_JEQ_K, number, "unsupported")
    bpf.op(_JMP_JEQ_K, _CLONE3, "enosys")
    bpf.op(_JMP_JEQ_K, _FUTEX_REQUEUE, "enosys")
    bpf.op(_JMP_JEQ_K, _OPENAT2, "enosys")
    for number in sorted(NUMA_SYSCALLS.values()):
        bpf.op(_JMP_JEQ_K, number, "enosys")
    for number in sorted(SKIPPED_SYSCALLS.values()):
        bpf.op(_JMP_JEQ_K, number, "skip")
    for name, (number, _argument) in _MODE_ARGUMENT.items():
        bpf.op(_JMP_JEQ_K, number, f"mode-{name}")
    bpf.op(_JMP_JEQ_K, _CLONE, "clone")
    bpf.op(_JMP_JEQ_K, _SOCKETPAIR, "socketpair")
    bpf.op(_JMP_JEQ_K, _SETSOCKOPT, "setsockopt")
    for number, argument in OUT_OF_BAND_SYSCALLS.values():
        bpf.op(_JMP_JEQ_K, number, f"flags-arg{argument}")
    bpf.op(_JMP_JEQ_K, _FUTEX, "futex")
    bpf.op(_JMP_JEQ_K, _FCNTL, "fcntl")
    bpf.op(_JMP_JEQ_K, _IOCTL, "ioctl")
    bpf.op(_JMP_JEQ_K, _PRCTL, "prctl")
    bpf.op(_JMP_JEQ_K, _SECCOMP, "seccomp")
    bpf.op(_JMP_JEQ_K, _PRLIMIT64, "prlimit")
    bpf.op(_JMP_JEQ_K, _SETRLIMIT, "setrlimit")
    bpf.op(_JMP_JEQ_K, _FADVISE64, "fadvise")
    bpf.op(_JMP_JEQ_K, _PIPE2, "pipe2")
    bpf.op(_JMP_JEQ_K, _MADVISE, "madvise")
    bpf.op(_JMP_JEQ_K, _FALLOCATE, "fallocate")
    bpf.op(_JMP_JEQ_K, _PREADV2, "nowait")
    bpf.op(_JMP_JEQ_K, _PWRITEV2, "nowait")
    if guard_child_reaping:
        bpf.op(_JMP_JEQ_K, _RT_SIGACTION, "sigaction")
    bpf.op(_JMP_JEQ_K, _MMAP, "mmap")
    for number in sorted(PIPE_PAGE_SYSCALLS.values()):
        bpf.op(_JMP_JEQ_K, number, "deny")
    if refuse_new_sessions:
        bpf.op(_JMP_JEQ_K, _SETSID, "deny")
    # Last: the calls checked by their arguments (open, mmap, ...) never pass these.
    for number in sorted(
        (*LANDLOCK_SYSCALLS.values(), *PAGE_CACHE_SYSCALLS.values(), *REMAP_SYSCALLS.values())
    ):
        bpf.op(_JMP_JEQ_K, number, "enosys")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    bpf.place("enosys")
    bpf.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    bpf.place("unsupported")
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    bpf.place("skip")
    bpf.op(_RET_K, _RET_ERRNO | 0)  # the call is not made; it returns 0
    # clone: refused with any namespace flag, and with a descriptor table shared by anything
    # but a thread (CLONE_FILES without CLONE_THREAD).
    bpf.place("clone")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    bpf.op(_JMP_JSET_K, _NAMESPACE_FLAGS, "clone-deny")
    bpf.op(_JMP_JSET_K, _CLONE_FILES, None, "clone-allow")
    bpf.op(_JMP_JSET_K, _CLONE_THREAD, "clone-allow")
    bpf.place("clone-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    bpf.place("clone-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # socketpair: only unix stream and sequenced-packet pairs (no datagram sendto to an
    # address, and no other family's socket code, which could load a kernel module).
    bpf.place("socketpair")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    bpf.op(_JMP_JEQ_K, _AF_UNIX, None, "socketpair-deny")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_ALU_AND_K, _SOCK_TYPE_MASK)
    for pair_type in _ALLOWED_PAIR_TYPES:
        bpf.op(_JMP_JEQ_K, pair_type, "socketpair-allow")
    bpf.place("socketpair-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    bpf.place("socketpair-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # setsockopt: no BPF program attached to a socket (the kernel reads level and option as
    # 32-bit ints).
    bpf.place("setsockopt")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_JMP_JEQ_K, _SOL_SOCKET, None, "setsockopt-allow")
    bpf.op(_LD_W_ABS, _OFFSET_ARG2_LOW)
    for option in FILTER_SOCKOPTS.values():
        bpf.op(_JMP_JEQ_K, option, "setsockopt-deny")
    bpf.place("setsockopt-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("setsockopt-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # send and receive calls: no out-of-band data (the kernel reads the flags as 32 bits).
    for argument in sorted({argument for _number, argument in OUT_OF_BAND_SYSCALLS.values()}):
        bpf.place(f"flags-arg{argument}")
        bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW + 8 * argument)
        bpf.op(_JMP_JSET_K, _MSG_OOB, "out-of-band")
        bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("out-of-band")
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    # futex: no waiter moved off a shared futex (the kernel reads the operation as 32 bits).
    bpf.place("futex")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_JMP_JSET_K, _FUTEX_PRIVATE_FLAG, "futex-allow")
    bpf.op(_ALU_AND_K, _FUTEX_COMMAND)
    for operation in SHARED_REQUEUE_FUTEX_OPS.values():
        bpf.op(_JMP_JEQ_K, operation, "futex-deny")
    bpf.place("futex-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("futex-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # fcntl: no leases, no directory notifications, no open file description locks, no
    # write-lifetime hint set.
    bpf.place("fcntl")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    for command in _DENIED_FCNTL:
        bpf.op(_JMP_JEQ_K, command, "fcntl-deny")
    for command in _UNKNOWN_FCNTL:
        bpf.op(_JMP_JEQ_K, command, "fcntl-unknown")
    bpf.op(_JMP_JEQ_K, _F_SETFL, None, "fcntl-allow")
    bpf.op(_LD_W_ABS, _OFFSET_ARG2_LOW)
    bpf.op(_JMP_JSET_K, _O_DIRECT, "invalid")
    bpf.place("fcntl-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("fcntl-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # Open file description locks: as a kernel before them answers, so that a program falls
    # back to the classic locks, which the run's init counts (its /proc/locks lists every
    # process's open file description locks, not the run's alone). Write-lifetime hints: as a
    # kernel before them (a hint set on a host file the worker's user owns outlives the run).
    bpf.place("fcntl-unknown")
    bpf.op(_RET_K, _RET_ERRNO | errno.EINVAL)
    # ioctl: no key of an encrypted directory added or removed, no directory encrypted, no
    # file written back (nor blocks shared, which writes both files back), no map of a whole
    # disk, no filesystem's transaction committed, no subvolume made or changed, no module
    # asked for, no inode flag set (the kernel reads the request as 32 bits).
    bpf.place("ioctl")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    for request in (
        *FSCRYPT_IOCTLS.values(),
        *WRITEBACK_IOCTLS.values(),
        *FALLOCATE_IOCTLS.values(),
        *REMAP_IOCTLS.values(),
        *FSMAP_IOCTLS.values(),
        *VERITY_IOCTLS.values(),
    ):
        bpf.op(_JMP_JEQ_K, request, "ioctl-unsupported")
    for request in MODULE_IOCTLS.values():
        bpf.op(_JMP_JEQ_K, request, "ioctl-no-module")
    for request in (
        *SYNC_IOCTLS.values(),
        *SUBVOLUME_IOCTLS.values(),
        *INODE_FLAG_IOCTLS.values(),
    ):
        bpf.op(_JMP_JEQ_K, request, "ioctl-deny")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("ioctl-unsupported")
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    bpf.place("ioctl-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    bpf.place("ioctl-no-module")
    bpf.op(_RET_K, _RET_ERRNO | errno.ENOPKG)
    # prctl and seccomp: no filter of the program's own (it could only log: every system call
    # one of its filters logs, or the kill of strict mode, is an audit record on the host),
    # and none of the options that hold kernel memory or work beyond the run (_DENIED_PRCTL).
    bpf.place("prctl")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    bpf.op(_JMP_JEQ_K, _PR_SET_SECCOMP, "seccomp-deny")
    for option in _DENIED_PRCTL.values():
        bpf.op(_JMP_JEQ_K, option, "seccomp-deny")
    bpf.op(_JMP_JEQ_K, _PR_SET_MEMORY_MERGE, "invalid")  # no KSM: as a kernel without it
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("seccomp")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    for operation in _SECCOMP_QUESTIONS:
        bpf.op(_JMP_JEQ_K, operation, "seccomp-allow")
    bpf.place("seccomp-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    bpf.place("seccomp-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # prlimit64: the caller's own limits only (pid 0; the kernel reads the pid and the
    # resource as 32 bits), and RLIMIT_CORE only read (no new limit: a null pointer, 64 bits).
    bpf.place("prlimit")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    bpf.op(_JMP_JEQ_K, 0, None, "prlimit-deny")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_JMP_JEQ_K, _RLIMIT_CORE, None, "prlimit-allow")
    bpf.op(_LD_W_ABS, _OFFSET_ARG2_LOW)
    bpf.op(_JMP_JEQ_K, 0, None, "prlimit-deny")
    bpf.op(_LD_W_ABS, _OFFSET_ARG2_HIGH)
    bpf.op(_JMP_JEQ_K, 0, None, "prlimit-deny")
    bpf.place("prlimit-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # setrlimit (the call the C library no longer makes, still there): not RLIMIT_CORE.
    bpf.place("setrlimit")
    bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
    bpf.op(_JMP_JEQ_K, _RLIMIT_CORE, "prlimit-deny")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("prlimit-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # fadvise64 and madvise: nothing that drops pages from the host's page cache, or moves them
    # first in line to be dropped (the kernel reads both as 32-bit ints).
    bpf.place("fadvise")
    bpf.op(_LD_W_ABS, _OFFSET_ARG3_LOW)
    bpf.op(_JMP_JEQ_K, _POSIX_FADV_DONTNEED, "cache-deny")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("madvise")
    bpf.op(_LD_W_ABS, _OFFSET_ARG2_LOW)
    bpf.op(_JMP_JEQ_K, _MADV_COLD, "cache-deny")
    bpf.op(_JMP_JEQ_K, _MADV_PAGEOUT, "cache-deny")
    bpf.op(_JMP_JEQ_K, _MADV_MERGEABLE, "invalid")  # no KSM: as a kernel without it
    bpf.op(_JMP_JEQ_K, _MADV_REMOVE, None, "madvise-allow")  # a hole punched: as fallocate's
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    bpf.place("madvise-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("cache-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # preadv2 and pwritev2: no RWF_NOWAIT, whose EAGAIN tells whether a page is cached, and
    # no RWF_DSYNC or RWF_SYNC, which flush the disk as fsync would, nor RWF_DONTCACHE, whose
    # every write starts its own writeback; the answer of a file that does not support them,
    # so the caller reads or writes as usual.
    bpf.place("nowait")
    bpf.op(_LD_W_ABS, _OFFSET_ARG5_LOW)
    bpf.op(_JMP_JSET_K, _RWF_NOWAIT | _RWF_SYNCHRONOUS | _RWF_DONTCACHE, None, "nowait-allow")
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    bpf.place("nowait-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # fallocate: nothing that makes the filesystem write the file back first, or the device
    # write zeroes (the kernel reads the mode as a 32-bit int); the answer of a filesystem
    # without them.
    bpf.place("fallocate")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_JMP_JSET_K, sum(WRITEBACK_FALLOCATE_MODES.values()), None, "fallocate-allow")
    bpf.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    bpf.place("fallocate-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # pipe2: no notification pipe, as on a kernel without them.
    bpf.place("pipe2")
    bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
    bpf.op(_JMP_JSET_K, O_NOTIFICATION_PIPE, None, "pipe2-allow")
    bpf.op(_RET_K, _RET_ERRNO | errno.ENOPKG)
    bpf.place("pipe2-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    # calls setting a mode: no set-user-ID or set-group-ID bit; opening: no O_DIRECT, and no
    # O_DSYNC or O_SYNC (each write would flush the disk as fsync would).
    for name, (_number, argument) in _MODE_ARGUMENT.items():
        bpf.place(f"mode-{name}")
        if name in _FLAGS_ARGUMENT:
            bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW + 8 * _FLAGS_ARGUMENT[name])
            bpf.op(_JMP_JSET_K, _O_DIRECT | _O_DSYNC, "invalid")
        bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW + 8 * argument)
        bpf.op(_JMP_JSET_K, _SET_ID_BITS, "mode-deny")
        bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("mode-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # As a filesystem without O_DIRECT answers (open, openat, fcntl F_SETFL: a direct read or
    # write first writes back the dirty pages of its range, the host's included), and a
    # kernel without KSM (madvise MADV_MERGEABLE, prctl PR_SET_MEMORY_MERGE).
    bpf.place("invalid")
    bpf.op(_RET_K, _RET_ERRNO | errno.EINVAL)
    # mmap: no huge pages of the machine's hugetlb pool; without cgroups, no shared anonymous
    # memory either.
    bpf.place("mmap")
    bpf.op(_LD_W_ABS, _OFFSET_MMAP_FLAGS)
    bpf.op(_JMP_JSET_K, _MAP_HUGETLB, "mmap-deny")
    if refuse_hidden_memory:
        bpf.op(_JMP_JSET_K, _MAP_ANONYMOUS, None, "mmap-allow")
        bpf.op(_JMP_JSET_K, _MAP_SHARED_BIT, "mmap-deny")
    bpf.place("mmap-allow")
    bpf.op(_RET_K, _RET_ALLOW)
    bpf.place("mmap-deny")
    bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
    if guard_child_reaping:
        # rt_sigaction: SIGCHLD's action may be read (act NULL), not changed.
        bpf.place("sigaction")
        bpf.op(_LD_W_ABS, _OFFSET_ARG0_LOW)
        bpf.op(_JMP_JEQ_K, _SIGCHLD, None, "sigaction-allow")
        bpf.op(_LD_W_ABS, _OFFSET_ARG1_LOW)
        bpf.op(_JMP_JEQ_K, 0, None, "sigaction-deny")
        bpf.op(_LD_W_ABS, _OFFSET_ARG1_HIGH)
        bpf.op(_JMP_JEQ_K, 0, "sigaction-allow", "sigaction-deny")
        bpf.place("sigaction-deny")
        bpf.op(_RET_K, _RET_ERRNO | errno.EPERM)
        bpf.place("sigaction-allow")
        bpf.op(_RET_K, _RET_ALLOW)
    return bpf.program()
