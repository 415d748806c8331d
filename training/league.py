"""The league: the lean PPO learns team capture against a pool of opponents, not only itself.

    arena-train team_capture_v0 --out runs/league     # training/configs/ppo/team_capture.yaml has a league: section

:class:`League` is a vector env over ``team_capture_v0``'s native batch that shows the
learner blue's rows only and plays red itself, each world against the opponent it was
given. The pool (the config's ``league:`` section) holds:

- named agents, anything :func:`~arena_envs.training.common.agent_factory` makes (``scripted``,
  ``random``, a model's path, and ``pretrained`` once it exists);
- frozen snapshots of the learner, one every ``snapshot_every`` agent steps (the newest
  ``max_snapshots`` are drawn), each a deep copy that no update reaches, saved with the
  run as ``league/snapshot_<steps>.pt`` (the Agent's ``state_dict``).

**Sampling rule: prioritised fictitious self-play (PFSP).** Each member ``m`` keeps ``p_m``,
the learner's recent result against it (win 1, draw 0.5, loss 0; an exponential average
with ``rate``, starting at 0.5). A world draws its opponent with probability proportional
to ``max((1 - p_m) ** pfsp_power, min_weight)``: mostly the opponents the learner still
loses to, now and then the rest (``sampling: uniform`` draws every member alike).

An opponent is drawn only when a world's episode starts (at ``reset`` and when the world
autoresets), so the red team of an episode is one opponent with one set of weights from the
first tick to the last (PufferLib's issue #620 let weights change inside an episode).
Every member acts on all its worlds at once: a named agent on the whole batch, a snapshot
on the rows of its worlds; the loop is over the members in play, never over worlds.

:func:`attach` and :func:`after_update` are the trainer's two hooks (``training/ppo.py``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from torch import nn

from arena_envs.team_capture import decision_events, decision_view, join_teams, split_teams, uniform_hash
from arena_envs.training.common import agent_factory, config_section, is_team
from arena_envs.wrappers.flatten import FlatEncoding, merge_agents, split_agents


@dataclass
class LeagueConfig:
    """The ``league:`` section of a config."""

    opponents: list[str] = field(default_factory=lambda: ["scripted", "random"])  # agent_factory names
    snapshot_every: int = 500_000  # agent steps between frozen snapshots of the learner (0: none)
    max_snapshots: int = 8  # the newest this many are drawn; older ones retire
    sampling: str = "pfsp"  # or "uniform"
    pfsp_power: float = 2.0
    min_weight: float = 0.05  # every member keeps at least this weight (before normalising)
    rate: float = 0.05  # the weight of one game in a member's running result
    action_repeat: int = 1  # ticks each of the learner's decisions lasts (at most, with decide_on_events)
    decide_on_events: bool = False  # a decision ends early on team capture's events (see League.step)
    shaping: float = 0.0  # weight of the capture-progress potential added to blue's reward (see League.step)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LeagueConfig:
        league = config_section(config, "league", cls)
        if league.sampling not in ("pfsp", "uniform"):
            raise ValueError(f"league.sampling must be pfsp or uniform, got {league.sampling!r}")
        if league.action_repeat < 1:
            raise ValueError(f"league.action_repeat must be >= 1, got {league.action_repeat}")
        if not league.opponents and not league.snapshot_every:
            raise ValueError("the league needs opponents or snapshots (snapshot_every > 0)")
        return league


class Named:
    """A pool member made by ``agent_factory``: acts on the whole red batch, its worlds are taken."""

    def __init__(self, name: str, agent: Any):
        self.name, self.agent = name, agent

    def act(self, red: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, Any]:
        # on every world, so that a stateful agent (the scripted team) sees its worlds' every tick
        return take(self.agent.act(red), rows)


class Snapshot:
    """A frozen copy of the learner at ``steps``: samples its actions through the run's encoding."""

    def __init__(self, steps: int, net: nn.Module, encoding: FlatEncoding):
        self.name, self.steps, self.encoding = f"snapshot_{steps}", steps, encoding
        self.net = copy.deepcopy(net).requires_grad_(False)  # a copy: the learner's updates never reach it

    @torch.no_grad()
    def act(self, red: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, Any]:
        raw = merge_agents(take(red, rows), red["agent"].shape[1])
        flat = self.net.act(torch.from_numpy(self.encoding.observe(raw)))[0].numpy()
        return split_agents(self.encoding.decode(flat, raw), red["agent"].shape[1])


