"""Code Mode: the code-runtime seam, the subprocess runtime and the dispatch bridge."""

from ._assembly import AssembledPrompt, PromptSection
from ._runtime import SubprocessCodeRuntime
from ._sandbox import CodeSandbox
from ._sdk import (
    SDK_INSTRUCTIONS,
    SDK_SECTION_NAME,
    SDK_SECTION_ORDER,
    SdkTool,
    render_sdk,
    render_sdk_declarations,
    sdk_fence,
    sdk_type_expression,
)
from ._seam import (
    BindingFunction,
    BindingNamespace,
    CodeRunFailure,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntime,
    CodeRuntimeConfig,
    ErrorClassSpec,
    FailureKind,
    runtime_config_from,
)
from ._transport import (
    RUN_CODE_DESCRIPTION,
    RUN_CODE_TOOL_NAME,
    present_run_code_call,
    pretty_json,
    render_run_code_output,
    run_code_output_schema,
    run_code_parameters_schema,
)

__all__ = [
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_TOOL_NAME",
    "SDK_INSTRUCTIONS",
    "SDK_SECTION_NAME",
    "SDK_SECTION_ORDER",
    "AssembledPrompt",
    "BindingFunction",
    "BindingNamespace",
    "CodeRunFailure",
    "CodeRunRequest",
    "CodeRunResult",
    "CodeRuntime",
    "CodeRuntimeConfig",
    "CodeSandbox",
    "ErrorClassSpec",
    "FailureKind",
    "PromptSection",
    "SdkTool",
    "SubprocessCodeRuntime",
    "present_run_code_call",
    "pretty_json",
    "render_run_code_output",
    "render_sdk",
    "render_sdk_declarations",
    "run_code_output_schema",
    "run_code_parameters_schema",
    "runtime_config_from",
    "sdk_fence",
    "sdk_type_expression",
]
