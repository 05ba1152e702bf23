"""The spill policy: the dispatch-log arm (oversized sub-call results spilled in the log only)
and the model-facing arm, over one ``SpillStore``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from code_mode_support import (
    FakeProgram,
    FakeRuntime,
    code_system,
    dispatch_events,
    failure_of,
    run_code,
    texts,
    value_of,
    wait_for,
)
from structlog.testing import capture_logs

from dsh_tools import (
    DEFAULT,
    AbortController,
    Accept,
    Block,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolDefinition,
    ToolErrorInfo,
    ToolOutput,
    ToolSystem,
    define_tool,
)
from dsh_tools.pipeline import SpillPolicy, SpillStore, spill_policy
from dsh_tools.pipeline._spill import is_preview_of, preview_text

NOTICE = "Full formatted result stored at: "
RUN_CODE_ARGUMENTS = '{"code": "return 1", "description": "Run the test program"}'
WAIT = 10.0


class MemoryStore:
    """A synchronous store keeping what it saved; locators are ``mem://<n>``."""

    def __init__(self) -> None:
        self.saved: list[tuple[str, dict[str, Any]]] = []

    def save(self, text: str, source: Any) -> str:
        self.saved.append((text, dict(source)))
        return f"mem://{len(self.saved)}"


class HangingStore:
    """An async store whose saves wait until released, one ``release()`` per save."""

    def __init__(self) -> None:
        self.pending = 0
        self.saved: list[str] = []
        self._releases: asyncio.Queue[None] = asyncio.Queue()

    async def save(self, text: str, source: Any) -> str:
        self.pending += 1
        try:
            await self._releases.get()
        finally:
            self.pending -= 1
        self.saved.append(source["call_id"])
        return f"slow://{source['call_id']}"

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self._releases.put_nowait(None)


class FailingStore:
    """A store that cannot save."""

    def save(self, text: str, source: Any) -> str:
        raise OSError("disk full")


def text_tool(name: str, text: str, *, safe: bool = False) -> ToolDefinition:
    """A tool whose value and single text block are ``text``."""
    return define_tool(
        name=name,
        description=f"Returns {len(text)} characters.",
        parameters={},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: text,
        is_concurrency_safe=(lambda args: True) if safe else None,
    )


