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

import keyword
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..actors import FrozenDict, FrozenList
from ..registry import resolve_local_ref

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
#
# The walker reads full JSON Schema as MCP servers and generated schemas carry it: ``$ref`` into
# the document (``$defs``, ``definitions``, any JSON pointer; recursive ones too) becomes a named
# declaration rendered once per root, ``anyOf``/``oneOf`` and type arrays become unions,
# ``allOf`` of object shapes is merged, ``enum``/``const`` become ``Literal``,
# ``additionalProperties`` schemas become ``dict[str, T]`` (or a TypedDict's ``extra_items``),
# and constraints and formats become comments. ``$schema``, ``$id`` and ``title`` are ignored.
# Whatever cannot be typed is ``JsonValue`` where it occurs, never the whole tool.

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
_EXIT_DICT: Final = 4
_EXIT_NAMED: Final = 5

_MAX_MERGES: Final = 10_000  # allOf merges per root: a schema whose allOf contains itself ends
_JSON_VALUE: Final[_Term] = ("JsonValue", 1, 0)
_NONE: Final[_Term] = ("None", 1, 0)
_UNION_KEYS: Final = ("anyOf", "oneOf")
_NOTE_KEYS: Final = (
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "default",
)
_NOTE_LIMIT: Final = 80
# Keywords that make an ``anyOf``/``oneOf`` branch a type of its own (rather than a constraint
# on the enclosing node, as in ``{"type": "object", "anyOf": [{"required": ["a"]}, ...]}``).
_SHAPE_KEYS: Final = frozenset(
    {"type", "$ref", "properties", "items", "enum", "const", "anyOf", "oneOf", "allOf"}
)


def _is_map(value: Any) -> bool:
    return type(value) is dict or type(value) is FrozenDict


def _is_list(value: Any) -> bool:
    return type(value) is list or type(value) is FrozenList


def _root_declarations(schema: Any, wanted: str, taken: set[str], blocks: list[str]) -> str:
    """Append the definition blocks of one tool root to ``blocks`` and return the root's name.

    The root name is reserved first; a root that is not a schema object at all (or any fault
    while rendering it) becomes ``<Name> = Any`` and keeps no nested names.
    """
    root_name = _take_name(wanted, taken, [])
    renderer = _RootRenderer(root_name, taken, limited=True)
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


def _def_name(ref: str) -> str:
    """A declaration name from the last segment of a reference (``#/$defs/time_result`` ->
    ``TimeResult``)."""
    base = _pascal(ref.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~"))
    if not base:
        return "Def"
    if base[0].isdigit() or keyword.iskeyword(base):
        return "Def" + base
    return base


def _note_value(key: str, value: Any) -> str:
    try:
        raw = type(value) is str and key in ("format", "pattern")
        text = value if raw else msgspec.json.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError):
        return "?"
    return text if len(text) <= _NOTE_LIMIT else text[: _NOTE_LIMIT - 3] + "..."


def _constraint_notes(node: Any) -> str:
    """``key: value`` notes for the constraints and formats of a property (and of its union
    branches and array items), for the comment above it."""
    if not _is_map(node):
        return ""
    notes: list[str] = []
    sources: list[tuple[str, Any]] = [("", node)]
    for key in _UNION_KEYS:
        branches = node.get(key)
        if _is_list(branches):
            sources.extend(("", branch) for branch in branches if _is_map(branch))
    if _is_map(node.get("items")):
        sources.append(("items ", node["items"]))
    for label, source in sources:
        for key in _NOTE_KEYS:
            if key in source:
                note = f"{label}{key}: {_note_value(key, source[key])}"
                if note not in notes:
                    notes.append(note)
    return "; ".join(notes)


