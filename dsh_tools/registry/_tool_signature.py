"""What ``@tool`` reads from a function: its evaluated annotations, the argument struct's fields
and how to call the body with them, and the parameters and output schemas msgspec generates.

A parameter annotated ``ToolRunContext`` receives the call's run context instead of an argument.
The registry sits below the pipeline that defines that class, so it is recognized by its
qualified name rather than imported.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ._foreign_constraints import constrained_parameter
from ._json_schema import assert_supported_json_schema
from ._lossless_check import is_json_value
from ._output_required import require_written_fields
from ._raw_schema import annotation_subset_schema
from ._schema_keys import describe_key_text
from ._shown_defaults import with_shown_defaults
from ._type_hooks import (
    SchemaHook,
    field_folded,
    pydantic_adapted,
    type_decode,
    type_encode,
)

_RUN_CONTEXT: Final = ("dsh_tools.registry._execution", "ToolRunContext")

_EMPTY = inspect.Parameter.empty


def _annotated(fn: Any) -> Any:
    """Where the annotations of ``fn`` live: a partial's function, a callable object's
    ``__call__``, or ``fn`` itself."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)) and callable(fn):
        return type(fn).__call__
    return fn


def _docstring(fn: Any) -> str:
    """The docstring that describes the tool: a partial's function's (``functools.partial``'s
    own is about partial application, no text for a model), and for a callable object its
    class's or else its ``__call__``'s, which also gives the signature."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    doc = inspect.getdoc(fn)
    if not doc:
        target = _annotated(fn)
        if target is not fn and inspect.isfunction(target):
            doc = inspect.getdoc(target)
    return doc or ""


def _caller_locals() -> Mapping[str, Any]:
    """The local names where the decorator was applied (two frames up: past ``tool`` or
    ``decorate``), for annotations that name classes defined inside a function."""
    frame = sys._getframe(2)
    return dict(frame.f_locals)


def _type_hints(fn: Any, owner: str, caller_locals: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluated annotations; string annotations (``from __future__ import annotations``)
    that name a class local to the defining function resolve through ``caller_locals``."""
    target = _annotated(fn)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except NameError:
        pass
    except Exception as exc:
        raise TypeError(f"{owner}: cannot resolve the type annotations: {exc}") from None
    try:
        return typing.get_type_hints(target, localns=dict(caller_locals), include_extras=True)
    except Exception as exc:
        raise TypeError(f"{owner}: cannot resolve the type annotations: {exc}") from None


