"""The programs in examples/ run as a reader would run them and print what they promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from docs_blocks import python_blocks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_prints_what_the_readme_says() -> None:
    lines = run_example("quickstart.py").splitlines()
    assert lines[:4] == [
        "Oslo: 3.5 C",
        "['Lima: 19.0 C', 'Error: no weather service on Mars']",
        "19.0",
        "tools:sdk",
    ]
    surface = [line for line in lines[4:] if "code-dispatch" not in line]
    assert surface == [
        "tool/call c1",
        "tool/result c1",
        "tool/call c2",
        "tool/call c3",
        "tool/result c2",
        "tool/result c3",
        "tool/call c4",
        "tool/result c4",
    ]
    dispatch = [line for line in lines[4:] if "code-dispatch" in line]
    assert sorted(dispatch) == [
        "tool/code-dispatch c4:code:1",
        "tool/code-dispatch c4:code:2",
        "tool/code-dispatch-start c4:code:1",
        "tool/code-dispatch-start c4:code:2",
    ]
    # sub-call events sit between the run_code call and its result
    assert lines.index("tool/call c4") < lines.index(dispatch[0])
    assert lines.index(dispatch[-1]) < lines.index("tool/result c4")


def test_the_readme_quickstart_is_examples_quickstart_py_as_it_is() -> None:
    quickstart = (EXAMPLES / "quickstart.py").read_text()
    readme = python_blocks(EXAMPLES.parent / "README.md")
    assert any(block.source == quickstart for block in readme)


def test_agent_scopes_example_shows_per_agent_views() -> None:
    out = run_example("agent_scopes.py")
    assert "planner sees: ['read']" in out
    assert 'planner deploy  -> Error: unknown tool "deploy"' in out
    assert "coder format  -> Error: vendored code is not ours to format" in out
    assert 'coder deploy  -> Error: the user rejected tool "deploy"' in out
    assert "after close, coder sees: ['read', 'deploy']" in out


def test_actor_harness_example_runs_three_turns() -> None:
    out = run_example("actor_harness.py").splitlines()
    assert out == ["['k0=ok', 'k1=ok', 'k2=ok', 'k3=ok', 'k4=ok']"] * 3


def test_every_program_in_examples_is_run_by_a_test_here() -> None:
    run_here = set(re.findall(r'run_example\("([^"]+)"\)', Path(__file__).read_text()))
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(run_here)
