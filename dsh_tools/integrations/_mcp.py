"""Register the tools of one MCP server as raw tool definitions, through the official ``mcp`` SDK.

One server is one plugin: ``register_mcp_server`` (``async``) or ``register_mcp_server_sync``
starts the server (``StdioServerParameters``, or any transport factory), lists its tools and
registers each as a raw ``ToolDefinition`` through one ``system.plugin(name)`` owner, or through
an agent's scope when ``agent`` is given. ``McpPlugin.close()`` disposes those registrations
(last first) and then closes the session, which stops the server process.

Each registered tool:

- ``parameters``: the server's ``inputSchema`` as it is (raw registrations own their input
  validation; the server validates and reports bad arguments as a tool error);
- output: the value is ``{"content": [<MCP content, wire form>], "is_error": false}`` plus
  ``"structured_content"`` when the server sent one; ``render`` maps MCP content to content
  blocks (text, image, audio; embedded resources and links as text or images);
- body: calls the tool through the session; an abort of ``run_ctx.signal`` cancels the MCP
  request (the SDK sends ``notifications/cancelled``) and the call fails with ``ABORTED``;
- a result the server flags ``isError`` becomes a failed result (``McpToolError``, code
  ``MCP_TOOL_ERROR``, message the error's text); a request that fails (protocol error, lost
  connection) is ``MCP_REQUEST_FAILED``; a call after ``close()`` is ``MCP_DISCONNECTED``.

The MCP client lives on one event loop for its whole life, on a background thread owned by the
plugin: tool bodies run on other loops (the caller's per-thread loop for ``system.execute``, the
system loop for batches), so each call is submitted to the client loop with
``asyncio.run_coroutine_threadsafe`` and awaited with ``asyncio.wrap_future``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import structlog
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types

from ..actors import AbortError, HarnessError, ToolArgsError
from ..registry import (
    Disposer,
    LosslessJsonError,
    ToolDefinition,
    ToolOutput,
    ToolsHandle,
    compact_json,
    snapshot_json,
    thaw,
)

if TYPE_CHECKING:
    from .._system import PluginHandle, ToolSystem

__all__ = [
    "MCP_OUTPUT_SCHEMA",
    "McpConnectionError",
    "McpPlugin",
    "McpToolError",
    "register_mcp_server",
    "register_mcp_server_sync",
]

_log = structlog.get_logger("dsh_tools.mcp")

TransportFactory = Callable[[], AbstractAsyncContextManager[Any]]
"""A zero-argument callable returning an async context manager that yields ``(read, write)``
streams (extra items are ignored), for example ``lambda: streamable_http_client(url)``."""

ConcurrencyPolicy = bool | Callable[[Mapping[str, Any]], bool] | None

MCP_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "an MCP tool result",
    "additionalProperties": False,
    "properties": {
        "content": {
            "type": "array",
            "description": "the MCP content blocks, in MCP wire form",
            "items": {
                "type": "object",
                "additionalProperties": True,
                "properties": {"type": {"type": "string"}},
                "required": ["type"],
            },
        },
        "structured_content": {"description": "the MCP structured content, when sent"},
        "is_error": {"type": "boolean"},
    },
    "required": ["content", "is_error"],
}
"""The output schema of every MCP tool (it passes the enforced subset)."""


class McpToolError(HarnessError):
    """An MCP tool call that failed.

    Code ``MCP_TOOL_ERROR``: the server ran the tool and flagged the result ``isError`` (the
    message is the error's text). Code ``MCP_REQUEST_FAILED``: the request itself failed (a
    protocol error, a lost connection, a malformed result).
    """


class McpConnectionError(HarnessError):
    """An MCP server that could not be used.

    Code ``MCP_CONNECT_FAILED``: starting, initializing, listing or registering failed.
    Code ``MCP_DISCONNECTED``: a call after ``close()`` (or one that ``close()`` cut short).
    """


# --- content -----------------------------------------------------------------------------------


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _media_block(kind: str, data: Any, mime_type: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, "mime_type": mime_type}


def _render_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """One MCP content block (wire form) as a content block a harness can hand to a model."""
    kind = block.get("type")
    if kind == "text":
        return _text_block(str(block.get("text", "")))
    if kind in ("image", "audio"):
        return _media_block(str(kind), block.get("data", ""), block.get("mimeType"))
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, Mapping) else {}
        uri = resource.get("uri", "")
        mime = resource.get("mimeType")
        if "text" in resource:
            return _text_block(str(resource["text"]))
        if isinstance(mime, str) and mime.startswith("image/") and "blob" in resource:
            return _media_block("image", resource["blob"], mime)
        return _text_block(f"[binary resource {uri} ({mime or 'unknown type'})]")
    if kind == "resource_link":
        name = block.get("name") or block.get("uri", "")
        text = f"[resource link: {name} <{block.get('uri', '')}>]"
        description = block.get("description")
        if description:
            text += f" {description}"
        return _text_block(text)
    return _text_block(f"[unsupported MCP content: {kind}]")


def _render(args: Any, value: Any) -> list[dict[str, Any]]:
    """``render`` of every MCP tool: the content blocks, or the structured content as JSON."""
    content = value["content"]
    if not content and "structured_content" in value:
        return [_text_block(compact_json(value["structured_content"]))]
    return [_render_block(block) for block in content]


def _error_text(content: Any) -> str:
    texts = [
        block["text"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and "text" in block
    ]
    return "\n".join(str(t) for t in texts)


# --- the client loop ---------------------------------------------------------------------------


class _Listing:
    __slots__ = ("instructions", "server_info", "tools")

    def __init__(
        self, tools: list[dict[str, Any]], server_info: Any, instructions: str | None
    ) -> None:
        self.tools = tools
        self.server_info = server_info
        self.instructions = instructions


async def _list_all_tools(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    result = await session.list_tools()
    while True:
        tools.extend(
            tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in result.tools
        )
        cursor = result.next_cursor
        if not cursor:
            return tools
        params = mcp_types.PaginatedRequestParams(cursor=cursor)
        result = await session.list_tools(params=params)


class _Connection:
    """One MCP client session on its own thread and event loop, for the plugin's lifetime."""

    def __init__(
        self, label: str, open_transport: TransportFactory, connect_timeout: float
    ) -> None:
        self.label = label
        self._open_transport = open_transport
        self._connect_timeout = connect_timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"mcp[{label}]", daemon=True)
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._serving: concurrent.futures.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._calls: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self._closing = False
        self._closed = threading.Event()

    # -- lifecycle --

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
            finally:
                loop.close()

    def start(self) -> concurrent.futures.Future[_Listing]:
        """Start the thread and the session; the future settles once the tools are listed."""
        ready: concurrent.futures.Future[_Listing] = concurrent.futures.Future()
        self._thread.start()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        return ready

    async def _serve(self, ready: concurrent.futures.Future[_Listing]) -> None:
        self._task = asyncio.current_task()
        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._open_transport())
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                with anyio.fail_after(self._connect_timeout):
                    init = await session.initialize()
                    tools = await _list_all_tools(session)
                self._session = session
                if not ready.done():
                    ready.set_result(_Listing(tools, init.server_info, init.instructions))
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                _log.warning("MCP session ended with an error", server=self.label, error=str(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None

    def close(self, timeout: float) -> None:
        """Cut in-flight calls short, end the session (stopping the server) and the thread."""
        with self._lock:
            first = not self._closing
            self._closing = True
            calls = list(self._calls)
        if not first:
            self._closed.wait(timeout)
            return
        try:
            for call in calls:
                call.cancel()
            serving = self._serving
            if serving is not None and self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._request_stop)
                try:
                    serving.result(timeout)
                except concurrent.futures.TimeoutError:
                    _log.warning("MCP session did not close in time", server=self.label)
                    serving.cancel()
                except BaseException as exc:  # already reported by _serve
                    _log.debug("MCP session closed with an error", error=str(exc))
            if self._thread.is_alive():
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout)
        finally:
            self._closed.set()

    def _request_stop(self) -> None:
        """On the client loop: end a live session; cut a connection attempt short."""
        self._stop.set()
        task = self._task
        if self._session is None and task is not None and not task.done():
            task.cancel()

    @property
    def closed(self) -> bool:
        return self._closing

    # -- calls --

    def _disconnected(self) -> McpConnectionError:
        return McpConnectionError(f'MCP server "{self.label}" is not connected', "MCP_DISCONNECTED")

    def call(self, tool: str, arguments: dict[str, Any]) -> concurrent.futures.Future[Any]:
        """Submit ``tools/call`` to the client loop; raises ``McpConnectionError`` when closed."""
        with self._lock:
            if self._closing:
                raise self._disconnected()
            try:
                future = asyncio.run_coroutine_threadsafe(self._call(tool, arguments), self._loop)
            except RuntimeError:  # the loop is gone
                raise self._disconnected() from None
            self._calls.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._calls.discard(future)

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        session = self._session
        if session is None:
            raise self._disconnected()
        result = await session.call_tool(tool, arguments)
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped


