"""Content blocks of results and contexts, sorted into what providers can carry.

Results and contexts hold MCP-shaped blocks: ``text``, ``image`` and ``audio`` (base64 ``data``
with a ``mimeType``), ``resource`` (an embedded ``text`` or base64 ``blob`` with a ``uri``) and
``resource_link``. Each provider adapter takes the neutral parts made here and writes its own
native form; what a provider cannot take becomes a ``Text`` placeholder that says what was left
out, so the model knows something was there. Media data is checked here (strict base64, not
empty) and an image sent as the type its bytes are: a provider refuses a whole request for one
bad attachment, with an error that names neither the call nor the block.

This module also reads provider responses whether they are SDK objects (attributes) or plain
dicts (keys), so the adapters need no provider SDK at run time.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

from ..actors import BatchOutcome
from ..registry import compact_json
from ._prompt import model_call_id

__all__ = [
    "ImageLimit",
    "Media",
    "Part",
    "Text",
    "call_ids_of",
    "check_outcome",
    "context_parts",
    "field",
    "fitting",
    "media_placeholder",
    "parts_of",
]

MediaKind = Literal["image", "audio", "file"]


class Text(NamedTuple):
    """Text the model reads."""

    text: str


class Media(NamedTuple):
    """Base64 data a provider may take natively: an image, audio, or a file such as a PDF.
    ``size`` is the byte size of what ``data`` holds; ``pixels`` an image's (width, height)
    as its header gives them (``None``: not an image, or a header that does not say), both
    read as the data is decoded and checked (``parts_of``)."""

    kind: MediaKind
    mime_type: str
    data: str
    name: str  # the resource URI or a generated name, for file names and placeholders
    size: int = 0
    pixels: tuple[int, int] | None = None


Part = Text | Media

# Spellings seen in the wild for the image types every provider takes.
_MIME_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
}


# What a base64 text may hold besides its alphabet: line breaks and spaces, which encoders that
# wrap lines write and which a strict decoder refuses (dropped before sending).
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=]")
_FOREIGN = re.compile(r"[^A-Za-z0-9+/=\t\n\r ]")
_WRAPPING = re.compile(r"[\t\n\r ]+")


def _decoded(data: str) -> tuple[str, bytes | str]:
    """``data`` without line wrapping, and its bytes, or what makes it not base64.

    A provider refuses the whole request for one attachment it cannot decode, with an error
    that names neither the call nor the block; caught here, the model is told instead."""
    if _NOT_BASE64.search(data) is not None:
        bad = _FOREIGN.search(data)
        if bad is not None:
            return data, f"{bad.group()!r} at offset {bad.start()} is not a base64 character"
        data = _WRAPPING.sub("", data)
    try:
        return data, binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error as exc:
        return data, str(exc)


_PROVIDER_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types every provider takes, which ``_image_type`` recognizes by their bytes."""


_PDF_HEADER = b"%PDF-"
_PDF_HEADER_WITHIN = 1024
"""PDF readers find the header within the first kilobyte (some writers put bytes before it)."""


def _image_type(data: bytes) -> str | None:
    """The image type ``data`` starts as, of those every provider takes; ``None`` for another."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _media(kind: MediaKind, mime_type: str, data: str, name: str) -> Part:
    """The media, or what the model reads instead when its data is not base64. An image is
    sent as the type its bytes are: tools (screenshot servers, say) often call a JPEG
    ``image/png``, and the Anthropic API refuses an image whose bytes are not its stated type.
    Bytes of none of the types providers take, under one of those types (an HTML error page a
    server fetched in place of the image), are not sent, nor is a PDF without a PDF header:
    the provider would refuse the whole request, naming neither the call nor the block."""
    data, decoded = _decoded(data)
    if isinstance(decoded, str):
        return Text(
            f"[{kind} {name} ({mime_type}) omitted: its data is not valid base64: {decoded}]"
        )
    if not decoded:
        return Text(f"[{kind} {name} ({mime_type}) omitted: its data is empty]")
    if kind == "image":
        actual = _image_type(decoded)
        if actual is None and mime_type in _PROVIDER_IMAGE_TYPES:
            return Text(
                f"[{kind} {name} ({mime_type}) omitted: its data is not a PNG, JPEG, GIF or "
                "WebP image]"
            )
        mime_type = actual or mime_type
    if mime_type == "application/pdf" and _PDF_HEADER not in decoded[:_PDF_HEADER_WITHIN]:
        return Text(f"[{kind} {name} ({mime_type}) omitted: its data is not a PDF document]")
    pixels = _image_size(mime_type, decoded) if kind == "image" else None
    return Media(kind, mime_type, data, name, len(decoded), pixels)


def field(obj: Any, key: str) -> Any:
    """``obj[key]`` for a mapping, ``obj.key`` for an SDK object; ``None`` when absent."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _mime(block: Mapping[str, Any]) -> str:
    value = block.get("mimeType")
    if type(value) is not str or not value:
        return "application/octet-stream"
    lowered = value.lower()
    return _MIME_ALIASES.get(lowered, lowered)


