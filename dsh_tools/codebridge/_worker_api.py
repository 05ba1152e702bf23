"""What a program sees of its worker: the binding namespaces (``tools``), the handles a binding
call returns, the namespaces' error classes, the capture streams ``sys.stdout``/``sys.stderr``
and the no-result sentinel.

These objects run inside the sandboxed worker, next to model code; they hold no protocol state
of their own (calls and output go through the callables they are given), so a program that
tampers with them can only break its own view. This module imports only the standard library.
"""

from __future__ import annotations

import asyncio
import collections.abc
import difflib
import functools
import inspect
import io
import keyword
import os
import sys
import traceback
import types
from collections.abc import Callable, Collection, Generator, Iterable
from typing import Any, Final

__all__ = [
    "ABSENT",
    "CallHandle",
    "CaptureStream",
    "Namespace",
    "error_class",
    "guard_nested_run",
    "guard_nested_run_until_complete",
    "guard_other_loops_run_until_complete",
    "json_default_naming_handles",
    "plain_error",
    "program_stack_only",
    "program_tracebacks_only",
    "recursion_counted_from",
    "signature_naming_bindings",
    "unawaited_call",
    "wait_accepting_handles",
]


_GUARDED: Final = "__dsh_guarded__"
"""The attribute that marks what the worker has put in place of a standard library function (or
class), so that a second set-up finds it in place and does not wrap it again."""


def _is_guarded(thing: object) -> bool:
    return getattr(thing, _GUARDED, False) is True


def _mark_guarded(thing: object) -> None:
    setattr(thing, _GUARDED, True)


class _Absent:
    """The no-result sentinel's type."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no result>"


ABSENT: Final = _Absent()
"""The no-result sentinel: a program that returns it has no result."""


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class CallHandle(asyncio.Future[Any]):
    """What calling a binding returns: the call is already submitted; awaiting gets its value.

    The handle is the call's own future, settled by the host's reply: ``asyncio.gather``,
    ``wait_for`` and ``ensure_future`` take it as it is, with no task per call. It also
    satisfies ``collections.abc.Coroutine`` (``send``/``throw``/``close`` drive its await), so
    ``create_task`` and ``TaskGroup`` accept it, yet it is not a real coroutine: a handle that
    is never awaited is simply dropped, with no "never awaited" warning. A failure is marked
    retrieved as it is set, so an unobserved failure leaves no "exception was never retrieved"
    noise.
    """

    __slots__ = ("_error", "_global", "_name", "_runner")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        global_name: str,
        name: str,
        error: Callable[[str, str], BaseException],
    ) -> None:
        super().__init__(loop=loop)
        self._global = global_name
        self._name = name
        self._error = error
        self._runner: Generator[Any, Any, Any] | None = None

    def resolve(self, value: Any) -> None:
        """Settle with the call's value (unless the program cancelled the handle)."""
        if not self.done():
            self.set_result(value)

    def reject(self, message: str) -> None:
        """Settle with the namespace's error for ``message`` (unless cancelled)."""
        if not self.done():
            self.set_exception(self._error(self._name, message))
            self.exception()  # retrieved: a program may never await the call

    def _driver(self) -> Generator[Any, Any, Any]:
        if self._runner is None:
            self._runner = self.__await__()
            task = asyncio.current_task(self.get_loop())
            if task is not None and task.get_coro() is self:
                # The task that ``create_task`` wrapped around the handle fails with the call:
                # its failure too is marked retrieved, so that a fire-and-forget task leaves no
                # "exception was never retrieved" noise (naming the worker's own frames).
                task.add_done_callback(_retrieve)
        return self._runner

    def send(self, value: Any) -> Any:
        """Drive the handle (used when it is wrapped in a task)."""
        return self._driver().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Throw into the handle (used when it is wrapped in a task)."""
        if val is None and tb is None:
            return self._driver().throw(typ)
        return self._driver().throw(typ, val, tb)

    def close(self) -> None:
        """Close the handle's driver, if any."""
        if self._runner is not None:
            self._runner.close()

    def __repr__(self) -> str:
        return f"<tool call {self._name!r}>"

    def _unawaited(self, before: str, after: str) -> str:
        """What a program that uses the handle as if it were the call's result is told: the
        awaited call written between ``before`` and ``after``."""
        access = access_expression(self._global, self._name)
        return (
            f"{access}(...) was not awaited: it is the pending call, not its result;"
            f" write {before}(await {access}(...)){after}"
        )

    def __getattr__(self, name: str) -> Any:
        # Only for names the future does not have: the result's methods, most likely. A
        # private or special name is no result's method but a probe (asyncio's, copy's, or
        # this class's own slots before they are set): it gets the ordinary error, and the
        # lookup never comes back here.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        # Without an ``obj`` the interpreter adds no suggestion of its own from this class's
        # attributes, which would follow the advice to await with one of its private slots
        # (". Did you mean: '_name'?" for ``.name``).
        raise AttributeError(self._unawaited("", f".{name}"), name=name, obj=None)

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(self._unawaited("", "[...]"))

    def __contains__(self, item: Any) -> bool:
        # Without it ``in`` would iterate the future, which fails with "await wasn't used
        # with future".
        raise TypeError(self._unawaited("... in ", ""))

    # Iterating a future is how pre-``await`` code waited for it: ``for x in r`` would run the
    # loop body once with the handle itself, then fail with "await wasn't used with future",
    # or, once the call has settled, run it zero times and say nothing. ``await`` goes through
    # ``__await__``, not this, so no use of a handle as a call needs it. ``bool`` and ``str``
    # keep their ordinary meaning: a handle is truthy and prints as the pending call, both of
    # which a correct program may rely on.
    def __iter__(self) -> Generator[Any, None, Any]:
        raise TypeError(self._unawaited("for ... in ", ""))

    def __len__(self) -> int:
        raise TypeError(self._unawaited("len", ""))

    def __bool__(self) -> bool:
        # Without it ``bool`` would fall back on ``__len__`` above and raise.
        return True

    def __format__(self, spec: str) -> str:
        # An empty spec (``f"{r}"``) is ``str``, as for any object; any other
        # (``f"{r:.2f}"``) is meant for the result, and ``object``'s refusal would name this
        # class, which the program never wrote.
        if not spec:
            return str(self)
        raise TypeError(self._unawaited('f"{', f':{spec}}}"'))

    def __reduce_ex__(self, protocol: Any) -> Any:
        # What ``pickle`` and ``copy`` ask for: a pending call is neither stored nor copied,
        # its result is (Python would say only "cannot pickle 'CallHandle' object").
        raise TypeError(self._unawaited("", ""))


