"""@tool as user code type-checks it: ``make lint`` runs ``mypy --strict`` on this module too,
so what a harness author writes against a ``@tool`` definition needs no casts."""

from __future__ import annotations

import asyncio

import msgspec

from dsh_tools import ToolDefinition, ToolOutput, ToolRunContext, TypedToolDefinition, tool


class Reading(msgspec.Struct):
    celsius: float


@tool
def read(sensor: str) -> Reading:
    """Read a sensor."""
    return Reading(celsius=float(len(sensor)))


@tool(name="wait.read", concurrency_safe=True)
async def wait_read(sensor: str, ctx: ToolRunContext) -> list[float]:
    """Read a sensor, later."""
    await asyncio.sleep(0)
    return [float(len(sensor))]


def lookup(key: str) -> str:
    """Look a key up."""
    return key


def test_a_function_and_its_options_in_one_call() -> None:
    definition = tool(lookup, name="kv.lookup", concurrency_safe=True, timeout_ms=500)
    assert (definition.name, definition.timeout_ms) == ("kv.lookup", 500)
    assert definition.is_concurrency_safe is not None
    assert definition.is_concurrency_safe({}) is True


def test_a_tool_always_has_its_output_contract() -> None:
    definitions: list[TypedToolDefinition] = [read, wait_read]
    for definition in definitions:
        assert isinstance(definition, ToolDefinition)
        # ``output`` is a ToolOutput, never None: no narrowing before reading the schema.
        output: ToolOutput = definition.output
        assert output.schema["type"] in ("object", "array")
    assert read.output.schema["properties"]["celsius"] == {"type": "number"}
    assert wait_read.output.render([], [1.5]) == [{"type": "text", "text": "[1.5]"}]
