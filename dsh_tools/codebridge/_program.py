"""Program compilation: the body of an async function, with ``None`` distinct from no result.

A ``run_code`` program is the body of an async function (top-level ``await`` and ``return``).
It is parsed as written (so multi-line strings are never re-indented and line numbers are the
model's own), its own bare ``return`` statements are rewritten to return a private sentinel, a
final sentinel return is appended, and the statements are wrapped into one ``async def`` compiled
under the filename ``<run_code>``. ``return <expr>`` (even ``return None``) gives a result; a
bare ``return`` or falling off the end gives the sentinel, i.e. no result.
Returns inside nested ``def``/``lambda``/``class`` bodies are left alone. A body with its own
``yield`` is rejected.

Five things a script does that a function body does not are kept. A global the program is
given (``tools``, ``ToolCallError``) that it also assigns is declared ``global`` in it, so that
its uses before the assignment read the given one, as in a script (in a function they would
fail with ``UnboundLocalError``). A name that a nested function or class declares ``global`` is
declared ``global`` in the program's own scope too, so that it is the program's top-level
variable, as in a script (``counter = 0`` beside a helper that does ``global counter``). The
``from __future__`` imports a program starts with (after its docstring, if any) are moved out
of the function to the module it is compiled in, where Python takes them (in a function they
are a ``SyntaxError`` saying they "must occur at the beginning of the file", which they do).
The program's own ``from module import *`` (which Python refuses in a function) becomes a call
of ``STAR_IMPORT_NAME``, which puts the names the import would bind into the program's
globals; the names such a program assigns are declared ``global`` in it, so that they are the
names the import binds, as in a script. And a program indented as a whole (a
model's habit) is parsed as the body of an ``if`` block, as written: its strings keep their
text and its lines their numbers. What the program defines is named as a script's top-level
definitions are (``_top_level_names``).

The host parses a program of up to 32 KiB (``check_program``) to reject syntax errors before it
starts anything; only the worker compiles it to bytecode, inside its run's limits, and reports
what only the compiler finds (``break`` outside a loop, say) as the same ``exception``. This
module imports only the standard library.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import traceback
from collections.abc import Collection
from types import CodeType
from typing import Final

__all__ = [
    "ABSENT_NAME",
    "FILENAME",
    "FUNCTION_NAME",
    "STAR_IMPORT_NAME",
    "ProgramError",
    "check_program",
    "compile_program",
    "source_lines",
]

FILENAME: Final = "<run_code>"
"""The filename programs compile under (tracebacks and ``linecache``)."""
FUNCTION_NAME: Final = "<module>"
"""Name of the wrapping coroutine function (tracebacks read ``in <module>``)."""
ABSENT_NAME: Final = "__run_code_absent__"
"""Global holding the no-result sentinel."""
STAR_IMPORT_NAME: Final = "__run_code_star_import__"
"""Global holding the function a program's ``from module import *`` calls, with the module's
name and the import's level."""

_YIELD_MESSAGE: Final = "'yield' is not allowed in a run_code program body"
_BARE_RETURN_MAY_BE: Final = re.compile(r"\breturn[^\S\r\n]*(?:$|[;#\\\r\n])", re.MULTILINE)
"""Matches wherever the program may have a bare ``return`` (the keyword, then nothing but the
line's end, a ``;``, a comment or a continuation; in a string or a comment too): where neither
this nor ``yield`` occurs, the walk over the program's own nodes would find nothing to rewrite
or refuse, and is skipped (measured: a quarter to a third of a short program's compile)."""


