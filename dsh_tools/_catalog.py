"""The tool catalog: ``docs/tool-catalog.md``, exactly what the model receives for each tool.

Source of truth is the shipped schema, not the source text: each manifest entry *boots* its
tool module and harvests the schema projection (``name``, ``description``, ``parameters``), so
enums built from constants, composed descriptions and raw registrations appear as the model
sees them. A completeness guard (``assert_manifest_complete``) finds every tool module on disk
and fails when one is missing from the manifest, so a new tool cannot go undocumented.

``python -m dsh_tools._catalog`` writes the catalog; ``--check`` exits 1 when the committed file
is stale (CI runs it); ``--stdout`` prints it.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._system import ToolSystem

__all__ = [
    "CATALOG_PATH",
    "DEFAULT_MANIFEST",
    "NOT_SHIPPED",
    "REPO_ROOT",
    "CatalogEntry",
    "assert_manifest_complete",
    "boot_in_system",
    "check_catalog",
    "discover_tool_modules",
    "harvest",
    "main",
    "render_catalog",
    "render_default_catalog",
    "write_catalog",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout the package lives in (source paths in the catalog are relative to it)."""

CATALOG_PATH = Path("docs/tool-catalog.md")
"""Where the generated catalog lives, relative to ``REPO_ROOT``."""

_REGENERATE = "python -m dsh_tools._catalog"

SchemaDict = Mapping[str, Any]


@dataclass(frozen=True)
class CatalogEntry:
    """One tool module in the boot manifest.

    ``boot`` returns the module's harvested schema dicts (``name``, ``description``,
    ``parameters``), for example by starting a ``ToolSystem`` in the module's default
    configuration, registering the module and reading ``system.tools.schemas()``.
    ``requires`` names what the tools need at run time and ``writes`` what they write or
    affect; ``aliases`` lists other names deployments ship the tools under; ``note`` is a
    deployment note printed after the package's tools.
    """

    package: str
    source_path: str
    requires: Sequence[str]
    writes: Sequence[str]
    aliases: Sequence[str] = ()
    note: str | None = None
    boot: Callable[[], Sequence[SchemaDict]] = field(default=lambda: (), compare=False)


# --- boot recipes ------------------------------------------------------------------------------

_BOOT_ROOT = Path("/")  # the schemas do not depend on the workspace; "/" is always there


def boot_in_system(
    register: Callable[[ToolSystem], object], *, mode: str = "native"
) -> list[dict[str, Any]]:
    """Start a ``ToolSystem`` in ``mode`` (no code runtime), let ``register(system)`` register
    a module's tools, harvest ``system.tools.schemas()`` and stop the system."""
    from ._system import ToolSystem
    from .actors._config import ToolsConfig

    with ToolSystem.start(ToolsConfig(mode=mode), code_runtime=None) as system:
        register(system)
        return list(system.tools.schemas())


def _boot_fs() -> list[dict[str, Any]]:
    from .examples import fs_tools

    def register(system: ToolSystem) -> None:
        for definition in fs_tools(_BOOT_ROOT):
            system.tools.register(definition)

    return boot_in_system(register)


def _boot_bash() -> list[dict[str, Any]]:
    from .examples import bash_tool

    return boot_in_system(lambda system: system.tools.register(bash_tool(_BOOT_ROOT)))


def _boot_code_mode() -> list[dict[str, Any]]:
    return boot_in_system(lambda system: None, mode="code")