def _merge_all_of(node: Any, document: Any) -> Any:
    """One schema for an ``allOf``: a single branch merged with the node's own keywords, or the
    object shapes of every branch merged; ``None`` when the branches are not object shapes."""
    branches = node.get("allOf")
    own = {key: value for key, value in node.items() if key != "allOf"}
    if not _is_list(branches) or not branches:
        return own
    if len(branches) == 1 and _is_map(branches[0]) and not (_SHAPE_KEYS & own.keys()):
        return {**own, **branches[0]}
    properties: dict[str, Any] = {}
    required: list[str] = []
    closed = False
    for part in [own, *branches]:
        seen: set[int] = set()
        while _is_map(part) and "$ref" in part and id(part) not in seen:
            seen.add(id(part))
            part = resolve_local_ref(document, part["$ref"])
        if not _is_map(part):
            return None
        declared = part.get("type")
        if declared not in (None, "object") or any(k in part for k in ("anyOf", "oneOf", "allOf")):
            return None
        if _is_map(part.get("properties")):
            properties.update(part["properties"])
        if _is_list(part.get("required")):
            required.extend(name for name in part["required"] if type(name) is str)
        closed = closed or part.get("additionalProperties") is False
    merged: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        merged["required"] = list(dict.fromkeys(required))
    if closed:
        merged["additionalProperties"] = False
    return merged


