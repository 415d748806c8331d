"""Tool-calling wrappers: arena envs driven by JSON tool calls, observed as ``Observation`` objects.

    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="classic"))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        '{"tool": "move_to", "params": {"target": [-5, 0, 3]}}')
    print(obs.to_text())

    env = ToolCallWrapper(team_capture_v0.parallel_env())       # a ParallelToolCallWrapper
    observations, infos = env.reset(seed=0)                     # {agent: Observation}
    observations, rewards, terminations, truncations, infos = env.step(
        {"blue_agent_1": {"tool": "send_message", "params": {"message": "I'm capturing point A"}},
         "red_agent_1": '{"tool": "move_to", "params": {"target": [0, 0, 0]}}'})

``step`` takes a :class:`~arena_envs.tools.Decision`, a dict or raw model output (per
agent, for the parallel form); it validates the call against the tool registry of the
env's world (its bounds come from the scenario's params), resolves entity names
(``Berry1``, ``blue_agent_2``) to table rows, steps the wrapped env once through its
public ``step`` (so every wrapper in between sees the tick) with the decoded
:class:`~arena_envs.world.ToolActions`, and builds the seed's :class:`Observation` from
the arrays. A call that cannot be read or is invalid costs a tick like any other and
comes back as a failed ``last_action_result`` (``INVALID_PARAMS`` or ``NOT_FOUND``)
naming the problem. ``None`` (an LLM turn without a tool call, an agent left out) is no
new command: the agent carries on with what it was doing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded
from pettingzoo import ParallelEnv
from pettingzoo.utils import BaseParallelWrapper

from arena_envs.observations import Observation, short_repr
from arena_envs.tools.session import ToolSession
from arena_envs.tools.team_session import TeamCaptureSession
from arena_envs.world import ToolActions, WorldState


class ToolCallWrapper(gym.Wrapper):
    """Tool calls in, :class:`Observation` out, for the single-agent arena envs.

    Given a PettingZoo parallel env (Team Capture) it returns a
    :class:`ParallelToolCallWrapper` instead: the same layer for every agent, keyed by name.
    """

    def __new__(cls, env: gym.Env | ParallelEnv | None = None, *args: Any, **kwargs: Any):
        if isinstance(env, ParallelEnv):
            return ParallelToolCallWrapper(env, *args, **kwargs)
        return super().__new__(cls)  # env may be None here: copy and pickle create the object bare

    def __init__(self, env: gym.Env, agent_id: str = "agent_1"):
        super().__init__(env)
        self.arena = env.unwrapped
        if not isinstance(getattr(self.arena, "state", None), WorldState):
            raise TypeError(f"ToolCallWrapper needs an arena env, got {type(self.arena).__name__}")
        self.session = ToolSession(self.arena.scenario, self.arena.state, agent_id=agent_id)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        arrays, info = self.env.reset(seed=seed, options=options)
        self.session.begin()
        return self.session.observation(arrays, info, first=True), info

    def step(self, call: Any):
        """One tick with ``call`` (None: no new command, the agent carries on)."""
        if not self.session.begun:
            raise ResetNeeded("Cannot call step() before reset()")
        actions = ToolActions.none((1, 1))
        self.session.encode(call, actions)
        arrays, reward, terminated, truncated, info = self.env.step(actions)
        return self.session.observation(arrays, info), reward, terminated, truncated, info


class ParallelToolCallWrapper(BaseParallelWrapper):
    """Tool calls in, :class:`Observation` out, for every agent of Team Capture's ``parallel_env``.

    ``step`` takes ``{agent: call}``; an agent left out (or given None) carries on with
    what it was doing, as in the wrapped env (``idle`` is the explicit stop). Everything
    it returns is keyed by agent, PettingZoo style, with :class:`Observation` objects as
    observations (see
    :class:`~arena_envs.tools.team_session.TeamCaptureSession` for their content).
    """

    def __init__(self, env: ParallelEnv):
        super().__init__(env)
        self.arena = env.unwrapped
        if not isinstance(getattr(self.arena, "world", None), WorldState):
            raise TypeError(f"ParallelToolCallWrapper needs an arena env, got {type(self.arena).__name__}")
        self.sessions = {name: TeamCaptureSession(self.arena.scenario, self.arena.world, agent=i)
                         for i, name in enumerate(self.arena.possible_agents)}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        arrays, infos = self.env.reset(seed=seed, options=options)
        for session in self.sessions.values():
            session.begin()
        return self._observations(arrays, infos, first=True), infos

    def step(self, calls: Mapping[str, Any]):
        if not isinstance(calls, Mapping):
            raise ValueError(f"calls must be a dict from agent name to tool call, got {type(calls).__name__}")
        if not self.agents:  # the episode is over: nobody left to act
            return {}, {}, {}, {}, {}
        unknown = set(calls) - set(self.agents)
        if unknown:
            named = ", ".join(sorted(map(short_repr, unknown))[:8])  # bounded: the names came from a caller
            raise ValueError(f"calls for unknown or finished agents {named}; agents are {self.agents}")
        actions = ToolActions.none((1, len(self.sessions)))
        for name in self.agents:
            self.sessions[name].encode(calls.get(name), actions)
        arrays, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._observations(arrays, infos), rewards, terminations, truncations, infos

    def _observations(self, arrays: dict[str, dict[str, np.ndarray]], infos: dict[str, dict[str, Any]],
                      first: bool = False) -> dict[str, Observation]:
        names = list(arrays)
        if not names:
            return {}
        rows = {key: np.stack([arrays[name][key] for name in names]) for key in arrays[names[0]]}
        sessions = [self.sessions[name] for name in names]
        observations = TeamCaptureSession.observations(sessions, rows, [infos[name] for name in names], first)
        return dict(zip(names, observations, strict=True))
