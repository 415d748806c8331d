"""``Sb3VecEnv``: a Stable-Baselines3 ``VecEnv`` over a native arena batch.

SB3 steps a ``VecEnv``; a ``DummyVecEnv`` of single envs would give up the numpy core's
speed by stepping one world at a time. ``Sb3VecEnv`` instead drives one Gymnasium vector
env in ``SAME_STEP`` autoreset mode (the native batch, possibly under vector wrappers
such as :class:`~arena_envs.wrappers.FlatVectorEnv`) and speaks SB3's contract::

    venv = Sb3VecEnv.make("arena_envs/Foraging-v0", num_envs=64)   # flat encoding by default
    venv = VecMonitor(venv)                                        # VecNormalize works too
    model = PPO("MlpPolicy", venv).learn(100_000)

- ``step`` resets finished worlds in the same call; their last observation is in
  ``infos[i]["terminal_observation"]``, ``infos[i]["TimeLimit.truncated"]`` says the episode
  was cut by the time limit, and the scenario's last info (``score``, ...) is in
  ``infos[i]`` too. Worlds still running get an empty info (cheap for big batches).
- ``seed(s)`` seeds world ``i`` with ``s + i`` at the next ``reset``, exactly as a
  ``DummyVecEnv`` of single envs would.
- Actions are checked before anything moves: a wrong shape, a non-numeric dtype, NaN or
  infinity, a non-integer or out-of-range discrete choice raises ``ValueError`` naming it.
- Multi-agent batches (``team_capture_v0``) give every agent of every world its own slot,
  ``num_envs = B × A`` with slot ``b * A + a``: one policy plays every agent of both teams
  (parameter-shared self-play). A world takes the seed of its first slot; a slot's info
  is its world's.
- The batch is one object: ``get_attr``, ``set_attr`` and ``env_method`` reach the
  outermost vector env layer that has the attribute and act on the whole batch (a list
  with one entry per index comes back); ``env_is_wrapped`` looks for a vector wrapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from arena_envs.sharded import make_native_env as make_native
from arena_envs.wrappers.flatten import FlatVectorEnv, merge_agents, split_agents


def checked_actions(actions: Any, space: gym.Space, num_envs: int) -> Any:
    """``actions`` for ``num_envs`` slots of ``space`` as an array, or ``ValueError`` naming the problem."""
    if isinstance(space, gym.spaces.Dict):
        return actions  # the native decoder checks structured actions field by field
    try:
        arr = np.asarray(actions)
    except (ValueError, TypeError) as err:
        raise ValueError(f"actions are not a rectangular array: {err}") from None
    expected = (num_envs, *space.shape)
    if isinstance(space, gym.spaces.Discrete) and arr.shape == (num_envs, 1):
        arr = arr[:, 0]  # SB3 hands some discrete actions over as a column
    if arr.shape != expected:
        raise ValueError(f"actions must have shape {expected}, got {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"actions must be numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        slots = np.flatnonzero(~np.isfinite(arr).reshape(num_envs, -1).all(1)).tolist()
        raise ValueError(f"actions must be finite, got NaN or infinity in slots {slots}")
    if isinstance(space, gym.spaces.MultiDiscrete | gym.spaces.Discrete):
        if arr.dtype.kind == "f":
            if (arr != np.round(arr)).any():
                raise ValueError("discrete actions must be whole numbers")
            arr = arr.astype(np.int64)
        low = space.start if isinstance(space, gym.spaces.Discrete) else np.zeros_like(space.nvec)
        high = low + (space.n if isinstance(space, gym.spaces.Discrete) else space.nvec)
        bad = (arr < low) | (arr >= high)
        if bad.any():
            slot = int(np.flatnonzero(bad.reshape(num_envs, -1).any(1))[0])
            raise ValueError(f"discrete action out of range in slot {slot}: {arr[slot].tolist()} not within {space}")
    return arr


class Sb3VecEnv(VecEnv):
    """SB3's ``VecEnv`` contract over a Gymnasium vector env that autoresets in the same step."""

    def __init__(self, envs: VectorEnv):
        if envs.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError("Sb3VecEnv needs a vector env with autoreset_mode=SAME_STEP, got "
                             f"{envs.metadata.get('autoreset_mode')}")
        self.envs = envs
        self.agents = len(getattr(envs.unwrapped, "agents", None) or ()) or None  # per world; None: single agent
        self._actions: Any = None
        if self.agents:  # a slot is one agent: its spaces are one agent's
            flat = next((layer for layer in self._layers() if hasattr(layer, "agent_observation_space")), None)
            scenario = envs.unwrapped.scenario
            spaces = ((flat.agent_observation_space, flat.agent_action_space) if flat
                      else (scenario.observation_space, scenario.action_space))
        else:
            spaces = (envs.single_observation_space, envs.single_action_space)
        super().__init__(envs.num_envs * (self.agents or 1), *spaces)

    @classmethod
    def make(cls, env_id: str, num_envs: int, flat: bool | dict[str, Any] = True, **env_kwargs: Any) -> Sb3VecEnv:
        """The native batch of ``env_id`` (``num_envs`` worlds), flat-encoded unless ``flat`` is
        false (a dict sets the encoding)."""
        envs = make_native(env_id, num_envs, AutoresetMode.SAME_STEP, **env_kwargs)
        if flat is not False:
            envs = FlatVectorEnv(envs, **({} if flat is True else flat))
        return cls(envs)

    # -- stepping ----------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        per_world = self._seeds[::self.agents or 1]
        seeds = None if all(s is None for s in per_world) else per_world
        if any(o != self._options[0] for o in self._options):
            raise ValueError("the native batch takes one set of reset options for all envs")
        obs, info = self.envs.reset(seed=seeds, options=self._options[0] or None)
        self.reset_infos = [_info_row(info, i // (self.agents or 1)) for i in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return merge_agents(obs, self.agents)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = split_agents(checked_actions(actions, self.action_space, self.num_envs), self.agents)

    def step_wait(self) -> VecEnvStepReturn:
        obs, reward, terminated, truncated, info = self.envs.step(self._actions)
        terminated, truncated = np.ravel(terminated), np.ravel(truncated)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            world, agent = divmod(i, self.agents or 1)
            last = info["final_obs"][world]
            infos[i] = _info_row(info["final_info"], world)
            infos[i]["terminal_observation"] = _row(last, agent) if self.agents else last
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return merge_agents(obs, self.agents), np.ravel(reward).astype(np.float32), dones, infos

    def close(self) -> None:
        self.envs.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        native = self.envs.unwrapped
        return [native.frame(i // (self.agents or 1)) for i in range(self.num_envs)]

    # -- attributes of the batch -------------------------------------------------------

    def _layers(self):
        env = self.envs
        while True:
            yield env
            if not hasattr(env, "env"):
                return
            env = env.env

    def _owner(self, name: str) -> VectorEnv:
        for layer in self._layers():
            if hasattr(layer, name):
                return layer
        raise AttributeError(f"no layer of {self.envs} has an attribute {name!r}")

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self._owner(attr_name), attr_name)
        return [value] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if len(self._indices(indices)) != self.num_envs:
            raise ValueError("attributes belong to the whole native batch: set them for every index")
        try:
            owner = self._owner(attr_name)
        except AttributeError:
            owner = self.envs
        setattr(owner, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        result = getattr(self._owner(method_name), method_name)(*method_args, **method_kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        wrapped = any(isinstance(layer, wrapper_class) for layer in self._layers())
        return [wrapped] * len(self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return tree[i]


def _info_row(info: dict[str, Any], i: int) -> dict[str, Any]:
    """World ``i``'s entries of a batched info dict, as Python scalars (masks left out)."""
    row = {}
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        if isinstance(value, dict):
            row[key] = _info_row(value, i)
        else:
            item = value[i]
            row[key] = item.item() if isinstance(item, np.generic) else item
    return row
