"""The Code Mode SDK (`tools:sdk`): how tool schemas render as typed Python."""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools.actors import FrozenDict, FrozenList
from dsh_tools.codebridge._sdk import (
    SDK_INSTRUCTIONS,
    SDK_SECTION_NAME,
    SDK_SECTION_ORDER,
    SdkTool,
    render_sdk,
    render_sdk_declarations,
    sdk_fence,
    sdk_type_expression,
)

OPEN_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
DEFAULT: Any = object()


def tool(
    name: str,
    parameters: Any = DEFAULT,
    output: Any = DEFAULT,
    description: str = "",
) -> SdkTool:
    return SdkTool(
        name=name,
        description=description,
        parameters=OPEN_EMPTY if parameters is DEFAULT else parameters,
        output_schema={"type": "string"} if output is DEFAULT else output,
    )


def declarations_of(*tools: SdkTool) -> str:
    text = render_sdk_declarations(list(tools))
    ast.parse(text)
    return text


def output_line(schema: Any) -> str:
    """The alias line the SDK renders for a tool ``t`` whose output is ``schema``."""
    text = declarations_of(tool("t", output=schema))
    lines = [line for line in text.split("\n") if line.startswith("TOutput = ")]
    assert len(lines) == 1, text
    return lines[0].removeprefix("TOutput = ")


def fenced_block(section: str) -> tuple[str, str]:
    """Split a section into (fence, declarations), checking the exact layout."""
    assert section.startswith(SDK_INSTRUCTIONS + "\n\n")
    rest = section[len(SDK_INSTRUCTIONS) + 2 :]
    match = re.match(r"(`{3,})python\n", rest)
    assert match is not None
    fence = match.group(1)
    assert rest.endswith("\n" + fence)
    return fence, rest[match.end() : -len(fence) - 1]


# --- the section contract ----------------------------------------------------------------------


def test_section_is_named_tools_sdk_with_order_150() -> None:
    assert SDK_SECTION_NAME == "tools:sdk"
    assert SDK_SECTION_ORDER == 150


def test_section_layout_is_instructions_then_one_python_fence() -> None:
    tools = [tool("echo", description="Echo a value.")]
    section = render_sdk(tools)
    assert section.startswith(SDK_INSTRUCTIONS + "\n\n```python\n")
    fence, declarations = fenced_block(section)
    assert fence == "```"
    assert declarations == render_sdk_declarations(tools)


@pytest.mark.parametrize(
    "fragment",
    [
        "raises `ToolCallError`",
        "MAY overlap under `asyncio.gather`",
        "lossless JSON",
        "quoted access for exotic names",
        "The available tools:",
    ],
)
def test_instructions_carry_the_pinned_fragments(fragment: str) -> None:
    assert fragment in render_sdk([])


def test_instructions_say_that_results_come_back_in_call_order() -> None:
    # Safe calls run at once, but their results are committed in the order the program made
    # them: a model that reaches for ``as_completed`` or ``asyncio.wait(FIRST_COMPLETED)`` to
    # act on the fastest call must know that an earlier slow one holds the others back.
    text = render_sdk([])
    assert "come back in the order the calls were made" in text
    assert "`as_completed`" in text


def test_instructions_say_that_cancelling_an_await_does_not_stop_the_tool_call() -> None:
    # A program that gives up on a call (asyncio.wait_for timing out) has not undone it: the
    # model must not retry a mutating call believing the first one never happened.
    text = render_sdk([])
    assert "`asyncio.wait_for`" in text
    assert "does not stop the tool call" in text


def test_instructions_end_with_the_tool_list_lead_in() -> None:
    assert SDK_INSTRUCTIONS.startswith("## Writing code for run_code\n\n")
    assert SDK_INSTRUCTIONS.endswith("\n\nThe available tools:")


# --- the type table -------------------------------------------------------------------------------

