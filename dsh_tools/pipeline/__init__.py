"""The pipeline layer: the per-call stages, execution views, the dispatcher pool, the session
log and the timeout policy."""

from ..actors import message_of
from ..registry._execution import CallRecord, DispatchExecution, ToolExecution, ToolRunContext
from ..registry._json_text import (
    MAX_ARGUMENTS_CHARS,
    MAX_ARGUMENTS_DEPTH,
    parse_arguments,
    parse_json_text,
)
from ._approval import Approval, ApprovalOutcome
from ._dispatcher import DispatcherPoolActor
from ._loop import event_loop
from ._pipeline import (
    DISPATCH,
    FINISH,
    POST,
    Pipeline,
    Stage,
)
from ._pool import BatchRunner
from ._pool_parts import ClosePool, PoolEntry, PoolLane, PoolRequest, SubmitCall
from ._results import cancelled, exception_type_name, failure_from_exception
from ._session import SessionEvent, SessionLog
from ._spill import SpillPolicy, SpillSource, SpillStore, is_preview_of, spill_policy
from ._timeout import timeout_policy

__all__ = [
    "DISPATCH",
    "FINISH",
    "MAX_ARGUMENTS_CHARS",
    "MAX_ARGUMENTS_DEPTH",
    "POST",
    "Approval",
    "ApprovalOutcome",
    "BatchRunner",
    "CallRecord",
    "ClosePool",
    "DispatchExecution",
    "DispatcherPoolActor",
    "Pipeline",
    "PoolEntry",
    "PoolLane",
    "PoolRequest",
    "SessionEvent",
    "SessionLog",
    "SpillPolicy",
    "SpillSource",
    "SpillStore",
    "Stage",
    "SubmitCall",
    "ToolExecution",
    "ToolRunContext",
    "cancelled",
    "event_loop",
    "exception_type_name",
    "failure_from_exception",
    "is_preview_of",
    "message_of",
    "parse_arguments",
    "parse_json_text",
    "spill_policy",
    "timeout_policy",
]