class ProgramError(Exception):
    """The program does not compile; ``message`` is the formatted ``SyntaxError`` text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def source_lines(source: str) -> list[str]:
    """``source``'s lines as the compiler numbers them (``\\n``, ``\\r\\n`` and ``\\r`` end a line;
    ``str.splitlines`` would also split at a form feed or U+2028 inside a string literal, and
    the traceback would show the wrong line), each ending with its newline as linecache keeps
    a file's: the traceback takes a line's indentation as its length less that of its stripped
    text, so a last line without one would get its carets a column too far right."""
    lines = io.StringIO(source, newline=None).readlines()
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def _format_syntax_error(error: BaseException, source: str) -> str:
    if isinstance(error, SyntaxError):
        if error.filename in (None, "<unknown>"):
            error.filename = FILENAME
        lineno = error.lineno
        if error.text is None and lineno is not None:
            lines = source_lines(source)  # only a failure needs them
            if 0 < lineno <= len(lines):
                error.text = lines[lineno - 1]
    text = "".join(traceback.format_exception_only(type(error), error)).rstrip("\n")
    note = _sent_as_shown(error, source)
    return text if note is None else f"{text}\n{note}"


_FENCE_NOTE: Final = (
    "The program is Python source, not Markdown: send it without the ``` lines around it."
)
_ESCAPED_NOTE: Final = (
    'The program holds a backslash and an "n" where its lines should break (it was escaped'
    " twice): send it with real line breaks."
)
_CONTINUATION: Final = "unexpected character after line continuation character"


def _sent_as_shown(error: BaseException, source: str) -> str | None:
    """A note for a syntax error that comes of how the program was sent rather than of its
    Python: in a Markdown fence (its first line ```` ``` ````), or escaped twice, so that its
    line breaks are a backslash and an ``n`` on one line. Python's own text ("invalid
    syntax" under the fence, a "line continuation character") says neither."""
    if not isinstance(error, SyntaxError):
        return None
    if source.lstrip().startswith("```") and (error.text or "").lstrip().startswith("```"):
        return _FENCE_NOTE
    if error.msg == _CONTINUATION and "\\n" in source and "\n" not in source.strip():
        return _ESCAPED_NOTE
    return None


def _own_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node that belongs to the program function's own scope (no nested bodies)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            stack.extend(node.decorator_list)
            stack.append(node.args)
            if node.returns is not None:
                stack.append(node.returns)
        elif isinstance(node, ast.Lambda):
            stack.append(node.args)
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(node.keywords)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _too_deep(error: MemoryError | RecursionError) -> ProgramError:
    """The parser's or compiler's refusal of a program past its limits: CPython's parser raises a
    bare ``MemoryError`` for a program nested too deeply (and so does running out of memory,
    which in a worker is the run's memory budget), the compiler ``RecursionError``."""
    text = str(error) or "the program is too large or nested too deeply to compile"
    return ProgramError(f"{type(error).__name__}: {text}")


def check_program(source: str) -> None:
    """Raise ``ProgramError`` when ``source`` does not parse as a program body (what the host
    checks before it starts anything: the syntax, ``yield``, the parser's limits). Compiling
    to bytecode is left to the worker, inside its run's limits: a short program can cost the
    compiler gigabytes (nested ``finally`` blocks are emitted twice per level; a ``match`` with
    thousands of captures is quadratic)."""
    if "yield" in source:
        _program_module(source)  # its walk refuses a ``yield`` of the program's own
    else:
        _parse(source)  # no yield without the keyword spelt out: the parse is the check


def compile_program(source: str, predefined: Collection[str] = ()) -> CodeType:
    """Compile a program body to a module code object defining ``FUNCTION_NAME``.

    ``predefined``: the globals the program is given (its binding namespaces, their error
    classes): one the program assigns is declared ``global`` in it, as in a script (see the
    module docstring). Raises ``ProgramError`` with the ``SyntaxError`` text (``<run_code>``
    filename) when the program does not compile or yields, and naming the limit when it is
    nested too deeply for the parser or the compiler.
    """
    code = _compiled(_program_module(source), source)
    function = _program_function(code)
    if function is not None:
        # Found from the compiled code rather than by a walk of every program's tree: few
        # programs assign one, and those are compiled again.
        assigned = [*function.co_varnames, *function.co_cellvars]
        if STAR_IMPORT_NAME in function.co_names:
            # What a star import binds is known only once it runs, and may be a name the
            # program assigns too (``mean = mean(values)``, or before the import): in a
            # script both are the one global, so every name the program assigns is.
            shadowed = {name for name in assigned if name.isidentifier()}
        else:
            shadowed = set(predefined).intersection(assigned) if predefined else set()
        if shadowed:
            code = _compiled(_program_module(source, shadowed), source)
    return _top_level_names(code)


def _compiled(module: ast.Module, source: str) -> CodeType:
    try:
        return compile(module, FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise ProgramError(_format_syntax_error(error, source)) from None
    except (MemoryError, RecursionError) as error:
        raise _too_deep(error) from None


def _program_function(module: CodeType) -> CodeType | None:
    """The code of the program's function in its compiled module."""
    for const in module.co_consts:
        if isinstance(const, CodeType) and const.co_name == FUNCTION_NAME:
            return const
    return None


_OPTIMIZED: Final = inspect.CO_OPTIMIZED
_LOCALS_PREFIX: Final = f"{FUNCTION_NAME}.<locals>."
"""How the qualified names of what the program defines start: it is the body of a function."""


def _top_level_names(module: CodeType) -> CodeType:
    """``module`` with the program's functions and classes named as a script's: ``P``,
    ``f.<locals>.g``, not ``<module>.<locals>.P``. The prefix is what a model reads in the
    repr of a dataclass (``<module>.<locals>.P(x=1)``), a function or a class and in the last
    line of a traceback of its own exception class, none of which it wrote. A function's
    ``__qualname__`` is its code's; a class's is a constant its body stores."""
    function = _program_function(module)
    if function is None:
        return module
    renamed = _renamed(function)
    if renamed is function:  # the program defines nothing (most do not)
        return module
    consts = [renamed if const is function else const for const in module.co_consts]
    return module.replace(co_consts=tuple(consts))


def _renamed(code: CodeType) -> CodeType:
    """``code`` and the code nested in it without ``_LOCALS_PREFIX``. Iterative: code may nest
    as deep as the compiler lets it."""
    root_consts: list[object] = list(code.co_consts)
    if not any(isinstance(const, CodeType) for const in root_consts):
        return code
    # Depth first: each entry is a code object, its constants being rebuilt, and where the
    # next constant to look at is; a finished code object replaces itself in its parent.
    stack: list[tuple[CodeType, list[object], int]] = [(code, root_consts, 0)]
    done: CodeType = code
    while stack:
        current, consts, index = stack.pop()
        while index < len(consts) and not isinstance(consts[index], CodeType):
            index += 1
        if index < len(consts):
            child = consts[index]
            assert isinstance(child, CodeType)
            stack.append((current, consts, index))
            stack.append((child, list(child.co_consts), 0))
            continue
        qualname = current.co_qualname
        renamed = qualname.removeprefix(_LOCALS_PREFIX)
        if renamed != qualname and not current.co_flags & _OPTIMIZED:
            # A class body (the one kind of nested code not optimized) stores its
            # ``__qualname__`` from a constant equal to its code's.
            consts = [renamed if const == qualname else const for const in consts]
        done = current.replace(co_consts=tuple(consts), co_qualname=renamed)
        if stack:
            parent, parent_consts, parent_index = stack.pop()
            parent_consts[parent_index] = done
            stack.append((parent, parent_consts, parent_index + 1))
    return done


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source, FILENAME, "exec")
    except IndentationError as error:
        indented = error.msg == "unexpected indent" and _indented_as_a_whole(source)
        module = _parse_indented(source) if indented else None
        if module is None:
            raise ProgramError(_format_syntax_error(error, source)) from None
        return module
    except (SyntaxError, ValueError) as error:
        raise ProgramError(_format_syntax_error(error, source)) from None
    except (MemoryError, RecursionError) as error:
        raise _too_deep(error) from None


def _indented_as_a_whole(source: str) -> bool:
    """Whether the first line that holds code is indented (then so is every other one that
    parses as the program's own; the parse of the block says whether they all are)."""
    for line in source.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and not stripped.startswith("#"):
            return stripped != line
    return False


def _parse_indented(source: str) -> ast.Module | None:
    """An indented program, parsed as the body of ``if 1:`` on a line of its own before it;
    its statements are moved back up one line, to the model's own numbers. ``None`` when a
    statement of the program is outside that block (not indented as a whole after all)."""
    try:
        block = ast.parse("if 1:\n" + source, FILENAME, "exec")
    except (SyntaxError, ValueError) as error:
        if isinstance(error, SyntaxError) and error.lineno is not None:
            error.lineno -= 1
            if error.end_lineno is not None:
                error.end_lineno -= 1
            error.text = None
        raise ProgramError(_format_syntax_error(error, source)) from None
    except (MemoryError, RecursionError) as error:
        raise _too_deep(error) from None
    if len(block.body) != 1:
        return None
    body = block.body[0]
    assert isinstance(body, ast.If)
    module = ast.Module(body=body.body, type_ignores=[])
    ast.increment_lineno(module, -1)
    return module


class _Unannotated(ast.NodeTransformer):
    """The program's own statements with the annotations of ``names`` dropped (nested scopes
    left as they are: their annotated names are their own)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            kept = self.visit(statement)
            if kept is not None:
                out.append(kept)
        return out

    def _nested(self, node: ast.AST) -> ast.AST:
        return node  # a scope of its own

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        target = node.target
        if not (isinstance(target, ast.Name) and target.id in self.names):
            return node
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign(targets=[target], value=node.value), node)


class _StarImports(ast.NodeTransformer):
    """The program's own ``from module import *`` as calls of ``STAR_IMPORT_NAME`` (nested
    scopes left as they are: Python refuses one there, as in a script)."""

    def _nested(self, node: ast.AST) -> ast.AST:
        return node  # a scope of its own

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if [alias.name for alias in node.names] != ["*"]:
            return node
        call = ast.Call(
            func=ast.Name(STAR_IMPORT_NAME, ast.Load()),
            args=[ast.Constant(node.module or ""), ast.Constant(node.level)],
            keywords=[],
        )
        return ast.fix_missing_locations(ast.copy_location(ast.Expr(call), node))


def _leading_futures(body: list[ast.stmt]) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The ``from __future__`` imports ``body`` starts with (after a docstring, if any), and
    ``body`` without them."""
    start = 1 if body and _is_docstring(body[0]) else 0
    end = start
    while end < len(body):
        statement = body[end]
        if not (isinstance(statement, ast.ImportFrom) and statement.module == "__future__"):
            break
        end += 1
    return body[start:end], body[:start] + body[end:]


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _globals_of_nested_scopes(body: list[ast.stmt]) -> list[str]:
    """The names that a function or class inside the program declares ``global``."""
    own = {id(node) for node in _own_nodes(body)}
    names: set[str] = set()
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Global) and id(node) not in own:
                names.update(node.names)
    return sorted(names)


def _program_module(source: str, declared_global: Collection[str] = ()) -> ast.Module:
    """The program parsed and wrapped (see the module docstring), not yet compiled;
    ``declared_global``: names declared ``global`` in the program besides those its nested
    scopes declare so."""
    tree = _parse(source)
    walked = "yield" in source or _BARE_RETURN_MAY_BE.search(source) is not None
    for node in _own_nodes(tree.body) if walked else ():
        if isinstance(node, ast.Yield | ast.YieldFrom):
            rejected = SyntaxError(
                _YIELD_MESSAGE,
                (
                    FILENAME,
                    node.lineno,
                    node.col_offset + 1,
                    None,
                    node.end_lineno,
                    (node.end_col_offset or 0) + 1,
                ),
            )
            raise ProgramError(_format_syntax_error(rejected, source))
        if isinstance(node, ast.Return) and node.value is None:
            node.value = ast.copy_location(ast.Name(ABSENT_NAME, ast.Load()), node)
    futures: list[ast.stmt] = []
    if "__future__" in source:
        futures, tree.body = _leading_futures(tree.body)
    hoisted: list[ast.stmt] = []
    globals_ = set(declared_global)
    if "global" in source:
        globals_.update(_globals_of_nested_scopes(tree.body))
    if globals_:
        declared = ast.Global(names=sorted(globals_))
        declared.lineno = declared.end_lineno = 1
        declared.col_offset = declared.end_col_offset = 0
        hoisted.append(declared)
        # A global name cannot be annotated where it is declared so: the program's own
        # ``counter: int = 0`` becomes ``counter = 0`` (an annotation changes nothing at
        # run time but ``__annotations__``), and ``counter: int`` alone goes.
        tree.body = _Unannotated(globals_).visit_body(tree.body)
    if "*" in source and "import" in source:
        tree.body = [_StarImports().visit(statement) for statement in tree.body]
    last_line = (tree.body[-1].end_lineno or 1) if tree.body else 1
    absent = ast.Name(ABSENT_NAME, ast.Load())
    final = ast.Return(absent)
    for placed in (final, absent):  # every node made here is placed: no tree-wide fix
        placed.lineno = placed.end_lineno = last_line
        placed.col_offset = placed.end_col_offset = 0
    function = ast.AsyncFunctionDef(
        name=FUNCTION_NAME,
        args=ast.arguments(
            posonlyargs=[],
            args=[],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        ),
        body=[*hoisted, *tree.body, final],
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=1,
        col_offset=0,
        end_lineno=last_line,
        end_col_offset=0,
    )
    return ast.Module(body=[*futures, function], type_ignores=[])
