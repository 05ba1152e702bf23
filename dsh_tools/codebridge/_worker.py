"""The worker's side of the channel: one program, its binding calls and replies, its completion.

The worker process starts in ``_worker_start.main()`` (in a child the template forked: it has
called ``setsid()``, its descriptors are in place (0 = ``/dev/null``, 1 and 2 = the native output
pipes, 3 = host->worker channel, 4 = worker->host channel; nothing else open) and its
environment is clear), which reads exactly one ``Boot`` frame (``read_boot``) and hands it here
(a held boot's program is compiled by ``load_program`` at once and run after ``read_go``).
``run_program`` compiles the program (``_program``) and runs it on an event loop with these
globals: ``tools`` (or whatever each namespace is called), the namespaces' error classes,
``asyncio``, the private no-result sentinel and the program's star import; ``print`` and
``help`` are replaced process-wide and ``sys.stdout``/``sys.stderr`` are capture streams
(``set_up``, done before the boot comes: none of it depends on the program). It sends ``Done``
as soon as the program settles and exits at once (no asyncio shutdown: whatever is left of the
run is killed anyway). ``SystemExit`` ends the process with its status and no ``Done``. Under
the sandbox one byte on the init's notice socket, once ``Done`` is in the channel, lets the init
end the run while the host is still reading the frame; the worker then waits for the init's
kill rather than exiting.

Everything the protocol depends on (``os.write``, ``os.read``, ``os._exit``, the encoder, the
ledger) is bound at import time, so a program that monkeypatches ``print``, ``sys.stdout``,
``json`` or ``os.write`` cannot break the framing. The host remains the authority regardless.
This module imports only the standard library, ``msgspec`` and its sibling wire modules; what
the program sees (``tools``, call handles, error classes, capture streams) is ``_worker_api``,
how an uncaught exception is rendered ``_worker_render``. What is left here is one thing, the
worker's side of the channel, kept whole so that reading it shows every frame the worker may
send and when.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import faulthandler
import inspect
import json
import linecache
import logging
import os
import pprint
import select
import selectors
import signal
import sys
import threading
import types
import warnings
from collections.abc import Callable
from functools import partial, wraps
from itertools import groupby
from operator import itemgetter
from typing import Any, Final, NoReturn

from . import _worker_api
from ._frames import (
    HEAD_BYTES,
    HELP_NAMESPACE,
    PREFIX_BYTES,
    Boot,
    Call,
    Done,
    DoneError,
    Log,
    OutputLimit,
    Reply,
    encode_into,
    host_frame_decoder,
    write_prefix,
)
from ._ledger import OutputLedger, clean_text, limit_message
from ._program import (
    ABSENT_NAME,
    FILENAME,
    FUNCTION_NAME,
    STAR_IMPORT_NAME,
    ProgramError,
    compile_program,
    source_lines,
)
from ._sandbox._init import WHERE_FD, WHERE_SIGNAL
from ._tokens import TokenError, detokenize, not_lossless, tokenize
from ._worker_api import (
    ABSENT,
    CallHandle,
    CaptureStream,
    Namespace,
    access_expression,
    arity_message,
    error_class,
    guard_nested_run,
    guard_nested_run_until_complete,
    guard_other_loops_run_until_complete,
    json_default_naming_handles,
    plain_error,
    program_stack_only,
    program_tracebacks_only,
    recursion_counted_from,
    signature_naming_bindings,
    unawaited_call,
    wait_accepting_handles,
)
from ._worker_render import (
    SANDBOX_REFUSALS,
    Refusal,
    render_exception,
    render_reported_exception,
)

__all__ = [
    "CHANNEL_IN",
    "CHANNEL_OUT",
    "HOST_FRAMES",
    "Loaded",
    "Worker",
    "exit_status",
    "load_program",
    "read_boot",
    "read_go",
    "run_program",
    "set_up",
]

CHANNEL_IN: Final = 3
"""Descriptor the worker reads host frames from."""
CHANNEL_OUT: Final = 4
"""Descriptor the worker writes its frames to."""

_os_write = os.write
_os_read = os.read
_os_exit = os._exit
_os_fstat = os.fstat
_pthread_sigmask = signal.pthread_sigmask
_SIG_BLOCK = signal.SIG_BLOCK
_ALL_SIGNALS = frozenset(signal.valid_signals())
_select = select.select
_setpriority = os.setpriority
_PRIO_PROCESS = os.PRIO_PROCESS
_builtin_print = builtins.print
_builtin_help: Callable[..., Any] | None = getattr(builtins, "help", None)
_get_ident = threading.get_ident
_encode_into = encode_into
_write_prefix = write_prefix
_WORKER_FILES: Final = frozenset({__file__, _worker_api.__file__})
"""Files whose frames a rendered traceback does not end with: the worker's own."""
_NOT_LOSSLESS_ARGS: Final = "binding arguments must be lossless JSON"
_NOT_LOSSLESS_RESOLUTION: Final = "binding resolution must be lossless JSON"
_READ_BYTES: Final = 1 << 16
"""What one read of the channel takes at most: all a pipe holds by default. ``os.read`` first
allocates this much: a mebibyte is mapped, faulted and unmapped again at every read (measured in
a forked worker: about 45 us for a read of 2 KB of replies, against 15 us for this)."""
_CHANNEL_LOST: Final = 70
"""The worker's exit status when it can no longer read its channel (as for any run it cannot
go on with)."""