DEFAULT_MANIFEST: list[CatalogEntry] = [
    CatalogEntry(
        package="dsh-tools",
        source_path="dsh_tools/_code_mode.py",
        requires=["tools", "code runtime (execution time)"],
        writes=[
            "tool/call",
            "tool/code-dispatch-start and tool/code-dispatch per sub-call",
            "tool/result",
        ],
        boot=_boot_code_mode,
        note=(
            'Registered by the tool system itself under `mode="code"` and `mode="both"`. '
            "Under `code` it is the only tool schema the model receives; the other tools are "
            "declared as a generated Python SDK prompt section, and every call a program makes "
            "runs through the full pipeline."
        ),
    ),
    CatalogEntry(
        package="dsh-tools-fs",
        source_path="dsh_tools/examples/_fs.py",
        requires=["tools", "workspace root"],
        writes=["tool/call", "tool/result", "files under the workspace root"],
        boot=_boot_fs,
        note=(
            "Built by `fs_tools(root)` (or `example_tools(root)`): every path is confined to "
            "the workspace root. `read_file` and `list_dir` are concurrency-safe; `write_file` "
            "and `edit_file` run exclusively and present diff cards."
        ),
    ),
    CatalogEntry(
        package="dsh-tools-bash",
        source_path="dsh_tools/examples/_bash.py",
        requires=["tools", "workspace root", "/bin/sh"],
        writes=["tool/call", "tool/result", "anything the command changes"],
        boot=_boot_bash,
        note=(
            "Built by `bash_tool(root, timeout_ms=120000)`: the command runs under a supervisor "
            "that kills every process it started (those that left its process group included) "
            "on abort, on timeout (enforced by `timeout_policy`), when the shell exits and when "
            "the harness dies."
        ),
    ),
]
"""The boot manifest, in render order. Each entry boots its module in a fresh ``ToolSystem``;
replace an entry's ``boot`` (``dataclasses.replace``) to harvest differently."""

NOT_SHIPPED: Mapping[str, str] = {
    "dsh_tools/_bench.py": "benchmark workloads, never registered for a model",
    "dsh_tools/integrations/mcp/_tools.py": "adapts whatever tools an MCP server lists at run time",
}
"""Modules that build tool definitions but ship no model-facing tool, with the reason."""


# --- completeness guard -------------------------------------------------------------------------

_DEFINERS = frozenset(("define_tool", "ToolDefinition"))
_EXCLUDED_DIRS = ("dsh_tools/registry/",)  # where definitions are made, not tools


