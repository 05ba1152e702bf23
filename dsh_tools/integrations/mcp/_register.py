"""``register_mcp_server`` / ``register_mcp_server_sync``: connect, register, return the plugin."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, NoReturn, TextIO

import httpx2
from mcp import MCPError, StdioServerParameters
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE, streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ...actors._futures import retrieve
from ...pipeline._loop import driving, running_loop
from ._capabilities import approval_elicitation
from ._client import ClientOptions, McpClient, TransportFactory, describe
from ._errors import McpConnectionError
from ._plugin import McpPlugin, wait_out
from ._sdk import RequestRefused, UnsupportedProtocol, is_closed
from ._stdio import ServerExit, stdio_group_client
from ._stdio_pipes import LINE_LIMIT
from ._together import close_together
from ._tools import ConcurrencyPolicy
from ._transport import SERVER_CLOSED
from ._types import (
    ElicitationCallback,
    ListChangedCallback,
    ProgressCallback,
    ReconnectPolicy,
    SamplingCallback,
)
from ._waits import positive

if TYPE_CHECKING:
    from ..._handles import AgentScope
    from ..._system import PluginHandle, ToolSystem

__all__ = ["register_mcp_server", "register_mcp_server_sync"]

ServerParams = StdioServerParameters | str | TransportFactory

_PING_INTERVAL = 15.0
"""The default keep-alive ping, for every transport: a server can stop answering without its
connection ending (a stdio server whose loop died while a thread keeps the process alive), and
only a ping tells that from a slow call."""
_HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)
"""The SDK's default HTTP timeouts: 30 s to connect, write or wait for the pool, 300 s to read
(a server may hold a response stream open)."""
_GOODBYE_TIMEOUT: Final = httpx2.Timeout(2.0)
"""What the session's goodbye (the DELETE that ends it on the server, a courtesy) may take:
what a stdio server is given to exit. A server that answers nothing would otherwise hold the
close for the 300 s the SDK waits for a response, so that the close abandoned the session at
``close_timeout``."""
_SESSION_HEADER: Final = "mcp-session-id"
_LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class _HttpStatus:
    """The last error status an HTTP server answered with: the SDK's error for a refused
    request says only "Not Found" or "Server returned an error response", which leaves a
    harness author guessing whether the URL, its path or the server's transport is wrong.

    It also watches the session for the connection (``SessionWatch``): a 404 to a request
    that carried the session's id means the server no longer knows it (it restarted, or let
    the session expire), and the protocol has the client start a new one; a server may say
    the same with another refusal (400 "No valid session ID"), which a ping then tells from a
    refusal of that one request. The SDK reports either only as the failure of the request."""

    def __init__(self) -> None:
        self.last: str | None = None
        self._ended: str | None = None
        self._refused: str | None = None

    def reset(self) -> None:
        """A new connection: nothing answered yet."""
        self.last = None
        self._ended = None
        self._refused = None

    async def record(self, response: httpx2.Response) -> None:
        if response.status_code < 400:
            return
        self.last = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
        request = response.request
        # POSTs only: a GET that resumes the server's stream may see 404 while the session
        # lives on.
        if request.method != "POST" or not request.headers.get(_SESSION_HEADER):
            return
        if response.status_code == 404:
            self._ended = "the server no longer knows the session (HTTP 404 to its session id)"
        else:
            self._refused = self.last

    def ended(self) -> str | None:
        return self._ended

    def refused(self) -> str | None:
        refused, self._refused = self._refused, None
        return refused


class _Transport(NamedTuple):
    open: TransportFactory
    kind: str  # "stdio", "http" or "factory"
    where: str  # where the server is, for errors: "" or " at <url>"
    status: _HttpStatus | None
    ended_by: ServerExit | None = None  # a stdio server's


def _has_descriptor(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    return True


def _forward(reader: TextIO, errlog: TextIO) -> None:
    """Copy a server's stderr to ``errlog`` until the server (every writer) closes it."""
    with reader:
        for line in reader:
            # A closed or failing errlog must not stop the draining: a server whose stderr
            # pipe fills up blocks.
            with contextlib.suppress(Exception):
                errlog.write(line)
                errlog.flush()