class _RootRenderer:
    """Renders one schema root with an explicit work stack.

    Object names are assigned in pre-order (on entry), definition blocks are emitted in
    post-order (nested first, root last). A ``$ref`` target is rendered once per root under its
    own name; a schema that contains itself as a Python object renders ``JsonValue`` where it
    recurs.
    """

    def __init__(self, root_name: str, taken: set[str], *, limited: bool) -> None:
        self.root_name = root_name
        self.taken = taken
        self.added: list[str] = []
        self.blocks: list[str] = []
        self.parts = 0
        self.document: Any = None
        self.refs: dict[str, str] = {}
        self.active: set[int] = set()
        self.merges = 0
        if limited:
            self.max_depth, self.max_nest = _MAX_DEPTH, _MAX_NEST
            self.max_terms, self.term_depth = _MAX_TERMS, _TERM_DEPTH
        else:
            self.max_depth = self.max_nest = self.max_terms = self.term_depth = _UNLIMITED

    def render(self, schema: Any) -> str:
        """Walk ``schema``, collect the blocks, and return the root's type expression."""
        self.document = schema
        self.refs["#"] = self.root_name
        root: list[list[_Term]] = [[]]
        work: list[tuple[int, Any, Any, _Slot, Any]] = [
            (_ENTER, schema, self.root_name, _Slot(root, 0), True)
        ]
        while work:
            kind, node, prefix, slot, extra = work.pop()
            if kind == _ENTER:
                self._enter(node, prefix, slot, extra, work)
                continue
            self.active.discard(id(node))
            if kind == _EXIT_OBJECT:
                name, children = extra
                self.blocks.append(self._typed_dict_block(name, node, children))
                slot.values[slot.index] = [(name, 1, 0)]
            elif kind in (_EXIT_ARRAY, _EXIT_DICT):
                head, depth_cost = ("list[", 2) if kind == _EXIT_ARRAY else ("dict[str, ", 3)
                text, depth, nest = self._fit(
                    self._union(extra[0]), self.max_depth - depth_cost, self.max_nest - 1
                )
                slot.values[slot.index] = [(f"{head}{text}]", depth + depth_cost, nest + 1)]
            elif kind == _EXIT_NAMED:
                text = self._fit(self._union(extra[0]), self.max_depth, self.max_nest)[0]
                if text != prefix:
                    self.blocks.append(f"{prefix} = {text}")
            else:
                terms: list[_Term] = []
                for more in extra:
                    terms.extend(more)
                slot.values[slot.index] = terms
        text = self._union(root[0])[0]
        if text != self.root_name:
            self.blocks.append(f"{self.root_name} = {text}")
        return text

    def _named(self, ref: str, work: list[tuple[int, Any, Any, _Slot, Any]]) -> _Term:
        """The name of a ``$ref`` target, queueing its declaration on first use."""
        name = self.refs.get(ref)
        if name is not None:
            return (name, 1, 0)
        target = resolve_local_ref(self.document, ref)
        if target is None:
            return _JSON_VALUE
        if target is self.document:
            self.refs[ref] = self.root_name
            return (self.root_name, 1, 0)
        name = _take_name(_def_name(ref), self.taken, self.added)
        self.refs[ref] = name
        values: list[list[_Term]] = [[]]
        work.append((_EXIT_NAMED, None, name, _Slot(values, 0), values))
        work.append((_ENTER, target, name, _Slot(values, 0), True))
        return (name, 1, 0)

    def _enter(
        self,
        node: Any,
        prefix: Any,
        slot: _Slot,
        is_named: bool,
        work: list[tuple[int, Any, Any, _Slot, Any]],
    ) -> None:
        if not _is_map(node):
            slot.values[slot.index] = [("Never", 1, 0) if node is False else _JSON_VALUE]
            return
        if id(node) in self.active:
            slot.values[slot.index] = [_JSON_VALUE]
            return
        ref = node.get("$ref")
        if ref is not None:
            term = self._named(ref, work) if type(ref) is str else _JSON_VALUE
            slot.values[slot.index] = [term]
            return
        if "allOf" in node:
            merged = _merge_all_of(node, self.document)
            self.merges += 1
            if merged is None or self.merges > _MAX_MERGES:
                slot.values[slot.index] = [_JSON_VALUE]
                return
            # The merged schema may be a ``$ref`` (``{"allOf": [{"$ref": ...}], "description":
            # ...}``) or another ``allOf``: it is entered afresh.
            work.append((_ENTER, merged, prefix, slot, is_named))
            return
        for key in _UNION_KEYS:
            branches = node.get(key)
            if _is_list(branches) and branches:
                shaped = [b for b in branches if not _is_map(b) or _SHAPE_KEYS & b.keys()]
                if shaped:
                    own = {k: v for k, v in node.items() if k not in _UNION_KEYS}
                    if _SHAPE_KEYS & own.keys():
                        # Sibling keywords apply to every branch (``{"type": "string",
                        # "anyOf": [{"format": ...}, ...]}`` is a string).
                        branches = [{**own, **b} if _is_map(b) else b for b in branches]
                    self._push_union(node, branches, prefix, slot, work)
                    return
        if "const" in node:
            slot.values[slot.index] = [self._literal_term([node["const"]])]
            return
        if _is_list(node.get("enum")) and node["enum"]:
            slot.values[slot.index] = [self._literal_term(list(node["enum"]))]
            return
        node_type = node.get("type")
        if _is_list(node_type):
            kinds = [kind for kind in node_type if type(kind) is str]
            if not kinds:
                slot.values[slot.index] = [_JSON_VALUE]
                return
            branches = [{**node, "type": kind} for kind in kinds]
            self._push_union(node, branches, prefix, slot, work)
            return
        if node_type is None:
            if _is_map(node.get("properties")) or _is_map(node.get("additionalProperties")):
                node_type = "object"
            elif "items" in node or "prefixItems" in node:
                node_type = "array"
            else:
                slot.values[slot.index] = [_JSON_VALUE]
                return
        if node.get("nullable") is True and node_type != "null":  # the OpenAPI spelling
            plain = {key: value for key, value in node.items() if key != "nullable"}
            self._push_union(node, [plain, {"type": "null"}], prefix, slot, work)
            return
        if node_type == "object":
            self._enter_object(node, prefix, slot, is_named, work)
        elif node_type == "array":
            self._enter_array(node, prefix, slot, work)
        elif type(node_type) is str and node_type in _SCALAR_TYPES:
            slot.values[slot.index] = [(_SCALAR_TYPES[node_type], 1, 0)]
        else:
            slot.values[slot.index] = [_JSON_VALUE]

    def _push_union(
        self,
        node: Any,
        branches: list[Any],
        prefix: Any,
        slot: _Slot,
        work: list[tuple[int, Any, Any, _Slot, Any]],
    ) -> None:
        self.active.add(id(node))
        values: list[list[_Term]] = [[] for _ in branches]
        work.append((_EXIT_ONE_OF, node, prefix, slot, values))
        for index in range(len(branches) - 1, -1, -1):
            child_prefix = (prefix, f"Option{index + 1}")
            work.append((_ENTER, branches[index], child_prefix, _Slot(values, index), False))

    def _enter_object(
        self,
        node: Any,
        prefix: Any,
        slot: _Slot,
        is_named: bool,
        work: list[tuple[int, Any, Any, _Slot, Any]],
    ) -> None:
        properties = node.get("properties")
        additional = node.get("additionalProperties")
        if not _is_map(properties) or not properties:
            if _is_map(additional):
                self.active.add(id(node))
                item: list[list[_Term]] = [[]]
                work.append((_EXIT_DICT, node, prefix, slot, item))
                work.append((_ENTER, additional, (prefix, "Value"), _Slot(item, 0), False))
                return
            text = "dict[str, Never]" if additional is False else "dict[str, JsonValue]"
            slot.values[slot.index] = [(text, 3, 1)]
            return
        self.active.add(id(node))
        name = prefix if is_named else _take_name(_prefix_text(prefix), self.taken, self.added)
        children: list[list[_Term]] = [[] for _ in properties]
        if _is_map(additional):
            children.append([])
        work.append((_EXIT_OBJECT, node, prefix, slot, (name, children)))
        if _is_map(additional):
            child_slot = _Slot(children, len(children) - 1)
            work.append((_ENTER, additional, (name, "Extra"), child_slot, False))
        keys = list(properties)
        for index in range(len(keys) - 1, -1, -1):
            key = keys[index]
            child_prefix = (name, _pascal(key) or "Field")
            work.append((_ENTER, properties[key], child_prefix, _Slot(children, index), False))

    def _enter_array(
        self,
        node: Any,
        prefix: Any,
        slot: _Slot,
        work: list[tuple[int, Any, Any, _Slot, Any]],
    ) -> None:
        items = node.get("items")
        tuple_items = node.get("prefixItems") if _is_list(node.get("prefixItems")) else None
        if _is_list(items):  # the draft-07 tuple form
            tuple_items, items = items, node.get("additionalItems")
        if tuple_items:
            candidates = list(tuple_items)
            if _is_map(items):
                candidates.append(items)
            self.active.add(id(node))
            values: list[list[_Term]] = [[] for _ in candidates]
            union_slot_values: list[list[_Term]] = [[]]
            work.append((_EXIT_ARRAY, node, prefix, slot, union_slot_values))
            work.append((_EXIT_ONE_OF, {}, prefix, _Slot(union_slot_values, 0), values))
            for index in range(len(candidates) - 1, -1, -1):
                child_prefix = (prefix, f"Item{index + 1}")
                work.append((_ENTER, candidates[index], child_prefix, _Slot(values, index), False))
            return
        if not _is_map(items):
            slot.values[slot.index] = [("list[JsonValue]", 2, 1)]
            return
        self.active.add(id(node))
        item: list[list[_Term]] = [[]]
        work.append((_EXIT_ARRAY, node, prefix, slot, item))
        work.append((_ENTER, items, (prefix, "Item"), _Slot(item, 0), False))

    @staticmethod
    def _literal_term(entries: list[Any]) -> _Term:
        """``Literal[...]`` for scalar entries (``None`` as a union member); ``JsonValue`` when
        an entry is an object or array."""
        literals: list[str] = []
        has_none = False
        for entry in entries:
            if entry is None:
                has_none = True
                continue
            try:
                text = _literal(entry)
            except TypeError:
                return _JSON_VALUE
            if text not in literals:
                literals.append(text)
        if not literals:
            return _NONE
        term = "Literal[" + ", ".join(literals) + "]"
        if has_none:
            return (term + " | None", 4, 1)
        return (term, 3, 1)

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
        if not terms:
            return _JSON_VALUE
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
        required_list = node.get("required")
        required: set[str] = set()
        if isinstance(required_list, list):
            required.update(key for key in required_list if type(key) is str)
        additional = node.get("additionalProperties")
        if additional is False:
            extra = "closed=True"
        elif _is_map(additional):
            extra_type = self._fit(self._union(children[-1]), self.max_depth - 4, 4)[0]
            extra = f"extra_items={extra_type}"
        else:
            extra = "extra_items=JsonValue"
        class_form = all(_is_bare_name(key) for key in properties)
        lines: list[str] = []
        if class_form:
            lines.append(f"class {name}(TypedDict, {extra}):")
        else:
            lines.append(f'{name} = TypedDict("{name}", {{')
        for (key, child), terms in zip(properties.items(), children, strict=False):
            text = self._fit(self._union(terms), self.max_depth - 4, self.max_nest - 3)[0]
            comment = _comment_text(child.get("description")) if _is_map(child) else ""
            notes = _comment_text(_constraint_notes(child))
            if notes:
                comment = f"{comment} [{notes}]" if comment else f"[{notes}]"
            if comment:
                lines.append(f"{_INDENT}# {comment}")
            annotation = text if key in required else f"NotRequired[{text}]"
            if class_form:
                lines.append(f"{_INDENT}{key}: {annotation}")
            else:
                lines.append(f"{_INDENT}{_json_string(key)}: {annotation},")
        if not class_form:
            lines.append(f"}}, {extra})")
        return "\n".join(lines)
