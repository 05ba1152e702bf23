from dsh_tools import (
    Deny,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolOutput,
    ToolsConfig,
    ToolSystem,
    define_tool,
)

weather = define_tool(
    name="weather",
    description="Current temperature of a city, in degrees Celsius.",
    parameters={"city": {"type": "string", "required": True}},
    output=ToolOutput(
        schema={"type": "number"},
        render=lambda args, value: [{"type": "text", "text": f"{args['city']}: {value} C"}],
    ),
    execute=lambda args, ctx: {"Oslo": 3.5, "Lima": 19.0}.get(args["city"], 20.0),
    is_concurrency_safe=lambda args: True,  # reads may overlap in a batch
)

with ToolSystem.start(ToolsConfig(mode="both")) as system:
    system.tools.register(weather)

    async def no_mars(exec, next):  # a pre-execute policy hook
        if exec.arguments.get("city") == "Mars":
            return Deny("no weather service on Mars")
        return await next()

    system.tools.on_pre_execute(no_mars)

    # one call
    result = system.execute(ExecuteCall(call_id="c1", name="weather", arguments={"city": "Oslo"}))
    print(result.content[0]["text"])  # Oslo: 3.5 C

    # one model turn: raw argument text as the model sent it, results in model order
    outcome = system.execute_batch(
        ExecuteBatch(
            calls=[
                ToolCall("c2", "weather", '{"city": "Lima"}'),
                ToolCall("c3", "weather", '{"city": "Mars"}'),
            ]
        )
    )
    print([r.content[0]["text"] for r in outcome.results])
    # ['Lima: 19.0 C', 'Error: no weather service on Mars']

    # Code Mode: the model writes the body of an async function
    program = (
        'temps = await asyncio.gather(*[tools.weather({"city": c}) for c in ["Oslo", "Lima"]])\n'
        "return max(temps)\n"
    )
    result = system.execute(
        ExecuteCall(
            call_id="c4",
            name="run_code",
            arguments={"code": program, "description": "Find the warmest city"},
        )
    )
    print(result.content[0]["text"])  # 19.0

    print(system.assemble_prompt().sections[0].name)  # tools:sdk (the generated SDK)
    for event in system.session.events:  # tool/call, tool/result, tool/code-dispatch...
        print(event.type, event.data.get("sub_call_id") or event.data.get("call_id"))
