"""MCP tools as raw ``ToolDefinition``s: schemas, metadata, the body that calls the server.

Each registered tool:

- ``parameters``: the server's ``inputSchema`` as it is (raw registrations own their input
  validation; the server validates and reports bad arguments as a tool error);
- output: the value is ``{"content": [<MCP content, wire form>], "is_error": false}`` plus
  ``"structured_content"`` when the server sent one; when the tool declares an
  ``outputSchema``, it (or, outside the enforced subset, its never-narrower projection into the
  subset) is the schema of ``structured_content``, so Code Mode types the result; ``render``
  gives content blocks in the MCP shapes;
- body: reads a ``null`` given for an optional property whose schema refuses ``null`` as absent
  (strict-mode exports send them), then calls the tool through the session with a progress
  token; an abort cancels the MCP
  request (the SDK sends ``notifications/cancelled``) and the call fails with ``ABORTED``;
- failure: an ``isError`` result fails the call (``MCP_TOOL_ERROR``, its text the message);
  its other blocks (images, audio, resources) follow ``Error: <message>`` in the content, put
  there by the tool's ``finalize_content`` (``_error_content``);
- metadata: ``readOnlyHint`` makes it concurrency-safe (by default), ``timeout_ms`` comes from
  ``timeouts`` or the plugin's default and is enforced on the request itself as well as read
  by the timeout policy; ``mcp_tool_info(definition)`` gives hooks the title and hints.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ...actors import (
    ExecutionToken,
    HarnessError,
    JsonSchemaError,
    ToolArgsError,
    ToolTimeoutError,
)
from ...actors._logging import get_logger
from ...registry import (
    LosslessJsonError,
    ToolDefinition,
    ToolOutput,
    assert_supported_json_schema,
    compact_json,
    optional_null_dropper,
    snapshot_json,
    thaw,
    to_subset_schema,
)
from ._client import McpClient
from ._content import error_text, output_validator, render, violation
from ._error_content import ERROR_CODE, finalize_error_content, keep_error_blocks
from ._errors import McpConnectionError, McpToolError
from ._progress import CallProgress, ProgressSink
from ._types import McpCallRef, McpProgress, McpToolInfo

__all__ = [
    "MCP_OUTPUT_SCHEMA",
    "ConcurrencyPolicy",
    "build_definition",
    "mcp_tool_info",
    "needs_tasks",
]

_log = get_logger("dsh_tools.mcp")

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
"""The output schema of an MCP tool without a declared output schema (it passes the enforced
subset); a tool that declares one gets it as the schema of ``structured_content``."""

_INFO: weakref.WeakKeyDictionary[Callable[..., Any], McpToolInfo] = weakref.WeakKeyDictionary()


def mcp_tool_info(definition: ToolDefinition | None) -> McpToolInfo | None:
    """What the MCP server said about a registered tool (title, hints, schemas), or ``None``
    for a tool that did not come from an MCP server. In a hook:
    ``mcp_tool_info(system.tools.get(exec.name, exec.agent))``."""
    if definition is None:
        return None
    return _INFO.get(definition.execute)


def needs_tasks(tool: Mapping[str, Any]) -> bool:
    """Whether the tool can only be called as a task (task-augmented execution)."""
    execution = tool.get("execution")
    return isinstance(execution, Mapping) and execution.get("taskSupport") == "required"


def _arguments(args: Any) -> dict[str, Any]:
    try:
        plain = thaw(args, "arguments")
    except LosslessJsonError as exc:
        raise ToolArgsError([f"arguments must be JSON data: {exc}"]) from None
    if type(plain) is not dict:
        raise ToolArgsError(["arguments must be a JSON object"])
    return plain


class _Tool:
    """What the body of one registered MCP tool needs."""

    __slots__ = ("client", "drop_optional_nulls", "info", "progress", "validator")

    def __init__(
        self, client: McpClient, info: McpToolInfo, progress: ProgressSink, validator: Any
    ) -> None:
        self.client = client
        self.info = info
        self.progress = progress
        self.validator = validator
        # A model in strict mode sends null for an optional property it leaves out; the server
        # would refuse a null its schema does not allow, so it is read as absent here, as the
        # registry does for the tools it validates itself.
        self.drop_optional_nulls = optional_null_dropper(info.input_schema)

    def value(self, result: Mapping[str, Any], token: ExecutionToken) -> dict[str, Any]:
        content = result.get("content", [])
        name = self.info.mcp_name
        if result.get("isError") is True:
            # Its images, audio and resources follow the error text (``_error_content``).
            keep_error_blocks(token, content)
            text = error_text(content)
            if not text:
                text = f'MCP tool "{name}" reported an error'
                # Its structured content is then the only detail the model can act on, as for
                # a successful result that has nothing else (``render``).
                structured = result.get("structuredContent")
                if structured is not None:
                    # an integer past 64 bits, say, is no lossless JSON: left unsaid
                    with contextlib.suppress(LosslessJsonError):
                        text += f": {compact_json(structured)}"
            raise McpToolError(text, ERROR_CODE)
        value: dict[str, Any] = {"content": content, "is_error": False}
        structured = result.get("structuredContent")
        if structured is not None:
            value["structured_content"] = structured
        if self.validator is not None:
            if structured is None:
                raise McpToolError(
                    f'MCP tool "{name}" declares an output schema but returned no structured '
                    "content",
                    "MCP_INVALID_OUTPUT",
                )
            problem = violation(self.validator, structured)
            if problem is not None:
                raise McpToolError(
                    f'MCP tool "{name}" returned output that does not match its output schema '
                    f"{problem}",
                    "MCP_INVALID_OUTPUT",
                )
        return value


def _body(tool: _Tool) -> Callable[..., Any]:
    client = tool.client
    info = tool.info

    drop_optional_nulls = tool.drop_optional_nulls

    async def execute(args: Any, run_ctx: Any) -> dict[str, Any]:
        if drop_optional_nulls is not None:
            args = drop_optional_nulls(args)
        arguments = _arguments(args)
        # The body never reads ``run_ctx.signal``: so the pipeline cancels its task when the
        # call is aborted (its signal, ``stop()``), the cancellation cancels the request (the
        # SDK tells the server), and the call settles ``ABORTED`` with the abort's reason as
        # any cancelled body does. A body that read its signal would have to settle on its own,
        # and an ``AbortError`` it raised would carry no reason.
        ref = McpCallRef(run_ctx.call_id, run_ctx.name, run_ctx.agent)

        # The call's own record of its progress, so that a server that floods it cannot grow
        # the session log without bound (``_progress``).
        call_progress = CallProgress(tool.progress)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            call_progress.add(
                McpProgress(
                    client.label, ref.call_id, ref.tool, ref.agent, progress, total, message
                )
            )

        future = client.call_tool(ref, info.mcp_name, arguments, on_progress=on_progress)
        # The deadline cancels the request the way an abort does (one path, so the SDK's
        # notifications/cancelled goes out whichever of this and a timeout policy fires).
        expired: list[bool] = []
        deadline = None
        if info.timeout_ms is not None:

            def expire() -> None:
                expired.append(True)
                future.cancel()

            deadline = asyncio.get_running_loop().call_later(info.timeout_ms / 1000, expire)
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the call is aborted or interrupted: the pipeline settles it
            if expired and info.timeout_ms is not None:
                raise ToolTimeoutError(info.timeout_ms) from None
            verb = "closed" if client.cut_reason() == "closed" else "disconnected"
            raise McpConnectionError(
                f'MCP server "{client.label}" {verb} during the call', "MCP_DISCONNECTED"
            ) from None
        except HarnessError:
            raise
        except Exception as exc:
            raise McpToolError(f"MCP request failed: {exc}", "MCP_REQUEST_FAILED") from exc
        finally:
            if deadline is not None:
                deadline.cancel()
            # The request is over (answered, cancelled or cut): its held progress is recorded
            # now, before the pipeline records the call's result.
            call_progress.end()
        return tool.value(result, run_ctx.token)

    execute.__name__ = f"mcp[{client.label}].{info.mcp_name}"
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
    verdict = policy(tool)
    if not isinstance(verdict, bool):
        # A truthy non-bool (a regex match, a coroutine of an async callable) would read as
        # False, running a tool meant to overlap its siblings alone without a word.
        if inspect.iscoroutine(verdict):
            verdict.close()
        raise TypeError(
            f"concurrency_safe must return a bool, got {_type_name(verdict)} for MCP tool "
            f'"{tool.get("name")}"'
        )
    return verdict


def _type_name(value: object) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _output_schema(declared: Any, name: str) -> dict[str, Any]:
    if not isinstance(declared, Mapping):
        return MCP_OUTPUT_SCHEMA
    subset: Any = dict(declared)
    try:
        assert_supported_json_schema(subset)
    except (JsonSchemaError, TypeError, ValueError):
        # Outside the enforced subset ($ref, formats, constraints...): its projection into the
        # subset is never narrower, so every output the adapter accepts (it checks the declared
        # schema itself) also passes the registry, and Code Mode still types the result.
        subset = to_subset_schema(declared)
        try:
            assert_supported_json_schema(subset)
        except (JsonSchemaError, TypeError, ValueError):
            return MCP_OUTPUT_SCHEMA
    schema = copy.deepcopy(MCP_OUTPUT_SCHEMA)
    schema["properties"]["structured_content"] = subset
    schema["required"] = ["content", "is_error", "structured_content"]
    return schema


def build_definition(
    client: McpClient,
    tool: Mapping[str, Any],
    *,
    name: str,
    policy: ConcurrencyPolicy,
    timeout_ms: float | None,
    progress: ProgressSink,
) -> ToolDefinition:
    """The raw definition registered for one MCP tool (wire form) under ``name``."""
    mcp_name = tool["name"]
    try:
        parameters = snapshot_json(tool.get("inputSchema", {"type": "object"}), "inputSchema")
    except LosslessJsonError as exc:
        raise McpConnectionError(
            f'MCP tool "{mcp_name}" has an input schema that is not lossless JSON: {exc}',
            "MCP_CONNECT_FAILED",
        ) from None
    annotations = tool.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, Mapping) else {}
    title = tool.get("title") or annotations.get("title")
    declared = tool.get("outputSchema")
    validator = output_validator(declared) if declared is not None else None
    if declared is not None and validator is None:
        _log.warning(
            "MCP tool declares an output schema that is not valid JSON Schema; its output is "
            "passed on unchecked",
            server=client.label,
            tool=mcp_name,
        )
    description = str(tool.get("description") or title or "")
    info = McpToolInfo(
        name=name,
        mcp_name=mcp_name,
        server=client.label,
        title=str(title) if title else None,
        description=description,
        annotations=annotations,
        input_schema=dict(tool.get("inputSchema") or {}),
        output_schema=dict(declared) if isinstance(declared, Mapping) else None,
        timeout_ms=timeout_ms,
    )
    execute = _body(_Tool(client, info, progress, validator))
    _INFO[execute] = info
    return ToolDefinition(
        name=name,
        description=description,
        parameters=parameters,
        output=ToolOutput(_output_schema(declared, mcp_name), render),
        execute=execute,
        is_concurrency_safe=_always_safe if _is_safe(policy, tool) else None,
        timeout_ms=timeout_ms,
        finalize_content=finalize_error_content,
    )
