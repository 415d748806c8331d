"""Mixed teams in Team Capture: any agents are chat sessions, the others scripted or an RL policy.

    from arena_envs.llm.team import TeamChat, scripted_team

    match = TeamChat(chat_agents=["blue_agent_1", "blue_agent_2"], controllers=[scripted_team("red")],
                     agents_per_team=2)
    openings = match.reset(seed=0)                    # {agent: (messages, tools)} for each chat agent
    steps = match.step({"blue_agent_1": reply_1, "blue_agent_2": reply_2})   # {agent: ChatStep}

Each chat agent has its own transcript (a :class:`~arena_envs.llm.chat.ChatSession`), with
the same rules as every chat environment. The world ticks once for all: chat agents
stepping together submit their calls to the same tick (an agent with fewer calls, or not
stepping, carries on with its current action), and the controllers act on every tick from
the arrays of their agents. Teammates' ``send_message`` texts are free text; a chat agent
sees every message delivered since its last observation.

A controller is any ``callable(observations) -> {agent: structured action}`` over the
PettingZoo observation arrays of every agent: :func:`scripted_team` wraps the scripted
team, :func:`pretrained_team` a shipped policy (:mod:`arena_envs.pretrained`),
:func:`policy_controller` an RL policy of one agent's observation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from arena_envs.llm.backends import Tick, _rounded, observation_text, universal_schemas
from arena_envs.llm.chat import ChatOptions, ChatSession, ChatStep, _error, _gather

Controller = Callable[[Mapping[str, Mapping[str, np.ndarray]]], Mapping[str, Any]]


def scripted_team(team: str, agents: Sequence[str] | None = None, params: Any = None) -> Controller:
    """The scripted team (:class:`~arena_envs.scripted.ScriptedCaptureTeam`) controlling ``agents``
    of ``team`` ("blue" or "red"; default: every agent of the team not given to a chat session)."""
    from arena_envs.scripted import ScriptedCaptureTeam

    return team_controller(team, ScriptedCaptureTeam(params).act, agents)


def pretrained_team(team: str, name: str = "pretrained", agents: Sequence[str] | None = None, seed: int = 0,
                    **env_kwargs: Any) -> Controller:
    """A shipped policy (:mod:`arena_envs.pretrained`: ``pretrained``, ``pretrained:team_capture`` or
    an exported ``.npz``) controlling ``agents`` of ``team``, its actions sampled from ``seed``.
    ``env_kwargs``: the match's env arguments (on top of the policy's own), which must give the
    observations it was trained on."""
    from arena_envs import pretrained
    from arena_envs.envs import build

    policy = pretrained.load(name, "team_capture")
    rules, _, _ = build("team_capture", **{**policy.env_kwargs, **env_kwargs})
    brain = pretrained.PretrainedAgent(policy, rules.observation_space, rules.action_space, rules.params, seed=seed)
    return team_controller(team, brain.act, agents)


def team_controller(team: str, act_team: Callable[[dict[str, np.ndarray]], Any],
                    agents: Sequence[str] | None = None) -> Controller:
    """A controller of ``agents`` of ``team`` (default: every agent of the team not given to a chat
    session) from ``act_team``, a team's policy of stacked arrays (N, ...) -> actions (N, ...)."""

    def act(observations: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
        members = sorted((a for a in observations if a.startswith(team + "_")), key=_number)
        if not members:
            return {}
        stacked = {key: np.stack([observations[a][key] for a in members]) for key in observations[members[0]]}
        actions = act_team(stacked)
        chosen = agents if agents is not None else members
        return {a: _row(actions, i) for i, a in enumerate(members) if a in chosen}

    act.team = team  # type: ignore[attr-defined]
    return act


def policy_controller(agents: Sequence[str], policy: Callable[[Mapping[str, np.ndarray]], Any]) -> Controller:
    """An RL policy (one agent's observation arrays -> its structured action) controlling ``agents``."""
    def act(observations: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
        return {a: policy(observations[a]) for a in agents if a in observations}

    return act


class _World:
    """The shared Team Capture world: coalesces the chat agents' calls of one loop turn into one tick."""

    def __init__(self, chat_agents: Sequence[str], controllers: Sequence[Controller], recording: Any = None,
                 **env_kwargs: Any):
        from arena_envs import team_capture_v0
        from arena_envs.tools.team_session import TeamCaptureSession

        self.env = team_capture_v0.parallel_env(**env_kwargs)
        self.recording = recording  # an EpisodeFile: each chat agent's episode is written to it (see TeamChat)
        self.tapes: dict[str, Any] = {}
        self.turn_of: Callable[[str], int | None] = lambda agent: None  # the reply being played (set by TeamChat)
        self.params = self.env.scenario.params
        unknown = set(chat_agents) - set(self.env.possible_agents)
        if unknown:
            raise ValueError(f"unknown agents {sorted(unknown)}; agents are {self.env.possible_agents}")
        self.chat_agents = list(chat_agents)
        self.controllers = list(controllers)
        index = {name: i for i, name in enumerate(self.env.possible_agents)}
        self.sessions = {a: TeamCaptureSession(self.env.scenario, self.env.world, agent=index[a])
                         for a in self.chat_agents}
        self._session_type = TeamCaptureSession
        self._pending: dict[str, Any] = {}
        self._tick: asyncio.Future | None = None
        self._arrays: dict[str, dict[str, np.ndarray]] = {}
        self._inbox: dict[str, list] = {a: [] for a in self.chat_agents}
        self._unclaimed = dict.fromkeys(self.chat_agents, 0.0)  # reward of ticks an agent sat out
        self.first: dict[str, str] = {}
        self.info: dict[str, Any] = {}
        self._ended = (False, False)  # how the match ended (terminated, truncated)

    def reset(self, seed: int | None) -> None:
        self._arrays, infos = self.env.reset(seed=seed)
        for session in self.sessions.values():
            session.begin()
        observations = self._observations(infos, first=True)
        self.first = {a: observation_text(o) for a, o in observations.items()}
        self._inbox = {a: [] for a in self.chat_agents}
        self._unclaimed = dict.fromkeys(self.chat_agents, 0.0)
        self._ended = (False, False)
        self.info = next(iter(infos.values()), {})
        if self.recording is not None:
            self._start_tapes(seed)

    def _start_tapes(self, seed: int | None) -> None:
        from arena_envs.wrappers.record import ONE, Tape, WorldReader

        self.reader = WorldReader(self.env)
        header, first = self.reader.header(), self.reader.read(ONE)[0]
        self.tapes = {a: Tape({"scenario": "team_capture", "env_id": "arena_envs/TeamCapture-v0", "seed": seed,
                               "source": "arena-agent", "agent": a}, header, first) for a in self.chat_agents}

    def _record(self, ticks: dict[str, Tick], calls: dict[str, Any]) -> None:
        """The tick just played, on the tape of each chat agent (with its call, result and turn)."""
        from arena_envs.wrappers.record import NONE, jsonable

        state = self.reader.read(NONE)[0]
        for agent, tape in self.tapes.items():
            tick = ticks.get(agent)
            played = agent in calls
            tape.add(state, None if tick is None else round(float(tick.reward), 4),
                     jsonable(tick.info) if tick is not None else None, act=jsonable(calls.get(agent)),
                     output=tick.result if played and tick is not None else None,
                     error_code=tick.error_code if tick is not None else None, turn=self.turn_of(agent))

    def finish_tapes(self, transcripts: Mapping[str, list], errors: Mapping[str, str | None]) -> None:
        """Write each chat agent's episode, its transcript beside the world."""
        for agent, tape in self.tapes.items():
            episode = tape.finish(errors.get(agent))
            episode["transcript"] = transcripts[agent]
            self.recording.write(episode)
        self.tapes = {}

    async def call(self, agent: str, call: dict[str, Any] | None) -> Tick:
        if agent in self._pending:
            raise RuntimeError(f"{agent} already has a call in flight")
        if not self._pending:
            loop = asyncio.get_running_loop()
            self._tick = loop.create_future()
            loop.call_soon(self._flush, self._tick)
        tick = self._tick
        self._pending[agent] = call
        return (await tick)[agent]

    def _flush(self, future: asyncio.Future) -> None:
        pending, self._pending = self._pending, {}
        try:
            future.set_result(self._advance(pending))
        except Exception as error:
            future.set_exception(error)

    def _advance(self, pending: dict[str, Any]) -> dict[str, Tick]:
        ticks = self._play(pending)
        if self.tapes:
            self._record(ticks, pending)
        return ticks

    def _play(self, pending: dict[str, Any]) -> dict[str, Tick]:
        from arena_envs.world import ToolActions

        if not self.env.agents:  # the match is over: nothing moves; an agent that sat out its end learns it now
            out = {}
            for agent in pending:
                reward, self._unclaimed[agent] = self._unclaimed[agent], 0.0
                info = {**self.info, "team": agent.split("_")[0]}
                info["success"], info["score"] = self._outcome(agent, info)
                out[agent] = Tick(_error("NOT_RUN", "not run: the match is over"), observation_text(self._last[agent]),
                                  reward, *self._ended, info)
            return out
        joint = ToolActions.none((1, len(self.env.possible_agents)))
        for agent in self.chat_agents:
            self.sessions[agent].encode(pending.get(agent), joint)
        for controller in self.controllers:
            for agent, action in controller(self._arrays).items():
                if agent in self.sessions or action is None:
                    continue  # chat agents are never overridden
                one, row = self.env.decode(agent, action), self.env.possible_agents.index(agent)
                for field in dataclasses.fields(ToolActions):
                    getattr(joint, field.name)[0, row] = getattr(one, field.name)[0, 0]
        arrays, rewards, terminations, truncations, infos = self.env.step(joint)
        if not self.env.agents:
            self._ended = (any(terminations.values()), any(truncations.values()))
        self._arrays = arrays
        self.info = next(iter(infos.values()), self.info)
        observations = self._observations(infos)
        out = {}
        for agent in self.chat_agents:
            self._unclaimed[agent] += rewards.get(agent, 0.0)
            self._inbox[agent] += observations[agent].messages
        for agent, call in pending.items():
            obs = observations[agent]
            result = obs.last_action_result
            data: dict[str, Any] = {"tool": result.tool if result else None, "success": bool(result and result.success)}
            if result is not None and not result.success:
                data["error_code"], data["error_message"] = result.error_code, result.error_message
            if obs.query_result is not None:
                data["query_result"] = obs.query_result
            code = None if call is None or (result is not None and result.success) else \
                (result.error_code if result is not None else "INVALID_PARAMS")
            text = observation_text(dataclasses.replace(obs, messages=self._inbox[agent]))
            self._inbox[agent] = []
            reward, self._unclaimed[agent] = self._unclaimed[agent], 0.0
            info = {**infos.get(agent, self.info), "team": agent.split("_")[0]}
            info["success"], info["score"] = self._outcome(agent, info)
            out[agent] = Tick(json.dumps(_rounded(data)), text, reward, bool(terminations.get(agent, True)),
                              bool(truncations.get(agent, False)), info, code, obs.position)
        return out

    @staticmethod
    def _outcome(agent: str, info: Mapping[str, Any]) -> tuple[bool, float]:
        ours, theirs = ("blue_score", "red_score") if agent.startswith("blue") else ("red_score", "blue_score")
        return bool(info.get(ours, 0) > info.get(theirs, 0)), float(info.get(ours, 0.0))

    def _observations(self, infos: Mapping[str, Any], first: bool = False) -> dict[str, Any]:
        names = [a for a in self.chat_agents if a in self._arrays]
        if not names:
            return {a: self._last[a] for a in self.chat_agents}
        rows = {key: np.stack([self._arrays[a][key] for a in names]) for key in self._arrays[names[0]]}
        observations = self._session_type.observations([self.sessions[a] for a in names], rows,
                                                       [infos[a] for a in names], first)
        self._last = dict(zip(names, observations, strict=True))
        return self._last


class _TeamBackend:
    """One chat agent's view of the shared world (the :class:`ChatSession` backend)."""

    scenario = "TeamCapture"

    def __init__(self, world: _World, agent: str):
        self.world, self.agent = world, agent
        self.tools = universal_schemas(world.params)
        self.turn_limit = None  # the match counts ticks, not replies

    def prompt_facts(self) -> dict[str, Any]:
        p = self.world.params
        return {"agent": self.agent, "team": self.agent.split("_")[0], "half": p.half_size,
                "radius": p.capture_radius, "target": p.win_score, "ticks": p.max_ticks}

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        return self.world.first[self.agent], dict(self.world.info)

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        return await self.world.call(self.agent, call)

    async def close(self) -> None:
        pass


class TeamChat:
    """A Team Capture match with chat agents and controlled agents; see the module docstring.

    ``chat_agents``: names of the agents played through chat (``blue_agent_1``...);
    ``controllers``: callables acting for (some of) the others every tick; an agent
    neither chats nor is controlled carries on (it stands still). Chat options
    (:class:`~arena_envs.llm.chat.ChatOptions`: ``max_calls``, ``on_no_call``, ``max_turns``,
    ``call_format``...) are as for every chat session; the rest go to ``team_capture_v0.parallel_env``.
    ``recording``: an :class:`~arena_envs.wrappers.record.EpisodeFile` that gets one episode per chat
    agent when the match closes (the world at every tick, the agent's calls, results and transcript
    turns, for ``arena-view``).
    """

    def __init__(self, chat_agents: Sequence[str], controllers: Sequence[Controller] = (), *,
                 recording: Any = None, **kwargs: Any):
        options = ChatOptions.pop(kwargs)
        self.world = _World(chat_agents, controllers, recording, **kwargs)
        self.sessions = {a: ChatSession(_TeamBackend(self.world, a), options) for a in chat_agents}
        self.world.turn_of = lambda agent: self.sessions[agent].length
        self._loop: asyncio.AbstractEventLoop | None = None

    async def areset(self, seed: int | None = None) -> dict[str, tuple[list[dict], list[dict]]]:
        self.world.reset(seed)
        openings = await _gather(*(session.reset(seed) for session in self.sessions.values()))
        return dict(zip(self.sessions, openings, strict=True))

    async def astep(self, replies: Mapping[str, Any]) -> dict[str, ChatStep]:
        """Step the chat agents given a reply, together (their first calls share a tick)."""
        unknown = set(replies) - set(self.sessions)
        if unknown:
            raise ValueError(f"replies for agents that do not chat: {sorted(unknown)}; chat agents: "
                             f"{list(self.sessions)}")
        names = [a for a in replies if replies[a] is not None and not self.sessions[a].done]
        steps = await _gather(*(self.sessions[a].step(replies[a]) for a in names))
        return dict(zip(names, steps, strict=True))

    def reset(self, seed: int | None = None) -> dict[str, tuple[list[dict], list[dict]]]:
        return self._run(self.areset(seed))

    def step(self, replies: Mapping[str, Any]) -> dict[str, ChatStep]:
        return self._run(self.astep(replies))

    @property
    def done(self) -> bool:
        return all(session.done for session in self.sessions.values())

    def _run(self, awaitable):
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(awaitable)

    def close(self, errors: Mapping[str, str | None] | None = None) -> None:
        """End the match; with ``recording``, each chat agent's episode so far is written (``errors``:
        what stopped an agent's episode, by agent)."""
        if self.world.tapes:
            self.world.finish_tapes({a: list(s.messages) for a, s in self.sessions.items()}, errors or {})
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def _number(agent: str) -> int:
    return int(agent.rsplit("_", 1)[1])


def _row(tree: Any, i: int) -> Any:
    return {k: _row(v, i) for k, v in tree.items()} if isinstance(tree, dict) else tree[i]


class TeamChatBatch:
    """``size`` Team Capture matches with one chat agent each, stepped together from synchronous code:
    :class:`~arena_envs.llm.chat.ChatBatch`'s interface, so a rollout (GRPO's, an evaluation's) plays
    Team Capture as it plays the single-agent scenarios. Every other agent plays for the scripted teams.

        batch = TeamChatBatch(4, chat_agent="blue_agent_1", max_turns=8)
        openings = batch.reset([7, 7, 8, 8])              # the chat agent's (messages, tools) per match
        steps = batch.step([reply_0, None, reply_2, reply_3])
    """

    def __init__(self, size: int = 1, *, chat_agent: str = "blue_agent_1", **kwargs: Any):
        self.chat_agent = chat_agent
        self.matches = [TeamChat([chat_agent], [scripted_team("blue"), scripted_team("red")], **dict(kwargs))
                        for _ in range(size)]
        self.sessions = [match.sessions[chat_agent] for match in self.matches]
        self._loop = asyncio.new_event_loop()

    def reset(self, seed: int | Sequence[int | None] | None = None) -> list[tuple[list[dict], list[dict]]]:
        """Reset every match: ``seed`` None, an int (match i gets seed + i) or one per match."""
        seeds = [None if seed is None else seed + i for i in range(len(self.matches))] \
            if seed is None or isinstance(seed, int) else list(seed)
        if len(seeds) != len(self.matches):
            raise ValueError(f"expected {len(self.matches)} seeds, got {len(seeds)}")
        openings = self._run(_gather(*(m.areset(s) for m, s in zip(self.matches, seeds, strict=True))))
        return [opening[self.chat_agent] for opening in openings]

    def step(self, replies: Sequence[Any]) -> list[ChatStep | None]:
        """One reply per match, stepped together; a match given None (or over) returns None."""
        if len(replies) != len(self.matches):
            raise ValueError(f"expected {len(self.matches)} replies, got {len(replies)}")

        async def one(match: TeamChat, reply: Any) -> ChatStep | None:
            if reply is None or match.sessions[self.chat_agent].done:
                return None
            return (await match.astep({self.chat_agent: reply}))[self.chat_agent]

        return self._run(_gather(*(one(m, r) for m, r in zip(self.matches, replies, strict=True))))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.close()

    def _run(self, awaitable):
        return self._loop.run_until_complete(awaitable)
