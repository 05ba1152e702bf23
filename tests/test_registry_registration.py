"""Registration, layers and resolution."""

from __future__ import annotations

import gc
import math
import threading
import tracemalloc
from typing import Any

import pytest
from conftest import call, echo, fixture, text, text_tool

from dsh_tools import ExecuteBatch, ToolCall, ToolDefinition, ToolsConfig, ToolSystem


def batch_of(name: str) -> ExecuteBatch:
    return ExecuteBatch(calls=[ToolCall("b1", name, "{}")])


def names(schemas: list[dict[str, Any]]) -> list[str]:
    return [s["name"] for s in schemas]


def deep_one_of(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "null"}]}
    return schema


def one_of_depth(schema: Any) -> int:
    layers = 0
    while "oneOf" in schema:
        layers += 1
        schema = schema["oneOf"][0]
    assert schema == {"type": "string"}
    return layers


def test_rp1_schemas_project_exactly_name_description_parameters(system: ToolSystem) -> None:
    system.tools.register(
        echo(
            finalize_content=lambda exec, result: None,
            present_call=lambda args: None,
            present_result=lambda args, result: None,
            timeout_ms=5000,
            is_concurrency_safe=lambda args: True,
        )
    )
    schemas = system.tools.schemas()
    assert schemas == [
        {
            "name": "echo",
            "description": "echo arguments back",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        }
    ]
    assert sorted(schemas[0]) == ["description", "name", "parameters"]


def test_rp2_mutating_returned_schemas_does_not_touch_the_registry(system: ToolSystem) -> None:
    system.tools.register(echo())
    first = system.tools.schemas()
    first[0]["parameters"]["properties"]["extra"] = {"type": "number"}
    first[0]["description"] = "changed"
    first[0]["name"] = "renamed"
    assert system.tools.schemas() == [
        {
            "name": "echo",
            "description": "echo arguments back",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        }
    ]


def test_rp3_schemas_project_a_5000_deep_one_of_without_recursion_error(
    system: ToolSystem,
) -> None:
    system.tools.register(
        fixture("deep", parameters={"type": "object", "properties": {"v": deep_one_of(5000)}})
    )
    (schema,) = system.tools.schemas()
    assert one_of_depth(schema["parameters"]["properties"]["v"]) == 5000


def test_rp4_lossy_parameters_register_but_fail_projection(system: ToolSystem) -> None:
    system.tools.register(
        fixture("lossy-schema", parameters={"type": "object", "default": float("nan")})
    )
    with pytest.raises(
        ValueError,
        match=r'^tool "lossy-schema" parameters must be lossless JSON before schema projection',
    ):
        system.tools.schemas()


def test_rp5_a_definition_without_output_is_refused(system: ToolSystem) -> None:
    changes: list[int] = []
    system.tools.on_change(lambda: changes.append(1))
    raw = ToolDefinition(
        name="no-output", description="d", parameters={}, execute=lambda a, c: None
    )
    with pytest.raises(TypeError, match="must declare output"):
        system.tools.register(raw)
    assert system.tools.get("no-output") is None
    assert changes == []


def test_an_unsupported_raw_output_schema_error_names_the_tool(system: ToolSystem) -> None:
    from dsh_tools import JsonSchemaError, ToolOutput

    raw = ToolDefinition(
        name="report",
        description="d",
        parameters={"type": "object"},
        output=ToolOutput({"type": "string", "pattern": "^x"}, lambda args, value: []),
        execute=lambda args, ctx: "x",
    )
    with pytest.raises(JsonSchemaError) as info:
        system.tools.register(raw)
    assert info.value.violations[0].startswith("schema.pattern is not a supported keyword")
    assert info.value.__notes__ == ['tool "report": in its output.schema']
    assert system.tools.names() == []


@pytest.mark.parametrize("timeout_ms", [0, -5, math.inf, math.nan, True])
def test_rp5_invalid_timeout_ms_is_refused(system: ToolSystem, timeout_ms: Any) -> None:
    changes: list[int] = []
    system.tools.on_change(lambda: changes.append(1))
    with pytest.raises((TypeError, ValueError), match="must be a positive finite number"):
        system.tools.register(fixture("budgeted", timeout_ms=timeout_ms))
    assert system.tools.get("budgeted") is None
    assert system.tools.schemas() == []
    assert changes == []


