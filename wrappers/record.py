"""``RecordEpisodes``: every episode an env plays, written as the states needed to redraw it (not frames).

    env = RecordEpisodes(gym.make("arena_envs/Foraging-v0"), "runs/rec")                 # single
    envs = RecordEpisodes(gym.make_vec("arena_envs/Foraging-v0", num_envs=64), "runs/rec")  # vector
    env = RecordEpisodes(team_capture_v0.parallel_env(), "runs/rec")                    # PettingZoo parallel

Each finished episode is one line of ``DIR/episodes.jsonl`` (``.jsonl.gz`` with
``compress=True``): a header (scenario, seed, the world's fixed parts and its legend),
then one record per tick: the state a replay draws (only what changed since the tick
before, see :data:`arena_envs.render.replay.CARRIED`), the action given (``act``), the tool
and result of each agent, messages sent, the reward (``r``) and info, and, when the caller
sets :attr:`RecordEpisodes.turn` (an LLM runner does), the transcript turn behind the tick.
A summary closes it: return, length, success, score and error. ``arena-view DIR`` replays them.

A vector env is recorded in its first ``worlds`` worlds (all by default) with autoreset
``NEXT_STEP`` (Gymnasium's default): the step that resets a finished world starts its next episode.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from pettingzoo import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from arena_envs.render.replay import FORMAT, TickReader, changed, world_header
from arena_envs.world import TOOL_NAMES

EPISODES_FILE = "episodes.jsonl"
ONE, NONE = np.ones(1, bool), np.zeros(1, bool)  # a single world: starting an episode, or going on


def jsonable(value: Any, digits: int = 3) -> Any:
    """``value`` as plain JSON: arrays to lists, floats rounded, numpy scalars to Python ones."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, digits) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist(), digits) if value.dtype.kind == "f" else value.tolist()
    if isinstance(value, (float, np.floating)):
        return round(float(value), digits) if np.isfinite(value) else None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if value is None or isinstance(value, str):
        return value
    return repr(value)


def compact_action(action: Any) -> Any:
    """A structured action (as plain JSON) as its tool's name and that tool's parameters only (the
    env ignores the dict's other entries); one per agent when ``tool`` is a list. Else as it is."""
    if not (isinstance(action, dict) and "tool" in action):
        return action
    tool = action["tool"]
    if isinstance(tool, list):
        return [compact_action(_agent(action, a)) for a in range(len(tool))]
    if not (isinstance(tool, int) and 0 <= tool < len(TOOL_NAMES)):
        return action  # not a 2D world's structured action (a text tool call, a bad tool): as given
    name = TOOL_NAMES[tool]
    return {"tool": name, "params": action[name]} if name in action else {"tool": name}


def _agent(value: Any, a: int) -> Any:
    return {k: _agent(v, a) for k, v in value.items()} if isinstance(value, dict) else value[a]


def rows_of(value: Any, worlds: Sequence[int]) -> list[Any]:
    """The part of a batched action, reward or info (dicts of arrays, arrays, tuples of text) of each
    of ``worlds``, as plain JSON; every array is converted once for all of them."""
    if isinstance(value, dict):
        columns = {k: rows_of(v, worlds) for k, v in value.items() if not str(k).startswith("_")}
        return [{k: column[i] for k, column in columns.items()} for i in range(len(worlds))]
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
        part = value[np.asarray(worlds)]
        return (np.round(part.astype(np.float64), 4) if part.dtype.kind == "f" else part).tolist()
    return [jsonable(value[b]) for b in worlds]