_BINDING_DOC: Final = (
    "A binding: await it with one dict of arguments for its value; help() on it shows its"
    " description and parameters."
)
_HELP_WITHOUT_ARGUMENT: Final = (
    "help() has no prompt in a run_code program (it has no standard input): ask about"
    " something, help(tools) for every tool's declarations, help(tools.name) for one tool's,"
    " help(len) for anything else."
)
_HELP_IN_PROGRAM: Final = (
    "call it in the program itself, outside any thread, for the description the tools have"
)
_FRAME_HEAD_BYTES: Final = min(select.PIPE_BUF, PREFIX_BYTES + HEAD_BYTES)
"""What the worker sends of a frame over the host's cap (``oversized``)."""
_FOREIGN_THREAD_CALL: Final = "tools bindings must be called from the run_code event loop"
_FORKED_CALL: Final = (
    "tools bindings must be called from the run_code worker, not a process it forked"
)


def _write_native(fd: int, text: str, *, line: bool = True) -> None:
    """Write ``text`` to ``fd`` (what a forked child's output becomes), as a line unless
    ``line`` is false (then as written: what a print or a stream write gave)."""
    if line and not text.endswith("\n"):
        text += "\n"
    with contextlib.suppress(OSError):
        _write_all(fd, text.encode("utf-8", "replace"))


def _write_all(fd: int, data: bytes | bytearray) -> None:
    written = _os_write(fd, data)
    if written == len(data):  # nearly always: a frame fits in the pipe at once
        return
    view = memoryview(data)[written:]
    try:
        while view:
            written = _os_write(fd, view)
            view = view[written:]
    finally:
        view.release()


def _read_exact(fd: int, count: int) -> bytes:
    parts: list[bytes] = []
    while count:
        chunk = _os_read(fd, min(count, 1 << 20))
        if not chunk:
            _os_exit(0)  # the host closed the channel: nothing left to do
        parts.append(chunk)
        count -= len(chunk)
    return b"".join(parts)


