"""Code Mode as a program sees it, through a started tool system and its real sandboxed
worker: what its stack looks like from inside, how what it prints reaches the logs, and what a
refusal of the sandbox's says."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from code_mode_support import failure_of, value_of

from dsh_tools import ExecuteCall, ToolsConfig, ToolSystem, codebridge, tool
from dsh_tools.codebridge._ledger import OutputLedger
from dsh_tools.codebridge._run_output import NativeOutput
from dsh_tools.codebridge._sandbox._init import WHERE_FD


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


def test_input_says_the_program_has_no_standard_input(system: ToolSystem) -> None:
    message = failure_text(system, 'name = input("Name? ")')
    assert message.endswith(
        "\nEOFError: EOF when reading a line\nA run_code program has no standard input:"
        " input() and sys.stdin read end of file at once. Put what it needs in the program"
        " itself, or get it through the tools."
    )


@pytest.mark.parametrize("stop", ["breakpoint()", "import pdb\npdb.set_trace()"])
def test_a_debugger_says_the_program_has_no_standard_input(system: ToolSystem, stop: str) -> None:
    # Its prompt read end of file and quit: the program saw only a bare ``bdb.BdbQuit``.
    message = failure_text(system, f"{stop}\nvalue = 1\nreturn value")
    assert message.endswith(
        "\nbdb.BdbQuit\nA run_code program has no standard input, so breakpoint() and pdb read"
        " end of file at their first prompt and quit the program. Print or return the values"
        " to look at instead."
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


def test_pprint_is_one_log_entry_as_one_write_is(system: ToolSystem) -> None:
    # pprint writes a value in dozens of pieces, each of which was an entry of its own: the
    # text shown, the entries joined by newlines, broke the value at every piece. Now it is
    # one entry, as written (its newline kept, as a write's is).
    program = """
import pprint
table = {f"key{n}": list(range(n)) for n in range(12)}
pprint.pprint(table)
pprint.pp([table], width=40)
return [pprint.pformat(table), pprint.pformat([table], width=40, sort_dicts=False)]
"""
    logs, shown = logs_and_result(system, program)
    assert logs == [text + "\n" for text in shown]


def test_json_dump_to_stdout_is_one_log_entry(system: ToolSystem) -> None:
    program = """
import json, sys
data = {"rows": [{"id": n, "ok": n % 2 == 0} for n in range(5)]}
json.dump(data, sys.stdout, indent=2)
return json.dumps(data, indent=2)
"""
    logs, shown = logs_and_result(system, program)
    assert logs == [shown]


def test_a_logging_record_is_one_log_entry_as_written(system: ToolSystem) -> None:
    # A handler writes the record and its terminator: one entry, as written.
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
    assert logs == ["INFO loaded 3 rows\n", "WARNING slow\n", "to stdout\n"]


def test_a_traceback_the_program_prints_reads_whole_in_the_text_shown(
    system: ToolSystem,
) -> None:
    # traceback prints each piece with print(), whose rule makes each an entry without its
    # newline: joined by newlines, as the text shown joins them, they read as printed.
    program = """
import traceback
def fail():
    raise ValueError("bad row")
try:
    fail()
except ValueError:
    traceback.print_exc()
"""
    logs, _ = logs_and_result(system, program)
    # From Python 3.13 the printed traceback underlines the call (`~~~~^^`), as it would anywhere.
    carets = "    ~~~~^^\n" if sys.version_info >= (3, 13) else ""
    assert "\n".join(logs) == (
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 6, in <module>\n'
        "    fail()\n"
        f"{carets}"
        '  File "<run_code>", line 4, in fail\n'
        '    raise ValueError("bad row")\n'
        "ValueError: bad row"
    )


def test_a_warning_is_one_log_entry_as_written(system: ToolSystem) -> None:
    program = """
import warnings
warnings.warn("rounding")
"""
    logs, _ = logs_and_result(system, program)
    assert logs == ['<run_code>:3: UserWarning: rounding\n  warnings.warn("rounding")\n']


def test_writelines_is_one_log_entry_and_each_write_is_one_as_ever(system: ToolSystem) -> None:
    program = """
import sys
sys.stdout.writelines(["first\\n", "second\\n"])
sys.stdout.write("a")
sys.stdout.write("b\\n")
"""
    logs, _ = logs_and_result(system, program)
    assert logs == ["first\nsecond\n", "a", "b\n"]


# --- native output: forked children, subprocesses, crashes ------------------------------------


def shown_text(system: ToolSystem, code: str) -> str:
    [block] = run_code(system, code).content
    text: str = block["text"]
    return text


def test_what_a_forked_child_prints_is_logged(system: ToolSystem) -> None:
    # What the child prints reaches its descriptor as written, newline included: each read
    # of it is an entry (the contract's rule for native output).
    program = """
