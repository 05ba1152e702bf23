"""Tool definitions, ``define_tool``, and the registry's per-definition contract checks.

``ToolDefinition`` is what the registry stores: raw JSON Schema ``parameters`` (model-facing),
an output contract (``ToolOutput``: schema, render, optional presentation projection), the
body and optional callbacks. ``define_tool`` builds one from the author DSL: it compiles both
schemas at definition time and wraps the body so that arguments are validated before it runs.

The registry helpers below are what the pipeline calls: ``check_registration`` (the ordered
registration checks), ``project_schema`` (the model-facing projection), ``normalize_output``
(canonical success normalization) and ``classify`` (the concurrency classifier).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import msgspec
from msgspec import UNSET

from ..actors import FrozenList, ToolArgsError, ToolOutputError, message_of
from ._dsl import compile_parameters, compile_schema
from ._json_schema import assert_supported_json_schema
from ._lossless import LosslessJsonError, snapshot_json, thaw
from ._raw_schema import optional_null_dropper
from ._schema_plan import _build_plan, prepare_schema
from ._schema_validate import validate_plan

__all__ = [
    "Placement",
    "ToolDefinition",
    "ToolOutput",
    "check_registration",
    "classify",
    "define_tool",
    "normalize_output",
    "placed_execute",
    "project_schema",
]

_RUN_CODE = "run_code"


class ToolOutput(msgspec.Struct, frozen=True, eq=False):
    """A tool's output contract.

    ``schema`` validates every canonical value (raw JSON Schema on a ``ToolDefinition``; the
    DSL when passed to ``define_tool``). ``render(args, value)`` returns the model-visible
    content blocks; the optional ``presentation_meta(args, value)`` returns replayable JSON
    for UIs, computed only for direct (non-nested) calls.
    """

    schema: Any
    render: Callable[[Any, Any], Any]
    presentation_meta: Callable[[Any, Any], Any] | None = None


@runtime_checkable
class Placement(Protocol):
    """Where a tool's body runs (another process, another machine).

    ``place(tool, execute)`` returns the ``async def`` body that runs ``execute(args, run_ctx)``
    there (``args`` already validated, ``execute`` plain or ``async def``) and returns its
    canonical value or raises its exception. Only the body moves: the registry, hooks, guards,
    approval, wrappers, scheduling and the session log stay in the calling process and treat
    the placed body like any ``async def`` body. ``define_tool`` applies a placement once, at
    definition time.
    """

    def place(
        self, tool: str, execute: Callable[[Any, Any], Any]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        """The body that runs ``execute`` where this placement says."""
        ...


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """A registrable tool. Compared and hashed by identity.

    ``parameters`` is raw, model-facing JSON Schema (not validated by the registry for raw
    definitions, which own their input validation); ``execute(args, run_ctx)`` is a plain or
    ``async def`` function returning the canonical value. ``is_concurrency_safe(args)``
    returning exactly ``True`` lets a call overlap its siblings; ``timeout_ms`` is read by the
    timeout policy; ``finalize_content(exec, result)`` may replace the final content;
    ``present_call(args)`` and ``present_result(args, result)`` return presentation views.
    ``placement`` records where ``execute`` runs (``None``: in this process); ``define_tool``
    has already placed the body, so it is informational on a definition.
    """

    name: str
    description: str
    parameters: Any
    output: ToolOutput | None = None
    execute: Callable[..., Any]
    is_concurrency_safe: Callable[[Any], Any] | None = None
    timeout_ms: float | None = None
    finalize_content: Callable[[Any, Any], Any] | None = None
    present_call: Callable[[Any], Any] | None = None
    present_result: Callable[[Any, Any], Any] | None = None
    placement: Placement | None = None

    def __post_init__(self) -> None:
        # Refused when defined, not when the first call fails; other field checks stay with
        # check_registration, which reports them in its documented order.
        if callable(self.execute) and not _takes_args_and_context(self.execute):
            raise TypeError(
                f"tool {self.name!r}: execute must accept two positional arguments (args, run_ctx)"
            )


def _positive_finite(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and math.isfinite(value) and value > 0


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object whose __call__ is a coroutine function.
    return inspect.iscoroutinefunction(type(fn).__dict__.get("__call__"))


def _takes_args_and_context(fn: Any) -> bool:
    """Whether ``fn`` can be called as ``fn(args, run_ctx)`` (``True`` when the signature
    cannot be read, as for some builtins: then the call itself decides)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


