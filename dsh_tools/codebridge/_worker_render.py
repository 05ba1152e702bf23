"""How the worker renders a program's uncaught exception: the traceback from the program's own
frame down, without the worker's trailing frames, with the program's locals released first.
A hostile exception (one whose ``__str__`` raises, say) renders as a fixed message. This module
imports only the standard library, how a binding is reached (``_worker_api``) and the notes on
models' mistakes (``_worker_notes``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import errno
import io
import itertools
import os
import socket
import sys
import threading
import traceback
import types
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from ._worker_api import access_expression
from ._worker_notes import callee_name, explain_mistakes, failed_span

__all__ = ["SANDBOX_REFUSALS", "Refusal", "render_exception", "render_reported_exception"]

_UNRENDERABLE: Final = "program threw an unrenderable value"
_ASYNCIO: Final = os.path.dirname(asyncio.__file__) + os.sep
"""asyncio's own files: its frames inside a program's traceback (``wait_for`` raising its
``TimeoutError``, a ``TaskGroup``'s ``__aexit__`` raising the group) name the host's Python
and tell the program nothing its own line and the exception do not, as a builtin's shows no
frame."""
_PICKLING_NOTE: Final = (
    "A function or class the program defines cannot be pickled: the program is the body of"
    " a function, so pickle does not find what it defines in __main__, and another process"
    " cannot import it (the program is no file). A multiprocessing pool, a"
    ' ProcessPoolExecutor or a process of the "spawn" or "forkserver" start method'
    ' pickles what it runs; a process of the "fork" start method'
    ' (multiprocessing.get_context("fork").Process(target=...)) runs it as it is, and so'
    " do threads (asyncio.to_thread)."
)
"""The note added to pickle's refusal of a function or class of the program (CPython's
text names neither the cause nor what works instead)."""


def _explain_pickling(exc: BaseException) -> None:
    """Add ``_PICKLING_NOTE`` to ``exc`` if it is pickle's refusal of a function or class the
    program defines: the program's module is ``__main__``, where pickle looks such an object up
    by name and, the program being the body of a function, does not find it. An exception
    whose text or notes cannot be read is left as it is."""
    if type(exc).__name__ != "PicklingError":
        return
    with contextlib.suppress(Exception):
        noted = getattr(exc, "__notes__", None) or ()
        if "__main__" in str(exc) and _PICKLING_NOTE not in noted:
            exc.add_note(_PICKLING_NOTE)


_SHARED_MEMORY_NOTE: Final = (
    "A run_code program has no POSIX shared memory (/dev/shm), where multiprocessing makes"
    " its semaphores and shared memory blocks: a multiprocessing lock, queue, pool or"
    " SharedMemory, or a ProcessPoolExecutor, cannot be made. Threads (asyncio.to_thread, a"
    ' ThreadPoolExecutor), subprocess and a process of the "fork" start method'
    ' (multiprocessing.get_context("fork").Process(target=...)) work.'
)
_NETWORK_NOTE: Final = (
    "A run_code program has no network: its sandbox refuses every socket but the pairs"
    " socket.socketpair() makes of type SOCK_STREAM (its default) or SOCK_SEQPACKET, and"
    " resolves no name. Reach what is outside through the tools."
)
_MANAGER_NOTE: Final = (
    "A run_code program has no network: multiprocessing.Manager() serves its objects over a"
    " socket, which the sandbox refuses, so its server process failed before it could answer."
    " Threads (queue.Queue, threading locks, asyncio.to_thread) and a process of the"
    ' "fork" start method talking over a multiprocessing.Pipe() work.'
)
_UNGRANTED_NOTE: Final = (
    "The sandbox lets a run_code program read only the Python installation, system"
    " directories, its working directory and the paths the harness grants: reach other files"
    " through the tools."
)
_NO_INPUT_NOTE: Final = (
    "A run_code program has no standard input: input() and sys.stdin read end of file at once."
    " Put what it needs in the program itself, or get it through the tools."
)
_DEBUGGER_NOTE: Final = (
    "A run_code program has no standard input, so breakpoint() and pdb read end of file at"
    " their first prompt and quit the program. Print or return the values to look at instead."
)
_NO_INPUT: Final = "EOF when reading a line"
"""The text of ``input()``'s ``EOFError``."""
_MANAGERS_FILE: Final = os.path.join("multiprocessing", "managers.py")
Refusal = tuple[int, str, str]
"""One refusal of the sandbox's that CPython reports in a bare ``strerror`` from inside the
standard library: the error number, the file of the failure's last frame (``""``: any), and
the note that says why and what works instead (``SANDBOX_REFUSALS``)."""
SANDBOX_REFUSALS: Final[tuple[Refusal, ...]] = (
    # ``[Errno 30] Read-only file system``: ``multiprocessing`` making the semaphore of a
    # lock, queue or pool in ``/dev/shm``.
    (errno.EROFS, os.path.join("multiprocessing", "synchronize.py"), _SHARED_MEMORY_NOTE),
    # The same, ``multiprocessing.shared_memory`` making a block there.
    (errno.EROFS, os.path.join("multiprocessing", "shared_memory.py"), _SHARED_MEMORY_NOTE),
    # ``[Errno 1] Operation not permitted``: ``socket`` making a socket.
    (errno.EPERM, os.path.join(os.sep, "socket.py"), _NETWORK_NOTE),
    # ``[Errno -3] Temporary failure in name resolution``, which is no temporary failure, and
    # ``[Errno -2] Name or service not known``: a lookup's, from ``socket.py``
    # (``getaddrinfo``) or straight from the program's line (``socket.gethostbyname``). Only
    # a lookup's error has a negative number.
    (socket.EAI_AGAIN, "", _NETWORK_NOTE),
    (socket.EAI_NONAME, "", _NETWORK_NOTE),
    # ``[Errno 13] Permission denied``: opening or listing a path the sandbox does not grant,
    # which the host itself may read; the bare text reads as the file's own protection.
    # (A write there is ``[Errno 30] Read-only file system``, which says enough.)
    (errno.EACCES, "", _UNGRANTED_NOTE),
)
"""What a sandboxed worker explains (a worker outside the sandbox may meet the same errors
for other reasons, and explains none)."""