class League(VectorEnv):
    """Team capture worlds where the learner plays blue and the pool plays red.

    Arrays are blue's: observations and actions (B, N, ...), rewards and ends (B, N).
    ``opponent[b]`` is the index in :attr:`members` of world ``b``'s red team; ``results``
    the running result against each member (see the module doc).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, native: VectorEnv, env_id: str, league: LeagueConfig, encoding: dict[str, Any],
                 seed: int = 0, gamma: float = 0.99):
        if native.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError("the league redraws a world's opponent as its episode ends: it needs SAME_STEP autoreset")
        self.native, self.env_id, self.config = native, env_id, league
        self.repeat, self.gamma = league.action_repeat, gamma
        self.scenario = native.unwrapped.scenario
        self.team = self.scenario.agents_per_team
        self.agents = list(self.scenario.possible_agents[:self.team])  # blue's
        self.num_envs = native.num_envs
        self.potential = np.zeros(self.num_envs)  # of the observation blue acts on, per world
        self.single_observation_space = batch_space(self.scenario.observation_space, self.team)
        self.single_action_space = batch_space(self.scenario.action_space, self.team)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.encoding = FlatEncoding.for_env(native, **encoding)
        self.members: list[Named | Snapshot] = [Named(name, agent_factory(name, env_id, seed)(self))
                                                for name in league.opponents]
        self.results = np.full(len(self.members), 0.5)
        self.games = np.zeros(len(self.members), np.int64)
        self.opponent = np.zeros(self.num_envs, np.int64)
        self.episodes = np.zeros(self.num_envs, np.int64)  # opponents drawn so far, per world
        self.keys = world_keys(seed, self.num_envs)
        self.blue: dict[str, np.ndarray] = {}  # the observations of the last reset or step, per team
        self.red: dict[str, np.ndarray] | None = None
        self.folder: Path | None = None  # where snapshots are saved (set by attach)
        self.next_snapshot = league.snapshot_every

    # -- the pool --------------------------------------------------------------------------

    def drawable(self) -> np.ndarray:
        """Which members may be drawn: every named one and the newest ``max_snapshots`` snapshots."""
        snapshots = np.flatnonzero([isinstance(m, Snapshot) for m in self.members])
        ok = np.ones(len(self.members), bool)
        ok[snapshots[:max(len(snapshots) - self.config.max_snapshots, 0)]] = False
        return ok

    def probabilities(self) -> np.ndarray:
        """The chance of each member to be drawn for a new episode (the module doc's rule)."""
        ok = self.drawable()
        weight = (np.ones(len(self.members)) if self.config.sampling == "uniform"
                  else np.maximum((1.0 - self.results) ** self.config.pfsp_power, self.config.min_weight))
        weight = weight * ok
        return weight / weight.sum()

    def draw(self, worlds: np.ndarray) -> None:
        """New opponents for ``worlds`` (episodes that start now). Each world's draws come from its
        own counter-based stream (its key and episode number), so that a world meets the same
        opponents in any batch, given the same chances."""
        if len(worlds):
            zeros = np.zeros(len(worlds), np.int64)
            u = uniform_hash(self.keys[worlds], self.episodes[worlds], zeros, zeros, np.zeros(1, np.int64))[:, 0]
            cumulative = np.cumsum(self.probabilities())
            self.opponent[worlds] = np.minimum(np.searchsorted(cumulative, u * cumulative[-1], side="right"),
                                               len(self.members) - 1)
            self.episodes[worlds] += 1

    def record(self, worlds: np.ndarray, outcome: np.ndarray) -> None:
        """Fold the learner's results (1 win, 0.5 draw, 0 loss) of ``worlds`` into their opponents' entries."""
        who = self.opponent[worlds]
        games = np.bincount(who, minlength=len(self.members))
        played = games > 0
        mean = np.bincount(who, outcome, minlength=len(self.members))[played] / games[played]
        keep = (1.0 - self.config.rate) ** games[played]  # k games at once: as k updates by their mean
        self.results[played] = keep * self.results[played] + (1.0 - keep) * mean
        self.games += games

    def add_snapshot(self, net: nn.Module, steps: int) -> Snapshot:
        """Freeze ``net`` into the pool; it starts as an even match (0.5)."""
        snapshot = Snapshot(steps, net, self.encoding)
        self.members.append(snapshot)
        self.results = np.append(self.results, 0.5)
        self.games = np.append(self.games, 0)
        return snapshot

    def summary(self) -> dict[str, dict[str, float]]:
        """Each member's running result, games and current chance to be drawn."""
        chance = self.probabilities()
        return {m.name: {"result": float(r), "games": int(g), "chance": float(c)}
                for m, r, g, c in zip(self.members, self.results, self.games, chance, strict=True)}

    # -- the vector env ----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.keys, self.episodes[:] = world_keys(seed, self.num_envs), 0
        obs, info = self.native.reset(seed=seed, options=options)
        self.draw(np.arange(self.num_envs))
        self.blue, self.red = split_teams(obs, self.team)
        self.potential = self.progress_potential(self.blue)
        return self.blue, info

    def step(self, actions: Any):
        """Blue's ``actions`` held for ``action_repeat`` ticks (red acts every tick); rewards are
        summed over the ticks.

        With ``decide_on_events`` a world's decision ends early, on the first tick that brings a
        team capture event (:func:`~arena_envs.team_capture.decision_events`: a point changes
        hands or a blue agent arrives) or ends its episode; the world then pauses (the native
        batch steps only the others) until every world has its next decision due, so that each
        step is one decision per world however long it took. The pretrained agent holds its
        decisions by the same rule (``pretrained.HeldDecisions``).

        Without it, a world whose episode ends on an earlier tick restarts at once and plays
        the rest of the held ticks with blue's stale action and its new opponent: those ticks'
        rewards are dropped (none can be scored so soon after the spawn: a capture takes
        ``capture_ticks``) and its first observation comes that many ticks into the episode."""
        if self.red is None:
            raise RuntimeError("call reset before step")
        n, events = self.team, self.config.decide_on_events
        reward = np.zeros((self.num_envs, n))
        terminated, truncated = np.zeros((2, self.num_envs, n), bool)
        paused = np.zeros(self.num_envs, bool)  # with events: worlds whose next decision is due
        view = decision_view(self.blue) if events else None
        final_obs, final_info = None, None
        for _ in range(self.repeat):
            both = join_teams(actions, self.red_actions())
            obs, r, term, trunc, info = self.native.step(both, ~paused) if events else self.native.step(both)
            self.blue, self.red = split_teams(obs, n)
            live = ~terminated[:, 0] & ~truncated[:, 0]
            reward += r[:, :n] * live[:, None]
            terminated |= term[:, :n] & live[:, None]
            truncated |= trunc[:, :n] & live[:, None]
            ended = (term | trunc)[:, 0] & live
            if ended.any():  # results count against the opponent that played; the next episode draws anew
                worlds = np.flatnonzero(ended)
                margin = info["final_info"]["blue_score"][worlds] - info["final_info"]["red_score"][worlds]
                self.record(worlds, np.sign(margin) * 0.5 + 0.5)
                self.draw(worlds)
                final_obs = self._blue_final(info["final_obs"], worlds, final_obs)
                final_info = merge_rows(final_info, info["final_info"], worlds)
            if events:
                after = decision_view(self.blue)
                paused |= ended | decision_events(view, after)
                if paused.all():
                    break
                view = after
        blue = self.blue
        if self.config.shaping:  # potential-based (Ng et al. 1999): the best policy stays the best
            ended = terminated[:, 0] | truncated[:, 0]
            after = self.progress_potential(blue)
            reward += (self.gamma * np.where(ended, 0.0, after) - self.potential)[:, None]
            self.potential = after
        if final_info is not None:
            mask = final_info["_score"]
            info = {**info, "final_obs": final_obs, "_final_obs": mask, "final_info": final_info, "_final_info": mask}
        else:
            info = {k: v for k, v in info.items() if "final_" not in k}
        return blue, reward, terminated, truncated, info

    def progress_potential(self, blue: dict[str, np.ndarray]) -> np.ndarray:
        """``shaping`` times (blue's capture progress minus red's, summed over the points): a capture
        earns its ``capture_score`` tick by tick as it progresses rather than all at the flip."""
        points = blue["points"][:, 0]  # every blue agent sees its team's progress alike
        return self.config.shaping * (points[..., 5] - points[..., 6]).sum(-1, dtype=np.float64)

    def red_actions(self) -> dict[str, Any]:
        """Red's actions in every world, each from its world's opponent: one call per member in play."""
        out: dict[str, Any] | None = None
        for m in np.unique(self.opponent):
            rows = np.flatnonzero(self.opponent == m)
            acts = self.members[m].act(self.red, rows)
            out = out if out is not None else empty_like(acts, self.num_envs)
            put(out, rows, acts)
        return out

    def _blue_final(self, final_obs: np.ndarray, ended: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Blue's part of the last observations of the worlds ``ended`` (added to ``out``)."""
        out = np.full(self.num_envs, None, dtype=object) if out is None else out
        for i in ended:  # only the worlds that ended this tick
            out[i] = {k: v[:self.team] for k, v in final_obs[i].items()}
        return out

    def close_extras(self, **kwargs: Any) -> None:
        self.native.close()


# -- the trainer's hooks (training/ppo.py) ---------------------------------------------------


def attach(envs: VectorEnv, agent: nn.Module, folder: Path, resume: bool) -> League | None:
    """The league under ``envs``, if any, set up for a run saving to ``folder``; on resume the
    saved snapshots rejoin the pool (copies of ``agent`` given their weights) with their results."""
    league = envs.unwrapped
    if not isinstance(league, League):
        return None
    league.folder = folder
    folder.mkdir(parents=True, exist_ok=True)
    pool = folder / "pool.json"
    if resume and pool.exists():
        saved = json.loads(pool.read_text())
        for name in saved["members"]:
            if name.startswith("snapshot_"):
                net = copy.deepcopy(agent)
                net.load_state_dict(torch.load(folder / f"{name}.pt", weights_only=True))
                league.add_snapshot(net, int(name.removeprefix("snapshot_")))
        league.results = np.array([saved["members"][m.name]["result"] for m in league.members])
        league.games = np.array([saved["members"][m.name]["games"] for m in league.members], np.int64)
    last = max((m.steps for m in league.members if isinstance(m, Snapshot)), default=0)
    league.next_snapshot = last + league.config.snapshot_every
    return league


def after_update(league: League, agent: nn.Module, step: int) -> dict[str, float]:
    """After each update: a snapshot of ``agent`` when one is due (saved with the run), the pool
    written to ``pool.json``; returns the league's columns for the log."""
    if league.config.snapshot_every and step >= league.next_snapshot:
        league.next_snapshot = step + league.config.snapshot_every
        snapshot = league.add_snapshot(agent, step)
        torch.save(snapshot.net.state_dict(), league.folder / f"{snapshot.name}.pt")
    summary = league.summary()
    (league.folder / "pool.json").write_text(json.dumps({"step": step, "members": summary}, indent=2))
    return {f"league/{name}_result": m["result"] for name, m in summary.items() if not name.startswith("snapshot_")}


def make_league(native: VectorEnv, config: dict[str, Any]) -> League:
    """The league a config's ``league:`` section asks for, over ``native`` (team capture, SAME_STEP)."""
    if not is_team(config["env_id"]):
        raise ValueError(f"a league needs a two-team scenario, not {config['env_id']}")
    if int(config.get("num_workers", 1)) > 1:
        raise ValueError("a league plays its snapshots in the trainer's process: num_workers must be 1")
    return League(native, config["env_id"], LeagueConfig.from_config(config), config.get("encoding", {}),
                  int(config["seed"]), float((config.get("ppo") or {}).get("gamma", 0.99)))


def world_keys(seed: int, worlds: int) -> np.ndarray:
    """The keys of the worlds' opponent draws: world ``i`` of a batch seeded ``s`` is keyed ``s + i``,
    as its world is seeded, so that it draws alike in any batch."""
    return (np.uint64(seed) + np.arange(worlds, dtype=np.uint64)) * np.uint64(0x2545F4914F6CDD1D)


# -- trees of action arrays --------------------------------------------------------------------


def merge_rows(merged: dict[str, np.ndarray] | None, info: dict[str, np.ndarray], rows: np.ndarray
               ) -> dict[str, np.ndarray]:
    """Per-world info arrays (with Gymnasium's ``_key`` masks): ``info``'s ``rows`` put into ``merged``."""
    if merged is None:
        merged = {k: np.zeros_like(v) for k, v in info.items()}
    for k, v in info.items():
        merged[k][rows] = v[rows]
    return merged


def take(tree: Any, rows: np.ndarray) -> Any:
    if isinstance(tree, dict):
        return {k: take(v, rows) for k, v in tree.items()}
    return np.asarray(tree)[rows]


def empty_like(tree: Any, size: int) -> Any:
    if isinstance(tree, dict):
        return {k: empty_like(v, size) for k, v in tree.items()}
    return np.zeros((size, *tree.shape[1:]), tree.dtype)


def put(out: Any, rows: np.ndarray, tree: Any) -> None:
    if isinstance(out, dict):
        for k in out:
            put(out[k], rows, tree[k])
    else:
        out[rows] = tree
