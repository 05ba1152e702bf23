"""The ``dsh-tools`` command: ``demo``, ``bench``, ``sdk``, ``catalog`` and ``run-code``
(``run-code -`` reads the program from standard input), and ``--version``.

Exit codes: 0 success, 1 the work itself failed (a failed program; with ``bench --check``, a
figure over its bar), 2 bad command-line arguments. A reader that closes standard output early
(``| head``) ends the command quietly with the usual SIGPIPE status, 141.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import structlog
from msgspec import UNSET

from ._system import ToolSystem
from .actors import (
    AbortSignal,
    Ask,
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionResult,
)
from .actors._config import ToolsConfig
from .codebridge._seam import DEFAULT
from .pipeline import timeout_policy
from .pipeline._approval import ApprovalOutcome

__all__ = ["main"]


# --- output helpers ----------------------------------------------------------------------------


def _content_text(result: ToolExecutionResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type') if isinstance(block, dict) else '?'} content]")
    return "\n".join(parts)


def _indent(text: str, prefix: str = "      ") -> str:
    lines = text.splitlines() or [""]
    if len(lines) > 12:
        lines = [*lines[:12], f"... ({len(lines) - 12} more lines)"]
    return "\n".join(prefix + line for line in lines)


def _card_title(system: ToolSystem, name: str, arguments: Any) -> str:
    definition = system.tools.get(name)
    presenter = getattr(definition, "present_call", None) if definition is not None else None
    if presenter is not None:
        try:
            view = presenter(arguments)
        except Exception:
            view = None
        if view is not None:
            card = type(view).__name__.replace("CallView", "").lower() or "generic"
            return f"{card} card: {getattr(view, 'title', name)}"
    return f"generic card: {name}"


def _print_event_log(system: ToolSystem, out: TextIO) -> None:
    print("\nEvent log (system.session.events):", file=out)
    start = None
    for event in system.session.events:
        start = event.time if start is None else start
        data = event.data
        stamp = f"+{(event.time - start) * 1000:7.1f} ms"
        if event.type == "tool/call":
            arguments = str(data["arguments"])
            if len(arguments) > 60:
                arguments = arguments[:57] + "..."
            detail = f"{data['call_id']} {data['name']} {arguments}"
        elif event.type == "tool/result":
            status = "error" if data["is_error"] else "ok"
            code = f" ({data['error']['code']})" if "error" in data else ""
            detail = f"{data['call_id']} {status}{code}"
        elif event.type.startswith("tool/code-dispatch"):
            detail = f"{data['sub_call_id']} {data['name']}"
            if "is_error" in data:
                detail += " error" if data["is_error"] else " ok"
        else:
            detail = json.dumps(data.get("content"), ensure_ascii=False)[:80]
        print(f"  {stamp}  {event.type:<26} {detail}", file=out)


def _durations(system: ToolSystem) -> dict[str, float]:
    """Milliseconds from each call's ``tool/call`` event to its ``tool/result``."""
    started: dict[str, float] = {}
    took: dict[str, float] = {}
    for event in system.session.events:
        call_id = event.data.get("call_id") if isinstance(event.data, dict) else None
        if event.type == "tool/call" and call_id is not None:
            started[call_id] = event.time
        elif event.type == "tool/result" and call_id in started:
            took[call_id] = (event.time - started[call_id]) * 1000
    return took


class _ScriptedApproval:
    """The demo's stand-in for a human: approves writes to notes/, rejects anything else.

    It notes its answer per call in ``decided_by``, so the demo can say which component
    produced each outcome."""

    def __init__(self, out: TextIO, decided_by: dict[str, str]) -> None:
        self.out = out
        self.decided_by = decided_by

    def request(
        self,
        *,
        agent: str,
        tool_name: str,
        call_id: str,
        signal: AbortSignal,
        arguments: Any,
        reason: str = "",
    ) -> ApprovalOutcome:
        answer: ApprovalOutcome = "allowed-once" if "notes/" in reason else "rejected"
        print(
            f"    [approval] {agent} asks to run {tool_name} ({reason}) -> {answer}", file=self.out
        )
        verdict = "allowed it" if answer == "allowed-once" else "rejected it"
        self.decided_by[call_id] = f"policy hook (Ask) -> approval {verdict}"
        return answer


