"""How the worker renders a program's uncaught exception: the traceback from the program's own
frame down, without the worker's trailing frames, with the program's locals released first.
A hostile exception (one whose ``__str__`` raises, say) renders as a fixed message. This module
imports only the standard library, the program's file name (``_program``) and how a binding
is reached (``_worker_api``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import errno
import io
import itertools
import linecache
import os
import socket
import sys
import threading
import traceback
import types
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from ._program import FILENAME, FUNCTION_NAME
from ._worker_api import CallHandle, access_expression

__all__ = ["SANDBOX_REFUSALS", "Refusal", "render_exception", "render_reported_exception"]

_UNRENDERABLE: Final = "program threw an unrenderable value"
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
                exc.add_note(note)


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


def _failed_span(
    exc: BaseException, *, skip: str | None = None
) -> tuple[types.TracebackType, ast.expr] | None:
    """The last traceback entry of ``exc`` in the program's file (not counting frames of code
    named ``skip``) and the expression it failed on, the span the traceback marks (over as
    many lines as it takes: a call written one argument a line), parsed; ``None`` when there
    is none."""
    tb = exc.__traceback__
    last: types.TracebackType | None = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == FILENAME and code.co_name != skip:
            last = tb
        tb = tb.tb_next
    if last is None or last.tb_lasti < 0:
        return None
    code = last.tb_frame.f_code
    line, end_line, start, end = next(
        itertools.islice(code.co_positions(), last.tb_lasti // 2, None), (None, None, None, None)
    )
    if line is None or end_line is None or start is None or end is None:
        return None
    # The columns are offsets in the UTF-8 bytes of the first and the last line.
    lines = [
        linecache.getline(FILENAME, number).encode("utf-8") for number in range(line, end_line + 1)
    ]
    lines[-1] = lines[-1][:end]
    lines[0] = lines[0][start:]
    return last, ast.parse(b"".join(lines).decode("utf-8"), mode="eval").body


def _callee_name(node: ast.Call) -> str | None:
    """The name a call calls: ``gather`` of ``asyncio.gather(...)`` and of ``gather(...)``."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


_GATHER_NOTE: Final = (
    "asyncio.gather() takes the calls as separate arguments: write asyncio.gather(*calls),"
    " not asyncio.gather(calls)"
)


_YIELD_IN_TASK: Final = "yield was used instead of yield from"


def _explain_gather_of_one_collection(exc: BaseException) -> None:
    """Add ``_GATHER_NOTE`` to ``exc`` if it is what ``asyncio.gather`` given one collection
    of calls raised: a list's "unhashable type: 'list'" from inside asyncio, or, for a
    generator expression, which asyncio takes for an old-style coroutine and runs as a task,
    "yield was used instead of yield from" from the expression's frame (with a repr of the
    task naming asyncio's file on the host). Neither says what the call lacked."""
    if type(exc) not in (TypeError, RuntimeError):
        return
    with contextlib.suppress(Exception):
        failed = _failed_span(exc, skip="<genexpr>")
        if failed is None:
            return
        entry, node = failed
        if isinstance(node, ast.Await):
            node = node.value
        if not (isinstance(node, ast.Call) and _callee_name(node) == "gather"):
            return
        if len(node.args) != 1:
            return
        given = node.args[0]
        if isinstance(given, ast.Name):
            # ``asyncio.gather(calls)``: a collection only by its value (``gather(fetch)``,
            # a function left uncalled, fails the same way for another reason).
            frame = entry.tb_frame
            value = frame.f_locals.get(given.id, frame.f_globals.get(given.id))
            collection = isinstance(value, (list, tuple, set, types.GeneratorType))
        else:
            collection = isinstance(given, (ast.List, ast.ListComp, ast.GeneratorExp))
        if collection and _GATHER_NOTE not in (getattr(exc, "__notes__", None) or ()):
            if type(exc) is RuntimeError and str(exc).startswith(_YIELD_IN_TASK):
                # asyncio's text goes on with the task's repr, which names its own file on
                # the host; what the task ran is said here instead.
                exc.args = (f"{_YIELD_IN_TASK} in the generator expression gather ran as a task",)
            exc.add_note(_GATHER_NOTE)


