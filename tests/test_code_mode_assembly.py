"""Code Mode: presentation modes, the reserved ``run_code`` transport and prompt assembly
(what each mode shows the model, and to which scope)."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest
from code_mode_support import FakeRuntime, code_system, echo_tool, run_code
from conftest import PausedAtLine, lines_of

from dsh_tools import (
    AssembledPrompt,
    ToolDefinition,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    tool,
)
from dsh_tools.codebridge._assembly import PromptAssembler

NON_NATIVE = ("code", "both")
SDK = "tools:sdk"


def section(prompt: AssembledPrompt, name: str = SDK) -> str | None:
    """The text of the section called ``name``, or None."""
    for entry in prompt.sections:
        if entry.name == name:
            return entry.text
    return None


def names(prompt: AssembledPrompt) -> list[str]:
    """The tool names of an assembly, in order."""
    return [schema["name"] for schema in prompt.tools]


def plain_tool(name: str) -> ToolDefinition:
    """A raw tool with an open object root and a string output."""
    return ToolDefinition(
        name=name,
        description=f"The {name} tool.",
        parameters={"type": "object"},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: name,
    )


def test_native_mode_without_runtime_contributes_every_tool_and_no_sdk() -> None:
    with ToolSystem.start(ToolsConfig(mode="native"), code_runtime=None) as system:
        system.tools.register(echo_tool())
        prompt = system.assemble_prompt()
    assert names(prompt) == ["echo"]
    assert section(prompt) is None


def test_code_mode_contributes_only_run_code_and_an_sdk_without_it() -> None:
    with code_system(mode="code", tools=[echo_tool()]) as system:
        prompt = system.assemble_prompt()
    assert names(prompt) == ["run_code"]
    sdk = section(prompt)
    assert sdk is not None
    assert "class Tools:" in sdk
    assert "async def echo(self, args: EchoArgs, /) -> EchoOutput: ..." in sdk
    assert "def run_code(" not in sdk
    assert '"run_code"' not in sdk
    assert 'ToolName = Literal["echo"]' in sdk


def test_both_mode_contributes_every_tool_plus_run_code_and_the_sdk() -> None:
    with code_system(mode="both", tools=[echo_tool()]) as system:
        prompt = system.assemble_prompt()
    assert names(prompt) == ["echo", "run_code"]
    assert section(prompt) is not None


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_5000_deep_output_schema_assembles(mode: str) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        schema = {"oneOf": [schema, {"type": "null"}]}
    deep = ToolDefinition(
        name="deep_output",
        description="A tool with a very deep output schema.",
        parameters={"type": "object", "properties": {}},
        output=ToolOutput(schema=schema, render=lambda a, v: [{"type": "text", "text": "x"}]),
        execute=lambda args, ctx: "x",
    )
    with code_system(mode=mode, tools=[deep]) as system:
        sdk = section(system.assemble_prompt())
    assert sdk is not None
    assert "DeepOutputArgs = dict[str, JsonValue]" in sdk
    assert any(line.startswith("DeepOutputOutput = str | None") for line in sdk.splitlines())


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_an_assemble_listener_that_drops_the_sdk_and_run_code_is_authoritative(
    mode: str,
) -> None:
    def drop_code_mode(assembly: AssembledPrompt) -> AssembledPrompt:
        return AssembledPrompt(
            sections=[s for s in assembly.sections if s.name != SDK],
            tools=[t for t in assembly.tools if t["name"] != "run_code"],
        )

    with code_system(mode=mode, tools=[echo_tool()]) as system:
        system.tools.on_assemble(drop_code_mode)
        prompt = system.assemble_prompt()
    assert "run_code" not in names(prompt)
    assert section(prompt) is None


def test_an_async_def_assemble_listener_is_refused_when_registered() -> None:
    # assemble_prompt() uses what the listener returns at once: its coroutine failed every
    # assembly afterwards ("an assemble hook returned coroutine").
    async def add_notes(assembly: AssembledPrompt) -> AssembledPrompt:
        return assembly

    with code_system(mode="native", tools=[echo_tool()]) as system:
        with pytest.raises(
            TypeError,
            match=r"^assemble listener \S*add_notes must be synchronous \(a def returning the "
            r"AssembledPrompt\), not async def",
        ):
            system.tools.on_assemble(add_notes)  # type: ignore[arg-type]
        assert names(system.assemble_prompt()) == ["echo"]


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_scoped_tools_sdk_section_shadows_the_generated_one_for_that_scope(
    mode: str,
) -> None:
    with code_system(mode=mode, tools=[echo_tool()]) as system:
        system.agent("A").tools.section(SDK, 150, "SCOPED SDK")
        scoped = system.assemble_prompt("A")
        global_ = system.assemble_prompt()
    assert section(scoped) == "SCOPED SDK"
    global_sdk = section(global_)
    assert global_sdk is not None
    assert "class Tools:" in global_sdk


@pytest.mark.parametrize(
    ("mode", "scoped"), [("code", ["run_code"]), ("both", ["echo", "run_code"])]
)
def test_an_allow_restriction_shapes_the_scoped_tools_sdk_and_bindings(
    mode: str, scoped: list[str]
) -> None:
    runtime = FakeRuntime()
    with code_system(runtime, mode=mode, tools=[echo_tool(), plain_tool("hidden")]) as system:
        lift = system.agent("A").tools.restrict(allow=["echo"])
        prompt = system.assemble_prompt("A")
        assert names(prompt) == scoped
        sdk = section(prompt)
        assert sdk is not None
        assert "async def echo(" in sdk
        assert "hidden" not in sdk
        system.execute(run_code(agent="A"))
        assert list(runtime.requests[0].bindings[0].functions) == ["echo"]
        lift()
        lifted = system.assemble_prompt("A")
    if mode == "both":
        assert names(lifted) == ["echo", "hidden", "run_code"]
    lifted_sdk = section(lifted)
    assert lifted_sdk is not None
    assert "async def hidden(" in lifted_sdk


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_deny_restriction_removes_the_tool_from_sdk_and_bindings(mode: str) -> None:
    runtime = FakeRuntime()
    with code_system(runtime, mode=mode, tools=[plain_tool("denied"), plain_tool("kept")]) as s:
        s.agent("A").tools.restrict(deny=["denied"])
        sdk = section(s.assemble_prompt("A"))
        s.execute(run_code(agent="A"))
    assert sdk is not None
    assert "async def kept(" in sdk
    assert "denied" not in sdk
    assert list(runtime.requests[0].bindings[0].functions) == ["kept"]


RESERVED_NAME = (
    'tool name "run_code" is reserved for the Code Mode presentation transport and cannot be '
    "registered or shadowed"
)
RESERVED_TRANSPORT = (
    'tools.restrict() cannot name reserved Code Mode presentation transport "run_code"; '
    "restrict end-capability tools instead"
)


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_run_code_is_reserved_and_the_same_transport_for_every_scope(mode: str) -> None:
    with code_system(mode=mode, tools=[echo_tool()]) as system:
        scope = system.agent("A")
        with pytest.raises(ValueError) as global_error:
            system.tools.register(plain_tool("run_code"))
        assert str(global_error.value) == RESERVED_NAME
        with pytest.raises(ValueError) as scoped_error:
            scope.tools.register(plain_tool("run_code"))
        assert str(scoped_error.value) == RESERVED_NAME
        with pytest.raises(ValueError) as allow_error:
            scope.tools.restrict(allow=["run_code"])
        assert str(allow_error.value) == RESERVED_TRANSPORT
        with pytest.raises(ValueError) as deny_error:
            scope.tools.restrict(deny=["run_code"])
        assert str(deny_error.value) == RESERVED_TRANSPORT
        scope.tools.register(plain_tool("scoped_safe"))
        scoped_sdk = section(system.assemble_prompt("A"))
        transport = system.tools.get("run_code")
        assert scope.tools.get("run_code") is transport
        assert system.tools.get("run_code", "A") is transport
    assert scoped_sdk is not None
    assert "async def scoped_safe(" in scoped_sdk
    assert transport is not None
    assert transport.description.startswith("Execute a Python program")


def test_native_mode_lets_a_tool_be_called_run_code() -> None:
    with ToolSystem.start(ToolsConfig(mode="native"), code_runtime=None) as system:
        system.tools.register(plain_tool("run_code"))
        assert names(system.assemble_prompt()) == ["run_code"]
        transport = system.tools.get("run_code")
    assert transport is not None
    assert transport.description == "The run_code tool."


@pytest.mark.parametrize(
    ("mode", "order"), [("code", ["run_code"]), ("both", ["run_code", "echo"])]
)
def test_tool_order_can_put_run_code_first(mode: str, order: list[str]) -> None:
    config: dict[str, Any] = {"tool_order": ["run_code", "<unlisted-tools>"]}
    with code_system(mode=mode, tools=[echo_tool()], **config) as system:
        assert names(system.assemble_prompt()) == order


def test_tool_order_naming_a_tool_code_mode_does_not_contribute_fails() -> None:
    config: dict[str, Any] = {"tool_order": ["echo", "<unlisted-tools>"]}
    with (
        code_system(mode="code", tools=[echo_tool()], **config) as system,
        pytest.raises(ValueError) as error,
    ):
        system.assemble_prompt()
    assert str(error.value) == 'tool_order lists unregistered tool "echo"; known tools: run_code'


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_non_native_mode_without_runtime_refuses_every_assembly(mode: str) -> None:
    with ToolSystem.start(ToolsConfig(mode=mode), code_runtime=None) as system:
        system.tools.register(echo_tool())
        for _ in range(2):
            with pytest.raises(RuntimeError) as error:
                system.assemble_prompt()
            assert str(error.value) == (
                f'dsh-tools: mode "{mode}" requires a code runtime — load a code runtime '
                'implementation (e.g. the subprocess code runtime) or set tools mode to "native"'
            )


@pytest.mark.parametrize(
    ("runtime", "got"),
    [
        (5, "int"),
        ("python", "str"),
        (FakeRuntime, "the class FakeRuntime (give an instance of it)"),
    ],
)
def test_a_code_runtime_that_is_no_runtime_is_refused_at_start(runtime: object, got: str) -> None:
    # Not a run_code failure later about the runtime's language "None".
    with pytest.raises(TypeError) as error:
        ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime)  # type: ignore[arg-type]
    assert str(error.value) == (
        "code_runtime must be a CodeRuntime (an object with a language and an async run "
        f"method), DEFAULT or None, got {got}"
    )


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_runtime_of_another_language_refuses_every_assembly(mode: str) -> None:
    runtime = FakeRuntime(language="typescript")
    with code_system(runtime, mode=mode, tools=[echo_tool()]) as system:
        for _ in range(2):
            with pytest.raises(RuntimeError) as error:
                system.assemble_prompt()
            assert str(error.value) == (
                f'dsh-tools: mode "{mode}" generates a Python SDK, but the loaded code '
                'runtime\'s language is "typescript"'
            )


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_an_unchanged_tool_set_assembles_a_byte_identical_sdk(mode: str) -> None:
    with code_system(mode=mode, tools=[echo_tool(), plain_tool("other")]) as system:
        first = section(system.assemble_prompt())
        second = section(system.assemble_prompt())
    assert first is not None
    assert first.encode() == second.encode()  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", NON_NATIVE)
def test_a_stopped_system_assembles_nothing(mode: str) -> None:
    system = code_system(mode=mode, tools=[echo_tool()])
    assert section(system.assemble_prompt()) is not None
    system.stop()
    stopped = r"^the tool system is stopped; start a new one with ToolSystem\.start\(\)$"
    with pytest.raises(RuntimeError, match=stopped):
        system.assemble_prompt()
    with pytest.raises(RuntimeError, match=stopped):
        system.assemble_prompt("A")


def test_max_parallel_sub_calls_is_validated_and_defaults_to_ten() -> None:
    with pytest.raises(ValueError) as error:
        ToolsConfig(mode="code", max_parallel_sub_calls=0)
    assert "max_parallel_sub_calls must be a positive integer" in str(error.value)
    config = ToolsConfig(mode="code")
    assert config.max_parallel_sub_calls == 10
    with ToolSystem.start(config, code_runtime=FakeRuntime()) as system:
        assert system.tools.get("run_code") is not None
    with ToolSystem.start() as default:
        assert default.config.mode == "native"
        assert default.code_runtime is None
        assert default.tools.get("run_code") is None
        assert section(default.assemble_prompt()) is None


def test_the_runtime_request_holds_one_tools_namespace_without_run_code() -> None:
    runtime = FakeRuntime()
    with code_system(runtime, mode="both", tools=[echo_tool()]) as system:
        system.execute(run_code())
    (request,) = runtime.requests
    (namespace,) = request.bindings
    assert namespace.global_name == "tools"
    assert list(namespace.functions) == ["echo"]
    assert "run_code" not in namespace.functions
    assert not hasattr(namespace.functions, "run_code")
    assert namespace.error_class is not None
    assert namespace.error_class.name == "ToolCallError"
    assert namespace.error_class.member_attr == "tool_name"


def test_an_unchanged_registry_reuses_its_assembly_and_no_caller_can_change_it() -> None:
    with code_system(mode="both", tools=[echo_tool(), plain_tool("alpha")]) as system:
        first = system.assemble_prompt()
        with pytest.raises(TypeError):
            first.tools[0]["description"] = "changed"
        with pytest.raises(TypeError):
            first.tools[0]["parameters"]["type"] = "array"
        first.tools.clear()
        first.sections.clear()
        second = system.assemble_prompt()
        assert names(second) == ["alpha", "echo", "run_code"]
        assert section(second) is not None
        assert second.tools is not first.tools  # fresh lists, shared read-only schemas
        assert second.tools[0] == {
            "name": "alpha",
            "description": "The alpha tool.",
            "parameters": {"type": "object"},
        }
        assert [dict(schema) for schema in second.tools] == [
            dict(schema) for schema in system.assemble_prompt().tools
        ]


def test_a_registry_change_is_in_the_next_assembly() -> None:
    with code_system(mode="both", tools=[echo_tool()]) as system:
        before = system.assemble_prompt()
        dispose = system.tools.register(plain_tool("alpha"))
        assert names(system.assemble_prompt()) == ["alpha", "echo", "run_code"]
        assert "alpha" in (section(system.assemble_prompt()) or "")
        dispose()
        assert names(system.assemble_prompt()) == names(before)
        assert system.assemble_prompt("A").tools == before.tools


def stale_assembly_shown_after(pause_at: int) -> list[str] | None:
    """What ``planner`` is shown once a thread assembling for it from the snapshot it read
    just before a registry change (planner loses ``deploy``) was paused at line ``pause_at`` of
    ``assemble`` while another thread assembled for another agent from the new snapshot; None
    when that assembly never reaches the line."""
    with code_system(mode="native", tools=[plain_tool("read"), plain_tool("deploy")]) as system:
        planner = system.agent("planner")
        assert names(system.assemble_prompt("planner")) == ["deploy", "read"]
        stale = PausedAtLine(
            PromptAssembler.assemble.__code__, pause_at, lambda: system.assemble_prompt("planner")
        )
        if not stale.reached:
            return None
        planner.tools.restrict(deny=["deploy"])
        assert names(system.assemble_prompt("coder")) == ["deploy", "read"]
        stale.resume()
        return names(system.assemble_prompt("planner"))


def test_an_assembly_of_a_replaced_snapshot_never_stands_for_the_new_one() -> None:
    for pause_at in lines_of(PromptAssembler.assemble.__code__):
        assert stale_assembly_shown_after(pause_at) in (None, ["read"]), pause_at


def test_assemble_hooks_run_on_every_assembly_with_schemas_they_may_change() -> None:
    with code_system(mode="native", tools=[plain_tool("alpha")]) as system:
        seen: list[int] = []

        def retitle(prompt: AssembledPrompt) -> AssembledPrompt:
            seen.append(len(seen))
            prompt.tools[0]["description"] = f"call {len(seen)}"
            return prompt

        system.tools.on_assemble(retitle)
        assert system.assemble_prompt().tools[0]["description"] == "call 1"
        assert system.assemble_prompt().tools[0]["description"] == "call 2"
        assert seen == [0, 1]


def test_sections_sort_by_a_finite_order_and_refuse_any_other() -> None:
    with ToolSystem.start(code_runtime=None) as system:
        system.tools.section("late", 5, "late")
        system.tools.section("early", 1, "early")
        for order in (float("nan"), float("inf"), float("-inf"), 10**400, -(10**400)):
            with pytest.raises(ValueError, match=r"^section order must be a finite number, got "):
                system.tools.section("odd", order, "odd")
        with pytest.raises(TypeError, match=r"^section order must be a number$"):
            system.tools.section("odd", "1", "odd")  # type: ignore[arg-type]
        assert [s.name for s in system.assemble_prompt().sections] == ["early", "late"]


def test_a_typed_tools_result_keeps_the_shape_its_annotation_declares_in_the_sdk() -> None:
    # What the output contract checks is a projection (a union or a typed map checks as any
    # JSON); a program is shown what the tool returns, so it can read the result's fields.
    @dataclasses.dataclass
    class Item:
        """One item of the stock."""

        sku: str
        count: int

    class Cat(msgspec.Struct, tag="cat"):
        lives: int

    class Dog(msgspec.Struct, tag="dog"):
        good: bool

    @tool
    def stock(shelf: str) -> dict[str, Item]:
        """Items on a shelf by name."""
        return {}

    @tool
    def pet(name: str) -> Cat | Dog:
        """A pet by name."""
        return Cat(lives=9)

    with code_system(mode="code", tools=[stock, pet]) as system:
        sdk = section(system.assemble_prompt())
    assert sdk is not None
    assert "StockOutput = dict[str, Item]\n" in sdk
    assert "# One item of the stock.\nclass Item(TypedDict, extra_items=JsonValue):\n" in sdk
    assert "    sku: str\n    count: int\n" in sdk
    assert "PetOutput = Cat | Dog\n" in sdk
    assert '    type: Literal["cat"]\n    lives: int\n' in sdk
