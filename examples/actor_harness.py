"""An actor-style harness: send ExecuteBatch messages to ``system.ref`` (a pykka ActorRef) and
let several agents' turns run at once."""

from __future__ import annotations

import asyncio
from typing import Any

from dsh_tools import ExecuteBatch, ToolCall, ToolOutput, ToolSystem, define_tool


async def slow_lookup(args: Any, ctx: Any) -> str:
    await asyncio.sleep(0.05)  # an I/O-bound tool: many overlap on the system loop
    return f"{args['key']}=ok"


LOOKUP = define_tool(
    name="lookup",
    description="Look a key up in a slow service.",
    parameters={"key": {"type": "string", "required": True}},
    output=ToolOutput(
        schema={"type": "string"}, render=lambda args, value: [{"type": "text", "text": value}]
    ),
    execute=slow_lookup,
    is_concurrency_safe=lambda args: True,
)


def main() -> None:
    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(LOOKUP)
        futures = [
            system.ref.ask(
                ExecuteBatch(
                    calls=[
                        ToolCall(f"{agent}-{i}", "lookup", f'{{"key": "k{i}"}}') for i in range(5)
                    ],
                    agent=agent,
                ),
                block=False,
            )
            for agent in ("alice", "bob", "carol")
        ]
        for future in futures:
            outcome = future.get(timeout=10)
            print([r.content[0]["text"] for r in outcome.results])


if __name__ == "__main__":
    main()
