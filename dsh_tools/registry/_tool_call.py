"""The call path of a ``@tool`` body: the frozen arguments strictly converted by msgspec, the
body called by its signature plan, its value made canonical; and the placed form of that body,
rebuilt where a placement runs it."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import msgspec

from ..actors import ToolArgsError
from ._raw_schema import optional_null_dropper
from ._tool_signature import _annotated, _Signature

_SCALAR_RESULTS: Final = (str, int, float, bool, type(None))


def _to_canonical(value: Any) -> Any:
    """The body's return value as JSON data (Structs, dataclasses and Enums become plain
    values); an object msgspec cannot convert is left for the output contract to report."""
    if type(value) in _SCALAR_RESULTS:
        return value
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, ValueError, OverflowError):
        return value


def _violation(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    return (
        text.replace("`$.", "`arguments.")
        .replace("`$[", "`arguments[")
        .replace("`$`", "`arguments`")
    )


def _make_parser(
    args_type: Any, drop_nulls: Callable[[Any], Any] | None
) -> Callable[[Any], tuple[Any, ...]]:
    """``parse(args)``: the frozen arguments strictly converted to the argument struct's field
    values, in order; ``ToolArgsError`` naming the first violation otherwise."""
    convert = msgspec.convert
    astuple = msgspec.structs.astuple
    validation_error = msgspec.ValidationError

    def parse(args: Any) -> tuple[Any, ...]:
        try:
            return astuple(convert(args, args_type, strict=True))
        except validation_error as exc:
            error = exc
        # A null for an optional parameter that does not accept null means "absent" (OpenAI's
        # strict mode); it always fails conversion, so valid arguments never pay for the look.
        if drop_nulls is not None:
            dropped = drop_nulls(args)
            if dropped is not args:
                try:
                    return astuple(convert(dropped, args_type, strict=True))
                except validation_error as exc:
                    error = exc
        raise ToolArgsError([_violation(error)]) from None

    return parse


def _make_execute(
    fn: Any, args_type: Any, plan: _Signature, drop_nulls: Callable[[Any], Any] | None
) -> Callable[..., Any]:
    parse = _make_parser(args_type, drop_nulls)
    has_context = -1 in plan.positional or any(i == -1 for _, i in plan.keywords)

    def call(values: tuple[Any, ...], run_ctx: Any) -> Any:
        if plan.simple:
            return fn(*values, run_ctx) if has_context else fn(*values)
        positional = [run_ctx if i == -1 else values[i] for i in plan.positional]
        keywords = {k: run_ctx if i == -1 else values[i] for k, i in plan.keywords}
        return fn(*positional, **keywords)

    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(_annotated(fn)):

        async def execute_async(args: Any, run_ctx: Any) -> Any:
            return _to_canonical(await call(parse(args), run_ctx))

        return execute_async

    def execute(args: Any, run_ctx: Any) -> Any:
        return _to_canonical(call(parse(args), run_ctx))

    return execute


def _validator(args_type: Any, drop_nulls: Callable[[Any], Any] | None) -> Callable[[Any], None]:
    """``validate(args)`` for a placed body: the same strict conversion as the local body, run
    here so a bad call never leaves the process (raises ``ToolArgsError``)."""
    parse = _make_parser(args_type, drop_nulls)

    def validate(args: Any) -> None:
        parse(args)

    return validate


def _without_constraints(hint: Any) -> Any:
    """``hint`` with every ``Annotated[T, ...]`` replaced by ``T``, at any depth."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _without_constraints(typing.get_args(hint)[0])
    args = typing.get_args(hint)
    if not args or origin is typing.Literal:
        return hint
    stripped = tuple(_without_constraints(a) for a in args)
    if stripped == args:
        return hint
    if origin is types.UnionType or origin is typing.Union:
        return typing.Union[stripped]  # noqa: UP007 - built from a tuple of members
    return origin[stripped]


class _PlacedBody:
    """The body of a placed ``@tool``: the argument conversion and the function, rebuilt where
    the placement runs it. The arguments arrive validated, so the fields travel without their
    constraints: neither the ``msgspec.defstruct`` argument class nor ``msgspec.Meta`` can be
    pickled; the user's function and annotation types travel as the placement pickles them."""

    def __init__(
        self, fn: Any, struct_name: str, fields: Any, plan: _Signature, parameters: Any
    ) -> None:
        self._fn = fn
        self._struct_name = struct_name
        self._fields = [
            (name, _without_constraints(hint), default) for name, hint, default in fields
        ]
        self._plan = plan
        self._parameters = parameters
        self._execute: Callable[..., Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_execute"] = None
        return state

    def __call__(self, args: Any, run_ctx: Any) -> Any:
        execute = self._execute
        if execute is None:
            args_type = msgspec.defstruct(
                self._struct_name, self._fields, kw_only=True, forbid_unknown_fields=True
            )
            execute = _make_execute(
                self._fn, args_type, self._plan, optional_null_dropper(self._parameters)
            )
            self._execute = execute
        return execute(args, run_ctx)