def _resource_parts(block: Mapping[str, Any], index: int) -> Part:
    resource = block.get("resource")
    if not isinstance(resource, Mapping):
        return Text("[resource block without a resource object omitted]")
    uri = resource.get("uri")
    name = uri if type(uri) is str and uri else f"resource-{index + 1}"
    text = resource.get("text")
    if type(text) is str:
        return Text(f"[resource {name}]\n{text}")
    blob = resource.get("blob")
    if type(blob) is not str:
        return Text(f"[resource {name} without text or blob omitted]")
    mime = _mime(resource)
    if mime.startswith("image/"):
        return _media("image", mime, blob, name)
    if mime.startswith("audio/"):
        return _media("audio", mime, blob, name)
    return _media("file", mime, blob, name)


def _link_text(block: Mapping[str, Any]) -> Text:
    uri = block.get("uri")
    name = block.get("name")
    words = [f"[resource link: {name if type(name) is str and name else uri}"]
    if type(uri) is str and uri != name:
        words.append(f" <{uri}>")
    mime = block.get("mimeType")
    if type(mime) is str and mime:
        words.append(f" ({mime})")
    description = block.get("description")
    if type(description) is str and description:
        words.append(f": {description}")
    words.append("]")
    return Text("".join(words))


def parts_of(blocks: Iterable[Any]) -> list[Part]:
    """The neutral parts of MCP content blocks, in order."""
    parts: list[Part] = []
    for index, block in enumerate(blocks):
        if isinstance(block, str):
            parts.append(Text(block))
            continue
        if not isinstance(block, Mapping):
            parts.append(Text(f"[content item of type {type(block).__name__} omitted]"))
            continue
        kind = block.get("type")
        if kind == "text" and type(block.get("text")) is str:
            parts.append(Text(block["text"]))
        elif kind in ("image", "audio"):
            data = block.get("data")
            if type(data) is str and data:
                parts.append(_media(kind, _mime(block), data, f"{kind}-{index + 1}"))
            else:
                parts.append(Text(f"[{kind} block without base64 data omitted]"))
        elif kind == "resource":
            parts.append(_resource_parts(block, index))
        elif kind == "resource_link":
            parts.append(_link_text(block))
        else:
            label = kind if type(kind) is str else "unknown"
            parts.append(Text(f'[content block of type "{label}" omitted]'))
    return parts


class ImageLimit(NamedTuple):
    """The largest image a provider takes: ``most`` bytes of the image itself, or of its
    base64 text when ``encoded`` (``says`` is how the placeholder states it), and ``side``
    pixels a side at most (``None``: any)."""

    provider: str
    most: int
    encoded: bool
    says: str
    side: int | None = None