# --- tool definitions --------------------------------------------------------------------------


def _arguments(args: Any) -> dict[str, Any]:
    try:
        plain = thaw(args, "arguments")
    except LosslessJsonError as exc:
        raise ToolArgsError([f"arguments must be JSON data: {exc}"]) from None
    if type(plain) is not dict:
        raise ToolArgsError(["arguments must be a JSON object"])
    return plain


def _value(tool: str, result: Mapping[str, Any]) -> dict[str, Any]:
    content = result.get("content", [])
    if result.get("isError") is True:
        text = _error_text(content)
        raise McpToolError(text or f'MCP tool "{tool}" reported an error', "MCP_TOOL_ERROR")
    value: dict[str, Any] = {"content": content, "is_error": False}
    if result.get("structuredContent") is not None:
        value["structured_content"] = result["structuredContent"]
    return value


def _body(connection: _Connection, tool: str) -> Callable[..., Any]:
    async def execute(args: Any, run_ctx: Any) -> dict[str, Any]:
        arguments = _arguments(args)
        signal = run_ctx.signal
        if signal.aborted:
            raise AbortError()
        future = connection.call(tool, arguments)
        remove = signal.add_callback(lambda _reason: future.cancel())
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our own task is being cancelled: let it go
            if signal.aborted:
                raise AbortError() from None
            raise McpConnectionError(
                f'MCP server "{connection.label}" closed during the call', "MCP_DISCONNECTED"
            ) from None
        except HarnessError:
            raise
        except Exception as exc:
            raise McpToolError(f"MCP request failed: {exc}", "MCP_REQUEST_FAILED") from exc
        finally:
            remove()
        return _value(tool, result)

    execute.__name__ = f"mcp[{connection.label}].{tool}"
    execute.__qualname__ = execute.__name__
    return execute


