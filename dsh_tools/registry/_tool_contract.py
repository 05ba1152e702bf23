"""The registry's per-definition contract, as the pipeline calls it: ``check_registration``
(the ordered registration checks), ``project_schema`` (the model-facing projection),
``normalize_output`` (canonical success normalization) and ``classify`` (the concurrency
classifier)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from msgspec import UNSET

from ..actors import FrozenList, JsonSchemaError, ToolOutputError, message_of
from ..actors._config import finite_number
from ._definition import ToolDefinition, ToolOutput, shape_problem
from ._json_schema import assert_supported_json_schema
from ._lossless import INT_MAX, INT_MIN, LosslessJsonError
from ._lossless_copy import snapshot_json, thaw
from ._schema_plan import _P_SCALAR, _PLAN_CACHE, prepare_schema
from ._schema_validate import plainly_valid, validate_plan

__all__ = ["check_registration", "classify", "normalize_output", "project_schema"]

_RUN_CODE = "run_code"


def _positive_finite(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and finite_number(value) and value > 0


def check_registration(defn: Any, *, reserve_run_code: bool) -> None:
    """The registration checks, in order; the first failure raises and nothing is registered.

    0. ``defn`` is a ``ToolDefinition`` with a ``str`` name, a ``str`` description, ``dict``
       parameters, a callable ``execute`` and optional callbacks that are callable and take
       the arguments they are given (``TypeError``); the name is not empty and the name and
       the description are valid Unicode text, without lone surrogates (``ValueError``);
    1. ``output`` is a ``ToolOutput`` with a callable ``render`` and an absent or callable
       ``presentation_meta`` (``TypeError``: ``tool "<name>" must declare output { schema,
       render, presentation_meta? }``);
    2. ``output.schema`` is in the supported subset (``JsonSchemaError``);
    3. ``timeout_ms`` is absent or a positive finite number (``TypeError``);
    4. with ``reserve_run_code`` (presentation mode ``code`` or ``both``) the name is not
       ``run_code`` (``ValueError``).

    Duplicate names are the registry's concern; what raw ``parameters`` hold is not checked
    here (a lossy one fails at projection).
    """
    if not isinstance(defn, ToolDefinition):
        raise TypeError(
            "register() accepts only a ToolDefinition (build one with define_tool() or "
            f"ToolDefinition(...)), got {type(defn).__name__}"
        )
    name = defn.name
    if type(name) is not str:
        raise TypeError(f"tool name must be a non-empty str, got {type(name).__name__}")
    if not name:
        raise ValueError("tool name must be a non-empty str, got ''")
    _check_text(name, f"tool name {name!r}")
    if type(defn.description) is not str:
        raise TypeError(f'tool "{name}" description must be a str')
    _check_text(defn.description, f'tool "{name}" description')
    if not isinstance(defn.parameters, dict):
        # Its content is the tool's own affair (checked at projection), but a model is always
        # given an object schema: anything else would reach every provider request as is.
        raise TypeError(
            f'tool "{name}" parameters must be a JSON Schema object (a dict), '
            f"got {type(defn.parameters).__name__}"
        )
    if not callable(defn.execute):
        raise TypeError(f'tool "{name}" execute must be callable')
    for label in ("is_concurrency_safe", "finalize_content", "present_call", "present_result"):
        callback = getattr(defn, label)
        if callback is None:
            continue
        if not callable(callback):
            raise TypeError(f'tool "{name}" {label} must be callable or None')
        if (problem := shape_problem(label, callback)) is not None:
            raise TypeError(f'tool "{name}" {problem}')
    output = defn.output
    if (
        not isinstance(output, ToolOutput)
        or not callable(output.render)
        or (output.presentation_meta is not None and not callable(output.presentation_meta))
    ):
        raise TypeError(
            f'tool "{name}" must declare output {{ schema, render, presentation_meta? }}'
        )
    for label, callback in (
        ("output.render", output.render),
        ("output.presentation_meta", output.presentation_meta),
    ):
        if callback is not None and (problem := shape_problem(label, callback)) is not None:
            raise TypeError(f'tool "{name}" {problem}')
    try:
        assert_supported_json_schema(output.schema)
    except JsonSchemaError as exc:
        # The violations' text is pinned and their paths do not say which tool.
        exc.add_note(f'tool "{name}": in its output.schema')
        raise
    if defn.timeout_ms is not None and not _positive_finite(defn.timeout_ms):
        raise TypeError(f'tool "{name}" timeout_ms must be a positive finite number')
    if reserve_run_code and name == _RUN_CODE:
        raise ValueError(
            'tool name "run_code" is reserved for the Code Mode presentation transport and '
            "cannot be registered or shadowed"
        )


def _check_text(text: str, what: str) -> None:
    """A name or description goes into every prompt, SDK and provider request as UTF-8 JSON:
    one that cannot be encoded (a lone surrogate) would break all of them, not this tool."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} holds a lone surrogate at index {exc.start}; it must be valid Unicode text"
        ) from None


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
        # An integer in range, a tool's usual value, is its own snapshot.
        frozen = (
            value if type(value) is int and INT_MIN <= value <= INT_MAX else snapshot_json(value)
        )
    except LosslessJsonError as exc:
        _close_if_coroutine(value)
        raise ToolOutputError(defn.name, [f"value is not lossless JSON: {exc}"]) from None
    except Exception as exc:
        raise ToolOutputError(defn.name, [f"value snapshot failed: {message_of(exc)}"]) from None
    schema = output.schema
    cached = _PLAN_CACHE.get(id(schema))  # ``prepare_schema``'s cache, read inline
    plan = cached[1] if cached is not None and cached[0] is schema else prepare_schema(schema)
    if not (plan[0] == _P_SCALAR and plainly_valid(plan, frozen)):  # else no walk is needed
        violations = validate_plan(plan, frozen, "value")
        if violations:
            raise ToolOutputError(defn.name, violations)
    try:
        blocks = output.render(arguments, frozen)
    except (Exception, asyncio.CancelledError) as exc:
        raise ToolOutputError(defn.name, [f"output.render failed: {message_of(exc)}"]) from None
    try:
        # A list, as renderers return, is snapshotted here; ``_snapshot_content`` takes the rest.
        if type(blocks) is list:
            content = snapshot_json(blocks, "content")
        else:
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
