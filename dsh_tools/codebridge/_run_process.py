"""A run's worker process, as the host sees it: one attempt's descriptors, readers and frames,
the native output pipes and the status pipe's reports.

``RunProcess`` is the process half of ``CodeRun`` (``_run``), which adds the run's settlement:
what the worker and its template report arrives here and is turned into calls of the abstract
settlement methods. An attempt is one worker; when the template dies before it forked the
worker, or with a pre-forked worker that never read its program (as the host finds once that
worker is killed), the run makes one more attempt with a fresh template (nothing of the
program ran). A silent program (no frame, no output) may have run, writes and all, once its
worker read it, whether or not its template still lived: its run fails.

It stays one module a little past 400 lines because it is one state machine: the channel, the
native pipes, the status reports and the exit handling all read and move the same attempt's
state (its descriptors, pid, exit figures and settlement), in an order that only reads right
in one place.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, Final

from ._frame_screen import oversize_message, worker_frame_screen
from ._frames import Call, FrameReader, worker_frame_decoder
from ._ledger import OutputLedger
from ._outcome import LIMIT, Outcome
from ._pool import Slot, WorkerPool, open_slot
from ._run_crash_dump import where_of
from ._run_output import NativeOutput
from ._run_pipes import DRAIN_LIMIT, READ_SIZE, ChannelWriter, read_available
from ._run_readers import RunReaders
from ._run_status import (
    BudgetReport,
    ErrorReport,
    ExitReport,
    GoneReport,
    HangUpReport,
    KilledReport,
    PidReport,
    RunLimits,
    WorkerReport,
    take_report,
)
from ._sandbox._init import (
    BUDGET_COMPUTE,
    BUDGET_WALL,
    WHERE_PIPE_BYTES,
    WHERE_SECONDS,
    WHERE_SIGNAL,
    namespace_worker,
    process_exiting,
    widen_where,
)
from ._seam import CodeRuntimeConfig
from ._template_host import TemplateHandle, close_host_fds

__all__ = ["IGNORED_FRAMES_LIMIT", "RunProcess"]

_CPU_SAMPLE_SECONDS: Final = 0.025
_CHANNEL_CLOSED: Final = "worker closed its channel before completing"
"""The failure of a run whose worker lives on after its channel to the host closed (the
program closed it): no ``Done`` can come."""
_WHERE_READ_LIMIT: Final = WHERE_PIPE_BYTES
"""The most the host reads of the where pipe, to drop or to read: what a pipe holds at most
unless its owner may pass ``/proc/sys/fs/pipe-max-size`` (one dump's non-blocking writes take
a few kilobytes, a hundred for a program of many threads deep in calls, and the pipe is made
to hold this much as the worker is asked, as a program may have made it and filled it)."""
_CHANNEL_CLOSED_SECONDS: Final = 0.25
"""How long after end of file on a sandboxed worker's channel the host waits for its init to
report the end it then asks for (see ``_on_channel_eof``) before it settles on its own."""
_WORKER_FRAMES: Final = worker_frame_decoder()
"""One decoder for every run (decoding keeps no state; making one costs a few microseconds)."""
_screen_of: Final = lru_cache(maxsize=16)(worker_frame_screen)
"""The frame screen of a run with that output cap: the runs of a runtime share one (it keeps
no state), rather than each making its own closure."""
IGNORED_FRAMES_LIMIT: Final = 10_000
"""How many frames a run's worker may send that the host drops (undecodable, ill-typed, over
what their kind may cost, a binding call id seen before, a ``Done`` of no known kind). The
worker's own code sends none; a program writing its own frames could otherwise keep the host
decoding junk for the whole wall ceiling while it spends almost no CPU itself."""


class RunProcess(abc.ABC):
    """The worker-process half of one run; every method runs on ``loop``."""

    _writer: ChannelWriter  # made for the first attempt, reopened for the next
    _on_call: Callable[[Call], bool]
    """Takes a ``Call`` frame from the worker (set by the run); ``False`` when the host could
    not use it (it counts among the frames dropped)."""

    def __init__(
        self,
        *,
        config: CodeRuntimeConfig,
        template: TemplateHandle,
        pool: WorkerPool | None,
        loop: asyncio.AbstractEventLoop,
        ledger: OutputLedger,
        boot: bytes,
        taken: Slot | None = None,
        boot_sent: int = 0,
    ) -> None:
        """``taken``: the pre-forked worker the first attempt runs on, taken from ``pool``
        already, with the first ``boot_sent`` bytes of ``boot`` written to it."""
        self._template = template
        self._pool = pool
        self._taken = taken
        self._boot_sent = boot_sent
        self._sandboxed = config.isolation == "sandbox"
        self._limits = RunLimits(
            config.compute_ms,
            config.max_memory_mb,
            config.sandbox.max_processes,
            config.max_wall_ms,
        )
        self._loop = loop
        self._ledger = ledger
        self._boot = boot
        self._max_frame_bytes = config.max_frame_bytes
        self._screen = _screen_of(config.max_output_bytes)
        self._outcome: Outcome | None = None
        self._done = False
        self._attempts = 0
        self._sampler: asyncio.TimerHandle | None = None
        self._channel_deadline: asyncio.TimerHandle | None = None  # see ``_on_channel_eof``
        # Past the wall ceiling: killed from another thread, or asked where it is as the
        # ceiling ends the run (an end of the worker then reads as the ceiling's).
        self._past_ceiling = False
        self._template_process: subprocess.Popen[bytes] | None = None
        self._reset_attempt()

    # -- settlement, as the run implements it ------------------------------------------------

    @abc.abstractmethod
    def _on_frame(self, frame: Any) -> None:
        """A decoded frame from the worker, other than a ``Call``."""

    @abc.abstractmethod
    def _settle(self, outcome: Outcome) -> None:
        """Settle the run (the first settlement wins)."""

    def _settle_failure(self, kind: str, message: str) -> None:
        self._settle(Outcome(failure=(kind, message)))

    @abc.abstractmethod
    def _start_grace(self) -> None:
        """The worker exited: bound the wait for end of file on the native pipes."""

    @abc.abstractmethod
    def _maybe_finish(self) -> None:
        """Finish the run if it is settled and its process is fully gone."""

    # -- process plumbing -----------------------------------------------------------------

    def _reset_attempt(self) -> None:
        self._fds: dict[str, int] = {}
        self._readers = RunReaders(self._loop)
        overflow = partial(self._settle_failure, "frame-limit")
        if self._attempts:
            # The run's one writer, for its next attempt: the binding calls hold it.
            self._writer.reopen(overflow)
        else:
            self._writer = ChannelWriter(self._loop, overflow)
        self._frames = FrameReader(_WORKER_FRAMES, self._max_frame_bytes, self._screen)
        self._native = NativeOutput(self._ledger)
        self._status = bytearray()
        self._pid: int | None = None
        self._exited = False
        self._exit_status = 0
        self._exit_cpu = 0.0
        self._worker_status: int | None = None
        self._init_ended_run = False  # the sandbox's init reported the run's end (K or G)
        self._channel_lost = False  # the worker's channel closed before Done (sandbox)
        self._frames_seen = 0
        self._pooled = False
        self._early = 0  # bytes of the program written to the pre-forked worker before the run
        self._left_unread = False  # ``_unread()`` as the host hung up on the worker
        self._refill = False
        self._budget = 0
        # The worker was asked where the program is (by the host, or by the sandbox's init as
        # it reported a budget): only then is its where pipe read (``_where_written``).
        self._where_asked = False

    def _spawn(self) -> None:
        self._attempts += 1
        pool = self._pool if self._attempts == 1 else None
        taken, self._taken = self._taken, None
        sent, self._boot_sent = self._boot_sent, 0
        if taken is None and pool is not None:
            taken = pool.take()
            sent = 0
        slot = taken
        if slot is None:
            try:
                slot = open_slot(self._template)
            except OSError as exc:
                self._exited = True
                self._native.close()
                self._settle_failure("worker-exit", f"worker error: {exc}")
                return
        self._pooled = taken is not None
        self._early = 0 if taken is None else taken.delivered
        self._refill = pool is not None
        self._template_process = slot.template
        self._status += slot.status
        host = slot.fds
        self._fds = host
        self._writer.attach(host["to_worker"])
        # The worker is waiting: write the program before anything else, so that the worker
        # starts it while the host registers its readers (the pipes keep what it answers).
        if sent < len(self._boot):
            self._send(self._boot[sent:] if sent else self._boot)
            self._writer.flush()
        try:
            self._readers.watch(
                {
                    host["from_worker"]: self._on_channel,
                    host["status"]: self._on_status,
                    host["out"]: self._on_out,
                    host["err"]: self._on_err,
                }
            )
        except OSError as exc:  # the host is out of descriptors or epoll watches: a result
            self._exited = True  # nothing of this worker is watched; settling ends it
            self._native.close()
            self._settle_failure("worker-exit", f"host error: cannot watch the worker: {exc}")
            return
        if self._status:
            # What the slot read of the status pipe (at most the pid report, ``_alive``), taken
            # now: the reader above reports only what arrives from here on. Last, since a
            # report may settle the run or start its next attempt.
            self._parse_status()

    def _drop_reader(self, name: str) -> None:
        fd = self._fds.get(name)
        if fd is not None:
            self._readers.drop(fd)

    def _close_all(self) -> None:
        taken, self._taken = self._taken, None
        if taken is not None:  # never started: ended before its first attempt spawned
            taken.end(kill_group=not self._sandboxed)
            self._refill = self._pool is not None
        self._frames.close()
        self._readers.close()
        self._writer.close()
        close_host_fds(self._fds.values())
        self._fds = {}

    def _kill(self) -> None:
        pid = self._pid
        if pid is None:
            return
        with contextlib.suppress(OSError):
            if self._sandboxed:
                os.kill(pid, signal.SIGKILL)  # the namespace init: the namespace goes with it
            else:
                os.killpg(pid, signal.SIGKILL)

    # -- writing ----------------------------------------------------------------------------

    def _send(self, data: bytes | bytearray) -> None:
        self._writer.send(data)

    # -- reading ----------------------------------------------------------------------------

    def _on_channel(self) -> None:
        fd = self._fds.get("from_worker")
        if fd is not None:
            self._read_channel(fd)

    def _read_channel(self, fd: int) -> int:
        """Take the frames of one read from the worker channel. Returns the bytes read: 0 when
        nothing was available or the channel closed (its reader is then dropped)."""
        data = read_available(fd, READ_SIZE)
        if not data:
            if data is not None:
                self._drop_reader("from_worker")
                self._on_channel_eof()
            return 0
        self._frames_seen += 1
        writer = self._writer
        writer.hold()  # the read's replies go out in one write once it is taken
        try:
            self._take_frames(data)
        finally:
            writer.release()
        return len(data)

    def _take_frames(self, data: bytes) -> None:
        frames = self._frames.feed(data)
        on_call = self._on_call
        for frame in frames:
            if self._outcome is not None:
                return
            try:
                # A binding call goes straight to the run's calls: nearly every frame is one.
                if type(frame) is Call:
                    if not on_call(frame):
                        self._frames.dropped += 1
                else:
                    self._on_frame(frame)
            except Exception:  # a hostile frame must never raise in the host
                continue
        oversize = self._frames.oversize
        if oversize is not None and self._outcome is None:
            self._settle_failure("frame-limit", oversize_message(oversize))
        elif self._frames.dropped > IGNORED_FRAMES_LIMIT and self._outcome is None:
            self._settle_failure(
                "frame-limit",
                f"the program sent more than {IGNORED_FRAMES_LIMIT} frames the host could not "
                "use (undecodable, ill-typed, repeated, calling no binding or with no value)",
            )

    def _drain_channel(self) -> None:
        fd = self._fds.get("from_worker")
        if fd is None or fd not in self._readers:
            return
        taken = 0
        while self._outcome is None and taken < DRAIN_LIMIT:
            read = self._read_channel(fd)
            if not read:
                return
            taken += read

    def _on_out(self) -> None:
        self._on_native("out", 0)

    def _on_err(self) -> None:
        self._on_native("err", 1)

    def _on_native(self, name: str, index: int) -> None:
        fd = self._fds.get(name)
        if fd is None:
            return
        data = read_available(fd, READ_SIZE)
        if data is None:
            return
        admitted = self._native.take(index, data)
        if not data:
            self._drop_reader(name)
        if not admitted and self._outcome is None:
            self._settle(LIMIT)
        if not data:
            self._maybe_finish()

    def _on_status(self) -> None:
        fd = self._fds.get("status")
        if fd is None:
            return
        data = read_available(fd, 4096)
        if data:
            self._status += data
        self._parse_status()
        if data == b"" and "status" in self._fds:
            self._on_status_eof()

    def _parse_status(self) -> None:
        status = self._status
        while status and not self._done:
            report = take_report(status)
            if report is None:
                break
            if isinstance(report, PidReport):
                self._on_pid(report.pid)
            elif isinstance(report, WorkerReport):
                self._worker_status = report.wait_status
                self._on_worker_exit(report.wait_status)
            elif isinstance(report, BudgetReport):
                self._budget = report.budget
                if report.budget in (BUDGET_COMPUTE, BUDGET_WALL):
                    self._where_asked = True  # the init asked before it reported
                if self._outcome is None:
                    self._settle(self._exit_outcome())
            elif isinstance(report, HangUpReport):
                if self._channel_lost and self._outcome is None:
                    self._settle_failure("worker-exit", _CHANNEL_CLOSED)
            elif isinstance(report, (KilledReport, GoneReport)):
                self._init_ended_run = True
                self._on_gone()
            elif isinstance(report, ExitReport):
                self._on_exit(report.wait_status, report.cpu)
            elif isinstance(report, ErrorReport):
                if self._pooled and self._may_try_again():
                    # A pre-forked worker whose template died as it started (its cgroups
                    # then went with the template): nothing of the program ran.
                    self._try_again()
                    return
                self._settle_failure("worker-exit", f"worker error: {report.message}")

    def _on_channel_eof(self) -> None:
        """End of file on the worker's channel: no process of the run holds its write end any
        more, so no ``Done`` can come. A worker's exit closes it as it goes, and the exit then
        decides the run as usual; a worker that lives on had it closed by its program, and
        would keep the run (and its slot) until the wall ceiling: that run ends now."""
        if self._outcome is not None or self._exited or self._worker_status is not None:
            return
        attempt = self._attempts
        self._on_status()  # what is reported already comes first (the pid, the init's end)
        if (
            self._outcome is not None
            or self._attempts != attempt
            or self._exited
            or self._worker_status is not None
            or self._init_ended_run
        ):
            return
        if not self._sandboxed:
            pid = self._pid  # reported before the worker ran anything
            if pid is not None and not process_exiting(pid):
                self._settle_failure("worker-exit", _CHANNEL_CLOSED)
            return
        # The host cannot see the worker from here; its init can. Asked for the end, it
        # reports a worker that is exiting on its own as such (``W``), and otherwise ends the
        # run and says so (``H``). A program holding a write end of the channel from the host
        # withholds that hang-up: then the run ends without the init's word.
        self._channel_lost = True
        # The hang-up closes the channel to the worker, and with it the evidence that the
        # worker never read its program (``_unread``), which its template's death, reported
        # after this, may need: the channel's end of file means no worker will read it now.
        self._left_unread = self._pooled and self._unread()
        self._end_sandboxed()
        self._channel_deadline = self._loop.call_later(
            _CHANNEL_CLOSED_SECONDS, self._channel_unheard
        )

    def _channel_unheard(self) -> None:
        """The init has not answered the hang-up ``_on_channel_eof`` asked for: unless it has
        reported the worker's exit or an end of its own meanwhile, the run ends here."""
        self._channel_deadline = None
        self._on_status()
        if (
            self._outcome is None
            and not self._done
            and self._worker_status is None
            and not self._init_ended_run
        ):
            self._settle_failure("worker-exit", _CHANNEL_CLOSED)

    def _on_worker_exit(self, wait_status: int) -> None:
        """The init saw the worker exit: settle now, unless the kill may have been the CPU
        limit's, which only the exit report's CPU figure can tell."""
        if self._outcome is not None:
            return
        if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) in (
            signal.SIGKILL,
            signal.SIGXCPU,
        ):
            return
        self._drain_channel()
        if self._outcome is None:
            self._settle(self._exit_outcome())

    def _on_pid(self, pid: int) -> None:
        self._pid = pid
        if self._outcome is not None:
            self._kill()
        elif self._sampler is None and not self._sandboxed:
            self._sampler = self._loop.call_later(_CPU_SAMPLE_SECONDS, self._sample_cpu)

    def _on_gone(self) -> None:
        """The sandbox's init has sent ``SIGKILL`` to every other process of the run (``K``)
        or reaped them all (``G``): none of them runs any more of the program, so a settled
        run is over (an unsettled one waits for the exit report, whose CPU figure may decide
        it). What they wrote natively is in the pipes already: take it now rather than wait
        for end of file, which only comes once the kernel has torn their memory down.

        The init ends the run on the worker's notice, sent once ``Done`` is in the channel, so
        ``K`` may be read before that frame: the frames are taken first."""
        if self._outcome is None:
            self._drain_channel()
        if self._outcome is None:
            return
        self._exited = True
        self._drop_reader("status")
        self._drain_native()
        self._start_grace()
        self._maybe_finish()

    def _drain_native(self) -> None:
        """Take what the native pipes hold now (bounded) and stop reading them."""
        for name, index in (("out", 0), ("err", 1)):
            self._native.drain(index, self._fds.get(name))
            self._drop_reader(name)

    def _end_sandboxed(self) -> None:
        """Close the channel to the worker: the namespace init, which watches it, then kills
        every process of the run and reports ``K``, reaps them and reports ``G`` (then ``X``
        follows)."""
        self._writer.close()
        fd = self._fds.pop("to_worker", None)
        if fd is not None:
            close_host_fds((fd,))

    def _on_exit(self, wait_status: int, cpu: float) -> None:
        self._exited = True
        self._exit_status = wait_status
        self._exit_cpu = cpu
        if self._outcome is None:
            self._drain_channel()
        if self._outcome is None:
            self._settle(self._exit_outcome())
        elif not self._sandboxed:  # the init's exit took its namespace with it
            self._kill()  # grandchildren left in the group
        self._start_grace()
        self._maybe_finish()

    def _silent(self) -> bool:
        """Whether the worker has sent nothing at all: no frame, no native output."""
        poller = select.poll()
        for name in ("from_worker", "out", "err"):
            fd = self._fds.get(name)
            if fd is None:
                return False
            poller.register(fd, select.POLLIN)
        if any(events & select.POLLIN for _fd, events in poller.poll(0)):
            return False
        return self._frames_seen == 0 and not self._ledger.has_logs

    def _on_status_eof(self) -> None:
        self._drop_reader("status")
        if self._exited:
            return
        # Ended first, whatever comes next: a worker under process isolation outlives its
        # template, and would read and run the program its channel holds after the host has
        # looked; killed, whatever it has not read by now it never runs.
        self._kill()
        if self._may_try_again():
            # The template died before forking, or it died with the pre-forked worker this run
            # took before the worker read its program: nothing of the program ran, so try once
            # more with a fresh template.
            self._try_again()
            return
        self._exited = True
        if self._outcome is None:
            self._drain_channel()
        if self._outcome is None:
            self._settle_failure("worker-exit", "worker error: the template process exited")
        self._start_grace()
        self._maybe_finish()

    def _may_try_again(self) -> bool:
        """Whether this is the run's first attempt, unsettled, and no worker of it ever ran
        anything anyone saw: none was forked, or the pre-forked one has sent nothing (no
        frame, no native output)."""
        return (
            self._outcome is None
            and self._attempts < 2
            and (self._pid is None or (self._pooled and self._silent() and self._unread()))
        )

    def _unread(self) -> bool:
        """Whether the pooled worker never read what the host wrote to its channel: a program
        may run without a word to the host (no frame, no output), so a worker that read its
        boot (or its go) while its template lived may have run some of it, and trying again
        would run it twice, even if its template had died before it got it (a sandboxed one
        dies with its template, but may run some of the program first; one under process
        isolation lives on)."""
        if self._early + self._writer.written == 0:
            return True  # its channel took nothing: the worker was gone before its program
        fd = self._fds.get("to_worker")
        if fd is None:
            return self._left_unread  # closed by the hang-up (``_on_channel_eof``)
        try:
            queued = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return False
        unread: int = struct.unpack("i", queued)[0]
        return unread > 0  # it stopped before the end of what it got

    def _try_again(self) -> None:
        """Drop this attempt and start the run's last one on a freshly spawned worker."""
        deadline, self._channel_deadline = self._channel_deadline, None
        if deadline is not None:
            # This attempt's wait for the init's answer to the hang-up: left running, it
            # ended the next attempt a quarter of a second in, on a channel that is open.
            deadline.cancel()
        self._close_all()
        self._reset_attempt()
        self._spawn()

    def _exit_outcome(self) -> Outcome:
        if self._past_ceiling:  # ended past the wall ceiling
            return self._limits.wall_timeout()
        if (
            self._sandboxed
            and self._worker_status is None
            and not self._budget
            and not self._init_ended_run
        ):
            # The exit report is the init's: an init that ends a run reports it (``K``, ``G``)
            # before it exits, and the host kills it only once the run has settled. This one
            # ended before it had seen the worker end: it failed or was killed from outside.
            return self._limits.init_failure(self._exit_status)
        status = self._exit_status if self._worker_status is None else self._worker_status
        return self._limits.exit_outcome(self._budget, status, self._exit_cpu)

    def _where_pipe(self) -> list[bytes]:
        """What the where pipe holds now (``_WHERE_READ_LIMIT`` at most), read by read."""
        fd = self._fds.get("where")
        reads: list[bytes] = []
        taken = 0
        while fd is not None and taken < _WHERE_READ_LIMIT:
            data = read_available(fd, READ_SIZE)
            if not data:
                break
            reads.append(data)
            taken += len(data)
        return reads

    def _where_written(self) -> str | None:
        """Where the program was by the stacks the worker wrote to its where pipe when asked
        (``_ask_where``, or the sandbox's init as a budget ran out); ``None`` when it was not
        asked (what the pipe holds then is the program's, if anything: a run that the kernel's
        CPU limit ended, say). Read only then, never while the run goes on."""
        if not self._where_asked:
            return None
        return where_of(b"".join(self._where_pipe()))

    def _ask_where(self) -> bool:
        """Have the worker write where the program is (``WHERE_SIGNAL``), as a budget runs
        out; whether it was asked. Under the sandbox the host knows the namespace's init, and
        finds the worker as the init's child. What the where pipe held before is dropped
        first: only what the worker writes from now on names the line."""
        pid = self._pid
        if pid is None or self._exited:
            return False
        self._where_pipe()
        where = self._fds.get("where")
        if where is not None:
            widen_where(where)
        if not self._sandboxed:
            try:
                os.kill(pid, WHERE_SIGNAL)
            except OSError:
                return False
            self._where_asked = True
            return True
        worker = namespace_worker(pid)
        if worker is None:
            return False
        try:
            signal.pidfd_send_signal(worker, WHERE_SIGNAL)
        except OSError:
            return False
        finally:
            os.close(worker)
        self._where_asked = True
        return True

    def _compute_spent(self) -> None:
        self._sampler = None
        self._settle(self._limits.compute_timeout())

    def _sample_cpu(self) -> None:
        self._sampler = None
        pid = self._pid
        if self._outcome is not None or pid is None or self._exited:
            return
        exhausted = self._limits.cpu_exhausted(pid)
        if exhausted is None:
            return  # no /proc (the RLIMIT_CPU backstop remains) or the process is gone
        if exhausted:
            # Where the program is, asked first (the sandbox's init does the same): the run
            # ends once the worker has had time to say.
            self._ask_where()
            self._sampler = self._loop.call_later(WHERE_SECONDS, self._compute_spent)
        else:
            self._sampler = self._loop.call_later(_CPU_SAMPLE_SECONDS, self._sample_cpu)
