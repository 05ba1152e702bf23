"""The worker side: what a Ray task or actor runs for one call of a placed body.

This module is imported on Ray workers; it needs only ``dsh_tools`` and Ray there. The body sees
a ``RemoteRunContext`` shaped like the local run context. A cancellation (``ray.cancel``) reaches
it two ways: as the ``KeyboardInterrupt`` Ray raises into a running task, and as ``ctx.signal``
aborting once Ray's cancellation flag is set (the only way an actor's running call learns of
it).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import inspect
import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Final

from ..actors import AbortSignal
from ..registry import LosslessJsonError, snapshot_json
from ._driver import ray_temp_root
from ._wire import RemoteCall, decode_call, encode_reply, fault_of, snapshot_value

__all__ = ["BegunRecord", "BodyActor", "RemoteRunContext", "last_begun", "run_body"]

_WATCH_INTERVAL = 0.05
"""How often an ``async def`` body's loop wakes to notice an interrupt or the cancellation flag
(seconds)."""


class _CancelFlagSignal(AbortSignal):
    """An ``AbortSignal`` that reads Ray's cancellation flag whenever the body's own thread asks
    whether it aborted. Ray keeps that flag per executing thread, so nothing else can watch it;
    an ``async def`` body's loop reads it on every heartbeat."""

    __slots__ = ("_probe", "_thread")

    def __init__(self, probe: Callable[[], bool]) -> None:
        super().__init__()
        self._probe = probe
        self._thread = threading.get_ident()

    @property
    def aborted(self) -> bool:
        if not self._aborted and threading.get_ident() == self._thread:
            try:
                cancelled = self._probe()
            except Exception:
                cancelled = False
            if cancelled:
                self._fire("cancelled")
        return self._aborted


def _cancel_probe() -> Callable[[], bool] | None:
    """``is_canceled`` of the running Ray task, or None outside one."""
    try:
        import ray

        runtime = ray.get_runtime_context()
        runtime.is_canceled()
    except Exception:
        return None
    probe: Callable[[], bool] = runtime.is_canceled
    return probe


class RemoteRunContext:
    """What a placed body sees on the worker: ``call_id``, ``name``, ``arguments``, ``agent``,
    ``signal`` and ``defer_context(ctx)`` (delivered with the result in the calling process).

    ``signal.aborted`` turns true once Ray cancels the call (read it from the body's thread; an
    ``async def`` body's awaiters wake within ``_WATCH_INTERVAL``). There is no ``token`` or
    ``parent``: execution tokens are identities of the calling process and never cross it.
    """

    __slots__ = ("_call", "_contexts", "_odd", "_signal", "arguments")

    def __init__(self, call: RemoteCall, arguments: Any) -> None:
        self._call = call
        self.arguments = arguments
        self._contexts: list[Any] = []
        self._odd: set[int] = set()  # the contexts that are not lossless JSON
        probe = _cancel_probe()
        self._signal = AbortSignal() if probe is None else _CancelFlagSignal(probe)

    @property
    def call_id(self) -> str:
        """The call id the harness gave."""
        return self._call.call_id

    @property
    def name(self) -> str:
        """The tool name called."""
        return self._call.name

    @property
    def agent(self) -> str | None:
        """The calling agent's key, or None."""
        return self._call.agent

    @property
    def signal(self) -> AbortSignal:
        """Aborts once Ray cancels this call."""
        return self._signal

    def defer_context(self, context: Any) -> None:
        """Attach a hook context to this call's result (frozen now, sent with the result)."""
        try:
            context = snapshot_json(context)
        except (LosslessJsonError, RecursionError):
            # Kept as given, as locally, where it fails the result; it travels pickled so
            # that it fails the result there the same way (not turned into JSON on the way).
            self._odd.add(len(self._contexts))
        self._contexts.append(context)


