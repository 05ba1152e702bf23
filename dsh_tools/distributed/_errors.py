"""The failures a placed body adds to the local vocabulary.

A remote body's own exceptions come back as themselves (see ``_wire``); these name what only a
cluster can do to a call: lose the process or node that ran it, or not be reachable at all.
"""

from __future__ import annotations

import re

from ..actors import HarnessError, message_of

__all__ = [
    "RemoteToolError",
    "RemoteUnavailableError",
    "RemoteWorkerLostError",
    "describe_ray_failure",
]

_COLOR = re.compile(r"\x1b\[[0-9;]*m")
_RAISED = re.compile(r"[A-Za-z_][\w.]*: \S")
"""A traceback's last line: the exception that was raised, ``ModuleNotFoundError: ...``."""
_FIELD = re.compile(r"\s+(\w+): (\S.*)")


def describe_ray_failure(exc: BaseException) -> str:
    """One line saying what Ray reported and where: the first line of its message (the task or
    actor, with its pid and node address when Ray gives them), and, when the message carries a
    traceback from the worker or node, the exception it ends with. Ray's first line alone is
    only a header there (``ray::dsh-tool[build]() (pid=..., ip=...)``, ``Failed to set up
    runtime environment.``), and its colour codes are no part of a message."""
    lines = [line for line in _COLOR.sub("", message_of(exc)).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first, last = lines[0].strip(), lines[-1]
    # An actor's death lists the process it ran in as indented ``pid: ...``, ``ip: ...``.
    listed = {field[1]: field[2] for field in map(_FIELD.fullmatch, lines[1:]) if field}
    where = ", ".join(f"{key}={listed[key]}" for key in ("pid", "ip") if key in listed)
    if where and "pid=" not in first:
        first = f"{first.rstrip('.')} ({where})"
    if len(lines) > 1 and _RAISED.match(last):
        return f"{first.rstrip('.:')}: {last.strip()}"
    return first


class RemoteWorkerLostError(HarnessError):
    """The worker, actor or node running a body died, or could not be reached, before the body
    settled (code ``REMOTE_WORKER_LOST``). The body may have run partly; it is not retried.

    ``died``: the process (or node) is known to have died: the message says so, and that the
    body may or may not have run (Ray cannot tell a death under the body from one an instant
    before it began)."""

    def __init__(self, tool: str, detail: str, *, died: bool = False) -> None:
        self.tool = tool
        self.detail = detail
        what = (
            "died before the call settled; the body may or may not have run, and is not run again"
            if died
            else "was lost"
        )
        super().__init__(
            f'remote worker running tool "{tool}" {what}: {detail}', "REMOTE_WORKER_LOST"
        )


class RemoteUnavailableError(HarnessError):
    """Ray could not be started or reached, or could not prepare the body's environment
    (code ``REMOTE_UNAVAILABLE``). The body did not run."""

    def __init__(self, tool: str, detail: str) -> None:
        self.tool = tool
        self.detail = detail
        super().__init__(f'cannot run tool "{tool}" on Ray: {detail}', "REMOTE_UNAVAILABLE")


class RemoteToolError(HarnessError):
    """A remote body's exception whose class cannot be rebuilt in this process.

    The message is the remote exception's own text (so the model sees what it would have seen
    locally); ``remote_type`` is its ``module.qualname``, and ``code``/``name`` are the remote
    harness error's when it was one, else ``REMOTE_EXCEPTION`` and the class name.
    """

    def __init__(
        self, message: str, remote_type: str, code: str | None = None, name: str | None = None
    ) -> None:
        self.remote_type = remote_type
        super().__init__(
            message,
            code if code is not None else "REMOTE_EXCEPTION",
            name=name if name is not None else remote_type.rpartition(".")[2],
        )
