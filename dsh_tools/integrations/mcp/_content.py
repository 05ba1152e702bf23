"""MCP results as model content: content blocks in the MCP shapes, and output-schema checks.

Content blocks keep the MCP wire shapes (``text``, ``image``/``audio`` with base64 ``data`` and
``mimeType``, ``resource`` with ``uri``/``mimeType``/``text`` or ``blob``, ``resource_link``),
reduced to the fields a model-facing adapter needs; the provider adapters turn them into each
provider's native form.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from jsonschema import exceptions as jsonschema_exceptions  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

from ...registry import compact_json

__all__ = ["content_blocks", "error_text", "output_validator", "render", "violation"]


class Validator(Protocol):
    """The part of a ``jsonschema`` validator used here."""

    def iter_errors(self, instance: Any) -> Iterator[Any]: ...


_LINK_FIELDS = ("uri", "name", "title", "description", "mimeType", "size")
_MAX_DETAIL = 200


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _block(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return _text(str(block.get("text", "")))
    if kind in ("image", "audio"):
        return {"type": kind, "data": block.get("data", ""), "mimeType": block.get("mimeType")}
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, Mapping) else {}
        inner: dict[str, Any] = {"uri": resource.get("uri", "")}
        if resource.get("mimeType") is not None:
            inner["mimeType"] = resource["mimeType"]
        if "text" in resource:
            inner["text"] = resource["text"]
        elif "blob" in resource:
            inner["blob"] = resource["blob"]
        return {"type": "resource", "resource": inner}
    if kind == "resource_link":
        link: dict[str, Any] = {"type": "resource_link"}
        for field in _LINK_FIELDS:
            if block.get(field) is not None:
                link[field] = block[field]
        link.setdefault("uri", "")
        link.setdefault("name", link["uri"])
        return link
    return _text(f"[unsupported MCP content: {kind}]")


def content_blocks(content: Any) -> list[dict[str, Any]]:
    """MCP content (wire form) as content blocks in the MCP shapes, unknown kinds as text."""
    return [_block(b) if isinstance(b, Mapping) else _block({}) for b in content]


def render(args: Any, value: Any) -> list[dict[str, Any]]:
    """``render`` of every MCP tool: the content blocks, or the structured content as JSON."""
    content = value["content"]
    if not content and "structured_content" in value:
        return [_text(compact_json(value["structured_content"]))]
    return content_blocks(content)


def error_text(content: Any) -> str:
    """The text of an error result's text blocks, one per line."""
    texts = [
        block["text"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and "text" in block
    ]
    return "\n".join(str(t) for t in texts)


def output_validator(schema: Any) -> Validator | None:
    """A validator for a tool's declared ``outputSchema`` (``None`` when it is not a valid
    JSON Schema; such a tool's structured content is passed on unchecked)."""
    if not isinstance(schema, Mapping):
        return None
    try:
        cls = validator_for(schema)
        cls.check_schema(schema)
        validator: Validator = cls(schema)
    except Exception:
        return None
    return validator


def _path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def violation(validator: Validator, instance: Any) -> str | None:
    """The first violation of ``instance`` as one line, ``at <path>: <message>``, or None."""
    try:
        error = jsonschema_exceptions.best_match(validator.iter_errors(instance))
    except Exception as exc:  # an unresolvable $ref, say: report it rather than crash
        return f"at $: the output schema cannot be applied ({type(exc).__name__})"
    if error is None:
        return None
    detail = " ".join(str(error.message).split())
    if len(detail) > _MAX_DETAIL:
        detail = detail[: _MAX_DETAIL - 3] + "..."
    return f"at {_path(error.absolute_path)}: {detail}"
