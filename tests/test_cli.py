"""The dsh-tools command as a user runs it: exit codes, output, bad arguments."""

from __future__ import annotations

import ast
import errno
import importlib.metadata
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from checkout_support import needs_first_release, needs_git_checkout
from conftest import Logs

from dsh_tools.cli import main, run_demo

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


COMMANDS = ("demo", "bench", "sdk", "catalog", "run-code")


def test_help_lists_every_command() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    for command in COMMANDS:
        assert command in done.stdout


def test_help_says_that_bench_measures_code_mode_too() -> None:
    done = run_cli("--help")
    bench = next(line for line in done.stdout.splitlines() if line.split()[:1] == ["bench"])
    assert "Code Mode latency" in bench


def options_of(command: str) -> list[str]:
    """The options ``dsh-tools COMMAND --help`` lists, but ``--help``."""
    usage = run_cli(command, "--help").stdout
    return sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", usage)) - {"--help"})


def test_the_readme_and_the_cli_guide_name_every_option_of_every_command() -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    guide = (REPO / "docs" / "cli.md").read_text().split("\n## ")
    unnamed: list[str] = []
    for command in COMMANDS:
        # the command's row of the README's table, and its own section of the guide
        row = next(line for line in readme if line.startswith(f"| `dsh-tools {command}"))
        section = next((part for part in guide if part.startswith(f"`{command}`")), "")
        for option in options_of(command):
            if option not in row:
                unnamed.append(f"README.md: {command} {option}")
            if option not in section:
                unnamed.append(f"docs/cli.md: {command} {option}")
    assert unnamed == []


def test_an_unknown_command_exits_2() -> None:
    done = run_cli("frobnicate")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_an_option_a_command_does_not_take_is_refused_by_that_command() -> None:
    done = run_cli("catalog", "--format", "yaml")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "usage: dsh-tools catalog [-h]",
        "dsh-tools catalog: error: unrecognized arguments: --format yaml",
    ]


def test_an_option_before_the_command_is_named_not_taken_for_a_missing_command() -> None:
    # It said "the following arguments are required: COMMAND", of a line that has none
    # missing, or with a command after it, blamed that command.
    for args in (["--verbose"], ["--verbose", "catalog"]):
        done = run_cli(*args)
        assert done.returncode == 2
        assert done.stderr.splitlines()[-1] == (
            "dsh-tools: error: unrecognized arguments: --verbose"
        )


def test_the_top_commands_options_may_be_abbreviated_as_argparse_allows() -> None:
    for args in (["--vers"], ["--vers", "--bogus"]):  # as --version --bogus does
        done = run_cli(*args)
        assert done.returncode == 0
        assert done.stdout.startswith("dsh-tools ")