def test_a_name_or_description_that_is_not_valid_unicode_is_refused(system: ToolSystem) -> None:
    # It would break every prompt, SDK and provider request of the agents that see it.
    system.tools.register(fixture("read"))
    with pytest.raises(ValueError, match=r"^tool name 'bad\\ud800name' holds a lone surrogate "):
        system.tools.register(fixture("bad\ud800name"))
    with pytest.raises(ValueError, match=r'^tool "odd" description holds a lone surrogate at '):
        system.tools.register(fixture("odd", description="text \udfff"))
    assert system.tools.names() == ["read"]
    assert [tool["name"] for tool in system.assemble_prompt().tools] == ["read"]


def test_rp5_a_positive_timeout_ms_registers(system: ToolSystem) -> None:
    system.tools.register(fixture("budgeted", timeout_ms=5000))
    definition = system.tools.get("budgeted")
    assert definition is not None
    assert definition.timeout_ms == 5000


def test_rp6_duplicate_global_registration_names_the_agent_scope_hint(
    system: ToolSystem,
) -> None:
    system.tools.register(echo())
    with pytest.raises(ValueError, match="already registered") as info:
        system.tools.register(echo())
    assert "per-agent variant" in str(info.value)
    assert "scope handle" in str(info.value)
    assert names(system.tools.schemas()) == ["echo"]


def test_rp6_duplicate_in_one_agent_scope_is_refused(system: ToolSystem) -> None:
    scope = system.agent("A")
    scope.tools.register(fixture("y"))
    with pytest.raises(ValueError, match="already registered in this scope"):
        scope.tools.register(fixture("y"))


def test_rp6_the_same_name_globally_and_in_a_scope_both_register(system: ToolSystem) -> None:
    system.tools.register(text_tool("x", "global"))
    system.agent("A").tools.register(text_tool("x", "local"))
    assert text(system.execute(call("x"))) == "global"
    assert text(system.execute(call("x", agent="A"))) == "local"


def test_rp7_code_mode_reserves_run_code(make_system: Any) -> None:
    code = make_system(mode="code")
    with pytest.raises(ValueError, match='tool name "run_code" is reserved'):
        code.tools.register(fixture("run_code"))
    with pytest.raises(ValueError, match='tool name "run_code" is reserved'):
        code.agent("A").tools.register(fixture("run_code"))


def test_rp7_native_mode_run_code_is_an_ordinary_name(system: ToolSystem) -> None:
    system.tools.register(fixture("run_code"))
    assert text(system.execute(call("run_code"))) == "ran:run_code"


def test_rp8_disposer_is_idempotent_and_the_name_is_free_again(system: ToolSystem) -> None:
    changes: list[int] = []
    system.tools.on_change(lambda: changes.append(1))
    system.tools.register(fixture("first"))
    dispose = system.tools.register(fixture("disposable"))
    system.tools.register(fixture("last"))
    assert names(system.tools.schemas()) == ["first", "disposable", "last"]
    dispose()
    assert names(system.tools.schemas()) == ["first", "last"]
    assert len(changes) == 4
    dispose()
    assert len(changes) == 4
    system.tools.register(fixture("disposable"))
    assert names(system.tools.schemas()) == ["first", "last", "disposable"]


def test_rp9_closing_an_owner_disposes_its_registrations(system: ToolSystem) -> None:
    system.tools.register(echo())
    owner = system.plugin("O")
    owner.tools.register(fixture("scoped"))
    assert names(system.tools.schemas()) == ["echo", "scoped"]
    owner.close()
    assert names(system.tools.schemas()) == ["echo"]


def test_rp10_a_raising_change_observer_rolls_the_registration_back(system: ToolSystem) -> None:
    calls: list[int] = []

    def observer() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("observer exploded")

    system.tools.on_change(observer)
    with pytest.raises(RuntimeError, match="observer exploded"):
        system.tools.register(echo())
    assert system.tools.get("echo") is None
    assert system.tools.schemas() == []
    system.tools.register(echo())
    assert names(system.tools.schemas()) == ["echo"]


def test_rp11_change_counts_per_effect_and_scoped_observers_see_everything(
    system: ToolSystem,
) -> None:
    counts: list[str] = []
    scoped: list[str] = []
    system.tools.on_change(lambda: counts.append("change"))
    scope = system.agent("A")
    scope.tools.on_change(lambda: scoped.append("change"))

    dispose = system.tools.register(echo())
    assert len(counts) == 1
    dispose()
    assert len(counts) == 2
    system.tools.register(echo())
    assert len(counts) == 3
    lift = scope.tools.restrict(deny=["echo"])
    assert len(counts) == 4
    lift()
    assert len(counts) == 5
    unguard = system.tools.guard(lambda exec: None)
    unguard()
    scope.tools.guard(lambda exec: None)()
    assert len(counts) == 5
    assert len(scoped) == 5