TYPE_TABLE = [
    ({"type": "string"}, "str"),
    ({"type": "number"}, "float"),
    ({"type": "integer"}, "int"),
    ({"type": "boolean"}, "bool"),
    ({"type": "null"}, "None"),
    ({"type": "string", "enum": ["a", "b"]}, 'Literal["a", "b"]'),
    ({"type": "number", "enum": [1, 2]}, "Literal[1, 2]"),
    ({"type": "integer", "const": 2}, "Literal[2]"),
    ({"type": "boolean", "const": True}, "Literal[True]"),
    ({"type": "null", "const": None}, "None"),
    ({"type": "string", "enum": ["a", "b"], "const": "a"}, 'Literal["a"]'),
    ({"oneOf": [{"type": "string"}, {"type": "null"}]}, "str | None"),
    ({"type": "array", "items": {"type": "number"}}, "list[float]"),
    (
        {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
        'list[Literal["x", "y"]]',
    ),
    ({"type": "array"}, "list[JsonValue]"),
    ({"type": "object"}, "dict[str, JsonValue]"),
    ({"type": "object", "properties": {}}, "dict[str, JsonValue]"),
    ({"type": "object", "additionalProperties": False}, "dict[str, Never]"),
    (
        {"type": "object", "properties": {}, "additionalProperties": False},
        "dict[str, Never]",
    ),
    ({}, "JsonValue"),
]


@pytest.mark.parametrize(("schema", "expected"), TYPE_TABLE, ids=[e for _, e in TYPE_TABLE])
def test_type_table_row_renders_as_specified(schema: dict[str, Any], expected: str) -> None:
    assert output_line(schema) == expected


def test_null_enum_renders_none() -> None:
    assert output_line({"type": "null", "enum": [None]}) == "None"


def test_literal_values_are_json_strings_decimal_ints_repr_floats_and_python_booleans() -> None:
    assert output_line({"type": "number", "enum": [1.5, 1e300, -2]}) == "Literal[1.5, 1e+300, -2]"
    assert output_line({"type": "boolean", "enum": [True, False]}) == "Literal[True, False]"
    assert output_line({"type": "integer", "const": 2**64 - 1}) == f"Literal[{2**64 - 1}]"
    assert (
        output_line({"type": "string", "enum": ['say "hi"', "é\n\\"]})
        == 'Literal["say \\"hi\\"", "é\\n\\\\"]'
    )


def test_one_of_branches_are_joined_without_deduplication() -> None:
    schema = {"oneOf": [{"type": "null"}, {"type": "null"}, {"type": "integer"}]}
    assert output_line(schema) == "None | None | int"


# --- TypedDict blocks -----------------------------------------------------------------------------


def test_closed_object_renders_a_closed_class_form_typed_dict() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
        "required": ["id"],
        "additionalProperties": False,
    }
    text = declarations_of(tool("t", output=schema))
    assert (
        "class TOutput(TypedDict, closed=True):\n    id: int\n    label: NotRequired[str]\n\n"
    ) in text


def test_nested_open_object_is_defined_before_its_root_with_comments() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute file path"},
            "limit": {"type": "number"},
            "opts": {
                "type": "object",
                "additionalProperties": True,
                "properties": {"deep": {"type": "boolean"}},
                "required": ["deep"],
            },
        },
        "required": ["path"],
    }
    text = declarations_of(tool("read_file", parameters=parameters))
    nested = "class ReadFileArgsOpts(TypedDict, extra_items=JsonValue):\n    deep: bool"
    root = (
        "class ReadFileArgs(TypedDict, extra_items=JsonValue):\n"
        "    # Absolute file path\n"
        "    path: str\n"
        "    limit: NotRequired[float]\n"
        "    opts: NotRequired[ReadFileArgsOpts]"
    )
    assert nested + "\n\n" + root + "\n\n" in text


def test_hoisted_names_use_item_option_and_field_segments() -> None:
    entry = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}
    output = {
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": entry},
            "either": {"oneOf": [{"type": "null"}, entry]},
            "": entry,
            "x-y_z": entry,
        },
    }
    text = declarations_of(tool("t", output=output))
    assert '    "rows": NotRequired[list[TOutputRowsItem]],' in text
    assert '    "either": NotRequired[None | TOutputEitherOption2],' in text
    assert '    "": NotRequired[TOutputField],' in text
    assert '    "x-y_z": NotRequired[TOutputXYZ],' in text
    for name in ("TOutputRowsItem", "TOutputEitherOption2", "TOutputField", "TOutputXYZ"):
        assert f"class {name}(TypedDict, extra_items=JsonValue):\n    v: str" in text


def test_names_are_assigned_in_pre_order_and_blocks_emitted_in_post_order() -> None:
    leaf = {"type": "object", "properties": {"v": {"type": "string"}}}
    output = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": leaf}},
            "c": leaf,
        },
    }
    text = declarations_of(tool("t", output=output))
    order = [m.group(1) for m in re.finditer(r"^class (\w+)\(TypedDict", text, re.MULTILINE)]
    assert order == ["TOutputAB", "TOutputA", "TOutputC", "TOutput"]


