"""The SDK's schema renderer: one schema root to ``TypedDict`` declarations and a type
expression, with an explicit work stack (never recursion).

One cohesive walker: ``_RootRenderer``'s entry steps, exit steps and expression budgets share
its per-root state (names taken, ``$ref`` targets, open nodes) and only read together, so the
class stays whole.
"""

from __future__ import annotations

from typing import Any, Final

from ..registry import resolve_local_ref
from ._sdk_names import (
    _INDENT,
    _comment_text,
    _def_name,
    _is_bare_name,
    _json_string,
    _literal,
    _pascal,
    _prefix_text,
    _take_name,
)
from ._sdk_one_of import one_of_notes
from ._sdk_schema import (
    _SHAPE_KEYS,
    _UNION_KEYS,
    _constraint_notes,
    _extra_schema,
    _is_list,
    _is_map,
    _merge_all_of,
)
from ._sdk_shared import SharedDefinitions, definition_key

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
_SCALAR_TYPES: Final = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool",
    "null": "None",
}


class _Slot:
    """Where a node's rendered type goes: one entry of its parent's child list."""

    __slots__ = ("index", "values")

    def __init__(self, values: list[list[_Term]], index: int) -> None:
        self.values = values
        self.index = index


class _RootRenderer:
    """Renders one schema root with an explicit work stack.

    Object names are assigned in pre-order (on entry), definition blocks are emitted in
    post-order (nested first, root last). A ``$ref`` target is rendered once per root under its
    own name; a schema that contains itself as a Python object renders ``JsonValue`` where it
    recurs.
    """

    def __init__(
        self,
        root_name: str,
        taken: set[str],
        *,
        limited: bool,
        shared: SharedDefinitions | None = None,
    ) -> None:
        self.root_name = root_name
        self.taken = taken
        self.added: list[str] = []
        # The ``$ref`` targets other roots declared already (``definition_key`` to name):
        # one declared the same is named, not declared again. ``None``: nothing is shared.
        self.shared = shared
        self.shared_added: dict[str, str] = {}  # this root's, kept once it renders
        self.blocks: list[str] = []
        self.parts = 0
        self.document: Any = None
        self.refs: dict[str, str] = {}
        # The comment line above each ``$ref`` target's declaration: its description and
        # constraints, which no property referring to it carries (a model's docstring).
        self.named_comments: dict[str, str] = {}
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
        # The root's description (a docstring's Returns section) and constraints have no
        # property to stand above: they go above its declaration.
        comment = _node_comment(schema, schema)
        if comment:
            self.named_comments[self.root_name] = comment
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
                    self.blocks.append(f"{self._named_comment(prefix)}{prefix} = {text}")
            else:
                terms: list[_Term] = []
                for more in extra:
                    terms.extend(more)
                slot.values[slot.index] = terms
        text = self._union(root[0])[0]
        if text != self.root_name:
            self.blocks.append(f"{self._named_comment(self.root_name)}{self.root_name} = {text}")
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
        wanted = _def_name(ref)
        key = None
        if self.shared is not None:
            key = definition_key(wanted, ref, self.document, self.shared)
            if key is not None:
                known = self.shared.names.get(key) or self.shared_added.get(key)
                if known is not None:
                    self.refs[ref] = known
                    return (known, 1, 0)
        name = _take_name(wanted, self.taken, self.added)
        if key is not None:
            self.shared_added[key] = name
        self.refs[ref] = name
        comment = _node_comment(target, self.document)
        if comment:
            self.named_comments[name] = comment
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
            if (
                _is_map(node.get("properties"))
                or _is_map(node.get("additionalProperties"))
                or _is_map(node.get("patternProperties"))
            ):
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
        additional = _extra_schema(node)
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

    def _named_comment(self, name: str) -> str:
        """The comment line (with its newline) above the declaration of ``name``, if any."""
        comment = self.named_comments.get(name)
        return f"# {comment}\n" if comment else ""

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
        additional = _extra_schema(node)
        if additional is False:
            extra = "closed=True"
        elif _is_map(additional):
            extra_type = self._fit(self._union(children[-1]), self.max_depth - 4, 4)[0]
            extra = f"extra_items={extra_type}"
        else:
            extra = "extra_items=JsonValue"
        class_form = all(_is_bare_name(key) for key in properties)
        lines: list[str] = []
        named_comment = self.named_comments.get(name)
        if named_comment:
            lines.append(f"# {named_comment}")
        if class_form:
            lines.append(f"class {name}(TypedDict, {extra}):")
        else:
            lines.append(f'{name} = TypedDict("{name}", {{')
        for (key, child), terms in zip(properties.items(), children, strict=False):
            text = self._fit(self._union(terms), self.max_depth - 4, self.max_nest - 3)[0]
            comment = _node_comment(child, self.document)
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


def _node_comment(node: Any, document: Any) -> str:
    """A schema's description and its constraint notes, as one comment line's text
    (``document``: the root its ``$ref``s point into)."""
    comment = _comment_text(node.get("description")) if _is_map(node) else ""
    notes = _comment_text(
        "; ".join(filter(None, [_constraint_notes(node), *one_of_notes(node, document)]))
    )
    if notes:
        comment = f"{comment} [{notes}]" if comment else f"[{notes}]"
    return comment