# --- typed views -------------------------------------------------------------------------------


def _class_fields(owner: str, role: str, cls: Any) -> tuple[list[str], set[str]]:
    """Field names (in declaration order) and required names of a TypedDict or Struct class."""
    if typing.is_typeddict(cls):
        names = list(cls.__annotations__)
        required = set(cls.__required_keys__)
        # Under ``from __future__ import annotations`` the class sees strings and cannot tell
        # ``NotRequired[...]`` apart; the evaluated hints can.
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:
            hints = {}
        for key, hint in hints.items():
            origin = typing.get_origin(hint)
            if origin is typing.NotRequired:
                required.discard(key)
            elif origin is typing.Required:
                required.add(key)
        return names, required
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        infos = msgspec.structs.fields(cls)
        return [f.encode_name for f in infos], {f.encode_name for f in infos if f.required}
    raise TypeError(f"{owner}: {role} must be a TypedDict or msgspec.Struct class")


def _check_view(owner: str, role: str, cls: Any, schema: Any, against: str) -> None:
    """Fail at definition time when a typed view's fields differ from the compiled schema."""
    names, required = _class_fields(owner, role, cls)
    if schema.get("type") != "object":
        raise TypeError(f"{owner}: {role} {cls.__name__} needs an object-rooted {against} schema")
    declared = list(schema.get("properties", {}))
    declared_required = set(schema.get("required", ()))
    problems: list[str] = []
    only_schema = [n for n in declared if n not in names]
    only_class = [n for n in names if n not in declared]
    if only_schema:
        problems.append(f"only in {against}: {', '.join(only_schema)}")
    if only_class:
        problems.append(f"only in {cls.__name__}: {', '.join(only_class)}")
    if not only_schema and not only_class:
        req_schema = [n for n in declared if n in declared_required and n not in required]
        req_class = [n for n in declared if n in required and n not in declared_required]
        if req_schema:
            problems.append(f"required only in {against}: {', '.join(req_schema)}")
        if req_class:
            problems.append(f"required only in {cls.__name__}: {', '.join(req_class)}")
    if problems:
        raise TypeError(
            f"{owner}: {role} {cls.__name__} does not match {against}: " + "; ".join(problems)
        )


def _view_builder(cls: Any) -> Callable[[Any], Any]:
    """``args -> typed view`` via ``msgspec.convert`` on a thawed copy; failures are drift."""
    name = cls.__name__

    def view(args: Any) -> Any:
        try:
            return msgspec.convert(thaw(args), cls, strict=False)
        except (msgspec.ValidationError, LosslessJsonError) as exc:
            raise ToolArgsError([f"arguments do not fit {name}: {exc}"]) from None

    return view


def _output_view_builder(cls: Any) -> Callable[[Any], Any]:
    def view(value: Any) -> Any:
        return msgspec.convert(thaw(value), cls, strict=False)

    return view


# --- define_tool -------------------------------------------------------------------------------


