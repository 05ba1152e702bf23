"""The Code Mode SDK: the ``tools:sdk`` prompt section that declares every visible tool as a
typed async Python binding.

``render_sdk`` turns the calling scope's visible tools into fixed usage instructions followed by
one fenced block of Python stubs (``TypedDict`` per object shape, ``Literal`` for enums and
consts, a ``Tools`` class with one member per tool). The text is a pure function of the tool set:
lexicographic, byte-identical for an unchanged set, and total: a schema root outside the
enforced JSON-Schema subset renders as ``Any`` instead of raising. Schemas of any depth render
with explicit work stacks, never recursion.
"""

from __future__ import annotations

import keyword
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..registry import assert_supported_json_schema

__all__ = [
    "SDK_INSTRUCTIONS",
    "SDK_SECTION_NAME",
    "SDK_SECTION_ORDER",
    "SdkTool",
    "render_sdk",
    "render_sdk_declarations",
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
    "keys may be omitted, `closed=True` dicts accept only the listed keys, and "
    "`extra_items=JsonValue` dicts also accept other keys. Inside the program:\n"
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
    "concurrently; mutating calls run alone, in submission order). Sequence "
    "dependent work with `await`.\n"
    "- Emit results with `return` (a JSON value) and/or `print(...)`. ONLY what you "
    "print or return comes back to you — intermediate tool results never enter the "
    "conversation, so extract just what you need.\n"
    "\n"
    "The available tools:"
)
"""The fixed, model-visible usage instructions that precede the declarations block."""


class SdkTool(msgspec.Struct, frozen=True):
    """One visible tool as the SDK generator sees it.

    ``parameters`` and ``output_schema`` are detached raw JSON Schemas (plain or frozen JSON
    containers); anything outside the enforced subset, or not a schema object at all, renders
    as ``Any``.
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
_SCALAR_TYPES: Final = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool",
    "null": "None",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_BACKTICK_RUN = re.compile(r"`+")
_INDENT: Final = "    "


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
    blocks: list[str] = [_JSON_VALUE_LINE]
    members: list[str] = []
    literal_names: list[str] = []
    for name, description, parameters, output_schema in entries:
        base = _tool_base_name(name)
        args_name = _root_declarations(parameters, base + "Args", taken, blocks)
        output_name = _root_declarations(output_schema, base + "Output", taken, blocks)
        quoted = _json_string(name)
        literal_names.append(quoted)
        comment = _comment_text(description)
        if comment:
            members.append(f"{_INDENT}# {comment}")
        if _is_bare_name(name):
            members.append(
                f"{_INDENT}async def {name}(self, args: {args_name}, /) -> {output_name}: ..."
            )
        else:
            members.append(f"{_INDENT}@overload")
            members.append(
                f"{_INDENT}def __getitem__(self, name: Literal[{quoted}]) -> "
                f"Callable[[{args_name}], Awaitable[{output_name}]]: ..."
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


# -- names and text ----------------------------------------------------------------------------


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


def _pascal(text: str) -> str:
    """Split on runs of non-alphanumeric ASCII, upper-case each piece's first character."""
    return "".join(piece[0].upper() + piece[1:] for piece in _NON_ALNUM.split(text) if piece)


def _tool_base_name(name: str) -> str:
    base = _pascal(name)
    if not base:
        return "Tool"
    if base[0].isdigit():
        return "Tool" + base
    return base


def _is_bare_name(name: str) -> bool:
    """ASCII identifier, not a hard keyword, not a dunder-style name."""
    return (
        _IDENTIFIER.fullmatch(name) is not None
        and not keyword.iskeyword(name)
        and not name.startswith("__")
    )


def _take_name(wanted: str, taken: set[str], added: list[str]) -> str:
    name = wanted
    suffix = 2
    while name in taken:
        name = f"{wanted}_{suffix}"
        suffix += 1
    taken.add(name)
    added.append(name)
    return name


def _comment_text(description: Any) -> str:
    """Collapse every whitespace run to one space, strip, and escape what a comment line
    cannot hold (control characters and lone surrogates)."""
    if type(description) is not str or not description:
        return ""
    text = " ".join(description.split())
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char.isprintable() or unicodedata.category(char) not in ("Cc", "Cs"):
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def _json_string(text: str) -> str:
    """A JSON string literal with non-ASCII kept raw; also a valid Python string literal.

    Lone surrogates are escaped (``\\udXXX``), so the literal always encodes as UTF-8.
    """
    try:
        return msgspec.json.encode(text).decode()
    except (UnicodeEncodeError, msgspec.EncodeError):
        out = ['"']
        for char in text:
            code = ord(char)
            if char == '"':
                out.append('\\"')
            elif char == "\\":
                out.append("\\\\")
            elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
                out.append(_JSON_SHORT_ESCAPES.get(char, f"\\u{code:04x}"))
            else:
                out.append(char)
        out.append('"')
        return "".join(out)


_JSON_SHORT_ESCAPES: Final = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _literal(value: Any) -> str:
    if type(value) is str:
        return _json_string(value)
    if type(value) is bool:
        return "True" if value else "False"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value)
    raise TypeError("not a scalar literal")