def _outcome_source(result: ToolExecutionResult, call_id: str, decided_by: dict[str, str]) -> str:
    """Which component produced this outcome: a guard, the policy hook and approval, the
    timeout policy, or the tool itself."""
    if call_id in decided_by:
        return decided_by[call_id]
    info = result.error.info if isinstance(result, ToolExecutionFailure) else UNSET
    if info is not UNSET and info.code == "TOOL_TIMEOUT":
        return "timeout policy (its deadline fired)"
    return "the tool"


# --- demo --------------------------------------------------------------------------------------


def _demo_workspace(root: Path) -> None:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "notes").mkdir(exist_ok=True)
    (root / "README.md").write_text("# Demo project\n\nA tiny workspace for the dsh-tools demo.\n")
    (root / "src" / "app.py").write_text(
        "def main():\n    # TODO: parse arguments\n    print('hello')\n\n\n"
        "def helper():\n    # TODO: remove\n    return 42\n"
    )
    (root / "src" / "util.py").write_text("def add(a, b):\n    return a + b  # TODO: types\n")


def run_demo(out: TextIO, *, workspace: Path | None = None, code_mode: bool = True) -> int:
    """Run the scripted agent turn; return an exit code."""
    from .examples import example_tools

    own_dir = workspace is None
    root = Path(tempfile.mkdtemp(prefix="dsh-tools-demo-")) if workspace is None else workspace
    try:
        _demo_workspace(root)
        mode = "both" if code_mode else "native"
        config = ToolsConfig(mode=mode, max_parallel_tool_calls=4)
        runtime: Any = DEFAULT if code_mode else None
        decided_by: dict[str, str] = {}
        with ToolSystem.start(
            config, approval=_ScriptedApproval(out, decided_by), code_runtime=runtime
        ) as system:
            demo = system.plugin("demo-tools")
            for definition in example_tools(root, bash_timeout_ms=300):
                demo.tools.register(definition)
            system.tools.on_execute(timeout_policy())

            def no_rm(exec: Any) -> str | None:
                if exec.name == "bash" and "rm " in str(exec.arguments.get("command", "")):
                    decided_by[exec.call_id] = "guard no_rm"
                    return "destructive shell commands are not allowed in this workspace"
                return None

            system.tools.guard(no_rm)

            async def ask_before_writing(exec: Any, next: Any) -> Any:
                if exec.name in ("write_file", "edit_file"):
                    return Ask(f"write to {exec.arguments.get('path')}")
                return await next()

            agent = system.agent("demo-agent")
            agent.tools.on_pre_execute(ask_before_writing)

            print(f"Workspace: {root}", file=out)
            print(f"Mode: {mode}; tools: {', '.join(system.tools.names())}\n", file=out)
            calls = [
                ToolCall("c1", "read_file", json.dumps({"path": "README.md"})),
                ToolCall("c2", "list_dir", json.dumps({"path": "src"})),
                ToolCall("c3", "read_file", json.dumps({"path": "src/app.py", "limit": 3})),
                ToolCall(
                    "c4",
                    "write_file",
                    json.dumps({"path": "notes/todo.md", "content": "- types\n"}),
                ),
                ToolCall(
                    "c5", "bash", json.dumps({"command": "rm -rf src", "description": "Clean up"})
                ),
                ToolCall(
                    "c6", "bash", json.dumps({"command": "sleep 5", "description": "Wait a while"})
                ),
                ToolCall(
                    "c7",
                    "bash",
                    json.dumps({"command": "grep -c TODO src/*.py", "description": "Count TODOs"}),
                ),
            ]
            print(
                "One model turn: 7 calls (reads run in parallel, writes and shell commands",
                file=out,
            )
            print("run alone as ordered barriers; results come back in model order).", file=out)
            for call in calls:
                mode_label = system.tools.execution_mode(
                    ExecuteCall(
                        call_id=call.call_id, name=call.name, arguments=json.loads(call.arguments)
                    )
                )
                title = _card_title(system, call.name, json.loads(call.arguments))
                print(f"  {call.call_id} {call.name:<10} {mode_label:<9} {title}", file=out)
            start = time.perf_counter()
            outcome = system.execute_batch(ExecuteBatch(calls=calls, agent=agent.key))
            elapsed = (time.perf_counter() - start) * 1000
            print(f"\nResults ({elapsed:.0f} ms for the whole turn):", file=out)
            durations = _durations(system)
            for call, result in zip(calls, outcome.results, strict=True):
                status = "ERROR" if result.is_error else "ok"
                code = ""
                if result.is_error and result.error.info is not UNSET:  # type: ignore[union-attr]
                    code = f" [{result.error.info.code}]"  # type: ignore[union-attr]
                took = durations.get(call.call_id)
                timing = f" ({took:.1f} ms)" if took is not None else ""
                source = _outcome_source(result, call.call_id, decided_by)
                print(
                    f"  {call.call_id} {call.name}: {status}{code}{timing}  [decided by: {source}]",
                    file=out,
                )
                print(_indent(_content_text(result)), file=out)

            if code_mode:
                program = textwrap.dedent(
                    """\
                    listing = await tools.list_dir({"path": "src"})
                    files = [e["name"] for e in listing["entries"] if e["name"].endswith(".py")]
                    reads = await asyncio.gather(
                        *[tools.read_file({"path": "src/" + f}) for f in files]
                    )
                    counts = {f: r["text"].count("TODO") for f, r in zip(files, reads)}
                    print(f"scanned {len(files)} files")
                    return counts
                    """
                )
                print(
                    "\nCode Mode: the model writes a program; every tool call inside it goes",
                    file=out,
                )
                print("through the same pipeline (events tool/code-dispatch-*).", file=out)
                print(_indent(program.rstrip(), "    | "), file=out)
                if getattr(system.code_runtime, "template_pid", None) is None:
                    print(
                        "  (cold start: this first run also starts the worker template process;"
                        " later runs fork from it)",
                        file=out,
                    )
                    out.flush()
                start = time.perf_counter()
                result = system.execute(
                    ExecuteCall(
                        call_id="c8",
                        name="run_code",
                        arguments={"code": program, "description": "Count TODO markers in src"},
                        agent=agent.key,
                    )
                )
                elapsed = (time.perf_counter() - start) * 1000
                status = "ERROR" if result.is_error else "ok"
                print(f"  c8 run_code: {status} ({elapsed:.0f} ms)", file=out)
                print(_indent(_content_text(result)), file=out)
            _print_event_log(system, out)
        return 0
    finally:
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)


