"""The registry layer: lossless JSON and frozen values, the schema DSL, the enforced JSON Schema
subset, tool definitions and the output contract."""

from ._lossless import (
    LosslessJsonError,
    compact_json,
    is_json_value,
    snapshot_json,
    thaw,
)

__all__ = [
    "LosslessJsonError",
    "compact_json",
    "is_json_value",
    "snapshot_json",
    "thaw",
]