def _is_run_context(hint: Any) -> bool:
    """``ToolRunContext``, also inside ``Annotated`` or as ``ToolRunContext | None``."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(members) == 1:
            hint = members[0]
    return isinstance(hint, type) and (hint.__module__, hint.__qualname__) == _RUN_CONTEXT


_SUPPORTED = (
    "a tool's types are JSON values, msgspec Structs, dataclasses, attrs classes, TypedDicts, "
    "NamedTuples, Enums, Literals, datetime, date, time, UUID, Decimal, bytes, pathlib paths, "
    "pydantic models and their containers, optionals and unions"
)


_Generated = typing.TypeVar("_Generated")


def _generated(
    generate: typing.Callable[[Any, SchemaHook], _Generated],
    hint: Any,
    mode: typing.Literal["validation", "serialization"] = "validation",
) -> tuple[_Generated, SchemaHook]:
    """``generate(hint, hook)`` and its hook; when msgspec cannot write a field's default (a
    path, a model), the same for the twins that show it (``with_shown_defaults``). Only such
    a failure pays for the walk of the type that finds them."""
    hook = SchemaHook(mode)
    try:
        return generate(hint, hook), hook
    except (TypeError, ValueError):
        shown = with_shown_defaults(hint)
        if shown is hint:
            raise
    hook = SchemaHook(mode)
    return generate(shown, hook), hook


def _check_schema_type(owner: str, role: str, hint: Any) -> None:
    """Fail now, naming the parameter, for an annotation msgspec cannot describe."""
    try:
        _generated(lambda shown, hook: msgspec.json.schema(shown, schema_hook=hook), hint)
    except (TypeError, ValueError, ImportError) as exc:
        # ImportError: a pydantic type whose validator needs a package that is missing
        # (``EmailStr`` without ``email-validator``).
        reason = str(exc).strip().splitlines()[-1]
        if reason.endswith("is not supported"):
            # Name what is: a pydantic model, say, is a class msgspec does not describe.
            reason += f" ({_SUPPORTED})"
        raise TypeError(
            f"{owner}: {role} has an unsupported annotation {hint!r}: {reason}"
        ) from None
    except (NameError, AttributeError, SyntaxError) as exc:
        # msgspec evaluates the string annotations of the classes inside ``hint`` in their
        # module's globals (and the class body): a name only the defining function's locals
        # hold (a class defined there, recursive or naming a sibling) is not found there.
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise TypeError(
            f"{owner}: {role} has an annotation {hint!r} that names a type msgspec cannot "
            f"resolve: {reason} (a class's string annotations are read in its module's "
            "globals, which do not hold classes defined inside a function)"
        ) from None


def _texts_apart(hint: Any) -> tuple[Any, list[str]]:
    """``hint`` without the plain strings of its ``Annotated``, and those strings; also for the
    members of a union (``Annotated[str, "text"] | None``), where they describe the whole."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        texts = [extra for extra in extras if type(extra) is str]
        if not texts:
            return hint, []
        if any(isinstance(extra, msgspec.Meta) and extra.description for extra in extras):
            return hint, []  # a Meta description is the one kept
        rest = [extra for extra in extras if type(extra) is not str]
        return (typing.Annotated[(base, *rest)] if rest else base), texts
    if origin is typing.Union or origin is types.UnionType:
        members = [_member_apart(member) for member in typing.get_args(hint)]
        # As on a plain parameter, a Meta description wins over the texts.
        texts = [text for _, meta_texts, _ in members for text in meta_texts] or [
            text for _, _, plain_texts in members for text in plain_texts
        ]
        if not texts:
            return hint, []
        return typing.Union[tuple(member for member, _, _ in members)], texts  # noqa: UP007
    return hint, []


def _member_apart(member: Any) -> tuple[Any, list[str], list[str]]:
    """A union member without its descriptions, its ``msgspec.Meta`` description and its plain
    texts: either describes the whole parameter, so both go to the property, where the model
    reads a parameter's description (and the docstring's would otherwise sit), not into one
    branch of its ``anyOf``."""
    if typing.get_origin(member) is not typing.Annotated:
        return member, [], []
    base, *extras = typing.get_args(member)
    meta_texts: list[str] = []
    texts: list[str] = []
    rest: list[Any] = []
    for extra in extras:
        if type(extra) is str:
            texts.append(extra)
        elif isinstance(extra, msgspec.Meta) and extra.description:
            meta_texts.append(extra.description)
            kept = _meta_without_description(extra)
            if kept is not None:
                rest.append(kept)
        else:
            rest.append(extra)
    if not meta_texts and not texts:
        return member, [], []
    return (typing.Annotated[(base, *rest)] if rest else base), meta_texts, texts


def _meta_without_description(meta: msgspec.Meta) -> msgspec.Meta | None:
    """``meta`` with its constraints and other annotations but no description (``None`` when
    nothing else is set)."""
    names = inspect.signature(msgspec.Meta).parameters
    kept = {
        name: getattr(meta, name)
        for name in names
        if name != "description" and getattr(meta, name) is not None
    }
    return msgspec.Meta(**kept) if kept else None


def _text_described(hint: Any) -> Any:
    """``Annotated[T, "text"]`` (or ``Annotated[T, "text"] | None``) with the text as the
    parameter's description. msgspec ignores a plain string there, so the description an author
    wrote (as other tool libraries read it) would vanish without a word; a ``msgspec.Meta``
    description, when given, is the one kept."""
    bare, texts = _texts_apart(hint)
    if not texts:
        return hint
    return typing.Annotated[(bare, msgspec.Meta(description="\n\n".join(texts)))]