def _explain_key_as_attribute(exc: BaseException) -> None:
    """Add a note to ``exc`` if it is a dict's ``AttributeError`` for one of its keys
    (``user.name``): the declarations show a tool's result as a ``TypedDict`` class, whose
    fields a model reads as attributes, and Python's text does not say the key is there."""
    if type(exc) is not AttributeError:
        return
    with contextlib.suppress(Exception):
        mapping = exc.obj
        name = exc.name
        if type(mapping) is dict and type(name) is str and name in mapping:
            note = (
                f"{name} is a key of this dict (tool results are dicts):"
                f" write [{name!r}], not .{name}"
            )
            if note not in (getattr(exc, "__notes__", None) or ()):
                exc.add_note(note)


_UNBOUND_ASYNCIO: Final = (
    "cannot access local variable 'asyncio' where it is not associated with a value"
)
_UNBOUND_ASYNCIO_NOTE: Final = (
    "asyncio is predefined, but the program imports or assigns it further down, which makes"
    " the name the program's own from its first line on: import it at the top, or not at all."
)


def _explain_asyncio_imported_late(exc: BaseException) -> None:
    """Add ``_UNBOUND_ASYNCIO_NOTE`` to ``exc`` if it is the program's own frame reading the
    predefined ``asyncio`` before the program's own ``import asyncio`` further down: the
    program is a function body, so that import makes the name local throughout (unlike
    ``tools``, which is declared ``global`` when assigned, at the cost of a second compile
    that every program importing ``asyncio`` would pay: most import it first, and work)."""
    if type(exc) is not UnboundLocalError or exc.args != (_UNBOUND_ASYNCIO,):
        return
    with contextlib.suppress(Exception):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code if tb is not None else None
        if (
            code is not None
            and code.co_filename == FILENAME
            and code.co_name == FUNCTION_NAME
            and _UNBOUND_ASYNCIO_NOTE not in (getattr(exc, "__notes__", None) or ())
        ):
            exc.add_note(_UNBOUND_ASYNCIO_NOTE)


_READING_KEYWORDS_NOTE: Final = (
    "closed= and extra_items= tell the reader of the tool declarations which keys a dict may"
    " have; this Python's TypedDict takes neither: leave them out (tool arguments and results"
    " are plain dicts, which need no class)."
)


def _explain_declaration_keywords(exc: BaseException) -> None:
    """Add ``_READING_KEYWORDS_NOTE`` to ``exc`` if it is a ``TypedDict`` refusing the
    ``closed=`` or ``extra_items=`` of the declarations (PEP 728), which a model copied into its
    program: Python's text names only the keyword and ``_TypedDictMeta``."""
    if type(exc) is not TypeError:
        return
    with contextlib.suppress(Exception):
        text = str(exc)
        if (
            "TypedDict" in text
            and ("'closed'" in text or "'extra_items'" in text)
            and _READING_KEYWORDS_NOTE not in (getattr(exc, "__notes__", None) or ())
        ):
            exc.add_note(_READING_KEYWORDS_NOTE)


_NO_VARIABLE_NOTE: Final = (
    "A run_code program's environment holds only the variables the harness passes it: get what"
    " it needs through the tools."
)


def _explain_missing_variable(exc: BaseException) -> None:
    """Add ``_NO_VARIABLE_NOTE`` to ``exc`` if it is ``os.environ[name]``'s ``KeyError``: the
    worker's environment is empty but for what the harness passes, and the bare key reads as
    a variable someone forgot to set."""
    if type(exc) is not KeyError:
        return
    with contextlib.suppress(Exception):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if (
            tb is not None
            and tb.tb_frame.f_code is _ENVIRON_GETITEM
            and _NO_VARIABLE_NOTE not in (getattr(exc, "__notes__", None) or ())
        ):
            exc.add_note(_NO_VARIABLE_NOTE)


_ENVIRON_GETITEM: Final = type(os.environ).__getitem__.__code__


def _explain_error_class_as_binding(
    exc: BaseException, errors: Mapping[type, str], bindings: Mapping[str, Collection[str]]
) -> None:
    """Add a note to ``exc`` if it is a binding namespace's refusal of the name of an error
    class (``except tools.ToolCallError``): the declarations show the class beside ``Tools``,
    and "'tools' has no binding 'ToolCallError'" does not say it is a global of its own."""
    if type(exc) is not AttributeError:
        return
    with contextlib.suppress(Exception):
        name = exc.name
        if type(name) is not str or name not in {kind.__name__ for kind in errors}:
            return
        text = str(exc)
        for global_name in bindings:
            if text.startswith(f"{global_name!r} has no binding "):
                exc.add_note(
                    f"{name} is predefined on its own, not in {global_name}: write {name},"
                    f" not {global_name}.{name}"
                )
                return


