"""``SubprocessCodeRuntime``: every run in a fresh, confined child process.

Spawning ``python -I`` per run costs 20 ms or more, over the whole budget of an empty run, so
each runtime starts one *template process* at its first run or ``warm_up()`` (``python -I -X
utf8 _template.py`` with an empty environment and its own session). The template imports the
worker modules once and never runs model code; it forks one single-use worker per run (see
``_template``). Every run therefore starts from the same clean interpreter state in its own
process. A small pool (``_pool``) keeps two workers forked, confined and prewarmed ahead of the
runs; each run takes one and the pool is refilled once the run settles. If the template dies it
is restarted for the next run.

Isolation (``CodeRuntimeConfig.isolation``):

- ``"sandbox"`` (the default; ``_sandbox``, ``docs/sandbox.md``): each worker runs in its own
  PID, mount, IPC and UTS namespaces inside the template's empty network namespace, confined by
  Landlock to the Python installation, its scratch directory (a private tmpfs, its working
  directory) and the granted paths, with no capabilities, ``no_new_privs`` and a seccomp
  filter. The namespace's init charges the whole process tree to the budgets; killing it ends
  every process of the run.
- ``"process"``: the worker calls ``setsid()``, keeps only its six descriptors, clears its
  environment and applies ``RLIMIT_AS``/``RLIMIT_CPU``; the host samples its CPU time and kills
  its process group. This is containment, not a sandbox: a program can do anything the host
  user can, and a process that creates its own session escapes the group kill.

Trade-offs of the template against a fresh interpreter per run:

- Runs share the template's start-up state: the same modules already imported (but never used
  by model code), the same ``PYTHONHASHSEED``-style hash seed, the same executable. ``random``
  reseeds after fork. Nothing a program does reaches the template or a later run.
- One extra long-lived process per runtime (started on the first run or by ``warm_up()``,
  ~100 ms once; its pages are shared copy-on-write with the children), and the pool's idle
  workers.
- The host kills by pid. The template reaps the worker (or init), so a pid whose process has
  exited could in principle be reused before the host learns of the exit; pids are allocated
  sequentially, so this needs a full wrap of the pid space within microseconds and is accepted.

Per run, on the caller's event loop and with no thread hop, ``CodeRun`` (``_run``) drives the
worker. Limits: Linux for the sandbox (x86_64), POSIX with ``fork`` for ``"process"`` (CPU
sampling needs Linux ``/proc``; elsewhere only the ``RLIMIT_CPU`` backstop applies).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Final

from ..actors import NEVER_ABORTED
from ..actors._logging import get_logger
from ._frames import (
    GO,
    HELP_NAMESPACE,
    PREFIX_BYTES,
    Boot,
    ErrorClassWire,
    NamespaceWire,
    encode_frame,
)
from ._ledger import OutputLedger
from ._outcome import Outcome, materialize, safe_text
from ._pool import Slot, WorkerPool
from ._prepared import PreparedRuns, Release
from ._program import ProgramError, check_program
from ._run import CodeRun
from ._run_calls import Answerer
from ._run_slots import RunSlots, wait_checking
from ._sandbox import CodeSandbox
from ._seam import (
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    ErrorClassSpec,
    validate_request,
)
from ._template_host import TemplateHandle, reap

__all__ = ["SubprocessCodeRuntime", "namespace_wire"]

_PREFORKED: Final = 2
"""Idle workers kept spawned (and, under the sandbox, confined) ahead of the runs."""
_log = get_logger("dsh_tools.codebridge")

_PREPARED_BOOT_BYTES: Final = 60_000
"""The largest held boot a run is prepared with: what a pipe's buffer (64 KiB) takes in one
write, so that preparing never waits for the worker."""

HOST_PARSE_LIMIT: Final = 32 * 1024
"""The longest program (in characters) the host parses itself, so that its syntax errors fail
before any process starts. Parsing costs the host about 2 KiB of memory and 10 us per short
statement (a 6 MB program took 32 s and 2.4 GB), so a longer program's syntax errors come from
its worker, which parses and compiles every program inside the run's limits (memory, CPU, wall
ceiling): compiling to bytecode can cost gigabytes for a program of a kilobyte."""


def _warn_of_missing_grants(sandbox: CodeSandbox) -> None:
    """Name each grant that does not exist now, as the runtime is made. Not refused: one that
    exists by the time the template starts (the first run, or ``warm_up()``) is granted; but
    otherwise every run fails naming it, long after the mistake (a typo, a folder not yet
    made)."""
    for key, paths in (("read", sandbox.read), ("write", sandbox.write)):
        for index, path in enumerate(paths):
            if not os.path.lexists(path):
                _log.warning(
                    f"code sandbox: {key}[{index}] {path!r} does not exist; every run will "
                    "fail naming it unless it exists when the runtime's template starts (the "
                    "first run, or warm_up())",
                    grant=path,
                )


class SubprocessCodeRuntime:
    """The shipped ``CodeRuntime``: Python programs in fresh, contained child processes.

    ``SubprocessCodeRuntime(config=None)`` (default budgets when ``None``). ``await run(request)``
    runs on the caller's event loop; up to ``config.max_parallel_runs`` runs may be in flight at
    once, from one or several loops, and later ones wait for a slot (``_run_slots``).
    ``await dispose()`` settles live runs as ``abort`` / ``runtime disposed``, waits for their
    workers, stops the template process and makes later runs raise. ``close()`` does the same
    from synchronous code (a thread without a running loop). See the module docstring.
    """

    language: Final = "python"

    def __init__(self, config: CodeRuntimeConfig | None = None) -> None:
        if config is None:
            config = CodeRuntimeConfig()
        elif not isinstance(config, CodeRuntimeConfig):
            raise TypeError(
                f"code runtime: config must be a CodeRuntimeConfig, got {type(config).__name__}"
            )
        self.config = config
        settings = {
            "isolation": config.isolation,
            "compute_ms": config.compute_ms,
            "max_wall_ms": config.max_wall_ms,
            "max_memory_mb": config.max_memory_mb,
            "max_processes": config.sandbox.max_processes,
            "max_open_files": config.sandbox.max_open_files,
            "max_parallel_runs": config.max_parallel_runs,
            "cgroups": config.sandbox.cgroups,
            "read": list(config.sandbox.read),
            "write": list(config.sandbox.write),
            "env": config.sandbox.env,
        }
        if config.isolation == "sandbox":
            _warn_of_missing_grants(config.sandbox)
        self._template = TemplateHandle(settings)
        self._pool = WorkerPool(self._template, _PREFORKED) if _PREFORKED else None
        self._sandboxed = config.isolation == "sandbox"
        self._prepared = PreparedRuns(self._end_unrun)
        self._slots = RunSlots(config.max_parallel_runs, on_stall=self._end_orphans)
        # Reentrant: a run abandoned by the cyclic collector (its loop closed while it waited)
        # ends in a finalizer, which may run on a thread that holds this lock already.
        self._lock = threading.RLock()
        self._runs: set[CodeRun] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._disposed = False
        self._disposal: concurrent.futures.Future[None] | None = None
        self._reaper: threading.Thread | None = None  # the thread reaping the template
        self._forgotten = False  # a copy in a child forked from the host (``_forget``)
        _RUNTIMES.add(self)

    def _forget(self) -> None:
        """This is a child forked from the host (``_forget_runtimes_in_child``): the template,
        the workers and the runs are the parent's. This copy refuses runs and disposes of
        nothing; its locks may be held by threads of the parent, so none is taken."""
        self._forgotten = True
        self._disposed = True

    @property
    def isolation(self) -> str:
        """``"sandbox"`` or ``"process"``, from the config."""
        return self.config.isolation

    @property
    def template_pid(self) -> int | None:
        """The template process's pid while it runs (for diagnostics and tests)."""
        return self._template.pid

    @property
    def runs_in_flight(self) -> int:
        """How many runs hold one of the ``config.max_parallel_runs`` slots now."""
        return self._slots.taken

    @property
    def idle_workers(self) -> int:
        """How many pre-forked workers wait for a run now (the pool refills in the
        background after each run)."""
        return 0 if self._pool is None else self._pool.idle

    @property
    def prepared_runs(self) -> int:
        """How many pre-forked workers hold a prepared program now (``prepare``)."""
        return len(self._prepared)

    @property
    def runs_waiting(self) -> int:
        """How many runs wait for a slot now."""
        return self._slots.waiting

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def warm_up(self) -> None:
        """Start the template process and fill the pool of pre-forked workers now, on the
        pool's own thread, rather than at the first run (which would otherwise wait about
        100-150 ms for both). The template takes the grants (which must exist by then) and,
        under ``"process"``, the host's working directory, umask and credentials as they are
        when it starts: call this once they are what the runs should see. Any thread; never
        blocks or raises; does nothing once disposed or when the template runs already."""
        if not self._disposed:
            self._refill()

    def _boot_fields(
        self, program: str, wire: list[NamespaceWire]
    ) -> tuple[str, list[NamespaceWire], int, float, float, int]:
        config = self.config
        return (
            program,
            wire,
            config.max_output_bytes,
            config.max_memory_mb,
            config.compute_ms,
            config.max_frame_bytes,
        )

    def prepare(self, program: str, namespaces: list[NamespaceWire]) -> Release | None:
        """A run of ``program`` with ``namespaces`` (``namespace_wire``) may be asked for soon:
        its ``run_code`` call has begun. A pre-forked worker gets the program in a held boot
        and compiles it while the call passes its guards, hooks and approval, and runs nothing
        of it unless that run comes (``_prepared``). Returns what to call once the call has
        ended (which closes the worker if no run claimed it), or ``None`` when nothing was
        prepared: without an idle pre-forked worker, with as many prepared as may be, or for a
        boot the channel cannot take at once. Any thread; never blocks or raises."""
        pool = self._pool
        if pool is None or self._disposed:
            return None
        try:
            if self._prepared.full():
                return None
            fields = self._boot_fields(program, namespaces)
            held = bytes(encode_frame(Boot(*fields, held=True)))
            if len(held) > min(_PREPARED_BOOT_BYTES, self.config.max_frame_bytes):
                return None  # too large for one write, or for the run itself (frame-limit)
            boot = bytes(encode_frame(Boot(*fields)))
            slot = pool.take()
        except Exception:  # a hint only: the run goes ahead without it
            _log.debug("preparing a run failed", exc_info=True)
            return None
        if slot is None:
            return None
        try:
            if slot.write_early(held) != len(held):
                self._end_unrun(slot)
                return None
            # Replaced as its call ends, as a run's worker is: a fork during a run competes
            # with it for the machine's cores (a 100-call run took about a tenth longer).
            return self._prepared.add(boot, slot)
        except BaseException as exc:  # the worker ends with it, taken for nothing
            self._end_unrun(slot)
            if not isinstance(exc, Exception):
                raise
            _log.debug("preparing a run failed", exc_info=True)
            return None

    def _end_unrun(self, slot: Slot | None) -> None:
        """End a worker taken for a run that never came (a prepared one no run claimed, or one
        given its program as the run fell through), if any: closing its channel ends a
        sandboxed one (its init watches the hang-up); under ``"process"`` its process group is
        killed too, since a worker still compiling or running would not read the end of file.
        The pool replaces it."""
        if slot is None:
            return
        slot.end(kill_group=not self._sandboxed)
        self._refill()

    def _refill(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(RuntimeError):  # no thread at interpreter exit
                self._pool.fill_soon()

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        """Run one program; see ``CodeRuntime.run``."""
        if self._disposed:
            if self._forgotten:
                raise RuntimeError(
                    "code runtime: it belongs to the process that forked this one; make a new "
                    "runtime here"
                )
            raise RuntimeError("code runtime: run() after disposal")
        validate_request(request)
        config = self.config
        ledger = OutputLedger(config.max_output_bytes)
        signal_ = request.signal if request.signal is not None else NEVER_ABORTED
        if signal_.aborted:
            return materialize(
                ledger, Outcome(failure=("abort", safe_text(signal_.reason, "aborted")))
            )
        namespaces: dict[str, dict[str, Answerer]] = {}
        wire: list[NamespaceWire] = []
        for namespace in request.bindings:
            functions: dict[str, Answerer] = dict(namespace.functions)
            # Arguments decoded from a frame are a fresh snapshot (``detokenize`` checks every
            # token and builds new frozen containers): the bindings that take one save a copy.
            snapshots = namespace.snapshot_functions
            if snapshots is not None and snapshots.keys() == functions.keys():
                namespaces[namespace.global_name] = dict(snapshots)
            else:
                namespaces[namespace.global_name] = functions
            spec = namespace.error_class
            wire.append(namespace_wire(namespace.global_name, functions, spec))
            # Answered as any binding call. Every namespace answers (``None`` without a
            # describer): a request no namespace answers would count among the frames the
            # host could not use, of which a run may send only so many.
            namespaces.setdefault(HELP_NAMESPACE, {})[namespace.global_name] = partial(
                _described, namespace.describe, functions, config.max_frame_bytes
            )
        try:
            boot_bytes = bytes(encode_frame(Boot(*self._boot_fields(request.program, wire))))
        except UnicodeEncodeError:
            # A lone surrogate: not source text, which Python's compiler refuses in the words
            # the host's check gives (a name with one is the caller's to fix, and raises).
            try:
                check_program(request.program)
            except ProgramError as error:
                return materialize(ledger, Outcome(failure=("exception", error.message)))
            raise
        boot_size = len(boot_bytes) - PREFIX_BYTES
        if boot_size > config.max_frame_bytes:
            return materialize(
                ledger,
                Outcome(
                    failure=(
                        "frame-limit",
                        f"boot frame of {boot_size} bytes exceeds max_frame_bytes "
                        f"({config.max_frame_bytes})",
                    )
                ),
            )
        pool = self._pool
        prepared = self._prepared
        prepared.sweep()
        # A worker prepared as this run's call began has the program compiled already (a
        # syntax error is its to report): it needs only the go.
        early = prepared.claim(boot_bytes) if pool is not None else None
        if early is not None and not early.alive():  # its init ended it (a budget, say)
            self._end_unrun(early)
            early = None
        try:
            if early is None and len(request.program) <= HOST_PARSE_LIMIT:
                try:
                    check_program(request.program)
                except ProgramError as error:
                    return materialize(ledger, Outcome(failure=("exception", error.message)))
            self._end_orphans()
            acquired = await self._slots.acquire(signal_)
        except BaseException:  # cancelled while waiting for a slot, say
            self._end_unrun(early)
            raise
        if not acquired:
            self._end_unrun(early)
            reason = "runtime disposed" if self._disposed else safe_text(signal_.reason, "aborted")
            return materialize(ledger, Outcome(failure=("abort", reason)))
        if early is not None:
            # One that died while this run waited for its slot ends the run as its status
            # says (its compile's budget, say), or the run tries a fresh worker (``_spawn``).
            early.write_early(GO)
            sent = len(boot_bytes)
        else:
            # A pre-forked worker gets its program before the host builds the run around it:
            # it wakes (which takes its core a while after an idle spell) and starts the
            # program meanwhile (measured: an empty run's median about a tenth shorter).
            early = pool.take() if pool is not None else None
            sent = early.write_early(boot_bytes) if early is not None else 0
        try:
            run = CodeRun(
                config=config,
                template=self._template,
                pool=pool,
                track=self._track,
                loop=asyncio.get_running_loop(),
                ledger=ledger,
                namespaces=namespaces,
                boot=boot_bytes,
                taken=early,
                boot_sent=sent,
            )
        except BaseException:
            self._slots.release()
            self._end_unrun(early)
            raise
        # The slot is the run's from here until it has ended, its processes gone, however it
        # ends: settled, abandoned, or ended from elsewhere because its loop closed under it.
        run.on_ended = self._run_ended
        with self._lock:
            disposed = self._disposed
            if not disposed:
                self._runs.add(run)
        if disposed:  # while this run waited for its slot
            run.on_ended = None
            self._slots.release()
            self._end_unrun(early)
            return materialize(ledger, Outcome(failure=("abort", "runtime disposed")))
        try:
            run.start(signal_)
            return await run.future
        except BaseException:
            run.abandon()
            raise

    def _run_ended(self, run: CodeRun) -> None:
        with self._lock:
            self._runs.discard(run)
            owed = not run.slot_returned
            run.slot_returned = True
        if owed:
            self._slots.release()

    def _end_orphans(self) -> None:
        """End the runs whose event loop closed under them: nothing there can settle them any
        more, and each would keep its slot and its worker until the runtime is disposed. Give
        back the slots of the runs whose loop has stood still past their wall ceiling
        (``CodeRun.overdue``: they stay the runtime's, to settle if their loop runs again). Give
        back the slots of waiters whose loop closed before they took them, and let go of binding
        tasks that can never finish. Every run calls this as it starts, and so does a run that
        has waited long for a slot."""
        orphans: list[CodeRun] = []
        overdue: list[CodeRun] = []
        with self._lock:
            for run in self._runs:
                if run.loop_closed:
                    orphans.append(run)
                elif not run.slot_returned and run.overdue:
                    run.slot_returned = True  # under the lock, against ``_run_ended``
                    overdue.append(run)
        for run in orphans:
            run.abandon()
        for run in overdue:
            run.end_overdue()
            self._slots.release()
        self._slots.reclaim()
        if orphans:
            for task in list(self._tasks):  # one step: loops elsewhere change the set
                if task.get_loop().is_closed():
                    self._tasks.discard(task)

    async def dispose(self) -> None:
        """Settle live runs as ``abort`` / ``runtime disposed``, await them, stop the template."""
        if self._forgotten:
            return  # the parent's to dispose of
        with self._lock:
            first = self._disposal is None
            self._disposed = True
            if self._disposal is None:
                self._disposal = concurrent.futures.Future()
            disposal = self._disposal
            runs = list(self._runs)
        self._slots.close()
        if first:
            try:
                for run in runs:
                    run.dispose_any_thread()
                for run in runs:
                    await _until_ended(run)
            finally:
                # Also when the caller gave up waiting (cancelled): the pool and the template
                # stop anyway, the template is reaped on a thread of its own, and every
                # dispose() waits for that.
                self._stop_pool_and_template(disposal)
        # Shielded: a caller that gives up waiting must not cancel the disposal every later
        # dispose() waits for (``wrap_future`` passes a cancellation on to it).
        await asyncio.shield(asyncio.wrap_future(disposal))
        reaper = self._reaper
        if reaper is not None:
            # It settled the disposal as its last act and is ending now: once dispose()
            # returns, no thread of the runtime's is left (nor listed by threading).
            reaper.join(_REAPER_END_S)

    def _stop_pool_and_template(self, disposal: concurrent.futures.Future[None]) -> None:
        """Close the pool's idle workers and tell the template to exit; ``disposal`` settles
        once the template is reaped."""
        if self._pool is not None:
            self._pool.close()
        self._prepared.close()
        process = self._template.close()
        if process is None:
            disposal.set_result(None)
        else:
            reaped, self._reaper = reap(self._template, process, 5.0)
            reaped.add_done_callback(lambda _reaped: disposal.set_result(None))

    def close(self) -> None:
        """``dispose()`` for synchronous callers; raises when called inside a running loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.dispose())
            return
        raise RuntimeError("code runtime: close() inside a running event loop; await dispose()")


_REAPER_END_S: Final = 1.0
"""How long ``dispose()`` waits for the thread that reaped the template to end, once it has
said the template is gone (its last act): a moment, unless the machine stands still."""

_RUNTIMES: Final[weakref.WeakSet[SubprocessCodeRuntime]] = weakref.WeakSet()
"""Every runtime of this process, for ``_forget_runtimes_in_child``."""


def _forget_runtimes_in_child() -> None:
    for runtime in list(_RUNTIMES):
        runtime._forget()


os.register_at_fork(after_in_child=_forget_runtimes_in_child)


_HELP_REPLY_ROOM: Final = 64
"""What a help text's reply frame takes beyond the text's UTF-8 bytes (tag, id, headers)."""


def _described(
    describe: Callable[[str | None], str | Awaitable[str | None] | None] | None,
    bindings: dict[str, Answerer],
    max_frame_bytes: int,
    name: object,
) -> str | Awaitable[str | None] | None:
    """What ``help()`` shows of binding ``name`` (``None``: of the namespace): ``describe``'s
    text, asked only about a binding of the namespace or the namespace itself. A request the
    program forged may carry any value, which a describer is not made for. A text too large
    for one reply frame is not sent (the run would fail for a frame over ``max_frame_bytes``
    said to be a binding's result): what is shown says so."""
    if describe is None or (name is not None and (type(name) is not str or name not in bindings)):
        return None
    text = describe(name)
    if inspect.isawaitable(text):
        return _fitted_later(text, name, max_frame_bytes)
    return _fitted(text, name, max_frame_bytes)


async def _fitted_later(
    text: Awaitable[str | None], name: str | None, max_frame_bytes: int
) -> str | None:
    return _fitted(await text, name, max_frame_bytes)


def _fitted(text: str | None, name: str | None, max_frame_bytes: int) -> str | None:
    """``text``, or what says it is too large for one reply frame (see ``_described``)."""
    room = max_frame_bytes - _HELP_REPLY_ROOM
    if type(text) is str and len(text) > room // 4:  # at most 4 bytes a character
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > room:
            narrower = ": help() on one binding shows less" if name is None else ""
            return (
                f"(The description is {size} bytes, more than one frame of this run takes:"
                f" max_frame_bytes is {max_frame_bytes}{narrower}.)"
            )
    return text


def namespace_wire(
    global_name: str, names: Iterable[str], error_class: ErrorClassSpec | None
) -> NamespaceWire:
    """How a ``Boot`` names one binding namespace: its bindings sorted."""
    return NamespaceWire(
        global_name,
        sorted(names),
        None if error_class is None else ErrorClassWire(error_class.name, error_class.member_attr),
    )


_DISPOSE_CHECK_SECONDS: Final = 0.5
"""How often ``dispose()`` looks at a run it waits for whose loop may have stopped."""


async def _until_ended(run: CodeRun) -> None:
    """Wait until ``run`` has ended. Its settlement was queued on its own loop: if that loop
    stops (or closes) before running it, nothing there ends the run, so it is torn down here."""

    def end_if_stranded() -> None:
        if not run.loop_running:
            run.abandon()

    await wait_checking(asyncio.wrap_future(run.finished), _DISPOSE_CHECK_SECONDS, end_if_stranded)
