"""Elicitation routed to the system's approval seam."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ...actors import AbortController
from ...actors._logging import get_logger
from ...pipeline._approval import ApprovalCall
from ...registry import snapshot_json
from ._callbacks import CallbackRunner
from ._types import ElicitationCallback, McpRequestContext

if TYPE_CHECKING:
    from ..._system import ToolSystem

__all__ = ["approval_elicitation"]

_log = get_logger("dsh_tools.mcp")


def _defaults(schema: Any) -> dict[str, Any] | None:
    """The content an approval stands for: each property's ``default``; None when a required
    property has none (an approval cannot supply a value)."""
    if not isinstance(schema, Mapping):
        return {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    content = {
        key: prop["default"]
        for key, prop in properties.items()
        if isinstance(prop, Mapping) and "default" in prop
    }
    required = schema.get("required")
    if isinstance(required, list) and any(key not in content for key in required):
        return None
    return content


def approval_elicitation(system: ToolSystem, callbacks: CallbackRunner) -> ElicitationCallback:
    """Elicitation answered by ``system.approval``: the request's message is the approval's
    ``reason``; ``"allowed-once"`` accepts (with the requested schema's defaults as content,
    or consent to open the URL), ``"rejected"`` declines, anything else cancels. A form whose
    required fields have no default is declined: an approval cannot fill it in.

    The approver is called as the pipeline calls it: ``arguments`` (here the elicitation
    request, frozen) and ``reason`` only when its ``request`` takes them; its ``signal`` aborts
    when the server withdraws the request or the connection ends. A blocking approver runs on
    one of the connection's ``callbacks`` threads, as a plain callback does: closing the
    connection waits for it no more (an approver that does not watch its signal may be waiting
    for a human)."""

    async def elicit(ctx: McpRequestContext, params: dict[str, Any]) -> dict[str, Any]:
        approval = system.approval
        if approval is None:
            _log.warning("MCP elicitation with no approval channel", server=ctx.server)
            return {"action": "cancel"}
        is_url = params.get("mode") == "url"
        content = {} if is_url else _defaults(params.get("requestedSchema"))
        if content is None:
            _log.warning(
                "MCP elicitation needs values an approval cannot give; declined",
                server=ctx.server,
            )
            return {"action": "decline"}
        call = ctx.call
        message = str(params.get("message") or f'MCP server "{ctx.server}" asks to continue')
        if is_url and params.get("url"):
            message += f" ({params['url']})"
        how = ApprovalCall(approval)
        abandon = AbortController()
        kwargs: dict[str, Any] = {
            "agent": call.agent if call is not None else ctx.agent,
            "tool_name": call.tool if call is not None else ctx.server,
            "call_id": call.call_id if call is not None else "",
            "signal": abandon.signal,
        }
        if "arguments" in how.passes:
            kwargs["arguments"] = snapshot_json(params, "params")
        if "reason" in how.passes:
            kwargs["reason"] = message
        try:
            if how.is_async:
                outcome = approval.request(**kwargs)
            else:
                outcome = await callbacks.call(partial(approval.request, **kwargs))
            if inspect.isawaitable(outcome):
                outcome = await outcome
        except asyncio.CancelledError:
            # The SDK cancels the handler when the server withdraws the request or the session
            # ends: a human still being asked is told through the signal.
            abandon.abort("the MCP server no longer waits for the answer")
            raise
        if outcome == "allowed-once":
            return {"action": "accept"} if is_url else {"action": "accept", "content": content}
        if outcome == "rejected":
            return {"action": "decline"}
        return {"action": "cancel"}

    return elicit
