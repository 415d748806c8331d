"""``team_capture_v0``: Team Capture as PettingZoo environments, PettingZoo's module conventions.

    from arena_envs import team_capture_v0

    env = team_capture_v0.parallel_env(agents_per_team=2, max_cycles=1200)  # ParallelEnv
    aec = team_capture_v0.env()                                              # AEC form
    envs = team_capture_v0.vector_env(num_envs=1024)                         # arrays (B, agents, ...)

``parallel_env`` is the native form; ``raw_env`` is its AEC conversion by PettingZoo's own
``parallel_to_aec_wrapper`` and ``env`` the same with PettingZoo's order enforcement
(``pettingzoo.utils.parallel_to_aec``). ``vector_env`` steps many worlds and all their
agents in the same array operations: what self-play training uses. All share one core,
so they agree step for step (world ``i`` of ``vector_env`` reset with seed ``s`` plays
exactly like ``parallel_env`` reset with seed ``s + i``). Each takes
``render_mode="rgb_array"`` (the vector env tiles its first four worlds). The rules, spaces
and arguments are documented in :mod:`arena_envs.team_capture`.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.conversions import parallel_to_aec, parallel_to_aec_wrapper

from arena_envs.team_capture import TeamCaptureParallelEnv, TeamCaptureVectorEnv

__all__ = ["env", "parallel_env", "raw_env", "vector_env"]


def parallel_env(**kwargs: Any) -> TeamCaptureParallelEnv:
    """The PettingZoo ``ParallelEnv``: ``agents_per_team``, ``max_cycles`` and every rule as keywords."""
    return TeamCaptureParallelEnv(**kwargs)


def raw_env(**kwargs: Any) -> AECEnv:
    """The AEC form without wrappers (PettingZoo's ``parallel_to_aec_wrapper``)."""
    return parallel_to_aec_wrapper(parallel_env(**kwargs))


def env(**kwargs: Any) -> AECEnv:
    """The AEC form as PettingZoo builds it from a parallel env (with order enforcement)."""
    return parallel_to_aec(parallel_env(**kwargs))


def vector_env(num_envs: int = 1, **kwargs: Any) -> TeamCaptureVectorEnv:
    """``num_envs`` worlds as one batched multi-agent env: arrays (B, agents, ...)."""
    return TeamCaptureVectorEnv(num_envs, **kwargs)
