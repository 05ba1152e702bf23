"""Skip markers for the tests of ``dsh-tools bench --against``, which need the source they test
to be a git checkout: a copy made by ``git archive`` (or an sdist) has no history to compare
with, and a shallow clone may lack the first release."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_tools._bench_revision import FIRST_RELEASE, resolve, source_checkout

REPO = Path(__file__).resolve().parents[1]


def _not_a_checkout() -> str | None:
    """Why the tree the tests run from is not a git checkout git can read, or None."""
    if not (REPO / ".git").exists():
        return f"{REPO} is not a git checkout (a git archive or sdist copy has no history)"
    if source_checkout() != REPO:
        return f"dsh_tools is not imported from the git checkout {REPO}"
    try:
        resolve(REPO, "HEAD")
    except RuntimeError as exc:
        return f"git cannot read the checkout {REPO}: {exc}"
    return None


def _no_first_release() -> str | None:
    """Why the checkout cannot be compared with the first release, or None."""
    problem = _not_a_checkout()
    if problem is not None:
        return problem
    try:
        resolve(REPO, FIRST_RELEASE)
    except RuntimeError:
        return f"the history of {REPO} lacks the first release {FIRST_RELEASE} (a shallow clone)"
    return None


_CHECKOUT_PROBLEM = _not_a_checkout()
_FIRST_RELEASE_PROBLEM = _no_first_release()

needs_git_checkout = pytest.mark.skipif(
    _CHECKOUT_PROBLEM is not None, reason=f"needs a git checkout: {_CHECKOUT_PROBLEM}"
)
"""For a test that asks git about the checkout (a revision it cannot find, its worktrees)."""

needs_first_release = pytest.mark.skipif(
    _FIRST_RELEASE_PROBLEM is not None,
    reason=f"needs a git checkout holding the first release: {_FIRST_RELEASE_PROBLEM}",
)
"""For a test that measures this checkout against the first release."""
