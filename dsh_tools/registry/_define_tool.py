"""``define_tool``: a ``ToolDefinition`` from the author DSL, with both schemas compiled at
definition time and the body wrapped so that arguments are validated before it runs (typed
views, placements and the wrappers of the callbacks included)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ..actors import JsonSchemaError, ToolArgsError
from ..actors._config import finite_number
from ._body_values import converts_values
from ._definition import (
    Placement,
    ToolDefinition,
    ToolOutput,
    accepts_positional,
    shape_problem,
)
from ._dsl import compile_parameters, compile_schema
from ._execution import ToolRunContext
from ._hooks import ContentFinalizer
from ._raw_schema import optional_null_dropper
from ._schema_plan import _build_plan
from ._schema_validate import validate_plan
from ._tool_contract import _check_text
from ._typed_views import _check_view, _output_view_builder, _view_builder

__all__ = ["define_tool", "placed_execute"]


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object whose __call__ is a coroutine function.
    return inspect.iscoroutinefunction(type(fn).__dict__.get("__call__"))


def _compiled(owner: str, what: str, compile: Callable[[Any], Any], dsl: Any) -> Any:
    """``compile(dsl)``; its ``JsonSchemaError`` gets a note naming the tool and which of its
    schemas is wrong (the violations' text is pinned, and their paths alone do not say)."""
    try:
        return compile(dsl)
    except JsonSchemaError as exc:
        exc.add_note(f"{owner}: in its {what}")
        raise


def check_timeout_ms(owner: str, timeout_ms: object) -> None:
    """``None`` or a positive finite number: ``TypeError`` for another type (a bool, "500"),
    ``ValueError`` for a number out of range, each naming ``owner``."""
    if timeout_ms is None:
        return
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
        raise TypeError(f"{owner}: timeout_ms must be a positive finite number")
    if not finite_number(timeout_ms) or timeout_ms <= 0:
        raise ValueError(f"{owner}: timeout_ms must be a positive finite number")


def define_tool(
    name: str,
    description: str,
    parameters: Any,
    output: ToolOutput,
    execute: Callable[..., Any],
    *,
    is_concurrency_safe: Callable[[Any], Any] | None = None,
    timeout_ms: float | None = None,
    finalize_content: ContentFinalizer | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Any], Any] | None = None,
    args_type: Any = None,
    output_type: Any = None,
    placement: Placement | None = None,
) -> ToolDefinition:
    """Define a tool from the author DSL and return a registrable ``ToolDefinition``.

    ``parameters`` is a DSL property map and ``output.schema`` a DSL value schema; both are
    compiled here (a malformed one raises ``JsonSchemaError`` now, never at call time) and
    captured, so later edits to the author's dicts change nothing. The returned definition's
    ``execute`` validates the (frozen) arguments and raises ``ToolArgsError`` before the body
    runs; it is ``async def`` exactly when the body is. With ``args_type`` (a ``TypedDict`` or
    ``msgspec.Struct`` whose fields must match the parameters) the body, classifier, renderers
    and presenters receive that typed view instead of the frozen mapping; ``output_type`` does
    the same for the value given to the renderers, and a body may return an ``output_type``
    Struct instance. The classifier answers ``False`` and the presenters ``None`` for arguments
    that do not validate. With a ``placement`` the arguments are validated here and the body
    (typed view included) runs where the placement says, as an ``async def`` body; everything
    else stays here.
    """
    if type(name) is not str:
        raise TypeError(f"define_tool: name must be a non-empty str, got {type(name).__name__}")
    if not name:
        raise ValueError("define_tool: name must be a non-empty str, got ''")
    _check_text(name, f"define_tool: name {name!r}")
    owner = f"define_tool({name})"
    check_timeout_ms(owner, timeout_ms)
    if type(description) is not str:
        raise TypeError(f"{owner}: description must be a str")
    _check_text(description, f"{owner}: description")
    if not isinstance(output, ToolOutput) or not callable(output.render):
        raise TypeError(
            f"{owner}: must declare output as ToolOutput(schema, render, "
            "presentation_meta=None) with a callable render"
        )
    if output.presentation_meta is not None and not callable(output.presentation_meta):
        raise TypeError(f"{owner}: output.presentation_meta must be callable or None")
    if not callable(execute):
        raise TypeError(f"{owner}: execute must be callable")
    if not accepts_positional(execute, 2):
        raise TypeError(f"{owner}: execute must accept two positional arguments (args, run_ctx)")
    for label, callback in (
        ("output.render", output.render),
        ("output.presentation_meta", output.presentation_meta),
        ("is_concurrency_safe", is_concurrency_safe),
        ("finalize_content", finalize_content),
        ("present_call", present_call),
        ("present_result", present_result),
    ):
        if callback is None:
            continue
        if not callable(callback):
            raise TypeError(f"{owner}: {label} must be callable or None")
        if (problem := shape_problem(label, callback)) is not None:
            raise TypeError(f"{owner}: {problem}")

    compiled_parameters = _compiled(owner, "parameters", compile_parameters, parameters)
    compiled_output = _compiled(owner, "output.schema", compile_schema, output.schema)
    if args_type is not None:
        _check_view(owner, "args_type", args_type, compiled_parameters, "parameters")
    if output_type is not None:
        _check_view(owner, "output_type", output_type, compiled_output, "output schema")

    plan = _build_plan(compiled_parameters)
    args_view: Callable[[Any], Any] | None = (
        _view_builder(args_type) if args_type is not None else None
    )
    output_view = _output_view_builder(output_type) if output_type is not None else None
    output_struct: Any = (
        output_type
        if isinstance(output_type, type) and issubclass(output_type, msgspec.Struct)
        else None
    )

    # A null for an optional property that does not accept null means "absent" (how OpenAI's
    # strict mode sends an omitted optional argument). Such a null always fails validation, so
    # it is looked for only then: valid arguments pay nothing.
    drop_nulls = optional_null_dropper(compiled_parameters)

    def validated(args: Any, lossless: bool = False) -> tuple[Any, list[str]]:
        violations = validate_plan(plan, args, "", lossless=lossless)
        if violations and drop_nulls is not None:
            dropped = drop_nulls(args)
            if dropped is not args:
                return dropped, validate_plan(plan, dropped, "", lossless=lossless)
        return args, violations

    def checked(args: Any, run_ctx: Any) -> Any:
        # ``is_call_snapshot``, inline: every call of the tool passes here.
        lossless = (
            type(run_ctx) is ToolRunContext
            and object.__getattribute__(run_ctx, "_record").arguments is args
        )
        # ``validated``, its passing case inline: every call of the tool passes here.
        if validate_plan(plan, args, "", lossless=lossless):
            args, violations = validated(args, lossless)
            if violations:
                raise ToolArgsError(violations)
        return args if args_view is None else args_view(args)

    def to_canonical(result: Any) -> Any:
        if output_struct is not None and isinstance(result, output_struct):
            return msgspec.to_builtins(result)
        return result

    body = execute
    wrapped_execute: Callable[..., Any]
    if _is_async(body):

        async def wrapped_async(args: Any, run_ctx: Any) -> Any:
            view = checked(args, run_ctx)
            return to_canonical(await body(view, run_ctx))

        wrapped_execute = wrapped_async
    else:

        def wrapped_sync(args: Any, run_ctx: Any) -> Any:
            view = checked(args, run_ctx)
            result = body(view, run_ctx)
            if output_struct is None:
                return result  # what ``to_canonical`` would return
            if inspect.isawaitable(result):
                return _convert_later(result, to_canonical)
            return to_canonical(result)

        wrapped_execute = wrapped_sync
    _describe(wrapped_execute, body, name, "execute")
    if placement is not None:
        wrapped_execute = _placed(owner, placement, name, validated, args_view, body, to_canonical)
    if output_struct is not None:
        converts_values(wrapped_execute, to_canonical)

    as_body_saw: Callable[[Any], Any] | None = None
    if drop_nulls is not None:
        dropper = drop_nulls

        def as_body_saw(args: Any) -> Any:
            """The arguments as the body received them: without the nulls that mean "absent",
            which are dropped only from arguments that do not validate as they are."""
            dropped = dropper(args)
            if dropped is args or not validate_plan(plan, args, ""):
                return args
            return dropped

    render = output.render
    projector = output.presentation_meta
    if args_view is not None or output_view is not None or as_body_saw is not None:
        render = _with_views(render, as_body_saw, args_view, output_view, name, "render")
        if projector is not None:
            projector = _with_views(
                projector, as_body_saw, args_view, output_view, name, "presentation_meta"
            )

    def soft(args: Any) -> tuple[bool, Any]:
        """(valid, view) without raising: presenters and the classifier never fail on input."""
        args, violations = validated(args)
        if violations:
            return False, None
        if args_view is None:
            return True, args
        try:
            return True, args_view(args)
        except ToolArgsError:
            return False, None

    # Without a view, valid arguments are handed over as they are: that case is checked
    # inline (the classifier runs before every call), everything else goes through ``soft``.
    plain = plan if args_view is None else None
    classifier = _when_valid(soft, is_concurrency_safe, False, name, "is_concurrency_safe", plain)
    call_presenter = _when_valid(soft, present_call, None, name, "present_call", plain)
    result_presenter = _when_valid(soft, present_result, None, name, "present_result", plain)
    return ToolDefinition(
        name=name,
        description=description,
        parameters=compiled_parameters,
        output=ToolOutput(compiled_output, render, projector),
        execute=wrapped_execute,
        is_concurrency_safe=classifier,
        timeout_ms=timeout_ms,
        finalize_content=finalize_content,
        present_call=call_presenter,
        present_result=result_presenter,
        placement=placement,
    )


