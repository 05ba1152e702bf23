"""Code Mode: the code-runtime seam, the subprocess runtime and the dispatch bridge."""

from ._runtime import SubprocessCodeRuntime
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

__all__ = [
    "BindingFunction",
    "BindingNamespace",
    "CodeRunFailure",
    "CodeRunRequest",
    "CodeRunResult",
    "CodeRuntime",
    "CodeRuntimeConfig",
    "ErrorClassSpec",
    "FailureKind",
    "SubprocessCodeRuntime",
    "runtime_config_from",
]
