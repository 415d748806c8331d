"""``ToolCallWrapper``: an arena env driven by JSON tool calls, observed as ``Observation`` objects.

    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="classic"))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        '{"tool": "move_to", "params": {"target": [-5, 0, 3]}}')
    print(obs.to_text())

``step`` takes a :class:`~arena_envs.tools.Decision`, a dict or raw model output; it
validates the call against the tool registry, resolves entity names (``Berry1``) to table
rows, steps the numpy core once, and builds the seed's :class:`Observation` from the
arrays. A call that cannot be read or is invalid costs a tick like any other and comes back
as a failed ``last_action_result`` (``INVALID_PARAMS`` or ``NOT_FOUND``) naming the problem.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from arena_envs.tools.session import ToolSession
from arena_envs.world import ToolActions


class ToolCallWrapper(gym.Wrapper):
    """Tool calls in, :class:`Observation` out, for the single-agent arena envs."""

    def __init__(self, env: gym.Env, agent_id: str = "agent_1"):
        super().__init__(env)
        self.arena = env.unwrapped
        if not hasattr(self.arena, "step_tools"):
            raise TypeError(f"ToolCallWrapper needs an arena env, got {type(self.arena).__name__}")
        self.session = ToolSession(self.arena.scenario, self.arena.state, agent_id=agent_id)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        arrays, info = self.env.reset(seed=seed, options=options)
        self.session.begin()
        return self.session.observation(arrays, info, first=True), info

    def step(self, call: Any):
        actions = ToolActions.idle((1, 1))
        self.session.encode(call, actions)
        arrays, reward, terminated, truncated, info = self.arena.step_tools(actions)
        return self.session.observation(arrays, info), reward, terminated, truncated, info