# --- other commands ----------------------------------------------------------------------------


def _example_system(mode: str, root: Path, config: ToolsConfig | None = None) -> ToolSystem:
    from .examples import example_tools

    system = ToolSystem.start(config if config is not None else ToolsConfig(mode=mode))
    for definition in example_tools(root):
        system.tools.register(definition)
    system.tools.on_execute(timeout_policy())
    return system


def run_sdk(out: TextIO) -> int:
    """Print the generated Code Mode SDK for the example tools."""
    with tempfile.TemporaryDirectory() as tmp, _example_system("code", Path(tmp)) as system:
        for section in system.assemble_prompt().sections:
            if section.name == "tools:sdk":
                print(section.text, file=out)
    return 0


def run_catalog(out: TextIO) -> int:
    """Print the tool catalog as Markdown."""
    from ._catalog import render_default_catalog

    print(render_default_catalog(), end="", file=out)
    return 0


def run_code_file(path: Path, out: TextIO, *, workspace: Path) -> int:
    """Run the program in ``path`` in Code Mode against the example tools."""
    return run_program(path.read_text(encoding="utf-8"), path.name, out, workspace=workspace)


def run_program(
    program: str,
    name: str,
    out: TextIO,
    *,
    workspace: Path,
    compute_ms: float = 60_000,
    max_wall_ms: float = 600_000,
    isolation: str = "sandbox",
) -> int:
    """Run ``program`` (the body of an async function) in Code Mode against the example tools."""
    config = ToolsConfig(
        mode="code", compute_ms=compute_ms, max_wall_ms=max_wall_ms, code_isolation=isolation
    )
    with _example_system("code", workspace, config) as system:
        result = system.execute(
            ExecuteCall(
                call_id="run-1",
                name="run_code",
                arguments={"code": program, "description": f"Run {name}"},
                agent="cli",
            )
        )
        print(_content_text(result), file=out)
        return 1 if result.is_error else 0


