"""Where the library's log lines go: nowhere until the application says where.

Each case runs in a fresh interpreter, since whether structlog is configured is process-wide
state (and this test process configures it for the ``logs`` fixture).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

# A harness whose post hook raises, and a Code Mode program that fails printing escape codes:
# both are logged by the library (the hook's failure as a warning with its traceback, the run's
# failure at debug level).
_HARNESS = textwrap.dedent(
    """
    from dsh_tools import ExecuteCall, ToolOutput, ToolsConfig, ToolSystem, define_tool

    def broken_hook(call, result, then):
        raise RuntimeError("the post hook broke")

    with ToolSystem.start(ToolsConfig(mode="code")) as system:
        system.tools.register(
            define_tool(
                name="echo",
                description="Echo.",
                parameters={},
                output=ToolOutput(
                    schema={"type": "string"}, render=lambda a, v: [{"type": "text", "text": v}]
                ),
                execute=lambda args, ctx: "hi",
            )
        )
        system.tools.on_post_execute(broken_hook)
        system.execute(ExecuteCall(call_id="c-hook", name="echo", arguments={}))
        system.execute(
            ExecuteCall(
                call_id="c-run",
                name="run_code",
                arguments={
                    "description": "fail loudly",
                    "code": "print('\\\\x1b[2J')\\nraise ValueError('program text ' * 10)",
                },
            )
        )
    print("harness done")
    """
)


def _run(prelude: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + _HARNESS],
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )


def test_an_application_that_configured_no_logging_sees_no_library_output() -> None:
    done = _run("")
    assert done.stdout == "harness done\n"
    assert done.stderr == ""


def test_standard_logging_receives_the_library_lines_with_fields_and_tracebacks() -> None:
    done = _run(
        """
        import logging, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")
        """
    )
    assert done.stdout == "harness done\n"
    hook_lines = [line for line in done.stderr.splitlines() if "the post hook broke" in line]
    assert hook_lines and hook_lines[0].startswith("dsh_tools.pipeline ")
    assert "call_id='c-hook'" in hook_lines[0] and "tool='echo'" in hook_lines[0]
    assert "Traceback (most recent call last)" in done.stderr
    # The failed program's text is a debug line, below the configured level.
    assert "program text" not in done.stderr


def test_debug_lines_appear_only_when_the_application_asks_for_debug() -> None:
    done = _run(
        """
        import logging, sys
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        """
    )
    assert "program text" in done.stderr
    assert "program text" not in done.stdout


def test_a_structlog_configuration_routes_every_library_line_through_it() -> None:
    done = _run(
        """
        import sys, structlog
        structlog.configure(
            processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )
        """
    )
    import json

    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    hook = [line for line in lines if "the post hook broke" in line["event"]]
    assert hook and hook[0]["call_id"] == "c-hook" and hook[0]["level"] == "warning"
    assert any("program text" in line["event"] for line in lines)