def test_demo_shows_every_kind_of_outcome(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(out, workspace=tmp_path) == 0
    text = out.getvalue()
    assert "c1 read_file: ok" in text
    assert "allowed-once" in text  # the approval
    assert "Error: destructive shell commands are not allowed" in text  # the guard denial
    assert "[TOOL_TIMEOUT]" in text  # the timeout
    assert "c8 run_code: ok" in text  # Code Mode fan-out
    assert '"app.py": 2' in text
    assert "tool/code-dispatch-start" in text  # the event log
    assert (tmp_path / "notes" / "todo.md").read_text() == "- types\n"


def test_demo_says_what_decided_each_outcome(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    assert run_demo(out, workspace=tmp_path) == 0
    decided = {
        line.split()[0]: line.split("[decided by: ", 1)[1].rstrip("]")
        for line in out.getvalue().splitlines()
        if "[decided by: " in line
    }
    assert decided == {
        "c1": "the tool",
        "c2": "the tool",
        "c3": "the tool",
        "c4": "policy hook (Ask) -> approval allowed it",
        "c5": "guard no_rm",
        "c6": "timeout policy (its deadline fired)",
        "c7": "the tool",
    }


def test_demo_without_code_mode_skips_the_program(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(out, workspace=tmp_path, code_mode=False) == 0
    assert "run_code" not in out.getvalue()


def test_demo_rejects_a_missing_workspace(tmp_path: Path) -> None:
    assert main(["demo", "--workspace", str(tmp_path / "missing")]) == 2


def test_sdk_prints_a_parseable_python_block() -> None:
    done = run_cli("sdk")
    assert done.returncode == 0
    text = done.stdout
    assert "## Writing code for run_code" in text
    fence_start = text.index("```python\n") + len("```python\n")
    code = text[fence_start : text.rindex("```")]
    ast.parse(code)
    for name in ("read_file", "list_dir", "write_file", "edit_file", "bash"):
        assert name in code


def test_catalog_prints_markdown() -> None:
    done = run_cli("catalog")
    assert done.returncode == 0
    assert done.stdout.startswith("<!--")
    assert "# Tool Schema Catalog" in done.stdout
    assert "### `read_file`" in done.stdout


def test_run_code_prints_the_program_output(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    program = tmp_path / "prog.py"
    program.write_text(
        'r = await tools.read_file({"path": "a.txt"})\n'
        'print(r["line_count"])\n'
        'return r["text"].count("o")\n'
    )
    done = run_cli("run-code", str(program), "--workspace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2", "2"]


def test_run_code_exits_1_when_the_program_fails(tmp_path: Path) -> None:
    program = tmp_path / "boom.py"
    program.write_text("raise RuntimeError('boom')\n")
    done = run_cli("run-code", str(program), "--workspace", str(tmp_path))
    assert done.returncode == 1
    assert "code run failed (exception)" in done.stdout
    assert "RuntimeError: boom" in done.stdout
    # Only the result: no log line or library traceback mixed into the command's output.
    assert done.stdout.count("code run failed") == 1
    assert "dsh_tools" not in done.stdout


def test_run_code_reads_a_file_saved_with_a_byte_order_mark(tmp_path: Path) -> None:
    # As `python prog.py` does: an editor's UTF-8 signature is not part of the program.
    program = tmp_path / "prog.py"
    program.write_bytes(b"\xef\xbb\xbfprint('from a signed file')\nreturn 1\n")
    done = run_cli("run-code", str(program), "--workspace", str(tmp_path))
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines() == ["from a signed file", "1"]
    piped = subprocess.run(
        [sys.executable, "-m", "dsh_tools.cli", "run-code", "-", "--workspace", str(tmp_path)],
        input=program.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stdout
    assert piped.stdout.splitlines() == [b"from a signed file", b"1"]


def test_run_code_reads_the_program_from_standard_input_given_a_dash(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    done = subprocess.run(
        [sys.executable, "-m", "dsh_tools.cli", "run-code", "-", "--workspace", str(tmp_path)],
        input='r = await tools.read_file({"path": "a.txt"})\nreturn r["line_count"]\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2"]


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"dsh-tools {version('dsh-tools')}"


def test_python_m_dsh_tools_runs_the_same_command() -> None:
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "dsh_tools", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"dsh-tools {version('dsh-tools')}"
    refused = subprocess.run(
        [sys.executable, "-m", "dsh_tools", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert refused.returncode == 2
    assert "invalid choice" in refused.stderr


def test_run_code_rejects_a_missing_file(tmp_path: Path) -> None:
    assert main(["run-code", str(tmp_path / "nope.py")]) == 2


@pytest.mark.parametrize("runs", ["0", "-1"])
def test_bench_rejects_a_bad_run_count(runs: str) -> None:
    assert main(["bench", "--runs", runs]) == 2


def test_run_code_rejects_a_file_that_is_not_utf8_text(tmp_path: Path) -> None:
    program = tmp_path / "binary.py"
    program.write_bytes(b"\xff\xfe return 1\n")
    done = run_cli("run-code", str(program), "--workspace", str(tmp_path))
    assert done.returncode == 2
    assert "is not UTF-8 text" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is already gone, as after `| head -n 1`
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dsh_tools.cli", "sdk"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141


def test_a_reader_that_closes_the_pipe_during_the_demo_ends_it_quietly() -> None:
    # `dsh-tools demo | head -12`: the reader leaves after the list of calls, as the turn (and
    # the stand-in approver's answer) is still to come. Unbuffered, each line reaches the pipe
    # as it is printed, as at a terminal.
    child = subprocess.Popen(
        [sys.executable, "-m", "dsh_tools.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert child.stdout is not None
    try:
        head = [child.stdout.readline() for _ in range(12)]
        child.stdout.close()
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert head[-1].split()[:2] == [b"c7", b"bash"]  # the last call of the list
    assert err.decode() == ""
    assert child.returncode == 141


class _ReaderLeavesAfter(io.StringIO):
    """Standard output whose reader leaves after ``lines`` lines: every later write fails."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= self.lines:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return super().write(text)


def test_the_demo_writes_from_its_own_thread_only_so_a_closed_pipe_fails_no_call(
    tmp_path: Path, logs: Logs
) -> None:
    # The reader leaves after the list of calls: the stand-in approver, which answers during
    # the turn on a worker thread, must not be the one to find out.
    out = _ReaderLeavesAfter(12)
    with pytest.raises(BrokenPipeError):
        run_demo(out, workspace=tmp_path, code_mode=False)
    assert out.getvalue().splitlines()[-1].split()[:2] == ["c7", "bash"]
    assert logs.warnings == []  # no approval failure


def _fixed_figures(monkeypatch: pytest.MonkeyPatch, pool_ratio: float) -> None:
    import dsh_tools._bench as bench

    monkeypatch.setattr(
        bench, "measure_pipeline", lambda runs, progress: {"execute_no_hooks_us": 30.0}
    )
    monkeypatch.setattr(
        bench,
        "measure_pool",
        lambda runs, progress: {
            "pool10_sleep5ms_async_ms": 9999.0,  # a slow machine: no bar on absolute times
            "pool10_sleep5ms_async_ratio": pool_ratio,
        },
    )


@pytest.mark.parametrize(
    ("pool_ratio", "check", "status"),
    [(1.01, False, 0), (1.01, True, 0), (1.20, False, 0), (1.20, True, 1)],
)
def test_bench_marks_figures_over_their_bar_and_fails_only_with_check(
    monkeypatch: pytest.MonkeyPatch, pool_ratio: float, check: bool, status: int
) -> None:
    from dsh_tools.cli import run_bench

    _fixed_figures(monkeypatch, pool_ratio)
    out = io.StringIO()
    assert run_bench(out, as_json=False, runs=1, code_mode=False, check=check) == status
    assert ("(over)" in out.getvalue()) == (pool_ratio > 1.03)


def test_bench_json_lists_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from dsh_tools.cli import run_bench

    _fixed_figures(monkeypatch, 1.01)
    out = io.StringIO()
    assert run_bench(out, as_json=True, runs=1, code_mode=False) == 0
    figures = json.loads(out.getvalue())["figures"]
    assert figures == {
        "execute_no_hooks_us": 30.0,
        "pool10_sleep5ms_async_ms": 9999.0,
        "pool10_sleep5ms_async_ratio": 1.01,
    }


@pytest.mark.parametrize(
    ("pool_ratio", "check", "status"),
    [(1.01, False, 0), (1.01, True, 0), (1.20, False, 0), (1.20, True, 1)],
)
def test_bench_json_names_the_bars_and_the_figures_over_them_and_check_still_applies(
    monkeypatch: pytest.MonkeyPatch, pool_ratio: float, check: bool, status: int
) -> None:
    from dsh_tools.cli import run_bench

    _fixed_figures(monkeypatch, pool_ratio)
    out = io.StringIO()
    assert run_bench(out, as_json=True, runs=1, code_mode=False, check=check) == status
    report = json.loads(out.getvalue())
    assert report["bars"] == {"pool10_sleep5ms_async_ratio": 1.03}
    is_over = pool_ratio > 1.03
    assert report["over"] == (["pool10_sleep5ms_async_ratio"] if is_over else [])
    assert report["bars_met"] is not is_over


def test_the_bench_report_names_the_monty_release_it_compared_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Monty's figures change with its release; a ratio is read against the one measured.
    import dsh_tools._bench as bench
    import dsh_tools._bench_monty as peer
    from dsh_tools.cli import run_bench

    _fixed_figures(monkeypatch, 1.01)
    monkeypatch.setattr(bench, "measure_assembly", lambda runs, progress: {})
    monkeypatch.setattr(bench, "measure_demo_rss", lambda progress: {})
    monkeypatch.setattr(peer, "monty_available", lambda: True)
    monkeypatch.setattr(peer, "monty_version", lambda: "1.7.0")
    monkeypatch.setattr(
        peer,
        "compare_with_monty",
        lambda ours, runs, rounds, pause: {
            "monty_empty_ms": 0.6,
            "empty_ratio": 2.5,
            "100_calls_ratio": 0.5,
        },
    )
    out = io.StringIO()
    run_bench(out, as_json=True, runs=1, code_mode=True)
    assert json.loads(out.getvalue())["monty_version"] == "1.7.0"
    out = io.StringIO()
    run_bench(out, as_json=False, runs=1, code_mode=True)
    assert "(Monty: pydantic-monty 1.7.0)" in out.getvalue().splitlines()


def test_monty_version_is_the_installed_release_or_none() -> None:
    from dsh_tools._bench_monty import monty_available, monty_version

    found = monty_version()
    if monty_available():
        assert found == importlib.metadata.version("pydantic-monty")
    else:
        assert found is None


def test_monty_version_names_the_release_that_provides_the_module(tmp_path: Path) -> None:
    # ``pydantic-monty`` is a package of requirements only: the ``pydantic_monty`` module the
    # comparison measures comes from ``pydantic-monty-client``, which may be installed alone
    # (or at another release). The report names the release of the module it measured.
    client = tmp_path / "pydantic_monty_client-9.9.1.dist-info"
    client.mkdir()
    (client / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pydantic-monty-client\nVersion: 9.9.1\n"
    )
    (client / "RECORD").write_text("pydantic_monty/__init__.py,,\n")
    (tmp_path / "pydantic_monty").mkdir()
    (tmp_path / "pydantic_monty" / "__init__.py").write_text("")
    module = Path(__file__).parent.parent / "dsh_tools" / "_bench_monty.py"
    probe = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"spec = importlib.util.spec_from_file_location('peer', {str(module)!r})\n"
        "peer = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(peer)\n"
        "print(peer.monty_available(), peer.monty_version())\n"
    )
    # Without site-packages: only the client above is installed.
    found = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True
    )
    assert found.stdout.split() == ["True", "9.9.1"]


def test_the_monty_comparison_takes_each_ratio_within_a_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The machine's speed changes between rounds; a ratio must compare figures of one round.
    import dsh_tools._bench_monty as peer

    speeds = iter([1.0, 3.0, 2.0])  # the machine's slowness in each round
    current: list[float] = []

    def ours(runs: int) -> dict[str, float]:
        current.append(next(speeds))
        figures = {}
        for name in ("empty", "100_calls", "100_async_calls"):
            for suffix in ("", "_back_to_back"):
                figures[f"run_code_{name}{suffix}_ms"] = 2.0 * current[-1]
        figures["runtime_100_calls_ms"] = 1.0 * current[-1]  # the floor: warm pool only
        return figures

    def monty(runs: int, pause: float) -> dict[str, float]:
        return {
            f"monty_{name}{suffix}_ms": 4.0 * current[-1]
            for name in ("empty", "100_calls")
            for suffix in ("", "_back_to_back")
        }

    monkeypatch.setattr(peer, "measure_monty", monty)
    figures = peer.compare_with_monty(ours, runs=3, rounds=3, pause=0.0)
    assert figures["empty_ratio"] == figures["100_calls_back_to_back_ratio"] == 0.5
    assert figures["100_calls_floor_ratio"] == 0.25
    assert "100_calls_floor_back_to_back_ratio" not in figures
    assert figures["run_code_empty_ms"] == 4.0 and figures["monty_empty_ms"] == 8.0


def test_the_runtime_floor_runs_both_programs_through_the_sandboxed_runtime() -> None:
    from dsh_tools._bench import measure_runtime_floor

    figures = measure_runtime_floor(runs=1)  # a program that fails raises RuntimeError
    assert sorted(figures) == ["runtime_100_calls_ms", "runtime_empty_ms"]
    assert all(value > 0 for value in figures.values())


def test_run_code_honours_a_wall_clock_budget(tmp_path: Path) -> None:
    program = tmp_path / "sleepy.py"
    program.write_text("await asyncio.sleep(60)\n")
    done = run_cli("run-code", str(program), "--workspace", str(tmp_path), "--max-wall-ms", "300")
    assert done.returncode == 1
    assert "code run failed (timeout): wall-clock ceiling reached (300ms)" in done.stdout


@pytest.mark.parametrize("budget", ["0", "-5", "soon", "inf"])
def test_run_code_rejects_a_bad_budget(tmp_path: Path, budget: str) -> None:
    program = tmp_path / "p.py"
    program.write_text("return 1\n")
    done = run_cli("run-code", str(program), "--max-wall-ms", budget)
    assert done.returncode == 2
    assert "--max-wall-ms" in done.stderr


def test_run_code_rejects_standard_input_that_is_not_utf8_text(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsh_tools.cli", "run-code", "-", "--workspace", str(tmp_path)],
        input=b"return 1\n\xff\n",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert b"standard input is not UTF-8 text" in done.stderr
    assert b"Traceback" not in done.stderr


def test_demo_refuses_a_folder_with_files_of_its_own_and_touches_none(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "README.md").write_text("my precious readme\n")
    done = run_cli("demo", "--workspace", str(mine), "--no-code-mode")
    assert done.returncode == 2
    assert "is not empty; the demo writes README.md, src/ and notes/ there" in done.stderr
    assert (mine / "README.md").read_text() == "my precious readme\n"
    assert sorted(p.name for p in mine.iterdir()) == ["README.md", "src"]


def test_demo_runs_again_in_a_folder_it_used_before(tmp_path: Path) -> None:
    for _ in range(2):
        assert run_demo(io.StringIO(), workspace=tmp_path, code_mode=False) == 0


def test_output_that_cannot_be_written_is_an_error_message_not_a_traceback() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dsh_tools.cli", "sdk"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    assert done.returncode == 1
    assert done.stderr == "dsh-tools sdk: No space left on device\n"


def _stdout_env(*, buffered: bool) -> dict[str, str]:
    """The environment for a child whose standard output is buffered (a pipe or a file, by
    default) or written through at each write (``PYTHONUNBUFFERED``)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["demo", "--help"]], ids=" ".join)
def test_version_and_help_that_cannot_be_written_are_an_error_message(
    args: list[str], buffered: bool
) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dsh_tools.cli", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO,
            env=_stdout_env(buffered=buffered),
        )
    assert done.returncode == 1
    assert done.stderr == "dsh-tools: No space left on device\n"


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_help_for_a_reader_that_closed_the_pipe_ends_quietly(buffered: bool) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dsh_tools.cli", "--help"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO,
            env=_stdout_env(buffered=buffered),
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141


def test_a_current_folder_that_no_longer_exists_is_named_not_a_traceback(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    # The command is started as a user starts it (``python -m dsh_tools``), from a folder
    # removed under it: ``python -c`` puts that folder on ``sys.path``, where CPython 3.13.0
    # fails to import ``socket`` before any of the package runs.
    script = (
        "import os, sys\n"
        f"os.mkdir({str(gone)!r}); os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'dsh_tools', *sys.argv[1:]])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for args, status, text in (
        (["--version"], 0, "dsh-tools "),
        (["catalog"], 0, "| `dsh-tools-bash` | `bash` |"),
        (["run-code", "-"], 2, "the current folder no longer exists; pass --workspace DIR"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            input="return 1\n",
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == status, done.stderr
        assert text in done.stdout + done.stderr
        assert "Traceback" not in done.stderr


def test_ctrl_c_ends_run_code_with_status_130_and_no_traceback(tmp_path: Path) -> None:
    program = tmp_path / "wait.py"
    program.write_text(
        'await tools.write_file({"path": "started", "content": "yes"})\nawait asyncio.sleep(60)\n'
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "dsh_tools.cli", "run-code", str(program)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.strip() == "dsh-tools run-code: interrupted"


def test_output_a_terminal_cannot_show_is_escaped_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsh_tools.cli", "run-code", "-", "--workspace", str(tmp_path)],
        input='return "caf\\u00e9"\n',
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=dict(os.environ, PYTHONIOENCODING="ascii"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "caf\\xe9\n"


@needs_git_checkout
def test_bench_names_why_it_left_out_the_comparison_with_a_revision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_tools.cli import run_bench

    _fixed_figures(monkeypatch, 1.01)
    out = io.StringIO()
    status = run_bench(out, as_json=False, runs=1, code_mode=False, against="no-such-revision")
    assert status == 0
    assert "(not measured: the comparison with no-such-revision: git cannot find" in (
        out.getvalue()
    )
    # With --check, a bar that could not be measured is not met.
    check = run_bench(
        io.StringIO(), as_json=False, runs=1, code_mode=False, check=True, against="no-such-rev"
    )
    assert check == 1
    out = io.StringIO()
    run_bench(out, as_json=True, runs=1, code_mode=False, against="no-such-revision")
    assert "no-such-revision" in json.loads(out.getvalue())["skipped"]


@needs_first_release
def test_the_comparison_with_the_first_release_measures_both_trees_and_leaves_no_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools._bench_revision import FIRST_RELEASE, compare_with_revision, source_checkout

    # A module lying in the temporary folder must not answer the probes' imports.
    (tmp_path / "json.py").write_text("raise SystemExit('a stray json.py was imported')\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    checkout = source_checkout()
    assert checkout == REPO  # the tests run from the checkout
    report = compare_with_revision(checkout, FIRST_RELEASE, rounds=1, calls=300)
    assert set(report) == {"no_hooks_us", "four_hooks_us", "thread_batch_ms"}
    for figure in report.values():
        assert figure["this_checkout"] > 0 and figure["revision"] > 0
        assert figure["ratio"] == figure["this_checkout"] / figure["revision"]
    # 1,000 bodies of 5 ms, ten at a time, in either tree
    assert report["thread_batch_ms"]["revision"] >= 500
    worktrees = subprocess.run(
        ["git", "-C", str(checkout), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "dsh-bench-rev-" not in worktrees


@needs_git_checkout
@pytest.mark.parametrize("revision", ["--lock", "-b", "no-such-revision"])
def test_a_revision_git_cannot_find_is_named_and_leaves_no_worktree(revision: str) -> None:
    from dsh_tools._bench_revision import compare_with_revision

    before = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    with pytest.raises(RuntimeError, match=f"git cannot find {revision!r}"):
        compare_with_revision(REPO, revision, rounds=1, calls=10)
    after = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before