# -- schema walking ----------------------------------------------------------------------------
#
# A rendered type is a list of union terms; each term is ``(text, depth, nest)`` where ``depth``
# estimates the syntax-tree depth of ``text`` and ``nest`` its bracket nesting. CPython's parser
# caps bracket nesting at 200 and syntax-tree depth near three times the recursion limit, so a
# schema nested thousands of levels deep cannot be one expression. Whenever an expression would
# outgrow the budgets below it is hoisted into an alias line ``<Root>Part<k> = ...``, and long
# unions are chained through such aliases. Ordinary schemas never come near these budgets.

_Term = tuple[str, int, int]

_MAX_DEPTH: Final = 200
_MAX_NEST: Final = 32
_MAX_TERMS: Final = 100
_TERM_DEPTH: Final = 64
_UNLIMITED: Final = 1 << 62

_ENTER: Final = 0
_EXIT_OBJECT: Final = 1
_EXIT_ARRAY: Final = 2
_EXIT_ONE_OF: Final = 3


def _root_declarations(schema: Any, wanted: str, taken: set[str], blocks: list[str]) -> str:
    """Append the definition blocks of one tool root to ``blocks`` and return the root's name.

    The root name is reserved first; a root outside the subset (or any fault while rendering
    it) becomes ``<Name> = Any`` and keeps no nested names.
    """
    root_name = _take_name(wanted, taken, [])
    renderer = _RootRenderer(root_name, taken, limited=True)
    try:
        assert_supported_json_schema(schema)
        renderer.render(schema)
    except Exception:
        for name in renderer.added:
            taken.discard(name)
        blocks.append(f"{root_name} = Any")
        return root_name
    blocks.extend(renderer.blocks)
    return root_name


def sdk_type_expression(schema: Any, name: str = "Root") -> str:
    """The Python type expression the SDK uses for one schema root, on a single line.

    Nested object shapes are referred to by their hoisted ``TypedDict`` names (``name`` is the
    root's name, the base of every nested name); a root outside the subset is ``Any``. Unlike
    the declarations block, the expression is never split, so it may be too deep for CPython's
    parser when the schema nests thousands of levels.
    """
    renderer = _RootRenderer(name, set(_RESERVED_NAMES), limited=False)
    try:
        assert_supported_json_schema(schema)
        return renderer.render(schema)
    except Exception:
        return "Any"


class _Slot:
    """Where a node's rendered type goes: one entry of its parent's child list."""

    __slots__ = ("index", "values")

    def __init__(self, values: list[list[_Term]], index: int) -> None:
        self.values = values
        self.index = index


def _prefix_text(prefix: Any) -> str:
    """Materialize a lazy name prefix: a ``str`` or a ``(parent_prefix, segment)`` chain."""
    segments: list[str] = []
    while type(prefix) is tuple:
        prefix, segment = prefix
        segments.append(segment)
    segments.append(prefix)
    segments.reverse()
    return "".join(segments)