class Worker:
    """One run's worker-side state."""

    def __init__(
        self, boot: Boot, write: Callable[[bytes | bytearray], None] | None = None
    ) -> None:
        """``write``: where frames go (all of one frame at once); the worker->host channel."""
        self.boot = boot
        self.write = write if write is not None else partial(_write_all, CHANNEL_OUT)
        self.ledger = OutputLedger(boot.max_output_bytes)
        self.frame_limit = PREFIX_BYTES + boot.max_frame_bytes
        """The most bytes one frame may take, length prefix included."""
        self.output_closed = False
        self.in_child = False
        """Whether this process is a child the program forked (``forked``)."""
        self.done = False
        self.next_id = 0
        self.pending: dict[int, CallHandle] = {}
        self.thread = _get_ident()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.selector: selectors.BaseSelector | None = None
        """The loop's selector (``forked`` empties it in a child)."""
        self.send_lock = threading.RLock()
        self.decode = HOST_FRAMES.decode
        self.inbox = bytearray()
        self.stdout = CaptureStream(self.write_stdout, 1, "<stdout>")
        self.stderr = CaptureStream(self.write_stderr, 2, "<stderr>")
        self.notice: tuple[int, int] | None = None
        """The init's notice socket: descriptor and inode (``tell_init``)."""
        self.module: types.ModuleType | None = None
        """The run's fresh ``__main__``, made ahead (``set_up``); ``load_program`` takes it."""
        self.error_classes: dict[tuple[str, str], type[Exception]] = {}
        """The error classes of the run's namespaces by (name, member attribute)."""
        self.namespaces: dict[str, Namespace] = {}
        """The program's binding namespaces by global name (``help`` looks its objects up)."""
        self.gathers: dict[int, list[tuple[int, str]]] = {}
        """By thread: what the printer that thread runs (``one_entry``) wrote so far, and to
        which stream (1 or 2)."""

    def error_class(self, name: str, member_attr: str) -> type[Exception]:
        """The run's error class ``name`` (made once: a worker serves one run)."""
        made = self.error_classes.get((name, member_attr))
        if made is None:
            made = self.error_classes[name, member_attr] = error_class(name, member_attr)
        return made

    def attach(self, boot: Boot) -> None:
        """Take the run's boot: the worker was made while it waited for one."""
        self.boot = boot
        self.ledger = OutputLedger(boot.max_output_bytes)
        self.frame_limit = PREFIX_BYTES + boot.max_frame_bytes

    # -- sending ----------------------------------------------------------------------------

    def send(self, frame: Any) -> None:
        # ``encode_frame``, inline: every binding call sends a frame.
        data = bytearray(PREFIX_BYTES)
        _encode_into(frame, data, PREFIX_BYTES)
        size = len(data)
        _write_prefix(data, 0, size - PREFIX_BYTES)
        if size > self.frame_limit:
            self.oversized(data)
        with self.send_lock:
            self.write(data)

    def oversized(self, data: bytes | bytearray) -> NoReturn:
        """Send only the head of a frame over the host's cap, then wait for the end of the run.
        The host fails the run from the length prefix, before it reads any body, and names
        what the frame carries from the bytes that came with the prefix: written at once (at
        most ``PIPE_BUF``: one piece in the pipe), they all come with it. The rest would only
        cost a write the host never reads."""
        with self.send_lock:
            with contextlib.suppress(OSError):
                self.write(data[:_FRAME_HEAD_BYTES])
            _await_kill()

    def forked(self) -> None:
        """``os.fork``'s hook in a child of the program's: it runs on through the program, as
        a script's child does, but the run stays the worker's. Its frames would interleave
        with the worker's on the shared channel (a bogus frame size fails the run), its
        calls' ids would collide with the worker's, its reads would take the worker's replies,
        and its end would settle the run; so it leaves the channel: it prints to its native
        descriptors, refuses binding calls, and its end ends only itself."""
        self.in_child = True
        self.output_closed = True  # ``emit`` writes to the native descriptor instead
        self.gathers.clear()  # a child writes as it goes (``write_stdout``)
        self.notice = None
        self.loop = None  # ``submit`` refuses binding calls
        selector = self.selector
        if selector is not None:
            # Every descriptor the loop watches is the worker's too: the channel and the loop's
            # own wake-up socket pair, whose wake-ups (a thread's result) a child waiting on
            # its loop would read while the worker slept on. A poll selector's watches are
            # this process's own state.
            for key in list(selector.get_map().values()):
                with contextlib.suppress(Exception):
                    selector.unregister(key.fileobj)

    def emit(self, text: str, fd: int = 1) -> None:
        """Admit one log entry through the ledger and stream it to the host. ``fd``: the
        stream it was written to (2 for ``sys.stderr``), which the run's log does not keep
        but a forked child's native output does, as a script's child keeps them apart."""
        if self.output_closed:
            if self.in_child:
                _write_native(fd, text)
            return
        text = clean_text(text)
        with self.send_lock:
            if self.output_closed:
                return
            try:
                if self.ledger.admit(text):
                    self.send(Log(text))
                    return
                self.output_closed = True
                prefix = self.ledger.overflow_prefix()
                if prefix:
                    self.send(Log(prefix))
                self.send(OutputLimit())
            except OSError:
                self.output_closed = True

    def write_stdout(self, text: str) -> None:
        """A write to ``sys.stdout``: one entry, or, in a forked child, the text as written
        (a script's child writes ``a`` and ``b`` as ``ab``, not as two lines)."""
        if self.in_child:
            _write_native(1, text, line=False)
        elif not self.gathers or not self.gathered(1, text):
            self.emit(text)

    def write_stderr(self, text: str) -> None:
        """A write to ``sys.stderr`` (see ``write_stdout``)."""
        if self.in_child:
            _write_native(2, text, line=False)
        elif not self.gathers or not self.gathered(2, text):
            self.emit(text, 2)

    def gathered(self, fd: int, text: str) -> bool:
        """Keep ``text``, written to stream ``fd``, for the entry of the printer this thread
        runs (``one_entry``); ``False`` when it runs none."""
        pieces = self.gathers.get(_get_ident())
        if pieces is None:
            return False
        pieces.append((fd, text))
        return True

    def one_entry(self, printer: Callable[..., Any]) -> Callable[..., Any]:
        """``printer``, a printer of the standard library's that writes one value in pieces
        (``pprint``, ``json.dump``, a logging handler, a warning), made to log
        what it writes to the capture streams as one write: one entry (per stream it writes
        to), as written. Each piece was an entry of its own, and the text shown, the entries
        joined by newlines, broke the value at every piece. A printer run inside another's (a
        logging handler's ``handleError`` printing a traceback) adds to the outer one's
        entry."""
        gathers = self.gathers

        @wraps(printer)
        def printing(*args: Any, **kwargs: Any) -> Any:
            ident = _get_ident()
            if self.in_child or ident in gathers:
                return printer(*args, **kwargs)
            pieces: list[tuple[int, str]] = []
            gathers[ident] = pieces
            try:
                return printer(*args, **kwargs)
            finally:
                gathers.pop(ident, None)
                self.emit_pieces(pieces)

        return printing

    def emit_pieces(self, pieces: list[tuple[int, str]]) -> None:
        """Emit what a printer wrote (``one_entry``): each run of pieces written to one
        stream as one entry, as one write of it would have been."""
        # As written (the contract's rule for a stream's writes): the printer's value is one
        # write, its newline kept.
        for fd, run in groupby(pieces, key=itemgetter(0)):
            self.emit("".join(text for _fd, text in run), fd)

    def refusals(self) -> tuple[Refusal, ...]:
        """The sandbox's refusals a failure explains: those of ``SANDBOX_REFUSALS`` under the
        sandbox (whose init's notice socket the worker has), none outside it."""
        return SANDBOX_REFUSALS if self.notice is not None else ()

    def thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        """``threading.excepthook``: an exception escaping a thread of the program is one log
        entry, its traceback showing the program's lines. Threading's own hook writes it in
        dozens of fragments (each an entry of its own), reads the lines it shows from files
        (the program has none) and starts in threading's frames; like it, this one says
        nothing of a ``SystemExit``, which ends only its thread."""
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        thread = args.thread.name if args.thread is not None else str(_get_ident())
        heading = f"Exception in thread {thread}:"
        self.emit(
            render_reported_exception(
                args.exc_value, heading, FILENAME, _WORKER_FILES, self.refusals()
            ),
            2,
        )

    def unraisable_hook(self, unraisable: sys.UnraisableHookArgs) -> None:
        """``sys.unraisablehook``: an exception the interpreter could not raise (in a
        ``__del__``, say) is one log entry, for the reasons ``thread_excepthook`` gives."""
        exc = unraisable.exc_value
        if exc is None:
            return
        if exc.__traceback__ is None:
            exc.__traceback__ = unraisable.exc_traceback
        heading = unraisable.err_msg or "Exception ignored in"
        if unraisable.object is not None:
            try:
                heading = f"{heading}: {unraisable.object!r}"
            except Exception:
                heading = f"{heading}: <object repr() failed>"
        self.emit(
            render_reported_exception(exc, heading, FILENAME, _WORKER_FILES, self.refusals()), 2
        )

    def print(
        self,
        *args: Any,
        sep: str | None = " ",
        end: str | None = "\n",
        file: Any = None,
        flush: bool = False,
    ) -> None:
        target = sys.stdout if file is None else file
        if target is not self.stdout and target is not self.stderr:
            _builtin_print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        if sep is None:
            sep = " "
        elif not isinstance(sep, str):
            raise TypeError(f"sep must be None or a string, not {type(sep).__name__}")
        if end is None:
            end = "\n"
        elif not isinstance(end, str):
            raise TypeError(f"end must be None or a string, not {type(end).__name__}")
        text = sep.join([str(arg) for arg in args]) + end
        fd = 1 if target is self.stdout else 2
        if self.in_child:  # as written, ``end`` included (see ``write_stdout``)
            _write_native(fd, text, line=False)
            return
        if self.gathers and self.gathered(fd, text):
            return
        if text.endswith("\n"):
            text = text[:-1]
        self.emit(text, fd)

    def help(self, *args: Any, **kwargs: Any) -> None:
        """``help()`` as a program sees it. On a binding or a binding namespace Python's own
        would describe the worker's closure or class; this shows what the host's describer
        gives (for a tool system: the tool's description, signature and argument and result
        types, as the SDK declares them). Anything else goes to Python's own, ``print`` and
        ``help`` themselves as the builtins they stand in for (not the worker's methods, whose
        text would name the worker's module and class)."""
        if not args and not kwargs:
            # Python's interactive help: thirty lines of welcome and farewell around a prompt
            # that reads end of file at once.
            self.emit(_HELP_WITHOUT_ARGUMENT)
            return
        about = self.binding_of(args[0]) if len(args) == 1 and not kwargs else None
        if about is None and len(args) == 1 and not kwargs and type(args[0]) is str:
            about = self.binding_named(args[0])
        if about is None and len(args) == 1 and not kwargs and type(args[0]) is CallHandle:
            # Python's own would describe the worker's handle class, internals and all.
            access = access_expression(args[0]._global, args[0]._name)
            self.emit(
                f"Help on a call of {access}: it is the pending call, not its result; await it"
                f" for the tool's value. help({access}) describes the tool."
            )
            return
        if about is None:
            import pydoc

            helper = _builtin_help if _builtin_help is not None else pydoc.help
            own = args[0] if len(args) == 1 else None
            if type(own) is str:
                # ``help("print")``: pydoc finds the name in ``builtins``, the worker's method.
                with contextlib.suppress(Exception):
                    own = pydoc.locate(own)
            if type(own) is types.MethodType and own.__self__ is self:
                args = (_builtin_print if own.__func__ is Worker.print else helper,)
            helper(*args, **kwargs)
            return
        global_name, name = about
        text = self.describe(global_name, name)
        if name is None:
            heading = (
                f"Help on {global_name}, the binding namespace (call a binding as"
                f" `await {access_expression(global_name, 'name')}(args)`):"
            )
            fallback = "Bindings: " + ", ".join(self.namespaces[global_name])
        else:
            access = access_expression(global_name, name)
            heading = f"Help on {access} (call it as `await {access}(args)`):"
            fallback = "A binding: it takes one dict of arguments; await the call for its value."
        if text is None and _get_ident() != self.thread:
            # Only the program's own thread asks the host (``describe``): what a thread of
            # the program is shown says where the rest is, rather than pass for all there is.
            fallback += f"\n(help() in a thread shows only this: {_HELP_IN_PROGRAM})"
        self.emit(f"{heading}\n\n{text if text is not None else fallback}")

    def binding_of(self, thing: object) -> tuple[str, str | None] | None:
        """``(global name, binding name)`` of a binding, ``(global name, None)`` of a
        namespace, or ``None`` for anything else."""
        for global_name, namespace in self.namespaces.items():
            if thing is namespace:
                return global_name, None
            for name, binding in namespace.__dsh_bindings__.items():
                if thing is binding:
                    return global_name, name
        return None

    def binding_named(self, text: str) -> tuple[str, str | None] | None:
        """What ``binding_of`` gives for the binding or namespace ``text`` names as a program
        would write it (``"tools.read"``, ``'tools["read"]'``, ``"tools"``), or by its bare
        name when no module or builtin has that name (pydoc's own lookup would find nothing
        but say "No Python documentation found"); ``None`` for anything else."""
        text = text.strip()
        for global_name, namespace in self.namespaces.items():
            names = namespace.__dsh_bindings__
            if text == global_name:
                return global_name, None
            rest = text.removeprefix(global_name)
            if rest != text:
                if rest.startswith(".") and rest[1:] in names:
                    return global_name, rest[1:]
                if rest.startswith("[") and rest.endswith("]"):
                    with contextlib.suppress(Exception):
                        key = ast.literal_eval(rest[1:-1])
                        if type(key) is str and key in names:
                            return global_name, key
        owners = [
            g for g, namespace in self.namespaces.items() if text in namespace.__dsh_bindings__
        ]
        if len(owners) == 1:
            import pydoc

            with contextlib.suppress(Exception):
                if pydoc.locate(text) is None:
                    return owners[0], text
        return None

    def describe(self, global_name: str, name: str | None) -> str | None:
        """The host's text for binding ``name`` of ``global_name`` (``None``: the namespace),
        or ``None`` when it has none. ``help`` is synchronous: the request goes out as a call
        and its reply is read here, the loop standing still meanwhile (the replies of other
        calls that come first are taken as the loop would take them). Only the program's own
        loop thread asks: another thread's reads would race the loop's."""
        loop = self.loop
        if _get_ident() != self.thread or loop is None:
            return None
        handle = CallHandle(loop, HELP_NAMESPACE, global_name, plain_error)
        self.next_id += 1
        call_id = self.next_id
        self.pending[call_id] = handle
        try:
            self.send(Call(call_id, HELP_NAMESPACE, global_name, [name]))
        except Exception:
            del self.pending[call_id]
            return None
        while not handle.done():
            _select((CHANNEL_IN,), (), ())
            self.on_readable()
        if handle.cancelled() or handle.exception() is not None:
            return None
        text = handle.result()
        return text if isinstance(text, str) else None

    # -- bindings ---------------------------------------------------------------------------

    def binding(
        self, global_name: str, name: str, error: Callable[[str, str], BaseException]
    ) -> Callable[[Any], CallHandle]:
        def call(*args: Any, **kwargs: Any) -> CallHandle:
            if len(args) != 1 or kwargs:
                raise TypeError(arity_message(global_name, name, len(args), kwargs))
            return self.submit(global_name, name, args[0], error)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = _BINDING_DOC
        return call

    def submit(
        self, global_name: str, name: str, args: Any, error: Callable[[str, str], BaseException]
    ) -> CallHandle:
        loop = self.loop
        if _get_ident() != self.thread or loop is None:
            raise RuntimeError(self.misplaced_call(global_name, name))
        handle = CallHandle(loop, global_name, name, error)
        tokens = tokenize(args)
        if tokens is None:
            problem = not_lossless(args, "arguments", unawaited=unawaited_call)
            handle.reject(f"{_NOT_LOSSLESS_ARGS}: {problem}")
            return handle
        self.next_id += 1
        call_id = self.next_id
        self.pending[call_id] = handle
        try:
            self.send(Call(call_id, global_name, name, tokens))
        except Exception as exc:
            del self.pending[call_id]
            handle.reject(f"binding call could not be sent: {exc}")
        return handle

    def misplaced_call(self, global_name: str, name: str) -> str:
        """What a binding call made elsewhere than on the program's loop is told: where calls
        go, and (from a thread) how several run at once there, which is what a thread pool
        calling tools is after."""
        access = access_expression(global_name, name)
        if self.in_child:
            return f"{_FORKED_CALL}: call {access}(...) in the process the program started in"
        return (
            f"{_FOREIGN_THREAD_CALL}: await {access}(...) in the program itself, not in a"
            " thread (asyncio.gather runs several calls at once)"
        )

    def on_readable(self) -> None:
        try:
            data = _os_read(CHANNEL_IN, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            # The program closed the channel's descriptor (or put something unreadable in its
            # place): no reply can come any more, and the loop would call this again at once,
            # for ever, logging each failure to the program's output.
            _os_exit(_CHANNEL_LOST)
        if not data:
            _os_exit(0)  # the host is gone
        # The frames are read in place (a slice would copy each body once more, about a
        # microsecond per reply): out of what arrived, or out of the inbox once it holds the
        # start of a frame (a large reply comes in many reads).
        inbox = self.inbox
        buffer: bytes | bytearray = data
        if inbox:
            inbox += data
            buffer = inbox
        view = memoryview(buffer)
        start = 0
        end = len(buffer)
        try:
            while end - start >= PREFIX_BYTES:
                size = int.from_bytes(view[start : start + PREFIX_BYTES], "big")
                body_end = start + PREFIX_BYTES + size
                if body_end > end:
                    break
                try:
                    frame = self.decode(view[start + PREFIX_BYTES : body_end])
                except Exception:
                    frame = None
                start = body_end
                if type(frame) is Reply:
                    self.on_reply(frame)
        finally:
            view.release()  # before the inbox changes size, which a view forbids
            if buffer is inbox:
                del inbox[:start]
            elif start < end:
                inbox += data[start:]  # the start of a frame still to come

    def on_reply(self, reply: Reply) -> None:
        handle = self.pending.pop(reply.id, None)
        if handle is None or handle.done():
            return
        if reply.ok:
            try:
                if reply.value is None:
                    raise TokenError("missing value")
                value = detokenize(reply.value)
            except TokenError as exc:
                handle.reject(f"{_NOT_LOSSLESS_RESOLUTION}: {exc}")
            else:
                handle.set_result(value)  # ``resolve``, less its test: not done, just seen
        elif isinstance(reply.message, str):
            handle.reject(reply.message)
        else:
            handle.reject("binding call failed")

    # -- completion -------------------------------------------------------------------------

    def finish(self, done: Done) -> NoReturn:
        if self.in_child:  # a child's end settles nothing; its failure is its own output
            if done.error is not None:
                _write_native(2, done.error.message)
            _flush_real_streams()
            _os_exit(0 if done.error is None else 1)
        self.done = True
        _flush_real_streams()
        told = False
        with contextlib.suppress(Exception):
            self.send(done)
            told = self.tell_init()
        if told:
            _await_kill()
        _os_exit(0)

    def tell_init(self) -> bool:
        """Tell the init the run is over; return whether it was told. Only if the descriptor
        still is the pipe it was at boot: a program may have closed it and opened a file of its
        own under its number."""
        notice = self.notice
        if notice is not None and _os_fstat(notice[0]).st_ino == notice[1]:
            return _os_write(notice[0], b"D") == 1
        return False

    def finish_value(self, value: Any) -> NoReturn:
        if value is ABSENT:
            self.finish(Done())
        tokens = tokenize(value)
        if tokens is None:
            problem = not_lossless(value, "value", advise=True, unawaited=unawaited_call)
            self.finish(
                Done(
                    error=DoneError(
                        "invalid-output", f"program completion must be lossless JSON: {problem}"
                    )
                )
            )
        if not self.ledger.fits_value(tokens):
            self.finish(Done(error=DoneError("output-limit", limit_message(self.ledger.cap))))
        self.finish(Done(value=tokens))

    def explain_declared_name(self, exc: NameError) -> None:
        """Add a note to ``exc`` if the name it did not find is a type of the declarations the
        model was shown (``def f(user: User)``, an annotation evaluated at ``def``): a bare
        "name 'User' is not defined" contradicts what the model read. Only a failing run
        asks the host for the declarations (as ``help(tools)`` does), on the program's
        thread."""
        with contextlib.suppress(Exception):
            name = exc.name
            # The declarations name their types in PascalCase: a misspelt variable (most
            # NameErrors) costs no request for them.
            if type(name) is not str or not name.isidentifier() or not name[:1].isupper():
                return
            heads = (f"class {name}(", f"class {name}:", f"{name} = ")
            for global_name in self.namespaces:
                text = self.describe(global_name, None)
                if text is not None and any(line.startswith(heads) for line in text.splitlines()):
                    exc.add_note(
                        f"{name} is a type of the tool declarations, which are for reading: a"
                        " program does not define it. Write the annotation as a string"
                        f' ("{name}") or leave it out.'
                    )
                    return

    def finish_exception(self, exc: BaseException, code: types.CodeType | None) -> NoReturn:
        if isinstance(exc, MemoryError) and not exc.args and self.boot.max_memory_mb > 0:
            # A bare ``MemoryError`` (its usual text is none) does not say that the run's
            # memory is limited, nor how far, as the host's "memory budget exhausted" does.
            # One with a text of its own says what it is, and is often no allocation: the
            # parser's "Parser stack overflowed" (``eval`` of a deeply nested string, Python
            # 3.12+), or one the program raises for a limit of its own.
            with contextlib.suppress(BaseException):
                exc.add_note(
                    f"A run_code program has at most {self.boot.max_memory_mb:g}MB of memory"
                    " for each of its processes: this allocation did not fit."
                )
        if type(exc) is NameError:
            self.explain_declared_name(exc)
        # Lone surrogates (``chr(0xD800)`` in a message) replaced as in captured output: the
        # frame could not be encoded with them.
        bindings = {
            global_name: namespace.__dsh_bindings__.keys()
            for global_name, namespace in self.namespaces.items()
        }
        errors = {made: attribute for (_, attribute), made in self.error_classes.items()}
        message = clean_text(
            render_exception(exc, code, _WORKER_FILES, self.refusals(), bindings, errors)
        )
        if not self.ledger.fits_message(message):
            self.finish(Done(error=DoneError("output-limit", limit_message(self.ledger.cap))))
        self.finish(Done(error=DoneError("exception", message)))


def _flush_real_streams() -> None:
    """Write out what the program left buffered in the real ``sys.__stdout__`` and
    ``sys.__stderr__`` (``print(file=sys.__stdout__)``), as an interpreter does at exit."""
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()


def _await_kill() -> NoReturn:
    """Wait, running nothing of the program, for the init's ``SIGKILL``, which the notice has
    asked for. Exiting here instead would put the kernel's teardown of this process's memory
    (up to milliseconds for an interpreter's worth of pages) ahead of the init on the core the
    notice woke it on, and so ahead of its report that the run is over; killed, the teardown
    follows that report. The init's own exit takes this process with it whatever happens.

    The teardown runs at the lowest priority (nice 19, which any process may take): the kill
    wakes this process just as the init's report wakes the host, often on the same core, and
    at the usual priority the scheduler ran the teardown first in a fifth of the empty runs
    traced, the host's last steps waiting a millisecond or more for it. Measured in turns
    against the usual priority, an empty run's median was 0.84-0.93 x."""
    with contextlib.suppress(BaseException):
        _pthread_sigmask(_SIG_BLOCK, _ALL_SIGNALS)  # no handler of the program runs again
    with contextlib.suppress(BaseException):
        _setpriority(_PRIO_PROCESS, 0, 19)
    while True:
        with contextlib.suppress(BaseException):
            _select((), (), ())


def read_boot() -> Boot:
    size = int.from_bytes(_read_exact(CHANNEL_IN, PREFIX_BYTES), "big")
    frame = HOST_FRAMES.decode(_read_exact(CHANNEL_IN, size))
    if type(frame) is not Boot:
        _os_exit(70)
    return frame


Loaded = tuple[types.ModuleType, Callable[[], Any]]
"""A program ready to run: its fresh ``__main__`` module and its coroutine function."""


def _fresh_main() -> types.ModuleType:
    """A fresh ``__main__`` with what every program's globals hold."""
    module = types.ModuleType("__main__")
    scope = module.__dict__
    scope["__builtins__"] = builtins
    scope["asyncio"] = asyncio
    scope[ABSENT_NAME] = ABSENT
    scope[STAR_IMPORT_NAME] = partial(_star_import, scope)
    return module


def _star_import(scope: dict[str, Any], name: str, level: int) -> None:
    """The program's ``from <name> import *`` (``level`` dots before the name): the names a
    module-level one binds (the module's ``__all__``, else its names without a leading
    underscore), put into the program's globals (``_program``)."""
    module = builtins.__import__(name, scope, None, ("*",), level)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [key for key in vars(module) if not key.startswith("_")]
    for key in names:
        scope[key] = getattr(module, key)


def load_program(worker: Worker) -> Loaded | Done:
    """The boot's program, defined in a fresh ``__main__`` module with its bindings (nothing
    of it runs yet), or, when it does not compile, the ``Done`` frame that finishes its run."""
    boot = worker.boot
    source = boot.program
    linecache.cache[FILENAME] = (len(source), None, source_lines(source), FILENAME)
    try:
        code = compile_program(source, _given_globals(boot))
    except ProgramError as error:
        if not worker.ledger.fits_message(error.message):
            return Done(error=DoneError("output-limit", limit_message(worker.ledger.cap)))
        return Done(error=DoneError("exception", error.message))

    module, worker.module = worker.module, None
    if module is None:
        module = _fresh_main()
    scope = module.__dict__
    for namespace in boot.namespaces:
        if namespace.error_class is not None:
            error_type: Callable[[str, str], BaseException] = worker.error_class(
                namespace.error_class.name, namespace.error_class.member_attr
            )
            scope[namespace.error_class.name] = error_type
        else:
            error_type = plain_error
        bindings = {
            name: worker.binding(namespace.global_name, name, error_type)
            for name in namespace.names
        }
        scope[namespace.global_name] = worker.namespaces[namespace.global_name] = Namespace(
            namespace.global_name, bindings
        )
    exec(code, scope)  # defines the program's function; nothing of the program runs yet
    return module, scope.pop(FUNCTION_NAME)


def _given_globals(boot: Boot) -> set[str]:
    """The globals a program is given that it may assign (``compile_program``): its binding
    namespaces and their error classes."""
    names = {namespace.global_name for namespace in boot.namespaces}
    names.update(
        namespace.error_class.name
        for namespace in boot.namespaces
        if namespace.error_class is not None
    )
    return names


def read_go() -> None:
    """Wait, after a held ``Boot``, for the host's ``GO`` (an empty frame); end of file means
    the run never came, and the worker exits without running anything of the program."""
    if int.from_bytes(_read_exact(CHANNEL_IN, PREFIX_BYTES), "big"):
        _os_exit(70)


def set_up(worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
    """What a run sets up around its program that does not depend on the program: the
    process-wide ``print``, ``sys.argv``, the capture streams, the event loop and its reader of
    the channel (it reads only once the loop runs, which is when the program does), a fresh
    ``__main__``, ``asyncio.run`` and every loop's ``run_until_complete`` that say to await
    when called on the program's loop,
    ``asyncio.wait`` that takes call handles, ``json`` that says to await a call handle,
    ``inspect.signature`` that gives a binding's signature as the SDK declares it, the
    ``poll`` selector as ``selectors.DefaultSelector``, ``faulthandler``, the recursion limit
    counted from the program's own frame (``recursion_counted_from``), ``traceback``'s stacks and
    tracebacks of the program's frames only (``program_stack_only``,
    ``program_tracebacks_only``), and
    the error classes of the namespaces the worker's boot so far names (the runtime's usual
    ones). A worker does this while it waits for its boot, off its run's
    path."""
    sys.argv = [FILENAME]
    sys.stdout = worker.stdout
    sys.stderr = worker.stderr
    builtins.print = worker.print
    builtins.help = worker.help  # type: ignore[assignment]  # site's helper, replaced
    threading.excepthook = worker.thread_excepthook
    # The standard library's printers that write one value in pieces, or a line and its
    # newline: each value one log entry.
    pprint.PrettyPrinter.pprint = worker.one_entry(pprint.PrettyPrinter.pprint)  # type: ignore[method-assign]
    json.dump = worker.one_entry(json.dump)
    logging.StreamHandler.emit = worker.one_entry(logging.StreamHandler.emit)  # type: ignore[method-assign]
    # (``traceback``'s printers print each piece, which ``print``'s rule makes an entry that
    # reads whole once the entries are joined: they are left as they are.)
    warnings.showwarning = worker.one_entry(warnings.showwarning)
    # (``traceback``'s printers print each piece, which ``print``'s rule makes an entry that
    # reads whole once the entries are joined: they are left as they are.)
    sys.unraisablehook = worker.unraisable_hook
    os.register_at_fork(after_in_child=worker.forked)
    asyncio.run = guard_nested_run(asyncio.run)
    asyncio.wait = wait_accepting_handles(asyncio.wait)
    binding_code = worker.binding("", "", plain_error).__code__  # every binding's
    inspect.signature = signature_naming_bindings(inspect.signature, binding_code)
    encoder = json.JSONEncoder
    encoder.default = json_default_naming_handles(encoder.default)  # type: ignore[method-assign,assignment]
    # The sandbox refuses ``epoll`` (its watches count against a limit per user), which
    # ``DefaultSelector`` is: a program's own event loop (``asyncio.new_event_loop()``,
    # ``asyncio.run`` in a thread) or selector failed with a bare ``PermissionError`` from
    # inside ``selectors``. ``poll``, which the worker's own loop uses, has no such limit.
    selectors.DefaultSelector = selectors.PollSelector  # type: ignore[misc,assignment]
    # A crash in C (recursion past the C stack once the program has raised the recursion
    # limit, ``ctypes`` on a bad address) ended the run as "worker exited with signal
    # SIGSEGV" and nothing else: the Python stack of each thread is written first (to the
    # native stderr pipe, which the run's log takes), then the signal ends the run as ever.
    faulthandler.enable(2)
    # The same stacks when the run's compute budget has run out or its wall ceiling is
    # reached (``WHERE_SIGNAL``): the host names the program's line it was at from them. To a
    # descriptor of their own, which the host reads for nothing else: on descriptor 2 they
    # showed as the program's output, and no text tells them from a crash's, which must show.
    faulthandler.register(WHERE_SIGNAL, WHERE_FD, all_threads=True, chain=False)
    program_stack_only(FILENAME)
    program_tracebacks_only()
    asyncio.set_event_loop(loop)
    guard_nested_run_until_complete(loop)
    guard_other_loops_run_until_complete()  # after: the program's loop keeps asyncio's own
    # Run as the program will be (``run_program`` is called from where this is), before the
    # loop reads the channel: how deep in the worker the program's own frames start.
    recursion_counted_from(loop.run_until_complete(_frames_beneath()))
    worker.loop = loop
    loop.add_reader(CHANNEL_IN, worker.on_readable)
    worker.module = _fresh_main()
    for namespace in worker.boot.namespaces:  # the usual ones (the worker's boot so far)
        spec = namespace.error_class
        if spec is not None:
            worker.error_class(spec.name, spec.member_attr)


async def _frames_beneath() -> int:
    """How many frames there are beneath a program's own (``settle``'s, its caller's,
    included), when this is run where the program is (see ``set_up``)."""
    frames = 0
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        frames += 1
        frame = frame.f_back
    return frames


def run_program(
    worker: Worker, loop: asyncio.AbstractEventLoop, loaded: Loaded | Done | None = None
) -> NoReturn:
    """Run the boot's program (``loaded`` already, or loaded now) on ``loop`` and finish the
    run; ``set_up`` has been done."""
    if loaded is None:
        loaded = load_program(worker)
    if isinstance(loaded, Done):
        worker.finish(loaded)
    module, function = loaded
    program_code: types.CodeType = function.__code__
    sys.modules["__main__"] = module
    os.set_blocking(CHANNEL_IN, False)

    async def settle() -> None:
        try:
            value = await function()
        except SystemExit:
            raise
        except BaseException as exc:
            worker.finish_exception(exc, program_code)
        worker.finish_value(value)

    try:
        loop.run_until_complete(settle())
    except SystemExit as exc:
        _flush_real_streams()  # ahead of the status's own text, as the interpreter does
        _os_exit(exit_status(exc))
    except BaseException as exc:
        worker.finish_exception(exc, program_code)
    worker.finish_exception(RuntimeError("the program's event loop stopped early"), None)


def exit_status(exc: SystemExit) -> int:
    status = exc.code
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF
    with contextlib.suppress(Exception):
        _write_all(2, (str(status) + "\n").encode("utf-8", "replace"))
    return 1


HOST_FRAMES: Final = host_frame_decoder()
"""The decoder of host frames, made once in the template."""