def _misused_operator(symbol: str, reflected: bool) -> Callable[[CallHandle, Any], Any]:
    """The method of ``symbol`` (reflected: with the handle on its right) for a handle used
    as its result in arithmetic or an ordering (``r + 1``, ``total - r``, ``r > 0``): Python
    would otherwise say the operand type ``CallHandle``, which the program never wrote."""

    def misused(self: CallHandle, other: Any) -> Any:
        if reflected:
            raise TypeError(self._unawaited(f"... {symbol} ", ""))
        raise TypeError(self._unawaited("", f" {symbol} ..."))

    return misused


# No future has arithmetic or an order, so each of these was a TypeError already; equality and
# hashing stay the future's own (asyncio keeps futures in sets and dicts).
for _name, _symbol in (
    ("add", "+"),
    ("sub", "-"),
    ("mul", "*"),
    ("truediv", "/"),
    ("floordiv", "//"),
    ("mod", "%"),
    ("pow", "**"),
):
    setattr(CallHandle, f"__{_name}__", _misused_operator(_symbol, reflected=False))
    setattr(CallHandle, f"__r{_name}__", _misused_operator(_symbol, reflected=True))
for _name, _symbol in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    setattr(CallHandle, f"__{_name}__", _misused_operator(_symbol, reflected=False))
del _name, _symbol

collections.abc.Coroutine.register(CallHandle)