def test_rp12_local_tools_are_visible_only_to_their_agent(system: ToolSystem) -> None:
    system.tools.register(fixture("shared"))
    system.agent("A").tools.register(fixture("mine"))
    assert sorted(names(system.tools.schemas("A"))) == ["mine", "shared"]
    assert names(system.tools.schemas()) == ["shared"]
    assert names(system.tools.schemas("B")) == ["shared"]
    assert text(system.execute(call("mine", agent="A"))) == "ran:mine"
    for agent in ("B", None):
        result = system.execute(call("mine", agent=agent))
        assert result.to_dict()["error"] == {
            "message": 'unknown tool "mine"',
            "info": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
        }
        assert text(result) == 'Error: unknown tool "mine"'


@pytest.mark.parametrize("local_first", [True, False])
def test_rp13_a_local_shadow_wins_for_its_agent_in_either_order(
    system: ToolSystem, local_first: bool
) -> None:
    local = text_tool("bash", "restricted-bash")
    shared = text_tool("bash", "global-bash")
    if local_first:
        system.agent("A").tools.register(local)
        system.tools.register(shared)
    else:
        system.tools.register(shared)
        system.agent("A").tools.register(local)
    assert text(system.execute(call("bash", agent="A"))) == "restricted-bash"
    assert text(system.execute(call("bash"))) == "global-bash"
    assert names(system.tools.schemas("A")) == ["bash"]


def test_rp14_a_shadow_keeps_the_global_slot_until_the_global_is_masked(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("a"))
    system.tools.register(fixture("b", description="global b"))
    scope = system.agent("A")
    scope.tools.register(fixture("c"))
    scope.tools.register(fixture("b", description="A's b"))
    schemas = scope.tools.schemas()
    assert names(schemas) == ["a", "b", "c"]
    assert schemas[1]["description"] == "A's b"
    scope.tools.restrict(deny=["b"])
    schemas = scope.tools.schemas()
    assert names(schemas) == ["a", "c", "b"]
    assert schemas[2]["description"] == "A's b"


def test_rp15_closing_a_scope_undoes_everything_it_registered(system: ToolSystem) -> None:
    system.tools.register(fixture("t"))
    seen: list[str] = []
    scope = system.agent("A")
    scope.tools.register(fixture("mine"))
    scope.tools.guard(lambda exec: "scoped guard")
    scope.tools.restrict(deny=["t"])

    async def pre(exec: Any, next: Any) -> Any:
        seen.append(exec.call_id)
        return await next()

    scope.tools.on_pre_execute(pre)
    assert system.tools.get("mine", "A") is not None
    assert system.tools.get("t", "A") is None
    assert text(system.execute(call("mine", agent="A", call_id="before"))) == (
        "Error: scoped guard"
    )
    assert seen == ["before"]

    scope.close()
    assert system.tools.get("mine", "A") is None
    assert system.tools.get("t", "A") is not None
    assert system.tools.schemas("A") == system.tools.schemas()
    assert text(system.execute(call("t", agent="A", call_id="after"))) == "ran:t"
    assert seen == ["before"]
    with pytest.raises(RuntimeError, match="closed"):
        scope.tools.register(fixture("again"))


def test_agent_scopes_are_live_per_key_and_fresh_after_close(system: ToolSystem) -> None:
    first = system.agent("A")
    assert system.agent("A") is first
    assert first.key == "A"
    first.tools.register(fixture("mine"))
    first.close()
    first.close()
    again = system.agent("A")
    assert again is not first
    assert again.tools.get("mine") is None
    again.tools.register(fixture("mine"))
    assert text(system.execute(call("mine", agent="A"))) == "ran:mine"
    with pytest.raises(TypeError):
        system.agent(1)  # type: ignore[arg-type]