def _explain_refusal(exc: BaseException, refusals: Sequence[Refusal]) -> None:
    """Add its note of ``refusals`` to ``exc`` if it is one of those refusals."""
    if not refusals or not isinstance(exc, OSError):
        return
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return
    with contextlib.suppress(Exception):
        filename = tb.tb_frame.f_code.co_filename
        noted = getattr(exc, "__notes__", None) or ()
        for number, file, note in refusals:
            if exc.errno == number and filename.endswith(file) and note not in noted:
                if number == errno.EACCES and not _ungranted(exc):
                    continue
                exc.add_note(note)


_READ_PROBE: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _ungranted(exc: OSError) -> bool:
    """Whether ``exc``'s ``EACCES`` is the sandbox refusing to read its path: the path's own
    permissions let the worker read it (``access`` asks those alone, not the sandbox's rules)
    and yet opening it to read is refused. A file or directory the worker may read by its
    grants but not by its mode (a file made unreadable) and a script run without its execute
    bit are refused for their own reasons, which the note would hide. Only a regular file or a
    directory is opened (no device's own open runs), non-blocking, and closed at once."""
    path = exc.filename
    if not isinstance(path, str | bytes) or not os.access(path, os.R_OK):
        return False
    if not os.path.isfile(path) and not os.path.isdir(path):
        return False
    try:
        os.close(os.open(path, _READ_PROBE))
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def _explain_manager(exc: BaseException, refusals: Sequence[Refusal]) -> None:
    """Add ``_MANAGER_NOTE`` to ``exc`` if it is the bare ``EOFError`` a manager's start
    raises when its server process, refused its socket by the sandbox, ended unanswered (that
    process's own ``PermissionError`` is only its output). Only under the sandbox, whose
    refusals ``refusals`` holds."""
    if not refusals or type(exc) is not EOFError:
        return
    with contextlib.suppress(Exception):
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.endswith(_MANAGERS_FILE):
                if _MANAGER_NOTE not in (getattr(exc, "__notes__", None) or ()):
                    exc.add_note(_MANAGER_NOTE)
                return
            tb = tb.tb_next


def _explain_no_input(exc: BaseException) -> None:
    """Add ``_NO_INPUT_NOTE`` to ``exc`` if it is the ``EOFError`` of ``input()`` (whose
    standard input is ``/dev/null``): "EOF when reading a line" says nothing of why."""
    if type(exc) is not EOFError or exc.args != (_NO_INPUT,):
        return
    with contextlib.suppress(Exception):
        if _NO_INPUT_NOTE not in (getattr(exc, "__notes__", None) or ()):
            exc.add_note(_NO_INPUT_NOTE)


