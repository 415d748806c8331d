"""Regenerate the frames and GIFs of the README and the docs: ``python docs/make_frames.py``.

Writes ``docs/foraging.png`` and ``docs/team_capture.png`` (the README's frames) and
``docs/_static/{foraging,crafting,team_capture}.gif`` (each environment's page). Each is a
seeded episode played by the scripted baselines: the forager on its way through the field,
the crafter working up its recipe chain, and in team capture three a side, two of each
team taking the corner points while the third ones race for the centre.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
from PIL import Image

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.render import save_gif
from arena_envs.scripted import ScriptedCaptureTeam, ScriptedCrafter, ScriptedForager
from arena_envs.team_capture import join_teams, split_teams

HERE = Path(__file__).parent


def foraging_frames(seed: int = 1) -> Iterator[np.ndarray]:
    env = gym.make("arena_envs/Foraging-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=seed)
    forager = ScriptedForager(env.unwrapped.scenario.params)
    while True:
        yield env.render()
        obs, _, terminated, truncated, _ = env.step(forager.act(obs))
        if terminated or truncated:
            yield env.render()
            return


def crafting_frames(seed: int = 0) -> Iterator[np.ndarray]:
    envs = gym.make_vec("arena_envs/Crafting-v0", num_envs=1, render_mode="rgb_array")
    crafter = ScriptedCrafter(envs.unwrapped.scenario.params)
    obs, _ = envs.reset(seed=seed)
    while True:
        yield envs.render()
        obs, _, terminated, truncated, _ = envs.step(crafter.act(obs))
        if terminated[0] or truncated[0]:
            return


def team_capture_frames(seed: int = 3) -> Iterator[np.ndarray]:
    envs = team_capture_v0.vector_env(num_envs=1, agents_per_team=3, render_mode="rgb_array")
    params = envs.scenario.params
    blue, red = ScriptedCaptureTeam(params), ScriptedCaptureTeam(params)
    obs, _ = envs.reset(seed=seed)
    while True:
        yield envs.render()
        blue_obs, red_obs = split_teams(obs, params.agents_per_team)
        obs, _, terminated, truncated, _ = envs.step(join_teams(blue.act(blue_obs), red.act(red_obs)))
        if np.any(terminated) or np.any(truncated):
            return


def frame_at(frames: Iterator[np.ndarray], tick: int) -> np.ndarray:
    for i, frame in enumerate(frames):
        if i == tick:
            return frame
    return frame


def gif(frames: Iterator[np.ndarray], path: Path, every: int, limit: int) -> None:
    """Every ``every``-th tick up to ``limit`` ticks, at 10 frames a second."""
    kept = [frame for i, frame in enumerate(frames) if i % every == 0 and i <= limit]
    save_gif(kept, path, fps=10)
    print(f"wrote {path} ({len(kept)} frames, {path.stat().st_size // 1024} KB)")


GIFS: dict[str, tuple[Callable[[], Iterator[np.ndarray]], int, int]] = {
    "foraging": (foraging_frames, 4, 600),
    "crafting": (crafting_frames, 6, 900),
    "team_capture": (team_capture_frames, 6, 700),
}


def main() -> None:
    foraging, team_capture = frame_at(foraging_frames(), 120), frame_at(team_capture_frames(), 45)
    (HERE / "images").mkdir(exist_ok=True)
    for path, frame in ((HERE / "foraging.png", foraging), (HERE / "team_capture.png", team_capture),
                        (HERE / "images" / "foraging_frame.png", foraging)):  # the last: the rendering guide's
        Image.fromarray(frame).save(path, optimize=True)
        print(f"wrote {path}")
    (HERE / "_static").mkdir(exist_ok=True)
    for name, (frames, every, limit) in GIFS.items():
        gif(frames(), HERE / "_static" / f"{name}.gif", every, limit)


if __name__ == "__main__":
    main()
