"""One MCP server connection: its own thread and event loop, a supervisor that (re)connects,
and the requests the plugin sends.

The supervisor and the requests are one state machine: a request is admitted, and recorded as
in flight, under the same lock that moves the connection's state, so that a call never slips
past a disconnect or a close uncut. That is why they share this one module.

The SDK's ``ClientSession`` is bound to the loop it was entered on, while tool bodies run on
other loops (the caller's per-thread loop for ``system.execute``, the system loop for batches).
So the connection keeps one loop on a thread of its own for its whole life; requests are
submitted with ``asyncio.run_coroutine_threadsafe`` and awaited with ``asyncio.wrap_future``.

The supervisor task runs one session at a time. A session ends when the transport's read
stream ends (a stdio server exited), when the transport fails (an HTTP server went away), when
a request reports the connection closed, or when a keep-alive ping fails. Then every call in
flight fails with ``MCP_DISCONNECTED`` and, under a ``ReconnectPolicy``, the supervisor waits
and connects again; the listener (the plugin) re-syncs its registrations from the new listing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any, TypeVar, cast

import anyio
from mcp import ClientSession, MCPError, types
from mcp.shared.dispatcher import ProgressFnT
from pydantic import ValidationError

from ...actors._logging import get_logger
from ._callbacks import CallbackRunner
from ._errors import McpConnectionError, McpToolError
from ._listener import (
    ConnectionListener,
    Listing,
    notify_lost,
    notify_names_freed,
    notify_tools_changed,
)
from ._sdk import (
    ListGivenUp,
    RequestRefused,
    describe,
    initialize,
    is_closed,
    list_all,
    list_all_tools,
    one_line,
    summarize,
    wire,
)
from ._server_requests import ClientOptions, ServerRequests
from ._stdio import ServerExit
from ._transport import SERVER_CLOSED, SessionWatch, TransportFactory, WatchedReadStream
from ._types import McpCallRef, McpRequestContext, McpState, ReconnectPolicy

__all__ = [
    "ClientOptions",
    "ConnectionListener",
    "Listing",
    "McpClient",
    "TransportFactory",
    "describe",
    "list_all",
    "wire",
]

_log = get_logger("dsh_tools.mcp")

_T = TypeVar("_T")

_CLIENT_INFO = types.Implementation(name="dsh-tools", version="0.1.0")

_SDK_REFUSAL_TEXT = "Server returned an error response"
"""The SDK's error text for a request an HTTP server refused with an error status (but 404)."""
_END_HANDLING_S = 10.0
"""How long a call that failed on a lost connection waits for the loss to be handled."""


