"""The worker process's life: ``main()`` rehearses a run and sets up what does not depend on
the program (``_worker.set_up``) while it waits, reads its ``Boot``, applies the boot's limits
and runs the program (``_worker``); a held boot's program is compiled at once and run only
after the host's go (``_worker.read_go``).

The template (``_template``) imports this module once and calls ``main()`` in each child it
forks. The limits: ``RLIMIT_AS`` from ``max_memory_mb``, ``RLIMIT_CPU`` = ceil(compute_ms /
1000) + 1 s as a kernel backstop (the host and the sandbox init charge the run's whole process
tree against ``compute_ms``), at most ``SIGNALS_PENDING`` queued signals, no
real-time scheduling and no nice value below 0 (``RLIMIT_RTPRIO`` and ``RLIMIT_NICE`` at 0), at
most ``LOCKED_BYTES`` of locked memory. No core dumps: the template's child sets
``RLIMIT_CORE`` to 1 before the worker exists (``_template._no_core_dumps``), which the
sandbox's filter then keeps (0, which would let a piped ``core_pattern`` dump, is refused too).
They are the runtime's config, which the template passes on (``expect_compute_ms``) and
every ``Boot`` repeats: a worker applies the CPU limit once it has rehearsed, before it waits
(and again at its boot only if the boot carries another), and the memory limit once it has
read its boot. Under the sandbox ``main`` gets the
worker's end of the namespace init's notice socket: ``NOTICE_STARTED`` there once the program may
run starts the init's measuring, wall clock included; on a held boot ``NOTICE_HELD`` starts it
first without the wall clock (the compile is charged, the wait for the go is not).

The template also calls ``fit_threads`` (``_worker_threads``) once, before it forks: what it
sets (the threads' stacks, the malloc arenas) is inherited by every worker.

This module imports only the standard library, ``msgspec`` (through its sibling wire modules),
``_worker``, ``_worker_threads`` and the sandbox init's notice byte.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import linecache
import math
import os
import resource
import selectors
import sys
from typing import Any, Final, NoReturn

from ._frames import (
    PREFIX_BYTES,
    Boot,
    Done,
    ErrorClassWire,
    Log,
    NamespaceWire,
    Reply,
    encode_frame,
)
from ._ledger import clean_text
from ._program import FILENAME
from ._sandbox._init import NOTICE_HELD, NOTICE_STARTED, WHERE_FD
from ._tokens import tokenize
from ._worker import (
    CHANNEL_IN,
    CHANNEL_OUT,
    HOST_FRAMES,
    Worker,
    exit_status,
    load_program,
    read_boot,
    read_go,
    run_program,
    set_up,
)
from ._worker_threads import fit_threads

__all__ = ["WHERE_FD", "expect_compute_ms", "fit_threads", "main"]

_os_write = os.write
_os_exit = os._exit
_encode_frame = encode_frame

_WARM_PROGRAM: Final = """\
import json, time
values = await asyncio.gather(*[tools.warm({'n': i}) for i in range(1)])
def total(items):
    return sum(item["n"] for item in items if item is not None)
try:
    summary = {"count": len(values), "total": total(values), "at": time.monotonic()}
except (KeyError, TypeError) as exc:
    summary = {"count": 0, "error": f"{exc!r}"}
for key, value in summary.items():
    if isinstance(value, str):
        print(key, value)
return [summary["count"], f"{total(values):d}", json.dumps(values)]
"""
"""A program like most a run is given (imports, a gathered binding call, a function, a
comprehension, ``try``, a loop, an f-string): compiling and running it in ``_rehearse`` takes
the page copies those steps cost off the run's path (measured for a five-line program: its
compile took 21-23 page faults after a one-line rehearsal, 4-6 after this one)."""
_WARM_BOOT: Final = bytes(
    _encode_frame(
        Boot(
            _WARM_PROGRAM,
            [NamespaceWire("tools", ["warm"], ErrorClassWire("ToolCallError", "tool_name"))],
            1 << 20,
            1.0,
            1.0,
            1 << 20,
        )
    )
)
"""A boot frame for ``_rehearse``, made once in the template."""
_WARM_REPLY: Final = bytes(_encode_frame(Reply(1, True, tokenize({"n": 1}))))
"""A reply frame for ``_rehearse``, made once in the template."""


def _discard(data: bytes | bytearray) -> None:
    """Where the rehearsal's frames go."""