def test_taken_nested_names_get_the_first_free_suffix() -> None:
    leaf = {"type": "object", "properties": {"v": {"type": "string"}}}
    output = {"type": "object", "properties": {"a-b": leaf, "a_b": leaf, "aB": leaf}}
    text = declarations_of(tool("t", output=output))
    assert '"a-b": NotRequired[TOutputAB],' in text
    assert '"a_b": NotRequired[TOutputAB_2],' in text
    assert '"aB": NotRequired[TOutputAB_3],' in text


def test_description_on_object_root_is_one_comment_line_above_its_declaration() -> None:
    # No property stands above the root to carry it (an output's is what the tool returns).
    schema = {"type": "object", "description": "the\nroot", "properties": {"a": {}}}
    text = declarations_of(tool("t", output=schema))
    assert "\n\n# the root\nclass TOutput(TypedDict, extra_items=JsonValue):\n" in text
    assert text.count("the root") == 1


# --- totality -------------------------------------------------------------------------------------

NOT_A_SCHEMA: list[Any] = [None, 42, "string-schema", ["type", "object"]]


@pytest.mark.parametrize("schema", NOT_A_SCHEMA, ids=[repr(s) for s in NOT_A_SCHEMA])
def test_a_root_that_is_not_a_schema_object_renders_any(schema: Any) -> None:
    text = declarations_of(tool("t", parameters=schema, output=schema))
    assert "TArgs = Any\n\nTOutput = Any\n\n" in text


IRREGULAR = [
    ({"oneOf": [{"type": "string"}]}, "str"),
    ({"oneOf": []}, "JsonValue"),
    ({"$ref": "#/defs/x"}, "JsonValue"),
    ({"type": "object", "properties": 7}, "dict[str, JsonValue]"),
    ({"type": "string", "enum": [1, 2]}, "Literal[1, 2]"),
    ({"type": "string", "enum": []}, "str"),
    ({"type": "object", "properties": {}, "required": [7]}, "dict[str, JsonValue]"),
    ({"type": "widget"}, "JsonValue"),
]


@pytest.mark.parametrize(("schema", "expected"), IRREGULAR, ids=[repr(s) for s, _ in IRREGULAR])
def test_irregular_schemas_still_render_what_they_say(schema: Any, expected: str) -> None:
    assert output_line(schema) == expected


def test_an_untypable_property_is_json_value_and_its_siblings_stay_typed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ok": {"type": "object", "properties": {"v": {"type": "string"}}},
            "dangling": {"$ref": "#/defs/a"},
            "junk": 42,
        },
    }
    text = declarations_of(tool("t", output=schema))
    assert (
        "class TOutput(TypedDict, extra_items=JsonValue):\n"
        "    ok: NotRequired[TOutputOk]\n"
        "    dangling: NotRequired[JsonValue]\n"
        "    junk: NotRequired[JsonValue]"
    ) in text


def test_a_schema_that_contains_itself_renders_json_value_where_it_recurs() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["self"] = schema
    text = declarations_of(tool("t", output=schema))
    assert (
        "class TOutput(TypedDict, extra_items=JsonValue):\n    self: NotRequired[JsonValue]" in text
    )


def test_frozen_schemas_render_like_plain_ones() -> None:
    frozen = FrozenDict(
        type="object",
        properties=FrozenDict(a=FrozenDict(type="string")),
        required=FrozenList(["a"]),
    )
    plain = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert render_sdk([tool("t", output=frozen)]) == render_sdk([tool("t", output=plain)])


def test_malformed_tool_entries_do_not_raise() -> None:
    class Odd:
        name = 7
        description = None
        parameters = object()

    text = render_sdk_declarations([Odd()])  # type: ignore[list-item]
    ast.parse(text)
    assert "Tool7Args = Any" in text
    assert "Tool7Output = Any" in text


# --- hostile descriptions -------------------------------------------------------------------------


def test_property_description_with_a_newline_stays_one_comment_line() -> None:
    schema = {
        "type": "object",
        "properties": {"p": {"type": "string", "description": "a pattern\nclass Evil: pass"}},
    }
    text = declarations_of(tool("t", output=schema))
    assert "    # a pattern class Evil: pass\n    p: NotRequired[str]" in text
    assert "\nclass Evil" not in text


def test_every_unicode_whitespace_run_collapses_in_comments() -> None:
    text = declarations_of(tool("t", description="  one\r\ntwo\u2028three\x0b\x1c four\t "))
    assert "    # one two three four\n" in text