class McpClient:
    """One server connection on its own thread and loop, for the plugin's lifetime."""

    def __init__(
        self,
        label: str,
        open_transport: TransportFactory,
        *,
        agent: str | None,
        connect_timeout: float,
        reconnect: ReconnectPolicy | None,
        ping_interval: float | None,
        options: ClientOptions,
        session: SessionWatch | None = None,
        probe_failures: bool = False,
        ended_by: ServerExit | None = None,
    ) -> None:
        self.label = label
        self.agent = agent
        self.listener: ConnectionListener | None = None
        self._open_transport = open_transport
        self._connect_timeout = connect_timeout
        self._reconnect = reconnect
        self._ping_interval = ping_interval
        self._options = options
        # What the transport sees of its session that its streams do not say (a URL's).
        self._watch = session
        # Whether a failed request asks a ping if the session is still there: a transport
        # factory's failures say nothing more (a server that forgot the session refuses every
        # request of it, and over HTTP only the status, which a factory hides, tells that).
        self._probe_failures = probe_failures
        # How a stdio server's process ended on its own, which a lost connection's reason
        # names after what the connection saw ("the server closed the connection").
        self._ended_by = ended_by
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"mcp[{label}]", daemon=True)
        self._session: ClientSession | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._lost = False
        self._by_server = False  # whether the server ended the last session (see _note_lost)
        self._ended = "the session ended"
        self._relist = False
        self._names_freed = False  # ``names_freed``: the plugin is to retry tools left out
        # What the session was doing once initialized, before it was connected: a server that
        # exits then did initialize, and the first connection's failure says so.
        self._phase: str | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        # Set once the end of the current session is handled (the state moved on, the plugin
        # told, the calls in flight cut): a call that fails on that end waits for it, so that
        # whoever reads its MCP_DISCONNECTED sees the state and the tools that follow from it.
        self._end_handled: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._updater: int | None = None  # the thread running a listener update, if any
        self._calls: dict[concurrent.futures.Future[Any], McpCallRef] = {}
        self._lock = threading.Lock()
        self._state: McpState = "connecting"
        self._state_changed = threading.Condition(self._lock)
        self._cut_reason = "closed"
        self._connected = False
        self._missed = False
        self._closed = threading.Event()
        self.callbacks = CallbackRunner(label, self._loop)
        self._answers = ServerRequests(
            label,
            options,
            callbacks=self.callbacks,
            context=self._context,
            tools_changed=self._tools_list_changed,
        )

    # --- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> McpState:
        return self._state

    def _set_state(self, state: McpState) -> None:
        with self._state_changed:
            if self._state == "closed" or self._state == state:
                return
            self._state = state
            self._state_changed.notify_all()
        _log.debug("MCP server connection state", server=self.label, state=state)

    def wait_for_state(self, states: Sequence[McpState], timeout: float | None) -> bool:
        with self._state_changed:
            return self._state_changed.wait_for(lambda: self._state in states, timeout)

    # --- the thread and the supervisor ---------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                leftovers = asyncio.all_tasks(loop)
                for task in leftovers:
                    task.cancel()
                if leftovers:
                    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    def start(self) -> concurrent.futures.Future[Listing]:
        """Start the thread and the supervisor; the future settles once the tools are listed
        the first time (or the first connection failed: nothing is retried then)."""
        ready: concurrent.futures.Future[Listing] = concurrent.futures.Future()
        self._thread.start()
        self._serving = asyncio.run_coroutine_threadsafe(self._supervise(ready), self._loop)
        return ready

    def _note_lost(self, why: str, *, by_server: bool = False) -> None:
        """On the client loop: the transport is gone (``why``, for the log); ``by_server``:
        the server ended it (closed its output), as the transport's own end says too."""
        if not self._lost:
            self._lost = True
            self._ended = why
            self._by_server = by_server or why == SERVER_CLOSED
            self._wake.set()

    async def _supervise(self, ready: concurrent.futures.Future[Listing]) -> None:
        self._task = asyncio.current_task()
        attempt = 0
        try:
            while True:
                self._connected = False
                handled = self._end_handled = asyncio.Event()
                try:
                    await self._session_once(ready)
                except Exception as exc:
                    if not ready.done():
                        ready.set_exception(exc)
                        return
                    if not self._lost:  # else the first sign of the end says more
                        self._ended = describe(exc)
                    if not self._stopping and not self._connected:
                        _log.warning(
                            "MCP server connection failed",
                            server=self.label,
                            error=self._with_exit(describe(exc)),
                        )
                if self._stopping:
                    return
                self._ended = self._with_exit(self._ended)
                if self._connected:
                    attempt = 0
                attempt += 1
                policy = self._reconnect
                final = policy is None or (
                    policy.max_attempts is not None and attempt > policy.max_attempts
                )
                # Tell the plugin once per outage, and once more when it is for good; the
                # state says "disconnected" only once the tools are withdrawn.
                if final:
                    await self._tell(partial(notify_lost, final=True, reason=self._ended))
                    self._set_state("disconnected")
                elif attempt == 1:
                    self._set_state("reconnecting")
                    await self._tell(partial(notify_lost, final=False, reason=self._ended))
                self._cut_calls("disconnected")
                handled.set()
                if final or policy is None:
                    return
                try:
                    await asyncio.wait_for(self._stopped(), policy.delay(attempt))
                    return
                except TimeoutError:
                    pass
        except BaseException as exc:
            if not ready.done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    ready.set_exception(exc)
            raise
        finally:
            self._session = None
            if self._end_handled is not None:
                self._end_handled.set()

    def _with_exit(self, why: str) -> str:
        """``why`` the session ended, followed by how the server's process ended when the
        server ended it (its output ended): the transport, closed by now, saw that (a process
        the connection ended is no news)."""
        exited = self._ended_by.text if self._ended_by is not None else None
        if exited is None or not (self._lost and self._by_server):
            return why
        return f"{why}; {exited}"

    async def _end_of(self, handled: asyncio.Event | None) -> None:
        """On the client loop: wait (bounded) until the end of the session a call ran on is
        handled; see ``_end_handled``."""
        if handled is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handled.wait(), _END_HANDLING_S)

    async def _stopped(self) -> None:
        while not self._stopping:
            self._wake.clear()
            await self._wake.wait()

    async def _session_once(self, ready: concurrent.futures.Future[Listing]) -> None:
        """One session, from connecting to its end (``_connected`` says if it got that far)."""
        self._lost = False
        self._by_server = False
        self._ended = "the session ended"
        self._relist = False
        self._phase = None
        async with AsyncExitStack() as stack:
            # As bounded as the initialize below: a transport that never opens (a gateway that
            # takes the connection and never completes its handshake) would otherwise hold a
            # reconnect for ever, its attempts never counted. asyncio's timeout, not anyio's:
            # the transport stays open past this block, and an anyio scope it opened inside
            # one of ours would have to close first.
            async with asyncio.timeout(self._connect_timeout):
                streams = await stack.enter_async_context(self._open_transport())
            read = WatchedReadStream(streams[0], self._note_lost)
            answers = self._answers
            options = self._options
            session = ClientSession(
                read,  # the SDK's ReadStream protocol, structurally
                streams[1],
                sampling_callback=answers.sample if options.sampling else None,
                elicitation_callback=answers.elicit if options.elicitation else None,
                list_roots_callback=answers.list_roots if options.roots is not None else None,
                logging_callback=answers.on_log,
                message_handler=answers.on_message,
                client_info=_CLIENT_INFO,
            )
            await stack.enter_async_context(session)
            with anyio.fail_after(self._connect_timeout):
                init = await initialize(session)
                self._phase = "listing its tools"
                with _naming("tools/list"):
                    tools = (
                        await list_all_tools(session)
                        if init.capabilities.tools is not None
                        else await _undeclared_tools(session)
                    )
                level = self._options.log_level
                if level is not None and init.capabilities.logging is not None:
                    # The request itself, not the SDK's set_logging_level: that helper warns
                    # (MCPDeprecationWarning) on every call, as the capability is deprecated for
                    # a later protocol version, while a server that declares it takes it.
                    params = types.SetLevelRequestParams(level=level)  # type: ignore[arg-type]
                    self._phase = "setting its log level"
                    with _naming("logging/setLevel"):
                        await session.send_request(
                            types.SetLevelRequest(params=params), types.EmptyResult
                        )
            listing = Listing(
                tools,
                wire(init.server_info) if init.server_info is not None else None,
                init.instructions,
                wire(init.capabilities),
            )
            self._session = session
            self._connected = True
            self._set_state("connected")
            if not ready.done():
                ready.set_result(listing)
            else:
                await self._tell(lambda listener: listener.reconnected(listing))
            try:
                await self._serve(session)
            finally:
                self._session = None

    async def _serve(self, session: ClientSession) -> None:
        """Follow the live session until it stops, is lost, or fails a keep-alive ping."""
        while not (self._stopping or self._lost):
            if self._relist:
                self._relist = False
                try:
                    # As bounded as the first listing: a server that never finishes its list
                    # must not hold the connection's keep-alive.
                    with anyio.fail_after(self._connect_timeout):
                        tools = await list_all_tools(session)
                except MCPError as exc:
                    if is_closed(exc):
                        self._ended = "the connection closed during tools/list"
                        return
                    self._relist_failed(exc.message)
                    continue
                except TimeoutError:
                    self._relist_failed(
                        f"no whole list within connect_timeout={self._connect_timeout} s"
                    )
                    continue
                except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    self._ended = f"the connection broke during tools/list ({describe(exc)})"
                    return
                except Exception as exc:
                    # A listing the SDK refuses (a ValidationError: a tool whose input schema
                    # is not an object schema, say) is this one request's failure: a server
                    # that answers is still connected, and its tools stay as they were.
                    self._relist_failed(describe(exc))
                    continue
                await self._tell(partial(notify_tools_changed, tools=tools))
                continue
            if self._names_freed:
                self._names_freed = False
                await self._tell(notify_names_freed)
                continue
            self._wake.clear()
            if self._stopping or self._lost or self._relist or self._names_freed:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), self._ping_interval)
            except TimeoutError:
                try:
                    await _ping(session, self._connect_timeout)
                except Exception as exc:
                    ended = self._watched_end()
                    if ended is not None:
                        self._ended = ended
                        return
                    _log.warning("MCP server stopped answering", server=self.label, error=str(exc))
                    self._ended = f"no answer to a keep-alive ping ({describe(exc)})"
                    return

    def _relist_failed(self, why: str) -> None:
        _log.warning("MCP tools/list failed", server=self.label, error=why)

    async def _tell(self, notify: Callable[[ConnectionListener], None]) -> None:
        """Run a listener method on a worker thread: registry changes block on actor asks and
        run ``change`` observers, which must not stall this loop (calls keep flowing)."""
        listener = self.listener
        if listener is None:
            self._missed = True
            return
        try:
            await asyncio.to_thread(self._update, notify, listener)
        except Exception as exc:
            _log.warning("MCP plugin update failed", server=self.label, error=describe(exc))

    def _update(
        self, notify: Callable[[ConnectionListener], None], listener: ConnectionListener
    ) -> None:
        """On a worker thread: one listener update, its thread known to ``close``."""
        self._updater = threading.get_ident()
        try:
            notify(listener)
        finally:
            self._updater = None

    def attach(self, listener: ConnectionListener) -> None:
        """Start telling ``listener`` about changes; a tools change that arrived before (while
        the first listing was being registered) is re-listed now."""
        self.listener = listener
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._catch_up)

    def names_freed(self) -> None:
        """From any thread: have the listener retry the tools it left out for a name another
        tool had (``names_freed``), on the update thread, in turn with the listings. While no
        session serves, the next one's listing does that."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to retry
            self._loop.call_soon_threadsafe(self._retry_names)

    def _retry_names(self) -> None:
        self._names_freed = True
        self._wake.set()

    def _catch_up(self) -> None:
        if self._missed:
            self._missed = False
            self._relist = True
            self._wake.set()

    def close(self, timeout: float) -> None:
        """Cut in-flight calls short, end the session (stopping the server) and the thread.

        Called where the end of the session waits for the caller, it returns at once and the
        close finishes on a thread of its own (see ``waits_for_caller``): waiting for the
        supervisor there would wait for itself until ``timeout``, twice."""
        waited_for = self.waits_for_caller()
        with self._lock:
            first = self._state != "closed"
            self._state = "closed"
            self._state_changed.notify_all()
        if not first:
            if not waited_for:
                self._closed.wait(timeout)
            return
        if waited_for:
            finishing = threading.Thread(
                target=self._finish_close,
                args=(timeout,),
                name=f"mcp-close[{self.label}]",
                daemon=True,
            )
            finishing.start()
            return
        self._finish_close(timeout)

    def waits_for_caller(self) -> bool:
        """Whether the session's end waits for the calling thread: the client loop's (a
        coroutine callback, which the request it answers waits for) or a listener update's (a
        ``change`` observer, which the supervisor waits for)."""
        return self.on_client_loop() or threading.get_ident() == self._updater

    def on_client_loop(self) -> bool:
        """Whether the caller runs on the client loop's thread (a coroutine callback), where
        blocking on a request would stop the loop that answers it."""
        return threading.get_ident() == self._thread.ident

    def _finish_close(self, timeout: float) -> None:
        try:
            self._cut_calls("closed")
            serving = self._serving
            if serving is not None and self._thread.is_alive():
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._request_stop)
                try:
                    serving.result(timeout)
                except concurrent.futures.TimeoutError:
                    _log.warning("MCP session did not close in time", server=self.label)
                    serving.cancel()
                except BaseException as exc:  # already reported by the supervisor
                    _log.debug("MCP session closed with an error", error=str(exc))
            if self._thread.is_alive():
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout)
        finally:
            self.callbacks.close()
            self._closed.set()

    def _request_stop(self) -> None:
        """On the client loop: end a live session; cut a connection attempt short."""
        self._stopping = True
        self._wake.set()
        task = self._task
        if self._session is None and task is not None and not task.done():
            task.cancel()

    # --- requests ------------------------------------------------------------------------------

    def _disconnected(self) -> McpConnectionError:
        if self._state == "reconnecting":
            text = f'MCP server "{self.label}" is disconnected (reconnecting)'
        else:
            text = f'MCP server "{self.label}" is not connected'
        return McpConnectionError(text, "MCP_DISCONNECTED")

    def end_reason(self) -> str | None:
        """Why the transport saw the last session end (``SERVER_CLOSED``, or what it said),
        or ``None`` while it has not seen it end."""
        return self._ended if self._lost else None

    def initialized_phase(self) -> str | None:
        """What the last session was doing after the server initialized, before it was
        connected (``"listing its tools"``...), or ``None`` when it never initialized or got
        as far as connected."""
        return None if self._connected else self._phase

    def unreadable(self) -> str | None:
        """What was wrong with the last line of the server's output that was no message (and
        how it began), or ``None``."""
        return self._answers.unreadable

    def cut_reason(self) -> str:
        """Why the last calls were cut short: ``"closed"`` or ``"disconnected"``."""
        return self._cut_reason

    def _cut_calls(self, reason: str) -> None:
        with self._lock:
            self._cut_reason = reason
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    def call_tool(
        self,
        ref: McpCallRef,
        tool: str,
        arguments: dict[str, Any],
        *,
        on_progress: ProgressFnT,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Submit ``tools/call`` (with a progress token) to the client loop; raises
        ``McpConnectionError`` (``MCP_DISCONNECTED``) at once when not connected. Cancelling
        the future cancels the request (the SDK tells the server)."""
        coro = self._call_tool(tool, arguments, on_progress)
        return self._submit(coro, ref)

    def request(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Submit any coroutine over the live session to the client loop."""
        return self._submit(coro, None)

    def _submit(
        self, coro: Coroutine[Any, Any, _T], ref: McpCallRef | None
    ) -> concurrent.futures.Future[_T]:
        with self._lock:
            if self._state != "connected" or self._session is None:
                coro.close()
                raise self._disconnected()
            submitted: list[concurrent.futures.Future[_T]] = []
            guarded = _unless_given_up(coro, submitted)
            try:
                future = asyncio.run_coroutine_threadsafe(guarded, self._loop)
            except RuntimeError:  # the loop is gone
                guarded.close()
                raise self._disconnected() from None
            submitted.append(future)
            if ref is not None:
                self._calls[future] = ref
        if ref is not None:
            future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._calls.pop(future, None)

    def session(self) -> ClientSession:
        """On the client loop: the live session, or ``MCP_DISCONNECTED``."""
        session = self._session
        if session is None:
            raise self._disconnected()
        return session

    async def failure(self, exc: MCPError, session: ClientSession) -> Exception:
        """On the client loop: the harness error for a failed request. The code the SDK uses
        for a closed connection is also a server's generic error code, and a transport that
        lost one response stream says so with it too: unless it is the SDK's own "closed"
        outcome, a ping decides whether the server is still there. A request the server
        refused because it no longer knows the session ends the session too, and so does any
        refusal of a request of the session when the server then refuses a ping as well (over
        a transport factory, whose refusals look like any failure, any failed request)."""
        ended, refused = await self._session_gone(session)
        closed = (
            ended is None
            and exc.code == types.CONNECTION_CLOSED
            and (is_closed(exc) or not await self._answers_ping(session))
        )
        if closed:
            ended = f"a request reported the connection closed ({exc.message})"
        if ended is not None:
            self._note_lost(ended, by_server=closed)
            return McpConnectionError(
                f'MCP server "{self.label}" disconnected during the call', "MCP_DISCONNECTED"
            )
        text = one_line(exc.message)
        if refused is not None and text == _SDK_REFUSAL_TEXT:
            # The SDK's text for a request refused with an HTTP error: the status (a crash's
            # 500, an overload's 503, a 403) is what its author needs. Only there: a server's
            # own error (a JSON-RPC one) was no refusal, whatever another request was told.
            text = f"{text} ({refused})"
        return McpToolError(f"MCP request failed: {text}", "MCP_REQUEST_FAILED")

    def _watched_end(self) -> str | None:
        """After a failed ping: why the transport saw the session end or refused, or ``None``."""
        watch = self._watch
        if watch is None:
            return None
        refused = watch.refused()
        return watch.ended() or (f"the server refuses the session ({refused})" if refused else None)

    async def _session_gone(self, session: ClientSession) -> tuple[str | None, str | None]:
        """After a failed request: why the transport's session is over though its streams go
        on, or ``None``; and how the server refused a request of the session (the HTTP status
        a URL's last refusal had), or ``None``."""
        watch = self._watch
        if watch is None:
            if self._probe_failures:
                refused = await self._ping_refused(session)
                if refused is not None:
                    return (
                        f"the server refuses the session: a request failed, a ping too ({refused})",
                        None,
                    )
            return None, None
        ended = watch.ended()
        if ended is not None:
            return ended, None
        refused = watch.refused()
        if refused is not None and not await self._answers_ping(session):
            return f"the server refuses the session ({refused}), a ping too", refused
        return None, refused

    async def _ping_refused(self, session: ClientSession) -> str | None:
        """Why a ping failed, or ``None`` if it was answered or not in time: silence is for the
        keep-alive to judge (a busy server is slow to answer, not gone)."""
        failure = await self._ping_failure(session)
        if failure is None or isinstance(failure, TimeoutError):
            return None
        return describe(failure)

    async def _answers_ping(self, session: ClientSession) -> bool:
        return await self._ping_failure(session) is None

    async def _ping_failure(self, session: ClientSession) -> Exception | None:
        """What a ping raised (``TimeoutError`` for no answer in time), or ``None`` if it was
        answered."""
        try:
            await _ping(session, min(self._connect_timeout, 5.0))
        except Exception as exc:
            return exc
        return None

    async def _call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        on_progress: ProgressFnT,
    ) -> dict[str, Any]:
        session = self.session()
        handled = self._end_handled
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments)
        )
        try:
            # send_request rather than call_tool: the result is checked against the tool's
            # output schema here (one-line MCP_INVALID_OUTPUT), and no implicit tools/list.
            result = await session.send_request(
                request, types.CallToolResult, progress_callback=on_progress
            )
        except MCPError as exc:
            error = await self.failure(exc, session)
            if isinstance(error, McpConnectionError):
                await self._end_of(handled)
            raise error from None
        except ValidationError as exc:
            text = f"MCP request failed: {summarize(exc)}"
            raise McpToolError(text, "MCP_REQUEST_FAILED") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._note_lost(f"the connection broke during a call ({describe(exc)})")
            await self._end_of(handled)
            raise self._disconnected() from None
        return wire(result)

    # --- what the server sends us --------------------------------------------------------------

    def _context(self) -> McpRequestContext:
        with self._lock:
            calls = tuple(self._calls.values())
        return McpRequestContext(self.label, self.agent, calls)

    def _tools_list_changed(self) -> None:
        """On the client loop: the server's tools changed; the supervisor re-lists them."""
        self._relist = True
        self._wake.set()