@contextlib.asynccontextmanager
async def _stdio_forwarding_stderr(
    params: StdioServerParameters, errlog: TextIO, name: str, line_limit: int, ended_by: ServerExit
) -> AsyncIterator[Any]:
    """``stdio_client`` for an ``errlog`` without a file descriptor (a notebook's or a test
    capture's ``sys.stderr``, an ``io.StringIO``), which a child process cannot write to: the
    server writes to a pipe, and a thread copies the pipe to ``errlog``."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
    writer = os.fdopen(write_fd, "w")
    forwarding = threading.Thread(
        target=_forward, args=(reader, errlog), name=f"mcp-stderr[{name}]", daemon=True
    )
    forwarding.start()
    try:
        async with stdio_group_client(params, writer, line_limit, ended_by) as streams:
            writer.close()  # the server has its own copy; its exit ends the forwarding
            yield streams
    finally:
        writer.close()


def _transport(
    server_params: Any, errlog: TextIO | None, name: str, max_message_bytes: int | None
) -> _Transport:
    """The transport factory, its kind and what errors say about it."""
    if isinstance(server_params, StdioServerParameters):
        params = server_params
        line_limit = LINE_LIMIT if max_message_bytes is None else max_message_bytes
        ended_by = ServerExit()

        def open_stdio() -> AbstractAsyncContextManager[Any]:
            target = errlog if errlog is not None else sys.stderr
            if _has_descriptor(target):
                return stdio_group_client(params, target, line_limit, ended_by)
            return _stdio_forwarding_stderr(params, target, name, line_limit, ended_by)

        return _Transport(open_stdio, "stdio", "", None, ended_by)
    if isinstance(server_params, str):
        if not server_params.startswith(("http://", "https://")):
            raise ValueError(
                f"server_params as a str must be a Streamable HTTP URL, got {server_params!r}"
            )
        url = server_params
        status = _HttpStatus()
        event_limit = DEFAULT_MAX_SSE_EVENT_SIZE if max_message_bytes is None else max_message_bytes

        @contextlib.asynccontextmanager
        async def open_http() -> AsyncIterator[Any]:
            status.reset()
            # A client of our own, with the timeouts the SDK gives its default one, so that its
            # responses' statuses can be seen; the SDK leaves a client it is given to its owner
            # to close.
            client = httpx2.AsyncClient(
                timeout=_HTTP_TIMEOUT,
                event_hooks={"request": [_bound_goodbye], "response": [status.record]},
            )
            async with (
                client,
                streamable_http_client(
                    url, http_client=client, max_sse_event_size=event_limit
                ) as streams,
            ):
                yield streams

        return _Transport(open_http, "http", f" at {url}", status)
    if callable(server_params):
        if max_message_bytes is not None:
            raise ValueError(
                "max_message_bytes bounds the messages of a stdio server or a URL's; a transport "
                "factory sets its own bound (streamable_http_client(url, max_sse_event_size=...))"
            )
        factory: TransportFactory = server_params
        return _Transport(factory, "factory", "", None)
    raise TypeError(
        "server_params must be StdioServerParameters, a Streamable HTTP URL or a transport "
        f"factory, got {type(server_params).__name__}"
    )


async def _bound_goodbye(request: httpx2.Request) -> None:
    """A request hook: the session's DELETE (the only one the SDK sends) gets
    ``_GOODBYE_TIMEOUT`` in place of the client's timeouts."""
    if request.method == "DELETE":
        request.extensions["timeout"] = _GOODBYE_TIMEOUT.as_dict()


def _reconnect_policy(
    reconnect: bool | ReconnectPolicy | None, kind: str
) -> ReconnectPolicy | None:
    if reconnect is None:
        # A URL names a service that may restart; a child process that died is usually a
        # crash that would repeat (and re-running it hides the fault).
        return ReconnectPolicy() if kind == "http" else None
    if isinstance(reconnect, ReconnectPolicy):
        return reconnect
    if reconnect is True:
        return ReconnectPolicy()
    if reconnect is False:
        return None
    raise TypeError("reconnect must be None, a bool or a ReconnectPolicy")


