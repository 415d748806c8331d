"""Gymnasium adapters over a scenario: a single env (a batch of one) and the native vector env.

Both read and write the same :class:`~arena_envs.world.WorldState` arrays through the
scenario's pure functions, so their semantics cannot drift apart. Randomness is per
world: world ``i`` of a batch reset with seed ``s`` draws from the generator a single env
would make from seed ``s + i``, which makes every batch invariant to its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from arena_envs.actions import decode_actions
from arena_envs.world import ToolActions, WorldParams, WorldState


class Scenario(Protocol):
    """What an env needs from a scenario: spaces and pure functions over batched state."""

    params: WorldParams
    observation_space: spaces.Dict  # one agent's
    action_space: spaces.Dict  # one agent's

    def init_state(self, batch: int) -> WorldState: ...

    def reset(self, state: WorldState, index: np.ndarray, rngs: Sequence[np.random.Generator]) -> None: ...

    def step(self, state: WorldState, actions: ToolActions,
             active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def observe(self, state: WorldState) -> dict[str, np.ndarray]: ...

    def info(self, state: WorldState) -> dict[str, np.ndarray]: ...


def step_subset(step, state: WorldState, actions: ToolActions, active: np.ndarray | None):
    """Run ``step`` on the worlds where ``active`` is true and leave the others untouched.

    Rewards of inactive worlds are 0 and their episodes do not end.
    """
    if active is None or active.all():
        return step(state, actions)
    index = np.flatnonzero(active)
    part = state.take(index)
    result = step(part, actions.take(index))
    state.put(index, part)
    out = []
    for value in result:
        full = np.zeros((state.batch_size,) + value.shape[1:], value.dtype)  # (B,) or per agent (B, A)
        full[index] = value
        out.append(full)
    return tuple(out)


def _check_render_mode(render_mode: str | None, metadata: dict[str, Any]) -> None:
    if render_mode is not None and render_mode not in metadata["render_modes"]:
        raise ValueError(f"render_mode must be None or one of {metadata['render_modes']}, got {render_mode!r}")


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return tree[i]


class ArenaEnv(gym.Env):
    """A single world of a scenario: the batch of one behind ``gym.make``."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, scenario: Scenario, render_mode: str | None = None):
        _check_render_mode(render_mode, self.metadata)
        self.scenario = scenario
        self.observation_space = scenario.observation_space
        self.action_space = scenario.action_space
        self.render_mode = render_mode
        self.state = scenario.init_state(1)
        self._first = np.zeros(1, np.intp)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.scenario.reset(self.state, self._first, [self.np_random])
        return _row(self.scenario.observe(self.state), 0), self._info()

    def step(self, action):
        return self.step_tools(decode_actions(action, (1,), self.action_space, self.scenario.params, single=True))

    def step_tools(self, actions: ToolActions):
        """Step with already decoded actions (arrays (1, A)): the entry of the tool-calling layer."""
        reward, terminated, truncated = self.scenario.step(self.state, actions)
        obs = {k: v[0] for k, v in self.scenario.observe(self.state).items()}
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), self._info()

    def _info(self) -> dict[str, Any]:
        return {k: v.item() for k, v in self.scenario.info(self.state).items()}  # (1,) arrays: a batch of one

    def render(self) -> np.ndarray | None:
        """The world seen from above as an (H, W, 3) uint8 frame (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array":
            return None
        from arena_envs.render import render_frame

        return render_frame(self.scenario, self.state, 0)


class ArenaVectorEnv(VectorEnv):
    """The native numpy batch of a scenario: every world steps in the same array operations.

    Autoreset follows Gymnasium: ``NEXT_STEP`` (default) resets a finished world on the
    following ``step`` and returns its first observation with reward 0; ``SAME_STEP``
    resets it in the same call and puts its last observation and info in
    ``info["final_obs"]`` / ``info["final_info"]``. ``reset(options={"reset_mask": m})``
    resets only the worlds where ``m`` is true.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"],
                                "render_fps": 10}
    render_worlds = 4  # how many worlds `render` tiles

    def __init__(self, scenario: Scenario, num_envs: int,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 render_mode: str | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be NEXT_STEP or SAME_STEP, got {mode}")
        _check_render_mode(render_mode, self.metadata)
        self.scenario = scenario
        self.num_envs = int(num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.autoreset_mode = mode
        self.render_mode = render_mode
        self.single_observation_space = scenario.observation_space
        self.single_action_space = scenario.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.state = scenario.init_state(self.num_envs)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._needs_reset = np.zeros(self.num_envs, bool)
        self._shape = (self.num_envs,)

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed if isinstance(seed, int) else None)
        mask = self._reset_mask(options)
        seeds = self._seeds(seed)
        index = np.flatnonzero(mask)
        for i in index:
            if seeds[i] is not None or self._rngs[i] is None:
                self._rngs[i], _ = seeding.np_random(seeds[i])
        self.scenario.reset(self.state, index, [self._rngs[i] for i in index])
        self._needs_reset[index] = False
        return self.scenario.observe(self.state), self._info(mask)

    def step(self, actions):
        actions = self._decode(actions)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            # Worlds that ended last step are reset instead of stepped. Stepping them along
            # with the rest and then overwriting them with a fresh world is cheaper than
            # stepping a subset, and the same: reset sets every array of the world.
            reward, terminated, truncated = self.scenario.step(self.state, actions)
            restart = np.flatnonzero(self._needs_reset)
            if len(restart):
                self.scenario.reset(self.state, restart, [self._rngs[i] for i in restart])
                reward[restart] = 0.0
                terminated[restart] = False
                truncated[restart] = False
            obs, infos = self.scenario.observe(self.state), self._info()
        else:
            reward, terminated, truncated = self.scenario.step(self.state, actions)
            obs, infos = self.scenario.observe(self.state), self._info()
            done = np.flatnonzero(terminated | truncated)
            if len(done):
                infos = self._final(obs, infos, done)
                self.scenario.reset(self.state, done, [self._rngs[i] for i in done])
                obs = self.scenario.observe(self.state)
                infos.update(self._info())
        self._needs_reset = terminated | truncated
        return obs, reward.astype(np.float64), terminated, truncated, infos

    def render(self) -> np.ndarray | None:
        """The first few worlds tiled in one uint8 frame (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array":
            return None
        from arena_envs.render import render_frame, tile

        worlds = range(min(self.render_worlds, self.num_envs))
        return tile([render_frame(self.scenario, self.state, b) for b in worlds])

    def _decode(self, actions) -> ToolActions:
        """The batch of structured actions as :class:`ToolActions`; multi-agent envs decode (B, A)."""
        return decode_actions(actions, self._shape, self.single_action_space, self.scenario.params)

    def _final(self, obs, infos, done):
        """The SAME_STEP entries for the worlds ``done``, as Gymnasium's SyncVectorEnv lays them out."""
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in done:
            final_obs[i] = _row(obs, i)
        mask = np.zeros(self.num_envs, bool)
        mask[done] = True
        return {"final_obs": final_obs, "_final_obs": mask, "final_info": self._info(mask), "_final_info": mask}

    def _info(self, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The scenario's info, each key with its ``_key`` mask (true where ``mask`` is, default all)."""
        info = self.scenario.info(self.state)
        present = np.ones(self.num_envs, bool) if mask is None else mask
        return {**info, **{"_" + k: present.copy() for k in info}}

    def _reset_mask(self, options) -> np.ndarray:
        mask = (options or {}).get("reset_mask")
        if mask is None:
            return np.ones(self.num_envs, bool)
        mask = np.asarray(mask)
        if mask.shape != self._shape or mask.dtype != np.bool_:
            raise ValueError(f"options['reset_mask'] must be a bool array of shape {self._shape}, "
                             f"got {mask.dtype} {mask.shape}")
        if not mask.any():
            raise ValueError("options['reset_mask'] must select at least one env")
        return mask

    def _seeds(self, seed) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        return seeds
