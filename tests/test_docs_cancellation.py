"""Every python block of docs/cancellation.md runs as written, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "cancellation.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)


def test_the_document_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block {i}" for i in range(len(BLOCKS))])
def test_a_python_block_runs(block: str) -> None:
    done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
