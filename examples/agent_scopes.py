"""Per-agent views: a planner that may only read, a coder with its own local tool, a guard
that applies to one agent, and a human approval for risky calls."""

from __future__ import annotations

from typing import Any

from dsh_tools import Ask, ExecuteCall, ToolOutput, ToolSystem, define_tool


def text_tool(name: str, description: str, reply: str, *, safe: bool) -> Any:
    return define_tool(
        name=name,
        description=description,
        parameters={"target": {"type": "string", "required": True}},
        output=ToolOutput(
            schema={"type": "string"},
            render=lambda args, value: [{"type": "text", "text": value}],
        ),
        execute=lambda args, ctx: f"{reply} {args['target']}",
        is_concurrency_safe=(lambda args: True) if safe else None,
    )


class ConsoleApproval:
    """Approves everything except deployments (a real harness would ask a person)."""

    def request(self, *, agent: str, tool_name: str, call_id: str, signal: Any, **kw: Any) -> str:
        return "rejected" if tool_name == "deploy" else "allowed-once"


def main() -> None:
    with ToolSystem.start(approval=ConsoleApproval(), code_runtime=None) as system:
        system.tools.register(text_tool("read", "Read a file.", "contents of", safe=True))
        system.tools.register(text_tool("deploy", "Deploy a service.", "deployed", safe=False))

        planner = system.agent("planner")
        planner.tools.restrict(allow=["read"])  # the planner never sees deploy

        coder = system.agent("coder")
        coder.tools.register(text_tool("format", "Format a file.", "formatted", safe=False))
        coder.tools.guard(
            lambda e: (
                "vendored code is not ours to format" if e.arguments["target"] == "vendor" else None
            )
        )

        async def ask_for_writes(exec: Any, next: Any) -> Any:
            return Ask("changes the world") if exec.name != "read" else await next()

        coder.tools.on_pre_execute(ask_for_writes)

        print("planner sees:", [s["name"] for s in planner.tools.schemas()])
        print("coder sees:  ", [s["name"] for s in coder.tools.schemas()])
        calls = [
            ("planner", "deploy", "app"),
            ("coder", "format", "app"),
            ("coder", "format", "vendor"),  # approved, then denied by the coder's guard
            ("coder", "deploy", "app"),
        ]
        for agent, name, target in calls:
            result = system.execute(
                ExecuteCall(
                    call_id=f"{agent}-{name}-{target}",
                    name=name,
                    arguments={"target": target},
                    agent=agent,
                )
            )
            print(f"{agent:>8} {name:<7} -> {result.content[0]['text']}")
        coder.close()  # disposes the coder's tool, guard and hook, last first
        print(
            "after close, coder sees:", [s["name"] for s in system.agent("coder").tools.schemas()]
        )


if __name__ == "__main__":
    main()
