"""``KeywordChecked``: the metaclass of the Structs a harness author writes out by hand once (a
configuration, a tool's contract), whose constructor errors name the Struct and its keywords.

msgspec's own constructor says only ``Unexpected keyword argument 'max_frames'``: not which
class refused it, nor what it takes. Here the same ``TypeError`` reads ``ToolsConfig() got an
unexpected keyword argument 'max_frames'. Did you mean 'max_frame_bytes'?``, as Python's own
message for a function would. The check costs a Python frame per construction, so the Structs
built once per call (``ExecuteCall``, ``ToolCall``, the decisions) keep msgspec's constructor.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import msgspec

__all__ = ["KeywordChecked", "unknown_keyword_text"]


def unknown_keyword_text(owner: str, keyword: str, keywords: tuple[str, ...]) -> str:
    """The message for ``keyword``, which ``owner`` does not take: the close match when there
    is one (a misspelling), else every keyword it takes."""
    close = difflib.get_close_matches(keyword, keywords, n=1)
    text = f"{owner} got an unexpected keyword argument {keyword!r}."
    if close:
        return f"{text} Did you mean {close[0]!r}?"
    return f"{text} Its keywords: {', '.join(keywords)}"


def _signature(cls: type) -> str:
    fields: tuple[str, ...] = cls.__struct_fields__  # type: ignore[attr-defined]
    return f"{cls.__name__}({', '.join(fields)})"


def _explained(cls: type, message: str, positional: int) -> str | None:
    """msgspec's constructor ``message`` said again naming ``cls`` and its fields, or ``None``
    for a message that is not one of the constructor's own."""
    owner = f"{cls.__name__}()"
    fields: tuple[str, ...] = cls.__struct_fields__  # type: ignore[attr-defined]
    if message.startswith("Unexpected keyword argument '"):
        keyword = message.removeprefix("Unexpected keyword argument '")[:-1]
        return unknown_keyword_text(owner, keyword, fields)
    if message.startswith("Missing required argument '"):
        name = message.removeprefix("Missing required argument '")[:-1]
        return f"{owner} missing required argument {name!r}; it takes {_signature(cls)}"
    if message.startswith("Argument '") and message.endswith("' given by name and position"):
        name = message.removeprefix("Argument '").removesuffix("' given by name and position")
        return f"{owner} got multiple values for argument {name!r}: {_signature(cls)}"
    if message == "Extra positional arguments provided":
        # Read on this error path only: the signature msgspec derives for the class.
        parameters = inspect.signature(cls).parameters.values()
        most = sum(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
        if not most:
            return (
                f"{owner} takes keyword arguments only, got {positional} positional; "
                f"its keywords: {', '.join(fields)}"
            )
        return (
            f"{owner} takes at most {most} positional arguments, got {positional}: "
            f"{_signature(cls)}"
        )
    return None


class KeywordChecked(msgspec.StructMeta):
    """A Struct class whose constructor's own argument errors name it and its keywords."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except TypeError as exc:
            # Only msgspec's constructor, which raises from C with no frame of its own below
            # this one; a __post_init__'s TypeError (a frame there) already says what it means.
            traceback = exc.__traceback__
            if traceback is None or traceback.tb_next is not None:
                raise
            text = _explained(cls, str(exc), len(args))
            if text is None:
                raise
            raise TypeError(text) from None