def _explain_pending_result(exc: BaseException) -> None:
    """Add the handle's own advice to ``exc`` if it is ``result()`` (or ``exception()``) of a
    call the program has not awaited (``[call.result() for call in pending]``, as with
    ``concurrent.futures``): the handle is a future, whose ``InvalidStateError`` ("Result is
    not set.") says nothing of awaiting. The handle is the variable the failing span reads in
    the program's frame."""
    if type(exc) is not asyncio.InvalidStateError:
        return
    with contextlib.suppress(Exception):
        failed = _failed_span(exc)
        if failed is None:
            return
        entry, node = failed
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("result", "exception")
            and isinstance(node.func.value, ast.Name)
        ):
            return
        frame = entry.tb_frame
        name = node.func.value.id
        handle = frame.f_locals.get(name, frame.f_globals.get(name))
        if type(handle) is CallHandle:
            exc.add_note(handle._unawaited("", ""))


_MOST_HELD_CHARS: Final = 60
"""How long an expression ``_explain_error_as_value`` names (else it says "it")."""
_MOST_MESSAGE_CHARS: Final = 200
"""How much of a failed call's message ``_explain_error_as_value`` repeats."""


def _explain_error_as_value(
    exc: BaseException, errors: Mapping[type, str], bindings: Mapping[str, Collection[str]]
) -> None:
    """Add a note to ``exc`` if the program used a failed call's error (an instance of a class
    of ``errors``) as the call's value: ``asyncio.gather(..., return_exceptions=True)`` puts
    it among the values, and a program that does not check reads it as one. Python's text
    ("'ToolCallError' object is not subscriptable") names neither the call nor why it
    failed. The error is the ``AttributeError``'s object, or the variable the failing
    subscript reads in the program's frame."""
    if type(exc) not in (TypeError, AttributeError) or not errors:
        return
    with contextlib.suppress(Exception):
        failed = _failed_span(exc)
        if failed is None:
            return
        entry, node = failed
        if isinstance(node, ast.Attribute) and type(exc) is AttributeError:
            if not any(hasattr(kind, node.attr) for kind in (dict, list, str)):
                return  # ``error.code``: read as the error it is, not as a value
            error = exc.obj
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            frame = entry.tb_frame
            name = node.value.id
            error = frame.f_locals.get(name, frame.f_globals.get(name))
        else:
            return
        attribute = errors.get(type(error))
        tool = getattr(error, attribute, None) if attribute is not None else None
        if type(tool) is not str:
            return
        call = tool
        for global_name, names in bindings.items():
            if tool in names:
                call = access_expression(global_name, tool)
                break
        reason = str(error)
        if len(reason) > _MOST_MESSAGE_CHARS:
            reason = reason[:_MOST_MESSAGE_CHARS] + "..."
        held = ast.unparse(node.value)  # ``user``, ``users[1]``
        if len(held) > _MOST_HELD_CHARS:
            held = "it"
        kind = type(error).__name__
        exc.add_note(
            f"{held} is the {kind} of a failed call ({call}: {reason}), which"
            " asyncio.gather(..., return_exceptions=True) puts where its value would be: check"
            f" isinstance({held}, {kind}) before using {held}."
        )


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
    failed = _failed_span(exc)
    if failed is None:
        return None
    last, node = failed
    if isinstance(node, ast.Await):
        if last.tb_next is None:  # Python's refusal, raised in the program's own frame
            return _binding_access(node.value, bindings)
        node = node.value  # a coroutine of asyncio's, which failed as it was awaited
    if not isinstance(node, ast.Call):
        return None
    if _callee_name(node) not in _TAKERS_OF_AWAITABLES:
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
    # ``print`` calling the program's ``__str__``, and show none), go; with nothing else
    # left, the first ``keep`` stay.
    program = [e for e in entries if e.tb_frame.f_code.co_filename not in worker_files]
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
            _explain_gather_of_one_collection(current)
            _explain_key_as_attribute(current)
            _explain_asyncio_imported_late(current)
            _explain_declaration_keywords(current)
            _explain_missing_variable(current)
            _explain_pending_result(current)
            if bindings:
                _explain_uncalled_binding(current, bindings)
                if errors:
                    _explain_error_as_value(current, errors, bindings)
                    _explain_error_class_as_binding(current, errors, bindings)
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
