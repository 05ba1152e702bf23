"""``CodeRun``: one run's host side, on the caller's event loop.

The host writes ``Boot``, reads frames and both native pipes with ``loop.add_reader``, answers
each ``Call`` by running the binding coroutine in its own task (several may be in flight; replies
written in batches), follows the status pipe's reports (see ``_template``), enforces the wall
ceiling with a timer and follows the request's abort signal. Under the ``"process"`` isolation
it samples the worker's CPU time from ``/proc/<pid>/stat`` every 25 ms; under ``"sandbox"`` the
run's namespace init charges the whole process tree and reports a budget it ends the run for.
The first of ``Done``, ``OutputLimit``, a log that overflows, a budget, an abort, a frame over
``max_frame_bytes`` or the worker's death settles the run; the host then kills the run (the
process group, or the namespace init, which takes the whole namespace with it), waits for the
exit report and for end of file on the native pipes (bounded by a short grace, so an escaped
grandchild holding a pipe cannot hang settlement), closes everything and materializes the
result through the output ledger. The worker is a hostile peer: nothing read from it raises in
the host.
"""

import asyncio
import codecs
import collections
import concurrent.futures
import contextlib
import inspect
import math
import os
import select
import signal
import struct
import subprocess
from collections.abc import Callable
from typing import Any, Final

from ..actors import NEVER_ABORTED, FrozenDict, FrozenList, format_ms
from ._frames import (
    PREFIX_BYTES,
    Call,
    Done,
    FrameReader,
    Log,
    OutputLimit,
    Reply,
    encode_frame,
    worker_frame_decoder,
)
from ._ledger import OutputLedger
from ._outcome import LIMIT, Outcome, materialize, quote, safe_text
from ._pool import WorkerPool, open_slot
from ._seam import BindingFunction, CodeRunResult, CodeRuntimeConfig
from ._template_host import TemplateHandle
from ._tokens import TokenError, detokenize, tokenize

__all__ = ["CodeRun"]

_CPU_SAMPLE_SECONDS: Final = 0.025
_EXIT_GRACE_SECONDS: Final = 0.5
_EXIT_REPORT_SECONDS: Final = 3.0
"""How long after the kill a run waits for the template's exit report before it judges the
template unresponsive (a program can stop or freeze its parent) and replaces it."""
_READ_SIZE: Final = 1 << 18
_DRAIN_LIMIT: Final = 1 << 24
_UNREAD_REPLY_BYTES: Final = 64 * 2**20
"""Binding replies a program may leave unread, beyond the one being written, before its run
fails: a program that stops reading its channel must not make the host buffer without end."""
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_HOST_DICTS: Final = (dict, FrozenDict)
_HOST_LISTS: Final = (list, FrozenList)
_DONE_KINDS: Final = frozenset({"exception", "invalid-output", "output-limit"})
_NOT_LOSSLESS_ARGS: Final = "binding arguments must be lossless JSON"
_NOT_LOSSLESS_RESOLUTION: Final = "binding resolution must be lossless JSON"
_NOT_LOSSLESS_COMPLETION: Final = "program completion must be lossless JSON"
_EXIT_REPORT: Final = struct.Struct(">id")
_PID_REPORT: Final = struct.Struct(">i")
_LENGTH: Final = struct.Struct(">H")
_BUDGET_MESSAGES: Final = {
    2: "memory budget exhausted ({}MB across the run's processes)",
    3: "process budget exhausted (more than {} processes)",
}
Track = Callable[["asyncio.Task[None]"], None]
"""Keeps a binding task referenced until it is done."""