async def _ping(session: ClientSession, timeout: float) -> None:
    """Ping the server; raise what says it did not answer within ``timeout`` seconds. A
    server that refuses the method (``METHOD_NOT_FOUND``) answered: the protocol asks every
    server to answer pings, but one that does not is no less there, and other clients never
    ping it to find out."""
    try:
        with anyio.fail_after(timeout):
            await session.send_ping()
    except MCPError as exc:
        if exc.code != types.METHOD_NOT_FOUND:
            raise


async def _undeclared_tools(session: ClientSession) -> list[dict[str, Any]]:
    """The tools of a server that declares no tools capability. One that serves resources or
    prompts only need not answer tools/list and may refuse it: it has none. One that serves
    tools but forgot to declare them (many do) still has them listed, as before the check."""
    try:
        return await list_all_tools(session)
    except MCPError as exc:
        if is_closed(exc):
            raise
        return []


@contextlib.contextmanager
def _naming(method: str) -> Iterator[None]:
    """An error the server answered ``method`` with names ``method``: the first connection's
    failure otherwise says what the server said, not to which of its requests (a failed
    initialize is the connection's own, and says so already). The SDK's own
    "connection closed" outcome is left as it is (the registration reads it)."""
    try:
        yield
    except MCPError as exc:
        if is_closed(exc) or isinstance(exc, ListGivenUp | RequestRefused):
            raise  # named already
        raise RequestRefused(method, exc) from exc


async def _unless_given_up(
    coro: Coroutine[Any, Any, _T], submitted: list[concurrent.futures.Future[_T]]
) -> _T:
    """``coro``'s outcome, except that a failure nobody waits for any more (its future was
    cancelled, by the caller or by a withdrawal cutting the calls short, while the request
    was failing) ends the task quietly: the future does not take it, and left in the task it
    would be reported as "Task exception was never retrieved" whenever the collector got to it,
    from whatever code was running then. ``submitted`` holds the future once it is made."""
    try:
        return await coro
    except Exception:
        if submitted and submitted[0].cancelled():
            return cast("_T", None)
        raise