def _check_bounds(
    timeout_ms: Any,
    ping_interval: Any,
    connect_timeout: Any,
    close_timeout: Any,
    max_message_bytes: Any,
) -> None:
    """Each bound is a positive finite number (``timeout_ms`` and ``ping_interval`` may be
    ``None``): a zero or negative ``ping_interval`` pings without pause, a zero or negative
    timeout gives up at once, and an infinite one overflows the waits it bounds."""
    bounds = (
        ("timeout_ms", timeout_ms, "milliseconds", True),
        ("ping_interval", ping_interval, "seconds", True),
        ("connect_timeout", connect_timeout, "seconds", False),
        ("close_timeout", close_timeout, "seconds", False),
    )
    for label, value, unit, optional in bounds:
        if not (optional and value is None) and not positive(value):
            _refuse_number(f"{label} must be a positive number of {unit}", value, (int, float))
    if max_message_bytes is not None and not (
        type(max_message_bytes) is int and max_message_bytes > 0
    ):
        _refuse_number(
            "max_message_bytes must be a positive whole number of bytes", max_message_bytes, (int,)
        )


def _refuse_number(rule: str, value: object, types: tuple[type, ...]) -> NoReturn:
    """``TypeError`` for a value of another type (a ``bool``, a str read from a setting),
    ``ValueError`` for a number out of bounds: the split every other setting makes."""
    if type(value) not in types:
        raise TypeError(f"{rule}, got {type(value).__name__}")
    raise ValueError(f"{rule}, got {value!r}")


def _check(
    name: Any,
    tool_prefix: Any,
    concurrency_safe: Any,
    timeouts: Any,
    roots: Any,
    log_level: Any,
    elicitation: Any,
    sampling: Any,
    on_progress: Any,
    on_list_changed: Any,
) -> None:
    if type(name) is not str:
        raise TypeError(f"name must be a non-empty str, got {type(name).__name__}")
    if not name:
        raise ValueError("name must be a non-empty str, got ''")
    if type(tool_prefix) is not str:
        raise TypeError("tool_prefix must be a str")
    if not (concurrency_safe is None or isinstance(concurrency_safe, bool)) and not callable(
        concurrency_safe
    ):
        raise TypeError("concurrency_safe must be None, a bool or a callable(tool) -> bool")
    if not isinstance(timeouts, Mapping):
        raise TypeError("timeouts must be a mapping of tool name to milliseconds")
    for key, value in timeouts.items():
        if type(key) is not str:
            raise TypeError("timeouts keys must be tool names (str)")
        if not positive(value):
            _refuse_number(
                f"timeouts[{key!r}] must be a positive number of milliseconds", value, (int, float)
            )
    if roots is not None and (isinstance(roots, str | bytes) or not isinstance(roots, Sequence)):
        raise TypeError("roots must be a list of paths")
    for index, root in enumerate(roots or ()):
        # Read only when the server asks for the roots, which may be long after this.
        if not isinstance(root, str | os.PathLike) or isinstance(os.fspath(root), bytes):
            raise TypeError(
                f"roots[{index}] must be a path (a str or a pathlib.Path), got "
                f"{type(root).__name__}"
            )
    if log_level is not None and log_level not in _LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(_LOG_LEVELS)}")
    if not (elicitation is None or elicitation == "approval" or callable(elicitation)):
        raise TypeError('elicitation must be None, "approval" or a callable(ctx, params)')
    callbacks = (
        ("sampling", sampling),
        ("on_progress", on_progress),
        ("on_list_changed", on_list_changed),
    )
    for label, fn in callbacks:
        if fn is not None and not callable(fn):
            raise TypeError(f"{label} must be callable or None")