import os
print("parent start")
pid = os.fork()
if pid == 0:
    print("child says hi")
    print("child line 2")
    os._exit(0)
os.waitpid(pid, 0)
print("parent end")
"""
    # Native output keeps no order against the program's prints: only the lines are checked.
    lines = [line for line in shown_text(system, program).split("\n") if line]
    assert sorted(lines) == ["child line 2", "child says hi", "parent end", "parent start"]


def test_a_line_a_subprocess_writes_in_pieces_is_logged_whole(system: ToolSystem) -> None:
    # The child writes a line in three writes, as ``ls`` writes its errors: each read is an
    # entry, and nothing of the line is lost or reordered.
    child = (
        "import os, time\n"
        "for piece in (b'ls: ', b'cannot open', b': denied\\n'):\n"
        "    os.write(2, piece)\n"
        "    time.sleep(0.05)\n"
        "os.write(1, b'last, unended')\n"
    )
    program = f"""
import subprocess, sys
subprocess.run([sys.executable, "-c", {child!r}])
print("after")
"""
    logs, _ = logs_and_result(system, program)
    assert "after" in logs
    native = "".join(entry for entry in logs if entry != "after")
    assert sorted(native.splitlines()) == ["last, unended", "ls: cannot open: denied"]


def test_a_crash_dump_shows_the_programs_frames_only(system: ToolSystem) -> None:
    # The dump faulthandler writes as the worker dies listed, beneath the program's frames,
    # some twenty of the worker's, asyncio's and the sandbox's, naming their files on the host.
    program = """
import ctypes
def read_address(address):
    return ctypes.string_at(address)
print("reading")
read_address(0)
"""
    message = failure_of(run_code(system, program)).message
    assert message.startswith(
        "code run failed (worker-exit): worker exited with signal SIGSEGV before completing"
    )
    output = message.split("\nCaptured output:\n", 1)[1]
    # Each read of the pipe is an entry, and faulthandler writes in pieces: the header may
    # come in several (the text shown joins them with newlines).
    assert "Fatal Python error:" in output
    assert "Segmentation fault" in output
    frames = [line for line in output.split("\n") if line.startswith('  File "')]
    assert frames[0].endswith(" in string_at")  # ctypes' own frame, as a traceback shows it
    assert frames[1:] == [
        '  File "<run_code>", line 4 in read_address',
        '  File "<run_code>", line 6 in <module>',
    ]


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
@pytest.mark.parametrize(
    ("crash", "fatal"),
    [("ctypes.string_at(0)", "Segmentation fault"), ("faulthandler._sigabrt()", "Aborted")],
)
def test_a_crash_in_c_still_shows_its_stack(isolation: str, crash: str, fatal: str) -> None:
    # The stacks asked for as a budget runs out no longer come on descriptor 2; a crash's own
    # still do, and show, whichever isolation the run has.
    program = f"import ctypes, faulthandler\ndef crash():\n    {crash}\nprint('before')\ncrash()"
    with ToolSystem.start(ToolsConfig(mode="code", code_isolation=isolation)) as own:
        message = failure_of(run_code(own, program)).message
    assert message.startswith("code run failed (worker-exit): worker exited with signal SIG")
    output = message.split("\nCaptured output:\n", 1)[1]
    assert "before" in output
    assert "Fatal Python error:" in output
    assert fatal in output
    frames = [line for line in output.split("\n") if line.startswith('  File "<run_code>"')]
    assert frames == [
        '  File "<run_code>", line 3 in crash',
        '  File "<run_code>", line 5 in <module>',
    ]


def test_a_dump_split_across_reads_anywhere_loses_the_same_worker_frames() -> None:
    # faulthandler writes a dump in small pieces while the host reads the pipe: however the
    # reads cut it, the worker's frames go and every other line stays, once.
    worker_file = os.path.join(os.path.dirname(codebridge.__file__), "_worker_start.py")
    dump = (
        "reading\nFatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f8d56831b80 (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        '  File "<run_code>", line 3 in read_address\n'
        '  File "<run_code>", line 5 in <module>\n'
        f'  File "{worker_file}", line 259 in main\n'
        "\nExtension modules: msgspec._core (total: 1)\n"
    )
    shown = dump.replace(f'  File "{worker_file}", line 259 in main\n', "")
    for cut in range(1, len(dump)):
        for second in (cut + 1, cut + 7, len(dump)):
            ledger = OutputLedger(1 << 20)
            native = NativeOutput(ledger)
            for piece in (dump[:cut], dump[cut:second], dump[second:]):
                if piece:
                    native.take(1, piece.encode())
            native.close()
            assert "".join(ledger.logs) == shown, (cut, second)


def test_native_output_is_one_entry_per_read_as_it_came() -> None:
    ledger = OutputLedger(1 << 20)
    native = NativeOutput(ledger)
    for piece in ("line one\nli", "ne two\n", "unended"):
        native.take(0, piece.encode())
    native.close()
    assert list(ledger.logs) == ["line one\nli", "ne two\n", "unended"]


# --- budgets ----------------------------------------------------------------------------------


def failure_and_output(message: str) -> tuple[str, list[str]]:
    """A failure's first line, and the lines of the output it captured, sorted (what a
    program prints and what it writes to descriptor 2 keep no order against each other)."""
    failure, _, output = message.partition("\nCaptured output:\n")
    return failure, sorted(line for line in output.split("\n") if line)


# What the program writes before it runs out of time: both kinds of its output must show.
_PRINTS_FIRST = "import os\nprint('start')\nos.write(2, b'native before\\n')\n"


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
@pytest.mark.parametrize(
    ("loop", "where"),
    [
        # Stopped on either line of the loop (its test, or its body).
        (
            "def spin():\n    n = 0\n    while True:\n        n += 1\nspin()",
            r"line [67], in spin",
        ),
        # A loop in C, which holds the GIL and runs no handler of Python's.
        ("sum(range(10**15))", r"line 4"),
    ],
)
def test_the_compute_budgets_failure_names_the_line_it_ran_out_on(
    isolation: str, loop: str, where: str
) -> None:
    # The failure said only "compute budget exhausted (300ms busy)": a program of many loops
    # could not tell which one spun. The stacks the host asks the worker for to find that line
    # are not the program's output: they showed under "Captured output:" as if it had
    # written them.
    config = ToolsConfig(mode="code", compute_ms=300, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        message = failure_of(run_code(own, _PRINTS_FIRST + loop)).message
    failure, output = failure_and_output(message)
    assert re.fullmatch(
        r"code run failed \(timeout\): compute budget exhausted \(300ms busy\); the program was"
        rf" at {where}",
        failure,
    ), message
    assert output == ["native before", "start"], message


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_the_line_is_named_when_the_stacks_outgrow_a_pipes_usual_size(isolation: str) -> None:
    # The stacks come newest thread first, the program's main thread last. Thirty threads
    # waiting deep in recursion write some 100 KiB before it, more than a pipe holds unless it
    # is enlarged: the dump was cut short there, and the failure named a waiting thread's line
    # instead of the loop that spent the budget (on descriptor 2, read as it came, it was not).
    program = """import threading