def placed_execute(
    tool: str,
    placement: Placement,
    body: Callable[[Any, Any], Any],
    validate: Callable[[Any], None] | None = None,
) -> Callable[[Any, Any], Awaitable[Any]]:
    """``body(args, run_ctx)`` moved by ``placement``, as the ``async def`` execute of a
    ``ToolDefinition``.

    ``validate(args)`` runs here first and raises (``ToolArgsError``) for bad arguments, so a bad
    call never leaves the process; ``body`` (typed views, the author's function, the canonical
    conversion) runs where the placement says, so what it refers to must be picklable and the
    classes it builds importable there. ``define_tool(..., placement=...)`` is built on this.
    """
    place = getattr(placement, "place", None)
    if not callable(place):
        raise TypeError(f"tool {tool!r}: placement must have a place(tool, execute) method")
    placed: Callable[..., Any] = place(tool, body)
    if not inspect.iscoroutinefunction(placed):
        raise TypeError(
            f"tool {tool!r}: placement.place() must return an async def body, "
            f"got {type(placed).__name__}"
        )
    if validate is None:
        return placed
    check = validate

    async def validated_then_placed(args: Any, run_ctx: Any) -> Any:
        check(args)
        return await placed(args, run_ctx)

    return validated_then_placed


def _placed(
    owner: str,
    placement: Placement,
    tool: str,
    validated: Callable[[Any], tuple[Any, list[str]]],
    args_view: Callable[[Any], Any] | None,
    body: Callable[..., Any],
    to_canonical: Callable[[Any], Any],
) -> Callable[..., Any]:
    """``define_tool``'s body moved by ``placement``: arguments are validated here (a null that
    means "absent" is dropped here too, so the body gets what a local body would); the typed
    view, the body and the canonical conversion run where the placement says."""

    def moved(args: Any, run_ctx: Any) -> Any:
        result = body(args if args_view is None else args_view(args), run_ctx)
        if inspect.isawaitable(result):
            return _convert_later(result, to_canonical)
        return to_canonical(result)

    _describe(moved, body, tool, "execute")
    try:
        placed = placed_execute(tool, placement, moved)
    except TypeError as exc:
        raise TypeError(f"{owner}: {str(exc).partition(': ')[2]}") from None

    async def execute(args: Any, run_ctx: Any) -> Any:
        args, violations = validated(args)
        if violations:
            raise ToolArgsError(violations)
        return await placed(args, run_ctx)

    _describe(execute, body, tool, "execute")
    return execute