def register_mcp_server_sync(
    system: ToolSystem,
    name: str,
    server_params: ServerParams,
    *,
    agent: str | None = None,
    concurrency_safe: ConcurrencyPolicy = None,
    tool_prefix: str = "",
    timeout_ms: float | None = None,
    timeouts: Mapping[str, float] | None = None,
    reconnect: bool | ReconnectPolicy | None = None,
    sampling: SamplingCallback | None = None,
    elicitation: Literal["approval"] | ElicitationCallback | None = None,
    roots: Sequence[str | Path] | None = None,
    log_level: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_list_changed: ListChangedCallback | None = None,
    instructions_section: bool = True,
    ping_interval: float | None = None,
    connect_timeout: float = 30.0,
    close_timeout: float = 10.0,
    max_message_bytes: int | None = None,
    errlog: TextIO | None = None,
) -> McpPlugin:
    """Blocking form of ``register_mcp_server`` (same arguments), for threads without a loop.

    It blocks its thread while the server starts (usually well under a second); on an event
    loop, ``await register_mcp_server(...)`` instead: called there it is refused, as
    ``ToolSystem.execute`` is, before a server starts (it would stall every task of that loop
    for as long as the server takes to start, up to ``connect_timeout``).
    """
    loop = running_loop()
    if loop is not None and not driving(loop):
        raise RuntimeError(
            "register_mcp_server_sync() cannot run inside a running event loop; "
            "use await register_mcp_server(...)"
        )
    return _register_sync(
        system,
        name,
        server_params,
        None,
        agent=agent,
        concurrency_safe=concurrency_safe,
        tool_prefix=tool_prefix,
        timeout_ms=timeout_ms,
        timeouts=timeouts,
        reconnect=reconnect,
        sampling=sampling,
        elicitation=elicitation,
        roots=roots,
        log_level=log_level,
        on_progress=on_progress,
        on_list_changed=on_list_changed,
        instructions_section=instructions_section,
        ping_interval=ping_interval,
        connect_timeout=connect_timeout,
        close_timeout=close_timeout,
        max_message_bytes=max_message_bytes,
        errlog=errlog,
    )


