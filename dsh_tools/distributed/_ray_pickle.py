"""How a placed body travels to Ray: pickled by a cloudpickle that can carry the msgspec-typed
classes a typed body converts its arguments to, when they travel by value.

Ray pickles a body with cloudpickle, which sends a class by value (its ``__dict__`` rebuilt on
the worker) when the worker cannot import it: a class of ``__main__``, of a function, or of a
module registered with ``register_pickle_by_value``. Three things msgspec does break that:

- once msgspec converted to a dataclass, an ``Enum``, a ``TypedDict`` or a ``NamedTuple``, it
  caches its compiled type information in the class's ``__msgspec_cache__``, which cannot be
  pickled (the worker compiles its own on first use, so it is left behind);
- a ``msgspec.Struct`` class is laid out by its metaclass from the class body, so a class
  rebuilt from an empty body plus attributes has no fields; it is rebuilt here by defining it
  again, with its fields, defaults and options;
- ``msgspec.Meta`` (a constraint inside ``Annotated``) has no pickle support; it is rebuilt from
  its arguments.

String annotations (``from __future__ import annotations``) of such a class name things of the
module that defined it, which the worker does not have: they travel evaluated when they can be.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import types
import typing
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from ..actors import message_of

__all__ = ["ShippedBody", "unsendable"]

# Attributes of a Struct class that its metaclass derives from the class body (or that are its
# fields' slots): the rebuilt class derives them again.
_STRUCT_DERIVED = frozenset(
    {
        "__annotations__",
        "__dict__",
        "__module__",
        "__msgspec_cache__",
        "__qualname__",
        "__slots__",
        "__weakref__",
    }
)

_SENT: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
"""Here: the identity each Struct class sent by value travels with."""
_REBUILT: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()
"""On a worker: the class rebuilt for each identity, so that a class sent twice (with two
bodies, or in two calls) is one class there, as cloudpickle keeps the other classes it sends."""

_STRUCT_OPTIONS = (
    "array_like",
    "cache_hash",
    "dict",
    "eq",
    "forbid_unknown_fields",
    "frozen",
    "gc",
    "omit_defaults",
    "order",
    "repr_omit_defaults",
    "weakref",
)


class ShippedBody:
    """A placed body as it travels to Ray (captured by a task's function, or an actor's
    constructor argument): its pickle is this module's, taken whenever Ray pickles it, so a
    body that cannot be pickled still fails the call that sends it."""

    __slots__ = ("_body",)

    def __init__(self, body: Callable[[Any, Any], Any]) -> None:
        self._body = body

    def __call__(self, args: Any, run_ctx: Any) -> Any:
        return self._body(args, run_ctx)

    def __reduce__(self) -> tuple[Any, ...]:
        return _loads, (dumps(self._body),)

    def unsendable(self, exc: BaseException) -> str:
        """Why sending the body failed (see ``unsendable``)."""
        return unsendable(self._body, exc)


def unsendable(obj: Any, exc: BaseException) -> str:
    """Why sending ``obj`` to Ray failed with ``exc``, for its caller: the pickler's own
    message (Ray wraps it in a report of many lines headed by its internal wrapper's name), and
    where the objects that cannot be pickled are, as Ray's ``inspect_serializability`` finds
    them (``cannot pickle '_thread.lock' object (in build: lock)``)."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    lines = message_of(root).strip().splitlines()
    text = lines[0] if lines else type(root).__name__
    found: list[str] = []
    with contextlib.suppress(Exception):  # a report of what to fix, never a new failure
        from ray.util import inspect_serializability

        _, failures = inspect_serializability(obj, print_file=io.StringIO())
        for failure in failures:
            # The name its owner (a function, an object) holds it by: the last step of
            # ``path`` (newer Ray), or ``name`` (older).
            path = getattr(failure, "path", None) or (getattr(failure, "name", "?"),)
            owner = failure.parent
            label = getattr(owner, "__name__", None) or type(owner).__name__
            found.append(f"in {label}: {path[-1]}")
    return f"{text} ({'; '.join(sorted(found))})" if found else text


def _loads(payload: bytes) -> Callable[[Any, Any], Any]:
    from ray import cloudpickle

    body: Callable[[Any, Any], Any] = cloudpickle.loads(payload)
    return body


def dumps(obj: Any) -> bytes:
    """``obj`` pickled by Ray's cloudpickle, with the msgspec repairs of the module docstring."""
    buffer = io.BytesIO()
    _pickler()(buffer).dump(obj)
    return buffer.getvalue()


@functools.cache
def _pickler() -> Any:
    # Built on first use: Ray (and its cloudpickle) is an optional dependency, imported only
    # once a body is actually sent. Subclassing it keeps its by-value registry and reducers.
    from ray import cloudpickle

    class BodyPickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, msgspec.Meta):
                return _meta, (_meta_arguments(obj),)
            base: Any = super()  # cloudpickle's reducers are untyped
            reduced = base.reducer_override(obj)
            if not isinstance(obj, type) or not _by_value(reduced):
                return reduced
            if issubclass(obj, msgspec.Struct):
                return _struct_reduce(obj)
            func, args, (state, slots), items, pairs, setter = reduced
            state = dict(state)
            state.pop("__msgspec_cache__", None)
            if "__annotations__" in state:
                state["__annotations__"] = _evaluated_annotations(obj)
            return func, args, (state, slots), items, pairs, setter

    return BodyPickler