async def _awake(awaitable: Any, signal: AbortSignal) -> Any:
    """Await ``awaitable`` while the loop wakes every ``_WATCH_INTERVAL``: an interrupt that Ray
    raises into this thread only lands while Python code runs (never inside a long select()),
    and an actor's cancellation flag is read here, cancelling the body like a local abort."""
    body = asyncio.ensure_future(awaitable)

    async def heartbeat() -> None:
        while not body.done():
            await asyncio.sleep(_WATCH_INTERVAL)
            if signal.aborted:
                body.cancel()
                return

    beat = asyncio.ensure_future(heartbeat())
    try:
        return await body
    finally:
        beat.cancel()


def run_body(execute: Callable[[Any, Any], Any], frame: bytes, dumps: Any) -> bytes:
    """Run one call: decode, run the body (awaiting it on a fresh loop when it is async),
    check the value is lossless, encode the reply. Exceptions from the body become a fault in
    the reply; Ray's cancellation of the call (a ``KeyboardInterrupt`` or ``CancelledError``
    once its flag is set) or Ray's exit of the worker propagates to Ray."""
    call, arguments = decode_call(frame)
    ctx = RemoteRunContext(call, arguments)
    try:
        try:
            value = execute(arguments, ctx)
            if inspect.isawaitable(value):
                value = asyncio.run(_awake(value, ctx.signal))
            value = snapshot_value(call.name, value)
        finally:
            contexts = ctx._contexts
    except BaseException as exc:  # a library's BaseException too: the body's failure, as locally
        if isinstance(exc, _ENDING_TASK) and (
            ctx.signal.aborted or hasattr(exc, "ray_terminate_msg")
        ):
            # Ray's cancellation, or Ray ending the worker (its SIGTERM, ``exit_actor()``:
            # those exits carry Ray's message): they end the task, as Ray expects. Raised by
            # the body itself (``sys.exit()`` in a command-line entry point it wraps, say),
            # they are its own failure, as locally; the worker, and an actor's state, live on.
            raise
        fault = fault_of(exc, traceback.format_exc(), dumps)
        return encode_reply(None, fault, contexts, ctx._odd, dumps)
    return encode_reply(value, None, contexts, ctx._odd, dumps)


_ENDING_TASK: Final = (KeyboardInterrupt, SystemExit, asyncio.CancelledError)
"""What Ray raises in a worker to cancel its call or end the worker."""


DROPPED: Final = b""
"""What ``BodyActor.call`` answers for a call dropped before it began (no reply frame is
empty)."""

CONTROL_GROUP: Final = "control"
"""The actor's concurrency group for ``drop``: answered while a call runs in the default
group (one thread: the calls still run one at a time, in the order they were sent)."""


class BodyActor:
    """A Ray actor holding one tool's body: its closure, module globals and anything the body
    keeps stay alive between calls on this actor (stateful tools). Calls run one at a time.

    Each call carries a sequence number, increasing in the order the calls were sent (the
    order the actor runs them in). ``drop`` makes a call that has not begun never begin: Ray
    reports a queued actor call it was asked to cancel as cancelled, yet still runs it when
    its turn comes, with no cancellation flag set. The number of the last call that began is
    also kept where the actor's death leaves it (``BegunRecord``)."""

    def __init__(self, execute: Callable[[Any, Any], Any]) -> None:
        from ray import cloudpickle

        self._execute = execute
        self._dumps = cloudpickle.dumps
        self._lock = threading.Lock()
        self._begun = -1  # the sequence number of the last call that began
        self._dropped: set[int] = set()
        self._record = BegunRecord.open()

    def call(self, frame: bytes, seq: int) -> bytes:
        """Run one call of the body (see ``run_body``), unless it was dropped (``DROPPED``)."""
        with self._lock:
            self._begun = seq
            if self._dropped:
                dropped = seq in self._dropped
                # A dropped call Ray did not send after all leaves its number behind.
                self._dropped = {later for later in self._dropped if later > seq}
                if dropped:
                    return DROPPED
            if self._record is not None:
                self._record.note(seq)
        return run_body(self._execute, frame, self._dumps)

    def drop(self, seqs: list[int]) -> list[int]:
        """Of the calls ``seqs``, those that had not begun: they never will (run in the
        ``CONTROL_GROUP``, beside the running call)."""
        with self._lock:
            dropped = [seq for seq in seqs if seq > self._begun]
            self._dropped.update(dropped)
        return dropped

    def ready(self) -> tuple[str, str] | None:
        """Answer once the actor is constructed (its body unpickled): the node it runs on and
        the file it records the calls it began in (see ``BegunRecord``), None without one."""
        record = self._record
        return None if record is None else record.where