class _Progress:
    """A one-line progress bar on stderr (silent when stderr is not a terminal)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self._lock = threading.Lock()

    def step(self, label: str) -> None:
        with self._lock:
            self.done += 1
            width = 24
            filled = int(width * (self.done - 1) / max(1, self.total))
            bar = "#" * filled + "-" * (width - filled)
            line = f"[{bar}] {self.done}/{self.total} {label}"
            if self.tty:
                self.stream.write("\r" + line[:100].ljust(100))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


_BARS: list[tuple[str, str, str, float | None]] = [
    ("execute_no_hooks_us", "per call, no hooks (system.execute)", "us", 60),
    ("execute_no_hooks_on_loop_us", "  the same on a per-thread event loop", "us", None),
    ("execute_no_hooks_ratio", "  system.execute / on an event loop", "x", 0.6),
    ("ref_ask_no_hooks_us", "  the same as system.ref.ask(ExecuteCall)", "us", None),
    ("execute_four_hooks_us", "per call, four pass-through hooks", "us", 80),
    ("execute_four_hooks_on_loop_us", "  the same on a per-thread event loop", "us", None),
    ("execute_four_hooks_ratio", "  system.execute / on an event loop", "x", 0.7),
    ("ref_ask_four_hooks_us", "  the same as system.ref.ask(ExecuteCall)", "us", None),
    ("pykka_ask_us", "bare pykka ask round trip (reference point)", "us", None),
    ("pool10_sleep5ms_async_ms", "1,000 x 5 ms safe calls, pool 10 (async)", "ms", 540),
    ("pool10_sleep5ms_async_floor_ms", "  asyncio loop, same sleeps ten at a time", "ms", None),
    ("pool10_sleep5ms_async_ratio", "  pool / asyncio loop", "x", 1.05),
    ("pool10_sleep5ms_thread_ms", "1,000 x 5 ms safe calls, pool 10 (thread)", "ms", 540),
    ("pool10_sleep5ms_thread_floor_ms", "  bare ThreadPoolExecutor(10), same sleeps", "ms", None),
    ("pool10_sleep5ms_thread_ratio", "  pool / ThreadPoolExecutor(10)", "x", 1.05),
    ("trivial_pool1_calls_per_s", "trivial calls per second, pool 1", "/s", None),
    ("trivial_pool10_calls_per_s", "trivial calls per second, pool 10", "/s", None),
    ("trivial_pool100_calls_per_s", "trivial calls per second, pool 100", "/s", None),
    ("run_code_empty_ms", "empty run_code, end to end", "ms", 15),
    ("run_code_100_calls_ms", "run_code, 100 calls under asyncio.gather", "ms", 30),
    ("assemble_2000_first_ms", "assemble_prompt, 2,000 tools, first call", "ms", None),
    ("assemble_2000_cached_ms", "  the same again, registry unchanged", "ms", 1),
    ("run_code_empty_back_to_back_ms", "empty run_code, back to back", "ms", None),
    ("run_code_100_calls_back_to_back_ms", "run_code 100 calls, back to back", "ms", None),
    ("demo_rss_mb", "resident memory of the demo (peak)", "MB", 80),
    ("monty_empty_ms", "Monty: session checkout + empty feed_run", "ms", None),
    ("monty_100_calls_ms", "Monty: 100 external async calls, gathered", "ms", None),
    ("monty_empty_back_to_back_ms", "Monty: empty run, back to back", "ms", None),
    ("monty_100_calls_back_to_back_ms", "Monty: 100 calls, back to back", "ms", None),
    ("run_code_empty_vs_monty", "empty run_code / Monty's empty run", "x", 2),
    ("run_code_100_calls_vs_monty", "run_code 100 calls / Monty's 100 calls", "x", 0.2),
]


def run_bench(
    out: TextIO, *, as_json: bool, runs: int, code_mode: bool, check: bool = False
) -> int:
    """Measure and print the benchmark table (or JSON)."""
    from ._bench import (
        POOL_REFILL_PAUSE_S,
        measure_assembly,
        measure_code_mode,
        measure_demo_rss,
        measure_pipeline,
        measure_pool,
    )
    from ._bench_monty import measure_monty, monty_available

    progress = _Progress(3 + 5 + (4 if code_mode else 0))
    figures: dict[str, float] = {}
    figures.update(measure_pipeline(runs=runs, progress=progress.step))
    figures.update(measure_pool(runs=runs, progress=progress.step))
    if code_mode:
        figures.update(measure_code_mode(runs=max(runs * 4, 10), progress=progress.step))
        figures.update(measure_assembly(runs=runs, progress=progress.step))
        figures.update(measure_demo_rss(progress=progress.step))
        if monty_available():
            figures.update(measure_monty(runs=max(runs * 4, 10), pause=POOL_REFILL_PAUSE_S))
            figures["run_code_empty_vs_monty"] = (
                figures["run_code_empty_ms"] / figures["monty_empty_ms"]
            )
            figures["run_code_100_calls_vs_monty"] = (
                figures["run_code_100_calls_ms"] / figures["monty_100_calls_ms"]
            )
    progress.close()
    if as_json:
        print(json.dumps({"cpus": os.cpu_count(), "figures": figures}, indent=2), file=out)
        return 0
    print(f"{'figure':<48} {'measured':>12}  {'bar':>8}", file=out)
    print("-" * 72, file=out)
    over = False
    for key, label, unit, bar in _BARS:
        if key not in figures:
            continue
        value = figures[key]
        if unit == "/s":
            shown = f"{value:,.0f} {unit}"
        elif unit == "x":
            shown = f"{value:.2f} {unit}"
        elif value < 0.1:
            shown = f"{value:.4f} {unit}"
        else:
            shown = f"{value:.1f} {unit}"
        bar_text = f"<= {bar:g}" if bar is not None else ""
        mark = ""
        if bar is not None and value > bar:
            mark, over = "  (over)", True
        print(f"{label:<48} {shown:>12}  {bar_text:>8}{mark}", file=out)
    return 1 if over and check else 0


# --- entry point -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh-tools",
        description="Tool registry and execution pipeline for LLM agent harnesses.",
    )
    parser.add_argument("--version", action="version", version=f"dsh-tools {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run a scripted agent turn against the example tools")
    demo.add_argument("--workspace", type=Path, help="use this folder instead of a temporary one")
    demo.add_argument("--no-code-mode", action="store_true", help="skip the Code Mode part")
    bench = sub.add_parser("bench", help="measure per-call overhead and pool throughput")
    bench.add_argument("--json", action="store_true", help="print machine-readable JSON")
    bench.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    bench.add_argument("--no-code-mode", action="store_true", help="skip the Code Mode figures")
    bench.add_argument("--check", action="store_true", help="exit 1 when a figure is over its bar")
    sub.add_parser("sdk", help="print the generated Code Mode SDK for the example tools")
    sub.add_parser("catalog", help="print the tool catalog as Markdown")
    run = sub.add_parser("run-code", help="run a Python program in Code Mode")
    run.add_argument(
        "file",
        help="the program (the body of an async function): a file, or - for standard input",
    )
    run.add_argument(
        "--workspace",
        type=Path,
        default=Path.cwd(),
        help="folder the example tools work in (default: the current folder)",
    )
    run.add_argument(
        "--max-wall-ms",
        type=_positive_ms,
        default=600_000,
        help="wall-clock budget of the program in milliseconds (default 600000)",
    )
    run.add_argument(
        "--compute-ms",
        type=_positive_ms,
        default=60_000,
        help="CPU-time budget of the program in milliseconds (default 60000)",
    )
    run.add_argument(
        "--isolation",
        choices=("sandbox", "process"),
        default="sandbox",
        help="sandbox (default): only the example tools reach the workspace; process: the "
        "program runs with your user's powers",
    )
    return parser


def _version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-tools")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def _read_program(name: str) -> tuple[str, str] | str:
    """The program text and its display name, or an error message naming what was wrong."""
    if name == "-":
        # The bytes, decoded here: the text stream's error handler may be surrogateescape.
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        if isinstance(data, str):
            return data, "<stdin>"
        try:
            return data.decode("utf-8"), "<stdin>"
        except UnicodeDecodeError as error:
            return f"standard input is not UTF-8 text ({error.reason} at byte {error.start})"
    path = Path(name)
    if not path.is_file():
        return f"{path} is not a file"
    try:
        return path.read_text(encoding="utf-8"), path.name
    except UnicodeDecodeError as error:
        return f"{path} is not UTF-8 text ({error.reason})"
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"


def _positive_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of milliseconds")
    return value


_SIGPIPE_STATUS = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(argv)
    if argv is None:
        _quiet_logs()
    try:
        status = _dispatch(args, sys.stdout)
        sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        # The reader went away (`dsh-tools sdk | head`): stop quietly. Point stdout at /dev/null
        # so the interpreter's final flush does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)
        return _SIGPIPE_STATUS


def _quiet_logs() -> None:
    """At a terminal the command's own output is the point: the library's log lines go to
    stderr, warnings and above only (unless the process configured structlog itself)."""
    if structlog.is_configured():
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "demo":
        if args.workspace is not None and not args.workspace.is_dir():
            print(f"dsh-tools demo: --workspace {args.workspace} is not a folder", file=sys.stderr)
            return 2
        return run_demo(out, workspace=args.workspace, code_mode=not args.no_code_mode)
    if args.command == "bench":
        if args.runs < 1:
            print("dsh-tools bench: --runs must be at least 1", file=sys.stderr)
            return 2
        return run_bench(
            out,
            as_json=args.json,
            runs=args.runs,
            code_mode=not args.no_code_mode,
            check=args.check,
        )
    if args.command == "sdk":
        return run_sdk(out)
    if args.command == "catalog":
        return run_catalog(out)
    if not args.workspace.is_dir():
        print(f"dsh-tools run-code: --workspace {args.workspace} is not a folder", file=sys.stderr)
        return 2
    read = _read_program(args.file)
    if isinstance(read, str):
        print(f"dsh-tools run-code: {read}", file=sys.stderr)
        return 2
    program, name = read
    return run_program(
        program,
        name,
        out,
        workspace=args.workspace,
        compute_ms=args.compute_ms,
        max_wall_ms=args.max_wall_ms,
        isolation=args.isolation,
    )


if __name__ == "__main__":
    sys.exit(main())