def define_tool(
    name: str,
    description: str,
    parameters: Any,
    output: ToolOutput | None = None,
    execute: Callable[..., Any] | None = None,
    *,
    is_concurrency_safe: Callable[[Any], Any] | None = None,
    timeout_ms: float | None = None,
    finalize_content: Callable[[Any, Any], Any] | None = None,
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
    if type(name) is not str or not name:
        raise TypeError("define_tool: name must be a non-empty str")
    owner = f"define_tool({name})"
    if timeout_ms is not None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
            raise TypeError(f"{owner}: timeout_ms must be a positive finite number")
        if not math.isfinite(timeout_ms) or timeout_ms <= 0:
            raise ValueError(f"{owner}: timeout_ms must be a positive finite number")
    if type(description) is not str:
        raise TypeError(f"{owner}: description must be a str")
    if not isinstance(output, ToolOutput) or not callable(output.render):
        raise TypeError(
            f"{owner}: must declare output as ToolOutput(schema, render, "
            "presentation_meta=None) with a callable render"
        )
    if output.presentation_meta is not None and not callable(output.presentation_meta):
        raise TypeError(f"{owner}: output.presentation_meta must be callable or None")
    if not callable(execute):
        raise TypeError(f"{owner}: execute must be callable")
    if not _takes_args_and_context(execute):
        raise TypeError(f"{owner}: execute must accept two positional arguments (args, run_ctx)")
    for label, callback in (
        ("is_concurrency_safe", is_concurrency_safe),
        ("finalize_content", finalize_content),
        ("present_call", present_call),
        ("present_result", present_result),
    ):
        if callback is not None and not callable(callback):
            raise TypeError(f"{owner}: {label} must be callable or None")

    compiled_parameters = compile_parameters(parameters)
    compiled_output = compile_schema(output.schema)
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

    def validated(args: Any) -> tuple[Any, list[str]]:
        violations = validate_plan(plan, args, "")
        if violations and drop_nulls is not None:
            dropped = drop_nulls(args)
            if dropped is not args:
                return dropped, validate_plan(plan, dropped, "")
        return args, violations

    def checked(args: Any) -> Any:
        args, violations = validated(args)
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
            view = checked(args)
            return to_canonical(await body(view, run_ctx))

        wrapped_execute = wrapped_async
    else:

        def wrapped_sync(args: Any, run_ctx: Any) -> Any:
            view = checked(args)
            result = body(view, run_ctx)
            if output_struct is not None and inspect.isawaitable(result):
                return _convert_later(result, to_canonical)
            return to_canonical(result)

        wrapped_execute = wrapped_sync
    _describe(wrapped_execute, body, name, "execute")
    if placement is not None:
        wrapped_execute = _placed(owner, placement, name, plan, args_view, body, to_canonical)

    render = output.render
    projector = output.presentation_meta
    if args_view is not None or output_view is not None:
        render = _with_views(render, args_view, output_view, name, "render")
        if projector is not None:
            projector = _with_views(projector, args_view, output_view, name, "presentation_meta")

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

    classifier = _when_valid(soft, is_concurrency_safe, False, name, "is_concurrency_safe")
    call_presenter = _when_valid(soft, present_call, None, name, "present_call")
    result_presenter = _when_valid(soft, present_result, None, name, "present_result")
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
    plan: Any,
    args_view: Callable[[Any], Any] | None,
    body: Callable[..., Any],
    to_canonical: Callable[[Any], Any],
) -> Callable[..., Any]:
    """``define_tool``'s body moved by ``placement``: arguments are validated here; the typed
    view, the body and the canonical conversion run where the placement says."""

    def validate(args: Any) -> None:
        violations = validate_plan(plan, args, "")
        if violations:
            raise ToolArgsError(violations)

    def moved(args: Any, run_ctx: Any) -> Any:
        result = body(args if args_view is None else args_view(args), run_ctx)
        if inspect.isawaitable(result):
            return _convert_later(result, to_canonical)
        return to_canonical(result)

    _describe(moved, body, tool, "execute")
    try:
        execute = placed_execute(tool, placement, moved, validate)
    except TypeError as exc:
        raise TypeError(f"{owner}: {str(exc).partition(': ')[2]}") from None
    _describe(execute, body, tool, "execute")
    return execute