def _explain_debugger(exc: BaseException) -> None:
    """Add ``_DEBUGGER_NOTE`` to ``exc`` if it is ``bdb.BdbQuit``: a debugger's prompt read end
    of file (standard input is ``/dev/null``), and the bare class name says nothing of why."""
    kind = type(exc)
    if kind.__name__ != "BdbQuit" or kind.__module__ != "bdb":
        return
    with contextlib.suppress(Exception):
        if _DEBUGGER_NOTE not in (getattr(exc, "__notes__", None) or ()):
            exc.add_note(_DEBUGGER_NOTE)


_TAKERS_OF_AWAITABLES: Final = frozenset(
    {"as_completed", "create_task", "ensure_future", "gather", "shield", "wait", "wait_for"}
)
"""asyncio's functions (and ``TaskGroup.create_task``) that take calls to await: a binding
passed to one of them uncalled fails inside asyncio, with a text that names neither."""


def _binding_access(
    node: ast.expr, bindings: Mapping[str, Collection[str]]
) -> tuple[str, str] | None:
    """``(global name, binding name)`` if ``node`` reaches a binding (``tools.x``,
    ``tools["x"]``)."""
    if isinstance(node, ast.Attribute):
        name: object = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        name = node.slice.value
    else:
        return None
    if not isinstance(node.value, ast.Name) or not isinstance(name, str):
        return None
    if name not in bindings.get(node.value.id, ()):
        return None
    return node.value.id, name


def _uncalled_binding(
    exc: BaseException, bindings: Mapping[str, Collection[str]]
) -> tuple[str, str] | None:
    """``(global name, binding name)`` if ``exc`` is what a binding used uncalled raised:
    awaited itself (``await tools.x``, Python's "object function can't be used in 'await'
    expression") or passed to one of ``_TAKERS_OF_AWAITABLES`` (``asyncio.gather(tools.x)``,
    asyncio's "An asyncio.Future, a coroutine or an awaitable is required"), neither of which
    names the binding or the call it lacks. What the program's last frame failed on is the
    span its traceback marks."""
    if not bindings or type(exc) not in (TypeError, AttributeError):
        return None
    failed = failed_span(exc)
    if failed is None:
        return None
    last, node = failed
    if isinstance(node, ast.Await):
        if last.tb_next is None:  # Python's refusal, raised in the program's own frame
            return _binding_access(node.value, bindings)
        node = node.value  # a coroutine of asyncio's, which failed as it was awaited
    if not isinstance(node, ast.Call):
        return None
    if callee_name(node) not in _TAKERS_OF_AWAITABLES:
        return None
    arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
    called = {
        id(inner.func)
        for argument in arguments
        for inner in ast.walk(argument)
        if isinstance(inner, ast.Call)
    }
    for argument in arguments:
        for inner in ast.walk(argument):
            if isinstance(inner, ast.expr) and id(inner) not in called:
                found = _binding_access(inner, bindings)
                if found is not None:
                    return found
    return None


def _explain_uncalled_binding(exc: BaseException, bindings: Mapping[str, Collection[str]]) -> None:
    """Add to ``exc``, if it is what a binding used uncalled raised, a note that says to call
    it (``_uncalled_binding``). An exception whose source cannot be read is left as it
    is."""
    with contextlib.suppress(Exception):
        uncalled = _uncalled_binding(exc, bindings)
        if uncalled is not None:
            access = access_expression(*uncalled)
            exc.add_note(
                f"{access} was not called: it is the binding, not a call of it; write"
                f" await {access}({{...}}), its one dict of arguments in the braces"
            )


_display_exception: Final = sys.__excepthook__
"""The interpreter's own display of an uncaught exception (bound before any program runs)."""
_SUGGESTION: Final = ". Did you mean: '"
_SUGGESTS_IN_TRACEBACK: Final = sys.version_info >= (3, 12)
"""Whether the ``traceback`` module makes the interpreter's "Did you mean" suggestions (it
does from 3.12 on; before, only the interpreter's own display did)."""


class _Display(io.TextIOBase):
    """``sys.stderr`` while the interpreter's display runs into it: what this thread writes is
    kept, what another thread of the program writes meanwhile goes on to ``stream``, the stream
    it replaces."""

    def __init__(self, stream: object) -> None:
        self.parts: list[str] = []
        self.stream = stream
        self.thread = threading.get_ident()

    def write(self, text: str, /) -> int:
        if threading.get_ident() != self.thread:
            write = getattr(self.stream, "write", None)
            return write(text) if write is not None else len(text)
        self.parts.append(text)
        return len(text)

    def writable(self) -> bool:
        return True