def _with_views(
    fn: Callable[[Any, Any], Any],
    as_body_saw: Callable[[Any], Any] | None,
    args_view: Callable[[Any], Any] | None,
    value_view: Callable[[Any], Any] | None,
    tool: str,
    role: str,
) -> Callable[[Any, Any], Any]:
    """``fn(args, value)`` (a renderer or projector) receiving the typed views instead of the
    frozen arguments and value, for whichever of the two has a view, and the arguments as the
    body received them (``as_body_saw``)."""

    def with_views(args: Any, value: Any) -> Any:
        if as_body_saw is not None:
            args = as_body_saw(args)
        return fn(
            args if args_view is None else args_view(args),
            value if value_view is None else value_view(value),
        )

    _describe(with_views, fn, tool, role)
    return with_views


def _when_valid(
    soft: Callable[[Any], tuple[bool, Any]],
    fn: Callable[..., Any] | None,
    otherwise: Any,
    tool: str,
    role: str,
    plain: Any = None,
) -> Callable[..., Any] | None:
    """``fn(args, *rest)`` (the classifier or a presenter) called with the arguments' view
    only when they validate; ``otherwise`` answers for arguments that do not. ``None`` when
    the author gave no ``fn``. ``plain``: the validation plan of a tool without an arguments
    view (its view of valid arguments is the arguments themselves)."""
    if fn is None:
        return None
    user_fn = fn

    def when_valid(args: Any, *rest: Any) -> Any:
        if plain is not None and not validate_plan(plain, args, ""):
            return user_fn(args, *rest)  # ``soft``'s passing case, inline
        valid, view = soft(args)
        return user_fn(view, *rest) if valid else otherwise

    _describe(when_valid, user_fn, tool, role)
    return when_valid


async def _convert_later(awaitable: Awaitable[Any], convert: Callable[[Any], Any]) -> Any:
    return convert(await awaitable)


def _describe(wrapper: Callable[..., Any], wrapped: Any, tool: str, role: str) -> None:
    """Give a wrapper a readable name and the author's docstring (for logs and tracebacks).

    No ``__wrapped__`` link: nothing should reach the author's body around the validation.
    """
    wrapper.__doc__ = getattr(wrapped, "__doc__", None)
    wrapper.__name__ = f"{role}[{tool}]"
    wrapper.__qualname__ = f"define_tool.{role}[{tool}]"