def test_a_scope_asked_for_while_its_key_is_closing_sees_none_of_the_old_tools(
    system: ToolSystem,
) -> None:
    # agent(key) during a close slow in its closers (an MCP server shutting down) handed out a
    # fresh scope that still saw the old scope's local tools and masks until the close ended.
    old = system.agent("A")
    old.tools.register(fixture("mine"))
    system.tools.register(fixture("shared"))
    old.tools.restrict(deny=["shared"])
    in_closer, release = threading.Event(), threading.Event()
    old.on_close(lambda: (in_closer.set(), release.wait(10)))
    closing = threading.Thread(target=old.close)
    closing.start()
    assert in_closer.wait(10)
    seen: list[list[str]] = []
    asking = threading.Thread(target=lambda: seen.append(system.agent("A").tools.names()))
    asking.start()
    asking.join(0.5)  # a fresh scope must not be handed out yet
    release.set()
    closing.join(10)
    asking.join(10)
    assert seen == [["shared"]]
    assert system.agent("A") is not old


def test_a_scope_asked_for_while_its_key_closes_is_refused_once_the_system_stopped(
    system: ToolSystem,
) -> None:
    old = system.agent("A")
    in_closer, release = threading.Event(), threading.Event()
    old.on_close(lambda: (in_closer.set(), release.wait(10)))
    closing = threading.Thread(target=old.close)
    closing.start()
    assert in_closer.wait(10)
    errors: list[str] = []

    def ask() -> None:
        try:
            system.agent("A")
        except RuntimeError as exc:
            errors.append(str(exc))

    asking = threading.Thread(target=ask)
    asking.start()
    system.stop()
    release.set()
    closing.join(10)
    asking.join(10)
    assert errors == ["the tool system is stopped; start a new one with ToolSystem.start()"]


def test_a_closer_asking_for_its_own_scope_is_refused_not_deadlocked(system: ToolSystem) -> None:
    scope = system.agent("A")
    scope.tools.register(fixture("mine"))
    errors: list[str] = []

    def ask_again() -> None:
        try:
            system.agent("A")
        except RuntimeError as exc:
            errors.append(str(exc))

    scope.on_close(ask_again)
    scope.close()
    assert errors == [
        'agent scope "A" is still closing: its closers run before its registrations are disposed'
    ]
    assert system.agent("A").tools.names() == []


def test_a_scope_asked_for_on_the_system_loop_while_its_close_needs_that_loop_is_refused(
    system: ToolSystem,
) -> None:
    # An async tool of a batch (on the system loop) asked for the scope while another thread's
    # close() ran a closer that needs the loop: the loop waited for the close, the close for
    # the loop, and every batch of the system with them.
    asked, closing = threading.Event(), threading.Event()

    async def ask_for_scope(args: Any, ctx: Any) -> Any:
        asked.set()
        closing.wait(10)
        try:
            system.agent("A")
        except RuntimeError as exc:
            return [{"type": "text", "text": str(exc)}]
        return [{"type": "text", "text": "handed out"}]

    system.tools.register(fixture("ask", ask_for_scope))
    scope = system.agent("A")
    closer_ran: list[str] = []

    def closer() -> None:
        closing.set()
        # The system loop runs this call; bounded, so that a loop blocked for good fails here.
        closer_ran.append(text(system.execute(call("mine"), timeout=5)))

    system.tools.register(fixture("mine"))
    scope.on_close(closer)
    batch = threading.Thread(
        target=lambda: results.extend(system.execute_batch(batch_of("ask")).results)
    )
    results: list[Any] = []
    batch.start()
    assert asked.wait(10)
    scope.close()
    batch.join(10)
    assert closer_ran == ["ran:mine"]
    assert [text(result) for result in results] == [
        'agent scope "A" is closing on another thread, which this thread cannot wait for: it '
        "runs an event loop (a hook's or an async tool's) that the close may need; ask for the "
        "scope again once that close() has returned"
    ]
    assert system.agent("A") is not scope


def test_a_scope_whose_close_a_ctrl_c_cut_short_is_finished_by_agent(system: ToolSystem) -> None:
    scope = system.agent("A")
    scope.tools.register(fixture("mine"))
    closed: list[str] = []
    pressed = [False]

    def interrupted() -> None:
        if not pressed[0]:
            pressed[0] = True
            raise KeyboardInterrupt
        closed.append("again")

    scope.on_close(lambda: closed.append("first"))
    scope.on_close(interrupted)
    with pytest.raises(KeyboardInterrupt):
        scope.close()
    fresh = system.agent("A")
    assert fresh is not scope
    assert fresh.tools.names() == []
    assert closed == ["first"]


