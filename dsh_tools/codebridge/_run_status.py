"""The status pipe's reports (written by the template, see ``_template``) and what a worker's
end means for its run: which failure an exit, a signal or a budget report settles as, and the
CPU-time sampling of the ``"process"`` isolation.

Reports are a tag byte and a fixed-size body (``E`` carries a length-prefixed message):
``P`` pid, ``W`` worker wait status (the sandbox's init saw the worker exit), ``B`` budget
(the init ended the run), ``H`` (the init ended the run on the host's hang-up while the
worker lived), ``K`` (the sandbox's init has sent ``SIGKILL`` to every other
process of the run), ``G`` (it has reaped them all), ``X`` wait status and CPU seconds of the
run's process, ``E`` an error before the worker started.
"""

from __future__ import annotations

import math
import os
import signal
import struct
from typing import Final

import msgspec

from ..actors import format_ms
from ._outcome import Outcome
from ._sandbox._init import BUDGET_MEMORY, BUDGET_PROCESSES, BUDGET_WALL

__all__ = [
    "BudgetReport",
    "ErrorReport",
    "ExitReport",
    "GoneReport",
    "HangUpReport",
    "KilledReport",
    "PidReport",
    "RunLimits",
    "StatusReport",
    "WorkerReport",
    "take_report",
]

_EXIT_REPORT: Final = struct.Struct(">id")
_PID_REPORT: Final = struct.Struct(">i")
_LENGTH: Final = struct.Struct(">H")
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BUDGET_MESSAGES: Final = {
    BUDGET_MEMORY: "memory budget exhausted ({}MB across the run's processes)",
    BUDGET_PROCESSES: "process budget exhausted (more than {} processes)",
}


class PidReport(msgspec.Struct, frozen=True):
    """``P``: the pid the host kills (the worker's process group or the namespace init)."""

    pid: int


class WorkerReport(msgspec.Struct, frozen=True):
    """``W``: the namespace init saw the worker exit with ``wait_status``."""

    wait_status: int


class BudgetReport(msgspec.Struct, frozen=True):
    """``B``: the init ended the run for budget ``budget`` (2 memory, 3 processes, 4 the wall
    ceiling, else CPU)."""

    budget: int


class ExitReport(msgspec.Struct, frozen=True):
    """``X``: the run's process exited with ``wait_status`` after ``cpu`` seconds of CPU."""

    wait_status: int
    cpu: float


class HangUpReport(msgspec.Struct, frozen=True):
    """``H``: the init ended the run because the host closed its channel to the worker, which
    was not exiting on its own (``K`` or ``G`` follows)."""


class KilledReport(msgspec.Struct, frozen=True):
    """``K``: every process of the run but its init has ``SIGKILL`` pending, so none of them
    runs any more of the program (``G`` follows once they are reaped)."""


class GoneReport(msgspec.Struct, frozen=True):
    """``G``: every process of the run but its init is gone (the init exits next)."""


class ErrorReport(msgspec.Struct, frozen=True):
    """``E``: the template could not start the worker."""

    message: str


StatusReport = (
    PidReport
    | WorkerReport
    | BudgetReport
    | HangUpReport
    | KilledReport
    | GoneReport
    | ExitReport
    | ErrorReport
)


def take_report(status: bytearray) -> StatusReport | None:
    """Remove and return the first complete report of ``status``; ``None`` when it holds only
    part of one. Bytes that are no report are dropped whole."""
    tag = status[0]
    if tag == 0x50 and len(status) >= 1 + _PID_REPORT.size:  # "P"
        (pid,) = _PID_REPORT.unpack_from(status, 1)
        del status[: 1 + _PID_REPORT.size]
        return PidReport(pid)
    if tag == 0x57 and len(status) >= 1 + _PID_REPORT.size:  # "W"
        (wait_status,) = _PID_REPORT.unpack_from(status, 1)
        del status[: 1 + _PID_REPORT.size]
        return WorkerReport(wait_status)
    if tag == 0x42 and len(status) >= 2:  # "B"
        budget = status[1] or 1
        del status[:2]
        return BudgetReport(budget)
    if tag == 0x48:  # "H"
        del status[:1]
        return HangUpReport()
    if tag == 0x4B:  # "K"
        del status[:1]
        return KilledReport()
    if tag == 0x47:  # "G"
        del status[:1]
        return GoneReport()
    if tag == 0x58 and len(status) >= 1 + _EXIT_REPORT.size:  # "X"
        wait_status, cpu = _EXIT_REPORT.unpack_from(status, 1)
        del status[: 1 + _EXIT_REPORT.size]
        return ExitReport(wait_status, cpu)
    if tag == 0x45 and len(status) >= 1 + _LENGTH.size:  # "E" + length + message
        (length,) = _LENGTH.unpack_from(status, 1)
        end = 1 + _LENGTH.size + length
        if len(status) < end:
            return None
        message = bytes(status[1 + _LENGTH.size : end]).decode("utf-8", "replace")
        del status[:end]
        return ErrorReport(message)
    if tag not in b"PWBHKGXE":
        status.clear()
    return None


