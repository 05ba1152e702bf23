"""The package's import graph: no module imports itself back through others, the registry and
pipeline never import Code Mode, the actor layer imports nothing above it, and every seam has
a precise type in ``dsh_tools.types``."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import dsh_tools
import dsh_tools.types
from dsh_tools import ToolsHandle

PACKAGE = Path(dsh_tools.__file__).parent


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports, at module level or inside functions alike
    (imports of a package's own ``__init__`` from inside that package aside)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            targets = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        found.update(t for t in targets if t in modules and t != name)
    return {t for t in found if not name.startswith(t + ".")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        current = todo.pop()
        if current == goal:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(graph[current])
    return False


def test_no_module_imports_itself_back_through_others() -> None:
    graph = _graph()
    cycles = sorted(
        f"{name} <-> {target}"
        for name, targets in graph.items()
        for target in targets
        if _reaches(graph, target, name)
    )
    assert cycles == []


def test_registry_and_pipeline_never_import_code_mode() -> None:
    graph = _graph()
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith(("dsh_tools.registry", "dsh_tools.pipeline"))
        for target in targets
        if target.startswith("dsh_tools.codebridge")
    )
    assert wrong == []


def test_the_actor_layer_imports_nothing_above_it() -> None:
    graph = _graph()
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("dsh_tools.actors")
        for target in targets
        if not target.startswith("dsh_tools.actors")
    )
    assert wrong == []


def test_every_type_a_seam_s_documented_shape_names_is_in_dsh_tools_types() -> None:
    # A hook annotated as docs/types.md shows it needs every name of its shape; one missing
    # from dsh_tools.types (ToolExecutionResult was) sends the reader hunting elsewhere.
    page = (Path(__file__).resolve().parents[1] / "docs" / "types.md").read_text()
    rows = [line.split("|") for line in page.splitlines() if line.startswith("| `")]
    shapes = " ".join(" ".join(re.findall(r"`([^`]*)`", row[3])) for row in rows if len(row) > 3)
    # RayPlacement is named as an example of a Placement; it lives in dsh_tools.distributed
    named = set(re.findall(r"\b([A-Z][A-Za-z]+)\b", shapes)) - {"None", "RayPlacement"}
    assert named, "the table of seams was not found"
    missing = sorted(name for name in named if name not in dsh_tools.types.__all__)
    assert missing == []


def test_every_seam_has_a_type_users_can_annotate_with() -> None:
    for name in dsh_tools.types.__all__:
        assert getattr(dsh_tools.types, name) is not None
    hints = {
        method: typing.get_type_hints(getattr(ToolsHandle, method))
        for method in (
            "guard",
            "on_pre_execute",
            "on_execute",
            "on_post_execute",
            "on_result",
            "on_change",
            "on_code_dispatch_log",
            "on_assemble",
        )
    }
    assert hints["on_pre_execute"]["hook"] == dsh_tools.types.PreExecuteHook
    assert hints["on_execute"]["hook"] == dsh_tools.types.ExecuteWrapper
    assert hints["on_post_execute"]["hook"] == dsh_tools.types.PostExecuteHook
    assert hints["guard"]["fn"] == dsh_tools.types.Guard
    assert hints["on_result"]["fn"] == dsh_tools.types.ResultObserver
    assert hints["on_change"]["fn"] == dsh_tools.types.ChangeObserver
    assert hints["on_code_dispatch_log"]["hook"] == dsh_tools.types.CodeDispatchLogHook
    assert hints["on_assemble"]["hook"] == dsh_tools.types.AssembleHook
    start = typing.get_type_hints(dsh_tools.ToolSystem.__init__)
    assert typing.Any not in typing.get_args(start["approval"])
    assert dsh_tools.types.CodeRuntime in typing.get_args(start["code_runtime"])
    definition = typing.get_type_hints(dsh_tools.define_tool)
    assert dsh_tools.types.Placement in typing.get_args(definition["placement"])
    assert dsh_tools.types.ContentFinalizer in typing.get_args(definition["finalize_content"])
    spill = typing.get_type_hints(dsh_tools.spill_policy)
    assert dsh_tools.types.SpillStore in typing.get_args(spill["store"])
