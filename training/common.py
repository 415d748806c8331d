"""What ``arena-train`` and ``arena-eval`` share: configs, training envs, agents and episodes.

A config is one YAML file per scenario under ``training/configs/`` (``foraging.yaml``
for ``arena_envs/Foraging-v0``, ``team_capture.yaml`` for ``team_capture_v0``): the env's
arguments, the flat encoding, the PPO hyperparameters and the run's defaults. A run
directory holds the resolved ``config.yaml`` next to the model, so evaluation rebuilds
exactly the encoding the model was trained with.

Agents (:class:`RandomAgent`, :class:`ScriptedAgent`, :class:`ModelAgent`) map a batch of
raw observations to a batch of structured actions; in team capture they play one team,
arrays ``(B, agents_per_team, ...)``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

import arena_envs  # noqa: F401  (registers the envs)
from arena_envs.envs import SCENARIOS, registered_id
from arena_envs.wrappers.flatten import FlatEncoding, FlatEnv, merge_agents, split_agents
from arena_envs.wrappers.sb3 import Sb3VecEnv, make_native

CONFIG_DIR = Path(__file__).parent / "configs"


def full_env_id(name: str) -> str:
    """``Foraging-v0`` or ``arena_envs/Foraging-v0`` -> ``arena_envs/Foraging-v0``."""
    return name if "/" in name else f"arena_envs/{name}"


def scenario_name(env_id: str) -> str:
    """``arena_envs/Foraging-v0`` -> ``foraging``, ``team_capture_v0`` -> ``team_capture``: the config's name."""
    return re.sub(r"[-_]v\d+$", "", env_id.split("/")[-1]).lower()


def is_team(env_id: str) -> bool:
    """Whether ``env_id`` is a two-team scenario (agents play in teams, one policy for all)."""
    scenario = gym.spec(registered_id(env_id)).kwargs.get("scenario")
    return scenario in SCENARIOS and SCENARIOS[scenario].multi_agent


def load_config(env: str, path: str | Path | None = None) -> dict[str, Any]:
    """The scenario's training config (or the YAML at ``path``), with ``env_id`` filled in."""
    env_id = full_env_id(env)
    path = Path(path) if path else CONFIG_DIR / f"{scenario_name(env_id)}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"no training config {path} for {env_id} (configs exist for {known})")
    config = yaml.safe_load(path.read_text())
    config["env_id"] = env_id
    return config


def run_directory(model_path: str | Path) -> Path:
    """The ``arena-train`` run directory of a model: the folder holding its ``config.yaml``, the
    model's own folder or, for ``checkpoints/ppo_<steps>_steps.zip``, the one above it."""
    model_path = Path(model_path)
    for folder in (model_path, model_path.parent, model_path.parent.parent):
        if (folder / "config.yaml").exists():
            return folder
    raise FileNotFoundError(f"no config.yaml beside {model_path}: was it written by arena-train?")


def run_config(model_path: str | Path) -> dict[str, Any]:
    """The ``config.yaml`` saved by ``arena-train`` with a model (see :func:`run_directory`)."""
    return yaml.safe_load((run_directory(model_path) / "config.yaml").read_text())


# -- training envs ---------------------------------------------------------------------


def make_vec_env(config: dict[str, Any], n_envs: int, vec: str = "native") -> VecEnv:
    """SB3 envs for training: the native batch behind :class:`Sb3VecEnv` or, to compare,
    a ``DummyVecEnv`` of single envs under the same flat encoding."""
    env_id, env_kwargs, encoding = config["env_id"], config.get("env_kwargs", {}), config.get("encoding", {})
    if vec == "native":
        return Sb3VecEnv.make(env_id, n_envs, flat=encoding, **env_kwargs)
    if vec == "dummy" and not is_team(env_id):
        return DummyVecEnv([lambda: FlatEnv(gym.make(env_id, **env_kwargs), **encoding) for _ in range(n_envs)])
    raise ValueError(f"vec must be 'native' or (for single-agent envs) 'dummy', got {vec!r}")


class VecEnvTimer(VecEnvWrapper):
    """Adds up the wall time spent inside the envs (reset and step), to report its share."""

    def __init__(self, venv: VecEnv):
        super().__init__(venv)
        self.seconds = 0.0

    def reset(self):
        start = time.perf_counter()
        obs = self.venv.reset()
        self.seconds += time.perf_counter() - start
        return obs

    def step_wait(self):
        start = time.perf_counter()
        result = self.venv.step_wait()
        self.seconds += time.perf_counter() - start
        return result


# -- agents ----------------------------------------------------------------------------


class RandomAgent:
    """Uniform samples of the structured action space, one per agent observed."""

    def __init__(self, envs: gym.vector.VectorEnv, seed: int = 0):
        self.space = envs.unwrapped.scenario.action_space  # one agent's
        self.seed = seed
        self.spaces: dict[tuple[int, ...], gym.Space] = {}

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        shape = obs["agent"].shape[:-1]  # (B,) or, for a team, (B, N)
        if shape not in self.spaces:
            space = self.space
            for n in reversed(shape):
                space = batch_space(space, n)
            space.seed(self.seed)
            self.spaces[shape] = space
        return self.spaces[shape].sample()


