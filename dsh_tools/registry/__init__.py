"""The registry layer: lossless JSON and frozen values, the schema DSL, the enforced JSON Schema
subset, tool definitions and the output contract."""

from ._body_values import replacement_value
from ._cards import (
    CallView,
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ResultView,
    TerminalCallView,
    TerminalResultView,
    ToolResult,
    decode_call_view,
    decode_result_view,
    encode_card,
)
from ._compact_json import compact_json
from ._define_tool import define_tool, placed_execute
from ._definition import Placement, ToolDefinition, ToolOutput, TypedToolDefinition
from ._dsl import compile_parameters, compile_schema, validate_args
from ._handle import (
    Disposer,
    ExecutionMode,
    ToolsHandle,
    dispose_together,
    register_together,
)
from ._json_schema import (
    assert_object_json_schema,
    assert_supported_json_schema,
    validate_json_schema_value,
)
from ._lossless import LosslessJsonError
from ._lossless_check import is_json_value
from ._lossless_copy import snapshot_json, thaw
from ._presentation import (
    fallback_call_view,
    fallback_result_view,
    present_call_view,
    present_result_view,
)
from ._raw_schema import (
    accepts_null,
    optional_null_dropper,
    resolve_local_ref,
    scalar_type_of,
    to_subset_schema,
)
from ._registry_actor import RUN_CODE, RegistryActor
from ._snapshot import RegistrySnapshot, SnapshotCell, ToolEntry
from ._tool_contract import check_registration, classify, normalize_output, project_schema
from ._typed_tool import default_render, tool

__all__ = [
    "RUN_CODE",
    "CallView",
    "DiffCallView",
    "DiffResultView",
    "Disposer",
    "ExecutionMode",
    "FileDiff",
    "FileLocation",
    "GenericCallView",
    "GenericResultView",
    "LosslessJsonError",
    "Placement",
    "RegistryActor",
    "RegistrySnapshot",
    "ResultView",
    "SnapshotCell",
    "TerminalCallView",
    "TerminalResultView",
    "ToolDefinition",
    "ToolEntry",
    "ToolOutput",
    "ToolResult",
    "ToolsHandle",
    "TypedToolDefinition",
    "accepts_null",
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "check_registration",
    "classify",
    "compact_json",
    "compile_parameters",
    "compile_schema",
    "decode_call_view",
    "decode_result_view",
    "default_render",
    "define_tool",
    "dispose_together",
    "encode_card",
    "fallback_call_view",
    "fallback_result_view",
    "is_json_value",
    "normalize_output",
    "optional_null_dropper",
    "placed_execute",
    "present_call_view",
    "present_result_view",
    "project_schema",
    "register_together",
    "replacement_value",
    "resolve_local_ref",
    "scalar_type_of",
    "snapshot_json",
    "thaw",
    "to_subset_schema",
    "tool",
    "validate_args",
    "validate_json_schema_value",
]