@pytest.mark.parametrize("key", [5, b"A", ("A",)], ids=["int", "bytes", "tuple"])
def test_every_read_refuses_an_agent_key_that_is_not_a_str(system: ToolSystem, key: Any) -> None:
    # Not the global view for a key nobody could have meant: the same refusal as agent(key).
    system.agent("A").tools.register(fixture("mine"))
    message = f"agent keys are str, got {type(key).__name__}"
    scope_tools = system.agent("A").tools
    reads = {
        "agent": lambda: system.agent(key),
        "names": lambda: system.tools.names(agent=key),
        "schemas": lambda: system.tools.schemas(key),
        "get": lambda: system.tools.get("mine", key),
        "scope names": lambda: scope_tools.names(agent=key),
        "assemble_prompt": lambda: system.assemble_prompt(key),
        "derive_messages": lambda: system.session.derive_messages(key),
    }
    for label, read in reads.items():
        with pytest.raises(TypeError) as error:
            read()
        assert str(error.value) == message, label
    assert system.tools.names(agent="A") == ["mine"]
    assert system.tools.names() == []
    assert scope_tools.names() == ["mine"]


def test_a_closed_plugin_refuses_registrations(system: ToolSystem) -> None:
    owner = system.plugin("O")
    owner.tools.register(fixture("a"))
    owner.tools.register(fixture("b"))
    changes: list[int] = []
    system.tools.on_change(lambda: changes.append(1))
    owner.close()
    assert len(changes) == 2
    assert system.tools.schemas() == []
    with pytest.raises(RuntimeError, match="closed"):
        owner.tools.register(fixture("c"))


def test_registering_on_a_stopped_system_says_the_system_is_stopped() -> None:
    # Not that the handle is closed: nobody closed it, and the way out is a new system.
    system = ToolSystem.start(code_runtime=None)
    scope = system.agent("planner")
    plugin = system.plugin("git")
    system.stop()
    stopped = r"^the tool system is stopped; start a new one with ToolSystem\.start\(\)$"
    with pytest.raises(RuntimeError, match=stopped):
        system.tools.register(fixture("a"))
    with pytest.raises(RuntimeError, match=stopped):
        system.tools.guard(lambda exec: None)
    with pytest.raises(RuntimeError, match=stopped):
        plugin.tools.register(fixture("a"))
    with pytest.raises(RuntimeError, match=stopped):
        scope.tools.restrict(deny=["a"])


def test_a_stopped_system_reads_as_it_stopped_and_assembles_no_prompt() -> None:
    # The handles' reads describe what was registered (for a report after the run); a prompt
    # would invite calls that nothing can run any more.
    system = ToolSystem.start(code_runtime=None)
    scope = system.agent("planner")
    scope.tools.register(fixture("mine"))
    system.tools.register(fixture("shared"))
    system.stop()
    assert system.tools.names() == ["shared"]
    assert scope.tools.names() == ["shared", "mine"]
    assert system.tools.get("mine", "planner") is not None
    assert [schema["name"] for schema in system.tools.schemas("planner")] == ["shared", "mine"]
    assert system.tools.execution_mode(call("shared")) == "exclusive"
    stopped = r"^the tool system is stopped; start a new one with ToolSystem\.start\(\)$"
    with pytest.raises(RuntimeError, match=stopped):
        system.assemble_prompt()
    with pytest.raises(RuntimeError, match=stopped):
        system.assemble_prompt("planner")


@pytest.mark.parametrize("name", [None, 3, b"git"])
def test_a_plugin_name_that_is_not_a_str_is_refused(system: ToolSystem, name: Any) -> None:
    with pytest.raises(TypeError, match=f"^plugin names are str, got {type(name).__name__}$"):
        system.plugin(name)


def test_an_empty_plugin_name_is_refused(system: ToolSystem) -> None:
    # Every message about the plugin names it: 'plugin "" is closed' names nothing.
    with pytest.raises(ValueError, match=r"^plugin names are non-empty str, got ''$"):
        system.plugin("")
    assert system.plugin("git").name == "git"


def test_register_accepts_only_tool_definitions(system: ToolSystem) -> None:
    with pytest.raises(TypeError, match="ToolDefinition"):
        system.tools.register({"name": "dict-tool"})  # type: ignore[arg-type]


