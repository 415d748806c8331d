"""``team_capture_v0``: Team Capture as PettingZoo environments, PettingZoo's module conventions.

    from arena_envs import team_capture_v0

    env = team_capture_v0.parallel_env(agents_per_team=2, max_cycles=1200)  # ParallelEnv
    aec = team_capture_v0.env()                                              # AEC form
    envs = team_capture_v0.vector_env(num_envs=1024)                         # arrays (B, agents, ...)

``parallel_env`` is the native form; ``raw_env`` is its AEC conversion (PettingZoo's
``parallel_to_aec_wrapper``, checking each action when it is given rather than when the
last agent has moved) and ``env`` the same with PettingZoo's order enforcement.
``vector_env`` steps many worlds and all their agents in the same array operations: what
self-play training uses (``gym.make_vec("arena_envs/TeamCapture-v0", num_envs=N)`` makes
the same). All sit on one batch engine, so they agree step for step (world ``i`` of
``vector_env`` reset with seed ``s`` plays exactly like ``parallel_env`` reset with seed
``s + i``). Each takes ``render_mode`` ``"rgb_array"``, ``"ansi"`` (a text map) or ``"human"``
(a pygame window; the vector env shows its first four worlds). The rules, spaces and
arguments are documented in :mod:`arena_envs.team_capture`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec_wrapper
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from arena_envs.actions import decode_actions
from arena_envs.batch import Batch
from arena_envs.envs import RENDER_METADATA, ArenaDeviceVectorEnv, ArenaVectorEnv
from arena_envs.render import Renderer
from arena_envs.scenes import TeamCaptureScene
from arena_envs.sharded import ShardedVectorEnv
from arena_envs.team_capture import TeamCaptureParams, make_scenario
from arena_envs.world import ToolActions

__all__ = ["TeamCaptureParallelEnv", "TeamCaptureVectorEnv", "env", "parallel_env", "raw_env", "vector_env"]


class TeamCaptureParallelEnv(ParallelEnv):
    """One Team Capture world as a PettingZoo ``ParallelEnv`` (a batch of one of the engine).

    ``step`` takes a dict of structured actions by agent name; an agent missing from it
    (or given ``None``) carries on with what it was doing (``idle`` is the explicit stop).
    A malformed action raises ``ValueError`` naming the agent and the field; a bad value
    of the chosen tool gives that agent ``INVALID_PARAMS``.
    """

    metadata: dict[str, Any] = {"name": "team_capture_v0", **RENDER_METADATA, "is_parallelizable": True}

    def __init__(self, agents_per_team: int | None = None, max_cycles: int | None = None,
                 render_mode: str | None = None, params: TeamCaptureParams | None = None, **kwargs: Any):
        self.renderer = Renderer(render_mode, self.metadata, "arena_envs: team_capture_v0")
        self.scenario = make_scenario(params, agents_per_team, max_cycles, **kwargs)
        self.scene = TeamCaptureScene(self.scenario)
        self.batch = Batch(self.scenario, 1)
        self.world = self.batch.state
        self.render_mode = render_mode
        self.possible_agents = list(self.scenario.possible_agents)
        self.agents: list[str] = []
        self.max_cycles = self.scenario.params.max_ticks
        self.state_space = self.scenario.state_space
        # one space object per agent, so that seeding one agent's space leaves the others alone
        self._observation_spaces = {a: copy.deepcopy(self.scenario.observation_space) for a in self.possible_agents}
        self._action_spaces = {a: copy.deepcopy(self.scenario.action_space) for a in self.possible_agents}
        self._index = {a: i for i, a in enumerate(self.possible_agents)}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Dict:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.batch.reset(seeds=[seed])
        self.agents = self.possible_agents[:]
        if self.render_mode == "human":
            self.render()
        return self._observations(), self._infos()

    def step(self, actions: Mapping[str, Any] | ToolActions):
        """One tick: ``{agent: action}``, or the tool layer's decoded ``ToolActions`` of shape (1, A)."""
        if not self.agents:  # the episode is over: nobody left to act
            return {}, {}, {}, {}, {}
        joint = actions if isinstance(actions, ToolActions) else self._decode(actions)
        reward, terminated, truncated = self.batch.step(joint)
        observations, infos = self._observations(), self._infos()
        rewards = {a: float(reward[0, self._index[a]]) for a in self.agents}
        terminations = dict.fromkeys(self.agents, bool(terminated[0]))
        truncations = dict.fromkeys(self.agents, bool(truncated[0]))
        if terminated[0] or truncated[0]:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def decode(self, agent: str, action: Any) -> ToolActions:
        """One agent's structured action decoded, or ``ValueError`` naming the agent and the field."""
        try:
            return decode_actions(action, (1,), self.scenario.action_space, self.scenario.params, single=True)
        except ValueError as err:
            raise ValueError(f"{agent}: {err}") from None

    def state(self) -> np.ndarray:
        """The global view (``state_space``): positions, points, scores, ticks left."""
        return self.scenario.global_state(self.world)[0]

    def render(self) -> np.ndarray | str | None:
        """The field seen from above: an (H, W, 3) uint8 frame (``"rgb_array"``), a text map
        (``"ansi"``), or shown in a window (``"human"``, called by ``reset`` and ``step``)."""
        return self.renderer.render_world(self.scenario, self.world, self.scene)

    def close(self) -> None:
        self.renderer.close()

    def _decode(self, actions: Mapping[str, Any]) -> ToolActions:
        if not isinstance(actions, Mapping):
            raise ValueError(f"actions must be a dict from agent name to action, got {type(actions).__name__}")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(f"actions for unknown or finished agents {sorted(unknown, key=str)}; "
                             f"agents are {self.agents}")
        joint = ToolActions.none((1, self.scenario.num_agents))
        for name, action in actions.items():
            if action is None:
                continue
            one, i = self.decode(name, action), self._index[name]
            for f in dataclasses.fields(ToolActions):
                getattr(joint, f.name)[0, i] = getattr(one, f.name)[0, 0]
        return joint

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        obs = self.batch.observe()
        return {a: {k: v[0, self._index[a]] for k, v in obs.items()} for a in self.agents}

    def _infos(self) -> dict[str, dict[str, Any]]:
        info = {k: v[0].item() for k, v in self.scenario.info(self.world).items()}
        return {a: dict(info) for a in self.agents}