def _always_safe(args: Any) -> bool:
    return True


def _is_safe(policy: ConcurrencyPolicy, tool: Mapping[str, Any]) -> bool:
    if policy is None:
        annotations = tool.get("annotations")
        return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
    if isinstance(policy, bool):
        return policy
    return policy(tool) is True


def _definition(
    connection: _Connection,
    tool: Mapping[str, Any],
    *,
    prefix: str,
    policy: ConcurrencyPolicy,
    timeout_ms: float | None,
) -> ToolDefinition:
    name = tool["name"]
    try:
        parameters = snapshot_json(tool.get("inputSchema", {"type": "object"}), "inputSchema")
    except LosslessJsonError as exc:
        raise McpConnectionError(
            f'MCP tool "{name}" has an input schema that is not lossless JSON: {exc}',
            "MCP_CONNECT_FAILED",
        ) from None
    description = tool.get("description") or tool.get("title") or ""
    return ToolDefinition(
        name=prefix + name,
        description=str(description),
        parameters=parameters,
        output=ToolOutput(MCP_OUTPUT_SCHEMA, _render),
        execute=_body(connection, name),
        is_concurrency_safe=_always_safe if _is_safe(policy, tool) else None,
        timeout_ms=timeout_ms,
    )


# --- the plugin --------------------------------------------------------------------------------