class _RootRenderer:
    """Renders one subset-valid root with an explicit work stack.

    Object names are assigned in pre-order (on entry), definition blocks are emitted in
    post-order (nested first, root last).
    """

    def __init__(self, root_name: str, taken: set[str], *, limited: bool) -> None:
        self.root_name = root_name
        self.taken = taken
        self.added: list[str] = []
        self.blocks: list[str] = []
        self.parts = 0
        if limited:
            self.max_depth, self.max_nest = _MAX_DEPTH, _MAX_NEST
            self.max_terms, self.term_depth = _MAX_TERMS, _TERM_DEPTH
        else:
            self.max_depth = self.max_nest = self.max_terms = self.term_depth = _UNLIMITED

    def render(self, schema: Any) -> str:
        """Walk ``schema``, collect the blocks, and return the root's type expression."""
        root: list[list[_Term]] = [[]]
        work: list[tuple[int, Any, Any, _Slot, Any]] = [
            (_ENTER, schema, self.root_name, _Slot(root, 0), True)
        ]
        while work:
            kind, node, prefix, slot, extra = work.pop()
            if kind == _ENTER:
                self._enter(node, prefix, slot, extra, work)
            elif kind == _EXIT_OBJECT:
                name, children = extra
                self.blocks.append(self._typed_dict_block(name, node, children))
                slot.values[slot.index] = [(name, 1, 0)]
            elif kind == _EXIT_ARRAY:
                text, depth, nest = self._fit(
                    self._union(extra[0]), self.max_depth - 2, self.max_nest - 1
                )
                slot.values[slot.index] = [(f"list[{text}]", depth + 2, nest + 1)]
            else:
                terms = extra[0]
                for more in extra[1:]:
                    terms.extend(more)
                slot.values[slot.index] = terms
        text = self._union(root[0])[0]
        if text != self.root_name:
            self.blocks.append(f"{self.root_name} = {text}")
        return text

    def _enter(
        self,
        node: dict[str, Any],
        prefix: Any,
        slot: _Slot,
        is_root: bool,
        work: list[tuple[int, Any, Any, _Slot, Any]],
    ) -> None:
        branches = node.get("oneOf")
        if branches is not None:
            values: list[list[_Term]] = [[] for _ in branches]
            work.append((_EXIT_ONE_OF, node, prefix, slot, values))
            for index in range(len(branches) - 1, -1, -1):
                child_prefix = (prefix, f"Option{index + 1}")
                work.append((_ENTER, branches[index], child_prefix, _Slot(values, index), False))
            return
        node_type = node.get("type")
        if node_type is None:
            slot.values[slot.index] = [("JsonValue", 1, 0)]
        elif node_type == "object":
            properties = node.get("properties")
            if not properties:
                closed = node.get("additionalProperties") is False
                text = "dict[str, Never]" if closed else "dict[str, JsonValue]"
                slot.values[slot.index] = [(text, 3, 1)]
                return
            name = prefix if is_root else _take_name(_prefix_text(prefix), self.taken, self.added)
            children: list[list[_Term]] = [[] for _ in properties]
            work.append((_EXIT_OBJECT, node, prefix, slot, (name, children)))
            keys = list(properties)
            for index in range(len(keys) - 1, -1, -1):
                key = keys[index]
                child_prefix = (name, _pascal(key) or "Field")
                work.append((_ENTER, properties[key], child_prefix, _Slot(children, index), False))
        elif node_type == "array":
            items = node.get("items")
            if items is None:
                slot.values[slot.index] = [("list[JsonValue]", 2, 1)]
                return
            item: list[list[_Term]] = [[]]
            work.append((_EXIT_ARRAY, node, prefix, slot, item))
            work.append((_ENTER, items, (prefix, "Item"), _Slot(item, 0), False))
        else:
            text = _scalar_expression(node, node_type)
            depth, nest = (3, 1) if text.startswith("Literal[") else (1, 0)
            slot.values[slot.index] = [(text, depth, nest)]

    def _part_name(self) -> str:
        self.parts += 1
        return _take_name(f"{self.root_name}Part{self.parts}", self.taken, self.added)

    def _fit(self, term: _Term, max_depth: int, max_nest: int) -> _Term:
        """Hoist ``term`` into an alias when it is too deep for its place."""
        text, depth, nest = term
        if depth <= max_depth and nest <= max_nest:
            return term
        alias = self._part_name()
        self.blocks.append(f"{alias} = {text}")
        return (alias, 1, 0)

    def _union(self, terms: list[_Term]) -> _Term:
        """Join union terms into one expression, chaining long unions through aliases."""
        if len(terms) == 1:
            return terms[0]
        fitted = [self._fit(term, self.term_depth, self.max_nest) for term in terms]
        if len(fitted) <= self.max_terms:
            return self._joined(fitted)
        step = self.max_terms - 1
        chunks = [fitted[start : start + step] for start in range(0, len(fitted), step)]
        if len(chunks[-1]) == 1:
            chunks[-2].extend(chunks.pop())
        names = [self._part_name() for _ in chunks[1:]]
        for index in range(1, len(chunks)):
            chunk = chunks[index]
            if index < len(names):
                chunk.append((names[index], 1, 0))
            self.blocks.append(f"{names[index - 1]} = {self._joined(chunk)[0]}")
        return self._joined([*chunks[0], (names[0], 1, 0)])

    @staticmethod
    def _joined(terms: list[_Term]) -> _Term:
        depth = max(term[1] for term in terms) + len(terms)
        nest = max(term[2] for term in terms)
        return (" | ".join(term[0] for term in terms), depth, nest)

    def _typed_dict_block(
        self, name: str, node: dict[str, Any], children: list[list[_Term]]
    ) -> str:
        properties: dict[str, Any] = node["properties"]
        required = set(node.get("required") or ())
        closed = node.get("additionalProperties") is False
        class_form = all(_is_bare_name(key) for key in properties)
        lines: list[str] = []
        if class_form:
            extra = "closed=True" if closed else "extra_items=JsonValue"
            lines.append(f"class {name}(TypedDict, {extra}):")
        else:
            lines.append(f'{name} = TypedDict("{name}", {{')
        for (key, child), terms in zip(properties.items(), children, strict=True):
            text = self._fit(self._union(terms), self.max_depth - 4, self.max_nest - 3)[0]
            comment = _comment_text(child.get("description"))
            if comment:
                lines.append(f"{_INDENT}# {comment}")
            annotation = text if key in required else f"NotRequired[{text}]"
            if class_form:
                lines.append(f"{_INDENT}{key}: {annotation}")
            else:
                lines.append(f"{_INDENT}{_json_string(key)}: {annotation},")
        if not class_form:
            lines.append("}, closed=True)" if closed else "}, extra_items=JsonValue)")
        return "\n".join(lines)


def _scalar_expression(node: dict[str, Any], node_type: str) -> str:
    if "const" in node:
        const = node["const"]
        return "None" if const is None else f"Literal[{_literal(const)}]"
    if "enum" in node:
        if node_type == "null":
            return "None"
        return "Literal[" + ", ".join(_literal(entry) for entry in node["enum"]) + "]"
    return _SCALAR_TYPES[node_type]