def _check_default(owner: str, pname: str, hint: Any, default: Any) -> None:
    """Fail now for a default the parameter's own annotation refuses (``n: int = None``,
    ``level: Annotated[int, Meta(ge=0)] = -1``): the schema would show the model a default it
    may not send, and an omitted argument would reach the body as a value of another type.
    ``msgspec.UNSET`` is no value but the absence of one, as in a Struct's field: it stands for
    no default shown, and an omitted argument reaches the body as ``UNSET``."""
    if default is msgspec.UNSET:
        return
    try:
        text = msgspec.json.encode(default, enc_hook=type_encode)
        lossless = is_json_value(msgspec.to_builtins(default, str_keys=True, enc_hook=type_encode))
    except (TypeError, ValueError, OverflowError):
        return  # not JSON: the schema's generation names the problem
    if not lossless:
        # JSON text cannot carry it (``math.inf`` is written ``null``): what refuses it is the
        # schema's check of its default, which names the value, not the annotation.
        return
    try:
        msgspec.json.decode(text, type=hint, strict=True, dec_hook=type_decode)
    except msgspec.ValidationError as exc:
        reason = str(exc).replace("`$", "`default")
        raise TypeError(
            f"{owner}: parameter {pname!r} has a default {default!r} that its annotation "
            f"refuses: {reason}"
        ) from None


def _field_default(default: Any) -> Any:
    """A default the body could change (a list, a dict, a Struct or dataclass instance...)
    becomes a factory of deep copies, so one call can never change the next one's; a value
    ``deepcopy`` gives back as it is (a number, a string, an Enum member, a tuple of them) is
    shared. msgspec refuses a mutable Struct default outright, which would make a natural
    ``place: Place = Place(city="Oslo")`` an error."""
    try:
        copied = copy.deepcopy(default)
    except Exception:
        return default  # msgspec judges it, and names the parameter if it refuses
    if copied is default:
        return default
    return msgspec.field(default_factory=functools.partial(copy.deepcopy, default))


class _Signature(msgspec.Struct, frozen=True):
    """How to call the body: which struct fields go where, and where the run context goes."""

    positional: tuple[int, ...]  # struct field index per positional slot; -1 is the context
    keywords: tuple[tuple[str, int], ...]  # (keyword, field index or -1)
    simple: bool  # every field positional, in order, and the context (if any) last


