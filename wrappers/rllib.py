"""The arena scenarios as RLlib environments (Ray's new API stack), for runs beyond one machine.

    from ray.rllib.algorithms.ppo import PPOConfig
    from arena_envs.wrappers.rllib import register, team_capture_policies

    register()                                                   # on the driver; every EnvRunner re-registers
    config = (PPOConfig().environment("arena_envs/Foraging-v0", env_config={"layout": "random"})
              .env_runners(num_env_runners=2, num_envs_per_env_runner=256,
                           gym_env_vectorize_mode="vector_entry_point"))
    config = (PPOConfig().environment("arena_envs/TeamCapture-v0", env_config={"agents_per_team": 2})
              .multi_agent(**team_capture_policies(shared=True)))

| env name                      | RLlib sees                                  | inside each EnvRunner                  |
|-------------------------------|---------------------------------------------|----------------------------------------|
| ``arena_envs/Foraging-v0``    | a Gymnasium ``VectorEnv`` of                | one native numpy batch of              |
| ``arena_envs/Crafting-v0``    | ``num_envs_per_env_runner`` worlds          | ``num_envs_per_env_runner`` worlds     |
|                               | (``gym_env_vectorize_mode="vector_entry_point"``), flat-encoded |                    |
| ``arena_envs/TeamCapture-v0`` | a ``MultiAgentEnv`` per world, agents       | a native batch of one world per env    |
|                               | ``blue_agent_1..N``, ``red_agent_1..N``     | (RLlib's multi-agent runner vectorises |
|                               |                                             | ``MultiAgentEnv`` objects itself)      |

Observations and actions are the flat encoding of :mod:`arena_envs.wrappers.flatten`
(``Box`` in, ``MultiDiscrete`` out), which RLlib's default models take as they are;
``env_config`` holds the env's arguments plus, optionally, ``encoding`` (the
:class:`FlatEncoding` keywords). Vector envs autoreset in ``NEXT_STEP`` mode, what RLlib's
``SingleAgentEnvRunner`` expects.

Both record every finished episode of their worlds in ``episodes`` (return, length,
score, success; per agent in team capture), so RLlib's reported metrics can be checked
against the env's own count.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from arena_envs.wrappers.flatten import FlatVectorEnv

try:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.tune.registry import register_env
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError("arena_envs.wrappers.rllib needs Ray RLlib: pip install 'arena-envs[ray]'") from error

VECTOR_ENVS = ("arena_envs/Foraging-v0", "arena_envs/Crafting-v0")
MULTI_AGENT_ENVS = ("arena_envs/TeamCapture-v0",)


class EpisodeRecorder(VectorWrapper):
    """Keeps the return, length, score and success of every episode its batch finishes (``NEXT_STEP``)."""

    def __init__(self, env: VectorEnv):
        super().__init__(env)
        self.episodes: list[dict[str, float]] = []
        self._return = np.zeros(self.num_envs)
        self._length = np.zeros(self.num_envs, np.int64)
        self._restarting = np.zeros(self.num_envs, bool)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._return[:], self._length[:], self._restarting[:] = 0.0, 0, False
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        # a world that ended last step came back reset: this step is not part of any episode
        counted = ~self._restarting
        self._return += np.where(counted, reward, 0.0)
        self._length += counted
        done = (terminated | truncated) & counted
        for i in np.flatnonzero(done):
            self.episodes.append({"return": float(self._return[i]), "length": int(self._length[i]),
                                  "score": float(info["score"][i]), "success": float(info["success"][i])})
        self._return[done], self._length[done] = 0.0, 0
        self._restarting = done
        return obs, reward, terminated, truncated, info


def make_vector_env(env_id: str, config: dict[str, Any]) -> gym.Env | VectorEnv:
    """RLlib's env creator for a single-agent scenario: ``config["num_envs"]`` worlds as one flat
    native batch (RLlib adds ``num_envs`` in ``vector_entry_point`` mode), else a flat single env."""
    config = dict(config)
    encoding = config.pop("encoding", None) or {}
    num_envs = config.pop("num_envs", None)
    if num_envs is None:
        from arena_envs.wrappers.flatten import FlatEnv

        return FlatEnv(gym.make(env_id, **config), **encoding)
    native = gym.make_vec(env_id, num_envs=num_envs, autoreset_mode=AutoresetMode.NEXT_STEP, **config)
    return EpisodeRecorder(FlatVectorEnv(native, **encoding))


class TeamCaptureMultiAgentEnv(MultiAgentEnv):
    """One Team Capture world as an RLlib ``MultiAgentEnv``: every agent of both teams acts each tick.

    ``config`` holds ``team_capture_v0.vector_env``'s arguments (``agents_per_team``,
    ``max_cycles``, ...) and optionally ``encoding``. Rewards are the scenario's per agent
    (the change in own team score minus the other's); every agent's episode ends with the
    world's. Infos carry the world's info (``score``, ``success``, ...) for every agent.
    """

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__()
        from arena_envs import team_capture_v0

        config = dict(config or {})
        encoding = config.pop("encoding", None) or {}
        for key in ("num_envs", "worker_index", "num_workers", "remote", "vector_index"):
            config.pop(key, None)
        self.env = FlatVectorEnv(team_capture_v0.vector_env(num_envs=1, **config), **encoding)
        self.possible_agents = list(self.env.unwrapped.agents)
        self.agents = list(self.possible_agents)
        self.observation_spaces = {a: self.env.agent_observation_space for a in self.possible_agents}
        self.action_spaces = {a: self.env.agent_action_space for a in self.possible_agents}
        self.episodes: list[dict[str, Any]] = []
        self._returns = np.zeros(len(self.possible_agents))
        self._length = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self._returns[:], self._length = 0.0, 0
        return self._by_agent(obs[0]), self._infos(info)

    def step(self, action_dict: dict[str, Any]):
        missing = set(self.possible_agents) - set(action_dict)
        if missing:
            raise ValueError(f"every agent acts each tick: no action for {sorted(missing)}")
        actions = np.stack([np.asarray(action_dict[a]) for a in self.possible_agents])[None]
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self._returns += reward[0]
        self._length += 1
        done = bool(terminated[0, 0] or truncated[0, 0])
        if done:
            self.episodes.append({"returns": dict(zip(self.possible_agents, self._returns.tolist(), strict=True)),
                                  "length": self._length, "score": float(info["score"][0]),
                                  "success": float(info["success"][0])})
            self.agents = []
        ends = {a: bool(terminated[0, i]) for i, a in enumerate(self.possible_agents)}
        cuts = {a: bool(truncated[0, i]) for i, a in enumerate(self.possible_agents)}
        ends["__all__"], cuts["__all__"] = bool(terminated[0, 0]), bool(truncated[0, 0]) and not terminated[0, 0]
        rewards = {a: float(reward[0, i]) for i, a in enumerate(self.possible_agents)}
        return self._by_agent(obs[0]), rewards, ends, cuts, self._infos(info)

    def _by_agent(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {a: rows[i] for i, a in enumerate(self.possible_agents)}

    def _infos(self, info: dict[str, Any]) -> dict[str, dict[str, Any]]:
        world = {k: np.asarray(v)[0].item() for k, v in info.items() if not k.startswith("_") and k != "final_info"}
        return {a: dict(world) for a in self.possible_agents}


def team_capture_policies(shared: bool = True) -> dict[str, Any]:
    """``PPOConfig.multi_agent(**...)`` for team capture: one policy for both teams (self-play), or
    one per team (``blue``, ``red``)."""
    if shared:
        return {"policies": {"shared"}, "policy_mapping_fn": _shared}
    return {"policies": {"blue", "red"}, "policy_mapping_fn": _by_team}


def _shared(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    return "shared"


def _by_team(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    return agent_id.split("_")[0]


def register() -> None:
    """Register every arena scenario with Ray Tune's env registry under its Gymnasium id."""
    for env_id in VECTOR_ENVS:
        register_env(env_id, _vector_creator(env_id))
    for env_id in MULTI_AGENT_ENVS:
        register_env(env_id, TeamCaptureMultiAgentEnv)


def _vector_creator(env_id: str):
    def create(config: dict[str, Any]):
        return make_vector_env(env_id, {k: v for k, v in dict(config).items()})

    return create
