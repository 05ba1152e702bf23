"""Export projected tool schemas to the OpenAI and Anthropic function-calling formats.

The input is what ``system.tools.schemas(agent)`` or ``system.assemble_prompt(agent).tools``
returns: a list of ``{"name", "description", "parameters"}`` dicts. The output is a fresh list of
plain, detached ``dict``/``list`` values (nothing is shared with the input), ready to be sent as
the ``tools`` field of a request:

- OpenAI Chat Completions: ``{"type": "function", "function": {"name", "description",
  "parameters"[, "strict"]}}``;
- OpenAI Responses API (``api="responses"``): the flat ``{"type": "function", "name",
  "description", "parameters", "strict"}``;
- Anthropic Messages: ``{"name", "description", "input_schema"}``.

Function names leave the system here, so they are mapped to what providers accept
(``^[a-zA-Z0-9_-]{1,64}$``) with a ``ToolNameMap`` built from the exported names: ``time.now``
is exported as ``time_now``; a provider adapter built from the same tools maps the model's call
back with ``ToolNameMap.to_registry``.

Strict mode (OpenAI Structured Outputs for function calls) accepts only schemas in which every
object is closed and every property is required. ``to_openai_strict_schema`` rewrites what can be
rewritten without changing which calls the registry accepts: an object with no
``additionalProperties`` key is closed, which only narrows what the model may send; ``oneOf``
becomes ``anyOf``, which the registry still checks as exactly-one; an optional property becomes
required and nullable (its ``default`` a note, see below), and the registry's argument validation
(``define_tool`` and ``@tool``) treats the model's explicit ``null`` for it as absent; OpenAPI's
``nullable: true`` beside a ``type`` (as servers generated from OpenAPI documents write it)
becomes that type or ``"null"``, and the keyword, which strict mode does not know, goes; a ``$ref``
beside other keywords becomes the one branch of an ``anyOf`` beside them, the same schema in the
spelling strict mode takes; an ``enum`` or ``const`` without a ``type`` gets its values' type.
Keywords strict mode refuses (``_STRICT_REFUSED``: ``minLength``, ``uniqueItems``,
``propertyNames``, ``default``..., a ``format`` it does not know, a ``pattern`` with a
lookaround) move into the node's ``description`` as notes (``minLength=3``): the model still
reads them, and the registry still enforces them, since it validates against the tool's own
schema. What cannot be rewritten (explicitly open objects, objects whose
``patternProperties`` or ``unevaluatedProperties`` admit keys they do not list or whose
``required`` names keys they do not declare, objects built from ``allOf`` parts, and values of
any shape: a schema with no type or the schema ``true``, an object that lists no keys, an array
with no item schema; a value whose schema is ``false``; and tuples, whose ``prefixItems`` (or
older drafts' list of ``items``) strict mode does not read) is reported, and so is a strict
schema larger than strict mode takes (``_over_limits``). Every walk here is iterative, so
schemas nested thousands of levels deep export at the default recursion limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from ..registry import LosslessJsonError, accepts_null, scalar_type_of, thaw
from ._names import ToolNameMap

__all__ = ["to_anthropic_tools", "to_openai_strict_schema", "to_openai_tools"]

OpenAIApi = Literal["chat", "responses"]
StrictMode = bool | Literal["auto"]

_STRICT_REFUSED: Final = (
    "minLength",
    "maxLength",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "default",
)
"""Keywords OpenAI's strict mode refuses in a schema; ``_strictify`` turns them into notes
(an optional property's ``default`` too: its null stands for "absent", which is that value)."""
_STRICT_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""The string formats strict mode knows; any other ``format`` becomes a note."""
_LOOKAROUNDS: Final = ("(?=", "(?!", "(?<=", "(?<!")
_ROOT_UNIONS: Final = ("oneOf", "anyOf", "allOf")
"""Keywords the Anthropic Messages API refuses at the root of a tool's ``input_schema``."""
_OPENAI_ROOT_REFUSED: Final = ("oneOf", "anyOf", "allOf", "enum", "not")
"""Keywords the OpenAI APIs refuse at the root of a function's ``parameters``, strict or not
("schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top
level")."""

OPENAI_MAX_TOOLS: Final = 128
"""The most tools the OpenAI APIs take in one request ("Invalid 'tools': array too long"): the
default ``max_tools`` of the OpenAI exports."""
_OPENAI_DESCRIPTION_CHARS: Final = 1024
"""The longest function description the OpenAI APIs take ("string too long"); the parameters'
descriptions have no such limit."""
_CONTINUED: Final = " [continued in the parameters' description]"

# The sizes strict mode takes in one schema; over any, the API refuses the whole request.
_STRICT_MAX_PROPERTIES: Final = 5000
_STRICT_MAX_NESTING: Final = 10
"""Levels of objects nested in objects, the root object the first."""
_STRICT_MAX_STRING_CHARS: Final = 120_000
"""Characters of all property names, definition names, enum values and const values."""
_STRICT_MAX_ENUM_VALUES: Final = 1000
_STRICT_LONG_ENUM: Final = 250
"""An enum of more string values than this holds at most ``_STRICT_MAX_ENUM_CHARS``."""
_STRICT_MAX_ENUM_CHARS: Final = 15_000

# Keywords whose value is one subschema, a list of subschemas, or a map of named subschemas.
_ONE_SCHEMA = ("items", "additionalItems", "not", "contains", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# The keywords whose subschemas each describe a whole value (not a partial constraint like an
# allOf branch or a "then"): such a schema must say what the value is for strict mode.
_VALUE_SCHEMAS = ("properties", "$defs", "definitions", "items", "prefixItems", "anyOf", "oneOf")
# A schema with none of these keywords declares no type: it accepts any JSON value, or (an
# anyOf branch that only lists "required" keys) any value but some objects.
_DECLARING = ("type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "not")


def _tool_entries(
    schemas: Iterable[Mapping[str, Any]], provider: str
) -> list[tuple[str, str, Any]]:
    """Check and detach every ``{name, description, parameters}`` entry, in order."""
    if isinstance(schemas, (str, bytes, Mapping)) or not isinstance(schemas, Iterable):
        raise TypeError(
            f"{provider} export takes a list of tool schemas (name, description, parameters), "
            f"got {type(schemas).__name__}"
        )
    entries: list[tuple[str, str, Any]] = []
    seen: set[str] = set()
    for index, schema in enumerate(schemas):
        where = f"tools[{index}]"
        if not isinstance(schema, Mapping):
            if hasattr(schema, "parameters") and hasattr(schema, "execute"):
                # A definition (``@tool``, ``define_tool``) rather than what an agent sees of it.
                raise TypeError(
                    f"{where} is a tool definition ({type(schema).__name__}), not a tool schema "
                    "dict: export what an agent sees, e.g. "
                    f"to_{provider.lower()}_tools(system.tools.schemas(agent))"
                )
            raise TypeError(f"{where} must be a tool schema dict, got {type(schema).__name__}")
        name = schema.get("name")
        if type(name) is not str or not name:
            raise ValueError(f"{where}.name must be a non-empty str")
        description = schema.get("description", "")
        if type(description) is not str:
            raise ValueError(f'tool "{name}" description must be a str')
        if name in seen:
            raise ValueError(f'tool "{name}" appears twice; tool names must be unique')
        seen.add(name)
        try:
            parameters = thaw(schema.get("parameters"), f"{where}.parameters")
        except LosslessJsonError as exc:
            raise ValueError(f'tool "{name}" parameters must be JSON data: {exc}') from None
        if type(parameters) is not dict or parameters.get("type") != "object":
            raise ValueError(
                f'tool "{name}" parameters must be an object schema ({{"type": "object", ...}}) '
                f"for {provider}"
            )
        entries.append((name, description, parameters))
    return entries


Schema = dict[str, Any] | bool
"""A subschema: a dict, or ``true`` (any value) / ``false`` (no value)."""


def _children(node: dict[str, Any], path: str) -> list[tuple[Schema, str, bool]]:
    """The subschemas directly under ``node`` (dicts and booleans), with their paths and
    whether each describes a whole value (``_VALUE_SCHEMAS``), in key order."""
    found: list[tuple[Schema, str, bool]] = []
    for key, value in node.items():
        whole = key in _VALUE_SCHEMAS
        if key in _SCHEMA_MAPS and type(value) is dict:
            for name, child in value.items():
                if type(child) in (dict, bool):
                    found.append((child, f"{path}.{key}.{name}", whole))
        elif key in _SCHEMA_LISTS and type(value) is list:
            for i, child in enumerate(value):
                if type(child) in (dict, bool):
                    found.append((child, f"{path}.{key}[{i}]", whole))
        elif key in _ONE_SCHEMA and (type(value) is dict or value is True):
            # (not "items": false, which after a tuple's prefixItems only closes the tuple)
            found.append((value, f"{path}.{key}", whole))
        elif key == "additionalProperties" and type(value) is dict:
            found.append((value, f"{path}.{key}", whole))
    return found


def _spell_out_any(parameters: dict[str, Any]) -> None:
    """Give the root an empty ``properties`` when it has none, and every array schema without
    ``items`` an ``{}`` one, in place: the same schema, in the spelling the OpenAI APIs take.
    They refuse the whole request for either omission, strict or not ("object schema missing
    properties", "array schema missing items"), which a tool of no arguments from an MCP
    server (``{"type": "object"}``) or a ``list[Any]`` parameter gives."""
    parameters.setdefault("properties", {})
    stack: list[Schema] = [parameters]
    while stack:
        node = stack.pop()
        if type(node) is not dict:
            continue
        declared = node.get("type")
        if (declared == "array" or (type(declared) is list and "array" in declared)) and (
            "items" not in node
        ):
            node["items"] = {}
        stack.extend(child for child, _, _ in _children(node, ""))


def _boolean_violation(schema: bool, path: str) -> str:
    """Why a boolean schema of a whole value cannot be strict. Schema generators write "any
    value" as ``true`` (schemars, for a Rust MCP server's ``serde_json::Value``): like ``{}``
    it declares no type. ``false`` admits no value, so the property it describes, which
    strict mode makes required, could never be sent."""
    if schema:
        return f"{path} is true and declares no type (strict mode needs one for every value)"
    return f"{path} is false and admits no value (strict mode cannot require it)"


def _is_object_node(node: dict[str, Any]) -> bool:
    declared = node.get("type")
    if declared == "object":
        return True
    if type(declared) is list and "object" in declared:
        return True
    return declared is None and "properties" in node


def _strictify(parameters: dict[str, Any], root: str) -> list[str]:
    """Rewrite ``parameters`` (a private copy) in place for strict mode; return the violations.

    Objects without ``additionalProperties`` are closed; ``oneOf`` becomes ``anyOf``. An object
    that is explicitly open or has a property missing from ``required`` is a violation.
    """
    violations: list[str] = []
    stack: list[tuple[Schema, str, bool]] = [(parameters, root, True)]
    while stack:
        node, path, whole = stack.pop()
        if type(node) is bool:
            if whole:
                violations.append(_boolean_violation(node, path))
            continue
        _spell_nullable(node, parameters)
        if whole:
            violations.extend(_undeclared(node, path))
        violations.extend(_object_parts(node, path))
        if _is_object_node(node):
            violations.extend(_opening_keywords(node, path))
        _note_refused(node)
        if "oneOf" in node:
            if "anyOf" in node:
                violations.append(f"{path} declares both oneOf and anyOf")
            else:
                items = [("anyOf" if k == "oneOf" else k, v) for k, v in node.items()]
                node.clear()
                node.update(items)
        if "$ref" in node and len(node) > 1:
            # Strict mode refuses keywords beside "$ref" (a described Struct parameter has a
            # description there) but takes them beside "anyOf": a one-branch anyOf is the same
            # schema.
            if "anyOf" in node:
                violations.append(f"{path} declares both $ref and anyOf")
            else:
                items = [
                    ("anyOf", [{"$ref": v}]) if k == "$ref" else (k, v) for k, v in node.items()
                ]
                node.clear()
                node.update(items)
        violations.extend(_type_values(node, path))
        if _is_object_node(node):
            additional = node.get("additionalProperties", None)
            if "additionalProperties" not in node:
                node["additionalProperties"] = False
            elif additional is not False:
                violations.append(
                    f"{path}.additionalProperties must be false in strict mode (open objects "
                    "cannot be strict)"
                )
            properties = node.get("properties", {})
            required = node.get("required", [])
            if type(properties) is dict:
                required_names = list(required) if type(required) is list else []
                # A required key the object does not declare: closed for strict mode, the
                # object has no valid value, and a model held to it could never make the call.
                violations.extend(
                    f"{path}.required names {name!r}, which its properties do not declare"
                    for name in required_names
                    if name not in properties
                )
                optional = [name for name in properties if name not in required_names]
                for name in optional:
                    properties[name] = _nullable(properties[name], parameters)
                if optional or "required" not in node:
                    # Every key, as OpenAI's own strict schemas spell it (``[]`` for none).
                    node["required"] = [*required_names, *optional]
        # Reversed, so that violations come out in document order.
        stack.extend(reversed(_children(node, path)))
    return violations


def _over_limits(parameters: dict[str, Any], root: str) -> list[str]:
    """The sizes of the strict schema ``parameters`` that strict mode refuses: more object
    properties, deeper nesting of objects, longer names and values, or more enum values than
    it takes in one schema. The API refuses the whole request for one, naming neither the tool
    nor the place, so the export names both."""
    violations: list[str] = []
    properties = chars = enum_values = 0
    deepest: tuple[int, str] = (0, root)
    stack: list[tuple[Schema, str, int]] = [(parameters, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if type(node) is not dict:
            continue
        if _is_object_node(node):
            depth += 1
            if depth > deepest[0]:
                deepest = (depth, path)
        for key in ("properties", "$defs", "definitions"):
            named = node.get(key)
            if type(named) is dict:
                chars += sum(len(name) for name in named)
                if key == "properties":
                    properties += len(named)
        values = node.get("enum")
        if type(values) is list:
            enum_values += len(values)
            texts = [len(value) for value in values if type(value) is str]
            chars += sum(texts)
            if len(texts) > _STRICT_LONG_ENUM and sum(texts) > _STRICT_MAX_ENUM_CHARS:
                violations.append(
                    f"{path}.enum holds {len(texts):,} strings of {sum(texts):,} characters; "
                    f"strict mode takes at most {_STRICT_MAX_ENUM_CHARS:,} in an enum of more "
                    f"than {_STRICT_LONG_ENUM} values"
                )
        if type(node.get("const")) is str:
            chars += len(node["const"])
        stack.extend((child, child_path, depth) for child, child_path, _ in _children(node, path))
    depth, path = deepest
    if depth > _STRICT_MAX_NESTING:
        if len(path) > 400:  # thousands of levels deep: the start and the end say enough
            path = f"{path[:80]}...{path[-60:]}"
        violations.append(
            f"{path} nests objects {depth:,} levels deep; strict mode takes at most "
            f"{_STRICT_MAX_NESTING}"
        )
    for count, limit, what in (
        (properties, _STRICT_MAX_PROPERTIES, "object properties"),
        (enum_values, _STRICT_MAX_ENUM_VALUES, "enum values"),
        (
            chars,
            _STRICT_MAX_STRING_CHARS,
            "characters of property names, definition names, enum and const values",
        ),
    ):
        if count > limit:
            violations.append(
                f"{root} has {count:,} {what}; strict mode takes at most {limit:,} in one schema"
            )
    return violations


def _undeclared(node: dict[str, Any], path: str) -> list[str]:
    """The violation of a value's schema that leaves the value open: strict mode cannot say
    "any value" (the API refuses a schema without a type), and closing an object that lists
    no keys, or an array with no item schema, would leave the model nothing the tool takes."""
    if not any(key in node for key in _DECLARING):
        return [f"{path} declares no type (strict mode needs one for every value)"]
    if _is_object_node(node) and not any(
        key in node
        for key in (
            "properties",
            "additionalProperties",
            "patternProperties",
            "unevaluatedProperties",
        )
    ):
        return [f"{path} declares no properties (an object of any keys cannot be strict)"]
    if "prefixItems" in node:
        # The API reads no prefixItems in strict mode and refuses the array as untyped.
        return [f"{path}.prefixItems (a tuple) cannot be strict: strict mode types only items"]
    if type(node.get("items")) is list:
        # The same tuple as draft 2019-09 and earlier spell it (MCP servers' schemas often do).
        return [f"{path}.items (a tuple) cannot be strict: strict mode types one items schema"]
    declared = node.get("type")
    arrays = declared == "array" or (type(declared) is list and "array" in declared)
    if arrays and "items" not in node:
        return [f"{path} declares no items (an array of any values cannot be strict)"]
    return []


def _object_parts(node: dict[str, Any], path: str) -> list[str]:
    """The violation of an object built from parts with ``allOf`` (a base and its extension,
    as schemas converted from OpenAPI write it): strict mode closes every object, so each part
    would refuse the keys the others declare, and no value would satisfy them all. A lone
    part that is the whole value (``allOf: [{"$ref": ...}]``) is no such object. So too an
    object whose ``anyOf`` or ``oneOf`` branches are objects ("mode, and x or y"): closed, it
    would refuse the keys its branches require, and each branch the object's own. Branches
    that only constrain its keys (``{"required": [...]}``) are no objects."""
    violations: list[str] = []
    parts = node.get("allOf")
    if type(parts) is list:
        objects = [i for i, part in enumerate(parts) if _is_object_part(part)]
        if len(objects) > 1 or (objects and (len(parts) > 1 or "properties" in node)):
            violations.append(
                f"{path}.allOf builds an object from parts, which strict mode would each close "
                "to the others' keys"
            )
    if "properties" in node:
        for union in ("anyOf", "oneOf"):
            branches = node.get(union)
            if type(branches) is not list:
                continue
            violations.extend(
                f"{path}.{union}[{i}] is an object beside the object's own properties, which "
                "strict mode would each close to the other's keys"
                for i, branch in enumerate(branches)
                if _is_object_part(branch)
            )
    return violations


def _is_object_part(part: object) -> bool:
    return type(part) is dict and ("$ref" in part or _is_object_node(part))


def _opening_keywords(node: dict[str, Any], path: str) -> list[str]:
    """The violations of an object node whose refused keywords admit keys it does not list
    (``patternProperties``, an ``unevaluatedProperties`` other than ``false``). As a note
    such a keyword says nothing that counts: the object is closed for strict mode, and a
    model held to the schema could send none of those keys."""
    found: list[str] = []
    for key, admits in (
        ("patternProperties", node.get("patternProperties", {}) != {}),  # no pattern: none
        ("unevaluatedProperties", node.get("unevaluatedProperties", False) is not False),
    ):
        if admits:
            found.append(
                f"{path}.{key} admits keys strict mode cannot declare (open objects cannot be "
                "strict)"
            )
    return found


def _note_refused(node: dict[str, Any]) -> None:
    """Move the keywords strict mode refuses out of ``node`` into notes at the end of its
    ``description`` (``minLength=3, uniqueItems=true``), in the node's key order. A subschema
    under a refused keyword (``contains``, ``propertyNames``) goes with it, as JSON."""
    _note(node, [key for key in node if _refused(key, node[key])])


def _note(node: dict[str, Any], keys: list[str]) -> None:
    """Move ``keys`` out of ``node`` into notes at the end of its ``description``."""
    notes: list[str] = []
    for key in keys:
        value = node.pop(key)
        text = value if type(value) is str else json.dumps(value, ensure_ascii=False)
        notes.append(f"{key}={text}")
    if not notes:
        return
    description = node.get("description")
    joined = ", ".join(notes)
    node["description"] = (
        f"{description} ({joined})" if type(description) is str and description else joined
    )


def _fit_description(description: str, parameters: dict[str, Any]) -> str:
    """``description`` as the OpenAI APIs take it: one longer than they take (they refuse the
    whole request for it, naming the tool only by its place in the list) keeps what fits, cut
    at a space or a line break where there is one, and the rest opens the parameters'
    description, where the model still reads it."""
    if len(description) <= _OPENAI_DESCRIPTION_CHARS:
        return description
    room = _OPENAI_DESCRIPTION_CHARS - len(_CONTINUED)
    space = max(description.rfind(blank, room // 2, room + 1) for blank in " \n\t")
    cut = space if space > 0 else room
    rest = description[cut:].strip()
    own = parameters.get("description")
    parameters["description"] = f"(The tool's description, continued:) {rest}" + (
        f"\n\n{own}" if type(own) is str and own else ""
    )
    return description[:cut].rstrip() + _CONTINUED


def _refused(key: str, value: Any) -> bool:
    if key in _STRICT_REFUSED:
        return True
    if key == "format":
        return value not in _STRICT_FORMATS
    if key == "pattern":
        return type(value) is str and any(token in value for token in _LOOKAROUNDS)
    return False


def _type_values(node: dict[str, Any], path: str) -> list[str]:
    """Give an ``enum`` or ``const`` without a ``type`` (how msgspec writes a ``Literal`` or an
    ``Enum``) the type of its values, which strict mode requires, nullable when ``null`` is
    one of them; the violation of values of several types, or of objects and arrays."""
    if "type" in node or ("enum" not in node and "const" not in node):
        return []
    key = "enum" if "enum" in node else "const"
    values = node[key] if key == "enum" else [node[key]]
    if type(values) is not list:
        return []  # not a schema the registry takes; the tool's own validation judges it
    kinds: list[str] = []
    for value in values:
        kind = scalar_type_of(value)
        if kind is None:
            return [f"{path}.{key} holds an object or an array (strict mode needs one type)"]
        if kind not in kinds:
            kinds.append(kind)
    if "integer" in kinds and "number" in kinds:
        kinds.remove("integer")  # a number type takes both
    scalars = [kind for kind in kinds if kind != "null"]
    if len(scalars) > 1:
        return [f"{path}.{key} mixes {' and '.join(scalars)} values (strict mode needs one type)"]
    declared: str | list[str] = scalars[0] if scalars else "null"
    if scalars and "null" in kinds:
        declared = [scalars[0], "null"]
    items = list(node.items())
    node.clear()
    for name, value in items:
        if name == key:
            node["type"] = declared
        node[name] = value
    return []


def _spell_nullable(node: dict[str, Any], document: dict[str, Any]) -> None:
    """OpenAPI's ``nullable`` in JSON Schema's spelling, in place, as the registry reads it
    (``accepts_null``): beside a single ``type`` other than ``"null"`` (and no ``enum`` or
    ``const`` without a ``null``, no ``$ref`` or union, which it reads first), ``nullable:
    true`` adds ``"null"`` to the type. Strict mode does not know the keyword, so it goes
    either way: ``nullable: false`` says nothing, and where the registry ignores a ``true``
    (a tool whose own validation decides) the model keeps to the narrower schema."""
    if "nullable" not in node:
        return
    nullable = node.pop("nullable")
    declared = node.get("type")
    if nullable is not True or type(declared) is not str or declared == "null":
        return
    if accepts_null({**node, "nullable": True}, document):
        node["type"] = [declared, "null"]


def _nullable(schema: Any, document: dict[str, Any]) -> Any:
    """An optional property's schema, made to accept ``null`` (which then means "absent").
    Its ``default`` stays with the property, where it becomes a note like every keyword strict
    mode refuses: the model reads what its ``null`` will mean."""
    if type(schema) is not dict:
        return schema
    if "default" in schema and schema["default"] is None:
        del schema["default"]  # null is what the model sends for it anyway
    only, value = _only_value(schema)
    default = schema.get("default", _NO_DEFAULT)
    if only and type(default) is type(value) and default == value:
        # One value it may take, its default (a union's tag, ``kind: Literal["cat"] = "cat"``):
        # required as it is. A null would stand for that value anyway, and a model sending it
        # for a tag leaves the union no branch to pick.
        del schema["default"]
        return schema
    _type_values(schema, "")  # a typed enum takes null in place; a violation is found later
    if accepts_null(schema, document):
        if "default" in schema:
            # Null is one of its values, so it reaches the body as null, not as this default:
            # the usual "default=..." note would tell the model otherwise.
            value = schema.pop("default")
            text = value if type(value) is str else json.dumps(value, ensure_ascii=False)
            note = (
                f"default={text}, which a null does not stand for: null is a value of its own here"
            )
            description = schema.get("description")
            schema["description"] = (
                f"{description} ({note})" if type(description) is str and description else note
            )
        return schema
    declared = schema.get("type")
    plain = not any(key in schema for key in ("$ref", "anyOf", "oneOf", "allOf", "const"))
    if plain and type(declared) is str:
        schema["type"] = [declared, "null"]
        if type(schema.get("enum")) is list:
            schema["enum"] = [*schema["enum"], None]
        return schema
    if plain and type(declared) is list:
        schema["type"] = [*declared, "null"]
        return schema
    # The description stays on the property, where the model reads a property's description
    # (and a described $ref, now alone, needs no anyOf of its own).
    described = {key: schema.pop(key) for key in ("description", "default") if key in schema}
    return {**described, "anyOf": [schema, {"type": "null"}]}


_NO_DEFAULT: Final = object()


def _only_value(schema: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, value)`` when ``schema`` admits one value only (a ``const``, an ``enum`` of
    one), else ``(False, None)``."""
    if "const" in schema:
        return True, schema["const"]
    values = schema.get("enum")
    if type(values) is list and len(values) == 1:
        return True, values[0]
    return False, None


def _name_map(entries: list[tuple[str, str, Any]], names: ToolNameMap | None) -> ToolNameMap:
    if names is None:
        return ToolNameMap(name for name, _, _ in entries)
    if not isinstance(names, ToolNameMap):
        raise TypeError(f"names must be a ToolNameMap, got {type(names).__name__}")
    missing = [name for name, _, _ in entries if name not in names]
    if missing:
        raise ValueError(f"names has no provider name for tool(s) {', '.join(missing)}")
    return names


def to_openai_strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a strict-mode copy of an object-rooted JSON Schema, or raise ``ValueError``.

    Objects without ``additionalProperties`` are closed, ``oneOf`` is spelled ``anyOf`` and every
    optional property becomes required and nullable; an explicitly open object or a value of
    any shape cannot be made strict without changing what the tool accepts, so it is reported
    (every violation, in document order, joined with ``; ``), and so is a rewritten schema
    larger than strict mode takes in one schema. The input is not modified.
    """
    try:
        copy = thaw(schema, "schema")
    except LosslessJsonError as exc:
        raise ValueError(f"schema must be JSON data: {exc}") from None
    if type(copy) is not dict or copy.get("type") != "object":
        raise ValueError('strict mode needs an object-rooted schema ({"type": "object", ...})')
    violations = _strictify(copy, "schema")
    if not violations:
        violations = _over_limits(copy, "schema")
    if violations:
        raise ValueError("schema cannot be used in strict mode: " + "; ".join(violations))
    return copy


def to_openai_tools(
    schemas: Iterable[Mapping[str, Any]],
    *,
    api: OpenAIApi = "chat",
    strict: StrictMode = False,
    names: ToolNameMap | None = None,
    max_tools: int | None = OPENAI_MAX_TOOLS,
) -> list[dict[str, Any]]:
    """Convert projected tool schemas to an OpenAI ``tools`` list (fresh, detached dicts).

    ``api="chat"`` gives the Chat Completions shape ``{"type": "function", "function": {...}}``
    (``strict`` appears only when a tool is strict); ``api="responses"`` gives the Responses API
    shape ``{"type": "function", "name", "description", "parameters", "strict"}`` with ``strict``
    always stated (that API treats an absent flag as strict).

    ``strict=True`` marks every tool strict and raises ``ValueError`` naming each tool whose
    parameters cannot be strict (see ``to_openai_strict_schema``); ``strict="auto"`` marks strict
    only the tools that can be, leaving the others' parameters as they are; ``strict=False``
    (the default) exports the parameters as they are. Every export is spelled as the API takes
    it: the API refuses a root without ``properties`` and an array schema without ``items``,
    which get empty ones (the same schema), and ``oneOf``, ``anyOf``, ``allOf``, ``enum`` and
    ``not`` at the root of ``parameters``, which become notes in its ``description``, as
    ``to_anthropic_tools`` does with the root unions. A tool description longer than the
    1,024 characters the API takes keeps what fits, and the rest opens the parameters'
    description. More than ``max_tools`` tools raise ``ValueError``: by default the 128 the
    OpenAI APIs take in one request; ``None`` for a server that takes more (many
    OpenAI-compatible servers do).

    Names outside ``^[a-zA-Z0-9_-]{1,64}$`` are exported in their provider form from ``names``
    (by default the ``ToolNameMap`` of the exported names, the map an adapter builds with
    ``ToolNameMap.from_schemas`` from the same list). Raises ``TypeError``/``ValueError`` for
    entries that are not ``{name, description, parameters}`` with an object-rooted schema, for
    duplicate names and for a ``names`` map that lacks one of them.
    """
    if api not in ("chat", "responses"):
        raise ValueError(f'api must be "chat" or "responses", got {api!r}')
    if strict not in (True, False, "auto") or type(strict) not in (bool, str):
        raise ValueError(f'strict must be True, False or "auto", got {strict!r}')
    tools: list[dict[str, Any]] = []
    problems: list[str] = []
    entries = _tool_entries(schemas, "OpenAI")
    if max_tools is not None and len(entries) > max_tools:
        raise ValueError(
            f"OpenAI takes at most {max_tools} tools in one request, got {len(entries)}: "
            "show the agent fewer (restrict(allow=...) or an agent's own tools), or pass "
            "max_tools=None for a server that takes more"
        )
    provider = _name_map(entries, names)
    for name, description, parameters in entries:
        # The API refuses the whole request for one of these at a root (an MCP server's "one
        # of these arguments"); as a note the model still reads it, and the tool enforces it.
        # An object built from parts there is found first: noted, its parts' keys would be
        # missing from a root that strict mode closes.
        root_parts = _object_parts(parameters, "parameters")
        _note(parameters, [key for key in parameters if key in _OPENAI_ROOT_REFUSED])
        # A root of no properties is a tool of no arguments (``{"type": "object"}``, as MCP
        # servers declare one), spelled with its empty ``properties`` before it is made
        # strict, as it is for the API anyway (``_spell_out_any``): closed, it takes ``{}``.
        parameters.setdefault("properties", {})
        is_strict = False
        if strict is not False:
            candidate = thaw(parameters)
            violations = root_parts + _strictify(candidate, "parameters")
            if not violations:
                violations = _over_limits(candidate, "parameters")
            if not violations:
                parameters, is_strict = candidate, True
            elif strict is True:
                problems.append(f'tool "{name}": ' + "; ".join(violations))
        _spell_out_any(parameters)
        function: dict[str, Any] = {
            "name": provider.to_provider(name),
            "description": _fit_description(description, parameters),
            "parameters": parameters,
        }
        if api == "responses":
            tools.append({"type": "function", **function, "strict": is_strict})
        else:
            if is_strict:
                function["strict"] = True
            tools.append({"type": "function", "function": function})
    if problems:
        raise ValueError("tools cannot be exported in strict mode: " + " | ".join(problems))
    return tools


def to_anthropic_tools(
    schemas: Iterable[Mapping[str, Any]],
    *,
    cache_control: Mapping[str, Any] | None = None,
    names: ToolNameMap | None = None,
) -> list[dict[str, Any]]:
    """Convert projected tool schemas to an Anthropic Messages ``tools`` list.

    Each entry is ``{"name", "description", "input_schema"}`` (fresh, detached dicts). With
    ``cache_control`` (for example ``{"type": "ephemeral"}``) the last tool carries a copy of it,
    which marks the whole tool list as a cacheable prompt prefix. Names are mapped and errors
    raised like ``to_openai_tools``. The API refuses ``oneOf``, ``anyOf`` and ``allOf`` at the
    root of an ``input_schema``, so there they become notes in its ``description``.
    """
    marker: Any = None
    if cache_control is not None:
        try:
            marker = thaw(cache_control, "cache_control")
        except LosslessJsonError as exc:
            raise ValueError(f"cache_control must be JSON data: {exc}") from None
        if type(marker) is not dict:
            raise TypeError("cache_control must be a dict such as {'type': 'ephemeral'}")
    entries = _tool_entries(schemas, "Anthropic")
    provider = _name_map(entries, names)
    for _, _, params in entries:
        # The API refuses the whole request for one root union (an MCP server's "one of these
        # arguments"); as a note the model still reads it, and the tool still enforces it.
        _note(params, [key for key in params if key in _ROOT_UNIONS])
    tools: list[dict[str, Any]] = [
        {"name": provider.to_provider(name), "description": description, "input_schema": params}
        for name, description, params in entries
    ]
    if marker is not None and tools:
        tools[-1]["cache_control"] = marker
    return tools
