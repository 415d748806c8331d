"""What recording costs, for ``arena-bench --only recording``: the size of a recorded 600-tick
episode (JSON Lines, and gzipped) and the steps/s of a vector env with and without
:class:`~arena_envs.wrappers.record.RecordEpisodes` (rows measured one after the other in the same run)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from arena_envs import team_capture_v0
from arena_envs.wrappers.record import EPISODES_FILE, RecordEpisodes, read_episodes

ACTION_POOL = 16
TICKS = 600


def episode_bytes(make_env, compress: bool) -> float:
    """Bytes of a recorded episode of ``TICKS`` ticks of random play (those that ended sooner,
    say when the forager died, count in proportion to their length)."""
    with tempfile.TemporaryDirectory() as directory:
        envs = RecordEpisodes(make_env(), directory, compress=compress)
        envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(TICKS):
            envs.step(envs.action_space.sample())
        envs.close()
        path = Path(directory) / (EPISODES_FILE + (".gz" if compress else ""))
        ticks = sum(e["summary"]["length"] for e in read_episodes(path))
        return path.stat().st_size / ticks * TICKS


def recording_rows(seconds: float, rate_of: Callable[[Callable[[int], Any], int, float], float],
                   num_envs: int = 64) -> list[tuple[str, float, str]]:
    """The rows; ``rate_of(step, units_per_step, seconds)`` is arena-bench's timer."""
    makers = {"Foraging": lambda: gym.make_vec("arena_envs/Foraging-v0", num_envs=4, max_ticks=TICKS),
              "Team capture 2v2": lambda: team_capture_v0.vector_env(num_envs=4, max_cycles=TICKS)}
    rows = [(f"Recording: {name} {TICKS}-tick episode{', gzip' if gz else ''}", episode_bytes(make, gz), "bytes")
            for name, make in makers.items() for gz in (False, True)]
    with tempfile.TemporaryDirectory() as directory:
        for label, record in (("off", False), ("on", True)):
            envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=num_envs)
            if record:
                envs = RecordEpisodes(envs, directory)
            envs.reset(seed=0)
            envs.action_space.seed(0)
            pool = [envs.action_space.sample() for _ in range(ACTION_POOL)]
            rate = rate_of(lambda i, envs=envs, pool=pool: envs.step(pool[i % ACTION_POOL]), num_envs, seconds)
            envs.close()
            rows.append((f"Foraging native batch B={num_envs}, RecordEpisodes {label}", rate, "env-steps/s"))
    return rows
