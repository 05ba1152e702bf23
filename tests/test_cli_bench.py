"""``dsh-tools bench --against``: a revision named on the command line that cannot be compared
with is a usage error (exit 2) found before anything is measured; the default revision is left
out with a note when this is not a git checkout, and ``--check`` does not count it then."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from checkout_support import needs_git_checkout

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


@needs_git_checkout
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


def test_check_outside_a_git_checkout_does_not_fail_for_the_default_comparison(
    measured: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh_tools._bench_revision as revision

    monkeypatch.setattr(revision, "source_checkout", lambda: None)
    not_measured = f"the comparison with {revision.FIRST_RELEASE}: this package does not run"

    assert main(["bench", "--runs", "1", "--no-code-mode", "--check"]) == 0
    assert f"(not measured: {not_measured}" in capsys.readouterr().out

    assert main(["bench", "--runs", "1", "--no-code-mode", "--check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["skipped"].startswith(not_measured)
    assert report["bars_met"] is True


def test_check_fails_when_a_revision_the_caller_asked_for_is_not_measured(
    measured: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    import dsh_tools._bench_revision as revision
    from dsh_tools.cli import run_bench

    monkeypatch.setattr(revision, "source_checkout", lambda: None)
    out = io.StringIO()
    assert run_bench(out, as_json=True, runs=1, code_mode=False, check=True, against="v1") == 1
    assert json.loads(out.getvalue())["bars_met"] is False


def test_check_fails_when_the_default_comparison_could_be_made_but_its_measuring_failed(
    measured: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh_tools._bench_revision as revision

    def broken(checkout: Path, rev: str, *, rounds: int) -> dict[str, dict[str, float]]:
        raise RuntimeError("measuring the first release failed")

    monkeypatch.setattr(revision, "source_checkout", lambda: Path("/checkout"))
    monkeypatch.setattr(revision, "resolve", lambda checkout, rev: "f" * 40)
    monkeypatch.setattr(revision, "compare_with_revision", broken)

    assert main(["bench", "--runs", "1", "--no-code-mode", "--check"]) == 1
    failed = "measuring the first release failed"
    out = capsys.readouterr().out
    assert f"(not measured: the comparison with {revision.FIRST_RELEASE}: {failed})" in out
