"""``dsh-tools demo``: one scripted agent turn against the example tools, in a scratch
workspace, with a guard, a policy hook asking a scripted approver, a timeout and Code Mode."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, TextIO

from msgspec import UNSET

from ._cli_demo_report import call_durations, card_title, outcome_source, print_event_log
from ._cli_output import content_text, indent
from ._system import ToolSystem
from .actors import AbortSignal, Ask, ExecuteBatch, ExecuteCall, ToolCall
from .actors._config import ToolsConfig
from .codebridge import SubprocessCodeRuntime
from .codebridge._seam import DEFAULT, DefaultRuntime
from .pipeline import timeout_policy
from .pipeline._approval import ApprovalOutcome

__all__ = ["run_demo"]


class _ScriptedApproval:
    """The demo's stand-in for a human: approves writes to notes/, rejects anything else.

    It notes its answer per call in ``decided_by``, so the demo can say which component
    produced each outcome, and what it was asked in ``asked``. It prints nothing itself: it
    answers on one of the pipeline's worker threads, where a write to a closed pipe or a full
    disk would be an approval failure, logged with its traceback, instead of the end of the
    command. ``report`` prints what it was asked, from the demo's own thread."""

    def __init__(self, decided_by: dict[str, str]) -> None:
        self.decided_by = decided_by
        self.asked: list[str] = []

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
        self.asked.append(f"    [approval] {agent} asks to run {tool_name} ({reason}) -> {answer}")
        verdict = "allowed it" if answer == "allowed-once" else "rejected it"
        self.decided_by[call_id] = f"policy hook (Ask) -> approval {verdict}"
        return answer

    def report(self, out: TextIO) -> None:
        """Print what the approver was asked since the last report."""
        asked, self.asked = self.asked, []
        for line in asked:
            print(line, file=out)


_MARKER = ".dsh-tools-demo"
"""The file that marks a folder as the demo's own: a folder given with ``--workspace`` must be
empty or hold it, since the demo writes over ``README.md`` and ``src/`` there."""


def _refusal(root: Path) -> str | None:
    """Why the demo will not use ``root``, a folder the user named; None when it may."""
    try:
        entries = [entry.name for entry in root.iterdir()]
    except OSError as error:
        return f"cannot read --workspace {root}: {error.strerror or error}"
    if entries and _MARKER not in entries:
        return (
            f"--workspace {root} is not empty; the demo writes README.md, src/ and notes/ there, "
            "so give it an empty folder (or one it used before)"
        )
    return None


def _demo_workspace(root: Path) -> None:
    (root / _MARKER).write_text("A workspace of `dsh-tools demo`: it writes over anything here.\n")
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
    if workspace is not None and (refused := _refusal(workspace)) is not None:
        print(f"dsh-tools demo: {refused}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="dsh-tools-demo-")) if workspace is None else workspace
    try:
        try:
            _demo_workspace(root)
        except OSError as error:
            print(
                f"dsh-tools demo: cannot set up the workspace in {root}: {error.strerror or error}",
                file=sys.stderr,
            )
            return 2
        mode = "both" if code_mode else "native"
        config = ToolsConfig(mode=mode, max_parallel_tool_calls=4)
        runtime: DefaultRuntime | None = DEFAULT if code_mode else None
        decided_by: dict[str, str] = {}
        approval = _ScriptedApproval(decided_by)
        with ToolSystem.start(config, approval=approval, code_runtime=runtime) as system:
            if isinstance(system.code_runtime, SubprocessCodeRuntime):
                # The workspace is ready: the worker template may start now, so that the
                # program below finds a worker waiting.
                system.code_runtime.warm_up()
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
                title = card_title(system, call.name, json.loads(call.arguments))
                print(f"  {call.call_id} {call.name:<10} {mode_label:<9} {title}", file=out)
            start = time.perf_counter()
            outcome = system.execute_batch(ExecuteBatch(calls=calls, agent=agent.key))
            elapsed = (time.perf_counter() - start) * 1000
            approval.report(out)
            print(f"\nResults ({elapsed:.0f} ms for the whole turn):", file=out)
            durations = call_durations(system)
            for call, result in zip(calls, outcome.results, strict=True):
                status = "ERROR" if result.is_error else "ok"
                code = ""
                if result.is_error and result.error.info is not UNSET:
                    code = f" [{result.error.info.code}]"
                took = durations.get(call.call_id)
                timing = f" ({took:.1f} ms)" if took is not None else ""
                source = outcome_source(result, call.call_id, decided_by)
                print(
                    f"  {call.call_id} {call.name}: {status}{code}{timing}  [decided by: {source}]",
                    file=out,
                )
                print(indent(content_text(result)), file=out)

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
                print(indent(program.rstrip(), "    | "), file=out)
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
                approval.report(out)
                status = "ERROR" if result.is_error else "ok"
                print(f"  c8 run_code: {status} ({elapsed:.0f} ms)", file=out)
                print(indent(content_text(result)), file=out)
            print_event_log(system, out)
        return 0
    finally:
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)