class ScriptedAgent:
    """The scenario's hand-written baseline (``arena_envs.scripted``)."""

    def __init__(self, envs: gym.vector.VectorEnv, env_id: str):
        if scenario_name(env_id) not in SCRIPTED:
            raise ValueError(f"no scripted baseline for {env_id}")
        self.policy = SCRIPTED[scenario_name(env_id)](envs.unwrapped.scenario.params)

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        return self.policy.act(obs)


class ModelAgent:
    """A trained SB3 model acting through the flat encoding it was trained with."""

    def __init__(self, model, encoding: FlatEncoding, deterministic: bool = True):
        self.model, self.encoding, self.deterministic = model, encoding, deterministic

    @classmethod
    def load(cls, path: str | Path, envs: gym.vector.VectorEnv, deterministic: bool = True) -> ModelAgent:
        from stable_baselines3 import PPO

        config = run_config(path)
        encoding = FlatEncoding.for_env(envs, **config.get("encoding", {}))
        return cls(PPO.load(path, device="cpu"), encoding, deterministic)

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        agents = obs["agent"].shape[1] if obs["agent"].ndim == 3 else None  # a team: one row per agent
        rows = merge_agents(obs, agents)
        flat, _ = self.model.predict(self.encoding.observe(rows), deterministic=self.deterministic)
        return split_agents(self.encoding.decode(flat, rows), agents)


def _scripted(name: str) -> Callable[[Any], Any]:
    def make(params):
        import arena_envs.scripted

        return getattr(arena_envs.scripted, name)(params)

    return make


SCRIPTED: dict[str, Callable[[Any], Any]] = {"foraging": _scripted("ScriptedForager"),
                                             "crafting": _scripted("ScriptedCrafter"),
                                             "team_capture": _scripted("ScriptedCaptureTeam")}


def agent_factory(name: str, env_id: str, seed: int = 0, deterministic: bool = True) -> Callable[[Any], Any]:
    """A function of the envs making the agent ``name``: ``random``, ``scripted`` or a model's path."""
    if name == "random":
        return lambda envs: RandomAgent(envs, seed)
    if name == "scripted":
        return lambda envs: ScriptedAgent(envs, env_id)
    return lambda envs: ModelAgent.load(name, envs, deterministic)


# -- episodes --------------------------------------------------------------------------


def success(info: dict[str, Any]) -> np.ndarray:
    """Whether each world's episode reached its scenario's goal: every scenario reports it in its info."""
    return np.asarray(info["success"], bool)


def policy(envs: gym.vector.VectorEnv, env_id: str, make_agent: Callable[[Any], Any],
           make_opponent: Callable[[Any], Any] | None = None) -> Callable[[dict], dict]:
    """The batch's actions from its observations: the agent's, or in team capture the agent's
    for blue and the opponent's for red."""
    agent = make_agent(envs)
    if not is_team(env_id):
        return agent.act
    from arena_envs.team_capture import join_teams, split_teams

    team, opponent = envs.unwrapped.scenario.agents_per_team, make_opponent(envs)

    def act(obs):
        blue, red = split_teams(obs, team)
        return join_teams(agent.act(blue), opponent.act(red))

    return act


def play(make_agent: Callable[[gym.vector.VectorEnv], Any], env_id: str, episodes: int, seed: int,
         env_kwargs: dict[str, Any] | None = None,
         make_opponent: Callable[[gym.vector.VectorEnv], Any] | None = None,
         record: str | Path | None = None, label: str | None = None) -> dict[str, np.ndarray]:
    """One episode in each of ``episodes`` worlds of a native batch, seeded ``seed``, ``seed + 1``, ...

    In team capture the agent plays blue and ``make_opponent``'s agent red. Returns
    per-episode arrays: return (blue's in team capture: its score minus red's), score
    (blue's), success (a win), length. With ``record`` (a directory) every episode is also
    written there for ``arena-view`` (:class:`~arena_envs.wrappers.record.RecordEpisodes`),
    named ``label``.
    """
    envs = make_native(env_id, episodes, AutoresetMode.NEXT_STEP, **(env_kwargs or {}))
    if record is not None:
        from arena_envs.wrappers.record import RecordEpisodes

        envs = RecordEpisodes(envs, record, source="arena-eval", label=label)
    act = policy(envs, env_id, make_agent, make_opponent)
    team = envs.unwrapped.scenario.agents_per_team if is_team(env_id) else None
    obs, _ = envs.reset(seed=seed)
    result = {"return": np.zeros(episodes), "score": np.zeros(episodes), "success": np.zeros(episodes),
              "length": np.zeros(episodes)}
    running = np.ones(episodes, bool)
    while running.any():
        obs, reward, terminated, truncated, info = envs.step(act(obs))
        result["return"] += (reward[:, 0] if team else reward) * running
        result["length"] += running
        done = running & ((terminated | truncated)[:, 0] if team else terminated | truncated)
        if done.any():  # autoreset on the next step: this step's info is the episode's last
            result["score"][done] = info["score"][done]
            result["success"][done] = info["success"][done]
            running &= ~done
    envs.close()
    return result
