"""``RayCodeRuntime``: Code Mode programs run on a Ray node, their tool calls come back here.

A ``CodeRuntime`` for ``ToolSystem.start(code_runtime=...)``. One async Ray actor (placed with
the given Ray options) owns a real code runtime built on the node by ``runtime_factory`` (the
shipped subprocess runtime with the given budgets by default), so a program gets the same worker
process, isolation and budgets on the node as it would here. Each binding call the program makes
travels back to this process, runs the harness's binding (the full pipeline, as a sub-call of the
``run_code`` call) and its value or failure travels back.

An abort of the run is forwarded to the node, whose runtime settles the run as ``abort``; if the
node does not answer within ``cancel_grace_s`` the actor is killed and the run settles as
``abort`` here. A run whose end comes from the node after its abort settles as ``abort`` too,
whatever the node said: the first the host sees, as in the local runtime. A node or actor that
dies settles live runs as ``worker-exit``; the next run starts a fresh actor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..actors import NEVER_ABORTED, AbortSignal, message_of
from ..actors._config import check_finite_number
from ..actors._futures import retrieve
from ..registry import LosslessJsonError, snapshot_json
from ._code_host import EVENTS_GROUP, EVENTS_SLOTS, CodeRunHost
from ._code_wire import (
    CallEvent,
    DoneEvent,
    HelpEvent,
    MisuseEvent,
    NamespaceSpec,
    decode_events,
)
from ._driver import (
    connect_in_background,
    connected_ray,
    connection,
    demand,
    import_ray,
    never_placed,
    still_connected,
)
from ._errors import describe_ray_failure
from ._placement import check_ray_options
from ._ray_pickle import unsendable

if TYPE_CHECKING:
    from ..codebridge import CodeRunRequest, CodeRunResult, CodeRuntime, CodeRuntimeConfig
    from ..codebridge._seam import FailureKind

__all__ = ["RayCodeRuntime"]

_encoder = msgspec.json.Encoder()
_RUNTIME = "run_code"
_CANCELLED = "the run's task was cancelled"
_CALL_SLOTS = 1000
"""How many calls the node's actor serves at once (Ray's ``max_concurrency``), apart from the
runs' long polls (``EVENTS_GROUP``)."""
_MIN_PING_ANSWER_S = 1.0
"""The least time the node's actor has to answer a sign-of-life request."""
_RECENT_ANSWERS = 8
"""How many of a node actor's latest signs of life tell how slow it answers now."""
_SLOW_FACTOR = 4.0
"""How many times its slowest recent answer a node actor may stay silent (see ``_Heard``)."""
_SHUT_DOWN = (
    "remote code runtime lost: the Ray connection ended (ray.shutdown()) before the run settled"
)


def _default_factory(config: CodeRuntimeConfig | None) -> Callable[[], CodeRuntime]:
    def build() -> CodeRuntime:
        from ..codebridge import SubprocessCodeRuntime

        return SubprocessCodeRuntime(config)

    return build