def test_blank_descriptions_emit_no_comment() -> None:
    text = declarations_of(tool("t", description=" \n\t "))
    assert "class Tools:\n    async def t(" in text


def test_control_characters_and_lone_surrogates_are_escaped_in_comments() -> None:
    section = render_sdk([tool("t", description="nul\x00 esc\x1b sur\ud800 ok")])
    section.encode("utf-8")
    ast.parse(fenced_block(section)[1])
    assert "    # nul\\x00 esc\\x1b sur\\ud800 ok\n" in section


# --- deep schemas and stack safety ----------------------------------------------------------------


def nullable_chain(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "null"}]}
    return schema


def test_level_one_of_chain_renders_a_flat_union_expression() -> None:
    expression = sdk_type_expression(nullable_chain(5000))
    assert expression.startswith("str | None | None")
    assert expression.endswith(" | None")
    assert len(expression) == len("str") + 5000 * len(" | None")


def test_deep_output_tool_renders_and_parses_at_the_default_recursion_limit() -> None:
    assert sys.getrecursionlimit() <= 1000
    deep = tool("deep_output", parameters={"type": "object", "properties": {}})
    deep = SdkTool(deep.name, deep.description, deep.parameters, nullable_chain(5000))
    text = declarations_of(deep)
    assert "DeepOutputArgs = dict[str, JsonValue]" in text
    root = [line for line in text.split("\n") if line.startswith("DeepOutputOutput = ")]
    assert len(root) == 1
    assert root[0].startswith("DeepOutputOutput = str | None")


def test_long_unions_chain_through_part_aliases_that_keep_every_term() -> None:
    text = declarations_of(tool("deep", output=nullable_chain(5000)))
    aliases = dict(
        line.split(" = ", 1) for line in text.split("\n") if line.startswith("DeepOutput")
    )
    terms: list[str] = []
    pending = ["DeepOutput"]
    while pending:
        for term in aliases[pending.pop()].split(" | "):
            if term.startswith("DeepOutputPart"):
                pending.append(term)
            else:
                terms.append(term)
    assert terms == ["str"] + ["None"] * 5000


def test_deep_arrays_render_parseable_declarations() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    text = declarations_of(tool("t", output=schema))
    aliases = dict(line.split(" = ", 1) for line in text.split("\n") if line.startswith("TOutput"))
    lists = 0
    expression = aliases["TOutput"]
    while True:
        lists += expression.count("list[")
        inner = re.search(r"TOutputPart\d+", expression)
        if inner is None:
            break
        expression = aliases[inner.group(0)]
    assert lists == 5000
    assert expression.endswith("[int" + "]" * expression.count("list["))