def _suggest_as_the_interpreter_does(exc: BaseException) -> None:
    """Before 3.12: end the message of ``exc``, a ``NameError`` or ``AttributeError`` for
    which the interpreter's own display suggests a name (``name 'valeu' is not defined. Did
    you mean: 'value'?``), with that suggestion, which the ``traceback`` module does not make.
    The display is the one place that computes it; it reads the names of the frame the
    exception was raised in, so this runs before the frames are cleared. Anything unexpected
    leaves ``exc`` as it is."""
    if not isinstance(exc, (NameError, AttributeError)) or len(exc.args) != 1:
        return
    text = exc.args[0]
    if not isinstance(text, str) or str(exc) != text:
        return
    stderr = sys.stderr
    shown = _Display(stderr)
    sys.stderr = shown
    try:
        _display_exception(type(exc), exc, exc.__traceback__)
    finally:
        sys.stderr = stderr
    output = "".join(shown.parts)
    start = output.rfind(text + _SUGGESTION)
    if start < 0:
        return
    start += len(text)
    end = output.find("\n", start)
    suggestion = output[start : end if end >= 0 else len(output)]
    if suggestion.endswith("'?"):
        exc.args = (text + suggestion,)


def _passes_through(tb: types.TracebackType | None, filename: str) -> bool:
    """Whether the traceback ``tb`` has a frame of the file ``filename`` (the program's)."""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            return True
        tb = tb.tb_next
    return False


def _trim(
    tb: types.TracebackType | None,
    code: types.CodeType | None,
    worker_files: Collection[str],
    *,
    keep: int = 1,
) -> types.TracebackType | None:
    """Keep the traceback from the program's own frame down, minus the worker's frames (all
    but ``keep`` trailing ones when nothing else is left).

    A traceback that never passed through the program's own frame starts at its first frame of
    the program's file; one with none (the program broke the worker's event loop, say) shows no
    frames at all: they would all be the worker's or asyncio's.
    """
    if code is not None:
        cursor = tb
        while cursor is not None and cursor.tb_frame.f_code is not code:
            cursor = cursor.tb_next
        if cursor is None:
            # Raised in a task of the program's and let out of the event loop at once (asyncio
            # does so with a ``KeyboardInterrupt``): the traceback never passed through the
            # program's own frame, and starts at the task's first frame of the program's file.
            cursor = tb
            while cursor is not None and cursor.tb_frame.f_code.co_filename != code.co_filename:
                cursor = cursor.tb_next
        tb = cursor
    entries: list[types.TracebackType] = []
    cursor = tb
    while cursor is not None:
        entries.append(cursor)
        cursor = cursor.tb_next
    # The worker's frames, trailing or between the program's (which stand in for builtins,
    # ``print`` calling the program's ``__str__``, and show none), go, and so do asyncio's;
    # with nothing else left, the first ``keep`` stay.
    program = [
        e
        for e in entries
        if e.tb_frame.f_code.co_filename not in worker_files
        and not e.tb_frame.f_code.co_filename.startswith(_ASYNCIO)
    ]
    entries = program or entries[:keep]
    if not entries:
        return None
    for entry, following in itertools.pairwise(entries):
        entry.tb_next = following
    entries[-1].tb_next = None
    return entries[0]


def _passes(tb: types.TracebackType | None, code: types.CodeType) -> bool:
    """Whether traceback ``tb`` passes through a frame of ``code``."""
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def _script_exception(exc: BaseException, code: types.CodeType | None) -> BaseException:
    """``exc`` as a script would have raised it. A ``StopIteration`` that leaves the program's
    own frame (``next()`` of an empty iterator at its top level) leaves a coroutine, the one
    its body is, and Python raises ``RuntimeError: coroutine raised StopIteration`` in its
    place, outside the program (no line of it shown): a script's top level is no coroutine,
    and raises the ``StopIteration`` itself. One raised in a coroutine of the program's own
    is left as it is: there the ``RuntimeError`` is Python's, raised on the program's line."""
    cause = exc.__cause__
    if (
        code is not None
        and type(exc) is RuntimeError
        and isinstance(cause, StopIteration)
        and not _passes(exc.__traceback__, code)
        and _passes(cause.__traceback__, code)
    ):
        return cause
    return exc


