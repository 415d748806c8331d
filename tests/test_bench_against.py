"""``arena-bench --against REV``: the same sections on this checkout and on a git worktree of REV, in one run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from arena_envs import bench

ROOT = Path(__file__).resolve().parents[1]


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout


def test_each_row_is_measured_on_both_trees_with_its_ratio(capsys):
    """As docs/speed.md runs it for the serve rows (arena-bench --only serve --against HEAD~1), on the
    cheap foraging section at --seconds 0 against HEAD."""
    before = worktrees()
    rows = bench.run(["--only", "foraging", "--seconds", "0", "--against", "HEAD"])
    out = capsys.readouterr().out
    names = [name for name, _, _ in rows]
    ours = [name for name in names if not name.endswith(" @HEAD")]
    assert "Foraging native batch B=4096" in ours and len(names) == 2 * len(ours)
    for name in ours:
        assert f"{name} @HEAD" in names
        assert f"{name} / {name} @HEAD: " in out  # the ratio of each row to the base's
    assert all(rate > 0 for _, rate, _ in rows)
    assert worktrees() == before  # the base's worktree is gone


def test_a_revision_git_does_not_know_is_one_clear_line():
    with pytest.raises(SystemExit, match="--against no-such-rev: .*no-such-rev"):
        bench.run(["--only", "foraging", "--seconds", "0", "--against", "no-such-rev"])
