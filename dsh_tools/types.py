"""Types for annotating what you plug into a tool system (in the manner of ``structlog.types``).

Every seam ``ToolSystem``, its tool handles and tool definitions take is a precise callable
type or a Protocol: the hooks of each kind, guards, observers, the approver, the Code Mode
runtime, a body's placement and a spill store, with the views and values they receive.
Nothing here has behaviour of its own.

```text
from dsh_tools.types import PreExecuteHook, ToolExecution, Next, PreDecision

async def audit(exec: ToolExecution, next: Next[PreDecision]) -> PreDecision:
    return await next()

hook: PreExecuteHook = audit
```
"""

from __future__ import annotations

from .actors import ToolExecutionResult
from .codebridge._seam import DEFAULT, CodeRuntime, DefaultRuntime
from .pipeline._approval import Approval, ApprovalFunction, ApprovalOutcome
from .pipeline._spill import SpillSource, SpillStore
from .registry._definition import Placement
from .registry._execution import DispatchExecution, ToolExecution, ToolRunContext
from .registry._hooks import (
    AssembledPrompt,
    AssembleHook,
    ChangeObserver,
    CodeDispatchLog,
    CodeDispatchLogHook,
    ContentFinalizer,
    ExecuteWrapper,
    Guard,
    Next,
    PostDecision,
    PostExecuteHook,
    PreDecision,
    PreExecuteHook,
    PromptSection,
    ResultObserver,
)

__all__ = [
    "DEFAULT",
    "Approval",
    "ApprovalFunction",
    "ApprovalOutcome",
    "AssembleHook",
    "AssembledPrompt",
    "ChangeObserver",
    "CodeDispatchLog",
    "CodeDispatchLogHook",
    "CodeRuntime",
    "ContentFinalizer",
    "DefaultRuntime",
    "DispatchExecution",
    "ExecuteWrapper",
    "Guard",
    "Next",
    "Placement",
    "PostDecision",
    "PostExecuteHook",
    "PreDecision",
    "PreExecuteHook",
    "PromptSection",
    "ResultObserver",
    "SpillSource",
    "SpillStore",
    "ToolExecution",
    "ToolExecutionResult",
    "ToolRunContext",
]
