"""Tool calls of a kind the registry does not run, answered as errors (OpenAI).

Beside function calls, an OpenAI model can make calls of other kinds, custom tool calls above
all, when the harness declared such tools alongside the registry's. None of them is a call of
a registry tool, so none is run; but a call left unanswered makes the provider refuse the next
request, so the result adapters, given the response, answer each with an error output of its
own kind that says so. Each answer is also logged (``dsh_tools.integrations``, warning ``OpenAI
tool call not run``), as the harness may have meant to run such calls itself.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..actors._logging import get_logger
from ._content import field
from ._prompt import check_sendable

__all__ = ["OtherCall", "other_call"]

_log = get_logger("dsh_tools.integrations")


class OtherCall(msgspec.Struct, frozen=True):
    """One call of another kind: its id as the model gave it (empty when it gave none), its
    type and the tool's name when the call holds one."""

    call_id: str
    kind: str
    name: str | None

    @property
    def error(self) -> str:
        """What the model reads in the call's answer."""
        if self.kind in ("custom", "custom_tool_call"):
            tool = f'custom tool "{self.name}"' if self.name is not None else "a custom tool"
        else:
            tool = f'a tool call of type "{self.kind}"'
            if self.name is not None:
                tool += f' (tool "{self.name}")'
        return f"Error: {tool} is not one this tool registry runs; nothing was run"

    def log(self) -> None:
        """Say that the call was answered so, not run."""
        _log.warning(
            "OpenAI tool call not run: it is no function call of this tool registry",
            call_id=self.call_id,
            type=self.kind,
            name=self.name,
        )


def other_call(item: Any, kind: str, name: object, where: str, *, id_field: str) -> OtherCall:
    """The call ``item`` at ``where`` (of type ``kind``, naming the tool ``name``, its id in
    ``id_field``); the id is repeated in the answer, so one that no request can carry is
    refused as for a function call (``ValueError``)."""
    call_id = field(item, id_field)
    if call_id is None:
        call_id = ""
    elif type(call_id) is not str:
        raise ValueError(f"{where} has no call id (a str, got {type(call_id).__name__})")
    check_sendable(call_id, "call id", where)
    if type(name) is str:
        check_sendable(name, "tool name", where)
        return OtherCall(call_id, kind, name)
    return OtherCall(call_id, kind, None)
