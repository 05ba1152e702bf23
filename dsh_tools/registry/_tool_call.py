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

from ..actors import ToolArgsError, ToolOutputError
from ._dataclass_defaults import defaults_filler
from ._enum_values import with_allowed_values
from ._error_keys import named_entries
from ._lossless import LosslessJsonError
from ._lossless_copy import thaw
from ._raw_schema import optional_null_dropper
from ._tool_signature import _annotated, _Signature, _tuples_as_lists
from ._type_hooks import type_decode, type_encode
from ._typed_losses import losses_check
from ._typed_output import unconvertible

_SCALAR_RESULTS: Final = (str, int, float, bool, type(None))


_PLAIN_RESULTS: Final = frozenset({str, int, float, bool, type(None), dict, list})
"""Result types that are never awaitable: no look for an awaitable for them."""


def _to_canonical(value: Any) -> Any:
    """The body's return value as JSON data (Structs, dataclasses and Enums become plain
    values); an object msgspec cannot convert is left for the output contract to report. A
    value msgspec gives up on as too deep is kept when it is plain JSON, and otherwise raises
    ``LosslessJsonError`` naming where it contains itself (``unconvertible``)."""
    if type(value) in _SCALAR_RESULTS:
        return value
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except TypeError:
        pass  # maybe a path or a model, which only the hook encodes: nothing else pays
    except (ValueError, OverflowError):
        return value
    except RecursionError:
        return unconvertible(value)
    try:
        return msgspec.to_builtins(value, str_keys=True, enc_hook=type_encode)
    except (TypeError, ValueError, OverflowError):
        return value
    except RecursionError:
        return unconvertible(value)


def _to_canonical_lists(value: Any) -> Any:
    """``_to_canonical`` for a return type that may hold tuples, which ``to_builtins`` keeps:
    they become the JSON arrays their schema declares."""
    out = _to_canonical(value)
    try:
        return _tuples_as_lists(out)
    except RecursionError:
        return out  # deeper than any tool output may be: the output contract reports it


def _any_part(
    annotation: Any, judge: Callable[[msgspec.inspect.Type], bool | None], unknown: bool
) -> bool:
    """Whether some part of the type ``annotation`` (itself, a field of a struct, dataclass,
    typed dict or named tuple, a union member, a container's items, keys or values) is one
    ``judge`` answers True for; ``judge`` answers None to look inside a part. ``unknown``:
    the answer for an annotation msgspec cannot describe. A recursive type is looked at once."""
    try:
        info = msgspec.inspect.type_info(annotation)
    except (TypeError, ValueError):
        return unknown
    seen: set[Any] = set()

    def holds(t: msgspec.inspect.Type) -> bool:
        judged = judge(t)
        if judged is not None:
            return judged
        if isinstance(
            t,
            msgspec.inspect.StructType
            | msgspec.inspect.DataclassType
            | msgspec.inspect.TypedDictType
            | msgspec.inspect.NamedTupleType,
        ):
            if t.cls in seen:
                return False
            seen.add(t.cls)
            return any(holds(field.type) for field in t.fields)
        if isinstance(t, msgspec.inspect.UnionType):
            return any(holds(member) for member in t.types)
        if isinstance(t, msgspec.inspect.TupleType):
            return any(holds(member) for member in t.item_types)
        if isinstance(t, msgspec.inspect.Metadata):
            return holds(t.type)
        inner = [getattr(t, name, None) for name in ("item_type", "key_type", "value_type")]
        return any(holds(item) for item in inner if isinstance(item, msgspec.inspect.Type))

    return holds(info)


def _is_tuple(t: msgspec.inspect.Type) -> bool | None:
    if isinstance(
        t,
        msgspec.inspect.TupleType
        | msgspec.inspect.VarTupleType
        | msgspec.inspect.NamedTupleType
        | msgspec.inspect.AnyType
        | msgspec.inspect.CustomType,
    ):
        return True
    return None


def may_hold_tuples(return_type: Any) -> bool:
    """Whether a value of ``return_type`` may hold a tuple (anywhere inside it), as far as its
    annotation tells; an unknown or ``Any`` type may."""
    return _any_part(return_type, _is_tuple, unknown=True)


def _has_key_not_text(t: msgspec.inspect.Type) -> bool | None:
    if isinstance(t, msgspec.inspect.DictType):
        key = t.key_type
        while isinstance(key, msgspec.inspect.Metadata):
            key = key.type
        return True if not isinstance(key, msgspec.inspect.StrType) else None
    return None


def has_keys_from_text(args_type: Any) -> bool:
    """Whether ``args_type`` holds a dict whose keys are not strings (``dict[int, str]``, an
    ``IntEnum`` key...). JSON object keys are always text, and msgspec turns them into such
    keys only when it decodes JSON text: converting the already decoded arguments refuses
    every key. Such arguments are converted through their JSON text instead."""
    return _any_part(args_type, _has_key_not_text, unknown=False)


def _is_any(t: msgspec.inspect.Type) -> bool | None:
    return True if isinstance(t, msgspec.inspect.AnyType) else None


def holds_any(args_type: Any) -> bool:
    """Whether some part of ``args_type`` is typed ``Any`` (or ``object``)."""
    return _any_part(args_type, _is_any, unknown=False)


def _is_custom(t: msgspec.inspect.Type) -> bool | None:
    return True if isinstance(t, msgspec.inspect.CustomType) else None


def holds_custom(args_type: Any) -> bool:
    """Whether some part of ``args_type`` is a type only a hook converts: a ``pathlib`` path
    or a pydantic model (``@tool`` refuses every other type msgspec does not describe)."""
    return _any_part(args_type, _is_custom, unknown=False)


