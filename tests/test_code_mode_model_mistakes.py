"""Mistakes models make in Code Mode programs, run through a started tool system and its real
sandboxed worker: what the failure tells the model beyond Python's own text, so that its next
program is the right one."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from code_mode_support import failure_of, value_of

from dsh_tools import ExecuteCall, ToolExecutionResult, ToolsConfig, ToolSystem, tool


class User(msgspec.Struct):
    id: int
    name: str


@tool(concurrency_safe=True)
def get_user(user_id: int) -> User:
    """Fetch a user record."""
    if user_id == 404:
        raise LookupError("no user 404")
    return User(id=user_id, name=f"user{user_id}")


@pytest.fixture(scope="module")
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(ToolsConfig(mode="code")) as started:
        started.tools.register(get_user)
        yield started


def run_code(system: ToolSystem, code: str) -> ToolExecutionResult:
    return system.execute(
        ExecuteCall(
            call_id="c1", name="run_code", arguments={"code": code, "description": "Run it"}
        )
    )


def failure_text(system: ToolSystem, code: str) -> str:
    """The failure's message, without the output it captured."""
    return failure_of(run_code(system, code)).message.split("\nCaptured output:\n")[0]


# --- the declarations' types are not the program's names ------------------------------------------


@pytest.mark.parametrize("name", ["User", "GetUserArgs", "GetUserOutput", "JsonValue"])
def test_a_declared_type_in_an_annotation_says_the_program_does_not_define_it(
    system: ToolSystem, name: str
) -> None:
    # The system prompt declares these types, so a model annotates a helper with them; the
    # program then failed with a bare "name 'User' is not defined", which the model could not
    # square with the declarations it was shown.
    program = f'def name_of(user: {name}) -> str:\n    return user["name"]\nreturn 1'
    message = failure_text(system, program)
    assert '  File "<run_code>", line 1, in <module>' in message
    assert message.endswith(
        f"NameError: name '{name}' is not defined\n{name} is a type of the tool declarations,"
        " which are for reading: a program does not define it. Write the annotation as a"
        f' string ("{name}") or leave it out.'
    )


def test_an_undeclared_missing_name_gets_no_word_on_the_declarations(system: ToolSystem) -> None:
    message = failure_text(system, "return Customer")
    assert message.endswith("NameError: name 'Customer' is not defined")


def test_a_declared_type_written_as_a_string_annotation_works(
    system: ToolSystem,
) -> None:
    program = (
        'def name_of(user: "User") -> str:\n    return user["name"]\n'
        'return name_of(await tools.get_user({"user_id": 3}))'
    )
    assert value_of(run_code(system, program))["result"] == "user3"


# --- asyncio.gather takes its calls one by one ----------------------------------------------------


_GATHER_NOTE = (
    "\nasyncio.gather() takes the calls as separate arguments: write"
    " asyncio.gather(*calls), not asyncio.gather(calls)"
)


@pytest.mark.parametrize(
    "gather",
    [
        'asyncio.gather([tools.get_user({"user_id": j}) for j in (1, 2)])',
        'asyncio.gather(\n    [\n        tools.get_user({"user_id": 1}),\n    ]\n)',
        "asyncio.gather(calls, return_exceptions=True)",
    ],
)
def test_gather_given_a_list_of_calls_says_to_unpack_it(system: ToolSystem, gather: str) -> None:
    # Python's own text was "unhashable type: 'list'" from inside asyncio, naming neither the
    # list nor the star it lacked.
    program = f'calls = [tools.get_user({{"user_id": 3}})]\nusers = await {gather}\nreturn users'
    message = failure_text(system, program)
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith("TypeError: unhashable type: 'list'" + _GATHER_NOTE)


def test_gather_written_one_argument_a_line_names_the_binding_left_uncalled(
    system: ToolSystem,
) -> None:
    # The note for a binding passed uncalled read the failing span from one line only, and a
    # call written one argument a line (a model's habit) got asyncio's bare "An asyncio.Future,
    # a coroutine or an awaitable is required".
    program = "users = await asyncio.gather(\n    tools.get_user,\n    tools.get_user,\n)"
    message = failure_text(system, program)
    assert message.endswith(
        "TypeError: An asyncio.Future, a coroutine or an awaitable is required\n"
        "tools.get_user was not called: it is the binding, not a call of it; write"
        " await tools.get_user({...}), its one dict of arguments in the braces"
    )


