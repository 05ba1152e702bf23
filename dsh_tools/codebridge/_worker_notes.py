"""Notes for mistakes models make in Code Mode programs that Python's own text leaves a guess:
each ``explain_*`` adds one line to an uncaught exception, worked out only while the failure is
rendered (nothing here runs on a program that works, nor on a tool call's way). This module
imports only the standard library, the program's file and function names (``_program``) and
how a binding is reached (``_worker_api``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import itertools
import linecache
import os
import types
from collections.abc import Collection, Iterable, Mapping
from typing import Final

from ._program import FILENAME, FUNCTION_NAME
from ._worker_api import CallHandle, access_expression

__all__ = ["callee_name", "explain_mistakes", "failed_span"]


def explain_mistakes(
    exc: BaseException,
    bindings: Mapping[str, Collection[str]] | None,
    errors: Mapping[type, str] | None,
) -> None:
    """Add to ``exc`` the note of each mistake below it is (``bindings``: binding names by
    namespace; ``errors``: the failed calls' error classes, by the attribute that names their
    binding)."""
    _explain_gather_of_one_collection(exc)
    _explain_key_as_attribute(exc)
    _explain_asyncio_imported_late(exc)
    _explain_declaration_keywords(exc)
    _explain_missing_variable(exc)
    _explain_pending_result(exc)
    _explain_dict_iterated_as_pairs(exc)
    _explain_missing_key(exc)
    if bindings and errors:
        _explain_error_as_value(exc, errors, bindings)
        _explain_error_class_as_binding(exc, errors, bindings)


def failed_span(
    exc: BaseException, *, skip: str | None = None
) -> tuple[types.TracebackType, ast.expr] | None:
    """The last traceback entry of ``exc`` in the program's file (not counting frames of code
    named ``skip``) and the expression it failed on, the span the traceback marks (over as
    many lines as it takes: a call written one argument a line), parsed; ``None`` when there
    is none."""
    last = _last_program_entry(exc, skip)
    if last is None:
        return None
    positions = _span_positions(last)
    if positions is None:
        return None
    line, end_line, start, end = positions
    # The columns are offsets in the UTF-8 bytes of the first and the last line.
    lines = [
        linecache.getline(FILENAME, number).encode("utf-8") for number in range(line, end_line + 1)
    ]
    lines[-1] = lines[-1][:end]
    lines[0] = lines[0][start:]
    return last, ast.parse(b"".join(lines).decode("utf-8"), mode="eval").body


def _last_program_entry(exc: BaseException, skip: str | None = None) -> types.TracebackType | None:
    """The last traceback entry of ``exc`` in the program's file (not counting frames of code
    named ``skip``), or ``None``."""
    tb = exc.__traceback__
    last: types.TracebackType | None = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == FILENAME and code.co_name != skip:
            last = tb
        tb = tb.tb_next
    return last


def _span_positions(entry: types.TracebackType) -> tuple[int, int, int, int] | None:
    """The first and last line and the start and end columns (UTF-8 byte offsets) of the span
    a traceback entry marks; ``None`` when its code does not say."""
    if entry.tb_lasti < 0:
        return None
    line, end_line, start, end = next(
        itertools.islice(entry.tb_frame.f_code.co_positions(), entry.tb_lasti // 2, None),
        (None, None, None, None),
    )
    if line is None or end_line is None or start is None or end is None:
        return None
    return line, end_line, start, end


def callee_name(node: ast.Call) -> str | None:
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
        failed = failed_span(exc, skip="<genexpr>")
        if failed is None:
            return
        entry, node = failed
        if isinstance(node, ast.Await):
            node = node.value
        if not (isinstance(node, ast.Call) and callee_name(node) == "gather"):
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
        failed = failed_span(exc)
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
        failed = failed_span(exc)
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


_UNPACKING: Final = (
    "too many values to unpack (expected ",
    "not enough values to unpack (expected ",
)
_DICT_KEYS: Final[type] = type(iter({}))


def _explain_dict_iterated_as_pairs(exc: BaseException) -> None:
    """Add a note to ``exc`` if it is a loop's (or a comprehension's) unpacking of a dict's
    keys as its pairs (``for key, value in user``): iterating a dict gives its keys, and
    Python's text ("too many values to unpack (expected 2)", after a short key's characters
    were unpacked) names neither the dict nor ``.items()``. The loop is the one whose target
    the failing span is; its dict is its iterable, a dict display or a variable the frame
    holds (in a comprehension run as a function of its own, the iterator it was given)."""
    if type(exc) is not ValueError or not str(exc).startswith(_UNPACKING):
        return
    with contextlib.suppress(Exception):
        last = _last_program_entry(exc)
        positions = _span_positions(last) if last is not None else None
        if last is None or positions is None:
            return
        line, _, start, _ = positions
        program = ast.parse("".join(linecache.getlines(FILENAME)))
        iterated: ast.expr | None = None
        first = False  # the first loop of a comprehension, whose iterator it is given
        for node in ast.walk(program):
            loops: list[ast.For | ast.AsyncFor | ast.comprehension] = []
            if isinstance(node, (ast.For, ast.AsyncFor)):
                loops = [node]
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                loops = list(node.generators)
            for index, loop in enumerate(loops):
                target = loop.target
                if (target.lineno, target.col_offset) == (line, start):
                    iterated = loop.iter
                    first = index == 0 and isinstance(loop, ast.comprehension)
            if iterated is not None:
                break
        if iterated is None:
            return
        frame = last.tb_frame
        # Only a dict of str keys (a tool's result): one whose keys are tuples may well be
        # iterated for its keys, and .items() would be the wrong advice.
        if isinstance(iterated, ast.Dict):
            if not all(
                isinstance(key, ast.Constant) and type(key.value) is str for key in iterated.keys
            ):
                return
        elif isinstance(iterated, ast.DictComp):
            if isinstance(iterated.key, ast.Tuple):
                return
        elif isinstance(iterated, ast.Name):
            name = iterated.id
            value = frame.f_locals.get(name, frame.f_globals.get(name))
            given = frame.f_locals.get(".0") if first else None
            if type(value) is dict:
                keys: Iterable[object] = value
            elif type(given) is _DICT_KEYS:
                keys = given.__reduce__()[1][0]  # the keys left, without taking any
            else:
                return
            if not all(type(key) is str for key in itertools.islice(keys, _KEYS_SHOWN)):
                return
        else:
            return
        held = ast.unparse(iterated)
        if len(held) > _MOST_HELD_CHARS:
            held = "the dict"
        note = (
            f"{held} is a dict, and iterating a dict gives its keys alone: write {held}.items()"
            " for each key with its value"
        )
        if note not in (getattr(exc, "__notes__", None) or ()):
            exc.add_note(note)


_KEYS_SHOWN: Final = 20
"""The most keys ``_explain_missing_key`` lists."""
_MOST_KEY_CHARS: Final = 60
"""How long a key's repr ``_explain_missing_key`` shows whole."""
_PLAIN_KEYS: Final = (str, int, float, bool, type(None))
"""The key types ``_explain_missing_key`` shows (and compares)."""
_MOST_KEYS_CHECKED: Final = 100_000
"""The largest dict ``_explain_missing_key`` checks whole for the missing key."""
_MOST_STEPS: Final = 16
"""The most subscripts ``_held_value`` follows (``rows[0]["items"][1]``)."""


