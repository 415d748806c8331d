"""Every command and snippet of docs/guide/names-and-cli.md, run through its real entry point at small
scale: the flags appended to each command only make it smaller (later flags win), never different.
The RLlib command runs in tests/test_rllib_cli.py (it starts Ray)."""

from __future__ import annotations

import pytest
from cli_helpers import blocks, commands

from arena_envs import cli

PAGE = "guide/names-and-cli.md"
COMMANDS = {"arena-train": cli.arena_train, "arena-eval": cli.arena_eval, "arena-agent": cli.arena_agent,
            "arena-bench": cli.arena_bench}


def smaller(argv: list[str], out: str) -> list[str]:
    """The flags that make ``argv`` a run of a few seconds."""
    if argv[0] == "arena-train":
        if "--list" in argv:
            return []
        return ["--total-timesteps", "64", "--num-envs", "2", "--num-steps", "16", "--set", "ppo.batch_size=32",
                "--set", "eval_every=0", "--set", "env_kwargs.max_ticks=20", "--no-progress", "--out", out]
    if argv[0] == "arena-eval":
        return ["--episodes", "1", "--env-arg", "max_ticks=20", "--out", out]
    if argv[0] == "arena-agent":
        return ["--episodes", "1", "--quiet", "--out", out]
    return ["--seconds", "0.01"]  # arena-bench


DOC_COMMANDS = [argv for argv in commands(PAGE) if argv[0] in COMMANDS]


def test_the_page_shows_every_command_and_the_rllib_one():
    assert {argv[0] for argv in DOC_COMMANDS} == set(COMMANDS)
    assert [argv[:3] for argv in commands(PAGE) if argv[0] not in COMMANDS] == [
        ["python", "-m", "arena_envs.training.rllib_ppo"]]


@pytest.mark.parametrize("argv", DOC_COMMANDS, ids=[" ".join(argv) for argv in DOC_COMMANDS])
def test_each_command_of_the_page_runs(argv, tmp_path, capsys):
    status = COMMANDS[argv[0]]([*argv[1:], *smaller(argv, str(tmp_path / "out"))])
    assert status == 0, capsys.readouterr().err


def test_the_python_snippets_run():
    team, sb3 = blocks(PAGE, "python")
    exec(team, {})
    # the SB3 snippet at small scale: 4 worlds, one rollout of 128 steps each
    small = sb3
    for big, tiny in (("num_envs=64", "num_envs=4"), ("batch_size=2048", "batch_size=256"),
                      (".learn(3_000_000)", ".learn(512)")):
        assert big in small
        small = small.replace(big, tiny)
    namespace: dict = {}
    exec(small, namespace)
    import torch

    assert torch.get_num_threads() == 1 and namespace["model"].num_timesteps == 512
