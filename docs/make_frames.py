"""Regenerate the README's frames: ``python docs/make_frames.py`` writes docs/*.png and
docs/images/foraging_frame.png (the Foraging frame with its legend strip, for the rendering guide).

Each frame is a seeded episode played by the scripted baselines, caught mid-way so that
something is happening: the forager on its way to the next resource, and in team capture
three a side: two of each team taking the corner points, the third ones racing for
the centre.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from PIL import Image

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.scripted import ScriptedCaptureTeam, ScriptedForager
from arena_envs.team_capture import join_teams, split_teams

HERE = Path(__file__).parent


def foraging_frame(seed: int = 1, ticks: int = 120) -> np.ndarray:
    env = gym.make("arena_envs/Foraging-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=seed)
    forager = ScriptedForager(env.unwrapped.scenario.params)
    for _ in range(ticks):
        obs, *_ = env.step(forager.act(obs))
    return env.render()


def team_capture_frame(seed: int = 3, ticks: int = 45) -> np.ndarray:
    envs = team_capture_v0.vector_env(num_envs=1, agents_per_team=3, render_mode="rgb_array")
    params = envs.scenario.params
    blue, red = ScriptedCaptureTeam(params), ScriptedCaptureTeam(params)
    obs, _ = envs.reset(seed=seed)
    for _ in range(ticks):
        blue_obs, red_obs = split_teams(obs, params.agents_per_team)
        obs, *_ = envs.step(join_teams(blue.act(blue_obs), red.act(red_obs)))
    return envs.render()


def main() -> None:
    foraging = foraging_frame()
    (HERE / "images").mkdir(exist_ok=True)
    for path, frame in ((HERE / "foraging.png", foraging), (HERE / "team_capture.png", team_capture_frame()),
                        (HERE / "images" / "foraging_frame.png", foraging)):
        Image.fromarray(frame).save(path, optimize=True)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