def _explain_unseen_call(
    exc: BaseException, errors: Mapping[type, str], bindings: Mapping[str, Collection[str]]
) -> None:
    """Name the call a failed call's error came from when no line of the program shows it (a
    call a task group ran as a task of its own): its message alone may not say which tool
    failed."""
    attribute = errors.get(type(exc))
    name = getattr(exc, attribute, None) if attribute is not None else None
    if type(name) is not str:
        return
    for global_name, names in bindings.items():
        if name in names:
            exc.add_note(f"raised by a call of {access_expression(global_name, name)}")
            return


def render_exception(
    exc: BaseException,
    code: types.CodeType | None,
    worker_files: Collection[str],
    refusals: Sequence[Refusal] = (),
    bindings: Mapping[str, Collection[str]] | None = None,
    errors: Mapping[type, str] | None = None,
) -> str:
    """``exc`` rendered as a traceback from ``code``'s frame down (the whole traceback when
    ``code`` is ``None``), without trailing frames of ``worker_files``, an exception of
    ``refusals`` with its note, one that a binding of ``bindings`` (binding names by
    namespace) used uncalled raised with a note that says to call it, and a failed call's
    error (of a class of ``errors``, by the attribute that names its binding) that no frame
    of the program shows with a note naming the call."""
    try:
        exc = _script_exception(exc, code)
        seen: set[int] = set()
        pending: list[tuple[BaseException, bool]] = [(exc, False)]
        while pending:
            current, member = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            _explain_pickling(current)
            _explain_refusal(current, refusals)
            _explain_manager(current, refusals)
            _explain_no_input(current)
            _explain_debugger(current)
            explain_mistakes(current, bindings, errors)
            if bindings:
                _explain_uncalled_binding(current, bindings)
            if not _SUGGESTS_IN_TRACEBACK:
                with contextlib.suppress(Exception):
                    _suggest_as_the_interpreter_does(current)
            if member:
                # An exception group's member was raised in a task of its own: its traceback
                # starts in a coroutine of the program (or in a tool call's handle, whose
                # frames are all the worker's), never in the program's own frame.
                current.__traceback__ = _trim(current.__traceback__, None, worker_files, keep=0)
                if current.__traceback__ is None and errors and bindings:
                    _explain_unseen_call(current, errors, bindings)
            else:
                current.__traceback__ = _trim(current.__traceback__, code, worker_files)
            cause = current.__cause__
            if (
                isinstance(current, TimeoutError)
                and isinstance(cause, asyncio.CancelledError)
                and code is not None
                and not _passes_through(cause.__traceback__, code.co_filename)
            ):
                # ``wait_for``'s or ``asyncio.timeout``'s: it cancelled what it waited for and
                # raised this from that cancellation, asyncio's means, not the program's, which
                # showed as a bare "asyncio.exceptions.CancelledError" above the traceback. Kept
                # where it shows a line of the program (the coroutine that was waiting).
                current.__cause__ = None
            for linked in (current.__cause__, current.__context__):
                if linked is not None:
                    pending.append((linked, member))
            if isinstance(current, BaseExceptionGroup):
                pending.extend((inner, True) for inner in current.exceptions)
        str(exc)  # a hostile __str__ makes the value unrenderable
        if _SUGGESTS_IN_TRACEBACK and not isinstance(exc, MemoryError):
            # Taken in before the frames are cleared: its "Did you mean" suggestion for a
            # ``NameError`` reads the names of the frame the exception was raised in.
            shown = traceback.TracebackException.from_exception(exc)
            traceback.clear_frames(exc.__traceback__)
            return "".join(shown.format()).rstrip("\n")
        traceback.clear_frames(exc.__traceback__)  # release the program's locals first
        return "".join(traceback.format_exception(exc)).rstrip("\n")
    except MemoryError:
        return "MemoryError"
    except BaseException:
        return _UNRENDERABLE


def render_reported_exception(
    exc: BaseException,
    heading: str,
    program_file: str,
    worker_files: Collection[str],
    refusals: Sequence[Refusal] = (),
) -> str:
    """``heading`` and ``exc`` below it, rendered as ``render_exception`` does from the first
    frame of ``program_file`` down: what threading reports of an exception that escapes a
    thread of the program, or the interpreter of one it could not raise (in a ``__del__``),
    whose first frames are not the program's."""
    cursor = exc.__traceback__
    while cursor is not None and cursor.tb_frame.f_code.co_filename != program_file:
        cursor = cursor.tb_next
    code = cursor.tb_frame.f_code if cursor is not None else None
    return f"{heading}\n{render_exception(exc, code, worker_files, refusals)}"