def _by_value(reduced: Any) -> bool:
    """Whether ``reduced`` is cloudpickle's by-value class reduction: (skeleton, arguments,
    (class dict, slot state), None, None, state setter)."""
    return (
        type(reduced) is tuple
        and len(reduced) == 6
        and type(reduced[2]) is tuple
        and len(reduced[2]) == 2
        and type(reduced[2][0]) is dict
    )


def _evaluated_annotations(cls: type) -> dict[str, Any]:
    """The class's own annotations, evaluated where the class was defined (as they stand when
    one cannot be: the worker then fails the same way msgspec would here)."""
    own: dict[str, Any] = inspect.get_annotations(cls)
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return own
    return {name: hints.get(name, value) for name, value in own.items()}


def _meta_arguments(meta: msgspec.Meta) -> dict[str, Any]:
    names = (
        "gt",
        "ge",
        "lt",
        "le",
        "multiple_of",
        "pattern",
        "min_length",
        "max_length",
        "tz",
        "title",
        "description",
        "examples",
        "extra_json_schema",
        "extra",
    )
    return {name: getattr(meta, name) for name in names if getattr(meta, name) is not None}


def _meta(arguments: dict[str, Any]) -> msgspec.Meta:
    return msgspec.Meta(**arguments)


def _struct_reduce(cls: type[msgspec.Struct]) -> tuple[Any, ...]:
    """Define the Struct class again on the worker: its fields (types as ``Any`` at first),
    defaults and options in the arguments; its annotations, methods and class attributes in
    the state, set once the class exists, since they may refer to the class itself."""
    fields: tuple[str, ...] = cls.__struct_fields__
    encoded: tuple[str, ...] = cls.__struct_encode_fields__
    defaults: tuple[Any, ...] = cls.__struct_defaults__
    default_of = dict(zip(fields[len(fields) - len(defaults) :], defaults, strict=True))
    own = [name for name in inspect.get_annotations(cls) if name in fields]
    own_defaults: dict[str, Any] = {}
    for name in own:
        default = default_of.get(name, msgspec.NODEFAULT)
        if default is msgspec.NODEFAULT:
            continue
        # A ``default_factory`` (or a mutable default such as ``[]``) is kept as msgspec's
        # ``Factory``, a type msgspec does not export: recognized by name, sent as its factory.
        factory = getattr(default, "factory", None)
        if type(default).__name__ == "Factory" and factory is not None:
            own_defaults[name] = ("factory", factory)
        else:
            own_defaults[name] = ("value", default)
    config = cls.__struct_config__
    options: dict[str, Any] = {option: getattr(config, option) for option in _STRUCT_OPTIONS}
    if config.tag is not None:
        options["tag"] = config.tag
        options["tag_field"] = config.tag_field
    options["rename"] = dict(zip(fields, encoded, strict=True))
    positional = set(cls.__match_args__)
    options["kw_only"] = any(name not in positional for name in own)
    state = {name: value for name, value in cls.__dict__.items() if name not in _STRUCT_DERIVED}
    for name in own:
        state.pop(name, None)  # the field's slot
    state["__annotations__"] = _evaluated_annotations(cls)
    bases = cls.__dict__.get("__orig_bases__", cls.__bases__)
    shape = (own, own_defaults, "__post_init__" in cls.__dict__)
    identity = _SENT.setdefault(cls, uuid.uuid4().hex)
    return (
        _struct_skeleton,
        (
            type(cls),
            cls.__name__,
            cls.__qualname__,
            cls.__module__,
            bases,
            shape,
            options,
            identity,
        ),
        state,
        None,
        None,
        _struct_setstate,
    )


def _struct_skeleton(
    metaclass: type,
    name: str,
    qualname: str,
    module: str,
    bases: tuple[Any, ...],
    shape: tuple[list[str], dict[str, tuple[str, Any]], bool],
    options: dict[str, Any],
    identity: str,
) -> type:
    known = _REBUILT.get(identity)
    if known is not None:  # sent before: the one class, as cloudpickle keeps a class it sends
        return known
    own, own_defaults, has_post_init = shape
    built: list[type] = []

    def post_init(self: Any) -> Any:
        return built[0].__dict__["__post_init__"](self)

    def body(namespace: dict[str, Any]) -> None:
        namespace["__module__"] = module
        namespace["__qualname__"] = qualname
        namespace["__annotations__"] = dict.fromkeys(own, Any)
        for field, (kind, value) in own_defaults.items():
            if kind == "factory":
                namespace[field] = msgspec.field(default_factory=value)
            else:
                namespace[field] = value
        if has_post_init:
            # msgspec reads ``__post_init__`` once, when the class is made, but the function
            # may refer to the class, so it can only arrive with the state: this stand-in
            # calls whatever the state set.
            namespace["__post_init__"] = post_init

    cls = types.new_class(name, bases, {"metaclass": metaclass, **options}, body)
    built.append(cls)
    _REBUILT[identity] = cls
    return cls


def _struct_setstate(cls: type, state: dict[str, Any]) -> type:
    for name, value in state.items():
        setattr(cls, name, value)
    return cls
