"""The scripts in ``benchmarks/`` as a user runs them, before installing what they compare with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_monty_comparison_without_the_bench_extra_names_it_in_one_line_and_exits_2() -> None:
    # Monty is hidden from the import system, whether or not it is installed here.
    script = (
        "import runpy, sys\n"
        "sys.modules['pydantic_monty'] = None\n"
        "sys.argv = ['bench_monty_comparison.py', '--runs', '1', '--rounds', '1']\n"
        "runpy.run_path('benchmarks/bench_monty_comparison.py', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "bench_monty_comparison.py: Monty (pydantic-monty) is not installed; install the bench "
        "extra: pip install -e '.[bench]'"
    ]
