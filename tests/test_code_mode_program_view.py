"""Code Mode as a program sees it, through a started tool system and its real sandboxed
worker: what its stack looks like from inside, how what it prints reaches the logs, and what a
refusal of the sandbox's says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from code_mode_support import failure_of, value_of

from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem


@pytest.fixture(scope="module")
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(ToolsConfig(mode="code")) as started:
        yield started


def run_code(system: ToolSystem, code: str) -> Any:
    return system.execute(
        ExecuteCall(
            call_id="c1", name="run_code", arguments={"code": code, "description": "Run it"}
        )
    )


def logs_and_result(system: ToolSystem, code: str) -> tuple[list[str], Any]:
    value = value_of(run_code(system, code))
    return list(value["logs"]), value.get("result")


def failure_text(system: ToolSystem, code: str) -> str:
    """The failure's message, without the output it captured."""
    return failure_of(run_code(system, code)).message.split("\nCaptured output:\n")[0]


# --- the stack, seen from inside --------------------------------------------------------------


def test_inspect_stack_shows_the_programs_frames_only(system: ToolSystem) -> None:
    # Beneath the program's own frame lay some twenty frames of the worker's, asyncio's and
    # the sandbox's, naming their files on the host.
    program = """
import inspect
def where():
    return [[frame.filename, frame.lineno, frame.function] for frame in inspect.stack()]
return where()
"""
    _logs, frames = logs_and_result(system, program)
    assert frames == [["<run_code>", 4, "where"], ["<run_code>", 5, "<module>"]]


# --- what the sandbox refuses -----------------------------------------------------------------


def test_a_multiprocessing_manager_says_the_sandbox_refuses_its_socket(system: ToolSystem) -> None:
    # The manager's server process could not make its socket, and the program saw only a bare
    # ``EOFError`` from inside multiprocessing, naming neither the cause nor what works.
    message = failure_text(system, "import multiprocessing\nmultiprocessing.Manager()")
    assert '  File "<run_code>", line 2, in <module>' in message
    assert message.endswith(
        "\nEOFError\nA run_code program has no network: multiprocessing.Manager() serves its"
        " objects over a socket, which the sandbox refuses, so its server process failed"
        " before it could answer."
        " Threads (queue.Queue, threading locks, asyncio.to_thread) and a process of the"
        ' "fork" start method talking over a multiprocessing.Pipe() work.'
    )


def test_a_fork_process_over_a_pipe_works_as_the_manager_note_says(system: ToolSystem) -> None:
    program = """
import multiprocessing
context = multiprocessing.get_context("fork")
mine, theirs = context.Pipe()
def work(connection):
    connection.send({"sum": 6})
process = context.Process(target=work, args=(theirs,))
process.start()
got = mine.recv()
process.join()
return [got, process.exitcode]
"""
    assert logs_and_result(system, program) == ([], [{"sum": 6}, 0])


# --- what the standard library prints ---------------------------------------------------------


def test_pprint_is_one_log_entry_as_print_is(system: ToolSystem) -> None:
    # pprint writes a value in dozens of pieces, each of which was an entry of its own: the
    # text shown, the entries joined by newlines, broke the value at every piece.
    program = """
import pprint
table = {f"key{n}": list(range(n)) for n in range(12)}
pprint.pprint(table)
pprint.pp([table], width=40)
return [pprint.pformat(table), pprint.pformat([table], width=40, sort_dicts=False)]
"""
    logs, shown = logs_and_result(system, program)
    assert logs == shown


def test_json_dump_to_stdout_is_one_log_entry(system: ToolSystem) -> None:
    program = """
import json, sys
data = {"rows": [{"id": n, "ok": n % 2 == 0} for n in range(5)]}
json.dump(data, sys.stdout, indent=2)
return json.dumps(data, indent=2)
"""
    logs, shown = logs_and_result(system, program)
    assert logs == [shown]


def test_a_logging_record_is_one_log_entry_as_print_is(system: ToolSystem) -> None:
    # A handler writes the record and its terminator: the entry ended in a newline, which
    # the text shown followed with another (a blank line after every record).
    program = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
logging.info("loaded %d rows", 3)
logging.getLogger("app").warning("slow")
out = logging.getLogger("out")
out.addHandler(logging.StreamHandler(sys.stdout))
out.propagate = False
out.error("to stdout")
"""
    logs, _ = logs_and_result(system, program)
    assert logs == ["INFO loaded 3 rows", "WARNING slow", "to stdout"]


def test_a_traceback_the_program_prints_is_one_log_entry(system: ToolSystem) -> None:
    program = """
import traceback
def fail():
    raise ValueError("bad row")
try:
    fail()
except ValueError:
    traceback.print_exc()
traceback.print_stack()
"""
    logs, _ = logs_and_result(system, program)
    assert logs == [
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 6, in <module>\n'
        "    fail()\n"
        '  File "<run_code>", line 4, in fail\n'
        '    raise ValueError("bad row")\n'
        "ValueError: bad row",
        '  File "<run_code>", line 9, in <module>\n    traceback.print_stack()',
    ]


def test_writelines_is_one_log_entry_and_each_write_is_one_as_ever(system: ToolSystem) -> None:
    program = """
import sys
sys.stdout.writelines(["first\\n", "second\\n"])
sys.stdout.write("a")
sys.stdout.write("b\\n")
"""
    logs, _ = logs_and_result(system, program)
    assert logs == ["first\nsecond\n", "a", "b\n"]