def _register_sync(
    system: ToolSystem,
    name: str,
    server_params: ServerParams,
    abandoned: concurrent.futures.Future[None] | None,
    *,
    agent: str | None,
    concurrency_safe: ConcurrencyPolicy,
    tool_prefix: str,
    timeout_ms: float | None,
    timeouts: Mapping[str, float] | None,
    reconnect: bool | ReconnectPolicy | None,
    sampling: SamplingCallback | None,
    elicitation: Literal["approval"] | ElicitationCallback | None,
    roots: Sequence[str | Path] | None,
    log_level: str | None,
    on_progress: ProgressCallback | None,
    on_list_changed: ListChangedCallback | None,
    instructions_section: bool,
    ping_interval: float | None,
    connect_timeout: float,
    close_timeout: float,
    max_message_bytes: int | None,
    errlog: TextIO | None,
) -> McpPlugin:
    """``register_mcp_server_sync``; a connection still under way when ``abandoned`` settles
    (the task awaiting ``register_mcp_server`` was cancelled) is cut short and fails."""
    timeouts = {} if timeouts is None else timeouts
    _check(
        name,
        tool_prefix,
        concurrency_safe,
        timeouts,
        roots,
        log_level,
        elicitation,
        sampling,
        on_progress,
        on_list_changed,
    )
    _check_bounds(timeout_ms, ping_interval, connect_timeout, close_timeout, max_message_bytes)
    transport = _transport(server_params, errlog, name, max_message_bytes)
    open_transport, kind = transport.open, transport.kind
    policy = _reconnect_policy(reconnect, kind)
    if ping_interval is None:
        ping_interval = _PING_INTERVAL
    options = ClientOptions(
        sampling=sampling,
        elicitation=None if elicitation == "approval" else elicitation,
        roots=roots,
        log_level=log_level,
        on_list_changed=on_list_changed,
    )
    release = _claim(system, agent, name)
    owner: PluginHandle | None = None
    scope: AgentScope | None = None
    try:
        if agent is None:
            owner = system.plugin(name)
            tools = owner.tools
        else:
            scope = system.agent(agent)
            tools = scope.tools
        client = McpClient(
            name,
            open_transport,
            agent=agent,
            connect_timeout=connect_timeout,
            reconnect=policy,
            ping_interval=ping_interval,
            options=options,
            session=transport.status,
            probe_failures=kind == "factory",
            ended_by=transport.ended_by,
        )
        if elicitation == "approval":
            # On the connection's callback threads, which its close does not wait for.
            options.elicitation = approval_elicitation(system, client.callbacks)
        plugin = McpPlugin(
            system=system,
            name=name,
            agent=agent,
            client=client,
            tools=tools,
            owner=owner,
            prefix=tool_prefix,
            policy=concurrency_safe,
            timeout_ms=timeout_ms,
            timeouts=timeouts,
            instructions_section=instructions_section,
            on_progress=on_progress,
            close_timeout=close_timeout,
        )
    except BaseException:
        release()
        raise
    plugin.close_with(release)  # the name is free again once the plugin is closed
    try:
        # The server and its connection live no longer than the system they serve, nor than
        # the agent scope whose tools they are: from its start, so that a stop() while it
        # connects ends it then.
        plugin.close_with(close_together(system, system.on_stop, plugin))
        if scope is not None:
            plugin.close_with(close_together(scope, scope.on_close, plugin))
        ready = client.start()
        allowance = connect_timeout + close_timeout
        if abandoned is not None:
            either: tuple[concurrent.futures.Future[Any], ...] = (ready, abandoned)
            concurrent.futures.wait(
                either, allowance, return_when=concurrent.futures.FIRST_COMPLETED
            )
            if abandoned.done() and not ready.done():
                raise McpConnectionError(
                    f'MCP server "{name}" was not registered: the task awaiting the '
                    "registration was cancelled",
                    "MCP_CONNECT_FAILED",
                )
            allowance = 0  # spent above: a listing not in by now is as late as the sync form's
        try:
            listing = ready.result(allowance)
        except concurrent.futures.TimeoutError:
            raise McpConnectionError(
                f'MCP server "{name}"{transport.where} did not answer within {connect_timeout} s',
                "MCP_CONNECT_FAILED",
            ) from None
        except BaseException as exc:
            if client.state == "closed":
                raise _closed_while_connecting(system, name) from None
            if not isinstance(exc, Exception):
                raise
            if _first_cause(exc) is TimeoutError:
                started = " started but" if kind == "stdio" else transport.where
                unreadable = client.unreadable()
                # Its answer may be in that line: a banner printed without a newline, say.
                why = "" if unreadable is None else f"; it sent what is no message: {unreadable}"
                raise McpConnectionError(
                    f'MCP server "{name}"{started} did not initialize and list its tools '
                    f"within connect_timeout={connect_timeout} s{why}",
                    "MCP_CONNECT_FAILED",
                ) from exc
            raise McpConnectionError(
                _connect_failure(
                    name, transport, exc, client.end_reason(), client.initialized_phase()
                ),
                "MCP_CONNECT_FAILED",
            ) from exc
        plugin.adopt(listing)
        if client.state == "closed":  # as the listing came in: the plugin adopted nothing
            raise _closed_while_connecting(system, name)
        # Only now may list changes and reconnects reach the plugin: the first listing is in.
        client.attach(plugin)
    except BaseException:
        plugin.close()
        raise
    return plugin


def _closed_while_connecting(system: ToolSystem, name: str) -> McpConnectionError:
    """The failure of a registration whose plugin ``stop()`` or its agent scope's close closed
    while it connected."""
    closer = "its agent scope closed" if system.running else "the tool system stopped"
    return McpConnectionError(
        f'MCP server "{name}" was not registered: {closer} while it connected',
        "MCP_CONNECT_FAILED",
    )