def _read_available(fd: int, size: int) -> bytes | None:
    """One read from a non-blocking pipe: ``None`` when nothing is available yet, ``b""`` at
    end of file (a failed read counts as end of file)."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class CodeRun:
    """One run's host side; every method runs on ``loop`` unless it says otherwise."""

    def __init__(
        self,
        *,
        config: CodeRuntimeConfig,
        template: TemplateHandle,
        pool: WorkerPool | None,
        track: Track,
        loop: asyncio.AbstractEventLoop,
        ledger: OutputLedger,
        namespaces: dict[str, dict[str, BindingFunction]],
        boot: bytes,
    ) -> None:
        self._template = template
        self._pool = pool
        self._track = track
        self._sandboxed = config.isolation == "sandbox"
        self._max_memory_mb = config.max_memory_mb
        self._max_processes = config.sandbox.max_processes
        self._loop = loop
        self._ledger = ledger
        self._namespaces = namespaces
        self._boot = boot
        self._compute_ms = config.compute_ms
        self._max_wall_ms = config.max_wall_ms
        self._max_frame_bytes = config.max_frame_bytes
        self._cpu_limit_seconds = math.ceil(config.compute_ms / 1000) + 1
        self.future: asyncio.Future[CodeRunResult] = loop.create_future()
        self.finished = concurrent.futures.Future[None]()
        self._outcome: Outcome | None = None
        self._done = False
        self._attempts = 0
        self._remove_signal: Any = None
        self._wall: asyncio.TimerHandle | None = None
        self._sampler: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._grace_over = False
        self._report_deadline: asyncio.TimerHandle | None = None
        self._template_process: subprocess.Popen[bytes] | None = None
        self._answered: set[int] = set()
        self._reset_attempt()

    # -- process plumbing -----------------------------------------------------------------

    def _reset_attempt(self) -> None:
        self._fds: dict[str, int] = {}
        self._readers: set[int] = set()
        self._writer_on = False
        self._flush_scheduled = False
        self._wbuf: collections.deque[memoryview] = collections.deque()
        self._unsent = 0
        self._write_broken = False
        self._frames = FrameReader(worker_frame_decoder(), self._max_frame_bytes)
        self._decoders = [
            codecs.getincrementaldecoder("utf-8")("replace"),
            codecs.getincrementaldecoder("utf-8")("replace"),
        ]
        self._status = bytearray()
        self._pid: int | None = None
        self._exited = False
        self._exit_status = 0
        self._exit_cpu = 0.0
        self._worker_status: int | None = None
        self._frames_seen = 0
        self._pooled = False
        self._refill = False
        self._budget = 0
        self._out_eof = False
        self._err_eof = False

    def start(self, signal_: Any) -> None:
        """Spawn the worker and start watching it."""
        self._spawn()
        if self._done or self._outcome is not None:
            return
        self._wall = self._loop.call_later(
            self._max_wall_ms / 1000,
            self._settle_failure,
            "timeout",
            f"wall-clock ceiling reached ({format_ms(self._max_wall_ms)}ms)",
        )
        if signal_ is not NEVER_ABORTED:
            self._remove_signal = signal_.add_callback(self._on_abort_any_thread)

    def _spawn(self) -> None:
        self._attempts += 1
        pool = self._pool if self._attempts == 1 else None
        slot = taken = pool.take() if pool is not None else None
        if slot is None:
            try:
                slot = open_slot(self._template)
            except OSError as exc:
                self._exited = self._out_eof = self._err_eof = True
                self._settle_failure("worker-exit", f"worker error: {exc}")
                return
        self._pooled = taken is not None
        self._refill = pool is not None
        self._template_process = slot.template
        self._status += slot.status
        host = slot.fds
        self._fds = host
        # The worker is waiting: write the program before anything else, so that the worker
        # starts it while the host registers its readers (the pipes keep what it answers).
        self._send(self._boot)
        self._flush()
        loop = self._loop
        for name, callback in (
            ("from_worker", self._on_channel),
            ("status", self._on_status),
            ("out", self._on_out),
            ("err", self._on_err),
        ):
            fd = host[name]
            loop.add_reader(fd, callback)
            self._readers.add(fd)
        if self._status:
            self._loop.call_soon(self._on_status)

    def _drop_reader(self, name: str) -> None:
        fd = self._fds.get(name)
        if fd is not None and fd in self._readers:
            self._readers.discard(fd)
            self._loop.remove_reader(fd)

    def _close_all(self) -> None:
        self._frames.close()
        loop = self._loop
        for fd in self._readers:
            with contextlib.suppress(Exception):
                loop.remove_reader(fd)
        self._readers.clear()
        if self._writer_on:
            with contextlib.suppress(Exception):
                loop.remove_writer(self._fds["to_worker"])
            self._writer_on = False
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}
        self._wbuf.clear()
        self._unsent = 0

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
        if self._write_broken or "to_worker" not in self._fds:
            return
        self._wbuf.append(memoryview(data))
        self._unsent += len(data)
        if self._unsent > _UNREAD_REPLY_BYTES and len(self._wbuf) > 1:
            self._settle_failure(
                "frame-limit",
                f"the program left more than {_UNREAD_REPLY_BYTES} bytes of binding replies unread",
            )
            return
        if not self._writer_on and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        fd = self._fds.get("to_worker")
        if fd is None:
            return
        buffer = self._wbuf
        while buffer:
            head = buffer[0]
            try:
                written = os.write(fd, head)
            except BlockingIOError:
                break
            except OSError:
                self._write_broken = True
                buffer.clear()
                self._unsent = 0
                break
            self._unsent -= written
            if written == len(head):
                buffer.popleft()
            else:
                buffer[0] = head[written:]
        if buffer and not self._writer_on:
            self._writer_on = True
            self._loop.add_writer(fd, self._flush)
        elif not buffer and self._writer_on:
            self._writer_on = False
            self._loop.remove_writer(fd)

    def _reply(self, frame: Reply) -> None:
        if self._outcome is not None:
            return
        try:
            data = encode_frame(frame)
        except Exception:
            data = encode_frame(Reply(frame.id, False, message=_NOT_LOSSLESS_RESOLUTION))
        size = len(data) - PREFIX_BYTES
        if size > self._max_frame_bytes:
            self._settle_failure(
                "frame-limit",
                f"reply frame of {size} bytes exceeds max_frame_bytes ({self._max_frame_bytes})",
            )
            return
        self._send(data)

    def _reply_failure(self, call_id: int, message: str) -> None:
        self._reply(Reply(call_id, False, message=message))

    # -- reading ----------------------------------------------------------------------------

    def _on_channel(self) -> None:
        fd = self._fds.get("from_worker")
        if fd is not None:
            self._read_channel(fd)

    def _read_channel(self, fd: int) -> int:
        """Take the frames of one read from the worker channel. Returns the bytes read: 0 when
        nothing was available or the channel closed (its reader is then dropped)."""
        data = _read_available(fd, _READ_SIZE)
        if not data:
            if data is not None:
                self._drop_reader("from_worker")
            return 0
        self._frames_seen += 1
        self._take_frames(data)
        return len(data)

    def _take_frames(self, data: bytes) -> None:
        frames = self._frames.feed(data)
        for frame in frames:
            if self._outcome is not None:
                return
            try:
                self._on_frame(frame)
            except Exception:  # a hostile frame must never raise in the host
                continue
        oversize = self._frames.oversize
        if oversize is not None and self._outcome is None:
            self._settle_failure("frame-limit", f"worker {oversize}")

    def _drain_channel(self) -> None:
        fd = self._fds.get("from_worker")
        if fd is None or fd not in self._readers:
            return
        taken = 0
        while self._outcome is None and taken < _DRAIN_LIMIT:
            read = self._read_channel(fd)
            if not read:
                return
            taken += read

    def _on_frame(self, frame: Any) -> None:
        kind = type(frame)
        if kind is Call:
            self._on_call(frame)
        elif kind is Log:
            if not self._ledger.admit(frame.text):
                self._settle(LIMIT)
        elif kind is Done:
            self._on_done(frame)
        elif kind is OutputLimit:
            self._settle(LIMIT)

    def _on_call(self, frame: Call) -> None:
        call_id = frame.id
        if call_id in self._answered:
            return
        self._answered.add(call_id)
        functions = self._namespaces.get(frame.global_name)
        function = functions.get(frame.name) if functions is not None else None
        if function is None:
            self._reply_failure(
                call_id, "unknown binding " + quote(f"{frame.global_name}.{frame.name}")
            )
            return
        try:
            value = detokenize(frame.args, FrozenList, FrozenDict)
        except TokenError:
            self._reply_failure(call_id, _NOT_LOSSLESS_ARGS)
            return
        self._track(self._loop.create_task(self._invoke(call_id, function, value)))

    async def _invoke(self, call_id: int, function: BindingFunction, value: Any) -> None:
        try:
            result = function(value)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            self._reply_failure(call_id, "binding call cancelled")
            raise
        except Exception as exc:
            self._reply_failure(call_id, safe_text(exc, "<unprintable thrown value>"))
            return
        if self._outcome is not None:
            return
        tokens = tokenize(result, _HOST_DICTS, _HOST_LISTS)
        if tokens is None:
            self._reply_failure(call_id, _NOT_LOSSLESS_RESOLUTION)
        else:
            self._reply(Reply(call_id, True, tokens))

    def _on_done(self, frame: Done) -> None:
        error = frame.error
        if error is not None:
            if error.kind not in _DONE_KINDS:
                return
            if error.kind == "output-limit":
                self._settle(LIMIT)
            else:
                self._settle(Outcome(failure=(error.kind, error.message)))
        elif frame.value is not None:
            try:
                value = detokenize(frame.value, FrozenList, FrozenDict)
            except TokenError:
                self._settle(Outcome(failure=("invalid-output", _NOT_LOSSLESS_COMPLETION)))
                return
            self._settle(Outcome(tokens=frame.value, value=value))
        else:
            self._settle(Outcome())

    def _on_out(self) -> None:
        self._on_native("out", 0)

    def _on_err(self) -> None:
        self._on_native("err", 1)

    def _on_native(self, name: str, index: int) -> None:
        fd = self._fds.get(name)
        if fd is None:
            return
        data = _read_available(fd, _READ_SIZE)
        if data is None:
            return
        decoder = self._decoders[index]
        if data:
            text = decoder.decode(data)
        else:
            text = decoder.decode(b"", True)
            self._drop_reader(name)
            if index == 0:
                self._out_eof = True
            else:
                self._err_eof = True
        if text and not self._ledger.admit(text) and self._outcome is None:
            self._settle(LIMIT)
        if not data:
            self._maybe_finish()

    def _drain_native(self) -> None:
        """Take what the native pipes hold now (bounded) and stop reading them."""
        for name, index in (("out", 0), ("err", 1)):
            fd = self._fds.get(name)
            taken = 0
            while fd is not None and taken < _DRAIN_LIMIT:
                data = _read_available(fd, _READ_SIZE)
                if not data:
                    break
                taken += len(data)
                text = self._decoders[index].decode(data)
                if text and not self._ledger.admit(text):
                    break
            tail = self._decoders[index].decode(b"", True)
            if tail:
                self._ledger.admit(tail)
            self._drop_reader(name)
        self._out_eof = self._err_eof = True

    def _on_status(self) -> None:
        fd = self._fds.get("status")
        if fd is None:
            return
        data = _read_available(fd, 4096)
        if data:
            self._status += data
        self._parse_status()
        if data == b"" and "status" in self._fds:
            self._on_status_eof()

    def _parse_status(self) -> None:
        status = self._status
        while status and not self._done:
            tag = status[0]
            if tag == 0x50 and len(status) >= 1 + _PID_REPORT.size:  # "P"
                (pid,) = _PID_REPORT.unpack_from(status, 1)
                del status[: 1 + _PID_REPORT.size]
                self._on_pid(pid)
            elif tag == 0x57 and len(status) >= 1 + _PID_REPORT.size:  # "W": worker status
                (self._worker_status,) = _PID_REPORT.unpack_from(status, 1)
                del status[: 1 + _PID_REPORT.size]
                self._on_worker_exit(self._worker_status)
            elif tag == 0x42 and len(status) >= 2:  # "B": the init ended the run for a budget
                self._budget = status[1] or 1
                del status[:2]
                if self._outcome is None:
                    self._settle(self._exit_outcome())
            elif tag == 0x58 and len(status) >= 1 + _EXIT_REPORT.size:  # "X"
                wait_status, cpu = _EXIT_REPORT.unpack_from(status, 1)
                del status[: 1 + _EXIT_REPORT.size]
                self._on_exit(wait_status, cpu)
            elif tag == 0x45 and len(status) >= 1 + _LENGTH.size:  # "E" + length + message
                (length,) = _LENGTH.unpack_from(status, 1)
                end = 1 + _LENGTH.size + length
                if len(status) < end:
                    break
                message = bytes(status[1 + _LENGTH.size : end]).decode("utf-8", "replace")
                del status[:end]
                self._settle_failure("worker-exit", f"worker error: {message}")
            elif tag not in b"PWBXE":
                status.clear()
            else:
                break

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

    def _on_exit(self, wait_status: int, cpu: float) -> None:
        self._exited = True
        self._exit_status = wait_status
        self._exit_cpu = cpu
        if self._outcome is None:
            self._drain_channel()
        if self._outcome is None:
            self._settle(self._exit_outcome())
        else:
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
        return self._frames_seen == 0 and not self._ledger.logs

    def _on_status_eof(self) -> None:
        self._drop_reader("status")
        if self._exited:
            return
        if (
            self._outcome is None
            and self._attempts < 2
            and (self._pid is None or (self._pooled and self._silent()))
        ):
            # The template died before forking, or it died with the pre-forked worker this run
            # took (its processes go with it) before the worker said anything: nothing of the
            # program ran that anyone could see, so try once more with a fresh template.
            self._close_all()
            self._reset_attempt()
            self._spawn()
            return
        self._exited = True
        if self._outcome is None:
            self._drain_channel()
        if self._outcome is None:
            self._settle_failure("worker-exit", "worker error: the template process exited")
        self._kill()
        self._start_grace()
        self._maybe_finish()

    def _exit_outcome(self) -> Outcome:
        if self._budget:
            if self._budget in _BUDGET_MESSAGES:
                limit = self._max_memory_mb if self._budget == 2 else self._max_processes
                message = _BUDGET_MESSAGES[self._budget].format(format_ms(limit))
                return Outcome(failure=("worker-exit", message))
            return self._compute_timeout()
        status = self._exit_status if self._worker_status is None else self._worker_status
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            if number == signal.SIGXCPU or (
                number == signal.SIGKILL and self._exit_cpu >= self._cpu_limit_seconds
            ):
                return self._compute_timeout()
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = str(number)
            return Outcome(
                failure=("worker-exit", f"worker exited with signal {name} before completing")
            )
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return Outcome(failure=("worker-exit", f"worker exited with code {code} before completing"))

    def _compute_timeout(self) -> Outcome:
        return Outcome(
            failure=("timeout", f"compute budget exhausted ({format_ms(self._compute_ms)}ms busy)")
        )

    def _sample_cpu(self) -> None:
        self._sampler = None
        pid = self._pid
        if self._outcome is not None or pid is None or self._exited:
            return
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
            fields = data[data.rindex(b")") + 2 :].split()
            ticks = int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            return  # no /proc (the RLIMIT_CPU backstop remains) or the process is gone
        if ticks * 1000 >= self._compute_ms * _CLOCK_TICKS:
            self._settle(self._compute_timeout())
        else:
            self._sampler = self._loop.call_later(_CPU_SAMPLE_SECONDS, self._sample_cpu)

    # -- settlement -------------------------------------------------------------------------

    def _on_abort_any_thread(self, reason: Any) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the run is over anyway
            self._loop.call_soon_threadsafe(
                self._settle_failure, "abort", safe_text(reason, "aborted")
            )

    def dispose_any_thread(self) -> None:
        """Settle as ``abort`` / ``runtime disposed`` from any thread."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._settle_failure("abort", "runtime disposed")
            return
        if loop.is_closed() or not loop.is_running():
            self.abandon()
            return
        try:
            loop.call_soon_threadsafe(self._settle_failure, "abort", "runtime disposed")
        except RuntimeError:
            self.abandon()

    def _settle_failure(self, kind: str, message: str) -> None:
        self._settle(Outcome(failure=(kind, message)))

    def _settle(self, outcome: Outcome) -> None:
        if self._outcome is not None or self._done:
            return
        self._outcome = outcome
        for handle in (self._wall, self._sampler):
            if handle is not None:
                handle.cancel()
        self._wall = self._sampler = None
        if self._remove_signal is not None:
            self._remove_signal()
            self._remove_signal = None
        self._drop_reader("from_worker")
        self._kill()
        if self._sandboxed and self._pid is not None and not self._exited:
            # SIGKILL to the namespace init ends every process of the run (the kernel kills the
            # namespace), and the program cannot stop its init: waiting for the exit report or
            # for the dying processes to close the native pipes adds only latency. What the
            # program wrote natively before it settled is already in the pipes: take it now.
            self._exited = True
            self._drop_reader("status")
            self._drain_native()
        if self._exited:
            self._start_grace()
        else:
            self._report_deadline = self._loop.call_later(
                _EXIT_REPORT_SECONDS, self._template_silent
            )
        self._maybe_finish()

    def _template_silent(self) -> None:
        """The worker was killed but its exit was never reported: the template is stopped or
        frozen (the program can signal its parent). Replace it so that this run settles and
        later runs get a working template."""
        self._report_deadline = None
        if self._done or self._exited:
            return
        process = self._template_process
        if process is not None:
            with contextlib.suppress(OSError):
                self._template.replace_unresponsive(process)
        self._exited = True
        self._drop_reader("status")
        self._start_grace()
        self._maybe_finish()

    def _start_grace(self) -> None:
        if self._grace is None and not self._grace_over:
            self._grace = self._loop.call_later(_EXIT_GRACE_SECONDS, self._grace_expired)

    def _grace_expired(self) -> None:
        self._grace = None
        self._grace_over = True
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._done or self._outcome is None or not self._exited:
            return
        if not (self._out_eof and self._err_eof) and not self._grace_over:
            return
        self._finish()

    def _finish(self) -> None:
        self._done = True
        for handle in (self._grace, self._report_deadline):
            if handle is not None:
                handle.cancel()
        self._grace = self._report_deadline = None
        self._close_all()
        assert self._outcome is not None
        result = materialize(self._ledger, self._outcome)
        if not self.future.done():
            self.future.set_result(result)
        self._schedule_refill()
        self.finished.set_result(None)

    def _schedule_refill(self) -> None:
        """Replace the pre-forked worker this run used once the run is over, on the pool's own
        thread, so that neither the spawn request nor the fork it starts holds up this loop."""
        if self._refill and self._pool is not None:
            self._refill = False
            self._pool.fill_soon()

    def abandon(self) -> None:
        """Tear down at once without waiting (the awaiting task was cancelled, or its loop died).

        The template still reaps the killed worker.
        """
        if self._done:
            return
        self._done = True
        if self._outcome is None:
            self._outcome = Outcome(failure=("abort", "cancelled"))
        for handle in (self._wall, self._sampler, self._grace, self._report_deadline):
            if handle is not None:
                handle.cancel()
        if self._remove_signal is not None:
            self._remove_signal()
            self._remove_signal = None
        self._kill()
        self._close_all()
        with contextlib.suppress(RuntimeError):  # a closed loop: the next run refills
            self._schedule_refill()
        self.finished.set_result(None)