class EpisodeFile:
    """Episodes written one per line to a JSON Lines file (gzip when its name ends in ``.gz``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = gzip.open(self.path, "at") if self.path.suffix == ".gz" else self.path.open("a")
        self.count = 0

    def write(self, episode: dict[str, Any]) -> None:
        self.file.write(json.dumps(episode, separators=(",", ":")) + "\n")
        self.file.flush()
        self.count += 1

    def close(self) -> None:
        self.file.close()


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """Every episode of a recording file (``.jsonl`` or ``.jsonl.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


class Tape:
    """One episode being recorded: full states in, changes out."""

    def __init__(self, meta: dict[str, Any], header: dict[str, Any], first: dict[str, Any]):
        self.last: dict[str, Any] = {}
        self.episode = {"format": FORMAT, **meta, "world": header, "ticks": [changed(first, self.last)]}
        self.rewards: list[Any] = []
        self.info: dict[str, Any] = {}

    def add(self, state: dict[str, Any], reward: Any = None, info: dict[str, Any] | None = None,
            **events: Any) -> None:
        """One more tick: its state, and its reward, info and events as plain JSON (see :func:`jsonable`)."""
        tick = changed(state, self.last)
        if info is not None:
            if info != self.info:
                tick["info"] = info
            self.info = info
        if reward is not None:
            tick["r"] = reward
            self.rewards.append(reward)
        tick.update((k, v) for k, v in events.items() if v is not None)
        self.episode["ticks"].append(tick)

    def finish(self, error: str | None = None) -> dict[str, Any]:
        rewards = np.array(self.rewards, float) if self.rewards else np.zeros(0)
        total = rewards.sum(0) if rewards.size else 0.0
        self.episode["summary"] = {
            "return": jsonable(total, 4), "length": len(self.episode["ticks"]) - 1,
            "success": bool(self.info.get("success", False)), "score": jsonable(self.info.get("score")),
            "error": error}
        return self.episode


class WorldReader:
    """Reads the state of an env's worlds ``worlds``: a 2D world (through its scenario and scene) or
    a text one (Treasure Hunt: the observation, and the explored tree when ``render_mode="ansi"``)."""

    def __init__(self, env: Any, worlds: Sequence[int] = (0,)):
        self.env, self.worlds = env, list(worlds)
        self.scenario = getattr(env, "scenario", None)
        self.observations: Any = None
        self.turns = np.zeros(max(self.worlds) + 1, int)
        if self.scenario is not None and not isinstance(self.scenario, str):
            self.scene = getattr(env, "scene", None)
            self.state = env.world if isinstance(env, ParallelEnv) else env.state
            self.ticks = TickReader(self.scenario, self.scene, self.worlds)
            self.name = type(self.scenario).__name__.lower().replace("teamcapture", "team_capture")
        else:
            self.state, self.name = None, "treasure_hunt"

    def header(self) -> dict[str, Any]:
        if self.state is None:
            return {"kind": "text", "carried": ["view", "cwd"]}
        return world_header(self.scenario, self.scene)

    def read(self, fresh: np.ndarray) -> list[dict[str, Any]]:
        """The tick of every world read, whole for ``fresh`` ones (a new episode), else its changes."""
        if self.state is not None:
            return self.ticks.read(self.state, fresh)
        self.turns[self.worlds] = np.where(fresh, 0, self.turns[self.worlds] + 1)
        views = self.env.render() if getattr(self.env, "render_mode", None) == "ansi" else None
        ticks = []
        for b in self.worlds:
            observation = self.observations if isinstance(self.observations, str) else self.observations[b]
            tick = {"t": int(self.turns[b]), "obs": observation,
                    "cwd": observation.rpartition("| cwd ")[2].partition(" |")[0]}
            if views is not None:
                tick["view"] = views if isinstance(views, str) else views[b]
            ticks.append(tick)
        return ticks


class _Recorder:
    """What the three wrappers share: the file, the env's worlds, the episodes under way."""

    def _start_recording(self, env: Any, directory: str | Path, compress: bool, source: str,
                         label: str | None, worlds: Sequence[int] = (0,)) -> None:
        self.episodes = EpisodeFile(Path(directory) / (EPISODES_FILE + (".gz" if compress else "")))
        self.reader = WorldReader(env, worlds)
        self.source, self.label = source, label
        self.turn: int | None = None  # the transcript turn behind the next ticks (set by an LLM runner)
        self.tapes: dict[int, Tape] = {}

    def _begin(self, b: int, seed: int | None, tick: dict[str, Any]) -> None:
        meta = {"scenario": self.reader.name, "seed": seed, "source": self.source, "agent": self.label}
        self.tapes[b] = Tape(meta, self.reader.header(), tick)

    def _record(self, b: int, tick: dict[str, Any], action: Any, reward: Any, info: dict[str, Any],
                done: bool) -> None:
        """A tick of world ``b``, with its action, reward and info as plain JSON."""
        tape = self.tapes.get(b)
        if tape is None:
            return
        act = [compact_action(a) for a in action] if isinstance(action, list) else compact_action(action)
        tape.add(tick, reward, info, act=act, turn=self.turn)
        if done:
            self.episodes.write(tape.finish())
            del self.tapes[b]

    def _close_recording(self) -> None:
        self.tapes.clear()  # unfinished episodes are not written
        self.episodes.close()


class RecordEpisodes(_Recorder):
    """Record every episode of ``env`` (a Gymnasium env, vector env or PettingZoo ParallelEnv) to
    ``directory``; see the module docstring. Returns the wrapper of the matching kind."""

    def __new__(cls, env: Any, directory: str | Path, *, compress: bool = False, worlds: int | None = None,
                source: str = "RecordEpisodes", label: str | None = None):
        if cls is not RecordEpisodes:  # one of the three kinds below, being built
            return super().__new__(cls)
        if isinstance(env, VectorEnv):
            return RecordVectorEpisodes(env, directory, compress=compress, worlds=worlds, source=source, label=label)
        if isinstance(env, ParallelEnv):
            return RecordParallelEpisodes(env, directory, compress=compress, source=source, label=label)
        if isinstance(env, gym.Env):
            return RecordSingleEpisodes(env, directory, compress=compress, source=source, label=label)
        raise TypeError(f"RecordEpisodes wraps a Gymnasium Env or VectorEnv or a PettingZoo ParallelEnv, "
                        f"got {type(env).__name__}")


class RecordSingleEpisodes(gym.Wrapper, RecordEpisodes):
    """:class:`RecordEpisodes` of a single Gymnasium env."""

    def __init__(self, env: gym.Env, directory: str | Path, *, compress: bool = False,
                 source: str = "RecordEpisodes", label: str | None = None):
        gym.Wrapper.__init__(self, env)
        self._start_recording(env.unwrapped, directory, compress, source, label)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.reader.observations = obs
        self._begin(0, seed, self.reader.read(ONE)[0])
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.reader.observations = obs
        self._record(0, self.reader.read(NONE)[0], jsonable(action), jsonable(reward, 4), jsonable(info),
                     terminated or truncated)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self._close_recording()
        self.env.close()


class RecordVectorEpisodes(VectorWrapper, RecordEpisodes):
    """:class:`RecordEpisodes` of a vector env, in its first ``worlds`` worlds."""

    def __init__(self, env: VectorEnv, directory: str | Path, *, compress: bool = False, worlds: int | None = None,
                 source: str = "RecordEpisodes", label: str | None = None):
        VectorWrapper.__init__(self, env)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode != AutoresetMode.NEXT_STEP:
            raise ValueError(f"RecordEpisodes records vector envs with autoreset_mode NEXT_STEP, got {mode}: with "
                             "SAME_STEP the last state of an episode is gone before it can be read")
        self.recorded = range(min(worlds or env.num_envs, env.num_envs))
        self._start_recording(env.unwrapped, directory, compress, source, label, self.recorded)
        self.restarting = np.zeros(env.num_envs, bool)  # ended last step: this step resets them

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.reader.observations = obs
        mask = np.asarray((options or {}).get("reset_mask", np.ones(self.num_envs, bool)))
        seeds = seed if isinstance(seed, Sequence) else [None if seed is None else seed + b for b in
                                                         range(self.num_envs)]
        ticks = self.reader.read(mask[self.recorded])
        for b, tick in zip(self.recorded, ticks, strict=True):
            if mask[b]:
                self._begin(b, seeds[b], tick)
        self.restarting[:] = False
        return obs, info

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.reader.observations = obs
        done = np.asarray(terminated | truncated)
        done = done.reshape(self.num_envs, -1).any(1)  # a multi-agent world ends for all its agents at once
        worlds = self.recorded
        ticks = self.reader.read(self.restarting[worlds])
        rows = zip(ticks, rows_of(actions, worlds), rows_of(reward, worlds), rows_of(info, worlds), strict=True)
        for b, (tick, action, world_reward, world_info) in zip(worlds, rows, strict=True):
            if self.restarting[b]:
                self._begin(b, None, tick)
            else:
                self._record(b, tick, action, world_reward, world_info, bool(done[b]))
        self.restarting = done
        return obs, reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self._close_recording()
        self.env.close(**kwargs)


class RecordParallelEpisodes(BaseParallelWrapper, RecordEpisodes):
    """:class:`RecordEpisodes` of a PettingZoo ParallelEnv (rewards and actions in ``possible_agents`` order)."""

    def __init__(self, env: ParallelEnv, directory: str | Path, *, compress: bool = False,
                 source: str = "RecordEpisodes", label: str | None = None):
        BaseParallelWrapper.__init__(self, env)
        self._start_recording(env.unwrapped, directory, compress, source, label)

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        self._begin(0, seed, self.reader.read(ONE)[0])
        return obs, infos

    def step(self, actions: dict[str, Any]):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        agents = self.env.possible_agents
        info = next(iter(infos.values()), {})  # every agent gets the world's info
        done = not self.env.agents
        self._record(0, self.reader.read(NONE)[0],
                     jsonable([actions.get(a) for a in agents] if isinstance(actions, dict) else actions),
                     jsonable([rewards.get(a, 0.0) for a in agents], 4), jsonable(info), done)
        return obs, rewards, terminations, truncations, infos

    def close(self) -> None:
        self._close_recording()
        self.env.close()
