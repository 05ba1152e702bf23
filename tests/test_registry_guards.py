"""Guards: monotonic, synchronous denials."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import call, echo, fixture, text

from dsh_tools import (
    Allow,
    Ask,
    Deny,
    FrozenDict,
    HarnessError,
    ToolSystem,
)


class Counter:
    """A tool body that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, args: Any, ctx: Any) -> Any:
        self.runs += 1
        return [{"type": "text", "text": f"ran:{ctx.name}"}]


def record_post(system: ToolSystem, seen: list[Any]) -> None:
    async def post(exec: Any, result: Any, next: Any) -> Any:
        seen.append(result)
        return await next()

    system.tools.on_post_execute(post)


def test_rp23_global_guards_deny_in_order(system: ToolSystem) -> None:
    body = Counter()
    system.tools.register(fixture("t", body))
    system.tools.guard(lambda exec: None)
    system.tools.guard(lambda exec: "global denial")
    posts: list[Any] = []
    record_post(system, posts)

    result = system.execute(call("t"))
    assert text(result) == "Error: global denial"
    assert result.to_dict()["error"] == {"message": "global denial"}
    assert body.runs == 0
    assert posts == [result]


def test_rp24_scoped_guards_deny_only_their_agent_until_disposed(system: ToolSystem) -> None:
    body = Counter()
    system.tools.register(fixture("t", body))
    scope = system.agent("A")

    def terminal(exec: Any) -> str:
        assert type(exec.arguments) is FrozenDict
        return "terminal policy"

    first = scope.tools.guard(terminal)
    scope.tools.guard(terminal)

    async def allow(exec: Any, next: Any) -> Any:
        return Allow()

    scope.tools.on_pre_execute(allow, prepend=True)

    assert text(system.execute(call("t", {"k": 1}, agent="A"))) == "Error: terminal policy"
    assert text(system.execute(call("t", agent="B"))) == "ran:t"
    assert body.runs == 1
    first()
    assert text(system.execute(call("t", agent="A"))) == "Error: terminal policy"
    scope.close()
    assert text(system.execute(call("t", agent="A"))) == "ran:t"
    assert body.runs == 2


def test_rp25_a_guard_added_during_the_pass_is_evaluated_in_the_same_pass(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("t"))
    log: list[str] = []
    added: list[bool] = []

    def late(exec: Any) -> str:
        log.append("late")
        return "late denial"

    def first(exec: Any) -> None:
        log.append("first")
        if not added:
            added.append(True)
            system.tools.guard(late)

    system.tools.guard(first)
    assert text(system.execute(call("t"))) == "Error: late denial"
    assert log == ["first", "late"]


def test_rp26_a_guard_replacing_itself_starts_a_new_generation(system: ToolSystem) -> None:
    scope = system.agent("A")
    scope.tools.register(fixture("t"))
    log: list[str] = []
    disposers: list[Any] = []

    def replacement(exec: Any) -> str:
        log.append("replacement")
        return "replacement denial"

    def first(exec: Any) -> None:
        log.append("first")
        disposers[0]()
        scope.tools.guard(replacement)

    disposers.append(scope.tools.guard(first))
    assert text(system.execute(call("t", agent="A"))) == "ran:t"
    assert log == ["first"]
    assert text(system.execute(call("t", agent="A", call_id="c2"))) == ("Error: replacement denial")
    assert log == ["first", "replacement"]


def test_rp27_a_raising_guard_fails_closed_without_post(system: ToolSystem) -> None:
    body = Counter()
    system.tools.register(fixture("t", body))

    def broken(exec: Any) -> str:
        raise HarnessError("g", "G")

    system.tools.guard(broken)
    posts: list[Any] = []
    record_post(system, posts)
    observed: list[Any] = []
    system.tools.on_result(lambda exec, result: observed.append(result))

    result = system.execute(call("t"))
    assert text(result) == "Error: g"
    assert result.to_dict()["error"] == {
        "message": "g",
        "info": {"name": "HarnessError", "code": "G"},
    }
    assert posts == []
    assert observed == [result]
    assert body.runs == 0


@pytest.mark.parametrize("returned", [42, b"bytes", ["reason"]])
def test_rp27_a_guard_returning_a_non_str_fails_closed(system: ToolSystem, returned: Any) -> None:
    body = Counter()
    system.tools.register(fixture("t", body))
    system.tools.guard(lambda exec: returned)
    result = system.execute(call("t"))
    assert result.is_error
    assert "guard" in text(result)
    assert body.runs == 0


def test_a_guard_returning_a_non_str_is_named_in_the_failure(system: ToolSystem) -> None:
    system.tools.register(fixture("t", Counter()))

    def allow_all(exec: Any) -> Any:
        return True  # a guard written as a predicate

    system.tools.guard(lambda exec: None)
    system.tools.guard(allow_all)
    result = system.execute(call("t"))
    assert text(result) == (
        "Error: a guard returned bool; guards return None or a str reason (the guard: "
        "test_a_guard_returning_a_non_str_is_named_in_the_failure.<locals>.allow_all)"
    )


def test_rp28_a_pre_execute_deny_skips_the_guards(system: ToolSystem) -> None:
    system.tools.register(echo())
    guarded: list[str] = []
    system.tools.guard(lambda exec: guarded.append(exec.call_id))

    async def deny(exec: Any, next: Any) -> Any:
        return Deny("pre denial")

    system.tools.on_pre_execute(deny)
    assert text(system.execute(call())) == "Error: pre denial"
    assert guarded == []


class AllowOnce:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def request(self, **kwargs: Any) -> str:
        self.requests.append(kwargs)
        return "allowed-once"


def test_rp28_an_approved_ask_still_runs_the_guards(make_system: Any) -> None:
    approval = AllowOnce()
    system = make_system(approval=approval)
    system.tools.register(echo())
    guarded: list[str] = []

    def guard(exec: Any) -> str:
        guarded.append(exec.call_id)
        return "guard still says no"

    system.tools.guard(guard)

    async def ask(exec: Any, next: Any) -> Any:
        return Ask("check")

    system.tools.on_pre_execute(ask)
    assert text(system.execute(call(agent="A"))) == "Error: guard still says no"
    assert guarded == ["c1"]
    assert len(approval.requests) == 1


def test_an_async_def_guard_is_refused_when_registered(system: ToolSystem) -> None:
    # Registered, it would fail every call closed ("guards must be synchronous").
    async def checks_a_service(exec: Any) -> str | None:
        return None

    with pytest.raises(TypeError) as error:
        system.agent("A").tools.guard(checks_a_service)
    assert str(error.value) == (
        f"guard listener {checks_a_service.__qualname__} must be synchronous (a def returning "
        "None or a reason), not async def: use an async pre-execute hook for a policy that awaits"
    )