def _signature_plan(
    fn: Any, owner: str, hints: Mapping[str, Any]
) -> tuple[list[tuple[str, Any, Any]], _Signature, dict[str, Any]]:
    """The argument struct's fields, how to call the body, and the parameters' defaults as
    written (a field's own default may be a factory of copies)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{owner}: cannot read the signature: {exc}") from None
    fields: list[tuple[str, Any, Any]] = []
    defaults: dict[str, Any] = {}
    positional: list[int] = []
    keywords: list[tuple[str, int]] = []
    context_seen = False
    for parameter in signature.parameters.values():
        pname = parameter.name
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"{owner}: parameter {pname!r} is variadic; a tool's parameters must be named"
            )
        if pname not in hints:
            if pname in ("self", "cls") and not fields and not positional and not keywords:
                # ``@tool`` on a method in a class body sees the plain function.
                raise TypeError(
                    f"{owner}: parameter {pname!r} has no type annotation (for a method, build "
                    "the tool from the bound method: tool(instance.method))"
                )
            raise TypeError(f"{owner}: parameter {pname!r} has no type annotation")
        hint = hints[pname]
        if _is_run_context(hint):
            if context_seen:
                raise TypeError(f"{owner}: only one parameter may be annotated ToolRunContext")
            context_seen = True
            index = -1
        else:
            if pname.startswith("_"):
                # Private by convention, and dunder names would shadow the argument struct's.
                raise TypeError(
                    f"{owner}: parameter {pname!r} uses a reserved name (names starting with "
                    "'_' are not tool arguments; annotate a context parameter ToolRunContext)"
                )
            hint, default = field_folded(hint, parameter.default)
            hint = pydantic_adapted(hint)
            hint, default = constrained_parameter(owner, pname, hint, default)
            hint = _text_described(hint)
            _check_schema_type(owner, f"parameter {pname!r}", hint)
            index = len(fields)
            if default is _EMPTY:
                fields.append((pname, hint, msgspec.NODEFAULT))
            else:
                _check_default(owner, pname, hint, default)
                fields.append((pname, hint, _field_default(default)))
                defaults[pname] = default
        if parameter.kind is parameter.KEYWORD_ONLY:
            keywords.append((pname, index))
        else:
            positional.append(index)
    simple = not keywords and [i for i in positional if i >= 0] == list(range(len(fields)))
    simple = simple and (-1 not in positional or positional[-1] == -1)
    return fields, _Signature(tuple(positional), tuple(keywords), simple), defaults


def _tuples_as_lists(value: Any) -> Any:
    """``value`` with its tuples as the lists JSON arrays are (``msgspec.to_builtins`` and
    msgspec's schemas keep a tuple as it is)."""
    kind = type(value)
    if kind is tuple or kind is list:
        return [_tuples_as_lists(item) for item in value]
    if kind is dict:
        return {key: _tuples_as_lists(item) for key, item in value.items()}
    return value


def _schema_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its tuple defaults (``size: tuple[int, int] = (640, 480)``, a
    dataclass field's) as JSON arrays; a default too deep to convert stays for the schema's
    check to name."""
    try:
        converted: dict[str, Any] = _tuples_as_lists(schema)
    except RecursionError:
        return schema
    return converted


def _parameters_schema(
    owner: str, args_type: Any, param_docs: Mapping[str, str], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The model-facing parameters: the argument struct's object schema at the root, the other
    generated shapes under ``$defs``; docstring descriptions and every default on the
    properties (msgspec leaves out the default of a field built by a factory)."""
    ((ref,), components), hook = _generated(
        lambda shown, hook: msgspec.json.schema_components(
            (shown,), ref_template="#/$defs/{name}", schema_hook=hook
        ),
        args_type,
    )
    hook.merge_into(components, owner)
    root_name = ref["$ref"].rsplit("/", 1)[1]
    root = dict(components.pop(root_name))
    root.pop("title", None)
    properties = {name: dict(schema) for name, schema in root.get("properties", {}).items()}
    for name, text in param_docs.items():
        if name in properties and text and "description" not in properties[name]:
            properties[name] = {"description": text, **properties[name]}
    for name, default in defaults.items():
        # ``UNSET`` is the absence of a value (``_check_default``): no default to show.
        if default is msgspec.UNSET:
            continue
        if name in properties and "default" not in properties[name]:
            try:
                shown = msgspec.to_builtins(default, str_keys=True, enc_hook=type_encode)
            except TypeError as exc:
                raise TypeError(
                    f"parameter {name!r} has a default {default!r} that is not JSON data: {exc}"
                ) from None
            properties[name]["default"] = shown
    root["properties"] = properties
    describe_key_text(args_type, root, components)
    if not root.get("required"):
        root.pop("required", None)
    if components:
        root["$defs"] = components
    return _schema_defaults(root)


def _output_schema(owner: str, hints: Mapping[str, Any], returns_doc: str) -> tuple[Any, Any, Any]:
    """(return type, output schema in the enforced subset, the annotation's own schema). The
    subset is what the output contract checks; the annotation's schema, which it is projected
    from (unions, typed maps and recursive shapes included), is what a program is shown."""
    if "return" not in hints:
        schema = {"description": returns_doc} if returns_doc else {}
        return typing.Any, schema, schema
    returned = pydantic_adapted(hints["return"])
    _check_schema_type(owner, "the return annotation", returned)
    generated, hook = _generated(
        lambda shown, hook: msgspec.json.schema(shown, schema_hook=hook), returned, "serialization"
    )
    if hook.definitions:
        definitions = generated.setdefault("$defs", {})
        hook.merge_into(definitions, owner)
    require_written_fields(generated, returned)
    declared = _schema_defaults(generated)
    schema = annotation_subset_schema(declared)
    if returns_doc:
        for described in (schema, declared):
            described.setdefault("description", returns_doc)
    assert_supported_json_schema(schema)
    return returned, schema, declared