def _explain_missing_key(exc: BaseException) -> None:
    """Add a note listing the keys of the dict a subscript failed on (``user["username"]``)
    to ``exc``, its ``KeyError``: Python's text names only the key, and a model reading a tool's
    result by a key it guessed (named otherwise, or nested a level down) guesses again. The
    dict is the one the failing span reads, through a variable of the program's frame and
    constant subscripts of plain dicts and lists, as it is when the failure is rendered (not
    when it was raised); it is listed only when its keys and the missing one are of plain
    types, so nothing of the program is run again."""
    if type(exc) is not KeyError or len(exc.args) != 1:
        return
    with contextlib.suppress(Exception):
        failed = failed_span(exc)
        if failed is None:
            return
        entry, node = failed
        if not isinstance(node, ast.Subscript):
            return
        mapping = _held_value(node.value, entry.tb_frame)
        missing = exc.args[0]
        # Keys of plain types only, whose repr, hash and comparison run nothing of the
        # program's; the dict checked whole, as long as that is cheap, for not holding the key
        # (the variable may have been rebound since the failure, by a finally block).
        if type(missing) not in _PLAIN_KEYS or type(mapping) is not dict or not mapping:
            return
        if len(mapping) <= _MOST_KEYS_CHECKED:
            if any(type(key) not in _PLAIN_KEYS for key in mapping) or missing in mapping:
                return
        elif any(type(key) not in _PLAIN_KEYS for key in itertools.islice(mapping, _KEYS_SHOWN)):
            return
        held = ast.unparse(node.value)
        if len(held) > _MOST_HELD_CHARS:
            held = "the dict"
        shown = []
        for key in itertools.islice(mapping, _KEYS_SHOWN):
            text = repr(key)
            shown.append(text if len(text) <= _MOST_KEY_CHARS else text[:_MOST_KEY_CHARS] + "...")
        more = len(mapping) - len(shown)
        keys = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        missing_text = repr(missing)
        if len(missing_text) > _MOST_KEY_CHARS:
            missing_text = missing_text[:_MOST_KEY_CHARS] + "..."
        exc.add_note(f"{held} has no key {missing_text}; its keys are {keys}")


_NOTHING: Final = object()


def _held_value(node: ast.expr, frame: types.FrameType) -> object:
    """The value ``node`` stands for in ``frame`` when it is a variable followed by constant
    subscripts of plain dicts and lists (read, never run: no ``__getitem__`` of the program's
    is called); ``_NOTHING`` otherwise."""
    steps: list[object] = []
    while isinstance(node, ast.Subscript) and len(steps) < _MOST_STEPS:
        if not isinstance(node.slice, ast.Constant):
            return _NOTHING
        steps.append(node.slice.value)
        node = node.value
    if not isinstance(node, ast.Name):
        return _NOTHING
    value = frame.f_locals.get(node.id, frame.f_globals.get(node.id, _NOTHING))
    for step in reversed(steps):
        if type(value) is dict:
            value = value.get(step, _NOTHING)
        elif type(value) is list and type(step) is int and -len(value) <= step < len(value):
            value = value[step]
        else:
            return _NOTHING
    return value