def test_gather_given_a_generator_of_calls_says_to_unpack_it(system: ToolSystem) -> None:
    # asyncio ran the generator expression as an old-style coroutine, and its text named the
    # task by a repr holding asyncio's file on the host.
    calls = '(tools.get_user({"user_id": j}) for j in (1, 2))'
    message = failure_text(system, f"users = await asyncio.gather({calls})\nreturn users")
    assert '  File "<run_code>", line 1, in <module>' in message
    assert "tasks.py" not in message
    assert message.endswith(
        "RuntimeError: yield was used instead of yield from in the generator expression gather"
        " ran as a task" + _GATHER_NOTE
    )


def test_gather_given_an_uncalled_function_gets_no_word_on_unpacking(system: ToolSystem) -> None:
    program = (
        "async def fetch():\n"
        '    return await tools.get_user({"user_id": 1})\n'
        "return await asyncio.gather(fetch)"
    )
    message = failure_text(system, program)
    assert message.endswith("TypeError: An asyncio.Future, a coroutine or an awaitable is required")


def test_gather_given_the_calls_unpacked_returns_their_values(system: ToolSystem) -> None:
    program = (
        'users = await asyncio.gather(*[tools.get_user({"user_id": j}) for j in (1, 2)])\n'
        'return [user["name"] for user in users]'
    )
    assert value_of(run_code(system, program))["result"] == ["user1", "user2"]


# --- a tool's result is a dict --------------------------------------------------------------------


def test_an_attribute_of_a_results_key_says_to_index_it(system: ToolSystem) -> None:
    # The declarations show a result as ``class User(TypedDict)``, so a model reads its fields
    # as attributes; Python's "'dict' object has no attribute 'name'" left the fix to a guess.
    program = 'user = await tools.get_user({"user_id": 1})\nreturn user.name'
    message = failure_text(system, program)
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith(
        "AttributeError: 'dict' object has no attribute 'name'\n"
        "name is a key of this dict (tool results are dicts): write ['name'], not .name"
    )


def test_an_attribute_that_is_no_key_gets_no_word_on_keys(system: ToolSystem) -> None:
    program = 'user = await tools.get_user({"user_id": 1})\nreturn user.email'
    message = failure_text(system, program)
    assert message.endswith("AttributeError: 'dict' object has no attribute 'email'")


# --- files outside the sandbox's grants ----------------------------------------------------------


def test_reading_a_file_the_sandbox_does_not_grant_says_what_it_may_read(
    system: ToolSystem, tmp_path: Path
) -> None:
    # The host may read the file; the program was told only "Permission denied", as if the
    # file itself were protected, and could not tell that the tools are the way to it.
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    for program in (f"return open({str(notes)!r}).read()", f"return os.listdir({str(tmp_path)!r})"):
        message = failure_text(system, f"import os\n{program}")
        assert '  File "<run_code>", line 2, in <module>' in message
        assert message.endswith(
            "PermissionError: [Errno 13] Permission denied: "
            + repr(str(notes if "open" in program else tmp_path))
            + "\nThe sandbox lets a run_code program read only the Python installation, system"
            " directories, its working directory and the paths the harness grants: reach"
            " other files through the tools."
        )


# --- the predefined asyncio ----------------------------------------------------------------------