def _defines_tools(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in _DEFINERS:
                return True
    return False


def discover_tool_modules(scan_root: Path | None = None) -> list[str]:
    """Every module under ``dsh_tools/`` that builds tool definitions (calls ``define_tool`` or
    constructs a ``ToolDefinition``), as sorted repo-relative paths. The registry itself, which
    implements those, and the ``NOT_SHIPPED`` modules are not tool modules."""
    root = REPO_ROOT if scan_root is None else scan_root
    found: list[str] = []
    for path in sorted((root / "dsh_tools").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(_EXCLUDED_DIRS) or relative in NOT_SHIPPED:
            continue
        if _defines_tools(path.read_text(encoding="utf-8")):
            found.append(relative)
    return found


def assert_manifest_complete(
    manifest: Sequence[CatalogEntry] | None = None, scan_root: Path | None = None
) -> None:
    """Raise ``LookupError`` naming every tool module on disk that no manifest entry boots."""
    entries = DEFAULT_MANIFEST if manifest is None else manifest
    listed = {entry.source_path for entry in entries}
    missing = [module for module in discover_tool_modules(scan_root) if module not in listed]
    if missing:
        raise LookupError(
            f"{len(missing)} tool module(s) not in the boot manifest: {', '.join(missing)}. "
            "Add a CatalogEntry for each to DEFAULT_MANIFEST in dsh_tools/_catalog.py so its "
            "schemas are catalogued."
        )


# --- harvesting and rendering -------------------------------------------------------------------


def harvest(
    manifest: Sequence[CatalogEntry] | None = None,
) -> list[tuple[CatalogEntry, list[dict[str, Any]]]]:
    """Boot every entry and collect its schemas, sorted by tool name.

    Checks completeness first, and that every harvested ``parameters`` root is an object.
    """
    entries = DEFAULT_MANIFEST if manifest is None else manifest
    if manifest is None:
        assert_manifest_complete(entries)
    out: list[tuple[CatalogEntry, list[dict[str, Any]]]] = []
    for entry in entries:
        schemas = [dict(schema) for schema in entry.boot()]
        for schema in schemas:
            parameters = schema.get("parameters")
            if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
                raise ValueError(
                    f'{entry.package}: tool "{schema.get("name")}" parameters root must have '
                    '"type": "object"'
                )
        schemas.sort(key=lambda schema: str(schema["name"]))
        out.append((entry, schemas))
    return out


def _code_list(values: Sequence[str]) -> str:
    return ", ".join(f"`{value}`" for value in values) if values else "-"


def _table_cell(text: str | None) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>") if text else "-"


def render_catalog(
    entries_with_schemas: Sequence[tuple[CatalogEntry, Sequence[SchemaDict]]],
) -> str:
    """The catalog Markdown for harvested entries, in the order given (deterministic)."""
    lines = [
        "<!-- Generated by dsh_tools/_catalog.py; do not edit by hand.",
        f"     Run `{_REGENERATE}` to regenerate. -->",
        "",
        "# Tool Schema Catalog",
        "",
        "Every model-facing tool this project ships: the `name`, `description` and JSON Schema "
        "`parameters` the model receives. The page is generated by booting each tool module "
        "and reading the registry's schema projection, so it shows the schemas exactly as they "
        f"are sent. `{_REGENERATE} --check` fails when this file is stale.",
        "",
        "## Tool Package Map",
        "",
        "This table connects model-visible tool names to the package behind them. Exact JSON "
        "Schemas follow in the package sections below.",
        "",
        "| Tool package | Model-visible names | Requires | Writes / affects | Shipped aliases "
        "| Deployment note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for entry, schemas in entries_with_schemas:
        names = [str(schema["name"]) for schema in schemas]
        lines.append(
            f"| `{entry.package}` | {_code_list(names)} | {_code_list(entry.requires)} "
            f"| {_code_list(entry.writes)} | {_code_list(entry.aliases)} "
            f"| {_table_cell(entry.note)} |"
        )
    lines.append("")
    for entry, schemas in entries_with_schemas:
        lines += [f"## `{entry.package}`", ""]
        for schema in schemas:
            lines += [f"### `{schema['name']}`", ""]
            description = schema.get("description")
            if description:
                lines += [str(description), ""]
            lines += [
                "```json",
                json.dumps(schema.get("parameters"), indent=2, ensure_ascii=False),
                "```",
                "",
                f"Source: [`{entry.source_path}`](../{entry.source_path})",
                "",
            ]
        if entry.note:
            lines += [entry.note, ""]
    return "\n".join(lines)


def render_default_catalog() -> str:
    """The catalog of the default manifest, freshly harvested."""
    return render_catalog(harvest())


def write_catalog(path: Path | None = None) -> Path:
    """Harvest the default manifest and write the catalog; return the path written."""
    target = REPO_ROOT / CATALOG_PATH if path is None else path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_default_catalog(), encoding="utf-8")
    return target


def check_catalog(path: Path | None = None) -> bool:
    """Whether the committed catalog equals a fresh render of the default manifest."""
    target = REPO_ROOT / CATALOG_PATH if path is None else path
    try:
        committed = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return committed == render_default_catalog()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write the catalog (default), ``--check`` it, or print it (``--stdout``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    unknown = [arg for arg in args if arg not in ("--check", "--stdout")]
    if unknown:
        print(f"usage: {_REGENERATE} [--check | --stdout]", file=sys.stderr)
        return 2
    if "--stdout" in args:
        sys.stdout.write(render_default_catalog())
        return 0
    if "--check" in args:
        if check_catalog():
            return 0
        print(f"{CATALOG_PATH} is stale; run `{_REGENERATE}` and commit it", file=sys.stderr)
        return 1
    print(f"wrote {write_catalog().relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