def test_deep_objects_render_parseable_declarations() -> None:
    schema: dict[str, Any] = {"type": "boolean"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    text = declarations_of(tool("t", output=schema))
    assert text.count("(TypedDict, extra_items=JsonValue):") == 5000
    assert "\n    a: bool\n" in text


def test_deep_schema_under_a_property_and_an_array_item_parses() -> None:
    output = {
        "type": "object",
        "properties": {"deep": {"type": "array", "items": nullable_chain(3000)}},
    }
    declarations_of(tool("t", output=output))


# --- the worked example, order, empty set, collisions ---------------------------------------------

WORKED_EXAMPLE = """\
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]

class BashArgs(TypedDict, extra_items=JsonValue):
    command: str

class BashOutput(TypedDict, closed=True):
    exitCode: int

MyMcpToolArgs = dict[str, JsonValue]

MyMcpToolOutput = list[str]

ToolName = Literal["bash", "my-mcp.tool"]

class ToolCallError(Exception):
    tool_name: ToolName
    message: str

class Tools:
    # Run a shell command.
    async def bash(self, args: BashArgs, /) -> BashOutput: ...
    # Exotic name.
    @overload
    def __getitem__(self, name: Literal["my-mcp.tool"]) -> \
Callable[[MyMcpToolArgs], Awaitable[MyMcpToolOutput]]: ...

tools: Tools"""

BASH = tool(
    "bash",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
    output={
        "type": "object",
        "additionalProperties": False,
        "properties": {"exitCode": {"type": "integer"}},
        "required": ["exitCode"],
    },
    description="Run a shell command.",
)
EXOTIC = tool(
    "my-mcp.tool",
    parameters={"type": "object"},
    output={"type": "array", "items": {"type": "string"}},
    description="Exotic name.",
)


def test_worked_example_renders_byte_for_byte() -> None:
    section = render_sdk([EXOTIC, BASH])
    assert section == SDK_INSTRUCTIONS + "\n\n```python\n" + WORKED_EXAMPLE + "\n```"
    assert section.index("async def bash") < section.index('"my-mcp.tool"]) ->')
    ast.parse(WORKED_EXAMPLE)


def test_rendering_is_independent_of_input_order() -> None:
    assert render_sdk([BASH, EXOTIC]) == render_sdk([EXOTIC, BASH])


def test_unchanged_tool_set_renders_byte_identical_text() -> None:
    first = render_sdk([BASH, EXOTIC])
    copies = [
        SdkTool(t.name, t.description, dict(t.parameters), dict(t.output_schema))
        for t in (EXOTIC, BASH)
    ]
    assert render_sdk(copies) == first
    assert render_sdk([BASH, EXOTIC]) == first


def test_duplicate_entries_render_deterministically_with_suffixed_names() -> None:
    text = declarations_of(BASH, EXOTIC, BASH)
    assert text == declarations_of(BASH, BASH, EXOTIC)
    assert "class BashArgs(TypedDict" in text
    assert "class BashArgs_2(TypedDict" in text
    assert "class BashOutput_2(TypedDict" in text
    assert "async def bash(self, args: BashArgs_2, /) -> BashOutput_2: ..." in text


def test_duplicate_names_keep_input_order() -> None:
    first = tool("same", output={"type": "string"}, description="first")
    second = tool("same", output={"type": "integer"}, description="second")
    text = declarations_of(second, first)
    assert "SameOutput = int" in text
    assert "SameOutput_2 = str" in text
    assert text.index("# second") < text.index("# first")


def test_empty_tool_set_renders_never_and_an_empty_tools_class() -> None:
    text = declarations_of()
    assert "ToolName = Never" in text
    assert "class Tools:\n    pass" in text
    assert text.endswith("\n\ntools: Tools")


def test_colliding_tool_bases_get_suffixed_root_names_in_order() -> None:
    shape = {"type": "object", "properties": {"x": {"type": "string"}}}
    text = declarations_of(tool("my_tool", shape), tool("my-tool", shape))
    assert "class MyToolArgs(TypedDict" in text
    assert "class MyToolArgs_2(TypedDict" in text
    assert '__getitem__(self, name: Literal["my-tool"]) -> Callable[[MyToolArgs], ' in text
    assert "async def my_tool(self, args: MyToolArgs_2, /)" in text


def test_keyword_or_non_identifier_property_forces_the_functional_form() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "content-type": {"type": "string"},
            "class": {"type": "integer", "const": 2},
        },
        "required": ["content-type"],
    }
    text = declarations_of(tool("http", parameters=schema))
    assert (
        'HttpArgs = TypedDict("HttpArgs", {\n'
        '    "content-type": str,\n'
        '    "class": NotRequired[Literal[2]],\n'
        "}, closed=True)"
    ) in text


def test_functional_form_keeps_property_comments() -> None:
    schema = {
        "type": "object",
        "properties": {"__dunder": {"type": "string", "description": "why"}},
    }
    text = declarations_of(tool("t", output=schema))
    assert (
        'TOutput = TypedDict("TOutput", {\n'
        "    # why\n"
        '    "__dunder": NotRequired[str],\n'
        "}, extra_items=JsonValue)"
    ) in text


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("read_file", "ReadFile"),
        ("3d-render", "Tool3dRender"),
        ("", "Tool"),
        ("---", "Tool"),
        ("файл", "Tool"),
        ("getHTTP.v2", "GetHTTPV2"),
    ],
)
def test_tool_base_names_follow_the_pascal_rule(name: str, base: str) -> None:
    text = declarations_of(tool(name, output={"type": "string"}))
    assert f"{base}Output = str" in text


@pytest.mark.parametrize(
    "name",
    [
        "class",
        "None",
        "async",
        "__class__",
        "__init__",
        "ﬁle",
        "a b",
        "x-y",
        "9lives",
        "bash\n",
        'q"uote',
        "back\\slash",
    ],
)
def test_exotic_tool_names_use_item_access(name: str) -> None:
    text = declarations_of(tool(name))
    assert "    @overload\n    def __getitem__(self, name: Literal[" in text
    assert "async def" not in text


@pytest.mark.parametrize("name", ["echo", "match", "type", "_", "_private", "keys", "self"])
def test_bare_eligible_tool_names_become_async_methods(name: str) -> None:
    text = declarations_of(tool(name))
    assert f"    async def {name}(self, args: " in text