def test_asyncio_imported_below_its_first_use_says_to_import_it_at_the_top(
    system: ToolSystem,
) -> None:
    # ``asyncio`` is predefined, yet its import further down made the name the program's own
    # variable from the first line on (the program is a function body), and the model read
    # only that a local variable had no value.
    program = (
        'users = await asyncio.gather(tools.get_user({"user_id": 1}))\n'
        "import asyncio\n"
        "return len(users)"
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 1, in <module>' in message
    assert message.endswith(
        "UnboundLocalError: cannot access local variable 'asyncio' where it is not associated"
        " with a value\nasyncio is predefined, but the program imports or assigns it further"
        " down, which makes the name the program's own from its first line on: import it at"
        " the top, or not at all."
    )


def test_asyncio_imported_at_the_top_works(system: ToolSystem) -> None:
    program = (
        "import asyncio\n"
        'users = await asyncio.gather(tools.get_user({"user_id": 1}))\n'
        "return len(users)"
    )
    assert value_of(run_code(system, program))["result"] == 1


# --- help() and the declarations as code ---------------------------------------------------------


def test_help_without_an_argument_says_what_to_ask_help_about(system: ToolSystem) -> None:
    # Python's interactive help printed its welcome, read end of file at its prompt and
    # printed its farewell: some thirty lines that say nothing of the tools.
    logs = value_of(run_code(system, "help()"))["logs"]
    assert logs == [
        "help() has no prompt in a run_code program (it has no standard input): ask about"
        " something, help(tools) for every tool's declarations, help(tools.name) for one"
        " tool's, help(len) for anything else."
    ]


@pytest.mark.parametrize(
    ("named", "described"),
    [
        ('"tools.get_user"', "tools.get_user"),
        ("'tools[\"get_user\"]'", "tools.get_user"),
        ('"get_user"', "tools.get_user"),
        ('"tools"', "tools"),
    ],
)
def test_help_given_a_binding_by_name_describes_the_binding(
    system: ToolSystem, named: str, described: str
) -> None:
    # pydoc looked the string up as a module or a builtin and printed "No Python documentation
    # found for 'tools.get_user'", as if the tool had no description.
    logs = value_of(run_code(system, f"help({named})"))["logs"]
    assert logs == value_of(run_code(system, f"help({described})"))["logs"]


def test_help_given_the_name_of_a_builtin_describes_the_builtin(system: ToolSystem) -> None:
    logs = value_of(run_code(system, 'help("len")'))["logs"]
    assert logs[0].startswith("Help on built-in function len in module builtins:")


def test_a_copied_declaration_says_its_closed_and_extra_items_are_for_reading(
    system: ToolSystem,
) -> None:
    # A model that copies a declaration into its program met a TypedDict that takes neither
    # keyword, told only that ``_TypedDictMeta.__new__()`` got an unexpected one.
    program = (
        "from typing import TypedDict\n"
        "class GetUserArgs(TypedDict, closed=True):\n"
        "    user_id: int\n"
        "return await tools.get_user(GetUserArgs(user_id=1))"
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith(
        "\nclosed= and extra_items= tell the reader of the tool declarations which keys a"
        " dict may have; this Python's TypedDict takes neither: leave them out (tool"
        " arguments and results are plain dicts, which need no class)."
    )


# --- a program sent as it would be shown ---------------------------------------------------------


@pytest.mark.parametrize("fence", ["```python", "```", "  ```py"])
def test_a_program_in_a_markdown_fence_says_to_leave_the_fence_out(
    system: ToolSystem, fence: str
) -> None:
    # The model sent the program as it would show it in a message; the failure was a bare
    # "invalid syntax" under the fence.
    message = failure_text(system, f"{fence}\nreturn 1\n```")
    assert message.startswith('code run failed (exception):   File "<run_code>", line 1\n')
    assert message.endswith(
        "SyntaxError: invalid syntax\nThe program is Python source, not Markdown: send it"
        " without the ``` lines around it."
    )


def test_a_program_escaped_twice_says_to_send_real_line_breaks(system: ToolSystem) -> None:
    # Its line breaks arrived as a backslash and an "n": Python saw one line with a line
    # continuation character in the middle.
    program = 'user = await tools.get_user({"user_id": 1})\\nreturn user["name"]'
    message = failure_text(system, program)
    assert message.endswith(
        "SyntaxError: unexpected character after line continuation character\nThe program"
        ' holds a backslash and an "n" where its lines should break (it was escaped twice):'
        " send it with real line breaks."
    )


def test_a_backslash_n_in_a_string_of_a_real_syntax_error_gets_no_word_on_escaping(
    system: ToolSystem,
) -> None:
    message = failure_text(system, 'print("a\\nb")\nreturn (')
    assert message.endswith("SyntaxError: '(' was never closed")


# --- a failed call's error used as its value ------------------------------------------------------


@pytest.mark.parametrize("use", ['user["name"]', "user.get('name')"])
def test_a_failed_calls_error_used_as_its_value_names_the_call_and_the_check(
    system: ToolSystem, use: str
) -> None:
    # ``return_exceptions=True`` put the failed call's ToolCallError among the values, and the
    # program read it as one: Python said only that a ToolCallError has no such item or
    # attribute, not which call failed nor why.
    program = (
        "users = await asyncio.gather(\n"
        '    *[tools.get_user({"user_id": j}) for j in (1, 404)], return_exceptions=True\n'
        ")\n"
        f"return [{use} for user in users]"
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 4, in <listcomp>' in message
    assert message.endswith(
        "\nuser is the ToolCallError of a failed call (tools.get_user: no user 404), which"
        " asyncio.gather(..., return_exceptions=True) puts where its value would be: check"
        " isinstance(user, ToolCallError) before using user."
    )


def test_an_attribute_a_caught_error_lacks_gets_no_word_on_values(system: ToolSystem) -> None:
    program = (
        'try:\n    await tools.get_user({"user_id": 404})\nexcept ToolCallError as e:\n    e.code'
    )
    message = failure_text(system, program)
    assert message.endswith("AttributeError: 'ToolCallError' object has no attribute 'code'")


# --- the environment -----------------------------------------------------------------------------


def test_an_environment_variable_the_program_lacks_says_whose_the_environment_is(
    system: ToolSystem,
) -> None:
    # A bare "KeyError: 'API_TOKEN'" reads as a variable someone forgot to set; the program's
    # environment is empty but for what the harness passes.
    message = failure_text(system, 'import os\ntoken = os.environ["API_TOKEN"]')
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith(
        "KeyError: 'API_TOKEN'\nA run_code program's environment holds only the variables the"
        " harness passes it: get what it needs through the tools."
    )


def test_a_missing_key_of_a_dict_gets_no_word_on_the_environment(system: ToolSystem) -> None:
    message = failure_text(system, 'settings = {}\ntoken = settings["API_TOKEN"]')
    assert message.endswith("KeyError: 'API_TOKEN'")


# --- a pending call -------------------------------------------------------------------------------


def test_a_pending_calls_attribute_suggests_no_private_name(system: ToolSystem) -> None:
    # Python's suggestion from the call handle's own attributes followed the advice to await
    # it: ". Did you mean: '_name'?", a private slot of the worker's that no program should use.
    program = 'user = tools.get_user({"user_id": 1})\nreturn user.name'
    message = failure_text(system, program)
    assert message.endswith(
        "AttributeError: tools.get_user(...) was not awaited: it is the pending call, not its"
        " result; write (await tools.get_user(...)).name"
    )


def test_the_result_of_a_pending_call_read_as_a_futures_says_to_await_it(
    system: ToolSystem,
) -> None:
    # The handle is a future, so ``result()`` before it settled raised asyncio's bare
    # "InvalidStateError: Result is not set.", which says nothing of awaiting.
    program = (
        'pending = [tools.get_user({"user_id": j}) for j in (1, 2)]\n'
        'return [call.result()["name"] for call in pending]'
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 2, in <listcomp>' in message
    assert message.endswith(
        "asyncio.exceptions.InvalidStateError: Result is not set.\ntools.get_user(...) was not"
        " awaited: it is the pending call, not its result; write (await tools.get_user(...))"
    )


def test_the_error_class_looked_up_in_the_namespace_says_it_is_a_global(
    system: ToolSystem,
) -> None:
    # The declarations show ``ToolCallError`` beside ``Tools``, and a model looked it up there;
    # "'tools' has no binding 'ToolCallError'" did not say where it is.
    program = (
        "try:\n"
        '    await tools.get_user({"user_id": 404})\n'
        "except tools.ToolCallError as error:\n"
        "    print(error)"
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 3, in <module>' in message
    assert message.endswith(
        "AttributeError: 'tools' has no binding 'ToolCallError'; its bindings are tools.get_user"
        "\nToolCallError is predefined on its own, not in tools: write ToolCallError,"
        " not tools.ToolCallError"
    )


def test_a_permission_the_files_own_mode_denies_gets_no_word_on_the_sandbox(
    system: ToolSystem,
) -> None:
    # In the working directory, which the sandbox grants: a script run without its execute
    # bit and a file whose mode lets no one read it are refused by their own permissions, and
    # a note sending the program to the tools for "other files" would send it astray.
    for program, refused in (
        ("open('run.sh', 'w').write('#!/bin/sh\\n')\nsubprocess.run(['./run.sh'])", "./run.sh"),
        ("open('secret', 'w').write('x')\nos.chmod('secret', 0)\nopen('secret').read()", "secret"),
    ):
        message = failure_text(system, f"import os, subprocess\n{program}")
        assert message.endswith(f"PermissionError: [Errno 13] Permission denied: {refused!r}")


# --- a dict iterated as its pairs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("loop", "line", "error", "held"),
    [
        ("for key, value in user:\n    print(key, value)", "<module>", "too many", "user"),
        ("print([f'{k}={v}' for k, v in user])", "<listcomp>", "too many", "user"),
        (
            "for key, value in {'a': 1}:\n    print(key, value)",
            "<module>",
            "not enough",
            "{'a': 1}",
        ),
        (
            "for key, value in {k: 1 for k in ['abc']}:\n    print(key, value)",
            "<module>",
            "too many",
            "{k: 1 for k in ['abc']}",
        ),
    ],
)
def test_a_dict_iterated_as_pairs_says_to_iterate_its_items(
    system: ToolSystem, loop: str, line: str, error: str, held: str
) -> None:
    # Iterating a dict gives its keys, so ``for key, value in user`` unpacked the first key's
    # characters ("too many values to unpack (expected 2)", after printing "i d" for "id"):
    # nothing said the dict was the trouble.
    program = f'user = await tools.get_user({{"user_id": 3}})\n{loop}'
    message = failure_text(system, program)
    assert f'  File "<run_code>", line 2, in {line}' in message
    assert f"ValueError: {error} values to unpack" in message
    assert message.endswith(
        f"\n{held} is a dict, and iterating a dict gives its keys alone: write {held}.items()"
        " for each key with its value"
    )


@pytest.mark.parametrize(
    ("loop", "error"),
    [
        ("for a, b in [(1, 2, 3)]:\n    pass", "too many values to unpack (expected 2)"),
        # A dict of tuple keys may be iterated for its keys: .items() would be wrong advice.
        (
            "grid = {(0, 0, 0): 'a'}\nfor x, y in grid:\n    pass",
            "too many values to unpack (expected 2)",
        ),
        ("for x, y in {(0, 0, 0): 'a'}:\n    pass", "too many values to unpack (expected 2)"),
        # The comprehension's first loop is over a dict, but the unpacking one is over a key.
        (
            "[a for key in {'abc': 1} for a, b in key]",
            "not enough values to unpack (expected 2, got 1)",
        ),
    ],
)
def test_pairs_unpacked_from_what_is_no_dict_get_no_word_on_dicts(
    system: ToolSystem, loop: str, error: str
) -> None:
    message = failure_text(system, loop)
    assert message.endswith(f"ValueError: {error}")


# --- a completion that is no JSON value ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1, 2", "value is tuple: return a list instead ([...] or list(...))"),
        ('{"ids": {1, 2}}', "value.ids is set: return a list instead (sorted(...) or list(...))"),
        (
            "datetime.date(2024, 1, 2)",
            "value is date: return a string instead (its .isoformat(), say)",
        ),
        ('b"abc"', "value is bytes: return a string instead (its .decode(), say)"),
        ("Point()", "value is Point: return a dict of the fields needed instead"),
        (
            "collections.Counter('aab')",
            "value is Counter: return a plain dict instead (dict(...))",
        ),
        ("{'a': 1}.keys()", "value is dict_keys: return a list instead (list(...))"),
        ("(n for n in range(3))", "value is generator: return a list instead (list(...))"),
        ('{1: "a"}', "value is dict with int key: use str keys instead (str(key))"),
        ("[ValueError('no')]", "value[0] is ValueError: return str(...) of it instead"),
        ("Name('ada')", "value is Name: return a plain str instead (str(...))"),
        ("Count(3)", "value is Count: return a plain int instead (int(...))"),
        ("len", "value is builtin_function_or_method"),
        ("Point", "value is type"),
        # Its __class__ raises: read from its type, the failure stays invalid-output.
        ("Masked()", "value is Masked: return a dict of the fields needed instead"),
    ],
)
def test_a_completion_that_is_no_json_value_says_what_to_return_instead(
    system: ToolSystem, value: str, problem: str
) -> None:
    program = (
        "import collections, datetime\nclass Point:\n    x = 1\n"
        "class Name(str):\n    pass\nclass Count(int):\n    pass\n"
        "class Masked:\n    @property\n    def __class__(self):\n        raise RuntimeError('no')\n"
        f"return {value}"
    )
    assert failure_text(system, program) == (
        f"code run failed (invalid-output): program completion must be lossless JSON: {problem}"
    )


@pytest.mark.parametrize(
    ("program", "problem"),
    [
        ('return tools.get_user({"user_id": 3})', "value"),
        ('return {"users": [tools.get_user({"user_id": 3})]}', "value.users[0]"),
    ],
)
def test_a_completion_holding_a_call_not_awaited_names_the_call(
    system: ToolSystem, program: str, problem: str
) -> None:
    # It said "value is CallHandle (an awaitable...)", naming a class the model never wrote.
    assert failure_text(system, program) == (
        f"code run failed (invalid-output): program completion must be lossless JSON: {problem}"
        " is a tool call that was not awaited: write await tools.get_user(...)"
    )


def test_an_argument_holding_a_call_not_awaited_names_the_call(system: ToolSystem) -> None:
    program = (
        "try:\n"
        '    await tools.get_user({"user_id": tools.get_user({"user_id": 1})})\n'
        "except ToolCallError as e:\n"
        "    return e.message"
    )
    assert value_of(run_code(system, program))["result"] == (
        "binding arguments must be lossless JSON: arguments.user_id is a tool call that was not"
        " awaited: write await tools.get_user(...)"
    )


# --- a tool the system does not have ------------------------------------------------------------


def test_a_tool_name_like_none_there_is_lists_the_tools_there_are(system: ToolSystem) -> None:
    # A model guessing a tool's name was told only "'tools' has no binding 'fetch_weather'",
    # with nothing of what it could call instead.
    message = failure_text(system, "return await tools.fetch_weather({})")
    assert message.endswith(
        "AttributeError: 'tools' has no binding 'fetch_weather'; its bindings are tools.get_user"
    )


def ping() -> str:
    """Answer."""
    return "pong"


def test_a_missing_tool_among_many_lists_the_first_and_says_how_to_see_all() -> None:
    with ToolSystem.start(ToolsConfig(mode="code")) as own:
        for index in range(25):
            own.tools.register(tool(ping, name=f"tool_{index:02d}"))
        message = failure_text(own, "return await tools.fetch_weather({})")
    shown = ", ".join(f"tools.tool_{index:02d}" for index in range(20))
    assert message.endswith(
        f"AttributeError: 'tools' has no binding 'fetch_weather'; its bindings are {shown}"
        " and 5 more; help(tools) lists them"
    )


# --- asyncio's own frames -----------------------------------------------------------------------


@tool(concurrency_safe=True)
async def slow_lookup(key: str) -> str:
    """Look a key up, slowly."""
    await asyncio.sleep(5)
    return key


def test_a_wait_for_timeout_shows_the_programs_line_and_no_asyncio_internals() -> None:
    # The traceback led with a bare "asyncio.exceptions.CancelledError" (asyncio's means of
    # timing out) and ended in asyncio's tasks.py, naming the host's Python.
    program = (
        "async def lookup():\n"
        '    return await asyncio.wait_for(tools.slow_lookup({"key": "a"}), 0.05)\n'
        "return await lookup()"
    )
    with ToolSystem.start(ToolsConfig(mode="code")) as own:
        own.tools.register(slow_lookup)
        message = failure_text(own, program)
    assert message == (
        "code run failed (exception): Traceback (most recent call last):\n"
        '  File "<run_code>", line 3, in <module>\n'
        "    return await lookup()\n"
        "           ^^^^^^^^^^^^^^\n"
        '  File "<run_code>", line 2, in lookup\n'
        '    return await asyncio.wait_for(tools.slow_lookup({"key": "a"}), 0.05)\n'
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "TimeoutError"
    )


def test_a_wait_for_timeout_of_the_programs_own_coroutine_keeps_the_line_it_waited_at(
    system: ToolSystem,
) -> None:
    # The cancellation asyncio times out by holds the line the program's coroutine was waiting
    # at: that one stays, above the TimeoutError.
    program = (
        "async def slow():\n    await asyncio.sleep(5)\nreturn await asyncio.wait_for(slow(), 0.05)"
    )
    message = failure_text(system, program)
    assert '  File "<run_code>", line 2, in slow\n    await asyncio.sleep(5)' in message
    assert '  File "<run_code>", line 3, in <module>' in message
    assert message.endswith("TimeoutError")


def test_a_task_groups_failure_shows_the_programs_line_and_no_asyncio_internals(
    system: ToolSystem,
) -> None:
    program = (
        "async with asyncio.TaskGroup() as group:\n"
        '    group.create_task(tools.get_user({"user_id": 404}))'
    )
    message = failure_text(system, program)
    assert "asyncio" + os.sep not in message, message
    assert message.startswith(
        "code run failed (exception):   + Exception Group Traceback (most recent call last):\n"
        '  |   File "<run_code>", line 1, in <module>\n'
        "  |     async with asyncio.TaskGroup() as group:\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
    ), message
    assert "ToolCallError: no user 404\n" in message


# --- a key a result does not have ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("read", "held"),
    [
        ('user["username"]', "user"),
        ('users[0]["username"]', "users[0]"),
        ('[u["username"] for u in users]', "u"),
    ],
)
def test_a_key_a_dict_lacks_says_which_keys_it_has(
    system: ToolSystem, read: str, held: str
) -> None:
    # "KeyError: 'username'" left the model to guess the result's shape again (a field named
    # differently, or nested one level down), when the dict it read was right there.
    program = f'user = await tools.get_user({{"user_id": 3}})\nusers = [user]\nreturn {read}'
    message = failure_text(system, program)
    assert '  File "<run_code>", line 3, in ' in message
    assert message.endswith(
        f"KeyError: 'username'\n{held} has no key 'username'; its keys are 'id', 'name'"
    )


@pytest.mark.parametrize(
    "program",
    [
        # A key of the program's own class: listing it would run the program's __repr__.
        "class Key:\n    def __repr__(self):\n        return 'ran'\nd = {Key(): 1}\nreturn d['x']",
        # The variable rebound before the failure is rendered: the dict now holds the key.
        "d = {'a': 1}\ntry:\n    d['x']\nfinally:\n    d = {'x': 2}",
    ],
)
def test_a_key_error_gets_no_list_it_could_get_wrong(system: ToolSystem, program: str) -> None:
    message = failure_text(system, program)
    assert message.endswith("KeyError: 'x'")


def test_a_key_of_a_large_dict_names_its_first_keys(system: ToolSystem) -> None:
    program = "counts = {f'k{i}': i for i in range(30)}\nreturn counts['total']"
    message = failure_text(system, program)
    keys = ", ".join(f"'k{i}'" for i in range(20))
    assert message.endswith(
        f"KeyError: 'total'\ncounts has no key 'total'; its keys are {keys} and 10 more"
    )
