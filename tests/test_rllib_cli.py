"""``python -m arena_envs.training.rllib_ppo`` for real, at the smallest scale: one PPO iteration on a
local Ray instance, from 2 worlds per EnvRunner and 8-tick episodes.

Ray's start-up is most of each test's time (20-40 s on a busy 2-core machine).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import commands

from arena_envs.training.rllib_ppo import main

pytestmark = pytest.mark.timeout(300)

SMALL = ["--iterations", "1", "--env-runners", "1", "--envs-per-runner", "2", "--train-batch", "32"]


def iteration_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_main_trains_one_iteration_and_prints_it_as_json(tmp_path, capsys):
    # two EnvRunners (the default, as in the README's command): RLlib sums their episode counts
    # into numpy integers, which the JSON line once failed on; 32 steps of 2 runners x 2 worlds
    # are 8 ticks per world, one 8-tick episode each
    status = main(["Foraging-v0", *SMALL, "--env-runners", "2", "--env-config", '{"max_ticks": 8}',
                   "--out", str(tmp_path / "ckpt")])
    out = capsys.readouterr().out
    assert status == 0
    [row] = iteration_lines(out)  # printed as JSON: numpy numbers in RLlib's results included
    assert row["iteration"] == 1 and row["env_steps"] >= 32
    assert row["episodes"] == 4 and row["episode_len_mean"] == 8 and isinstance(row["episodes"], int)
    assert 0 <= row["score_mean"] <= 100  # the env's own score, from the driver's env
    assert "checkpoint:" in out and any((tmp_path / "ckpt").iterdir())


def test_the_docs_python_dash_m_command_runs(tmp_path):
    """docs/guide/names-and-cli.md's command as a subprocess, made smaller by later flags; the
    driver samples itself (--env-runners 0): no actor to start."""
    [command] = [argv for argv in commands("guide/names-and-cli.md") if argv[:2] == ["python", "-m"]]
    argv = [sys.executable, *command[1:], *SMALL, "--env-runners", "0", "--env-config", '{"max_ticks": 8}']
    done = subprocess.run(argv, capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = iteration_lines(done.stdout)
    assert row["iteration"] == 1 and row["episodes"] == 4 and 0 <= row["score_mean"] <= 100
    assert "Traceback" not in done.stderr
