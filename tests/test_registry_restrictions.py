"""Restrictions (agent-scope visibility masks)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import call, fixture, text

from dsh_tools import ToolSystem


def names(schemas: list[dict[str, Any]]) -> list[str]:
    return [s["name"] for s in schemas]


def test_rp16_an_allow_mask_hides_other_globals_but_not_locals(system: ToolSystem) -> None:
    system.tools.register(fixture("read"))
    system.tools.register(fixture("bash"))
    scope = system.agent("A")
    scope.tools.register(fixture("capture"))
    scope.tools.restrict(allow=["read"])

    assert sorted(names(system.tools.schemas("A"))) == ["capture", "read"]
    assert text(system.execute(call("bash", agent="A"))) == 'Error: unknown tool "bash"'
    assert text(system.execute(call("read", agent="A"))) == "ran:read"
    assert text(system.execute(call("capture", agent="A"))) == "ran:capture"
    assert sorted(names(system.tools.schemas())) == ["bash", "read"]
    assert system.tools.get("bash", "A") is None


def test_rp17_masks_apply_live_to_globals_registered_later(system: ToolSystem) -> None:
    system.tools.register(fixture("read"))
    system.tools.register(fixture("bash"))
    system.agent("D").tools.restrict(deny=["bash"])
    system.agent("L").tools.restrict(allow=["read"])
    system.tools.register(fixture("web"))
    system.agent("D").tools.register(fixture("d-local"))
    system.agent("L").tools.register(fixture("l-local"))

    assert sorted(names(system.tools.schemas("D"))) == ["d-local", "read", "web"]
    assert sorted(names(system.tools.schemas("L"))) == ["l-local", "read"]
    assert text(system.execute(call("web", agent="D"))) == "ran:web"
    assert text(system.execute(call("web", agent="L"))) == 'Error: unknown tool "web"'


def test_rp18_restrictions_intersect_and_lift_independently(system: ToolSystem) -> None:
    for name in ("a", "b", "c"):
        system.tools.register(fixture(name))
    scope = system.agent("A")
    lift = scope.tools.restrict(allow=["a", "b"])
    scope.tools.restrict(deny=["b"])
    assert names(scope.tools.schemas()) == ["a"]
    lift()
    assert names(scope.tools.schemas()) == ["a", "c"]


def test_rp18_the_filter_lists_are_copied_at_call_time(system: ToolSystem) -> None:
    system.tools.register(fixture("a"))
    system.tools.register(fixture("b"))
    denied = ["a"]
    system.agent("A").tools.restrict(deny=denied)
    denied.append("b")
    assert names(system.tools.schemas("A")) == ["b"]


def test_rp19_restrict_through_the_global_handle_is_refused(system: ToolSystem) -> None:
    system.tools.register(fixture("real"))
    with pytest.raises(ValueError, match="requires a scoped context"):
        system.tools.restrict(deny=["real"])


def test_rp19_an_empty_restrict_is_a_no_op_error(system: ToolSystem) -> None:
    with pytest.raises(ValueError, match="no-op"):
        system.agent("A").tools.restrict()


def test_rp19_a_scope_local_name_is_an_unknown_global(system: ToolSystem) -> None:
    system.tools.register(fixture("real"))
    scope = system.agent("A")
    scope.tools.register(fixture("local"))
    with pytest.raises(ValueError, match='unknown global tool "local"'):
        scope.tools.restrict(allow=["local"])


def test_rp19_unknown_names_list_the_known_globals(system: ToolSystem) -> None:
    system.tools.register(fixture("real"))
    scope = system.agent("A")
    with pytest.raises(ValueError) as single:
        scope.tools.restrict(allow=["reall"])
    assert str(single.value).endswith('unknown global tool "reall"; known global tools: real')
    with pytest.raises(ValueError) as plural:
        scope.tools.restrict(deny=["ghost", "wraith"])
    assert 'unknown global tools "ghost", "wraith"' in str(plural.value)


def test_rp19_with_no_globals_the_known_list_is_none(system: ToolSystem) -> None:
    with pytest.raises(ValueError, match=r"known global tools: \(none\)"):
        system.agent("A").tools.restrict(deny=["ghost"])


def test_rp19_a_bare_string_filter_is_a_type_error(system: ToolSystem) -> None:
    system.tools.register(fixture("read"))
    with pytest.raises(TypeError):
        system.agent("A").tools.restrict(allow="read")


def test_a_filter_that_is_not_a_list_of_names_says_which_and_why(system: ToolSystem) -> None:
    # Not "'int' object is not iterable", which names neither the filter nor what it takes.
    system.tools.register(fixture("read"))
    scope = system.agent("A")
    with pytest.raises(TypeError) as error:
        scope.tools.restrict(allow=3)  # type: ignore[arg-type]
    assert str(error.value) == "tools.restrict() allow must be a list of tool names, got int"
    with pytest.raises(TypeError) as error:
        scope.tools.restrict(deny=[b"read"])  # type: ignore[list-item]
    assert str(error.value) == "tools.restrict() deny must hold tool names (str), got bytes"
    assert names(scope.tools.schemas()) == ["read"]


def test_rp20_allow_empty_hides_every_global_but_keeps_locals(system: ToolSystem) -> None:
    system.tools.register(fixture("read"))
    system.tools.register(fixture("bash"))
    scope = system.agent("A")
    scope.tools.register(fixture("local"))
    scope.tools.restrict(allow=[])
    assert names(scope.tools.schemas()) == ["local"]
    assert text(system.execute(call("read", agent="A"))) == 'Error: unknown tool "read"'
    assert text(system.execute(call("local", agent="A"))) == "ran:local"


def test_rp21_restrict_refuses_the_reserved_transport_before_unknown_names(
    make_system: Any,
) -> None:
    code = make_system(mode="code")
    with pytest.raises(ValueError, match="cannot name reserved Code Mode presentation transport"):
        code.agent("A").tools.restrict(deny=["run_code", "ghost"])


def test_rp21_the_transport_is_never_masked(make_system: Any) -> None:
    code = make_system(mode="code")
    code.tools.register(fixture("read"))
    scope = code.agent("A")
    scope.tools.restrict(allow=[])
    transport = scope.tools.get("run_code")
    assert transport is not None
    assert transport.name == "run_code"
    assert names(scope.tools.schemas()) == ["run_code"]


def test_rp22_masking_a_shadowed_global_keeps_the_local(system: ToolSystem) -> None:
    system.tools.register(fixture("x", lambda a, c: [{"type": "text", "text": "global x"}]))
    scope = system.agent("A")
    scope.tools.register(fixture("x", lambda a, c: [{"type": "text", "text": "local x"}]))
    scope.tools.restrict(deny=["x"])
    assert names(scope.tools.schemas()) == ["x"]
    assert text(system.execute(call("x", agent="A"))) == "local x"
    assert text(system.execute(call("x"))) == "global x"


def test_rp22_a_restricted_away_parallel_global_is_exclusive_for_the_agent(
    system: ToolSystem,
) -> None:
    system.tools.register(fixture("safe", is_concurrency_safe=lambda args: True))
    system.tools.register(fixture("other"))
    system.agent("A").tools.restrict(deny=["safe"])
    assert system.tools.execution_mode(call("safe")) == "parallel"
    assert system.tools.execution_mode(call("safe", agent="A")) == "exclusive"
    assert system.agent("A").tools.execution_mode(call("safe")) == "exclusive"
