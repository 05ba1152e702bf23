"""What a placed call reports for each failure Ray gives instead of its reply: "did not run"
(``REMOTE_UNAVAILABLE``, which a harness may safely send again) only where Ray failed before the
body could begin; any other failure may have come after the body ran (``REMOTE_WORKER_LOST``).

The failures are Ray's own exception classes, as Ray raises them from a reply; the cases that a
live cluster produces at will (an unschedulable call, an actor killed under a body, a broken
runtime environment) are run against a real Ray instance in the other Ray tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh_tools.actors import HarnessError
from dsh_tools.distributed._ray_body import _outcome

pytestmark = pytest.mark.ray

exceptions = pytest.importorskip("ray.exceptions")


class SentCall:
    """The submission a reply belongs to: records whether its worker was given up."""

    def __init__(self) -> None:
        self.given_up = False

    def lost(self) -> None:
        self.given_up = True


def reported(failure: BaseException) -> tuple[str, SentCall]:
    """The code the call fails with when Ray's reply is ``failure``, and its submission."""
    loop = asyncio.new_event_loop()
    try:
        reply: asyncio.Future[Any] = loop.create_future()
        reply.set_exception(failure)
        call = SentCall()
        with pytest.raises(HarnessError) as raised:
            _outcome("far", reply, None, call)  # type: ignore[arg-type]
        return raised.value.code, call
    finally:
        loop.close()


BEFORE_THE_BODY = "REMOTE_UNAVAILABLE"
MAY_HAVE_RUN = "REMOTE_WORKER_LOST"


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (exceptions.RuntimeEnvSetupError("pip install failed"), BEFORE_THE_BODY),
        (exceptions.TaskUnschedulableError("no node has the resources"), BEFORE_THE_BODY),
        (exceptions.PendingCallsLimitExceeded("too many calls queued"), BEFORE_THE_BODY),
        # Storing the reply fails once the body has returned: saying it did not run would
        # let a harness send it again, and its side effects happen twice.
        (exceptions.ObjectStoreFullError("the object store is full"), MAY_HAVE_RUN),
        (exceptions.OutOfDiskError("the node's disk is full"), MAY_HAVE_RUN),
        (exceptions.RaySystemError("the core worker failed"), MAY_HAVE_RUN),
        (exceptions.RpcError("the connection to the node was reset"), MAY_HAVE_RUN),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value,
)
def test_only_a_failure_before_the_body_began_says_it_did_not_run(
    failure: Exception, code: str
) -> None:
    reported_code, call = reported(failure)

    assert reported_code == code
    assert call.given_up  # its worker takes no more calls either way
