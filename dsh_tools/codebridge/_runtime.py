"""``SubprocessCodeRuntime``: every run in a fresh, contained child process.

Design. Spawning ``python -I`` per run costs 20 ms or more, over the
whole budget of an empty run, so each runtime starts one *template process* lazily (``python -I
-X utf8 _template.py`` with an empty environment and its own session). The template imports the
worker modules once and never runs model code; for each run it forks one child, which calls
``setsid()``, reports its pid, keeps only its five descriptors (``/dev/null`` as stdin, the native
stdout/stderr pipes, the two channel pipes), clears the environment, applies ``RLIMIT_AS`` /
``RLIMIT_CPU`` and runs the program. Every run therefore starts from the same clean interpreter
state in its own process, process group and session. The template reaps the child (it is also
a child subreaper, so orphaned grandchildren are reaped too) and reports the wait status and CPU
time to the host on a per-run status pipe. If the template dies it is restarted for the next
run.

Trade-offs of the template against a fresh interpreter per run:

- Runs share the template's start-up state: the same modules already imported (but never used
  by model code), the same ``PYTHONHASHSEED``-style hash seed, the same executable. ``random``
  reseeds after fork. Nothing a program does reaches the template or a later run.
- One extra long-lived process per runtime (started on the first run, ~100 ms once; its pages are
  shared copy-on-write with the children).
- The host kills with ``os.killpg(pid, SIGKILL)``. The template reaps the worker, so a group whose
  members have all exited could in principle see its number reused before the host learns of
  the exit; pids are allocated sequentially, so this needs a full wrap of the pid space within
  microseconds and is accepted.

Per run, on the caller's event loop and with no thread hop: the host writes ``Boot``, sends the
spawn request, reads frames and both native pipes with ``loop.add_reader``, answers each ``Call``
by running the binding coroutine in its own task (several may be in flight; replies written in
batches), samples the worker's CPU time from ``/proc/<pid>/stat`` every 25 ms, enforces the wall
ceiling with a timer and follows the request's abort signal. The first of ``Done``,
``OutputLimit``, a log that overflows, a budget, an abort, a frame over ``max_frame_bytes`` or
the worker's death settles the run; the host then SIGKILLs the process group, waits for the exit
report and for end of file on the native pipes (bounded by a short grace, so an escaped
grandchild holding a pipe cannot hang settlement), closes everything and materializes the
result through the output ledger. The worker is a hostile peer: nothing read from it raises in
the host.

Limits: POSIX only (process groups, rlimits, ``fork``); CPU sampling needs Linux ``/proc``
(elsewhere only the ``RLIMIT_CPU`` backstop applies). A process that creates its own session
escapes the group kill. This is containment, not a security sandbox: a program can do anything
the host user can.
"""

from __future__ import annotations

import array
import asyncio
import codecs
import collections
import concurrent.futures
import contextlib
import inspect
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Final

import msgspec
from msgspec import UNSET

from ..actors import NEVER_ABORTED, FrozenDict, FrozenList, format_ms
from ._frames import (
    PREFIX_BYTES,
    Boot,
    Call,
    Done,
    ErrorClassWire,
    FrameReader,
    Log,
    NamespaceWire,
    OutputLimit,
    Reply,
    encode_frame,
    worker_frame_decoder,
)
from ._ledger import OutputLedger
from ._program import ProgramError, compile_program
from ._seam import (
    BindingFunction,
    CodeRunFailure,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    validate_request,
)
from ._tokens import TokenError, detokenize, tokenize

__all__ = ["SubprocessCodeRuntime"]

_TEMPLATE_PATH: Final = str(Path(__file__).with_name("_template.py"))
_CPU_SAMPLE_SECONDS: Final = 0.025
_EXIT_GRACE_SECONDS: Final = 0.5
_EXIT_REPORT_SECONDS: Final = 3.0
"""How long after the kill a run waits for the template's exit report before it judges the
template unresponsive (a program can stop or freeze its parent) and replaces it."""
_READ_SIZE: Final = 1 << 18
_DRAIN_LIMIT: Final = 1 << 24
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_HOST_DICTS: Final = (dict, FrozenDict)
_HOST_LISTS: Final = (list, FrozenList)
_DONE_KINDS: Final = frozenset({"exception", "invalid-output", "output-limit"})
_NOT_LOSSLESS_ARGS: Final = "binding arguments must be lossless JSON"
_NOT_LOSSLESS_RESOLUTION: Final = "binding resolution must be lossless JSON"
_NOT_LOSSLESS_COMPLETION: Final = "program completion must be lossless JSON"
_EXIT_REPORT: Final = struct.Struct(">id")
_PID_REPORT: Final = struct.Struct(">i")