def _discard_call() -> None:
    """What the rehearsal's channel reader would run."""


def _rehearse(loop: asyncio.AbstractEventLoop) -> None:
    """Rehearse, before the program arrives, the work every run repeats: the worker's state,
    loading a program with its bindings, the event loop (``loop``, the run's), a binding call
    settled by a reply, the completion frame, and what the run sets up around its program. A
    worker is forked ready-made and waits for its ``Boot``; the first write to each page it
    inherited copies that page (and in CPython a read writes a reference count), so rehearsing
    now keeps those copies off the run's path: measured, that moved about half of the page
    faults between a run's boot and its program out of the run."""
    boot = HOST_FRAMES.decode(_WARM_BOOT[PREFIX_BYTES:])
    warm = Worker(boot, write=_discard)  # the binding call's frame is made, not sent
    loaded = load_program(warm)
    assert not isinstance(loaded, Done)  # the rehearsal's program compiles
    _module, function = loaded
    warm.loop = loop

    async def rehearse() -> Any:
        running = asyncio.ensure_future(function())
        await asyncio.sleep(0)  # the program waits for its binding call's reply
        warm.on_reply(HOST_FRAMES.decode(_WARM_REPLY[PREFIX_BYTES:]))
        return await running

    value = loop.run_until_complete(rehearse())
    _encode_frame(Done(value=tokenize(value)))
    _encode_frame(Log(clean_text("warm")))
    linecache.cache.pop(FILENAME, None)
    # What the run sets up around its program: the loop it reads the channel with, and the
    # entries of ``sys`` and ``builtins`` it replaces (written back as they are).
    asyncio.set_event_loop(loop)
    loop.add_reader(CHANNEL_IN, _discard_call)
    loop.remove_reader(CHANNEL_IN)
    sys.modules["__main__"] = sys.modules["__main__"]
    sys.argv = sys.argv
    sys.stdout, sys.stderr = sys.stdout, sys.stderr
    builtins.print = builtins.print


_expected_compute_ms: float | None = None
"""The ``compute_ms`` of every run of this template (``expect_compute_ms``)."""


def expect_compute_ms(compute_ms: float) -> None:
    """Tell the workers of this template the ``compute_ms`` their runs' ``Boot`` frames will
    carry (the runtime's config). A worker applies the CPU limit before it waits, off its run's
    path, and again at its boot only if the boot's differs; the memory limit waits for the
    boot, so that reading a large one is not charged to the run."""
    global _expected_compute_ms
    _expected_compute_ms = compute_ms


SIGNALS_PENDING: Final = 1024
"""``RLIMIT_SIGPENDING`` of a run's processes. The kernel counts queued signals per user and
checks the count against the receiving process's limit: the worker runs as the host's user, so
without this a run that blocks a real-time signal and queues it to itself takes that user's
whole allowance (about 96,000 for root here), and ``sigqueue`` and ``timer_create`` fail in the
host until the run ends. A run may queue at most this many while the user has no others."""


LOCKED_BYTES: Final = 64 * 1024
"""``RLIMIT_MEMLOCK`` of a run's processes (or the harness's, when lower): what ``gpg`` locks for
its keys fits. ``mlock`` of a file's pages that the host already caches charges them to no run
(they stay charged where they were first read, or nowhere without cgroups), yet makes them
unevictable: under the usual 8 MiB a process, a run of 24 processes pinned 168 MB of the host's
cache beside a 128 MB memory budget."""

_CPU_SECONDS_CEILING: Final = 2**32
"""The most CPU seconds ``RLIMIT_CPU`` is set to (136 years); a larger budget
(``compute_ms=1e25``, finite) sets no limit. The kernel counts the limit in nanoseconds in 64
bits: 2**62 seconds wrapped to a limit of 0 and killed the worker at once."""