def test_a_raising_change_observer_rolls_a_restriction_back(system: ToolSystem) -> None:
    system.tools.register(fixture("t"))
    calls: list[int] = []

    def observer() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("observer exploded")

    system.tools.on_change(observer)
    scope = system.agent("A")
    with pytest.raises(RuntimeError, match="observer exploded"):
        scope.tools.restrict(deny=["t"])
    assert scope.tools.get("t") is not None
    assert len(calls) == 2
    scope.tools.restrict(deny=["t"])
    assert scope.tools.get("t") is None


def test_reads_never_create_an_agent_layer(system: ToolSystem) -> None:
    system.tools.register(fixture("t"))
    assert system.tools.get("t", "nobody") is not None
    assert names(system.tools.schemas("nobody")) == ["t"]
    assert system.tools.execution_mode(call("t", agent="nobody")) == "exclusive"
    assert text(system.execute(call("t", agent="nobody"))) == "ran:t"
    assert "nobody" not in system._cell.current.scopes


def test_an_agent_layer_is_discarded_once_empty(system: ToolSystem) -> None:
    system.tools.register(fixture("t"))
    scope = system.agent("A")
    dispose = scope.tools.register(fixture("local"))
    unguard = scope.tools.guard(lambda exec: None)
    assert "A" in system._cell.current.scopes
    dispose()
    assert "A" in system._cell.current.scopes
    unguard()
    assert "A" not in system._cell.current.scopes


def test_closed_plugins_leave_nothing_behind(system: ToolSystem) -> None:
    threads = threading.active_count()
    for n in range(5):
        with system.plugin(f"p{n}") as plugin:
            plugin.tools.register(fixture(f"t{n}"))
    assert system.tools.schemas() == []
    assert threading.active_count() == threads


