"""The Code Mode SDK: the ``tools:sdk`` prompt section that declares every visible tool as a
typed async Python binding.

``render_sdk`` turns the calling scope's visible tools into fixed usage instructions followed by
one fenced block of Python stubs (``TypedDict`` per object shape, ``Literal`` for enums and
consts, a ``Tools`` class with one member per tool). The text is a pure function of the tool set:
lexicographic, byte-identical for an unchanged set, and total: it reads full JSON Schema (what
MCP servers and ``@tool`` registrations carry), types whatever can be typed and renders
``JsonValue`` only where a part truly cannot be; only a root that is not a schema object at all
renders as ``Any``. Schemas of any depth render with explicit work stacks, never recursion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..actors._keywords import KeywordChecked
from ._sdk_names import (
    _INDENT,
    _comment_text,
    _is_bare_name,
    _json_string,
    _take_name,
    _tool_base_name,
)
from ._sdk_render import _RootRenderer
from ._sdk_schema import _is_map
from ._sdk_shared import SharedDefinitions

__all__ = [
    "SDK_INSTRUCTIONS",
    "SDK_SECTION_NAME",
    "SDK_SECTION_ORDER",
    "SdkTool",
    "render_sdk",
    "render_sdk_declarations",
    "render_sdk_help",
    "sdk_fence",
    "sdk_type_expression",
]

SDK_SECTION_NAME: Final = "tools:sdk"
"""The prompt-section name of the generated SDK."""


SDK_SECTION_ORDER: Final = 150
"""The prompt-section order of the generated SDK (inside the 100-199 tool-guidance band)."""


SDK_INSTRUCTIONS: Final = (
    "## Writing code for run_code\n"
    "\n"
    "Pass `run_code` the body of an async Python function (top-level `await` and "
    "`return` work; the annotations below are advisory and never checked). `tools`, "
    "`ToolCallError` and `asyncio` are predefined. In the declarations, `NotRequired` "
    "keys may be omitted, `closed=True` dicts accept only the listed keys, "
    "`extra_items=T` dicts also accept other keys with `T` values, and `# [...]` "
    "comments give formats, constraints and defaults. Inside the program:\n"
    "\n"
    "- Call tools as `await tools.name(args)` — quoted access for exotic names: "
    '`await tools["my-tool"](args)`. `args` is one dict; every call resolves to the '
    "tool's typed canonical JSON value. Tool arguments must be lossless JSON: dict "
    "with str keys, list, str, int, finite float, bool, None (no tuples, sets or "
    "other objects).\n"
    "- A FAILED tool call raises `ToolCallError`, whose `tool_name` identifies the "
    "failed tool and whose `message` is human-readable — catch it with `try`/`except "
    "ToolCallError` to handle it and continue.\n"
    "- Independent read-only calls MAY overlap under `asyncio.gather` (safe calls run "
    "concurrently; mutating calls run alone, in submission order), but their results "
    "come back in the order the calls were made: a slow call holds back the results of "
    "later ones, under `as_completed` and `asyncio.wait` too. Sequence "
    "dependent work with `await`. Cancelling an await (an `asyncio.wait_for` timeout, "
    "say) does not stop the tool call: it keeps running while the program does, and its "
    "result is dropped.\n"
    "- Emit results with `return` (a JSON value) and/or `print(...)`. ONLY what you "
    "print or return comes back to you — intermediate tool results never enter the "
    "conversation, so extract just what you need.\n"
    "\n"
    "The available tools:"
)
"""The fixed, model-visible usage instructions that precede the declarations block."""


class SdkTool(msgspec.Struct, metaclass=KeywordChecked, frozen=True):
    """One visible tool as the SDK generator sees it.

    ``parameters`` and ``output_schema`` are detached raw JSON Schemas (plain or frozen JSON
    containers) in any vocabulary; a root that is not a schema object renders as ``Any``.
    """

    name: str
    description: str
    parameters: Any
    output_schema: Any


_JSON_VALUE_LINE: Final = (
    'JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]'
)
_TOOL_CALL_ERROR_BLOCK: Final = (
    "class ToolCallError(Exception):\n    tool_name: ToolName\n    message: str"
)
_RESERVED_NAMES: Final = frozenset(
    {
        "JsonValue",
        "ToolName",
        "ToolCallError",
        "Tools",
        "tools",
        "Any",
        "Awaitable",
        "Callable",
        "Literal",
        "Never",
        "NotRequired",
        "TypedDict",
        "overload",
    }
)
_BACKTICK_RUN = re.compile(r"`+")


def render_sdk(tools: Sequence[SdkTool]) -> str:
    """Render the full ``tools:sdk`` section text for ``tools``.

    The layout is ``INSTRUCTIONS + "\\n\\n" + fence + "python\\n" + DECLARATIONS + "\\n" +
    fence`` where the fence is ``max(3, longest backtick run in DECLARATIONS + 1)`` backticks,
    so the block stays one fenced block whatever the descriptions contain. Never raises for
    any schema content.
    """
    declarations = render_sdk_declarations(tools)
    fence = sdk_fence(declarations)
    return f"{SDK_INSTRUCTIONS}\n\n{fence}python\n{declarations}\n{fence}"


def sdk_fence(text: str) -> str:
    """Return the Markdown fence that safely encloses ``text``: at least three backticks and
    one more than the longest backtick run inside it."""
    longest = max((len(run) for run in _BACKTICK_RUN.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def render_sdk_declarations(tools: Sequence[SdkTool]) -> str:
    """Render only the Python declarations (the text inside the fence).

    Tools are ordered by name (code-point order, stable for duplicates). The text always parses
    with ``ast.parse``; it is documentation for the model and is never executed.
    """
    entries = sorted((_tool_entry(tool) for tool in tools), key=lambda entry: entry[0])
    taken: set[str] = set(_RESERVED_NAMES)
    shared = SharedDefinitions()
    blocks: list[str] = [_JSON_VALUE_LINE]
    members: list[str] = []
    literal_names: list[str] = []
    for name, description, parameters, output_schema in entries:
        literal_names.append(_json_string(name))
        members.extend(
            _member_lines(name, description, parameters, output_schema, taken, blocks, shared)
        )
    if literal_names:
        blocks.append("ToolName = Literal[" + ", ".join(literal_names) + "]")
    else:
        blocks.append("ToolName = Never")
    blocks.append(_TOOL_CALL_ERROR_BLOCK)
    if members:
        blocks.append("class Tools:\n" + "\n".join(members))
    else:
        blocks.append(f"class Tools:\n{_INDENT}pass")
    blocks.append("tools: Tools")
    return "\n\n".join(blocks)


def render_sdk_help(tool: SdkTool) -> str:
    """What ``help()`` on one tool's binding shows a program: the ``Tools`` member the SDK
    declares for it (its description and signature) and the declarations of its argument and
    result types, as in ``render_sdk_declarations`` (a name two tools' types would share in
    the whole SDK may be numbered differently). Never raises for any schema content."""
    name, description, parameters, output_schema = _tool_entry(tool)
    blocks: list[str] = []
    members = _member_lines(
        name,
        description,
        parameters,
        output_schema,
        set(_RESERVED_NAMES),
        blocks,
        SharedDefinitions(),
    )
    text = "\n\n".join(["class Tools:\n" + "\n".join(members), *blocks])
    if "JsonValue" in text:
        text += "\n\n" + _JSON_VALUE_LINE
    return text


def _member_lines(
    name: str,
    description: str,
    parameters: Any,
    output_schema: Any,
    taken: set[str],
    blocks: list[str],
    shared: SharedDefinitions,
) -> list[str]:
    """The ``Tools`` member lines of one tool, its type declarations appended to ``blocks``
    (a definition ``shared`` names already is not declared again)."""
    base = _tool_base_name(name)
    args_name = _root_declarations(parameters, base + "Args", taken, blocks, shared)
    output_name = _root_declarations(output_schema, base + "Output", taken, blocks, shared)
    lines: list[str] = []
    comment = _comment_text(description)
    if comment:
        lines.append(f"{_INDENT}# {comment}")
    if _is_bare_name(name):
        lines.append(f"{_INDENT}async def {name}(self, args: {args_name}, /) -> {output_name}: ...")
    else:
        lines.append(f"{_INDENT}@overload")
        lines.append(
            f"{_INDENT}def __getitem__(self, name: Literal[{_json_string(name)}]) -> "
            f"Callable[[{args_name}], Awaitable[{output_name}]]: ..."
        )
    return lines


def _tool_entry(tool: Any) -> tuple[str, str, Any, Any]:
    """Read one tool defensively: a malformed entry still renders (as ``Any`` roots)."""
    try:
        name = getattr(tool, "name", "")
        if type(name) is not str:
            name = str(name)
        description = getattr(tool, "description", "")
        parameters = getattr(tool, "parameters", None)
        output_schema = getattr(tool, "output_schema", None)
    except Exception:
        return ("", "", None, None)
    if type(description) is not str:
        description = ""
    return (name, description, parameters, output_schema)


def _root_declarations(
    schema: Any, wanted: str, taken: set[str], blocks: list[str], shared: SharedDefinitions
) -> str:
    """Append the definition blocks of one tool root to ``blocks`` and return the root's name.

    The root name is reserved first; a root that is not a schema object at all (or any fault
    while rendering it) becomes ``<Name> = Any`` and keeps no nested names. A ``$ref``
    target declared the same by an earlier root (``shared``) is named, not declared again.
    """
    root_name = _take_name(wanted, taken, [])
    renderer = _RootRenderer(root_name, taken, limited=True, shared=shared)
    try:
        if not _is_map(schema):
            raise TypeError("not a schema object")
        renderer.render(schema)
    except Exception:
        for name in renderer.added:
            taken.discard(name)
        blocks.append(f"{root_name} = Any")
        return root_name
    blocks.extend(renderer.blocks)
    shared.names.update(renderer.shared_added)
    return root_name


def sdk_type_expression(schema: Any, name: str = "Root") -> str:
    """The Python type expression the SDK uses for one schema root, on a single line.

    Nested object shapes are referred to by their hoisted ``TypedDict`` names (``name`` is the
    root's name, the base of every nested name); a root that is not a schema object is
    ``Any``. Unlike the declarations block, the expression is never split, so it may be too
    deep for CPython's parser when the schema nests thousands of levels.
    """
    renderer = _RootRenderer(name, set(_RESERVED_NAMES), limited=False)
    try:
        if not _is_map(schema):
            return "Any"
        return renderer.render(schema)
    except Exception:
        return "Any"