def _connect_failure(
    name: str, transport: _Transport, exc: BaseException, ended: str | None, phase: str | None
) -> str:
    """Why the first connection failed, naming where the server is; ``ended``: why the
    transport saw the connection end, if it did; ``phase``: what the connection was doing
    after the server initialized (``None`` when it never did)."""
    cause = _first(exc)
    if isinstance(cause, RequestRefused) and cause.method == "tools/list":
        # It started and initialized: what failed is its answer, which its author needs.
        started = " started" if transport.kind == "stdio" else f"{transport.where} initialized"
        reply = json.dumps(cause.reply, ensure_ascii=False)
        return (
            f'MCP server "{name}"{started} but refused to list its tools: it answered '
            f"tools/list with the error {reply} (code {cause.code})"
        )
    if isinstance(cause, UnsupportedProtocol):
        # It started and answered: what failed is the SDK's reach, which an upgrade may fix.
        where = " started but" if transport.kind == "stdio" else transport.where
        return (
            f'MCP server "{name}"{where} answered initialize with the protocol version '
            f'"{cause.version}", which the installed mcp SDK does not speak (it speaks '
            f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}); a newer mcp release may speak it"
        )
    if transport.kind == "stdio":
        if isinstance(cause, MCPError) and is_closed(cause) and ended not in (None, SERVER_CLOSED):
            # The transport ended it and said why (a line past the limit).
            return f'MCP server "{name}" could not be started: {ended}'
        if isinstance(cause, MCPError) and is_closed(cause):
            # The SDK's "Connection closed": the process started, then its output ended.
            exited = transport.ended_by.text if transport.ended_by is not None else None
            how = exited or "it exited (or closed its stdout)"
            when = (
                "before it was initialized"
                if phase is None
                else f"after it was initialized, while {phase}"
            )
            return (
                f'MCP server "{name}" could not be started: {how} {when}; '
                "its stderr (errlog) may say why"
            )
        return f'MCP server "{name}" could not be started: {describe(exc)}'
    text = f'MCP server "{name}" could not be connected{transport.where}: {describe(exc)}'
    status = transport.status.last if transport.status is not None else None
    return text if status is None else f"{text} ({status})"


_claims_lock = threading.Lock()
_claimed: weakref.WeakKeyDictionary[ToolSystem, set[tuple[str | None, str]]] = (
    weakref.WeakKeyDictionary()
)
"""The plugin names in use, per tool system, with the agent each is registered for."""


def _claim(system: ToolSystem, agent: str | None, name: str) -> Callable[[], None]:
    """Take ``name`` for a plugin of ``agent`` in ``system`` (its instructions section, its log
    lines and its progress events are known by it); the returned function gives it back."""
    key = (agent, name)
    with _claims_lock:
        names = _claimed.setdefault(system, set())
        if key in names:
            scope = "" if agent is None else f' for agent "{agent}"'
            raise ValueError(
                f'an MCP plugin named "{name}"{scope} is registered already in this tool '
                "system; close it first or give this server another name"
            )
        names.add(key)

    def release() -> None:
        with _claims_lock:
            names.discard(key)

    return release


