"""The failures a placed body adds to the local vocabulary.

A remote body's own exceptions come back as themselves (see ``_wire``); these name what only a
cluster can do to a call: lose the process or node that ran it, or not be reachable at all.
"""

from __future__ import annotations

from ..actors import HarnessError

__all__ = ["RemoteToolError", "RemoteUnavailableError", "RemoteWorkerLostError"]


class RemoteWorkerLostError(HarnessError):
    """The worker, actor or node running a body died before the body settled
    (code ``REMOTE_WORKER_LOST``). The body may have run partly; it is not retried."""

    def __init__(self, tool: str, detail: str) -> None:
        self.tool = tool
        self.detail = detail
        super().__init__(
            f'remote worker running tool "{tool}" was lost: {detail}', "REMOTE_WORKER_LOST"
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
