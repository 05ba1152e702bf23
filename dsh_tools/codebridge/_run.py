"""``CodeRun``: one run's host side, on the caller's event loop.

The host writes ``Boot``, reads frames and both native pipes with ``loop.add_reader``, answers
each ``Call`` by running the binding coroutine in its own task (several may be in flight; replies
written in batches), follows the status pipe's reports (see ``_template``), enforces the wall
ceiling with a timer and follows the request's abort signal. Under the ``"process"`` isolation
it samples the worker's CPU time from ``/proc/<pid>/stat`` every 25 ms; under ``"sandbox"`` the
run's namespace init charges the whole process tree and reports a budget it ends the run for.
The first of ``Done``, ``OutputLimit``, a log that overflows, a budget, an abort, a frame over
``max_frame_bytes`` or over what its kind may cost to decode (``_frame_screen``), the
worker's death or its channel closing while it lives settles the run; the host then kills the
run (the process group, or the namespace init, which takes the whole namespace with it), waits
for the exit report and for end of file on the native pipes (bounded by a short grace, so an
escaped grandchild holding a pipe cannot hang settlement), closes everything and materializes
the result through the output ledger. The worker is a hostile peer: nothing read from it raises in
the host.

Rooms: this module is the run's settlement (timers, abort, the first outcome, finishing);
``_run_process`` the worker process (descriptors, readers, frames, status reports);
``_run_calls`` the binding calls and their replies; ``_run_pipes`` the non-blocking pipe I/O;
``_run_output`` the native output; ``_run_status`` the status reports and budgets.
"""

import asyncio
import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from ..actors import NEVER_ABORTED, AbortSignal, FrozenDict, FrozenList
from ._frame_screen import FrameRejected
from ._frames import Done, Log, OutputLimit
from ._ledger import OutputLedger, over_room
from ._outcome import LIMIT, Outcome, materialize, safe_text
from ._pool import Slot, WorkerPool
from ._run_calls import Answerer, BindingCalls, Track
from ._run_process import RunProcess
from ._sandbox._init import WALL_BACKSTOP_SECONDS, WHERE_SECONDS
from ._seam import CodeRunResult, CodeRuntimeConfig
from ._template_host import TemplateHandle
from ._tokens import MAX_DEPTH_FROM_WORKER, TokenError, detokenize

__all__ = ["CodeRun"]

_EXIT_GRACE_SECONDS: Final = 0.5
_END_NOTICE_SECONDS: Final = 0.25
"""How long after closing the channel a sandboxed run waits for its init to report the end
(the init watches the channel's hang-up, which a program holding a write end of its own channel,
reopened through ``/proc/self/fd``, can withhold) before the host kills the init itself."""
_EXIT_REPORT_SECONDS: Final = 3.0
"""How long after the kill a run waits for the template's exit report before it judges the
template unresponsive (a program can stop or freeze its parent) and replaces it."""
_FINISHED_LOCK: Final = threading.RLock()
"""Guards every run's ``finished`` future as it is made or the run ends (on different
threads: a disposal asks from its own). Reentrant: making the future may start a collection
that ends an abandoned run in a finalizer, on this thread (see the runtime's own lock)."""
_DONE_KINDS: Final = frozenset({"exception", "invalid-output", "output-limit"})
_NOT_LOSSLESS_COMPLETION: Final = "program completion must be lossless JSON"
_MEASURED_FIRST_TOKENS: Final = 1 << 16
"""A completion of more tokens than this is first held against the output cap by a lower
bound on its JSON size (``over_room``, at C speed) before its value is built: the value
costs the host about as much again as its tokens (an empty object about 73 bytes beside its
marker's 105), so building it for a completion over the cap doubled what the host held for one
(``docs/sandbox.md``: about 60 bytes per byte of ``max_output_bytes``). The bound is exact for
the costliest shape (an array of empty objects); the built value is then measured as before."""