def _with_views(
    fn: Callable[[Any, Any], Any],
    args_view: Callable[[Any], Any] | None,
    value_view: Callable[[Any], Any] | None,
    tool: str,
    role: str,
) -> Callable[[Any, Any], Any]:
    """``fn(args, value)`` (a renderer or projector) receiving the typed views instead of the
    frozen arguments and value, for whichever of the two has a view."""

    def with_views(args: Any, value: Any) -> Any:
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
) -> Callable[..., Any] | None:
    """``fn(args, *rest)`` (the classifier or a presenter) called with the arguments' view
    only when they validate; ``otherwise`` answers for arguments that do not. ``None`` when
    the author gave no ``fn``."""
    if fn is None:
        return None
    user_fn = fn

    def when_valid(args: Any, *rest: Any) -> Any:
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


# --- registry helpers --------------------------------------------------------------------------


def check_registration(defn: Any, *, reserve_run_code: bool) -> None:
    """The registration checks, in order; the first failure raises and nothing is registered.

    0. ``defn`` is a ``ToolDefinition`` with a non-empty ``str`` name, a ``str`` description,
       a callable ``execute`` and optional callbacks that are callable (``TypeError``);
    1. ``output`` is a ``ToolOutput`` with a callable ``render`` and an absent or callable
       ``presentation_meta`` (``TypeError``: ``tool "<name>" must declare output { schema,
       render, presentation_meta? }``);
    2. ``output.schema`` is in the supported subset (``JsonSchemaError``);
    3. ``timeout_ms`` is absent or a positive finite number (``TypeError``);
    4. with ``reserve_run_code`` (presentation mode ``code`` or ``both``) the name is not
       ``run_code`` (``ValueError``).

    Duplicate names are the registry's concern; raw ``parameters`` are not checked here (a
    lossy one fails at projection).
    """
    if not isinstance(defn, ToolDefinition):
        raise TypeError(
            "register() accepts only a ToolDefinition (build one with define_tool() or "
            f"ToolDefinition(...)), got {type(defn).__name__}"
        )
    name = defn.name
    if type(name) is not str or not name:
        raise TypeError("tool name must be a non-empty str")
    if type(defn.description) is not str:
        raise TypeError(f'tool "{name}" description must be a str')
    if not callable(defn.execute):
        raise TypeError(f'tool "{name}" execute must be callable')
    for label in ("is_concurrency_safe", "finalize_content", "present_call", "present_result"):
        callback = getattr(defn, label)
        if callback is not None and not callable(callback):
            raise TypeError(f'tool "{name}" {label} must be callable or None')
    output = defn.output
    if (
        not isinstance(output, ToolOutput)
        or not callable(output.render)
        or (output.presentation_meta is not None and not callable(output.presentation_meta))
    ):
        raise TypeError(
            f'tool "{name}" must declare output {{ schema, render, presentation_meta? }}'
        )
    assert_supported_json_schema(output.schema)
    if defn.timeout_ms is not None and not _positive_finite(defn.timeout_ms):
        raise TypeError(f'tool "{name}" timeout_ms must be a positive finite number')
    if reserve_run_code and name == _RUN_CODE:
        raise ValueError(
            'tool name "run_code" is reserved for the Code Mode presentation transport and '
            "cannot be registered or shadowed"
        )


def project_schema(defn: ToolDefinition) -> dict[str, Any]:
    """The model-facing projection: exactly ``name``, ``description`` and ``parameters``.

    ``parameters`` is a fresh, detached plain copy (iterative), so callers may mutate what
    they get. Lossy parameters raise ``ValueError``: ``tool "<name>" parameters must be
    lossless JSON before schema projection: <path> is <type>``.
    """
    try:
        parameters = thaw(defn.parameters, "parameters")
    except LosslessJsonError as exc:
        raise ValueError(
            f'tool "{defn.name}" parameters must be lossless JSON before schema projection: {exc}'
        ) from None
    return {"name": defn.name, "description": defn.description, "parameters": parameters}


