"""Recording chat episodes for ``arena-view``: the world at every tick beside the transcript.

``ChatPool(env_id, record="runs/agent")`` (``arena-agent --record DIR``) wraps each
session's backend in a :class:`RecordingBackend`. Every tick it writes what a replay
draws (the 2D world's state, or Treasure Hunt's observation and explored tree), the tool
call and its result, the reward and info, and ``turn``: the index in the transcript of the
assistant message whose call made the tick. When the session closes, the episode is written
to ``DIR/episodes.jsonl`` with the whole transcript and the error that stopped it, if any.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arena_envs.envs import SCENARIOS
from arena_envs.render.replay import TickReader, world_header
from arena_envs.wrappers.record import EpisodeFile, Tape, WorldReader, jsonable


class RecordingBackend:
    """A chat :class:`~arena_envs.llm.backends.Backend` that records its episodes (see the module docstring)."""

    def __init__(self, backend: Any, episodes: EpisodeFile, env_id: str):
        self.inner, self.episodes, self.env_id = backend, episodes, env_id
        self.scenario, self.tools = backend.scenario, backend.tools
        self.session: Any = None  # the ChatSession, for the transcript (set by ChatPool)
        self.tape: Tape | None = None
        pool = getattr(backend, "pool", None)
        if pool is None:  # Treasure Hunt: its own text env
            self.reader: Any = WorldReader(backend.env)
            self.header = self.reader.header()
            self.name = "treasure_hunt"
        else:
            self.name = self.scenario.lower().replace("teamcapture", "team_capture")
            self.scene = SCENARIOS[self.name].scene(pool.scenario)
            self.header = world_header(pool.scenario, self.scene)
            self.reader = None

    def __getattr__(self, name: str) -> Any:  # start_position and the like: the inner backend's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def system_prompt(self, max_calls: int, end_without_call: bool) -> str:
        return self.inner.system_prompt(max_calls, end_without_call)

    def _read(self, fresh: bool, observation: str | None = None) -> dict[str, Any]:
        if self.reader is not None:
            self.reader.observations = observation
            return self.reader.read(np.array([fresh]))[0]
        pool = self.inner.pool
        world = pool._slots.peek(self.inner.id)  # the pool's row this session holds now
        if fresh or self.ticks.worlds[0] != world:
            self.ticks = TickReader(pool.scenario, self.scene, [world])
        return self.ticks.read(pool.state, np.array([fresh]))[0]

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation, info = await self.inner.reset(seed)
        meta = {"scenario": self.name, "env_id": self.env_id, "seed": seed, "source": "arena-agent"}
        self.tape = Tape(meta, self.header, self._read(True, observation))
        return observation, info

    async def tick(self, call: dict[str, Any] | None) -> Any:
        tick = await self.inner.tick(call)
        if self.tape is not None:
            status = tick.observation() if callable(tick.observation) else tick.observation
            state = self._read(False, f"{tick.result}\n{status}" if self.reader is not None else None)
            turn = self.session.length if self.session is not None else None  # the reply being played
            self.tape.add(state, round(float(tick.reward), 4), jsonable(tick.info), act=jsonable(call),
                          output=tick.result or None, error_code=tick.error_code, turn=turn)
        return tick

    async def close(self) -> None:
        if self.tape is not None:
            episode = self.tape.finish(getattr(self.session, "error", None))
            episode["transcript"] = list(self.session.messages) if self.session is not None else []
            self.episodes.write(episode)
            self.tape = None
        await self.inner.close()
