"""``bash``: run a shell command in the workspace, under a supervisor of its own.

The command runs under ``/bin/sh -c`` with the workspace (or ``workdir`` inside it) as its
working directory and no stdin. The shell is the child of a small supervisor process
(``_bash_supervisor``) that leads the command's own session and process group and, on Linux,
inherits every orphan below it (a child subreaper). When the shell exits, or when the call's
abort signal fires (a caller abort, or the timeout policy enforcing the definition's
``timeout_ms``; the body then raises ``AbortError``), the supervisor kills every process left
below it, those that called ``setsid`` or forked twice included, so background jobs never
outlive the call and never keep its pipes open. Its process group is killed with ``SIGKILL``
after it, in case it died first.

Each of stdout and stderr is captured up to ``max_output_bytes``; the rest is read and dropped
and the value says ``truncated``. The model sees stdout, then stderr under a ``[stderr]`` line,
then a final marker line ``[exit code: N]`` (or ``[signal: NAME]`` when a signal ended the
shell).

The body is a coroutine: it waits for the shell's exit and for the abort signal on the
running event loop, and returns only once the process group is gone (or, for a process that
left the group holding the pipes, after a short drain). The tool is exclusive: a command may
change anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import re
import secrets
import select
import signal as signals
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import UNSET

from ..actors import AbortError, AbortSignal
from ..registry import (
    GenericResultView,
    TerminalCallView,
    TerminalResultView,
    ToolDefinition,
    ToolOutput,
    ToolResult,
    define_tool,
)
from . import _bash_supervisor
from ._workspace import Workspace, WorkspaceError, check_abort

__all__ = [
    "DEFAULT_BASH_TIMEOUT_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "bash_tool",
    "format_bash_output",
    "parse_bash_output",
]

DEFAULT_BASH_TIMEOUT_MS = 120_000
"""The ``timeout_ms`` the ``bash`` definition declares unless the factory is told otherwise."""

DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024
"""Bytes kept of each of stdout and stderr."""

_DRAIN_SECONDS = 2.0  # a process that left the group may hold the pipes; stop waiting then
_RUNNING = b"1"  # what the supervisor sends once it runs (``_bash_supervisor``)
_CLEANED = b"2"  # and once it has killed everything below it
_CALL_MARK = "DSH_TOOLS_BASH_CALL"  # in the environment of everything a command starts
_STOP_SECONDS = 6.0  # the supervisor's cleanup takes at most 5 s
_NO_OUTPUT = "(no output)\n"
_MARKER = re.compile(r"\n\[(?:exit code: (-?\d+)|signal: ([A-Z0-9]+))\]\Z")


# --- the model-visible text and its parser (render and the result presenter share them) --------


def format_bash_output(value: Mapping[str, Any]) -> str:
    """The text the model sees for a finished command: output, then the exit marker line."""
    text: str = value["stdout"]
    stderr: str = value["stderr"]
    if stderr:
        if text and not text.endswith("\n"):
            text += "\n"
        text += "[stderr]\n" + stderr
    if text and not text.endswith("\n"):
        text += "\n"
    if value["truncated"]:
        text += "[output truncated]\n"
    if not text:
        text = _NO_OUTPUT
    if value["signal"] is not None:
        return f"{text}[signal: {value['signal']}]"
    return f"{text}[exit code: {value['exit_code']}]"


def parse_bash_output(text: str) -> tuple[str, int | None, str | None]:
    """Split rendered text into ``(output, exit_code, signal)``.

    The marker must be the last line and be preceded by a newline; text that merely *is*
    ``[exit code: 5]`` reads as output with exit code 0.
    """
    match = _MARKER.search(text)
    if match is None:
        return text, 0, None
    output = text[: match.start() + 1]
    if output == _NO_OUTPUT:
        output = ""
    if match.group(1) is not None:
        return output, int(match.group(1)), None
    return output, None, match.group(2)


def _console_fence(text: str) -> str:
    body = text.rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}console\n{body}\n{fence}"


# --- process handling ---------------------------------------------------------------------------


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signals.SIGKILL)


@functools.cache
def _supervisor_source() -> str:
    return Path(_bash_supervisor.__file__).read_text(encoding="utf-8")


def _supervised(command: str, stop: int, mark: str) -> tuple[str, ...]:
    """The program and arguments that run ``command`` under the supervisor
    (``_bash_supervisor``), which ends it once descriptor ``stop`` turns readable and puts
    ``mark`` in its environment: an isolated interpreter, which imports nothing of the
    package."""
    return (sys.executable, "-I", "-S", "-c", _supervisor_source(), command, str(stop), mark)


def _spawn_error(
    exc: OSError, command: str, cwd: Path, shown: str, workspace: Workspace
) -> WorkspaceError:
    """What the model is told when the command cannot be started: never a host path."""
    if exc.errno == errno.E2BIG:
        size = len(command.encode("utf-8", "surrogatepass"))
        return WorkspaceError(f"the command is too long to run ({size} bytes)", "INVALID_COMMAND")
    if exc.filename is not None and os.fsdecode(exc.filename) == str(cwd):
        return workspace.io_error(exc, shown)  # entering the working directory failed
    return WorkspaceError(
        f"the shell's supervisor (this process's Python interpreter) cannot be started: "
        f"{exc.strerror or type(exc).__name__}",
        "UNAVAILABLE",
    )


def _supervisor_report(fd: int) -> tuple[bool, bool]:
    """What the supervisor, now exited, said on the other end of ``fd``: whether it ran, and
    whether it finished its cleanup (a command may have killed it first)."""
    os.set_blocking(fd, False)
    said = b""
    with contextlib.suppress(OSError):
        while len(said) < 2 and (more := os.read(fd, 2 - len(said))):
            said += more
    return said[:1] == _RUNNING, said == _RUNNING + _CLEANED


def _tell_to_stop(fd: int) -> None:
    """Tell the supervisor holding the other end of ``fd`` to end its command: a byte, which
    turns its end readable (the host keeps its own end to read the supervisor's report)."""
    with contextlib.suppress(OSError):
        os.write(fd, b"\0")


def _kill_marked(mark: bytes) -> None:
    """Kill every process whose environment holds ``mark`` (``_CALL_MARK=token``, the call's
    own): what a command that killed its supervisor before its cleanup left outside the
    process group (``setsid``). At most ``_STOP_SECONDS`` in all, whatever the number of
    processes or the size of their environments; each process is held by a pidfd while it is
    looked at, so a number reused meanwhile is never signalled. A command that drops the
    variable, or hides behind enough processes with huge environments to outlast the bound,
    on purpose, is not found."""
    me = os.getpid()
    deadline = time.monotonic() + _STOP_SECONDS
    while time.monotonic() < deadline:
        try:
            entries = os.listdir("/proc")
        except OSError:
            return
        found = False
        for entry in entries:
            if time.monotonic() >= deadline:
                return
            if not entry.isdigit() or int(entry) == me:
                continue
            if _kill_if_marked(int(entry), mark):
                found = True
        if not found:
            return
        time.sleep(0.001)


def _kill_marked_soon(mark: bytes) -> None:
    """``_kill_marked`` off the loop (it may take seconds, and the cancelled call does not wait
    for it), on a thread the interpreter waits for at exit: what it kills must not outlive
    the host's own end. Where no thread can start (the process limit), here and now."""
    try:
        threading.Thread(target=_kill_marked, args=(mark,), name="bash-cleanup").start()
    except RuntimeError:
        _kill_marked(mark)


def _kill_if_marked(pid: int, mark: bytes) -> bool:
    """Kill ``pid`` if its environment holds ``mark``; whether it did. Without pidfds (an old
    kernel, a sandbox that refuses them) the number is signalled, as it was read."""
    handle: int | None
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:
        handle = None
    try:
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                environment = environ.read()
        except OSError:  # gone, or another user's
            return False
        if mark not in environment.split(b"\0"):
            return False
        with contextlib.suppress(OSError):  # it ended meanwhile
            if handle is not None:
                signals.pidfd_send_signal(handle, signals.SIGKILL)
            else:
                os.kill(pid, signals.SIGKILL)
        return True
    finally:
        if handle is not None:
            os.close(handle)


def _wait_for_exit(pid: int) -> None:
    """Wait (blocking, at most ``_STOP_SECONDS``) until the supervisor, told to stop, has
    exited: the call was cancelled from outside, and closing its transport kills the
    supervisor, which must first have killed what left its process group. (Its pidfd turns
    readable as it exits; without pidfds there is nothing to wait on.)"""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return
    try:
        exited = select.poll()
        exited.register(fd, select.POLLIN)
        exited.poll(_STOP_SECONDS * 1000)
    finally:
        os.close(fd)


class _Capture(asyncio.SubprocessProtocol):
    """Collects stdout and stderr up to a cap each and reports exit and pipe closure.

    ``exited`` resolves when the shell exits, even while something it started still holds
    the pipes (``asyncio``'s ``Process.wait`` would wait for the pipes too); ``finished``
    resolves once it has exited and every pipe has closed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.limit = limit
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.dropped = False
        self.exited: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        buffer = self.stdout if fd == 1 else self.stderr
        room = self.limit - len(buffer)
        if room >= len(data):
            buffer += data
            return
        if room > 0:
            buffer += data[:room]
        self.dropped = True

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


async def _until_aborted(signal: AbortSignal) -> None:
    await signal


def bash_tool(
    root: Path | str,
    *,
    timeout_ms: float = DEFAULT_BASH_TIMEOUT_MS,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> ToolDefinition:
    """``bash`` over the workspace at ``root``; ``timeout_ms`` is declared on the definition
    (the timeout policy enforces it through the abort signal)."""
    workspace = Workspace(root)

    async def execute(args: Mapping[str, Any], run_ctx: Any) -> dict[str, Any]:
        signal: AbortSignal = run_ctx.signal
        check_abort(signal)
        command: str = args["command"]
        if "\0" in command:
            raise WorkspaceError("the command holds a NUL character", "INVALID_COMMAND")
        workdir = args.get("workdir")
        cwd = workspace.resolve(workdir) if workdir is not None else workspace.root
        shown = workspace.display(cwd)
        if not cwd.is_dir():
            if not cwd.exists():
                raise WorkspaceError(f'workdir "{shown}" does not exist', "NOT_FOUND")
            raise WorkspaceError(f'workdir "{shown}" is not a directory', "NOT_A_DIRECTORY")
        if not sys.executable:  # an embedding that has no interpreter to start
            raise WorkspaceError(
                "the shell's supervisor needs this process's Python interpreter, and "
                "sys.executable is empty",
                "UNAVAILABLE",
            )
        loop = asyncio.get_running_loop()
        # A connected pair: the supervisor says on its end that it runs and that it cleaned up,
        # and a byte written to ``stop`` (or the host's death) tells it to end the command.
        ends = socket.socketpair()
        held, stop = ends[0].detach(), ends[1].detach()
        mark = f"{_CALL_MARK}={secrets.token_hex(8)}"
        try:
            transport, capture = await loop.subprocess_exec(
                lambda: _Capture(loop, max_output_bytes),
                *_supervised(command, held, mark),
                pass_fds=(held,),
                cwd=cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException as exc:
            os.close(stop)
            if isinstance(exc, OSError):
                raise _spawn_error(exc, command, cwd, shown, workspace) from None
            raise
        finally:
            os.close(held)
        # The supervisor leads the command's own session and process group.
        pgid = transport.get_pid()
        aborted = asyncio.ensure_future(_until_aborted(signal))
        # What the supervisor said (ran, cleaned up), once the body has read it: until then
        # the cleanup is the ``finally``'s to do, however the body was left.
        report: tuple[bool, bool] | None = None
        try:
            done, _ = await asyncio.wait(
                (capture.exited, aborted), return_when=asyncio.FIRST_COMPLETED
            )
            interrupted = capture.exited not in done
            if interrupted:  # the supervisor kills everything below it, then exits
                _tell_to_stop(stop)
                await asyncio.wait((capture.exited,), timeout=_STOP_SECONDS)
            _kill_group(pgid)  # what is left of the group, had the supervisor died first
            await capture.exited
            report = ran, cleaned = _supervisor_report(stop)
            if ran and not cleaned:  # killed before its cleanup (``kill -9 $PPID``)
                await asyncio.to_thread(_kill_marked, mark.encode())
            # Settle only once the work has stopped: the group's death closes the pipes, unless
            # a process left the group and took them along (then stop waiting after a while).
            await asyncio.wait((capture.finished,), timeout=_DRAIN_SECONDS)
            if interrupted:
                raise AbortError()
            if not ran:
                raise WorkspaceError(
                    "the shell's supervisor did not run (sys.executable is not a Python "
                    "interpreter), so the command did not run",
                    "UNAVAILABLE",
                )
            truncated = capture.dropped or not capture.finished.done()
        finally:
            aborted.cancel()
            try:
                if report is None:  # cancelled from outside: leave nothing
                    _tell_to_stop(stop)
                    if transport.get_returncode() is None:
                        _wait_for_exit(pgid)
                    _kill_group(pgid)
                    if _supervisor_report(stop) != (True, True):
                        _kill_marked_soon(mark.encode())
            finally:
                os.close(stop)
                transport.close()
        code = transport.get_returncode()
        assert code is not None
        stdout, stderr = capture.stdout, capture.stderr
        if code < 0:
            try:
                name: str | None = signals.Signals(-code).name
            except ValueError:
                name = f"SIG{-code}"
            exit_code: int | None = None
        else:
            name, exit_code = None, code
        return {
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr.decode("utf-8", "replace"),
            "exit_code": exit_code,
            "signal": name,
            "truncated": truncated,
        }

    def render(args: Mapping[str, Any], value: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "text", "text": format_bash_output(value)}]

    def present_call(args: Mapping[str, Any]) -> TerminalCallView:
        description = args.get("description")
        workdir = args.get("workdir")
        return TerminalCallView(
            title=args["command"],
            description=UNSET if description is None else description,
            cwd=UNSET if workdir is None else workdir,
        )

    def present_result(
        args: Mapping[str, Any], result: ToolResult
    ) -> TerminalResultView | GenericResultView | None:
        content = result.content
        if len(content) != 1 or content[0].get("type") != "text":
            return None
        text = content[0].get("text")
        if type(text) is not str:
            return None
        if result.is_error:
            return GenericResultView(content=[{"type": "text", "text": _console_fence(text)}])
        output, exit_code, signal_name = parse_bash_output(text)
        if exit_code is None:
            return TerminalResultView(output=output, signal=signal_name or UNSET)
        return TerminalResultView(output=output, exit_code=exit_code)

    return define_tool(
        name="bash",
        description=(
            "Run a shell command (`/bin/sh -c`) in the workspace and return its stdout, its "
            "stderr and the exit code. Commands run without stdin; background jobs are killed "
            "when the command finishes. Use the file tools to read and change files."
        ),
        parameters={
            "command": {"type": "string", "required": True, "description": "The command to run."},
            "description": {
                "type": "string",
                "description": "One short line saying what the command does, shown to the user.",
            },
            "workdir": {
                "type": "string",
                "description": "Working directory relative to the workspace root (default: root).",
            },
        },
        output=ToolOutput(
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "stdout": {"type": "string", "required": True},
                    "stderr": {"type": "string", "required": True},
                    "exit_code": {
                        "oneOf": [{"type": "integer"}, {"type": "null"}],
                        "required": True,
                    },
                    "signal": {"oneOf": [{"type": "string"}, {"type": "null"}], "required": True},
                    "truncated": {"type": "boolean", "required": True},
                },
            },
            render=render,
        ),
        execute=execute,
        is_concurrency_safe=lambda args: False,
        timeout_ms=timeout_ms,
        present_call=present_call,
        present_result=present_result,
    )