def _how(wait_status: int) -> str:
    """How a process ended: ``signal <NAME>`` or ``code <n>``."""
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        try:
            return f"signal {signal.Signals(number).name}"
        except ValueError:
            return f"signal {number}"
    code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else wait_status
    return f"code {code}"


class RunLimits:
    """A run's compute, memory, process and wall budgets, and how an end of the worker reads
    against them."""

    __slots__ = (
        "compute_ms",
        "cpu_limit_seconds",
        "max_memory_mb",
        "max_processes",
        "max_wall_ms",
    )

    def __init__(
        self, compute_ms: float, max_memory_mb: float, max_processes: int, max_wall_ms: float
    ) -> None:
        self.compute_ms = compute_ms
        self.max_memory_mb = max_memory_mb
        self.max_processes = max_processes
        self.max_wall_ms = max_wall_ms
        self.cpu_limit_seconds = math.ceil(compute_ms / 1000) + 1

    def compute_timeout(self) -> Outcome:
        """The compute budget's failure."""
        return Outcome(
            failure=("timeout", f"compute budget exhausted ({format_ms(self.compute_ms)}ms busy)")
        )

    def where_spent(self, outcome: Outcome, where: str) -> Outcome:
        """``outcome``, naming ``where`` the program was if it is the compute budget's or the
        wall ceiling's failure (the worker wrote its stacks as the run ended:
        ``WHERE_SIGNAL``)."""
        if outcome.failure is None:
            return outcome
        kind, message = outcome.failure
        wall = self.wall_timeout().failure
        assert wall is not None
        if outcome.failure != self.compute_timeout().failure and not (
            kind == wall[0] and message.startswith(wall[1])
        ):
            return outcome
        return Outcome(failure=(kind, f"{message}; the program was at {where}"))

    def wall_timeout(self, unanswered: str | None = None) -> Outcome:
        """The wall ceiling's failure; ``unanswered``: the binding calls it found in flight
        (what a program waiting on a slow tool was waiting for)."""
        message = f"wall-clock ceiling reached ({format_ms(self.max_wall_ms)}ms)"
        if unanswered is not None:
            message = f"{message} with {unanswered}"
        return Outcome(failure=("timeout", message))

    def exit_outcome(self, budget: int, wait_status: int, cpu: float) -> Outcome:
        """The failure of a run whose worker ended before completing: a reported budget, the
        CPU limit's kill, another signal or an exit code."""
        if budget:
            if budget == BUDGET_WALL:
                return self.wall_timeout()
            if budget in _BUDGET_MESSAGES:
                limit = self.max_memory_mb if budget == BUDGET_MEMORY else self.max_processes
                message = _BUDGET_MESSAGES[budget].format(format_ms(limit))
                return Outcome(failure=("worker-exit", message))
            return self.compute_timeout()
        if os.WIFSIGNALED(wait_status):
            number = os.WTERMSIG(wait_status)
            if number == signal.SIGXCPU or (
                number == signal.SIGKILL and cpu >= self.cpu_limit_seconds
            ):
                return self.compute_timeout()
        return Outcome(
            failure=("worker-exit", f"worker exited with {_how(wait_status)} before completing")
        )

    @staticmethod
    def init_failure(wait_status: int) -> Outcome:
        """The failure of a sandboxed run whose namespace init ended (``wait_status``) before
        it had ended the run: it was killed from outside the run, or failed. Nothing is known
        of the worker, which the init's end took with it."""
        how = _how(wait_status)
        message = f"the sandbox's init failed: it exited with {how} before the run completed"
        return Outcome(failure=("worker-exit", message))

    def cpu_exhausted(self, pid: int) -> bool | None:
        """Whether process ``pid`` has used the compute budget (``/proc``); ``None`` when that
        cannot be told (no ``/proc``, where the ``RLIMIT_CPU`` backstop remains, or the process
        is gone)."""
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
            fields = data[data.rindex(b")") + 2 :].split()
            ticks = int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            return None
        return ticks * 1000 >= self.compute_ms * _CLOCK_TICKS