class _MissingBinding(KeyError):
    """The ``KeyError`` of a missing binding: its text is its message as written. A plain
    ``KeyError`` shows the repr of its argument, escaping every quote of the message a model
    reads (``'\\'tools\\' has no binding ...'``). Named ``KeyError`` of ``builtins``, so a
    traceback reads as it would for any missing key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_MissingBinding.__name__ = _MissingBinding.__qualname__ = "KeyError"
_MissingBinding.__module__ = "builtins"


class Namespace:
    """The object a program sees as ``tools``: bindings by item access and by attribute."""

    __slots__ = (
        "__dsh_bindings__",
        "__dsh_folded__",
        "__dsh_global__",
        "__dsh_heads__",
        "__dsh_loose__",
        "__dsh_names__",
        "__dsh_near__",
    )

    __dsh_bindings__: dict[str, Callable[[Any], CallHandle]]
    __dsh_global__: str
    __dsh_names__: list[str]
    __dsh_loose__: dict[str, list[str]] | None
    __dsh_near__: dict[str, list[str]]
    __dsh_heads__: dict[str, list[str]]
    __dsh_folded__: dict[str, list[str]]

    def __init__(self, global_name: str, bindings: dict[str, Callable[[Any], CallHandle]]) -> None:
        object.__setattr__(self, "__dsh_global__", global_name)
        object.__setattr__(self, "__dsh_bindings__", bindings)
        object.__setattr__(self, "__dsh_names__", sorted(bindings))
        object.__setattr__(self, "__dsh_loose__", None)  # made at the first miss
        object.__setattr__(self, "__dsh_near__", {})  # made with __dsh_loose__
        object.__setattr__(self, "__dsh_heads__", {})  # made with __dsh_loose__
        object.__setattr__(self, "__dsh_folded__", {})  # made with __dsh_loose__

    def __getattr__(self, name: str) -> Callable[[Any], CallHandle]:
        if not (name.startswith("__") and name.endswith("__")):
            binding = self.__dsh_bindings__.get(name)
            if binding is not None:
                return binding
        # Its own text suggests the binding, in the form that reaches it: given an ``obj``,
        # the interpreter does not add its own suggestion from this namespace's dir() ("...;
        # did you mean tools.echo?. Did you mean: 'echo'?").
        raise AttributeError(self.__dsh_missing__(name), name=name, obj=None)

    def __getitem__(self, name: str) -> Callable[[Any], CallHandle]:
        try:
            return self.__dsh_bindings__[name]
        except (KeyError, TypeError):  # TypeError: a key that cannot be hashed
            raise _MissingBinding(self.__dsh_missing__(name)) from None

    def __dsh_missing__(self, name: object) -> str:
        """What a program that asks for a binding there is not is told: a model reads it, so
        it names the namespace and, for a name that is not a valid attribute, how to reach
        the binding it most likely meant (``tools["math.big"]`` for ``tools.math_big``)."""
        text = f"{self.__dsh_global__!r} has no binding {name!r}"
        if type(name) is str:
            # The bindings by their loose spelling and by each spelling one character short,
            # made once: a program probing names (hasattr, getattr with a default) may miss
            # many times, and each miss then costs the length of its name, not a comparison
            # with every binding.
            loose = self.__dsh_loose__
            near = self.__dsh_near__
            heads = self.__dsh_heads__
            folded = self.__dsh_folded__
            if loose is None:
                loose = {}
                names = self.__dsh_names__
                for known in names:
                    # Keyed as the parser reads an attribute: ``tools.\ufb01le`` asks for
                    # "file", which finds the binding "\ufb01le".
                    loose.setdefault(_loose(_nfkc(known)), []).append(known)
                    folded.setdefault(_folded(_nfkc(known)), []).append(known)
                    head = _head(known)
                    if head is not None:
                        heads.setdefault(head, []).append(known)
                    if len(names) <= _GUESS_LIMIT and len(known) <= _GUESS_LENGTH:
                        for short in _one_short(known):
                            near.setdefault(short, []).append(known)
                object.__setattr__(self, "__dsh_loose__", loose)
            for known in loose.get(_loose(name), ()):
                if known != name:
                    return f"{text}; call it as {self.__dsh_access__(known)}"
            begun = heads.get(name)
            if begun:
                # ``tools.web.search`` of "web.search", ``tools.my-tool`` (read as
                # ``tools.my - tool``) of "my-tool": the first part of a binding's name.
                if len(begun) == 1:
                    return f"{text}; call it as {self.__dsh_access__(begun[0])}"
                shown = ", ".join(self.__dsh_access__(known) for known in begun[:_HEADS_SHOWN])
                more = len(begun) - _HEADS_SHOWN
                return f"{text}; call one of {shown}" + (f" and {more} more" if more > 0 else "")
            styled = folded.get(_folded(name))
            if styled and len(styled) == 1 and styled[0] != name:
                # ``tools.readFile``, ``tools.ListDir``: the binding in another case style,
                # several edits from its name.
                return f"{text}; did you mean {self.__dsh_access__(styled[0])}?"
            if near and len(name) <= _GUESS_LENGTH + 1:
                # A binding one edit away (a character dropped, added, changed or two
                # swapped) shares one of these spellings with the name; the likeliest of
                # those few is the one difflib finds closest.
                candidates = {known for short in _one_short(name) for known in near.get(short, ())}
                if candidates:
                    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
                    if close:
                        return f"{text}; did you mean {self.__dsh_access__(close[0])}?"
        return f"{text}; {self.__dsh_listing__()}"

    def __dsh_listing__(self) -> str:
        """The bindings there are, for a miss like none of them (``tools.fetch_weather``): a
        model that guessed a tool's name learns the names it has, the first few of many."""
        names = self.__dsh_names__
        if not names:
            return "it has none"
        shown = ", ".join(self.__dsh_access__(known) for known in names[:_LISTED])
        more = len(names) - _LISTED
        if more <= 0:
            return f"its bindings are {shown}"
        return f"its bindings are {shown} and {more} more; help({self.__dsh_global__}) lists them"

    def __dsh_access__(self, name: str) -> str:
        """How a program reaches the binding ``name``: by attribute when it can."""
        return access_expression(self.__dsh_global__, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self.__dsh_global__!r} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self.__dsh_global__!r} is read-only")

    def __contains__(self, name: object) -> bool:
        return name in self.__dsh_bindings__

    def __iter__(self) -> collections.abc.Iterator[str]:
        return iter(self.__dsh_names__)

    def __len__(self) -> int:
        return len(self.__dsh_names__)

    def __dir__(self) -> list[str]:
        return list(self.__dsh_names__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A model may call the namespace as a dispatcher (``tools("read", {...})``): Python
        # would say "'Namespace' object is not callable", a class the program never wrote.
        named = args[0] if args and type(args[0]) is str and args[0] in self else "name"
        raise TypeError(
            f"{self.__dsh_global__!r} is not callable: call one of its bindings, as"
            f" `await {self.__dsh_access__(named)}({{...}})`"
        )

    def __repr__(self) -> str:
        return f"<{self.__dsh_global__} namespace: {', '.join(self.__dsh_names__)}>"


def unawaited_call(value: object) -> str | None:
    """What a binding call left unawaited in a value is, in the program's terms (the handle's
    class is the worker's, which the program never wrote); ``None`` for any other value."""
    if type(value) is not CallHandle:
        return None
    access = access_expression(value._global, value._name)
    return f"a tool call that was not awaited: write await {access}(...)"


def access_expression(global_name: str, name: str) -> str:
    """How a program reaches the binding ``name`` of ``global_name``: by attribute when it
    can (``tools.read``), else by item (``tools["my-tool"]``)."""
    dunder = name.startswith("__") and name.endswith("__")
    if name.isidentifier() and not keyword.iskeyword(name) and not dunder and _nfkc(name) == name:
        return f"{global_name}.{name}"
    return f"{global_name}[{_literal(name)}]"


def _nfkc(name: str) -> str:
    """``name`` as the parser reads it as an identifier: NFKC-normalized (``tools.\ufb01le``
    asks for ``file``), so a name that normalizes to another cannot be reached as an
    attribute."""
    if name.isascii():
        return name
    import unicodedata  # only for non-ASCII names, on a miss or an error's text

    return unicodedata.normalize("NFKC", name)


def arity_message(global_name: str, name: str, positional: int, keywords: Collection[str]) -> str:
    """What a program calling a binding with anything but one positional dict is told: the
    call as it should be written, with the keywords it used as the dict's keys (after those
    of the dict it passed too, if it did)."""
    access = access_expression(global_name, name)
    if keywords:
        keys = ", ".join(f"{_literal(key)}: ..." for key in keywords)
        if positional:
            keys = f"..., {keys}"
        return f"{access}() takes one dict of arguments, not keywords: await {access}({{{keys}}})"
    return f"{access}() takes one dict of arguments: await {access}({{...}})"


_GUESS_LIMIT: Final = 1000
"""The most bindings a namespace looks through for the one a misspelt name meant."""
_GUESS_LENGTH: Final = 64
"""The longest binding name a misspelt name is matched with."""


_HEADS_SHOWN: Final = 5
"""The most bindings a miss of their names' shared first part lists."""
_LISTED: Final = 20
"""The most bindings a miss like none of them lists (the rest are counted)."""


def _head(name: str) -> str | None:
    """The attribute a program asks for when it writes the binding ``name`` as attributes:
    the identifier before its first character that cannot be part of one (``web`` of
    ``web.search``), or ``None`` when it has none or does not start with one."""
    for index, character in enumerate(name):
        if not (character.isalnum() or character == "_"):
            head = name[:index]
            return head if head.isidentifier() else None
    return None


def _one_short(name: str) -> set[str]:
    """``name`` and each spelling of it with one character left out."""
    shorts = {name[:index] + name[index + 1 :] for index in range(len(name))}
    shorts.add(name)
    return shorts


def _literal(name: str) -> str:
    """``name`` as a Python string literal, in double quotes when it needs no escape."""
    text = repr(name)
    return f'"{name}"' if text == f"'{name}'" and '"' not in name else text


def _loose(name: str) -> str:
    """``name`` with every character that cannot be part of an identifier read as ``_``."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _folded(name: str) -> str:
    """``name`` in lower case without the characters that separate its words (``_``, ``-``,
    ``.``): ``readFile``, ``ReadFile`` and ``read_file`` all fold to ``readfile``."""
    return "".join(c for c in name if c.isalnum()).lower()


def error_class(name: str, member_attr: str) -> type[Exception]:
    def __init__(self: Exception, tool_name: str, message: str, /) -> None:
        Exception.__init__(self, message)
        setattr(self, member_attr, tool_name)
        self.message = message  # type: ignore[attr-defined]

    def __reduce__(self: Exception) -> tuple[Any, ...]:
        # The default rebuilds from ``args`` (the message alone), which this ``__init__``
        # refuses: ``copy.copy`` of a caught error would raise.
        return type(self), (getattr(self, member_attr), self.message), self.__dict__  # type: ignore[attr-defined]

    def __repr__(self: Exception) -> str:
        # As it is made: the default shows ``args``, the message alone, so a printed list of
        # failures (``gather(..., return_exceptions=True)``) could not say which tool failed.
        try:
            return f"{name}({getattr(self, member_attr)!r}, {self.message!r})"  # type: ignore[attr-defined]
        except AttributeError:  # the program deleted one
            return Exception.__repr__(self)

    # A program that raises the class itself with the wrong arguments is told the class's
    # name, not this factory's (``error_class.<locals>.__init__() missing ...``).
    __init__.__qualname__ = f"{name}.__init__"
    __reduce__.__qualname__ = f"{name}.__reduce__"
    __repr__.__qualname__ = f"{name}.__repr__"
    return type(
        name,
        (Exception,),
        {
            "__init__": __init__,
            "__reduce__": __reduce__,
            "__repr__": __repr__,
            "__module__": "builtins",
            "__qualname__": name,
            "__doc__": f"A rejected binding call; ``{member_attr}`` names the binding.",
        },
    )


def plain_error(name: str, message: str) -> Exception:
    return Exception(message)


NESTED_RUN_MESSAGE: Final = (
    "asyncio.run() cannot be called from a running event loop: the program already runs in"
    " one, so await the coroutine instead (write `await main()`, not `asyncio.run(main())`)"
)


def guard_nested_run(run: Callable[..., Any]) -> Callable[..., Any]:
    """``asyncio.run`` as a program sees it. A program is the body of an async function, yet a
    model often ends it with a script's ``asyncio.run(main())``: asyncio's own error does not
    say what to write instead, and the coroutine it leaves unawaited adds a "never awaited"
    warning to the program's output. Called on the program's running loop, this closes the
    coroutine and says to await it; anywhere else (a thread of the program's own) it is
    ``asyncio.run``."""
    if _is_guarded(run):
        return run

    @functools.wraps(run)
    def guarded(main: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run(main, *args, **kwargs)
        if inspect.iscoroutine(main):
            main.close()
        raise RuntimeError(NESTED_RUN_MESSAGE)

    _mark_guarded(guarded)
    return guarded


NESTED_LOOP_RUN_MESSAGE: Final = (
    "run_until_complete() cannot be called on the running event loop: the program already runs"
    " in it, so await the coroutine instead (write `await main()`, not"
    " `loop.run_until_complete(main())`)"
)


def guard_nested_run_until_complete(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop.run_until_complete``, called while ``loop`` runs (from the program, which
    runs on it), close the coroutine and say to await it, as ``guard_nested_run`` does for
    ``asyncio.run``: asyncio's "This event loop is already running" says neither, and the
    coroutine left unawaited warns into the output. The worker's own call, made before the
    loop runs, goes to asyncio as ever."""
    run_until_complete = loop.run_until_complete

    @functools.wraps(run_until_complete)
    def guarded(future: Any) -> Any:
        if loop.is_running():
            if inspect.iscoroutine(future):
                future.close()
            raise RuntimeError(NESTED_LOOP_RUN_MESSAGE)
        return run_until_complete(future)

    loop.run_until_complete = guarded  # type: ignore[method-assign]


OTHER_LOOP_RUN_MESSAGE: Final = (
    "run_until_complete() cannot run another event loop while the program's runs: the program"
    " already runs in one, so await the coroutine instead (write `await main()`, not"
    " `loop.run_until_complete(main())`)"
)


def guard_other_loops_run_until_complete() -> None:
    """Make ``run_until_complete`` of every other event loop, called on a thread whose loop
    runs (the program's, from the program), close the coroutine and say to await it, as
    ``guard_nested_run_until_complete`` does for the program's own loop: a script's
    ``asyncio.new_event_loop().run_until_complete(main())`` got asyncio's "Cannot run the
    event loop while another loop is running", which says neither, and the coroutine left
    unawaited warned into the output. In a thread of the program's, with no loop running,
    it is asyncio's own. Set on the class after the program's loop is guarded, whose own
    ``run_until_complete`` stays asyncio's, unwrapped."""
    run_until_complete = asyncio.BaseEventLoop.run_until_complete
    if _is_guarded(run_until_complete):
        return

    @functools.wraps(run_until_complete)
    def guarded(self: asyncio.BaseEventLoop, future: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run_until_complete(self, future)
        if inspect.iscoroutine(future):
            future.close()
        raise RuntimeError(OTHER_LOOP_RUN_MESSAGE)

    _mark_guarded(guarded)
    asyncio.BaseEventLoop.run_until_complete = guarded  # type: ignore[method-assign]


RECURSION_HEADROOM: Final = 50
"""Frames the worker's own code may take above a program's recursion limit: what its
``print``, its binding calls and its rendering of the program's failure call into."""


_LARGEST_RECURSION_LIMIT: Final = 2**31 - 1
"""The largest recursion limit CPython takes (a C ``int``)."""


def recursion_counted_from(depth: int) -> None:
    """Make the recursion limit a program sets and reads (``sys.setrecursionlimit`` and
    ``sys.getrecursionlimit``) count its frames as a script's does: from its own first frame,
    which sits ``depth`` frames into the worker (the worker's own and asyncio's beneath it),
    and with ``RECURSION_HEADROOM`` frames more for the worker's code the program calls into.
    Counted from the bottom, a limit of 25 that a script recurses well under left the program
    no frame of its own: its next call, its ``print``, or the worker's report of its end failed
    with a ``RecursionError``, the last as an unrenderable value or a bare exit. Its default is
    a script's (1000 frames of its own)."""
    set_limit = sys.setrecursionlimit
    get_limit = sys.getrecursionlimit
    if _is_guarded(set_limit):
        return
    below = depth + RECURSION_HEADROOM

    @functools.wraps(set_limit)
    def setrecursionlimit(limit: int, /) -> None:
        if not isinstance(limit, int) or limit < 1:
            set_limit(limit)  # Python's own refusal of the value
            return
        try:
            # Up to the largest limit there is, which a program may set (past it, Python's
            # own OverflowError)
            set_limit(
                limit
                if limit > _LARGEST_RECURSION_LIMIT
                else min(limit + below, _LARGEST_RECURSION_LIMIT)
            )
        except RecursionError:
            # Python's refusal of a limit under the current depth, counted as in a script
            # (where this call's depth is one more than its caller's)
            frames = 0
            frame: types.FrameType | None = sys._getframe()
            while frame is not None:
                frames += 1
                frame = frame.f_back
            raise RecursionError(
                f"cannot set the recursion limit to {limit} at the recursion depth"
                f" {max(frames - depth, 1)}: the limit is too low"
            ) from None

    @functools.wraps(get_limit)
    def getrecursionlimit() -> int:
        return max(get_limit() - below, 1)

    _mark_guarded(setrecursionlimit)
    set_limit(get_limit() + below)
    sys.setrecursionlimit = setrecursionlimit
    sys.getrecursionlimit = getrecursionlimit


_WORKER_PACKAGE: Final = os.path.dirname(__file__) + os.sep
"""Where the worker's own files are: the frames of a stack beneath the program's own, and
between them, are its."""


def program_stack_only(program_file: str) -> None:
    """Make ``traceback.extract_stack`` (which ``print_stack`` and ``format_stack`` use, and
    ``logging``'s ``stack_info``) and ``inspect.getouterframes`` (which ``inspect.stack``
    uses) give the program's frames only, as its tracebacks do: down to
    its outermost frame of ``program_file``, without the worker's frames between. Beneath that
    frame lay some twenty of the worker's and asyncio's, naming the worker's files on the host,
    which tell a program nothing of its own and are no business of its."""
    extract_stack = traceback.extract_stack
    if _is_guarded(extract_stack):
        return

    @functools.wraps(extract_stack)
    def program_stack(
        f: types.FrameType | None = None, limit: int | None = None
    ) -> traceback.StackSummary:
        frames: list[types.FrameType] = []
        frame = sys._getframe().f_back if f is None else f
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        outermost = len(frames)
        for index in range(len(frames) - 1, -1, -1):
            if frames[index].f_code.co_filename == program_file:
                outermost = index + 1
                break
        stack = traceback.StackSummary.extract(
            (
                (frame, frame.f_lineno)
                for frame in frames[:outermost]
                if not frame.f_code.co_filename.startswith(_WORKER_PACKAGE)
            ),
            limit=limit,
        )
        stack.reverse()
        return stack

    _mark_guarded(program_stack)
    traceback.extract_stack = program_stack
    outer_frames = inspect.getouterframes

    @functools.wraps(outer_frames)
    def program_outer_frames(frame: types.FrameType, context: int = 1) -> list[Any]:
        # ``inspect.stack()`` is this for its caller's frame.
        infos = outer_frames(frame, context)
        outermost = len(infos)
        for index in range(len(infos) - 1, -1, -1):
            if infos[index].filename == program_file:
                outermost = index + 1
                break
        return [info for info in infos[:outermost] if not info.filename.startswith(_WORKER_PACKAGE)]

    inspect.getouterframes = program_outer_frames


def _without_worker_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Traceback ``tb`` without the worker's frames (a new chain, ``tb`` left as it is), or
    ``tb`` itself when it has none, or nothing else."""
    kept: list[types.TracebackType] = []
    dropped = False
    cursor = tb
    while cursor is not None:
        if cursor.tb_frame.f_code.co_filename.startswith(_WORKER_PACKAGE):
            dropped = True
        else:
            kept.append(cursor)
        cursor = cursor.tb_next
    if not dropped or not kept:
        return tb
    rebuilt: types.TracebackType | None = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def program_tracebacks_only() -> None:
    """Make the tracebacks a program formats itself (``traceback.format_exc``,
    ``print_exc``, ``print_exception``, ``logging``'s ``exc_info``, all made through
    ``traceback.TracebackException``) leave out the worker's frames, as its uncaught
    exception's does: one the worker raised at the program (a binding called with two
    arguments, a call used unawaited, a binding the namespace lacks) ended in a frame of the
    worker's, naming its file on the host."""
    base = traceback.TracebackException
    if _is_guarded(base):
        return

    class TracebackException(base):  # type: ignore[valid-type,misc]
        __doc__ = base.__doc__
        __dsh_guarded__ = True

        def __init__(
            self, exc_type: Any, exc_value: Any, exc_traceback: Any, *args: Any, **kwargs: Any
        ) -> None:
            super().__init__(
                exc_type, exc_value, _without_worker_frames(exc_traceback), *args, **kwargs
            )

    TracebackException.__module__ = base.__module__
    TracebackException.__qualname__ = base.__qualname__
    traceback.TracebackException = TracebackException  # type: ignore[misc]


_WAIT_ENDS: Final = (asyncio.FIRST_COMPLETED, asyncio.FIRST_EXCEPTION, asyncio.ALL_COMPLETED)


def wait_accepting_handles(wait: Callable[..., Any]) -> Callable[..., Any]:
    """``asyncio.wait`` as a program sees it: it also takes call handles. asyncio refuses
    anything that passes for a coroutine ("Passing coroutines is forbidden"), and a handle
    does (so that ``create_task`` takes it), although it is a future already submitted. Given
    at least one handle, and no real coroutine, this waits as asyncio's own does: the same
    checks, ``timeout`` and ``return_when``, and ``(done, pending)`` sets of the very objects
    given, so ``handle in done`` holds. Anything else goes to ``asyncio.wait`` unchanged."""
    if _is_guarded(wait):
        return wait

    @functools.wraps(wait)
    async def waiting(
        fs: Any, *, timeout: float | None = None, return_when: str = asyncio.ALL_COMPLETED
    ) -> tuple[set[Any], set[Any]]:
        if asyncio.isfuture(fs) or asyncio.iscoroutine(fs):
            raise TypeError(f"expect a list of futures, not {type(fs).__name__}")
        given = set(fs)
        if not any(isinstance(item, CallHandle) for item in given) or any(
            not isinstance(item, CallHandle) and asyncio.iscoroutine(item) for item in given
        ):
            result: tuple[set[Any], set[Any]] = await wait(
                given, timeout=timeout, return_when=return_when
            )
            return result
        if not given:
            raise ValueError("Set of Tasks/Futures is empty.")
        if return_when not in _WAIT_ENDS:
            raise ValueError(f"Invalid return_when value: {return_when}")
        loop = asyncio.get_running_loop()
        futures = {asyncio.ensure_future(item) for item in given}  # a handle is its own future
        waiter = loop.create_future()
        left = len(futures)

        def wake(_: Any = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        def on_done(future: asyncio.Future[Any]) -> None:
            nonlocal left
            left -= 1
            if (
                left <= 0
                or return_when == asyncio.FIRST_COMPLETED
                or (
                    return_when == asyncio.FIRST_EXCEPTION
                    and not future.cancelled()
                    and future.exception() is not None
                )
            ):
                wake()

        timer = loop.call_later(timeout, wake) if timeout is not None else None
        for future in futures:
            future.add_done_callback(on_done)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            for future in futures:
                future.remove_done_callback(on_done)
        done = {future for future in futures if future.done()}
        return done, futures - done

    _mark_guarded(waiting)
    return waiting


def json_default_naming_handles(default: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``json.JSONEncoder.default`` as a program sees it: a call handle in what it encodes
    (``json.dumps({"rows": tools.query({...})})``) is a call not awaited, and is said to be,
    where ``json``'s own refusal names the handle's class, ``CallHandle``, which the program
    never wrote. Anything else goes to ``default`` unchanged (an encoder's own ``default``
    is not this one, and decides for itself)."""
    if _is_guarded(default):
        return default

    @functools.wraps(default)
    def naming(encoder: Any, o: Any) -> Any:
        if isinstance(o, CallHandle):
            raise TypeError(o._unawaited("", ""))
        return default(encoder, o)

    _mark_guarded(naming)
    return naming


BINDING_SIGNATURE: Final = inspect.Signature(
    [inspect.Parameter("args", inspect.Parameter.POSITIONAL_ONLY, annotation=dict)]
)
"""A binding's signature as the SDK declares it (``async def name(self, args: NameArgs, /)``)."""


def signature_naming_bindings(
    signature: Callable[..., inspect.Signature], binding_code: types.CodeType
) -> Callable[..., inspect.Signature]:
    """``inspect.signature`` as a program sees it: a binding's (every binding is a function
    of ``binding_code``) is ``BINDING_SIGNATURE``, not that of the worker's
    ``(*args, **kwargs)`` closure, whose return annotation names the worker's ``CallHandle``.
    Answered here rather than by each binding's ``__signature__``: setting that would give
    every binding of every run a ``__dict__`` of its own, for a question few programs ask."""
    if _is_guarded(signature):
        return signature

    @functools.wraps(signature)
    def naming(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        if type(obj) is types.FunctionType and obj.__code__ is binding_code:
            return BINDING_SIGNATURE
        return signature(obj, *args, **kwargs)

    _mark_guarded(naming)
    return naming


class CaptureStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` in a program: each non-empty write is one log entry."""

    encoding = "utf-8"
    errors = "strict"
    mode = "w"
    line_buffering = False
    write_through = True

    def __init__(self, emit: Callable[[str], None], fd: int, name: str) -> None:
        super().__init__()
        self._emit = emit
        self._fd = fd
        self._name = name
        self.buffer = io.FileIO(fd, "wb", closefd=False)

    @property
    def name(self) -> str:
        """The stream's name."""
        return self._name

    def write(self, text: str) -> int:
        """Emit ``text`` as one log entry."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self._emit(text)
        return len(text)

    def writelines(self, lines: Iterable[str], /) -> None:  # type: ignore[override]
        """Emit the lines as one log entry (a stream's own writes each: an entry each, and
        the text shown, the entries joined by newlines, a blank line between the lines)."""
        self.write("".join(lines))

    def writable(self) -> bool:
        """Always writable."""
        return True

    def reconfigure(
        self,
        *,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        line_buffering: bool | None = None,
        write_through: bool | None = None,
    ) -> None:
        """Accepted and changes nothing: entries are text, neither encoded nor buffered here.
        Scripts written to run on any console start with
        ``sys.stdout.reconfigure(encoding="utf-8")``."""

    def flush(self) -> None:
        """Nothing is buffered."""

    def fileno(self) -> int:
        """The real descriptor (bytes written to it arrive as native output)."""
        return self._fd

    def isatty(self) -> bool:
        """Never a terminal."""
        return False

    def close(self) -> None:
        """Capture streams stay open."""
