"""``mme bench overhead --baseline REV``: its setup, without running the benchmark."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mme.bench_baseline import REPO, BaselineError, resolve_revision, worktree_at


def test_a_revision_that_names_no_commit_is_a_clear_error_with_status_2() -> None:
    done = subprocess.run([sys.executable, "-m", "mme", "bench", "overhead",
                           "--baseline", "no-such-revision-h7"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--baseline 'no-such-revision-h7' is not a commit" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_revision_is_resolved_to_its_commit() -> None:
    assert len(resolve_revision("HEAD")) == 40
    with pytest.raises(BaselineError, match="git log --oneline"):
        resolve_revision("HEAD:not-a-commit")  # a path in a tree, not a commit


def test_the_worktree_is_removed_on_any_exit() -> None:
    def listed() -> str:
        return subprocess.run(["git", "-C", str(REPO), "worktree", "list"],
                              capture_output=True, text=True, check=True).stdout

    with pytest.raises(KeyboardInterrupt), worktree_at(resolve_revision("HEAD")) as tree:
        assert (tree / "mme" / "bench_overhead.py").is_file()
        assert str(tree) in listed()
        raise KeyboardInterrupt  # as Ctrl-C would, mid-benchmark
    assert not tree.exists()
    assert str(tree) not in listed()