async def until(predicate: Any) -> None:
    """Yield to the loop until ``predicate()`` holds (bounded)."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0)

    await wait_for(poll())


def utf8(text: str) -> int:
    return len(text.encode())


def single_text(content: Any) -> str:
    (text,) = texts(content)
    return text


# --- the dispatch-log arm -------------------------------------------------------------------------


def test_an_oversized_sub_call_result_is_spilled_in_the_log_only() -> None:
    store = MemoryStore()
    with code_system(
        DEFAULT, tools=[text_tool("huge_read", "H" * 2000)], max_inline_bytes=200
    ) as system:
        system.dispatch_spill.store = store
        result = system.execute(
            run_code("v = await tools.huge_read({})\nreturn len(v)", call_id="parent-1")
        )
        (settle,) = dispatch_events(system)
    assert not result.is_error, result.content
    assert value_of(result)["result"] == 2000
    block = single_text(settle["content"])
    assert utf8(block) <= 200
    assert f"{NOTICE}mem://1" in block
    assert block.startswith("H")
    assert store.saved == [
        ("H" * 2000, {"tool_name": "huge_read", "call_id": "parent-1:code:1", "label": "dispatch"})
    ]


def test_within_cap_and_non_text_results_are_logged_unchanged_without_a_save() -> None:
    store = MemoryStore()
    blocks = [{"type": "image", "data": "A" * 1000, "mime_type": "image/png"}]
    picture = define_tool(
        name="picture",
        description="Renders a non-text block.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: blocks),
        execute=lambda args, ctx: "picture",
    )

    async def program(p: FakeProgram) -> Any:
        return [await p.call("small", {}), await p.call("picture", {})]

    tools = [text_tool("small", "s" * 200), picture]
    with code_system(FakeRuntime(program), tools=tools, max_inline_bytes=200) as system:
        system.dispatch_spill.store = store
        result = system.execute(run_code())
        settles = dispatch_events(system)
    assert value_of(result)["result"] == ["s" * 200, "picture"]
    assert [s["content"] for s in settles] == [[{"type": "text", "text": "s" * 200}], blocks]
    assert store.saved == []


def test_a_failing_store_keeps_the_full_content_and_warns() -> None:
    async def program(p: FakeProgram) -> Any:
        return len(await p.call("huge_read", {}))

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        system.dispatch_spill.store = FailingStore()
        with capture_logs() as logs:
            result = system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert value_of(result)["result"] == 2000
    assert settle["content"] == [{"type": "text", "text": "H" * 2000}]
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == (
        "spill: saving the full content of huge_read failed: disk full; keeping the full content"
    )
    assert warning["call_id"] == "call-1:code:1"


@pytest.mark.parametrize(
    "raised", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()], ids=type
)
def test_a_store_raising_a_base_exception_keeps_the_content_and_the_system_runs_on(
    raised: BaseException,
) -> None:
    # The store is user code: what it raises, SystemExit included, is contained like any
    # failure of it. The sub-call's settle event lands, the run and the next one succeed.
    class RaisingStore:
        def save(self, text: str, source: Any) -> str:
            raise raised

    async def program(p: FakeProgram) -> Any:
        return len(await p.call("huge_read", {}))

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        system.dispatch_spill.store = RaisingStore()
        with capture_logs() as logs:
            (first,) = system.execute_batch(
                ExecuteBatch(calls=[ToolCall("b1", "run_code", RUN_CODE_ARGUMENTS)]),
                timeout=WAIT,
            ).results
            second = system.execute(run_code(call_id="call-2"))
        settles = dispatch_events(system)
    assert value_of(first)["result"] == 2000
    assert value_of(second)["result"] == 2000
    assert [settle["content"] for settle in settles] == [[{"type": "text", "text": "H" * 2000}]] * 2
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 2 and all("dispatch-log spill failed" in w for w in warnings)


def test_a_hanging_store_is_cancelled_once_the_run_is_aborted_and_its_settle_lands() -> None:
    # An aborted call's hooks get a short wind-down, then are cancelled; the dispatch log's
    # spill arm (user code that may await anything) is held to the same.
    store = HangingStore()
    controller = AbortController()

    async def program(p: FakeProgram) -> Any:
        return len(await p.call("huge_read", {}))

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code(signal=controller.signal)))
        await until(lambda: store.pending == 1)
        controller.abort("user pressed stop")
        return await wait_for(task)

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        system.dispatch_spill.store = store
        asyncio.run(scenario(system))
        (settle,) = dispatch_events(system)
        assert [e.type for e in system.session.events][-1] == "tool/result"
    assert settle["content"] == [{"type": "text", "text": "H" * 2000}]
    assert store.pending == 0


def test_without_a_store_the_full_content_is_logged_with_a_warning() -> None:
    async def program(p: FakeProgram) -> Any:
        return len(await p.call("huge_read", {}))

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        with capture_logs() as logs:
            system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert settle["content"] == [{"type": "text", "text": "H" * 2000}]
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == (
        "spill: no spill store is configured; keeping the full content of huge_read"
    )


def test_a_hanging_store_delays_neither_values_nor_the_next_start() -> None:
    store = HangingStore()
    values: list[Any] = []
    program_done = asyncio.Event()

    async def program(p: FakeProgram) -> Any:
        values.append(len(await p.call("huge_read", {})))
        values.append(len(await p.call("huge_read", {})))
        program_done.set()
        return values

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await wait_for(program_done.wait())
        assert values == [2000, 2000]
        assert store.pending == 2
        assert len(dispatch_events(system, "tool/code-dispatch-start")) == 2
        assert not task.done()
        store.release(2)
        return await wait_for(task)

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        system.dispatch_spill.store = store
        result = asyncio.run(scenario(system))
        settles = dispatch_events(system)
    assert value_of(result)["result"] == [2000, 2000]
    assert sorted(store.saved) == ["call-1:code:1", "call-1:code:2"]
    assert all(NOTICE in single_text(s["content"]) for s in settles)


def test_two_hung_saves_block_the_third_start_with_one_sub_call_slot() -> None:
    store = HangingStore()

    async def program(p: FakeProgram) -> Any:
        calls = [await p.fire("huge_read", {}) for _ in range(3)]
        return [len(v) for v in await asyncio.gather(*calls)]

    async def scenario(system: ToolSystem) -> Any:
        task = asyncio.ensure_future(system.execute_async(run_code()))
        await until(lambda: store.pending == 2)
        for _ in range(20):
            await asyncio.sleep(0)
        starts_while_hung = len(dispatch_events(system, "tool/code-dispatch-start"))
        store.release()
        await until(lambda: len(dispatch_events(system, "tool/code-dispatch-start")) == 3)
        store.release(2)
        result = await wait_for(task)
        return starts_while_hung, result

    huge = text_tool("huge_read", "H" * 2000, safe=True)
    with code_system(
        FakeRuntime(program), tools=[huge], max_inline_bytes=200, max_parallel_sub_calls=1
    ) as system:
        system.dispatch_spill.store = store
        starts_while_hung, result = asyncio.run(wait_for(scenario(system)))
    assert starts_while_hung == 2
    assert value_of(result)["result"] == [2000, 2000, 2000]


def test_the_output_limit_failure_of_a_run_is_spilled_by_the_model_facing_arm() -> None:
    store = MemoryStore()
    program = 'for i in range(1000):\n    print("spam line", i)'
    with code_system(DEFAULT, max_output_bytes=2000) as system:
        system.tools.on_post_execute(spill_policy(200, store), prepend=True)
        result = system.execute(run_code(program))
    assert result.is_error
    assert failure_of(result).info == ToolErrorInfo("CodeRunFailedError", "CODE_RUN_FAILED")
    ((full, source),) = store.saved
    assert full.startswith(
        "Error: code run failed (output-limit): outer output exceeded 2000 bytes\n"
        "Captured output:\nspam line 0\n"
    )
    assert source == {"tool_name": "run_code", "call_id": "call-1", "label": "result"}
    shown = single_text(result.content)
    assert utf8(shown) <= 200
    assert shown.startswith("Error: code run failed (output-limit)")
    assert shown.endswith(f"{NOTICE}mem://1]")


def test_the_dispatch_log_arm_as_a_listener_bounds_every_tool_even_read() -> None:
    store = MemoryStore()

    async def program(p: FakeProgram) -> Any:
        return len(await p.call("read", {}))

    with code_system(FakeRuntime(program), tools=[text_tool("read", "R" * 500)]) as system:
        system.tools.on_code_dispatch_log(spill_policy(100, store).dispatch_log)
        result = system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert value_of(result)["result"] == 500
    assert store.saved == [
        ("R" * 500, {"tool_name": "read", "call_id": "call-1:code:1", "label": "dispatch"})
    ]
    assert utf8(single_text(settle["content"])) <= 100


def test_the_configured_arm_bounds_content_a_failing_listener_left_unshaped() -> None:
    store = MemoryStore()

    async def broken(log: Any, next: Any) -> Any:
        raise RuntimeError("shaper broke")

    async def program(p: FakeProgram) -> Any:
        return len(await p.call("huge_read", {}))

    huge = text_tool("huge_read", "H" * 2000)
    with code_system(FakeRuntime(program), tools=[huge], max_inline_bytes=200) as system:
        system.dispatch_spill.store = store
        system.tools.on_code_dispatch_log(broken)
        system.execute(run_code())
        (settle,) = dispatch_events(system)
    assert len(store.saved) == 1
    assert NOTICE in single_text(settle["content"])


# --- the model-facing arm ------------------------------------------------------------------------


def plain_call(name: str, call_id: str = "c1") -> ExecuteCall:
    return ExecuteCall(call_id=call_id, name=name, arguments={})


def native(*tools: ToolDefinition) -> ToolSystem:
    system = ToolSystem.start(code_runtime=None)
    for definition in tools:
        system.tools.register(definition)
    return system


def test_the_model_facing_arm_replaces_an_oversized_text_result() -> None:
    store = MemoryStore()
    with native(text_tool("big", "B" * 1000)) as system:
        system.tools.on_post_execute(spill_policy(300, store), prepend=True)
        result = system.execute(plain_call("big"))
    assert not result.is_error
    assert value_of(result) == "B" * 1000
    assert store.saved == [("B" * 1000, {"tool_name": "big", "call_id": "c1", "label": "result"})]
    assert texts(result.content) == [preview_text("B" * 1000, "mem://1", 300)]


def test_the_model_facing_arm_leaves_small_results_exempt_tools_and_nested_calls() -> None:
    store = MemoryStore()
    policy = spill_policy(100, store)
    tools = [text_tool("small", "s" * 100), text_tool("read_file", "r" * 500)]
    with native(*tools, text_tool("big", "b" * 500)) as system:
        system.tools.on_post_execute(policy, prepend=True)
        small = system.execute(plain_call("small"))
        read = system.execute(plain_call("read_file"))
        nested = system.execute(
            ExecuteCall(call_id="n1", name="big", arguments={}, parent=_token_of(system))
        )
    assert single_text(small.content) == "s" * 100
    assert single_text(read.content) == "r" * 500
    assert single_text(nested.content) == "b" * 500
    assert store.saved == []


def _token_of(system: ToolSystem) -> Any:
    tokens: list[Any] = []
    dispose = system.tools.on_result(lambda exec, result: tokens.append(exec.token))
    system.execute(plain_call("small", "token-source"))
    dispose()
    return tokens[0]


def test_the_model_facing_arm_spills_a_content_replacement_and_keeps_its_contexts() -> None:
    store = MemoryStore()
    context = {"content": [{"type": "text", "text": "note"}]}

    async def expand(exec: Any, result: Any, next: Any) -> Any:
        await next()
        return Accept(content=[{"type": "text", "text": "E" * 400}], additional_contexts=[context])

    with native(text_tool("small", "s")) as system:
        system.tools.on_post_execute(expand)
        system.tools.on_post_execute(spill_policy(100, store), prepend=True)
        result = system.execute(plain_call("small"))
    assert store.saved[0][0] == "E" * 400
    assert NOTICE in single_text(result.content)
    assert [dict(c) for c in result.additional_contexts] == [context]


def test_the_model_facing_arm_leaves_blocks_and_value_replacements_alone() -> None:
    store = MemoryStore()

    async def block(exec: Any, result: Any, next: Any) -> Any:
        return Block([{"type": "text", "text": "X" * 400}])

    async def revalue(exec: Any, result: Any, next: Any) -> Any:
        return Accept(value="V" * 400)

    with native(text_tool("blocked", "b"), text_tool("revalued", "r")) as system:
        system.tools.on_post_execute(
            lambda exec, result, next: (
                block(exec, result, next) if exec.name == "blocked" else revalue(exec, result, next)
            )
        )
        system.tools.on_post_execute(spill_policy(100, store), prepend=True)
        blocked = system.execute(plain_call("blocked"))
        revalued = system.execute(plain_call("revalued"))
    assert single_text(blocked.content) == "X" * 400
    assert single_text(revalued.content) == "V" * 400
    assert store.saved == []


def test_an_async_store_is_awaited() -> None:
    class AsyncStore:
        async def save(self, text: str, source: Any) -> str:
            await asyncio.sleep(0)
            return "async://saved"

    with native(text_tool("big", "B" * 1000)) as system:
        system.tools.on_post_execute(spill_policy(200, AsyncStore()), prepend=True)
        result = system.execute(plain_call("big"))
    assert single_text(result.content).endswith(f"{NOTICE}async://saved]")


def test_a_store_returning_a_non_string_locator_keeps_the_content() -> None:
    class BadStore:
        def save(self, text: str, source: Any) -> Any:
            return 42

    with native(text_tool("big", "B" * 1000)) as system:
        system.tools.on_post_execute(spill_policy(200, BadStore()), prepend=True)
        with capture_logs() as logs:
            result = system.execute(plain_call("big"))
    assert single_text(result.content) == "B" * 1000
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == (
        "spill: saving the full content of big failed: the store returned int, not a str "
        "locator; keeping the full content"
    )


def test_install_registers_both_arms_and_disposes_them() -> None:
    store = MemoryStore()

    async def program(p: FakeProgram) -> Any:
        return len(await p.call("big", {}))

    with code_system(FakeRuntime(program), tools=[text_tool("big", "B" * 1000)]) as system:
        dispose = spill_policy(200, store).install(system.tools)
        spilled = system.execute(plain_call("big", "direct-1"))
        run = system.execute(run_code())
        dispose()
        kept = system.execute(plain_call("big", "direct-2"))
    assert NOTICE in single_text(spilled.content)
    assert value_of(run)["result"] == 1000
    assert [source for _, source in store.saved] == [
        {"tool_name": "big", "call_id": "direct-1", "label": "result"},
        {"tool_name": "big", "call_id": "call-1:code:1", "label": "dispatch"},
    ]
    assert single_text(kept.content) == "B" * 1000


# --- the preview --------------------------------------------------------------------------------


def test_the_preview_format() -> None:
    text = "\n".join(f"row {n:03}" for n in range(100))
    assert preview_text(text, "mem://7", 120) == (
        "row 000\nrow 001\nrow 002\nrow 003\n…\n"
        f"[Output truncated: {utf8(text)} bytes in total. {NOTICE}mem://7]"
    )


@pytest.mark.parametrize("cap", [90, 100, 150, 200, 1000])
@pytest.mark.parametrize("text", ["x" * 5000, "€" * 3000, "ab😀" * 700, "line\n" * 800])
def test_the_preview_fits_the_cap_and_is_a_prefix(text: str, cap: int) -> None:
    shown = preview_text(text, "mem://1", cap)
    assert utf8(shown) <= cap
    assert shown.endswith(f"{NOTICE}mem://1]")
    head = shown.split("\n…\n")[0] if "\n…\n" in shown else ""
    assert text.startswith(head)


@pytest.mark.parametrize("cap", [50, 120, 400])
def test_a_preview_is_recognized_as_the_text_it_shortens_and_no_other(cap: int) -> None:
    # A finalizer that adds blocks after a result's own text (an MCP tool's error) reads the
    # spill preview as that text, shortened.
    text = "\n".join(f"row {n:03}" for n in range(100))
    shown = preview_text(text, "mem://7", cap)
    assert is_preview_of(shown, text)
    assert not is_preview_of(shown, text + "!")  # another size
    if "\n…\n" in shown:  # one that keeps a prefix of the text tells the text by it too
        assert not is_preview_of(shown, "x" + text[1:])
    assert not is_preview_of(text, text)


def test_a_locator_longer_than_the_cap_is_never_cut() -> None:
    locator = "file:///" + "deep/" * 40 + "result.txt"
    shown = preview_text("x" * 5000, locator, 50)
    assert shown == f"[Output truncated: 5000 bytes in total. {NOTICE}{locator}]"


def test_several_text_blocks_are_saved_joined_by_newlines() -> None:
    store = MemoryStore()
    blocks = [{"type": "text", "text": "a" * 100}, {"type": "text", "text": "b" * 100}]
    two = define_tool(
        name="two",
        description="Two text blocks.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: blocks),
        execute=lambda args, ctx: "two",
    )
    with native(two) as system:
        system.tools.on_post_execute(spill_policy(150, store), prepend=True)
        result = system.execute(plain_call("two"))
    assert store.saved[0][0] == "a" * 100 + "\n" + "b" * 100
    assert len(result.content) == 1


# --- construction ---------------------------------------------------------------------------------


def test_spill_policy_validates_its_arguments() -> None:
    with pytest.raises(TypeError, match="max_inline_bytes must be a positive integer"):
        spill_policy(True, MemoryStore())
    with pytest.raises(ValueError, match="max_inline_bytes must be a positive integer, got 0"):
        spill_policy(0, MemoryStore())
    with pytest.raises(TypeError, match="store must have a save"):
        spill_policy(10, object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exempt must be a collection"):
        spill_policy(10, None, exempt="read")
    # Named as the argument, not as Python's "'int' object is not iterable".
    with pytest.raises(TypeError, match=r"^exempt must be a collection of tool names, got int$"):
        spill_policy(10, None, exempt=3)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"^exempt must be a collection of tool names \(str\), got a bytes among them: "
        r"b'read'$",
    ):
        spill_policy(10, None, exempt=[b"read"])  # type: ignore[list-item]


def test_memory_store_satisfies_the_store_protocol() -> None:
    store: SpillStore = MemoryStore()
    policy = spill_policy(10, store)
    assert isinstance(policy, SpillPolicy)
    assert policy.store is store
    assert policy.exempt == {"read", "read_file"}


def test_max_inline_bytes_configures_the_dispatch_log_arm() -> None:
    with code_system(max_inline_bytes=321) as configured:
        assert isinstance(configured.dispatch_spill, SpillPolicy)
        assert configured.dispatch_spill.max_inline_bytes == 321
        assert configured.dispatch_spill.store is None
    with code_system() as unconfigured:
        assert unconfigured.dispatch_spill is None