# --- fences and parseability -------------------------------------------------------------------


def test_fence_outgrows_every_backtick_run_in_the_declarations() -> None:
    section = render_sdk(
        [tool("t", description="use ```` fences", output={"type": "string", "enum": ["`````"]})]
    )
    fence, declarations = fenced_block(section)
    assert fence == "``````"
    assert ast.parse(declarations)


def test_fence_is_at_least_three_backticks() -> None:
    assert sdk_fence("no backticks") == "```"
    assert sdk_fence("a `b` ``c``") == "```"
    assert sdk_fence("```") == "````"


HOSTILE_TEXTS = [
    '"""',
    "'''",
    '"""); import os; ("""',
    "```\n# end\n```python",
    "\\",
    "x\\",
    "# not a comment",
    "\x00",
    "\ud800",
    "\r",
    "\u2028",
    "{{template}}",
    "é 漢字 😀",
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=[repr(t) for t in HOSTILE_TEXTS])
def test_hostile_text_everywhere_keeps_declarations_parseable(text: str) -> None:
    schema = {
        "type": "object",
        "description": text,
        "properties": {
            text: {"type": "string", "description": text, "enum": [text], "title": text},
            "plain": {"type": "string", "description": text},
        },
    }
    section = render_sdk([tool(text, schema, schema, description=text)])
    section.encode("utf-8")
    _fence, declarations = fenced_block(section)
    ast.parse(declarations)
    assert all(not line.lstrip().startswith("`") for line in declarations.split("\n"))


# --- property: random subset schemas ---------------------------------------------------------

_names = st.text(alphabet=st.sampled_from(list("abAB_-.1 `\"'\\\n\u00e9")), min_size=0, max_size=6)
_scalar_type = st.sampled_from(["string", "number", "integer", "boolean", "null"])


def _scalar_schema(draw: Any) -> dict[str, Any]:
    kind = draw(_scalar_type)
    values = {
        "string": st.text(max_size=5),
        "number": st.one_of(st.integers(-5, 5), st.floats(-1e6, 1e6).filter(lambda f: f != 0)),
        "integer": st.integers(-(2**63), 2**64 - 1),
        "boolean": st.booleans(),
        "null": st.none(),
    }[kind]
    schema: dict[str, Any] = {"type": kind}
    if draw(st.booleans()):
        schema["enum"] = draw(st.lists(values, min_size=1, max_size=3))
        if draw(st.booleans()):
            schema["const"] = draw(st.sampled_from(schema["enum"]))
    elif draw(st.booleans()):
        schema["const"] = draw(values)
    return schema


@st.composite
def subset_schemas(draw: Any, depth: int = 0) -> dict[str, Any]:
    choice = draw(st.integers(0, 5 if depth < 4 else 1))
    schema: dict[str, Any]
    if choice == 0:
        schema = _scalar_schema(draw)
    elif choice == 1:
        schema = {}
    elif choice == 2:
        schema = {"type": "array"}
        if draw(st.booleans()):
            schema["items"] = draw(subset_schemas(depth + 1))
    elif choice == 3:
        schema = {"oneOf": draw(st.lists(subset_schemas(depth + 1), min_size=2, max_size=3))}
    else:
        schema = {"type": "object"}
        if draw(st.booleans()):
            schema["additionalProperties"] = draw(st.booleans())
        if draw(st.booleans()):
            properties = draw(st.dictionaries(_names, subset_schemas(depth + 1), max_size=4))
            schema["properties"] = properties
            if properties and draw(st.booleans()):
                schema["required"] = draw(
                    st.lists(st.sampled_from(sorted(properties)), unique=True)
                )
    if draw(st.booleans()):
        schema["description"] = draw(st.text(max_size=8))
    return schema


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(_names, st.text(max_size=12), subset_schemas(), subset_schemas()),
        max_size=4,
    ),
    st.randoms(use_true_random=False),
)
def test_random_subset_schemas_render_parseable_deterministic_sdks(
    entries: list[tuple[str, str, dict[str, Any], dict[str, Any]]], random: Any
) -> None:
    tools = [
        SdkTool(name, description, params, output) for name, description, params, output in entries
    ]
    section = render_sdk(tools)
    _fence, declarations = fenced_block(section)
    ast.parse(declarations)
    assert "= Any\n" not in declarations
    shuffled = list(tools)
    random.shuffle(shuffled)
    if len({t.name for t in tools}) == len(tools):
        assert render_sdk(shuffled) == section
    assert render_sdk(tools) == section