def _first(exc: BaseException) -> BaseException:
    """The first exception inside the groups anyio task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _first_cause(exc: BaseException) -> type[BaseException]:
    """The type of the first exception inside the groups anyio task groups raise."""
    return type(_first(exc))


async def register_mcp_server(
    system: ToolSystem,
    name: str,
    server_params: ServerParams,
    *,
    agent: str | None = None,
    concurrency_safe: ConcurrencyPolicy = None,
    tool_prefix: str = "",
    timeout_ms: float | None = None,
    timeouts: Mapping[str, float] | None = None,
    reconnect: bool | ReconnectPolicy | None = None,
    sampling: SamplingCallback | None = None,
    elicitation: Literal["approval"] | ElicitationCallback | None = None,
    roots: Sequence[str | Path] | None = None,
    log_level: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_list_changed: ListChangedCallback | None = None,
    instructions_section: bool = True,
    ping_interval: float | None = None,
    connect_timeout: float = 30.0,
    close_timeout: float = 10.0,
    max_message_bytes: int | None = None,
    errlog: TextIO | None = None,
) -> McpPlugin:
    """Connect to one MCP server and register its tools; return the ``McpPlugin`` that owns them.

    ``server_params``: ``StdioServerParameters`` (the server runs as a child process in its
    own session; its stderr goes to ``errlog``, default ``sys.stderr``), a Streamable HTTP URL
    (``"http://127.0.0.1:8000/mcp"``), or a transport factory (a zero-argument callable
    returning an async context manager that yields ``(read, write)``).

    Tools are registered through ``system.plugin(name)``, or in agent ``agent``'s scope, each
    as ``tool_prefix + <MCP name>`` with the server's input schema as ``parameters``; the list
    follows the server's ``tools/list_changed``. ``concurrency_safe``: ``None`` (default)
    trusts ``readOnlyHint``, ``True``/``False`` applies to all, a callable gets each tool's MCP
    description (wire form) and returns a bool (anything else raises ``TypeError``).
    ``timeout_ms`` is every tool's deadline, ``timeouts`` per tool (by MCP or registered name,
    in milliseconds); a deadline cancels the request (``TOOL_TIMEOUT``) and is the
    ``timeout_ms`` the timeout policy reads.

    ``max_message_bytes`` bounds one message from the server: a line of a stdio server's output
    (256 MiB by default; past it the connection ends) or a server-sent event over a URL (1 MiB
    by default, the SDK's; past it the call fails). A transport factory sets its own bound.

    ``reconnect``: ``None`` (default) reconnects Streamable HTTP servers (``ReconnectPolicy()``)
    and not stdio servers or factories; ``True``/``False`` or a ``ReconnectPolicy`` decide.
    ``ping_interval`` (seconds; default 15) checks that the server still answers.

    Client capabilities, each advertised only when given: ``sampling`` (a callback answering
    ``sampling/createMessage``), ``elicitation`` (``"approval"``: routed to
    ``system.approval``; or a callback), ``roots`` (paths listed as ``file://`` roots). Server
    log messages always go to structlog (logger ``dsh_tools.mcp``, with ``server=name``);
    ``log_level`` asks the server for that level. Progress notifications become session
    events ``tool/progress`` (``call_id``, ``tool``, ``server``, ``progress``, ``total``,
    ``message``; at most 1,000 a request, the last then the latest with ``dropped``) and reach
    ``on_progress``; ``on_list_changed("resources" | "prompts")``
    hears when the server's resources or prompts change. The server's instructions become the prompt
    section ``mcp:<name>`` unless ``instructions_section=False``.

    Raises ``McpConnectionError`` (``MCP_CONNECT_FAILED``) when the server cannot be started,
    initialized or listed within ``connect_timeout`` seconds, and whatever ``register`` raises
    (a duplicate name, say); in every failure nothing stays registered and the server is
    stopped. If the awaiting task is cancelled, a connection still under way is cut short, and a
    registration that finished meanwhile is closed again at once; ``CancelledError`` is raised
    once that is done: the server stopped, the connection's threads ended, the name free.
    """
    done: concurrent.futures.Future[McpPlugin] = concurrent.futures.Future()
    options: dict[str, Any] = {
        "agent": agent,
        "concurrency_safe": concurrency_safe,
        "tool_prefix": tool_prefix,
        "timeout_ms": timeout_ms,
        "timeouts": timeouts,
        "reconnect": reconnect,
        "sampling": sampling,
        "elicitation": elicitation,
        "roots": roots,
        "log_level": log_level,
        "on_progress": on_progress,
        "on_list_changed": on_list_changed,
        "instructions_section": instructions_section,
        "ping_interval": ping_interval,
        "connect_timeout": connect_timeout,
        "close_timeout": close_timeout,
        "max_message_bytes": max_message_bytes,
        "errlog": errlog,
    }

    abandoned: concurrent.futures.Future[None] = concurrent.futures.Future()
    ended: concurrent.futures.Future[None] = concurrent.futures.Future()

    def connect() -> None:
        try:
            try:
                plugin = _register_sync(system, name, server_params, abandoned, **options)
            except BaseException as exc:
                done.set_exception(exc)
                return
            done.set_result(plugin)
            if abandoned.done():  # it finished as its caller was cancelled: closed again
                plugin.close()
        finally:
            ended.set_result(None)

    done.set_running_or_notify_cancel()
    registering = threading.Thread(target=connect, name=f"mcp-connect[{name}]", daemon=True)
    registering.start()
    waiting = asyncio.wrap_future(done)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        # A connection still under way is cut short (its server stopped, its name given
        # back); one that finished meanwhile is closed again. Whichever, in the thread that
        # registers, and the cancellation goes on once that thread is through: left to end
        # later, the server outlived the cancellation and its name stayed taken, so a retry
        # under it was refused.
        abandoned.set_result(None)
        waiting.add_done_callback(retrieve)  # the failure is expected: nobody awaits it
        await wait_out(asyncio.wrap_future(ended))
        registering.join()  # past its last step already
        if done.exception() is None:  # finished as abandoned was set, after the thread looked
            await wait_out(asyncio.ensure_future(asyncio.to_thread(done.result().close)))
        raise
