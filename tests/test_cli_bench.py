"""``dsh-tools bench --against``: a revision named on the command line that cannot be compared
with is a usage error (exit 2) found before anything is measured; the default revision is left
out with a note when this is not a git checkout."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_tools.cli import main


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The measuring steps that ran (each stands in for minutes of real measuring)."""
    import dsh_tools._bench as bench

    ran: list[str] = []

    def pipeline(runs: int, progress: Any) -> dict[str, float]:
        ran.append("pipeline")
        return {"execute_no_hooks_us": 30.0}

    def pool(runs: int, progress: Any) -> dict[str, float]:
        ran.append("pool")
        return {"pool10_sleep5ms_async_ratio": 1.0}

    monkeypatch.setattr(bench, "measure_pipeline", pipeline)
    monkeypatch.setattr(bench, "measure_pool", pool)
    return ran


def test_a_named_revision_git_cannot_find_fails_at_once_with_exit_2(
    measured: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["bench", "--runs", "1", "--no-code-mode", "--against", "no-such-revision"])

    assert status == 2
    assert measured == []
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("dsh-tools bench: --against no-such-revision: ")
    assert "git cannot find 'no-such-revision'" in captured.err


def test_outside_a_git_checkout_only_the_default_revision_is_left_out_with_a_note(
    measured: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh_tools._bench_revision as revision

    monkeypatch.setattr(revision, "source_checkout", lambda: None)

    assert main(["bench", "--runs", "1", "--no-code-mode"]) == 0
    assert measured == ["pipeline", "pool"]
    out = capsys.readouterr().out
    assert f"(not measured: the comparison with {revision.FIRST_RELEASE}: this package" in out

    measured.clear()
    assert main(["bench", "--runs", "1", "--no-code-mode", "--against", "HEAD"]) == 2
    assert measured == []
    assert "--against HEAD: this package does not run from a git checkout" in (
        capsys.readouterr().err
    )