class CodeRun(RunProcess):
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
        namespaces: dict[str, dict[str, Answerer]],
        boot: bytes,
        taken: Slot | None = None,
        boot_sent: int = 0,
    ) -> None:
        super().__init__(
            config=config,
            template=template,
            pool=pool,
            loop=loop,
            ledger=ledger,
            boot=boot,
            taken=taken,
            boot_sent=boot_sent,
        )
        self.future: asyncio.Future[CodeRunResult] = loop.create_future()
        # See ``finished``: made only when asked for (a disposal waits for it), since a
        # ``concurrent.futures.Future`` and its settling cost every run a few microseconds.
        self._finished: concurrent.futures.Future[None] | None = None
        self._has_ended = False
        # Called once, with this run, as it has ended (``finished`` is set), then dropped: a
        # done callback of ``finished`` would stay referenced by it and keep the run alive
        # until a collection.
        self.on_ended: Callable[[CodeRun], None] | None = None
        self._overdue_at = math.inf  # see ``overdue``; set once the worker is spawned
        # The runtime gave this run's slot back while its loop stood still (``overdue``).
        self.slot_returned = False
        self._remove_signal: Callable[[], None] | None = None
        self._wall: asyncio.TimerHandle | None = None
        # The wall ceiling's failure once the ceiling is reached: the outcome of the run
        # whatever settles it while the worker writes where it is (``_wall_reached``).
        self._ceiling: Outcome | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._grace_over = False
        self._report_deadline: asyncio.TimerHandle | None = None
        self._end_deadline: asyncio.TimerHandle | None = None
        self._calls = BindingCalls(
            namespaces=namespaces,
            loop=loop,
            track=track,
            max_frame_bytes=config.max_frame_bytes,
            send=self._writer.send_frame,
            fail=self._settle_failure,
        )
        self._on_call = self._calls.on_call

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, signal_: AbortSignal) -> None:
        """Spawn the worker and start watching it (nothing when the run has ended already)."""
        if self._done or self._outcome is not None:
            return
        self._spawn()
        if self._done or self._outcome is not None:
            return
        ceiling = self._limits.max_wall_ms / 1000
        self._overdue_at = time.monotonic() + ceiling + WALL_BACKSTOP_SECONDS
        self._wall = self._loop.call_later(ceiling, self._wall_reached)
        if signal_ is not NEVER_ABORTED:
            self._remove_signal = signal_.add_callback(self._on_abort_any_thread)

    def _wall_reached(self) -> None:
        # Its failure made only now: nearly every run settles before its ceiling. It names
        # the calls in flight: a program waiting on a slow tool cannot tell which it was.
        self._wall = None
        timeout = self._limits.wall_timeout(self._calls.unanswered())
        if self._ask_where():
            # As the compute budget's: the worker writes where the program is (a line it
            # blocks on), and the run ends once it has had time to (``where_spent``). The run
            # is over already: nothing the program sends is read meanwhile (no call is made
            # past the ceiling, no result taken), no call is answered, and whatever settles
            # it (the worker ending, an abort) settles it as the ceiling's.
            self._past_ceiling = True
            self._ceiling = timeout
            self._calls.close()
            self._drop_reader("from_worker")
            self._wall = self._loop.call_later(WHERE_SECONDS, self._settle, timeout)
        else:
            self._settle(timeout)

    # -- frames -----------------------------------------------------------------------------

    def _on_frame(self, frame: Any) -> None:
        kind = type(frame)
        if kind is Log:
            if not self._ledger.admit(frame.text):
                self._settle(LIMIT)
        elif kind is Done:
            self._on_done(frame)
        elif kind is OutputLimit:
            self._settle(LIMIT)
        elif kind is FrameRejected:
            self._settle_failure(frame.kind, frame.message)

    def _on_done(self, frame: Done) -> None:
        error = frame.error
        if error is not None:
            if error.kind not in _DONE_KINDS:
                self._frames.dropped += 1
                return
            if error.kind == "output-limit":
                self._settle(LIMIT)
            else:
                self._settle(Outcome(failure=(error.kind, error.message)))
        elif frame.value is not None:
            tokens = frame.value
            if len(tokens) > _MEASURED_FIRST_TOKENS and (
                self._ledger.overflowed or over_room(tokens, self._ledger.room)
            ):
                self._settle(LIMIT)  # what the ledger would settle once the value was built
                return
            try:
                value = detokenize(frame.value, FrozenList, FrozenDict, MAX_DEPTH_FROM_WORKER)
            except TokenError as exc:
                message = f"{_NOT_LOSSLESS_COMPLETION}: {exc}"
                self._settle(Outcome(failure=("invalid-output", message)))
                return
            self._settle(Outcome(tokens=frame.value, value=value))
        else:
            self._settle(Outcome())

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
            if self._outcome is None:
                self._outcome = Outcome(failure=("abort", "runtime disposed"))
            self.abandon()
            return
        try:
            loop.call_soon_threadsafe(self._settle_failure, "abort", "runtime disposed")
        except RuntimeError:
            self.abandon()

    def _settle(self, outcome: Outcome) -> None:
        if self._outcome is not None or self._done:
            return
        self._outcome = outcome if self._ceiling is None else self._ceiling
        self._calls.close()  # no binding call is answered from here on
        if not self._attempts:
            # Ended before it started: no worker of it is watched, so none will report its
            # exit; the one it took is ended as the run finishes (``_close_all``).
            self._exited = True
            self._native.close()
        for handle in (self._wall, self._sampler, self._channel_deadline):
            if handle is not None:
                handle.cancel()
        self._wall = self._sampler = self._channel_deadline = None
        if self._remove_signal is not None:
            self._remove_signal()
            self._remove_signal = None
        self._drop_reader("from_worker")
        if self._sandboxed:
            # The run is over once its init has reaped every process of it (``G``): a result
            # never arrives while something the program started still runs.
            self._end_sandboxed()
        else:
            self._kill()
        if self._exited:
            self._start_grace()
        elif self._sandboxed:
            # One timer while the init is expected to report: its ``_end_unheard`` starts the
            # wait for the exit report (``_EXIT_REPORT_SECONDS`` from here in all).
            self._end_deadline = self._loop.call_later(_END_NOTICE_SECONDS, self._end_unheard)
        else:
            self._await_exit_report(_EXIT_REPORT_SECONDS)
        self._maybe_finish()

    def _await_exit_report(self, seconds: float) -> None:
        self._report_deadline = self._loop.call_later(seconds, self._template_silent)

    def _end_unheard(self) -> None:
        """The init has not reported the end of a settled sandboxed run: kill it, which takes
        its namespace with it (the template then reports its exit). Reports already in the
        status pipe are read first: the init may have ended the run and been reaped."""
        self._end_deadline = None
        self._on_status()
        if not self._done and not self._exited:
            self._kill()
            self._await_exit_report(_EXIT_REPORT_SECONDS - _END_NOTICE_SECONDS)

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
        if self._grace is None and not self._grace_over and not self._native.closed:
            self._grace = self._loop.call_later(_EXIT_GRACE_SECONDS, self._grace_expired)

    def _grace_expired(self) -> None:
        self._grace = None
        self._grace_over = True
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._done or self._outcome is None or not self._exited:
            return
        if not self._native.closed and not self._grace_over:
            return
        self._finish()

    def _finish(self) -> None:
        self._done = True
        for handle in (self._grace, self._report_deadline, self._end_deadline):
            if handle is not None:
                handle.cancel()
        self._grace = self._report_deadline = self._end_deadline = None
        assert self._outcome is not None
        outcome = self._outcome
        where = self._where_written()  # nothing unless a budget's end asked where it was
        if where is not None:
            outcome = self._limits.where_spent(outcome, where)
        self._close_all()
        self._calls.close()
        self._native.flush()  # a dump's last unended line that waits for the rest
        result = materialize(self._ledger, outcome)
        if not self.future.done():
            self.future.set_result(result)
        self._schedule_refill()
        self._ended()

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
        for handle in (
            self._wall,
            self._sampler,
            self._channel_deadline,
            self._grace,
            self._report_deadline,
            self._end_deadline,
        ):
            if handle is not None:
                handle.cancel()
        if self._remove_signal is not None:
            self._remove_signal()
            self._remove_signal = None
        self._kill()
        self._close_all()
        self._calls.close()
        with contextlib.suppress(RuntimeError):  # a closed loop: the next run refills
            self._schedule_refill()
        if not self.future.done():
            # A loop that is only paused (the runtime was disposed meanwhile) gives its awaiting
            # task the outcome once it runs again; after a cancellation nobody reads it.
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits there
                self._loop.call_soon_threadsafe(self._deliver_abandoned)
        self._ended()

    @property
    def finished(self) -> concurrent.futures.Future[None]:
        """Settled (any thread may wait for it) once the run has ended."""
        with _FINISHED_LOCK:
            finished = self._finished
            if finished is None:
                finished = self._finished = concurrent.futures.Future()
                if self._has_ended:
                    finished.set_result(None)
        return finished

    def _ended(self) -> None:
        with _FINISHED_LOCK:
            self._has_ended = True
            finished = self._finished
        if finished is not None:
            finished.set_result(None)
        on_ended, self.on_ended = self.on_ended, None
        if on_ended is not None:
            on_ended(self)

    def _deliver_abandoned(self) -> None:
        if not self.future.done() and self._outcome is not None:
            self.future.set_result(materialize(self._ledger, self._outcome))

    @property
    def overdue(self) -> bool:
        """Whether this run's loop stands still past its wall ceiling and a second more: its
        program is over (see ``end_overdue``), and only its loop, which may never run again,
        would tell."""
        return time.monotonic() >= self._overdue_at and not self._loop.is_running()

    def end_overdue(self) -> None:
        """From another thread, while the run's loop stands still: make sure no process of the
        run goes on. Under the sandbox its init ends them by itself at the same deadline;
        elsewhere they are killed here. Nothing else changes: if the loop runs again, the run
        settles from what it finds (a completion the program sent in time, else the
        ceiling)."""
        self._past_ceiling = True
        if not self._sandboxed:
            self._kill()

    @property
    def loop_closed(self) -> bool:
        """Whether the loop this run executes on has closed (it can then never settle there)."""
        return self._loop.is_closed()

    @property
    def loop_running(self) -> bool:
        """Whether the loop this run executes on is running now."""
        return self._loop.is_running()