class TeamCaptureAEC(parallel_to_aec_wrapper):
    """PettingZoo's AEC conversion, checking each action when it is given.

    The stock conversion stores actions unchecked until the last agent moves, so one bad
    action made that last step raise, and every retry after it, until ``reset``; a real
    action for a finished agent broke its bookkeeping. Here a bad action raises
    ``ValueError`` at once and changes nothing, so the agent can try again.
    """

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations.get(agent) or self.truncations.get(agent):
            if action is not None:
                raise ValueError(f"{agent} is done: the only valid action is None")
        elif action is not None and not isinstance(action, ToolActions):
            self.env.decode(agent, action)
        super().step(action)


class TeamCaptureVectorEnv(ArenaVectorEnv):
    """Many Team Capture worlds stepped at once: every array is (B, A, ...), A = 2N agents.

    Observations, rewards, terminated and truncated all carry the agent axis (every agent
    of a world ends together); actions are the per-agent structured actions batched to
    (B, A, ...). Agents are ordered as :attr:`agents` (blue, then red). Autoreset
    (NEXT_STEP or SAME_STEP) and ``reset_mask`` work as in the single-agent vector envs;
    info is per world.
    """

    def __init__(self, num_envs: int = 1, agents_per_team: int | None = None, max_cycles: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 params: TeamCaptureParams | None = None, rng: str = "pcg64", **kwargs: Any):
        scenario = make_scenario(params, agents_per_team, max_cycles, **kwargs)
        super().__init__(num_envs, scenario, autoreset_mode=autoreset_mode, render_mode=render_mode, rng=rng)
        self.scene = TeamCaptureScene(scenario)
        self.state_space = batch_space(scenario.state_space, self.num_envs)

    def global_state(self) -> np.ndarray:
        """The global view of every world: (B, state size), see ``state_space``."""
        return self.scenario.global_state(self.state)


def parallel_env(**kwargs: Any) -> TeamCaptureParallelEnv:
    """The PettingZoo ``ParallelEnv``: ``agents_per_team``, ``max_cycles`` and every rule as keywords."""
    return TeamCaptureParallelEnv(**kwargs)


def raw_env(**kwargs: Any) -> AECEnv:
    """The AEC form without order enforcement."""
    return TeamCaptureAEC(parallel_env(**kwargs))


def env(**kwargs: Any) -> AECEnv:
    """The AEC form as PettingZoo builds it from a parallel env (with order enforcement)."""
    return OrderEnforcingWrapper(raw_env(**kwargs))


def vector_env(num_envs: int = 1, num_workers: int = 1, device: Any = None, **kwargs: Any) -> VectorEnv:
    """``num_envs`` worlds as one batched multi-agent env: arrays (B, agents, ...), sharded over
    ``num_workers`` processes when more than one (:class:`~arena_envs.sharded.ShardedVectorEnv`),
    or with ``device`` (``"cpu"``, ``"cuda"``) as torch tensors there
    (:class:`~arena_envs.envs.ArenaDeviceVectorEnv`)."""
    if device is not None:
        if num_workers != 1:
            raise ValueError("device= runs every world on one device: leave num_workers at 1")
        agents_per_team, max_cycles = kwargs.pop("agents_per_team", None), kwargs.pop("max_cycles", None)
        params, compile_ = kwargs.pop("params", None), kwargs.pop("compile", False)
        autoreset_mode = kwargs.pop("autoreset_mode", AutoresetMode.NEXT_STEP)
        render_mode = kwargs.pop("render_mode", None)
        kwargs.pop("rng", None)  # the device batch has the counter generator only
        scenario = make_scenario(params, agents_per_team, max_cycles, **kwargs)
        env = ArenaDeviceVectorEnv(num_envs, scenario, device, autoreset_mode, render_mode, compile=compile_)
        env.scene = TeamCaptureScene(scenario)
        return env
    if num_workers != 1:
        return ShardedVectorEnv(num_envs, num_workers, make_native=functools.partial(TeamCaptureVectorEnv, **kwargs))
    return TeamCaptureVectorEnv(num_envs, **kwargs)