class RayCodeRuntime:
    """Code Mode programs on a Ray node (see the module docstring).

    ``RayCodeRuntime(config=None, *, runtime_factory=None, num_cpus=1, resources=None,
    runtime_env=None, cancel_grace_s=5.0, placement_wait_s=10.0)``: ``config`` (a
    ``CodeRuntimeConfig``) gives the node's subprocess runtime its budgets; ``runtime_factory``
    (a picklable ``() -> CodeRuntime`` run on the node) replaces that runtime. A run whose actor
    Ray has not placed ``placement_wait_s`` after the run began, when no node of the cluster has
    the resources it needs, fails as ``worker-exit`` (it has not started).
    """

    language = "python"
    isolation = "ray"

    def __init__(
        self,
        config: CodeRuntimeConfig | None = None,
        *,
        runtime_factory: Callable[[], CodeRuntime] | None = None,
        num_cpus: float = 1,
        resources: dict[str, float] | None = None,
        runtime_env: dict[str, Any] | None = None,
        cancel_grace_s: float = 5.0,
        placement_wait_s: float = 10.0,
    ) -> None:
        from ..codebridge import CodeRuntimeConfig

        # Refused here: found on the node, they would fail every run there.
        if config is not None and not isinstance(config, CodeRuntimeConfig):
            raise TypeError(
                f"RayCodeRuntime: config must be a CodeRuntimeConfig, got {type(config).__name__}"
            )
        if runtime_factory is not None and not callable(runtime_factory):
            raise TypeError(
                "RayCodeRuntime: runtime_factory must be callable, got "
                f"{type(runtime_factory).__name__}"
            )
        check_ray_options("RayCodeRuntime", resources, runtime_env)
        for label, value in (
            ("num_cpus", num_cpus),
            ("cancel_grace_s", cancel_grace_s),
            ("placement_wait_s", placement_wait_s),
        ):
            check_finite_number("RayCodeRuntime", label, value)
        self._factory = runtime_factory if runtime_factory is not None else _default_factory(config)
        self._options: dict[str, Any] = {"num_cpus": num_cpus}
        if resources:
            self._options["resources"] = dict(resources)
        if runtime_env:
            self._options["runtime_env"] = dict(runtime_env)
        self._grace = float(cancel_grace_s)
        self._placement_wait = float(placement_wait_s)
        self._lock = threading.Lock()
        self._host: Any = None
        self._host_connection: tuple[str, str] | None = None  # the Ray connection it is of
        self._host_heard = _Heard()  # when ``_host`` last answered (see ``_RunWatch``)
        self._disposed = False
        self._live: set[asyncio.Future[None]] = set()

    def _actor(self) -> Any:
        current = connection()
        with self._lock:
            # An actor of an earlier connection (before ``ray.shutdown()``) ended with it.
            if self._host is None or self._host_connection != current:
                ray = import_ray()
                # The runs' long polls wait in a group of their own, never in the slots the
                # node's other calls (its signs of life among them) are served in.
                actor_class = ray.remote(concurrency_groups={EVENTS_GROUP: EVENTS_SLOTS})(
                    CodeRunHost
                ).options(
                    max_concurrency=_CALL_SLOTS, max_restarts=0, max_task_retries=0, **self._options
                )
                self._host = actor_class.remote(self._factory)
                self._host_connection = current
                self._host_heard = _Heard()
            return self._host

    def _heard_from(self, host: Any) -> _Heard:
        """The record of when ``host`` last answered, shared by the runs on it."""
        with self._lock:
            return self._host_heard if self._host is host else _Heard()

    def _forget(self, host: Any, kill: bool) -> None:
        with self._lock:
            if self._host is host:
                self._host = None
        ray = connected_ray()  # else it ended with the connection (see ``connected_ray``)
        if kill and ray is not None:
            with contextlib.suppress(Exception):
                ray.kill(host, no_restart=True)

    async def run(self, request: CodeRunRequest) -> CodeRunResult:
        """Run one program on the node; outcomes are results, misuse raises."""
        from ..codebridge import CodeRunRequest

        if self._disposed:
            raise RuntimeError("code runtime: run() after disposal")
        if not isinstance(request, CodeRunRequest):
            raise TypeError(
                f"code runtime: run() expects a CodeRunRequest, got {type(request).__name__}"
            )

        signal: AbortSignal = request.signal if request.signal is not None else NEVER_ABORTED
        if signal.aborted:
            return _failed("abort", message_of(signal.reason, "aborted"))
        loop = asyncio.get_running_loop()
        if not import_ray().is_initialized():
            unconnected = await self._connect(signal)
            if unconnected is not None:
                return unconnected
        functions = {ns.global_name: dict(ns.functions) for ns in request.bindings}
        describers: dict[str, Callable[[str | None], object]] = {
            ns.global_name: ns.describe for ns in request.bindings if ns.describe is not None
        }
        spec = [
            NamespaceSpec(
                ns.global_name,
                sorted(ns.functions),
                None
                if ns.error_class is None
                else (ns.error_class.name, ns.error_class.member_attr),
                ns.describe is not None,
            )
            for ns in request.bindings
        ]
        session = connection()
        try:
            host = self._actor()
        except Exception as exc:  # the factory cannot be pickled, the options are refused
            why = unsendable(self._factory, exc)
            return _failed("worker-exit", f"remote code runtime unavailable: {why}")
        run_id = uuid.uuid4().hex
        stop, release = self._stop_on_abort(loop, signal)
        answers: set[asyncio.Task[None]] = set()
        watch = _RunWatch(self, host, run_id, signal, stop, session)
        started = False
        try:
            for again in (False, True):
                try:
                    ended = await watch.started(host.start.remote(run_id, request.program, spec))
                    break
                except import_ray().exceptions.RayActorError as exc:
                    if again or exc.actor_init_failed or not still_connected(session):
                        raise
                    if isinstance(exc, import_ray().exceptions.ActorUnavailableError):
                        # Out of reach for a moment, not dead: the node may have taken the
                        # run, or take it yet. Sent to a fresh actor, it could run twice.
                        raise
                    # The node's actor had died before it took the run (idle between runs:
                    # its process killed, its node lost), so the program has not started:
                    # it goes to a fresh actor, once.
                    self._forget(host, kill=False)
                    watch.close()
                    host = self._actor()
                    watch = _RunWatch(self, host, run_id, signal, stop, session)
            if ended is not None:
                return ended  # the run ended here before the node took it
            started = True
            while True:
                polled = await watch.next_events()
                if not isinstance(polled, bytes):
                    return polled  # the run ended here, without the node
                for event in decode_events(polled):
                    if isinstance(event, CallEvent):
                        task = loop.create_task(self._answer(host, run_id, functions, event))
                        answers.add(task)
                        task.add_done_callback(answers.discard)
                    elif isinstance(event, HelpEvent):
                        task = loop.create_task(self._describe(host, run_id, describers, event))
                        answers.add(task)
                        task.add_done_callback(answers.discard)
                    elif isinstance(event, DoneEvent):
                        if signal.aborted:
                            # Aborted before the node's end reached this process: as in the
                            # local runtime, the first of the two the host sees settles the
                            # run. The abort and the answers it makes (a call's "run is
                            # over") reach the node in either order, so the end may be the
                            # abort's own consequence (the program raised on that answer).
                            return _failed("abort", message_of(signal.reason, "aborted"))
                        return self._result(event)
                    elif isinstance(event, MisuseEvent):
                        error = TypeError if event.type_name == "TypeError" else ValueError
                        raise error(event.message)
        except import_ray().exceptions.RayError as exc:
            if not still_connected(session):
                self._forget(host, kill=False)
                return _failed("worker-exit", _SHUT_DOWN)
            if isinstance(exc, import_ray().exceptions.ActorUnavailableError):
                # The node's actor was out of reach for a moment (a broken connection): it
                # lives on, and so may the run, whose events nobody collects now. The node is
                # told to end and forget it (a run it has not taken yet starts aborted); the
                # actor keeps serving the runtime's other runs and the next ones.
                reason = f"remote code runtime unreachable: {describe_ray_failure(exc)}"
                with contextlib.suppress(Exception):
                    host.drop.remote(run_id, reason, started)
                return _failed("worker-exit", reason)
            self._forget(host, kill=False)
            if isinstance(exc, import_ray().exceptions.RayActorError) and exc.actor_init_failed:
                # The node's runtime could not be made (the factory failed there): nothing
                # was lost, it never was; the next run tries a fresh actor.
                why = describe_ray_failure(exc)
                return _failed("worker-exit", f"remote code runtime unavailable: {why}")
            return _failed("worker-exit", f"remote code runtime lost: {describe_ray_failure(exc)}")
        except Exception:
            if still_connected(session):
                raise  # the node's runtime refused the request as misuse
            # After ray.shutdown() Ray refuses the actor's calls (not as a RayError).
            self._forget(host, kill=False)
            return _failed("worker-exit", _SHUT_DOWN)
        except asyncio.CancelledError:
            # The awaiting task was cancelled (a stopping tool system, a cancelled caller): the
            # program on the node must end too, not run on to its wall ceiling.
            reason = message_of(signal.reason, _CANCELLED) if signal.aborted else _CANCELLED
            if still_connected(session):  # else the run ended with the connection
                with contextlib.suppress(Exception):
                    host.drop.remote(run_id, reason, started)
            raise
        finally:
            watch.close()
            release()
            for task in answers:
                task.cancel()

    def _stop_on_abort(
        self, loop: asyncio.AbstractEventLoop, signal: AbortSignal
    ) -> tuple[asyncio.Future[None], Callable[[], None]]:
        """A future on ``loop`` that ``signal``'s abort (from any thread) or the disposal
        settles, and what lets go of it once the wait it serves is over."""
        stop: asyncio.Future[None] = loop.create_future()
        self._live.add(stop)

        def on_abort(_reason: Any) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, stop)

        remove = signal.add_callback(on_abort)

        def release() -> None:
            remove()
            self._live.discard(stop)

        return stop, release

    async def _connect(self, signal: AbortSignal) -> CodeRunResult | None:
        """Connect to Ray (``ensure_ray``), or the result that ends the run first: connecting
        can take minutes (an address where something that is not Ray answers), and an abort
        or the disposal ends the wait (not the connection, which goes on for the next run)."""
        loop = asyncio.get_running_loop()
        connecting = asyncio.wrap_future(connect_in_background())
        connecting.add_done_callback(retrieve)
        stop, release = self._stop_on_abort(loop, signal)
        try:
            await asyncio.wait((connecting, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            release()
        if not connecting.done():
            if self._disposed:
                return _failed("abort", "runtime disposed")
            return _failed("abort", message_of(signal.reason, "aborted"))
        try:
            connecting.result()
        except Exception as exc:
            return _failed("worker-exit", f"remote code runtime unavailable: {exc}")
        return None

    def _result(self, event: DoneEvent) -> CodeRunResult:
        from ..codebridge import CodeRunFailure, CodeRunResult

        if event.error_kind is not None:
            return CodeRunResult(
                list(event.logs), error=CodeRunFailure(event.error_kind, event.error_message or "")
            )
        if event.has_value:
            return CodeRunResult(
                list(event.logs), value=snapshot_json(msgspec.json.decode(event.value))
            )
        return CodeRunResult(list(event.logs))

    async def _answer(
        self,
        host: Any,
        run_id: str,
        functions: dict[str, dict[str, Any]],
        event: CallEvent,
    ) -> None:
        function = functions.get(event.global_name, {}).get(event.member)
        ok = False
        try:
            if function is None:
                answer: Any = f'unknown binding "{event.global_name}.{event.member}"'
            else:
                value = await function(snapshot_json(msgspec.json.decode(event.value)))
                answer = snapshot_json(value)
                ok = True
        except LosslessJsonError:
            answer = "binding resolved with a value that is not lossless JSON"
        except Exception as exc:
            answer = message_of(exc)
        if connected_ray() is not None:  # else the run ended with the connection
            host.resolve.remote(run_id, event.number, ok, _encoder.encode(answer))

    async def _describe(
        self,
        host: Any,
        run_id: str,
        describers: dict[str, Callable[[str | None], object]],
        event: HelpEvent,
    ) -> None:
        """Answer the program's ``help()`` with the namespace's describer (called here, on
        the run's loop, as a local runtime calls it; the node asks only of its namespaces
        that have one, about their bindings)."""
        describe = describers.get(event.global_name)
        ok = False
        answer: object
        try:
            answer = None if describe is None else describe(event.name)
            if inspect.isawaitable(answer):
                answer = await answer
            if type(answer) is not str:
                answer = None  # nothing a program can be shown
            ok = True
        except Exception as exc:
            answer = message_of(exc)
        if connected_ray() is not None:  # else the run ended with the connection
            host.resolve.remote(run_id, event.number, ok, _encoder.encode(answer))

    async def dispose(self) -> None:
        """Settle live runs as ``abort`` / ``runtime disposed`` and stop the node's runtime."""
        self._disposed = True
        for stop in list(self._live):
            _wake(stop)
        with self._lock:
            host, self._host = self._host, None
            made_in = self._host_connection
        if host is None or made_in is None or not still_connected(made_in):
            return  # none, or it ended with the connection it was made in (``connected_ray``)
        ray = import_ray()
        with contextlib.suppress(Exception):
            disposed = asyncio.wrap_future(host.dispose.remote().future())
            # Its failure (a node runtime that never came up) is nobody's to read.
            disposed.add_done_callback(retrieve)
            await asyncio.wait({disposed}, timeout=self._grace)
        with contextlib.suppress(Exception):
            ray.kill(host, no_restart=True)


def _failed(kind: FailureKind, message: str) -> CodeRunResult:
    from ..codebridge import CodeRunFailure, CodeRunResult

    return CodeRunResult([], error=CodeRunFailure(kind, message))


class _RunWatch:
    """What a run waits for between its events from the node: an abort (forwarded to the
    node, which then has ``cancel_grace_s`` to settle the run before its actor is killed),
    the runtime's disposal, and the node's signs of life. A node that stops answering (hung,
    its process stopped) would hold the run for ever: while it waits, the actor is asked for
    a sign of life every ``cancel_grace_s`` (at least every second) unless it answered
    another request meanwhile, and is taken for hung only after the silence ``_Heard``
    allows a slow one."""

    def __init__(
        self,
        runtime: RayCodeRuntime,
        host: Any,
        run_id: str,
        signal: AbortSignal,
        stop: asyncio.Future[None],
        session: tuple[str, str],
    ) -> None:
        self._runtime = runtime
        self._session = session  # the Ray connection the run was sent on
        self._host = host
        self._run_id = run_id
        self._signal = signal
        self._stop = stop  # set on an abort or the disposal
        self._loop = stop.get_loop()
        self._answer_within = max(runtime._grace, _MIN_PING_ANSWER_S)
        self._abort_sent = False
        self._deadline: float | None = None  # by when the node must settle an aborted run
        self._ping: asyncio.Future[Any] | None = None  # a sign of life asked for, unanswered
        self._next_ping = self._loop.time() + self._answer_within  # or its answer's due time
        self._ping_sent = 0.0  # when the sign of life asked for was asked for
        self._heard = runtime._heard_from(host)

    async def started(self, starting: Any) -> CodeRunResult | None:
        """Wait for the node to take the run (``starting``: its ``start`` call), or the
        result that ends the run here first. The node may be slow to take it (its actor is
        still being placed, its environment set up) or never take it (no node offers the
        actor's resources): an abort still ends the run, after ``cancel_grace_s`` for the node
        to take it and settle it (the actor is killed then), and so does the disposal. Where
        no node of the cluster has the resources the actor needs, the run fails once
        ``placement_wait_s`` has passed (the actor is killed: it has taken no run)."""
        loop = self._loop
        unplaced_until = loop.time() + self._runtime._placement_wait
        taken = asyncio.wrap_future(starting.future())
        taken.add_done_callback(retrieve)
        taken.add_done_callback(self._heard.answered)
        deadline: float | None = None
        while not taken.done():
            # An actor that has answered before is placed and built: one that stops answering
            # (its process stopped, its loop blocked) would never take the run, and is judged
            # as while the run waits for its events. One not answered yet may still be waiting
            # for its node's resources, for as long as that takes.
            placed = self._heard.at is not None
            if placed:
                self._ask_sign_of_life()
            waiting: set[asyncio.Future[Any]] = {taken}
            if deadline is None:
                waiting.add(self._stop)
            if self._ping is not None:
                waiting.add(self._ping)
            # Woken now and then: after ray.shutdown(), Ray never settles the ``start`` call.
            timeout = _MIN_PING_ANSWER_S
            if placed:
                timeout = min(timeout, max(0.0, self._next_ping - loop.time()))
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - loop.time()))
            await asyncio.wait(waiting, timeout=timeout, return_when="FIRST_COMPLETED")
            if taken.done():
                break
            if not still_connected(self._session):
                return _failed("worker-exit", _SHUT_DOWN)
            if self._ping is not None and self._ping.done():
                self._ping = None  # answered; or failed with the actor, as ``start`` will tell
            else:
                hung = self._hung()
                if hung is not None:
                    return hung
            if not placed and deadline is None and loop.time() >= unplaced_until:
                runtime = self._runtime
                needs = demand(runtime._options)
                why = never_placed("actor for it", runtime._placement_wait, needs)
                if why is not None and self._heard.at is None and not taken.done():
                    runtime._forget(self._host, kill=True)
                    return _failed("worker-exit", f"remote code runtime unavailable: {why}")
            if not self._stop.done() and deadline is None:
                continue  # nothing else happened
            runtime = self._runtime
            if runtime._disposed:
                runtime._forget(self._host, kill=True)
                return _failed("abort", "runtime disposed")
            if deadline is None:
                deadline = loop.time() + runtime._grace  # aborted: the node has this long
            elif loop.time() >= deadline:
                runtime._forget(self._host, kill=True)
                return _failed("abort", message_of(self._signal.reason, "aborted"))
        taken.result()  # a RayError: the actor could not be made, or is gone
        return None

    async def next_events(self) -> bytes | CodeRunResult:
        """The run's next events from the node, or the result that ends the run here."""
        loop = self._loop
        poll = self._host.events.options(concurrency_group=EVENTS_GROUP)
        polled = asyncio.wrap_future(poll.remote(self._run_id).future())
        # Left unread when the run ends here (its actor killed as unresponsive, say), it fails
        # with the actor's death: not an "exception never retrieved" in the harness's log.
        polled.add_done_callback(retrieve)
        polled.add_done_callback(self._heard.answered)
        while not polled.done():
            self._ask_sign_of_life()
            wake_at = self._next_ping
            if self._deadline is not None:
                wake_at = min(wake_at, self._deadline)
            waiting: set[asyncio.Future[Any]] = {polled}
            if not self._abort_sent:
                waiting.add(self._stop)
            if self._ping is not None:
                waiting.add(self._ping)
            await asyncio.wait(
                waiting, timeout=max(0.0, wake_at - loop.time()), return_when="FIRST_COMPLETED"
            )
            if not polled.done():
                ended = self._check()
                if ended is not None:
                    return ended
        if self._ping is None:  # it answered: the next sign of life is due later
            self._next_ping = loop.time() + self._answer_within
        events: bytes = polled.result()
        return events

    def _ask_sign_of_life(self) -> None:
        """Ask the actor for a sign of life when one is due and none is awaited. Not asked
        after ray.shutdown() (see ``connected_ray``): the run's wait ends it then."""
        loop = self._loop
        due = self._ping is None and loop.time() >= self._next_ping
        heard = self._heard.at
        if due and heard is not None and loop.time() - heard < self._answer_within:
            # The actor answered another request lately (another run's sign of life, say):
            # that is a sign of life too, and not asking spares a loaded node a request.
            self._next_ping = heard + self._answer_within
            due = False
        if due and connected_ray() is not None:
            self._ping = asyncio.wrap_future(self._host.ready.remote().future())
            # Left unread when the run ends first (its events failed with the actor's death
            # as this failed too), it is no "exception never retrieved" either.
            self._ping.add_done_callback(retrieve)
            self._ping_sent = loop.time()
            self._ping.add_done_callback(
                functools.partial(self._heard.answered_sign_of_life, loop.time())
            )
            self._next_ping = loop.time() + self._answer_within  # its answer is due then

    def _hung(self) -> CodeRunResult | None:
        """The run's end when the sign of life asked for is overdue, and the actor has been
        silent for longer than a loaded machine takes to answer (see ``_Heard``): since the
        request, or its last answer to any of the runtime's requests if later. The actor is
        then killed."""
        ping, now = self._ping, self._loop.time()
        if ping is None or ping.done() or now < self._next_ping:
            return None
        patience = self._heard.patience(self._answer_within)
        silent_since = max(self._ping_sent, self._heard.at or 0.0)
        if now < silent_since + patience:
            self._next_ping = silent_since + patience  # wake then to look again
            return None
        self._runtime._forget(self._host, kill=True)
        return _failed(
            "worker-exit",
            f"remote code runtime stopped answering (no sign of life within {patience:g} s)",
        )

    def _check(self) -> CodeRunResult | None:
        """After a wait that brought no events: the run's end here, if it has come."""
        runtime, signal = self._runtime, self._signal
        if not still_connected(self._session):
            return _failed("worker-exit", _SHUT_DOWN)
        ping = self._ping
        if ping is not None and ping.done():
            ping.result()  # a RayError: the actor is gone (the run settles as lost)
            self._ping = None
        else:
            hung = self._hung()
            if hung is not None:
                return hung
        if runtime._disposed:
            runtime._forget(self._host, kill=True)
            return _failed("abort", "runtime disposed")
        if self._stop.done() and not self._abort_sent:
            self._abort_sent = True
            self._deadline = self._loop.time() + runtime._grace
            self._host.abort.remote(self._run_id, message_of(signal.reason, "aborted"))
        elif self._deadline is not None and self._loop.time() >= self._deadline:
            # The node did not settle the aborted run in time: end it here.
            runtime._forget(self._host, kill=True)
            return _failed("abort", message_of(signal.reason, "aborted"))
        return None

    def close(self) -> None:
        """The run is over: a sign of life still asked for is not wanted (nor its failure,
        should the actor go)."""
        if self._ping is not None and not self._ping.done():
            self._ping.cancel()