def _close_if_coroutine(value: Any) -> None:
    if inspect.iscoroutine(value):
        value.close()


def _snapshot_content(blocks: Any) -> FrozenList:
    """Render output as a frozen list; a tuple is accepted and converted element by element."""
    if type(blocks) is tuple:
        blocks = list(blocks)
    t = type(blocks)
    if t is not list and t is not FrozenList:
        _close_if_coroutine(blocks)
        raise LosslessJsonError("content", f"{type(blocks).__name__} (not a list of blocks)")
    content: FrozenList = snapshot_json(blocks, "content")
    return content


def normalize_output(
    defn: ToolDefinition, arguments: Any, value: Any, *, nested: bool
) -> tuple[Any, FrozenList, Any]:
    """Canonical success normalization: ``(frozen value, frozen content, meta or UNSET)``.

    1. snapshot the value (``value is not lossless JSON: <path> is <type>``);
    2. validate it against ``output.schema`` at root ``value``;
    3. freeze it (the snapshot is already frozen);
    4. ``content = render(arguments, value)``, snapshotted (``output.render failed: <msg>``,
       ``output.render returned non-lossless JSON: <path> is <type>``);
    5. only when not ``nested`` and a projector exists, ``meta = presentation_meta(arguments,
       value)`` (``output.presentation_meta failed: ...`` / ``... returned non-lossless
       JSON: ...``); a returned ``None`` is a present JSON null, no projector is ``UNSET``.

    Any failure raises ``ToolOutputError(defn.name, [violation])``.
    """
    output = defn.output
    assert output is not None, "normalize_output needs a registered definition"
    try:
        frozen = snapshot_json(value)
    except LosslessJsonError as exc:
        _close_if_coroutine(value)
        raise ToolOutputError(defn.name, [f"value is not lossless JSON: {exc}"]) from None
    except Exception as exc:
        raise ToolOutputError(defn.name, [f"value snapshot failed: {message_of(exc)}"]) from None
    violations = validate_plan(prepare_schema(output.schema), frozen, "value")
    if violations:
        raise ToolOutputError(defn.name, violations)
    try:
        blocks = output.render(arguments, frozen)
    except (Exception, asyncio.CancelledError) as exc:
        raise ToolOutputError(defn.name, [f"output.render failed: {message_of(exc)}"]) from None
    try:
        content = _snapshot_content(blocks)
    except LosslessJsonError as exc:
        raise ToolOutputError(
            defn.name, [f"output.render returned non-lossless JSON: {exc}"]
        ) from None
    except Exception as exc:
        raise ToolOutputError(defn.name, [f"output.render failed: {message_of(exc)}"]) from None
    projector = output.presentation_meta
    if projector is None or nested:
        return frozen, content, UNSET
    try:
        raw_meta = projector(arguments, frozen)
    except (Exception, asyncio.CancelledError) as exc:
        raise ToolOutputError(
            defn.name, [f"output.presentation_meta failed: {message_of(exc)}"]
        ) from None
    try:
        meta = snapshot_json(raw_meta, "meta")
    except LosslessJsonError as exc:
        _close_if_coroutine(raw_meta)
        raise ToolOutputError(
            defn.name, [f"output.presentation_meta returned non-lossless JSON: {exc}"]
        ) from None
    except Exception as exc:
        raise ToolOutputError(
            defn.name, [f"output.presentation_meta failed: {message_of(exc)}"]
        ) from None
    return frozen, content, meta


def classify(defn: ToolDefinition, arguments: Any) -> bool:
    """Whether a call may overlap its siblings: only when the classifier returns ``True``.

    No classifier, an exception, an awaitable or any other return value means exclusive.
    """
    classifier = defn.is_concurrency_safe
    if classifier is None:
        return False
    try:
        verdict = classifier(arguments)
    except BaseException:  # SystemExit included: a classifier must not stop the system loop
        return False
    if verdict is True:
        return True
    _close_if_coroutine(verdict)
    return False
