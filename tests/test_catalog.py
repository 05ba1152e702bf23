"""The generated tool catalog: rendering, staleness and incomplete manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_tools._catalog import (
    CATALOG_PATH,
    DEFAULT_MANIFEST,
    REPO_ROOT,
    CatalogEntry,
    assert_manifest_complete,
    check_catalog,
    discover_tool_modules,
    harvest,
    main,
    render_catalog,
)

DEMO_SCHEMA = {
    "name": "demo",
    "description": "A demo tool.",
    "parameters": {"type": "object", "properties": {}},
}


def _demo_entry(**extra: object) -> CatalogEntry:
    return CatalogEntry(
        package="demo-pkg",
        source_path="pkgs/demo/tool.py",
        requires=["tools"],
        writes=["tool/result"],
        boot=lambda: [DEMO_SCHEMA],
        **extra,  # type: ignore[arg-type]
    )


# --- one package's catalog ------------------------------------------------------------------------


def test_one_package_catalog_renders_the_map_row_sections_schema_and_source() -> None:
    markdown = render_catalog([(_demo_entry(), [DEMO_SCHEMA])])

    assert "| `demo-pkg` | `demo` | `tools` | `tool/result` |" in markdown
    assert "## `demo-pkg`" in markdown
    assert "### `demo`" in markdown
    assert "A demo tool." in markdown
    assert "```json" in markdown
    assert "Source: [`pkgs/demo/tool.py`](../pkgs/demo/tool.py)" in markdown


def test_catalog_layout_is_exact() -> None:
    entry = _demo_entry(aliases=["demo2"], note="Needs a | pipe.\nTwo lines.")

    markdown = render_catalog([(entry, [DEMO_SCHEMA])])

    lines = markdown.split("\n")
    assert lines[0].startswith("<!-- Generated") and "do not edit by hand" in lines[0]
    assert "python -m dsh_tools._catalog" in lines[1] and lines[1].endswith("-->")
    assert lines[3] == "# Tool Schema Catalog"
    header = lines.index("## Tool Package Map")
    table = lines.index(
        "| Tool package | Model-visible names | Requires | Writes / affects | Shipped aliases "
        "| Deployment note |"
    )
    assert table > header
    assert lines[table + 1] == "| --- | --- | --- | --- | --- | --- |"
    assert lines[table + 2] == (
        "| `demo-pkg` | `demo` | `tools` | `tool/result` | `demo2` "
        "| Needs a \\| pipe.<br>Two lines. |"
    )
    section = lines.index("## `demo-pkg`")
    assert lines[section : section + 12] == [
        "## `demo-pkg`",
        "",
        "### `demo`",
        "",
        "A demo tool.",
        "",
        "```json",
        "{",
        '  "type": "object",',
        '  "properties": {}',
        "}",
        "```",
    ]
    assert lines[section + 13 : section + 17] == [
        "Source: [`pkgs/demo/tool.py`](../pkgs/demo/tool.py)",
        "",
        "Needs a | pipe.",
        "Two lines.",
    ]


def test_empty_aliases_and_note_render_as_dashes() -> None:
    markdown = render_catalog([(_demo_entry(), [DEMO_SCHEMA])])

    assert "| `demo-pkg` | `demo` | `tools` | `tool/result` | - | - |" in markdown


def test_schemas_keep_key_order_and_non_ascii_text() -> None:
    schema = {
        "name": "greet",
        "description": "Grüße.",
        "parameters": {
            "type": "object",
            "properties": {
                "z": {"type": "string", "description": "名前"},
                "a": {"type": "integer"},
            },
        },
    }

    markdown = render_catalog([(_demo_entry(), [schema])])

    assert json.dumps(schema["parameters"], indent=2, ensure_ascii=False) in markdown
    assert markdown.index('"z"') < markdown.index('"a"')
    assert "名前" in markdown


def test_multiple_tools_are_joined_in_the_map_row() -> None:
    second = {**DEMO_SCHEMA, "name": "zeta"}

    markdown = render_catalog([(_demo_entry(), [DEMO_SCHEMA, second])])

    assert "| `demo-pkg` | `demo`, `zeta` |" in markdown


def test_harvest_sorts_tools_by_name_and_requires_object_roots() -> None:
    entry = CatalogEntry(
        package="p",
        source_path="p.py",
        requires=[],
        writes=[],
        boot=lambda: [{**DEMO_SCHEMA, "name": "b"}, {**DEMO_SCHEMA, "name": "a"}],
    )
    broken = CatalogEntry(
        package="q",
        source_path="q.py",
        requires=[],
        writes=[],
        boot=lambda: [{"name": "x", "description": "", "parameters": {"type": "string"}}],
    )

    [(_, schemas)] = harvest([entry])

    assert [schema["name"] for schema in schemas] == ["a", "b"]
    with pytest.raises(ValueError, match='"type": "object"'):
        harvest([broken])


# --- manifests ------------------------------------------------------------------------------------


def test_an_empty_manifest_is_incomplete_and_names_a_real_tool_module() -> None:
    with pytest.raises(LookupError, match="not in the boot manifest") as raised:
        assert_manifest_complete([])

    assert "dsh_tools/examples/_fs.py" in str(raised.value)
    assert "dsh_tools/examples/_bash.py" in str(raised.value)


def test_the_default_manifest_is_complete() -> None:
    assert_manifest_complete()


def test_the_committed_catalog_is_fresh() -> None:
    assert check_catalog(), f"{CATALOG_PATH} is stale: run `python -m dsh_tools._catalog`"
    assert main(["--check"]) == 0


def test_every_harvested_parameters_root_is_an_object() -> None:
    harvested = harvest()

    assert [entry.package for entry, _ in harvested] == [e.package for e in DEFAULT_MANIFEST]
    names = [schema["name"] for _, schemas in harvested for schema in schemas]
    assert names == ["run_code", "edit_file", "list_dir", "read_file", "write_file", "bash"]
    for _, schemas in harvested:
        for schema in schemas:
            assert set(schema) == {"name", "description", "parameters"}
            assert schema["parameters"]["type"] == "object"


# --- discovery and the command line ------------------------------------------------------------


def test_discovery_finds_modules_that_define_tools(tmp_path: Path) -> None:
    package = tmp_path / "dsh_tools"
    (package / "registry").mkdir(parents=True)
    (package / "tools").mkdir()
    (package / "tools" / "a.py").write_text(
        "from x import define_tool\nT = define_tool(name='a')\n"
    )
    (package / "tools" / "b.py").write_text("import x\nT = x.ToolDefinition(name='b')\n")
    (package / "tools" / "c.py").write_text('"""Mentions define_tool( in prose only."""\n')
    (package / "registry" / "_definition.py").write_text(
        "def define_tool(): return define_tool()\n"
    )

    assert discover_tool_modules(tmp_path) == ["dsh_tools/tools/a.py", "dsh_tools/tools/b.py"]
    with pytest.raises(LookupError, match=r"dsh_tools/tools/b\.py"):
        assert_manifest_complete(
            [CatalogEntry("a", "dsh_tools/tools/a.py", [], [])], scan_root=tmp_path
        )


def test_check_reports_a_stale_catalog(tmp_path: Path) -> None:
    stale = tmp_path / "tool-catalog.md"
    stale.write_text("# an old catalog\n")

    assert check_catalog(stale) is False
    assert check_catalog(tmp_path / "missing.md") is False
    assert check_catalog(REPO_ROOT / CATALOG_PATH) is True


def test_command_line_prints_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stdout"]) == 0

    assert capsys.readouterr().out == (REPO_ROOT / CATALOG_PATH).read_text(encoding="utf-8")
    assert main(["--bogus"]) == 2
