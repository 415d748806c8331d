"""Recordings to look at: what the docs site embeds and the browser tests load.

    python -m arena_envs.viewer.demo runs/demo          # record into runs/demo, then: arena-view runs/demo

Four recordings, each in its own folder: a scripted Foraging rollout (``RecordEpisodes`` on a
Gymnasium env), a 3 v 3 Team Capture match of scripted teams (on a vector env), two Treasure
Hunt episodes of the scripted chat agent beside their transcripts, and a Team Capture match with
a chat agent on each side (``arena-agent --record``: one episode per chat agent).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.scripted import ScriptedCaptureTeam, ScriptedForager
from arena_envs.team_capture import join_teams, split_teams
from arena_envs.wrappers.record import RecordEpisodes


def record_foraging(directory: Path, seed: int = 1) -> None:
    env = RecordEpisodes(gym.make("arena_envs/Foraging-v0"), directory)
    obs, _ = env.reset(seed=seed)
    forager, done = ScriptedForager(env.unwrapped.scenario.params), False
    while not done:
        obs, _, terminated, truncated, _ = env.step(forager.act(obs))
        done = terminated or truncated
    env.close()


def record_team_capture(directory: Path, ticks: int = 200) -> None:
    envs = RecordEpisodes(team_capture_v0.vector_env(num_envs=1, agents_per_team=3, max_cycles=ticks), directory)
    params = envs.unwrapped.scenario.params
    blue, red = ScriptedCaptureTeam(params), ScriptedCaptureTeam(params)
    obs, _ = envs.reset(seed=3)
    for _ in range(ticks):
        blue_obs, red_obs = split_teams(obs, params.agents_per_team)
        obs, *_ = envs.step(join_teams(blue.act(blue_obs), red.act(red_obs)))
    envs.close()


def record_chat(directory: Path, *arguments: str) -> None:
    """``arena-agent --agent scripted ... --record directory`` (its results in ``directory`` too)."""
    from arena_envs.llm.cli import main as arena_agent

    arena_agent([*arguments, "--agent", "scripted", "--out", str(directory), "--record", str(directory), "--quiet"])


def record_demo(root: str | Path) -> Path:
    """The four recordings of the module docstring, under ``root``."""
    root = Path(root)
    record_foraging(root / "foraging")
    record_team_capture(root / "team")
    record_chat(root / "hunt", "arena_envs/TreasureHunt-v0", "--episodes", "2")
    record_chat(root / "team_chat", "arena_envs/TeamCapture-v0", "--episodes", "1", "--max-turns", "40",
                "--chat-agents", "blue_agent_1,red_agent_1")
    return root


if __name__ == "__main__":
    print(f"recorded into {record_demo(sys.argv[1] if len(sys.argv) > 1 else 'runs/demo')}")