def test_closed_scopes_cost_the_registry_nothing(system: ToolSystem) -> None:
    # A harness with an agent scope per conversation closes millions of them over its life.
    def churn(count: int) -> None:
        for n in range(count):
            scope = system.agent(f"conversation-{n}")
            scope.tools.register(fixture("local"))
            scope.close()

    churn(500)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        churn(3000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / 3000 < 16  # bytes per closed scope (it was 160)


def test_a_new_agent_key_per_conversation_keeps_nothing_once_it_is_done() -> None:
    # Calls and prompts for agents that nothing applies to alone share what a call without an
    # agent sees: a key per conversation must not grow the registry's snapshot or caches.
    with ToolSystem.start(ToolsConfig(mode="both")) as system:
        for n in range(5):
            system.tools.register(fixture(f"t{n}"))

        async def passing(exec: Any, next: Any) -> Any:
            return await next()

        system.tools.on_pre_execute(passing)

        def converse(first: int, count: int) -> None:
            for n in range(first, first + count):
                agent = f"conversation-{n}"
                assert not system.execute(call("t0", {}, agent=agent)).is_error
                assert len(system.assemble_prompt(agent).tools) == 6
            system.session.clear()

        converse(0, 300)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            converse(300, 2000)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert grown / 2000 < 64  # bytes per agent key (it was about 9,000)


def keep_registering(scope: Any, registered: threading.Event) -> None:
    """Register tools through ``scope`` until it is closed."""
    n = 0
    while True:
        try:
            scope.tools.register(fixture(f"t{n}"))
        except RuntimeError:  # the scope is closed
            return
        registered.set()
        n += 1


def test_a_registration_racing_its_scopes_close_is_undone_or_refused(system: ToolSystem) -> None:
    for round_ in range(50):
        scope = system.agent(f"racing-{round_}")
        registered = threading.Event()
        thread = threading.Thread(target=keep_registering, args=(scope, registered))
        thread.start()
        registered.wait(10)
        scope.close()
        thread.join(10)
        assert system.agent(f"racing-{round_}").tools.names() == []


def test_a_thousand_agent_scopes_and_plugins_start_no_thread(system: ToolSystem) -> None:
    threads = threading.active_count()
    scopes = [system.agent(f"agent-{n}") for n in range(1000)]
    plugins = [system.plugin(f"plugin-{n}") for n in range(1000)]
    scopes[7].tools.register(fixture("local"))
    plugins[3].tools.register(fixture("shared"))
    assert threading.active_count() == threads
    assert sorted(s["name"] for s in scopes[7].tools.schemas()) == ["local", "shared"]
    assert [s["name"] for s in scopes[8].tools.schemas()] == ["shared"]
    for handle in [*scopes, *plugins]:
        handle.close()
    assert system.tools.schemas() == []
    assert system.agent("agent-7").tools.schemas() == []


@pytest.mark.parametrize("name", [3, None, b"mine", ["mine"]], ids=["int", "none", "bytes", "list"])
def test_get_refuses_a_tool_name_that_is_not_a_str(system: ToolSystem, name: Any) -> None:
    # Not None, which reads as "no such tool" for a name no tool could have.
    system.tools.register(fixture("mine"))
    with pytest.raises(TypeError, match=f"^tool names are str, got {type(name).__name__}$"):
        system.tools.get(name)
    with pytest.raises(TypeError, match=f"^tool names are str, got {type(name).__name__}$"):
        system.agent("A").tools.get(name)
    assert system.tools.get("mine") is not None


def test_a_section_name_must_be_a_non_empty_str(system: ToolSystem) -> None:
    with pytest.raises(ValueError, match=r"^section name must be a non-empty str, got ''$"):
        system.tools.section("", 1, "text")
    with pytest.raises(TypeError, match=r"^section name must be a non-empty str, got bytes$"):
        system.tools.section(b"rules", 1, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("prepend", ["yes", None, 1], ids=["str", "none", "int"])
def test_prepend_must_be_a_bool(system: ToolSystem, prepend: Any) -> None:
    async def hook(exec: Any, next: Any) -> Any:
        return await next()

    for register, point in (
        (system.tools.on_pre_execute, "pre_execute"),
        (system.agent("A").tools.on_execute, "execute"),
    ):
        with pytest.raises(TypeError) as error:
            register(hook, prepend=prepend)
        assert str(error.value) == (
            f"on_{point}() prepend must be a bool, got {type(prepend).__name__}"
        )


def test_a_section_no_prompt_could_carry_is_refused(system: ToolSystem) -> None:
    # A lone surrogate cannot be encoded into any provider request: refused as for tools.
    with pytest.raises(ValueError) as error:
        system.tools.section("rules\ud800", 1, "text")
    assert str(error.value) == (
        "section name 'rules\\ud800' holds a lone surrogate at index 5; it must be valid "
        "Unicode text"
    )
    with pytest.raises(ValueError, match=r'^section "rules" text holds a lone surrogate at'):
        system.agent("A").tools.section("rules", 1, "be \udc80 brief")
    assert [s.name for s in system.assemble_prompt("A").sections] == []


def test_disposers_run_together_remove_their_tools_in_one_change(system: ToolSystem) -> None:
    from dsh_tools.registry import dispose_together

    disposers = [system.tools.register(text_tool(f"t{i}", "x")) for i in range(5)]
    system.tools.register(text_tool("kept", "x"))
    disposers[1]()  # run already: skipped
    seen: list[list[str]] = []
    system.tools.on_change(lambda: seen.append(system.tools.names()))
    dispose_together(disposers[::-1])
    assert seen == [["kept"]]
    assert all(disposer.disposed for disposer in disposers)
    dispose_together(disposers)  # all run: nothing to tell
    disposers[0]()
    assert seen == [["kept"]]
    assert text(system.execute(call("t0"))) == 'Error: unknown tool "t0"'


def test_tools_registered_together_arrive_in_one_change_each_refusal_in_its_place(
    system: ToolSystem,
) -> None:
    from dsh_tools.registry import Disposer, register_together

    system.tools.register(text_tool("taken", "x"))
    seen: list[list[str]] = []
    system.tools.on_change(lambda: seen.append(system.tools.names()))
    outcomes = register_together(
        system.tools, [text_tool("a", "x"), text_tool("taken", "y"), "no tool", text_tool("b", "x")]
    )
    assert seen == [["taken", "a", "b"]]
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "Disposer",
        "ValueError",
        "TypeError",
        "Disposer",
    ]
    assert str(outcomes[1]).startswith('tool "taken" is already registered')
    assert text(system.execute(call("b"))) == "x"
    first = outcomes[0]
    assert isinstance(first, Disposer)
    first()
    assert system.tools.names() == ["taken", "b"]


def test_an_observer_that_raises_undoes_tools_registered_together(system: ToolSystem) -> None:
    from dsh_tools.registry import register_together

    def refuse() -> None:
        if "a" in system.tools.names():
            raise RuntimeError("not now")

    system.tools.on_change(refuse)
    with pytest.raises(RuntimeError, match="not now"):
        register_together(system.tools, [text_tool("a", "x"), text_tool("b", "x")])
    assert system.tools.names() == []