def _violation(text: str) -> str:
    return (
        text.replace("`$.", "`arguments.")
        .replace("`$[", "`arguments[")
        .replace("`$`", "`arguments`")
    )


def _make_parser(
    args_type: Any, drop_nulls: Callable[[Any], Any] | None
) -> Callable[[Any], tuple[Any, ...]]:
    """``parse(args)``: the frozen arguments strictly converted to the argument struct's field
    values, in order; ``ToolArgsError`` naming the first violation otherwise, or what the
    conversion would lose (repeated set items, keys that convert to one key)."""
    astuple = msgspec.structs.astuple
    validation_error = msgspec.ValidationError
    convert: Callable[[Any], Any]
    # Only argument types that hold a path or a model take the hook, which costs every
    # conversion.
    hook = type_decode if holds_custom(args_type) else None
    if has_keys_from_text(args_type):
        encode = msgspec.json.encode
        decoder = msgspec.json.Decoder(args_type, strict=True, dec_hook=hook)

        def convert(args: Any) -> Any:
            return decoder.decode(encode(args))

    elif holds_any(args_type):
        to_type = msgspec.convert

        # msgspec passes a value typed ``Any`` through as it is: the registry's frozen
        # snapshot would reach the body, unlike the plain list or dict a ``list[T]`` part
        # gets. A plain copy first; only tools with such a part pay for it.
        def convert(args: Any) -> Any:
            return to_type(thaw(args), args_type, strict=True, dec_hook=hook)

    elif hook is not None:
        to_type = msgspec.convert

        def convert(args: Any) -> Any:
            return to_type(args, args_type, strict=True, dec_hook=hook)

    else:
        to_type = msgspec.convert

        def convert(args: Any) -> Any:
            return to_type(args, args_type, strict=True)

    fill = defaults_filler(args_type)
    if fill is not None:
        convert_bare = convert

        def convert(args: Any) -> Any:
            converted = convert_bare(args)
            fill(converted)
            return converted

    losses = losses_check(args_type)
    if losses is not None:
        convert_all = convert

        def convert(args: Any) -> Any:
            converted = convert_all(args)
            lost = losses(args, converted)
            if lost is not None:
                raise ToolArgsError([lost])
            return converted

    def parse(args: Any) -> tuple[Any, ...]:
        try:
            return astuple(convert(args))
        except validation_error as exc:
            error = exc
        failed = args
        # A null for an optional parameter that does not accept null means "absent" (OpenAI's
        # strict mode); it always fails conversion, so valid arguments never pay for the look.
        if drop_nulls is not None:
            dropped = drop_nulls(args)
            if dropped is not args:
                try:
                    return astuple(convert(dropped))
                except validation_error as exc:
                    error = exc
                    failed = dropped
        message = _violation(named_entries(convert, failed, error))
        raise ToolArgsError([with_allowed_values(args_type, message)]) from None

    return parse


def _make_execute(
    fn: Any,
    args_type: Any,
    plan: _Signature,
    drop_nulls: Callable[[Any], Any] | None,
    tuples: bool = True,
    *,
    name: str,
) -> Callable[..., Any]:
    """``tuples``: the return type may hold tuples (``may_hold_tuples``). A value that
    cannot be made canonical raises ``ToolOutputError`` for the tool the call's context names
    (``name`` when it names none)."""
    parse = _make_parser(args_type, drop_nulls)
    convert = _to_canonical_lists if tuples else _to_canonical

    def canonical(value: Any, run_ctx: Any) -> Any:
        try:
            return convert(value)
        except LosslessJsonError as exc:
            # The name the call was made under: the definition may be registered as a copy
            # under another name (``msgspec.structs.replace``), and the error must name that.
            called = getattr(run_ctx, "name", None)
            tool = called if type(called) is str else name
            raise ToolOutputError(tool, [f"value is not lossless JSON: {exc}"]) from None

    has_context = -1 in plan.positional or any(i == -1 for _, i in plan.keywords)

    def call(values: tuple[Any, ...], run_ctx: Any) -> Any:
        if plan.simple:
            return fn(*values, run_ctx) if has_context else fn(*values)
        positional = [run_ctx if i == -1 else values[i] for i in plan.positional]
        keywords = {k: run_ctx if i == -1 else values[i] for k, i in plan.keywords}
        return fn(*positional, **keywords)

    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(_annotated(fn)):

        async def execute_async(args: Any, run_ctx: Any) -> Any:
            return canonical(await call(parse(args), run_ctx), run_ctx)

        return execute_async

    def execute(args: Any, run_ctx: Any) -> Any:
        value = call(parse(args), run_ctx)
        if type(value) not in _PLAIN_RESULTS and inspect.isawaitable(value):
            # A plain function that returns an awaitable: an ``async def`` under a decorator
            # written as a plain ``def wrapper(*args, **kwargs)``. The pipeline awaits it, as
            # for any plain body; its value is then made canonical as an async body's is.
            return _canonical_later(value, run_ctx, canonical)
        return canonical(value, run_ctx)

    return execute


async def _canonical_later(
    awaitable: Any, run_ctx: Any, canonical: Callable[[Any, Any], Any]
) -> Any:
    return canonical(await awaitable, run_ctx)


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
        self,
        fn: Any,
        struct_name: str,
        fields: Any,
        plan: _Signature,
        parameters: Any,
        tuples: bool = True,
        *,
        name: str,
    ) -> None:
        self._fn = fn
        self._tuples = tuples
        self._name = name
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
                self._fn,
                args_type,
                self._plan,
                optional_null_dropper(self._parameters),
                self._tuples,
                name=self._name,
            )
            self._execute = execute
        return execute(args, run_ctx)