class _Heard:
    """What the runs on one node actor have heard from it, shared by them: when it last
    answered a request (a sign of life, a run's start or events), on the loops' clock
    (``time.monotonic``), and how long its latest signs of life took.

    A loaded machine (its cores taken by other work) answers every request late, a second or
    more, and then it answers many at a time: such an actor is slow, not hung. A hung one (a
    stopped process, a blocked loop, a node out of reach) answers nothing, however long."""

    __slots__ = ("_took", "at")

    def __init__(self) -> None:
        self.at: float | None = None
        self._took: collections.deque[float] = collections.deque(maxlen=_RECENT_ANSWERS)

    def answered(self, reply: asyncio.Future[Any]) -> None:
        """A done callback of a request to the actor."""
        if not reply.cancelled() and reply.exception() is None:
            now = reply.get_loop().time()
            if self.at is None or now > self.at:
                self.at = now

    def answered_sign_of_life(self, sent: float, reply: asyncio.Future[Any]) -> None:
        """A done callback of a sign of life asked for at ``sent`` (``functools.partial``)."""
        self.answered(reply)
        if not reply.cancelled() and reply.exception() is None:
            self._took.append(reply.get_loop().time() - sent)

    def patience(self, answer_within: float) -> float:
        """How long the actor may go without answering anything before it counts as hung:
        twice the time a sign of life is due in, or a few times its slowest recent answer."""
        return max(2 * answer_within, _SLOW_FACTOR * max(tuple(self._took), default=0.0))


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
