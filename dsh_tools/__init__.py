"""dsh-tools: the tool registry and execution pipeline of an LLM agent harness.

Register tools with typed JSON schemas, show each agent the tools it may see, run every call
through policy hooks, guards, wrappers and result hooks with cooperative cancellation, schedule
a model turn's calls in a bounded parallel pool with ordered barriers, and run Code Mode
programs whose every tool call goes through the same pipeline.

Everything public is re-exported here; the sub-packages' private modules are not API.
"""

from msgspec import UNSET

from ._system import DEFAULT, AgentScope, PluginHandle, ToolSystem
from .actors import (
    AbortController,
    AbortError,
    AbortSignal,
    Accept,
    Allow,
    Ask,
    BatchOutcome,
    Block,
    CodeRunFailedError,
    Deny,
    ExecuteBatch,
    ExecuteCall,
    ExecutionToken,
    FrozenDict,
    FrozenList,
    HarnessError,
    JsonSchemaError,
    ToolArgsError,
    ToolCall,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    ToolNotFoundError,
    ToolOutputError,
    ToolTimeoutError,
)
from .actors._config import UNLISTED_TOOLS, ToolsConfig
from .codebridge._assembly import AssembledPrompt, PromptSection
from .codebridge._bridge import CodeDispatchLog
from .pipeline import (
    DispatchExecution,
    SessionEvent,
    SessionLog,
    ToolExecution,
    ToolRunContext,
    timeout_policy,
)
from .registry import (
    Disposer,
    ExecutionMode,
    LosslessJsonError,
    ToolDefinition,
    ToolOutput,
    ToolsHandle,
    assert_object_json_schema,
    assert_supported_json_schema,
    compile_schema,
    define_tool,
    snapshot_json,
    thaw,
    validate_json_schema_value,
)

__all__ = [
    "DEFAULT",
    "UNLISTED_TOOLS",
    "UNSET",
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Accept",
    "AgentScope",
    "Allow",
    "Ask",
    "AssembledPrompt",
    "BatchOutcome",
    "Block",
    "CodeDispatchLog",
    "CodeRunFailedError",
    "Deny",
    "DispatchExecution",
    "Disposer",
    "ExecuteBatch",
    "ExecuteCall",
    "ExecutionMode",
    "ExecutionToken",
    "FrozenDict",
    "FrozenList",
    "HarnessError",
    "JsonSchemaError",
    "LosslessJsonError",
    "PluginHandle",
    "PromptSection",
    "SessionEvent",
    "SessionLog",
    "ToolArgsError",
    "ToolCall",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolExecutionFailure",
    "ToolExecutionResult",
    "ToolExecutionSuccess",
    "ToolFailure",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolOutputError",
    "ToolRunContext",
    "ToolSystem",
    "ToolTimeoutError",
    "ToolsConfig",
    "ToolsHandle",
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "compile_schema",
    "define_tool",
    "snapshot_json",
    "thaw",
    "timeout_policy",
    "validate_json_schema_value",
]
