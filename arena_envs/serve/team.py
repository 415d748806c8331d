"""Team Capture sessions: one session drives a whole team (blue) of its own match.

Why a team per session rather than a session per agent slot: a world advances only when
every agent of it has acted, so slots of one match held by different clients would wait for
the slowest of them (and a client that stalls or disconnects would stall the others), and
a match could not start until all its slots were taken. A team per session keeps each
session's world its own (no session can slow down or see another's match), matches what a
team policy or one LLM coordinating its agents does, and still lets every session's world
advance in the same batched step. The other team (red) is the server's
:class:`~arena_envs.scripted.ScriptedCaptureTeam`.

An action is ``{"calls": {"blue_agent_1": call, "blue_agent_2": call}}``; an agent left
out carries on with its current order (``idle`` is the explicit stop). A plain single call
(``{"tool": ...}``) goes to ``blue_agent_1``. The reward is the team's (shared by its agents).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from arena_envs.batch import Batch
from arena_envs.scripted import ScriptedCaptureTeam
from arena_envs.team_capture import make_scenario, split_teams
from arena_envs.tools import tool_schemas
from arena_envs.tools.team_session import TeamCaptureSession
from arena_envs.world import ToolActions

from .models import ArenaAction, ArenaObservation, observation_answer
from .sessions import ArenaSession, SessionError, SessionHub


class TeamHub(SessionHub):
    """Team Capture: every session is the blue team of one world of one :class:`Batch`."""

    scenario = "team_capture"

    def __init__(self, max_sessions: int, http_sessions: int = 0, **env_kwargs: Any) -> None:
        super().__init__(max_sessions, http_sessions)
        self.rules = make_scenario(**env_kwargs)
        self.params = self.rules.params
        size = self.worlds
        self.batch = Batch(self.rules, size)
        self.team = self.rules.agents_per_team
        self.agents = list(self.rules.possible_agents[:self.team])
        self.members = [[TeamCaptureSession(self.rules, self.batch.state, world=w, agent=a) for a in range(self.team)]
                        for w in range(size)]
        self.opponents = [ScriptedCaptureTeam(self.params) for _ in range(size)]
        self.tools = tool_schemas(params=self.params)
        self.free = list(range(size))
        self.world_of: dict[str, int] = {}
        self._pending: dict[int, dict[str, Any]] = {}
        self._batch: asyncio.Future | None = None
        self.description = (f"Team Capture ({self.team} v {self.team}): each session commands the blue team "
                            "against the server's scripted red team; sessions share one batched core")

    async def _reset(self, session: ArenaSession, seed: int | None, arrays: bool) -> ArenaObservation:
        if arrays:
            raise SessionError("team sessions do not send arrays")
        world = self.world_of.get(session.token)
        if world is None:
            if not self.free:
                raise SessionError("the server is full; try again later (raise --max-sessions)")
            world = self.world_of[session.token] = self.free.pop()
        try:
            self.batch.reset(np.array([world]), [seed])
        except ValueError as err:
            raise SessionError(str(err)) from None
        for member in self.members[world]:
            member.begin()
        self.opponents[world] = ScriptedCaptureTeam(self.params)
        return self._observations([world], first=True)[world]

    async def _step(self, session: ArenaSession, action: ArenaAction) -> ArenaObservation:
        calls = action.calls if action.calls is not None else {self.agents[0]: action.tool_call()}
        calls = await self.read_team(calls)
        unknown = sorted(set(calls) - set(self.agents), key=str)
        if unknown:
            raise SessionError(f"calls for agents not on this team: {unknown}; the team is {self.agents}")
        world = self.world_of[session.token]
        if not self._pending:  # the first call of a batch schedules its step
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            loop.call_soon(self._flush, self._batch)
        batch = self._batch
        self._pending[world] = calls
        self.steps += 1
        return (await asyncio.shield(batch))[world]

    def _flush(self, batch: asyncio.Future) -> None:
        pending, self._pending = self._pending, {}
        try:
            batch.set_result(self._advance(pending))
        except Exception as err:  # every caller of this batch learns it; the server goes on
            batch.set_exception(SessionError(f"the step failed: {type(err).__name__}: {err}"))

    def _advance(self, pending: dict[int, dict[str, Any]]) -> dict[int, ArenaObservation]:
        worlds = np.array(sorted(pending))
        actions = ToolActions.none((self.batch.size, 2 * self.team))
        for world in worlds.tolist():
            for member in self.members[world]:
                member.encode(pending[world].get(member.agent_id), actions)
        _, red = split_teams(self.rules.observe(self.batch.state.take(worlds)), self.team)
        for k, world in enumerate(worlds.tolist()):
            move = self.opponents[world].act({key: value[k] for key, value in red.items()})
            enemy = slice(self.team, 2 * self.team)
            actions.tool[world, enemy] = move["tool"]
            actions.target_x[world, enemy] = move["move_to"][:, 0]
            actions.target_z[world, enemy] = move["move_to"][:, 1]
            actions.speed[world, enemy] = move["move_to"][:, 2]
            actions.message_token[world, enemy] = move["send_message"][:, 0]
            actions.message_target[world, enemy] = move["send_message"][:, 1]
        active = np.zeros(self.batch.size, bool)
        active[worlds] = True
        reward, terminated, truncated = self.batch.step(actions, active)
        return self._observations(worlds.tolist(), reward=reward[:, 0], terminated=terminated, truncated=truncated)

    def _observations(self, worlds: list[int], first: bool = False, reward: np.ndarray | None = None,
                      terminated: np.ndarray | None = None, truncated: np.ndarray | None = None,
                      ) -> dict[int, ArenaObservation]:
        index = np.array(worlds)
        part = self.batch.state.take(index)
        arrays = self.rules.observe(part)
        columns = {key: value.tolist() for key, value in self.rules.info(part).items()}
        infos = [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
        sessions = [member for world in worlds for member in self.members[world]]
        k = np.repeat(np.arange(len(worlds)), self.team)
        agent = np.tile(np.arange(self.team), len(worlds))
        rows = {key: value[k, agent] for key, value in arrays.items()}
        observed = TeamCaptureSession.observations(sessions, rows, [infos[i] for i in k.tolist()], first)
        out = {}
        for i, world in enumerate(worlds):
            team = observed[i * self.team:(i + 1) * self.team]
            ended = (bool(terminated[world]), bool(truncated[world])) if terminated is not None else (False, False)
            out[world] = observation_answer(
                "\n\n".join(obs.to_text() for obs in team), {obs.agent_id: obs.to_dict() for obs in team},
                self.tools, first=first, reward=None if first else float(reward[world]), terminated=ended[0],
                truncated=ended[1], info=infos[i])
        return out

    async def _free(self, session: ArenaSession) -> None:
        world = self.world_of.pop(session.token, None)
        if world is not None:
            self.free.append(world)

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "worlds": self.batch.size, "free_worlds": len(self.free)}