class McpPlugin:
    """One MCP server's registrations and its live session.

    ``name`` is the plugin name, ``agent`` the scope the tools were registered in (``None``:
    global), ``tool_names`` the registered names in server order, ``server_info`` the server's
    ``Implementation`` in wire form and ``instructions`` its instructions text (or ``None``).
    ``close()`` (or ``await aclose()``, or leaving a ``with`` / ``async with`` block) disposes
    the registrations last first, then ends the session and the server process; it is
    idempotent.
    """

    def __init__(
        self,
        *,
        name: str,
        agent: str | None,
        connection: _Connection,
        listing: _Listing,
        plugin: PluginHandle | None,
        disposers: list[Disposer],
        tool_names: tuple[str, ...],
        close_timeout: float,
    ) -> None:
        self.name = name
        self.agent = agent
        self.tool_names = tool_names
        self.server_info: dict[str, Any] | None = (
            listing.server_info.model_dump(mode="json", by_alias=True, exclude_none=True)
            if listing.server_info is not None
            else None
        )
        self.instructions = listing.instructions
        self._connection = connection
        self._plugin = plugin
        self._disposers = disposers
        self._close_timeout = close_timeout
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._connection.closed

    def close(self) -> None:
        """Dispose the registrations (LIFO), then close the session and the server process.

        Blocks for at most a few seconds (the SDK's shutdown: close stdin, wait, terminate,
        kill). Calls still running fail with ``MCP_DISCONNECTED``.
        """
        with self._lock:
            disposers, self._disposers = self._disposers, []
            plugin, self._plugin = self._plugin, None
        try:
            _dispose(disposers, plugin)
        finally:
            self._connection.close(self._close_timeout)

    async def aclose(self) -> None:
        """``close()`` on a worker thread, for callers on an event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> McpPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> McpPlugin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<McpPlugin {self.name!r} {state} tools={list(self.tool_names)}>"


def _dispose(disposers: list[Disposer], plugin: PluginHandle | None) -> None:
    try:
        for dispose in reversed(disposers):
            try:
                dispose()
            except Exception as exc:
                _log.warning("disposing an MCP tool failed", error=str(exc))
    finally:
        if plugin is not None:
            plugin.close()


def _transport(server_params: Any, errlog: TextIO | None) -> TransportFactory:
    if isinstance(server_params, StdioServerParameters):
        params = server_params

        def open_stdio() -> AbstractAsyncContextManager[Any]:
            return stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)

        return open_stdio
    if callable(server_params):
        factory: TransportFactory = server_params
        return factory
    raise TypeError(
        "server_params must be StdioServerParameters or a transport factory, got "
        f"{type(server_params).__name__}"
    )


def register_mcp_server_sync(
    system: ToolSystem,
    name: str,
    server_params: StdioServerParameters | TransportFactory,
    *,
    agent: str | None = None,
    concurrency_safe: ConcurrencyPolicy = None,
    tool_prefix: str = "",
    timeout_ms: float | None = None,
    connect_timeout: float = 30.0,
    close_timeout: float = 10.0,
    errlog: TextIO | None = None,
) -> McpPlugin:
    """Blocking form of ``register_mcp_server`` (same arguments), for threads without a loop.

    It blocks its thread while the server starts (usually well under a second); on an event
    loop, ``await register_mcp_server(...)`` instead.
    """
    if type(name) is not str or not name:
        raise TypeError("name must be a non-empty str")
    if type(tool_prefix) is not str:
        raise TypeError("tool_prefix must be a str")
    if not (concurrency_safe is None or isinstance(concurrency_safe, bool)) and not callable(
        concurrency_safe
    ):
        raise TypeError("concurrency_safe must be None, a bool or a callable(tool) -> bool")
    open_transport = _transport(server_params, errlog)
    handle_owner: PluginHandle | None = None
    if agent is None:
        handle_owner = system.plugin(name)
        tools: ToolsHandle = handle_owner.tools
    else:
        tools = system.agent(agent).tools
    connection = _Connection(name, open_transport, connect_timeout)
    disposers: list[Disposer] = []
    try:
        ready = connection.start()
        try:
            listing = ready.result(connect_timeout + close_timeout)
        except concurrent.futures.TimeoutError:
            raise McpConnectionError(
                f'MCP server "{name}" did not answer within {connect_timeout} s',
                "MCP_CONNECT_FAILED",
            ) from None
        except Exception as exc:
            raise McpConnectionError(
                f'MCP server "{name}" could not be started: {_describe(exc)}',
                "MCP_CONNECT_FAILED",
            ) from exc
        names: list[str] = []
        for tool in listing.tools:
            definition = _definition(
                connection,
                tool,
                prefix=tool_prefix,
                policy=concurrency_safe,
                timeout_ms=timeout_ms,
            )
            disposers.append(tools.register(definition))
            names.append(definition.name)
    except BaseException:
        try:
            _dispose(disposers, handle_owner)
        finally:
            connection.close(close_timeout)
        raise
    return McpPlugin(
        name=name,
        agent=agent,
        connection=connection,
        listing=listing,
        plugin=handle_owner,
        disposers=disposers,
        tool_names=tuple(names),
        close_timeout=close_timeout,
    )


async def register_mcp_server(
    system: ToolSystem,
    name: str,
    server_params: StdioServerParameters | TransportFactory,
    *,
    agent: str | None = None,
    concurrency_safe: ConcurrencyPolicy = None,
    tool_prefix: str = "",
    timeout_ms: float | None = None,
    connect_timeout: float = 30.0,
    close_timeout: float = 10.0,
    errlog: TextIO | None = None,
) -> McpPlugin:
    """Connect to one MCP server and register its tools; return the ``McpPlugin`` that owns them.

    ``server_params`` is ``StdioServerParameters`` (the server runs as a child process in its
    own session; its stderr goes to ``errlog``, default ``sys.stderr``) or a transport factory
    (a zero-argument callable returning an async context manager that yields ``(read, write)``).
    The tools are registered through ``system.plugin(name)``, or in agent ``agent``'s scope,
    each as ``tool_prefix + <MCP name>`` with the server's input schema as ``parameters`` and the
    ``timeout_ms`` read by the timeout policy. ``concurrency_safe`` says which tools may overlap
    their siblings: ``None`` (the default) trusts the server's ``readOnlyHint`` annotation,
    ``True``/``False`` applies to all, and a callable gets each tool's MCP description (wire
    form) and returns ``True`` for a safe one. Raises ``McpConnectionError``
    (``MCP_CONNECT_FAILED``) when the server cannot be started, initialized or listed within
    ``connect_timeout`` seconds, and whatever ``register`` raises (a duplicate name, say); in
    every failure nothing stays registered and the server is stopped. If the awaiting task is
    cancelled, the registration finishes in the background and is closed again at once.
    """
    done: concurrent.futures.Future[McpPlugin] = concurrent.futures.Future()

    def connect() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(
                register_mcp_server_sync(
                    system,
                    name,
                    server_params,
                    agent=agent,
                    concurrency_safe=concurrency_safe,
                    tool_prefix=tool_prefix,
                    timeout_ms=timeout_ms,
                    connect_timeout=connect_timeout,
                    close_timeout=close_timeout,
                    errlog=errlog,
                )
            )
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=connect, name=f"mcp-connect[{name}]", daemon=True).start()
    try:
        return await asyncio.shield(asyncio.wrap_future(done))
    except asyncio.CancelledError:
        # Not tied to the caller's loop, which may be closing: the plugin is closed as soon as
        # the registration finishes, in the thread that finishes it.
        done.add_done_callback(_close_abandoned)
        raise


def _close_abandoned(done: concurrent.futures.Future[McpPlugin]) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    done.result().close()


def _describe(exc: BaseException) -> str:
    """A readable cause, unwrapping the exception groups anyio task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
