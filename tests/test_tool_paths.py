"""@tool with ``pathlib`` paths, as file tools are written: a path parameter (also inside a
dataclass, a list or an optional, with a path default, a field's too) is a JSON string in the
schema and a path in the body, a returned path is its text, and a call that sends no string
for one fails naming the argument."""

from __future__ import annotations

import dataclasses
import pathlib
import typing
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from dsh_tools import ExecuteBatch, ExecuteCall, ToolCall, ToolsConfig, ToolSystem, tool
from dsh_tools.registry import thaw


@dataclasses.dataclass
class Copy:
    source: pathlib.Path
    target: pathlib.PurePosixPath | None = None


@tool
def copy_files(
    copies: list[Copy], root: pathlib.Path = pathlib.Path("/srv"), note: pathlib.Path | None = None
) -> list[pathlib.Path]:
    """Copy files.

    Args:
        copies: What to copy where.
        root: Where relative paths start.
        note: A file to log to.
    """
    done: list[pathlib.Path] = []
    for copy in copies:
        assert isinstance(copy.source, pathlib.Path)
        assert copy.target is None or type(copy.target) is pathlib.PurePosixPath
        done.append(root / copy.source)
    assert note is None or isinstance(note, pathlib.Path)
    return done


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(ToolsConfig(mode="both")) as started:
        started.tools.register(copy_files)
        yield started


def _call(system: ToolSystem, arguments: dict[str, Any]) -> Any:
    return system.execute(ExecuteCall(call_id="c1", name="copy_files", arguments=arguments))


def test_a_path_is_a_string_in_the_schema() -> None:
    schema = thaw(copy_files.parameters)
    path = {"type": "string", "format": "path"}
    assert schema["properties"]["root"] == {
        "description": "Where relative paths start.",
        **path,
        "default": "/srv",
    }
    assert schema["$defs"]["Copy"]["properties"]["source"] == path
    assert thaw(copy_files.output.schema) == {"type": "array", "items": {"type": "string"}}


def test_a_path_argument_arrives_as_a_path_and_a_returned_path_is_its_text(
    system: ToolSystem,
) -> None:
    arguments = {"copies": [{"source": "a.txt", "target": "/b.txt"}], "note": "log.txt"}
    result = _call(system, arguments)
    assert not result.is_error, result.content
    assert result.value == ["/srv/a.txt"]
    assert result.content[0]["text"] == '["/srv/a.txt"]'


def test_a_path_argument_that_is_no_string_fails_naming_where(system: ToolSystem) -> None:
    result = _call(system, {"copies": [{"source": 5}]})
    assert result.is_error
    assert result.error.message == (
        "invalid arguments: Expected `str`, got `int` - at `arguments.copies[0].source`"
    )


def test_paths_arrive_the_same_from_a_batch_and_from_code_mode(system: ToolSystem) -> None:
    text = '{"copies": [{"source": "x"}], "root": "/tmp"}'
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "copy_files", text)]))
    assert outcome.results[0].value == ["/tmp/x"]
    program = 'return await tools.copy_files({"copies": [{"source": "y"}]})'
    result = system.execute(
        ExecuteCall(
            call_id="c2", name="run_code", arguments={"code": program, "description": "Copy y"}
        )
    )
    assert not result.is_error, result.content
    assert '"/srv/y"' in result.content[0]["text"]


def test_a_define_tool_typed_view_holds_a_path(system: ToolSystem) -> None:
    import msgspec

    from dsh_tools import ToolOutput, define_tool

    class Target(msgspec.Struct):
        path: pathlib.Path

    touch = define_tool(
        name="touch",
        description="Touch a file.",
        parameters={"path": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
        ),
        execute=lambda args, ctx: type(args.path).__name__,
        args_type=Target,
    )
    system.tools.register(touch)
    result = system.execute(ExecuteCall(call_id="c1", name="touch", arguments={"path": "a"}))
    assert not result.is_error, result.content
    assert result.value == "PosixPath"


@dataclasses.dataclass
class Scan:
    """Where to scan."""

    root: pathlib.Path = pathlib.Path(".")
    depth: int = 2