_RECORDS: Final = "dsh-tools-begun"
"""The directory (in Ray's temporary directory on a node) of the pool actors' records."""

_RECORD_KEPT_S: Final = 24 * 3600.0
"""How long the record of an actor whose process is gone is kept (since its last call began)
before an actor starting on the same node removes it: a call that finds an actor dead reads
the record at once, so only the records nobody reads (an actor killed, or ended with its pool)
are that old."""


class BegunRecord:
    """The sequence number of the last call a pool actor began, in a small file on its node.

    Written before the body begins (one ``pwrite`` of eight bytes into the page cache, which
    outlives the process): when an actor dies so fast that the answers it had just sent are
    lost with it (a body that ends its process at once), the driver reads this record on that
    node (``last_begun``) and learns whether the call had begun, rather than guessing."""

    __slots__ = ("_fd", "where")

    def __init__(self, fd: int, where: tuple[str, str]) -> None:
        self._fd = fd
        self.where = where  # the node's id, the file's path

    @classmethod
    def open(cls) -> BegunRecord | None:
        """The record of this actor, or None where none can be kept (no writable temporary
        directory): its calls are then never taken for ones that had not begun."""
        try:
            import ray

            context = ray.get_runtime_context()
            # Beside Ray's own files on the node (its logs, its sessions).
            folder = os.path.join(ray_temp_root(), "ray", _RECORDS)
            os.makedirs(folder, exist_ok=True)
            _sweep(folder)
            path = os.path.join(folder, f"{os.getpid()}-{context.get_actor_id()}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            record = cls(fd, (context.get_node_id(), path))
            record.note(-1)
            # An actor that ends as Ray ends it when its pool is done with it (its handles
            # gone, the job ending) leaves nothing to read; one killed leaves its record to
            # ``_sweep``.
            atexit.register(_remove, path)
        except Exception:
            return None
        return record

    def note(self, seq: int) -> None:
        """Record that call ``seq`` begins (before it does)."""
        try:
            os.pwrite(self._fd, seq.to_bytes(8, "little", signed=True), 0)
        except OSError:
            # The record no longer tells (it may hold an earlier call's number): removed, it
            # is read as telling nothing, and the call as one that may have run.
            with contextlib.suppress(OSError):
                os.unlink(self.where[1])


def last_begun(path: str) -> int | None:
    """The number of the last call the dead actor whose record is ``path`` began (-1: none),
    or None when the record is gone or unreadable (then it tells nothing); the record is
    removed. Run as a Ray task on the actor's node."""
    try:
        with open(path, "rb") as record:
            data = record.read(9)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return int.from_bytes(data, "little", signed=True) if len(data) == 8 else None


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _sweep(folder: str) -> None:
    """Remove the records of actors whose process is gone and whose last call began more than
    ``_RECORD_KEPT_S`` ago (see ``_RECORD_KEPT_S``)."""
    old = time.time() - _RECORD_KEPT_S
    for entry in os.scandir(folder):
        pid = entry.name.partition("-")[0]
        try:
            if entry.stat().st_mtime > old or not pid.isdigit() or _alive(int(pid)):
                continue
            os.unlink(entry.path)
        except OSError:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process
        return True
    return True