def _text(value: Any, fallback: str) -> str:
    try:
        text = str(value)
    except Exception:
        return fallback
    if not text.isascii():
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _read_available(fd: int, size: int) -> bytes | None:
    """One read from a non-blocking pipe: ``None`` when nothing is available yet, ``b""`` at
    end of file (a failed read counts as end of file)."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _quote(text: str) -> str:
    return msgspec.json.encode(_text(text, "")).decode("utf-8")


class _Outcome:
    """How a run settled: a failure, the output limit, or a completion (tokens absent = none)."""

    __slots__ = ("failure", "limit", "tokens", "value")

    def __init__(
        self,
        *,
        failure: tuple[str, str] | None = None,
        limit: bool = False,
        tokens: list[Any] | None = None,
        value: Any = UNSET,
    ) -> None:
        self.failure = failure
        self.limit = limit
        self.tokens = tokens
        self.value = value


_LIMIT: Final = _Outcome(limit=True)


def _materialize(ledger: OutputLedger, outcome: _Outcome) -> CodeRunResult:
    if not outcome.limit and not ledger.overflowed:
        if outcome.failure is not None:
            kind, message = outcome.failure
            if ledger.fits_message(message):
                return CodeRunResult(FrozenList(ledger.logs), error=CodeRunFailure(kind, message))
        elif outcome.tokens is None:
            return CodeRunResult(FrozenList(ledger.logs))
        elif ledger.fits_value(outcome.tokens):
            return CodeRunResult(FrozenList(ledger.logs), value=outcome.value)
    logs, message = ledger.limited()
    return CodeRunResult(FrozenList(logs), error=CodeRunFailure("output-limit", message))


class _Template:
    """The host's handle on the template process; thread-safe, restarted when it has died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._closed = False

    def spawn(self, fds: list[int]) -> subprocess.Popen[bytes]:
        """Ask the template to fork a worker with ``fds``; return the template process that
        took the request; raise ``OSError`` when it cannot."""
        payload = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        with self._lock:
            if self._closed:
                raise OSError("the code runtime was disposed")
            for attempt in range(2):
                process = self._process
                if process is None or process.poll() is not None or self._socket is None:
                    self._discard()
                    self._start()
                assert self._socket is not None and self._process is not None
                try:
                    self._socket.sendmsg([b"S"], payload, socket.MSG_NOSIGNAL)
                    return self._process
                except OSError:
                    self._discard()
                    if attempt:
                        raise
            raise AssertionError("unreachable: the second attempt returns or raises")

    def _start(self) -> None:
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-X", "utf8", _TEMPLATE_PATH, str(template_end.fileno())],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(template_end.fileno(),),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            host_end.close()
            raise
        finally:
            template_end.close()
        self._socket = host_end

    def _discard(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        process = self._process
        self._process = None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def replace_unresponsive(self, process: subprocess.Popen[bytes]) -> None:
        """Kill ``process``, a template that stopped reporting (the next spawn starts a fresh
        one). Its workers' runs see their status pipes close and settle."""
        with self._lock:
            if self._process is process:
                self._discard()
                return
        if process.poll() is None:
            process.kill()
            process.wait()

    def close(self) -> subprocess.Popen[bytes] | None:
        """Stop accepting runs; closing the socket makes the template exit. Returns it."""
        with self._lock:
            self._closed = True
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            process = self._process
            self._process = None
            return process

    @property
    def pid(self) -> int | None:
        """The template's pid while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None


async def _wait_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        try:
            await asyncio.wait_for(loop.run_in_executor(None, process.wait), timeout)
        except TimeoutError:
            process.kill()
            process.wait()
        return
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await asyncio.wait_for(exited, timeout)
    except TimeoutError:
        process.kill()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    process.wait()


class _Run:
    """One run's host side; every method runs on ``loop`` unless it says otherwise."""

    def __init__(
        self,
        runtime: SubprocessCodeRuntime,
        loop: asyncio.AbstractEventLoop,
        ledger: OutputLedger,
        namespaces: dict[str, dict[str, BindingFunction]],
        boot: bytes,
    ) -> None:
        config = runtime.config
        self._runtime = runtime
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
        self._outcome: _Outcome | None = None
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
        pipes = [os.pipe() for _ in range(5)]
        (to_worker_r, to_worker_w), (from_worker_r, from_worker_w) = pipes[0], pipes[1]
        (out_r, out_w), (err_r, err_w), (status_r, status_w) = pipes[2], pipes[3], pipes[4]
        worker_ends = [to_worker_r, from_worker_w, out_w, err_w, status_w]
        host = {
            "to_worker": to_worker_w,
            "from_worker": from_worker_r,
            "out": out_r,
            "err": err_r,
            "status": status_r,
        }
        try:
            self._template_process = self._runtime._template.spawn(worker_ends)
        except OSError as exc:
            for fd in host.values():
                os.close(fd)
            self._exited = self._out_eof = self._err_eof = True
            self._settle_failure("worker-exit", f"worker error: {exc}")
            return
        finally:
            for fd in worker_ends:
                os.close(fd)
        for fd in host.values():
            os.set_blocking(fd, False)
        self._fds = host
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
        self._send(self._boot)

    def _drop_reader(self, name: str) -> None:
        fd = self._fds.get(name)
        if fd is not None and fd in self._readers:
            self._readers.discard(fd)
            self._loop.remove_reader(fd)

    def _close_all(self) -> None:
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

    def _kill(self) -> None:
        pid = self._pid
        if pid is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    # -- writing ----------------------------------------------------------------------------

    def _send(self, data: bytes | bytearray) -> None:
        if self._write_broken or "to_worker" not in self._fds:
            return
        self._wbuf.append(memoryview(data))
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
                break
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
                self._settle(_LIMIT)
        elif kind is Done:
            self._on_done(frame)
        elif kind is OutputLimit:
            self._settle(_LIMIT)

    def _on_call(self, frame: Call) -> None:
        call_id = frame.id
        if call_id in self._answered:
            return
        self._answered.add(call_id)
        functions = self._namespaces.get(frame.global_name)
        function = functions.get(frame.name) if functions is not None else None
        if function is None:
            self._reply_failure(
                call_id, "unknown binding " + _quote(f"{frame.global_name}.{frame.name}")
            )
            return
        try:
            value = detokenize(frame.args, FrozenList, FrozenDict)
        except TokenError:
            self._reply_failure(call_id, _NOT_LOSSLESS_ARGS)
            return
        self._runtime._track(self._loop.create_task(self._invoke(call_id, function, value)))

    async def _invoke(self, call_id: int, function: BindingFunction, value: Any) -> None:
        try:
            result = function(value)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            self._reply_failure(call_id, "binding call cancelled")
            raise
        except Exception as exc:
            self._reply_failure(call_id, _text(exc, "<unprintable thrown value>"))
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
                self._settle(_LIMIT)
            else:
                self._settle(_Outcome(failure=(error.kind, error.message)))
        elif frame.value is not None:
            try:
                value = detokenize(frame.value, FrozenList, FrozenDict)
            except TokenError:
                self._settle(_Outcome(failure=("invalid-output", _NOT_LOSSLESS_COMPLETION)))
                return
            self._settle(_Outcome(tokens=frame.value, value=value))
        else:
            self._settle(_Outcome())

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
            self._settle(_LIMIT)
        if not data:
            self._maybe_finish()

    def _on_status(self) -> None:
        fd = self._fds.get("status")
        if fd is None:
            return
        data = _read_available(fd, 4096)
        if data is None:
            return
        status = self._status
        if data:
            status += data
        while status:
            tag = status[0]
            if tag == 0x50 and len(status) >= 1 + _PID_REPORT.size:  # "P"
                (pid,) = _PID_REPORT.unpack_from(status, 1)
                del status[: 1 + _PID_REPORT.size]
                self._on_pid(pid)
            elif tag == 0x58 and len(status) >= 1 + _EXIT_REPORT.size:  # "X"
                wait_status, cpu = _EXIT_REPORT.unpack_from(status, 1)
                del status[: 1 + _EXIT_REPORT.size]
                self._on_exit(wait_status, cpu)
            elif tag == 0x45 and not data:  # "E": the fork failed; the message runs to EOF
                message = bytes(status[1:]).decode("utf-8", "replace")
                status.clear()
                self._exited = self._out_eof = self._err_eof = True
                self._settle_failure("worker-exit", f"worker error: {message}")
            elif tag not in (0x50, 0x58, 0x45):
                status.clear()
            else:
                break
        if not data:
            self._on_status_eof()

    def _on_pid(self, pid: int) -> None:
        self._pid = pid
        if self._outcome is not None:
            self._kill()
        elif self._sampler is None:
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

    def _on_status_eof(self) -> None:
        self._drop_reader("status")
        if self._exited:
            return
        if self._pid is None and self._outcome is None and self._attempts < 2:
            # The template died before forking: nothing ran, so try once more with a fresh one.
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

    def _exit_outcome(self) -> _Outcome:
        status = self._exit_status
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
            return _Outcome(
                failure=("worker-exit", f"worker exited with signal {name} before completing")
            )
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return _Outcome(
            failure=("worker-exit", f"worker exited with code {code} before completing")
        )

    def _compute_timeout(self) -> _Outcome:
        return _Outcome(
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
            self._loop.call_soon_threadsafe(self._settle_failure, "abort", _text(reason, "aborted"))

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
        self._settle(_Outcome(failure=(kind, message)))

    def _settle(self, outcome: _Outcome) -> None:
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
                self._runtime._template.replace_unresponsive(process)
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
        result = _materialize(self._ledger, self._outcome)
        if not self.future.done():
            self.future.set_result(result)
        self.finished.set_result(None)

    def abandon(self) -> None:
        """Tear down at once without waiting (the awaiting task was cancelled, or its loop died).

        The template still reaps the killed worker.
        """
        if self._done:
            return
        self._done = True
        if self._outcome is None:
            self._outcome = _Outcome(failure=("abort", "cancelled"))
        for handle in (self._wall, self._sampler, self._grace, self._report_deadline):
            if handle is not None:
                handle.cancel()
        if self._remove_signal is not None:
            self._remove_signal()
            self._remove_signal = None
        self._kill()
        self._close_all()
        self.finished.set_result(None)


class SubprocessCodeRuntime:
    """The shipped ``CodeRuntime``: Python programs in fresh, contained child processes.

    ``SubprocessCodeRuntime(config=None)`` (default budgets when ``None``). ``await run(request)``
    runs on the caller's event loop; runs may be in flight at once, from one or several loops.
    ``await dispose()`` settles live runs as ``abort`` / ``runtime disposed``, waits for their
    workers, stops the template process and makes later runs raise. ``close()`` does the same
    from synchronous code (a thread without a running loop). See the module docstring.
    """

    language: Final = "python"
    isolation: Final = "process"

    def __init__(self, config: CodeRuntimeConfig | None = None) -> None:
        if config is None:
            config = CodeRuntimeConfig()
        elif not isinstance(config, CodeRuntimeConfig):
            raise TypeError(
                f"code runtime: config must be a CodeRuntimeConfig, got {type(config).__name__}"
            )
        self.config = config
        self._template = _Template()
        self._lock = threading.Lock()
        self._runs: set[_Run] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._disposed = False
        self._disposal: concurrent.futures.Future[None] | None = None

    @property
    def template_pid(self) -> int | None:
        """The template process's pid while it runs (for diagnostics and tests)."""
        return self._template.pid

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        """Run one program; see ``CodeRuntime.run``."""
        if self._disposed:
            raise RuntimeError("code runtime: run() after disposal")
        validate_request(request)
        config = self.config
        ledger = OutputLedger(config.max_output_bytes)
        signal_ = request.signal if request.signal is not None else NEVER_ABORTED
        if signal_.aborted:
            return _materialize(
                ledger, _Outcome(failure=("abort", _text(signal_.reason, "aborted")))
            )
        try:
            compile_program(request.program)
        except ProgramError as error:
            return _materialize(ledger, _Outcome(failure=("exception", error.message)))
        namespaces: dict[str, dict[str, BindingFunction]] = {}
        wire: list[NamespaceWire] = []
        for namespace in request.bindings:
            functions = dict(namespace.functions)
            namespaces[namespace.global_name] = functions
            spec = namespace.error_class
            wire.append(
                NamespaceWire(
                    namespace.global_name,
                    sorted(functions),
                    None if spec is None else ErrorClassWire(spec.name, spec.member_attr),
                )
            )
        boot = encode_frame(
            Boot(
                request.program,
                wire,
                config.max_output_bytes,
                config.max_memory_mb,
                config.compute_ms,
            )
        )
        boot_size = len(boot) - PREFIX_BYTES
        if boot_size > config.max_frame_bytes:
            return _materialize(
                ledger,
                _Outcome(
                    failure=(
                        "frame-limit",
                        f"boot frame of {boot_size} bytes exceeds max_frame_bytes "
                        f"({config.max_frame_bytes})",
                    )
                ),
            )
        loop = asyncio.get_running_loop()
        run = _Run(self, loop, ledger, namespaces, bytes(boot))
        with self._lock:
            if self._disposed:
                raise RuntimeError("code runtime: run() after disposal")
            self._runs.add(run)
        try:
            run.start(signal_)
            return await run.future
        except BaseException:
            run.abandon()
            raise
        finally:
            with self._lock:
                self._runs.discard(run)

    async def dispose(self) -> None:
        """Settle live runs as ``abort`` / ``runtime disposed``, await them, stop the template."""
        with self._lock:
            first = self._disposal is None
            self._disposed = True
            if self._disposal is None:
                self._disposal = concurrent.futures.Future()
            disposal = self._disposal
            runs = list(self._runs)
        if not first:
            await asyncio.wrap_future(disposal)
            return
        try:
            for run in runs:
                run.dispose_any_thread()
            for run in runs:
                await asyncio.wrap_future(run.finished)
            process = self._template.close()
            if process is not None:
                await _wait_process(process, 5.0)
        finally:
            disposal.set_result(None)

    def close(self) -> None:
        """``dispose()`` for synchronous callers; raises when called inside a running loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.dispose())
            return
        raise RuntimeError("code runtime: close() inside a running event loop; await dispose()")