class Listing(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    base_dir: pathlib.PurePosixPath = pathlib.PurePosixPath("/srv")
    show_hidden: bool = False


@dataclasses.dataclass
class Found:
    path: pathlib.Path
    parent: pathlib.Path = pathlib.Path("/")


@tool
def scan(scan: Scan, listing: Listing | None = None) -> list[Found]:
    """Scan a tree.

    Args:
        scan: What to scan.
        listing: How to list.
    """
    assert isinstance(scan.root, pathlib.Path)
    base = listing.base_dir if listing is not None else pathlib.PurePosixPath("/")
    assert isinstance(base, pathlib.PurePosixPath)
    return [Found(pathlib.Path(base) / scan.root)]


def test_a_path_default_of_a_dataclass_or_struct_field_is_shown_as_its_text() -> None:
    schema = thaw(scan.parameters)
    path = {"type": "string", "format": "path"}
    assert schema["$defs"]["Scan"]["properties"]["root"] == {**path, "default": "."}
    assert schema["$defs"]["Scan"]["description"] == "Where to scan."
    listing = schema["$defs"]["Listing"]
    assert listing["properties"]["baseDir"] == {**path, "default": "/srv"}
    assert listing["additionalProperties"] is False
    found = thaw(scan.output.schema)["items"]
    assert found["properties"]["parent"] == {"type": "string", "default": "/"}
    assert found["required"] == ["path", "parent"]


def test_a_field_left_out_gets_its_path_default(system: ToolSystem) -> None:
    system.tools.register(scan)
    result = system.execute(
        ExecuteCall(call_id="c1", name="scan", arguments={"scan": {}, "listing": {}})
    )
    assert not result.is_error, result.content
    assert result.value == [{"path": "/srv", "parent": "/"}]
    program = 'return await tools.scan({"scan": {"root": "src"}})'
    run = system.execute(
        ExecuteCall(call_id="c2", name="run_code", arguments={"code": program, "description": "x"})
    )
    assert not run.is_error, run.content
    assert '"/src"' in run.content[0]["text"]
    sdk = system.assemble_prompt().sections[0].text
    assert '# [format: path; default: "."]\n    root: NotRequired[str]' in sdk


@dataclasses.dataclass
class Tree:
    root: pathlib.Path = pathlib.Path(".")
    children: list[Tree] = dataclasses.field(default_factory=list)


def test_a_recursive_class_with_a_path_default_is_refused_naming_the_field() -> None:
    def walk(tree: Tree) -> int:
        """Walk."""
        return 0

    with pytest.raises(TypeError) as raised:
        tool(walk)
    assert str(raised.value).endswith(
        "field 'root' of Tree has the default PosixPath('.'), which its schema cannot show "
        "within Tree; give it as a factory (default_factory=lambda: PosixPath('.')) where the "
        "class takes one, or leave the default out"
    )


class Shelf:
    class Config(msgspec.Struct):
        """Where the shelf is."""

        root: pathlib.Path = pathlib.Path("/shelf")


class Rack:
    class Config(msgspec.Struct):
        """Where the rack is."""

        root: pathlib.Path = pathlib.Path("/rack")


def test_two_nested_classes_of_one_name_keep_their_own_schema_names() -> None:
    @tool
    def store(shelf: Shelf.Config, rack: Rack.Config) -> int:
        """Store."""
        return 0

    schema = thaw(store.parameters)
    module = Shelf.__module__
    shelf, rack = f"{module}.Shelf.Config", f"{module}.Rack.Config"
    assert sorted(schema["$defs"]) == sorted([shelf, rack])
    assert schema["properties"]["shelf"] == {"$ref": f"#/$defs/{shelf}"}
    assert schema["$defs"][rack]["properties"]["root"]["default"] == "/rack"


Item = typing.TypeVar("Item")


class Slot(msgspec.Struct, typing.Generic[Item]):
    item: Item


class PathSlot(Slot[int]):
    root: pathlib.Path = pathlib.Path(".")


@dataclasses.dataclass
class Cell(typing.Generic[Item]):
    item: Item


@dataclasses.dataclass
class PathCell(Cell[bool]):
    root: pathlib.Path = pathlib.Path(".")


def test_a_field_typed_by_a_generic_base_keeps_its_type_beside_a_path_default() -> None:
    @tool
    def fill(slot: PathSlot, cell: PathCell) -> int:
        """Fill."""
        return 0

    definitions = thaw(fill.parameters)["$defs"]
    assert definitions["PathSlot"]["properties"]["item"] == {"type": "integer"}
    assert definitions["PathCell"]["properties"]["item"] == {"type": "boolean"}


def test_a_refused_recursive_class_is_named_with_its_own_field_beside_another_class() -> None:
    def survey(pair: tuple[Scan, Tree]) -> int:
        """Survey."""
        return 0

    with pytest.raises(TypeError) as raised:
        tool(survey)
    assert "field 'root' of Tree has the default PosixPath('.')" in str(raised.value)
    assert "within Tree" in str(raised.value)


class Patch(msgspec.Struct, omit_defaults=True):
    mode: int | msgspec.UnsetType = msgspec.UNSET
    root: pathlib.Path = pathlib.Path(".")


@dataclasses.dataclass
class PatchRecord:
    mode: int | msgspec.UnsetType = msgspec.UNSET
    root: pathlib.Path = pathlib.Path(".")


def test_an_unset_field_beside_a_path_default_stays_without_a_default() -> None:
    @tool
    def apply(patch: Patch, record: PatchRecord) -> int:
        """Apply."""
        return 0

    definitions = thaw(apply.parameters)["$defs"]
    for name in ("Patch", "PatchRecord"):
        assert definitions[name]["properties"]["mode"] == {"type": "integer"}
        assert definitions[name]["properties"]["root"]["default"] == "."