ready = threading.Barrier(31)
never = threading.Event()
def deep(n):
    if n:
        return deep(n - 1)
    ready.wait()
    never.wait()
for _ in range(30):
    threading.Thread(target=deep, args=(98,), daemon=True).start()
ready.wait()
def spin():
    n = 0
    while True:
        n += 1
spin()"""
    config = ToolsConfig(mode="code", compute_ms=500, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        message = failure_of(run_code(own, program)).message
    assert re.fullmatch(
        r"code run failed \(timeout\): compute budget exhausted \(500ms busy\); the program was"
        r" at line 1[45], in spin",
        message,
    ), message


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_the_wall_ceilings_failure_names_the_line_the_program_waited_on(isolation: str) -> None:
    # The compute budget's failure named the line it ran out on; the wall ceiling's said only
    # "wall-clock ceiling reached", so a program blocked in a call that spends no CPU (a sleep,
    # a read that never returns) could not tell which of its lines had held it.
    program = _PRINTS_FIRST + "import time\n\ndef wait():\n    time.sleep(60)\nwait()"
    config = ToolsConfig(mode="code", max_wall_ms=1500, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        message = failure_of(run_code(own, program)).message
        awaiting = failure_of(run_code(own, "await asyncio.sleep(60)")).message
    # The stacks asked for to find that line are not the program's output.
    assert failure_and_output(message) == (
        "code run failed (timeout): wall-clock ceiling reached (1500ms); the program was"
        " at line 7, in wait",
        ["native before", "start"],
    ), message
    # A program awaiting has no line on a thread's stack (its loop waits): the failure is
    # as it was, with no empty stack in its output.
    assert awaiting == "code run failed (timeout): wall-clock ceiling reached (1500ms)"


_FORGED_DUMP = (
    "Current thread 0x00007f8d56831b80 (most recent call first):\n"
    '  File "<run_code>", line 99 in forged\n'
)


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_stack_the_program_writes_to_its_output_never_names_the_line(isolation: str) -> None:
    # Where the program was came from the last stack on descriptor 2, which the program
    # writes as it likes: a stack of its own made the wall ceiling's failure name a line the
    # program never had. It stays the program's output, and names nothing.
    program = f"import os\nos.write(2, {_FORGED_DUMP.encode()!r})\nawait asyncio.sleep(60)"
    config = ToolsConfig(mode="code", max_wall_ms=1000, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        message = failure_of(run_code(own, program)).message
    assert message == (
        "code run failed (timeout): wall-clock ceiling reached (1000ms)\nCaptured output:\n"
        + _FORGED_DUMP
    )


# What a program does to the descriptor the worker writes its stacks to when asked, before it
# spins past its compute budget.
_WHERE_ATTACKS = {
    # A stack of its own there, after garbage: only what the worker writes once asked counts.
    "forged": f"os.write({WHERE_FD}, b'\\xff' * 1000 + {_FORGED_DUMP.encode()!r})",
    # The pipe filled to its brim with stacks of its own, which no dump then fits beside.
    "filled": (
        f"os.set_blocking({WHERE_FD}, False)\n"
        "try:\n"
        "    while True:\n"
        f"        os.write({WHERE_FD}, {_FORGED_DUMP.encode()!r})\n"
        "except BlockingIOError:\n"
        "    pass"
    ),
    # Closed, or replaced by another file: the line is not named, and the run ends as ever.
    "closed": f"os.close({WHERE_FD})",
    "replaced": f"os.dup2(os.open(os.devnull, os.O_WRONLY), {WHERE_FD})",
}


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
@pytest.mark.parametrize("attack", sorted(_WHERE_ATTACKS))
def test_what_a_program_does_to_the_where_descriptor_never_forges_the_line_or_hangs_the_host(
    isolation: str, attack: str
) -> None:
    program = (
        f"import os\nprint('start')\n{_WHERE_ATTACKS[attack]}\n"
        "def spin():\n    n = 0\n    while True:\n        n += 1\nspin()"
    )
    spin = program.count("\n")  # the loop's body (the last line is the call)
    config = ToolsConfig(mode="code", compute_ms=300, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        message = failure_of(run_code(own, program)).message
    failure, output = failure_and_output(message)
    named = re.fullmatch(
        r"code run failed \(timeout\): compute budget exhausted \(300ms busy\)"
        r"(; the program was at line (\d+), in spin)?",
        failure,
    )
    assert named is not None, message
    if attack in ("forged", "filled"):
        assert named.group(2) in (str(spin - 1), str(spin)), message
    else:
        assert named.group(1) is None, message
    assert output == ["start"], message


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_program_woken_as_the_wall_ceiling_asks_where_it_is_makes_no_call_and_no_result(
    isolation: str,
) -> None:
    # The ceiling asks the worker where it is and ends the run a moment later: a program that
    # goes on meanwhile (here woken by that very signal; as well, a slow call answered just
    # then) made a tool call past its ceiling and its run succeeded.
    recorded: list[str] = []

    @tool
    def record(note: str) -> str:
        """Record a note."""
        recorded.append(note)
        return "recorded"

    program = (
        "import signal, time\n"
        "woken = []\n"
        "signal.signal(signal.SIGRTMIN + 6, lambda *_: woken.append(1))\n"
        "while not woken:\n"
        "    time.sleep(0.001)\n"
        "await tools.record({'note': 'past the ceiling'})\n"
        "return 'finished'"
    )
    config = ToolsConfig(mode="code", max_wall_ms=1000, code_isolation=isolation)
    with ToolSystem.start(config) as own:
        own.tools.register(record)
        message = failure_of(run_code(own, program)).message
    assert message.startswith("code run failed (timeout): wall-clock ceiling reached (1000ms)")
    assert recorded == []


def test_a_dump_thread_that_shows_no_frame_is_left_out_whole() -> None:
    worker_file = os.path.join(os.path.dirname(codebridge.__file__), "_worker_start.py")
    dump = (
        "Thread 0x00007f8d56831b81 (most recent call first):\n"
        f'  File "{worker_file}", line 80 in read_frames\n'
        "\n"
        "Current thread 0x00007f8d56831b80 (most recent call first):\n"
        f'  File "{asyncio.__file__}", line 600 in run_forever\n'
        f'  File "{worker_file}", line 259 in main\n'
        "\n"
        "Thread 0x00007f8d56831b82 (most recent call first):\n"
        '  File "<run_code>", line 3 in work\n'
        "after\n"
    )
    ledger = OutputLedger(1 << 20)
    native = NativeOutput(ledger)
    native.take(1, dump.encode())
    native.close()
    assert "".join(ledger.logs) == (
        "Thread 0x00007f8d56831b82 (most recent call first):\n"
        '  File "<run_code>", line 3 in work\n'
        "after\n"
    )