_MEMORY_CEILING: Final = 2**62
"""The most bytes ``RLIMIT_AS`` is set to; ``setrlimit`` refuses values past 64 bits with
``OverflowError``."""


def _apply_cpu_limits(compute_ms: float) -> None:
    seconds = math.ceil(compute_ms / 1000) + 1
    cpu = (
        (seconds, seconds + 1)
        if seconds < _CPU_SECONDS_CEILING
        else (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    for which, value in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_SIGPENDING, (SIGNALS_PENDING, SIGNALS_PENDING)),
        # No real-time scheduling and no priority above the default, whatever the harness
        # may: a spinning SCHED_FIFO process leaves the rest of its CPU, the host and the
        # sandbox init that would end it included, 5% of it until compute_ms runs out.
        (resource.RLIMIT_RTPRIO, (0, 0)),
        (resource.RLIMIT_NICE, (0, 0)),
        # Locked memory for a secret or two, no more: a run's processes could otherwise pin
        # the host's own cached pages of every file they may read (no budget sees those,
        # which another cgroup or none is charged for) up to the harness's limit each.
        (resource.RLIMIT_MEMLOCK, _lowered(resource.RLIMIT_MEMLOCK, LOCKED_BYTES)),
    ):
        with contextlib.suppress(OSError, ValueError):  # best effort
            resource.setrlimit(which, value)


def _lowered(which: int, most: int) -> tuple[int, int]:
    """Limit ``which`` at ``most``, or where the harness has it lower, soft and hard apart: a
    lower limit is never raised (a harness with ``CAP_SYS_RESOURCE`` could raise it)."""
    try:
        limits = resource.getrlimit(which)
    except (OSError, ValueError):
        return most, most
    soft, hard = (
        most if limit == resource.RLIM_INFINITY or limit < 0 else min(limit, most)
        for limit in limits
    )
    return soft, hard


def _apply_memory_limit(max_memory_mb: float) -> None:
    memory = min(int(max_memory_mb * 1024 * 1024), _MEMORY_CEILING)
    if memory > 0:
        with contextlib.suppress(OSError, ValueError):  # best effort
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def main(notice: int | None = None) -> NoReturn:
    """Run one program (the child's whole life); never returns. ``notice`` is the write end of
    the sandbox init's notice socket (none under ``"process"`` isolation)."""
    try:
        # A poll loop: the sandbox refuses epoll, whose watches count against a limit the
        # worker would share with every process of its user on the machine (as root: the host).
        selector = selectors.PollSelector()
        loop = asyncio.SelectorEventLoop(selector)
        _rehearse(loop)
        expected = _expected_compute_ms
        if expected is not None:
            _apply_cpu_limits(expected)
        os.set_inheritable(CHANNEL_IN, False)
        os.set_inheritable(CHANNEL_OUT, False)
        # Everything of the run that does not depend on its program, made while waiting for
        # it: a woken worker's first steps run slowly (cold caches), and these were a third of
        # an empty run's steps in the worker.
        worker = Worker(HOST_FRAMES.decode(_WARM_BOOT[PREFIX_BYTES:]))
        worker.selector = selector
        if notice is not None:
            worker.notice = (notice, os.fstat(notice).st_ino)
        set_up(worker, loop)
        boot = read_boot()
        if boot.compute_ms != expected:
            _apply_cpu_limits(boot.compute_ms)
        _apply_memory_limit(boot.max_memory_mb)
        worker.attach(boot)
        loaded = None
        if boot.held:
            # Compiled now, measured (but not against the wall clock) and inside the boot's
            # limits, while the host decides whether the run happens: nothing of the program
            # runs before the go.
            if notice is not None:
                _os_write(notice, NOTICE_HELD)
            loaded = load_program(worker)
            read_go()
        if notice is not None:
            _os_write(notice, NOTICE_STARTED)  # the init measures the run from now on
        run_program(worker, loop, loaded)
    except SystemExit as exc:
        _os_exit(exit_status(exc))
    except BaseException:
        pass
    _os_exit(70)