_JPEG_FRAMES: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""The JPEG start-of-frame markers, which give the image's size (not DHT, JPG, DAC)."""
_JPEG_SEGMENTS_AT_MOST: Final = 1024


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, found by walking its segments."""
    at = 2
    for _ in range(_JPEG_SEGMENTS_AT_MOST):
        head = data[at : at + 9]
        if len(head) < 4 or head[0] != 0xFF:
            return None
        marker = head[1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_FRAMES:
            if len(head) < 9:
                return None
            return int.from_bytes(head[7:9], "big"), int.from_bytes(head[5:7], "big")
        if marker == 0xDA or marker == 0xD9:  # the scan, or the end: no frame before it
            return None
        at += 2 + int.from_bytes(head[2:4], "big")
    return None


def _image_size(mime_type: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels of a PNG, GIF, WebP or JPEG image, read from its header;
    ``None`` when the header does not say."""
    if mime_type == "image/png":
        head = data[16:24]
        if len(head) == 8:
            return int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")
    elif mime_type == "image/gif":
        head = data[6:10]
        if len(head) == 4:
            return int.from_bytes(head[:2], "little"), int.from_bytes(head[2:], "little")
    elif mime_type == "image/webp":
        head = data[12:30]
        if head[:4] == b"VP8X" and len(head) == 18:
            width, height = head[12:15], head[15:18]
            return int.from_bytes(width, "little") + 1, int.from_bytes(height, "little") + 1
        if head[:4] == b"VP8L" and len(head) >= 13:
            bits = int.from_bytes(head[9:13], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if head[:4] == b"VP8 " and len(head) == 18:
            width, height = head[14:16], head[16:18]
            return int.from_bytes(width, "little") & 0x3FFF, int.from_bytes(
                height, "little"
            ) & 0x3FFF
    elif mime_type == "image/jpeg":
        return _jpeg_size(data)
    return None


def fitting(parts: list[Part], limit: ImageLimit) -> list[Part]:
    """``parts`` with every image larger than ``limit`` replaced by the text that says so: the
    provider would refuse the whole request for it, naming neither the call nor the block."""
    fit: list[Part] = []
    for part in parts:
        if isinstance(part, Media) and part.kind == "image":
            if (len(part.data) if limit.encoded else part.size) > limit.most:
                part = Text(
                    f"[image {part.name} ({part.mime_type}, {part.size} bytes) omitted: "
                    f"{limit.provider} takes images of at most {limit.says}]"
                )
            elif limit.side is not None:
                pixels = part.pixels
                if pixels is not None and max(pixels) > limit.side:
                    part = Text(
                        f"[image {part.name} ({part.mime_type}, {pixels[0]}x{pixels[1]} pixels) "
                        f"omitted: {limit.provider} takes images of at most {limit.side} "
                        "pixels a side]"
                    )
        fit.append(part)
    return fit


def media_placeholder(media: Media, provider: str) -> Text:
    """What the model reads instead of media that ``provider`` cannot take there."""
    size = len(media.data) * 3 // 4
    return Text(
        f"[{media.kind} {media.name} ({media.mime_type}, about {size} bytes) omitted: "
        f"{provider} does not accept it here]"
    )


def context_parts(outcome: BatchOutcome) -> list[Part]:
    """The parts of the batch's drained contexts, in FIFO order.

    A context is ``{"content": [blocks], "source": ..., "placement": ..., "meta": ...}``; only
    its content reaches the model. Anything else the pipeline accepted as a context (it is only
    required to be JSON) is shown as compact JSON rather than lost.
    """
    parts: list[Part] = []
    for index, context in enumerate(outcome.contexts):
        content = context.get("content") if isinstance(context, Mapping) else None
        if isinstance(content, Sequence) and not isinstance(content, str):
            parts.extend(parts_of(content))
        elif isinstance(content, str):
            parts.append(Text(content))
        else:
            # compact_json refuses (LosslessJsonError) rather than writes NaN as null; the
            # root names the context in a BatchOutcome built by hand.
            parts.append(Text(compact_json(context, f"outcome.contexts[{index}]")))
    return parts


def call_ids_of(outcome: BatchOutcome) -> list[str]:
    """The id of the call each result answers, in order, as the model gave it (a repeat of an
    id the turn held twice ran under an id of its own, and a call without one under
    ``(no id)``, answered with the empty id, and one the model gave that reads as either, under
    ``<id> (as sent)``: ``model_call_id``); a result without one cannot be sent to a provider."""
    answered: list[str] = []
    for position, result in enumerate(outcome.results):
        call_id: object = result.call_id
        if type(call_id) is not str or not call_id:
            raise ValueError(
                f"results[{position}] has no call_id; pass the BatchOutcome that execute_batch "
                "returned"
            )
        answered.append(call_id)
    ids = set(answered)
    return [model_call_id(call_id, ids) for call_id in answered]


def check_outcome(outcome: object, adapter: str) -> None:
    """``TypeError`` naming ``adapter`` unless ``outcome`` is a ``BatchOutcome``."""
    if not isinstance(outcome, BatchOutcome):
        raise TypeError(
            f"{adapter}() takes the BatchOutcome that system.execute_batch(...) returns, got "
            f"{type(outcome).__name__}"
        )
