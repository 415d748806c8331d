"""Flat, egocentric encodings of the arena's observations and tool actions, for SB3 and friends.

SB3 policies read a ``Box`` (or a ``Dict`` of ``Box``) and emit a ``MultiDiscrete``; the
arena speaks the structured ``Dict`` tool action. :class:`FlatEncoding` translates both
ways on whole batches of numpy arrays; :class:`FlatEnv` and :class:`FlatVectorEnv` apply
it to a single env and to a (native) vector env. One encoding serves every 2D scenario:
it reads the scenario's tables (resources, stations, capture points, ...) by name.

## Action: ``MultiDiscrete``, one component per row (rows of tools not in ``tools`` are left out)

| component | size                             | meaning                                                 |
|-----------|----------------------------------|---------------------------------------------------------|
| `tool`    | ``len(tools)``                   | the tool, from ``tools`` (a subset of the seven)        |
| `move`    | ``directions`` (+ move targets)  | ``move_to``: a step in a direction, or to a target      |
| `speed`   | ``len(speeds)``                  | ``move_to`` speed multiplier                            |
| `collect` | ``targets``                      | ``collect`` the k-th nearest shown resource             |
| `recipe`  | recipes                          | ``craft`` this recipe at the nearest shown station of   |
|           |                                  | its type (scenarios that know their recipes)            |
| `station` | the ``craft`` station entry      | ... at this station row (scenarios that do not)         |
| `token`   | message vocabulary               | ``send_message`` of that token to all teammates         |

``move`` below ``directions`` walks ``step`` units from the agent in compass direction
``move`` (0 is +x, counter-clockwise towards +z), shortened to stay in the world. With
``move_to_targets`` (the default) the values above go to the scenario's targets, in this
order: the ``targets`` nearest shown resources, then stations (with ``targets_by_kind``:
the nearest shown one of each type instead), then every capture point in its fixed
order. With ``detour``, ``move`` walks around hazards: to a waypoint beside the first shown
hazard the straight path would cross (as the scripted forager does), else to its target.
``query_world`` always asks with radius ``query_radius`` (default the maximum)
and no filter; messages go to all teammates.

A shown row is one visible or in the last query result. When fewer than ``k + 1`` are
shown (or none of a type), "the k-th nearest" is an unshown row, which ``move`` reads as
"stay here" and ``collect``/``craft`` as that row (the env answers ``NOT_FOUND`` or
``OUT_OF_RANGE``).
:meth:`FlatEncoding.decode` is exact and deterministic given the observation the action
answers, and leaves the entries of tools not chosen at 0; :meth:`FlatEncoding.encode` is
its inverse on the actions ``decode`` produces.

## Observation: ``Box`` (or, with ``dict_obs=True``, a ``Dict`` of flat ``Box`` for ``MultiInputPolicy``)

The raw observation's entries, in the order of its ``Dict`` space (sorted keys), scaled
to about [-1, 1]. Tables of entities without identity (``resources``, ``hazards``,
``stations``, ``obstacles``) list the nearest shown row first; their offsets and
distances, and those of ``allies``, ``enemies`` and ``points``, are divided by the
perception radius. ``MultiDiscrete`` entries (``last_action``) become one-hots; every
other number is divided by its bound in the raw space (``time_left`` becomes the share of
the episode left). With ``agent_index`` (team scenarios) a last entry ``index`` gives the
agent's number in its team, one-hot: rows are read as agents in order (as
:func:`merge_agents` lays out arrays ``(B, A, ...)`` of whole teams).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from arena_envs.scripted import detour
from arena_envs.world import COLLECT, CRAFT, MOVE_TO, QUERY_WORLD, SEND_MESSAGE, TOOL_NAMES, WorldParams

F32 = np.float32


@dataclass(frozen=True)
class Table:
    """Where the columns of an observation table are."""

    shown: tuple[int, ...]  # a row is shown where one of these is > 0 (none: always shown)
    lengths: tuple[int, ...]  # columns in world units: dx, dz, then the distance or a radius
    nearest_first: bool  # rows have no identity of their own: list them nearest shown first
    kinds: int | None = None  # first column of the kind one-hot

    @property
    def dx(self) -> int:
        return self.lengths[0]


# The tables of the scenarios' observations (arena_envs.world.entity_table / obstacle_table,
# arena_envs.team_capture): allies, enemies and points keep their order, which names them.
TABLES = {
    "resources": Table((0, 1), (2, 3, 4), True, 5),
    "hazards": Table((0, 1), (2, 3, 4), True, 5),
    "stations": Table((0, 1), (2, 3, 4), True, 5),
    "obstacles": Table((0,), (1, 2, 3), True),
    "allies": Table((0,), (1, 2, 3), False),
    "enemies": Table((0,), (1, 2, 3), False),
    "points": Table((), (0, 1, 2), False),
}
MOVE_TARGETS = ("resources", "stations", "points")  # where ``move`` can walk to, in this order
KINDS = {"resources": "resource_types", "stations": "station_types"}  # the params naming each table's kinds


class FlatEncoding:
    """Translate batches between the structured arena spaces and flat, egocentric ones.

    ``observation_space`` and ``action_space`` are one agent's raw spaces and ``params``
    the scenario's rules; the keyword arguments choose the encoding (see the module doc).
    """

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Dict, params: WorldParams, *,
                 tools: Sequence[str] = TOOL_NAMES, directions: int = 8, step: float = 5.0,
                 speeds: Sequence[float] = (1.0,), targets: int = 3, move_to_targets: bool = True,
                 targets_by_kind: bool = False, detour: bool = False, query_radius: float | None = None,
                 dict_obs: bool = False, agent_index: bool = False):
        unknown = set(tools) - set(TOOL_NAMES)
        if unknown or not tools:
            raise ValueError(f"tools must be a non-empty subset of {TOOL_NAMES}, got {list(tools)}")
        if directions < 0 or targets < 1 or step <= 0 or not speeds:
            raise ValueError("directions must be >= 0, targets >= 1, step > 0 and speeds non-empty")
        self.raw_observation_space = observation_space
        self.raw_action_space = action_space
        self.params = params
        self.tools = tuple(t for t in TOOL_NAMES if t in tools)
        self.tool_ids = np.array([TOOL_NAMES.index(t) for t in self.tools])
        self.directions = int(directions)
        self.step = float(step)
        self.speeds = np.asarray(speeds, F32)
        if ((self.speeds <= 0) | (self.speeds > params.max_speed_multiplier)).any():
            raise ValueError(f"speeds must lie in (0, {params.max_speed_multiplier}], got {list(speeds)}")
        self.query_radius = F32(params.query_radius_max if query_radius is None else query_radius)
        self.targets_by_kind = targets_by_kind
        self.detour = bool(detour) and "hazards" in observation_space.spaces
        angle = 2 * np.pi * np.arange(self.directions) / self.directions
        self._unit = np.stack([np.cos(angle), np.sin(angle)], 1).astype(F32)

        # the targets of ``move``, per table: the nearest few shown rows (or the nearest of each
        # kind), or every row of a table whose order names its rows
        obs_keys = observation_space.spaces
        self.move_targets: dict[str, int] = {}
        for key in MOVE_TARGETS if move_to_targets else ():
            if key in obs_keys and obs_keys[key].shape[0]:
                rows = obs_keys[key].shape[0]
                self.move_targets[key] = (rows if not TABLES[key].nearest_first
                                          else len(getattr(params, KINDS[key])) if targets_by_kind
                                          else min(int(targets), rows))
        # ``craft`` goes to the nearest shown station of the recipe's type when the recipes are known
        recipes = getattr(params, "recipes", None)
        self.recipe_station = (np.array([params.station_types.index(r.station) for r in recipes])
                               if recipes and "stations" in obs_keys else None)
        sizes = {"tool": len(self.tools)}
        if "move_to" in self.tools:
            sizes.update(move=self.directions + sum(self.move_targets.values()), speed=len(self.speeds))
            if not sizes["move"]:
                raise ValueError("move_to needs directions >= 1 or targets to move to (move_to_targets)")
        if "collect" in self.tools:
            sizes["collect"] = (min(int(targets), obs_keys["resources"].shape[0]) if "resources" in obs_keys
                                else int(action_space["collect"].n))
        if "craft" in self.tools:
            sizes["recipe"] = int(action_space["craft"].nvec[0])
            if self.recipe_station is None:
                sizes["station"] = int(action_space["craft"].nvec[1])
        if "send_message" in self.tools:
            sizes["token"] = int(action_space["send_message"].nvec[0])
        self.components = tuple(sizes)
        self.action_space = spaces.MultiDiscrete(list(sizes.values()))

        self.dict_obs = dict_obs
        self._scales = {key: self._scale(key, space) for key, space in obs_keys.items()}
        bounds = {key: self._bound(key, space).ravel() for key, space in obs_keys.items()}
        # the agent's number in its team, one-hot: what tells apart teammates that see alike (a
        # shared policy without it sends them all to the same place)
        self.team_size = int(getattr(params, "agents_per_team", 0)) if agent_index else 0
        if agent_index and not self.team_size:
            raise ValueError("agent_index is for team scenarios (params with agents_per_team)")
        if self.team_size:
            bounds["index"] = np.ones(self.team_size, F32)
        if dict_obs:  # one flat box per entry: SB3's MultiInputPolicy expects vectors (or images)
            self.observation_space: spaces.Space = spaces.Dict(
                {key: spaces.Box(-b, b, dtype=F32) for key, b in bounds.items()})
        else:
            bound = np.concatenate(list(bounds.values()))
            self.observation_space = spaces.Box(-bound, bound, dtype=F32)

    @classmethod
    def for_env(cls, env: gym.Env | VectorEnv, **kwargs) -> FlatEncoding:
        """The encoding of an arena env or native vector env (anything with a ``scenario``)."""
        scenario = env.unwrapped.scenario
        return cls(scenario.observation_space, scenario.action_space, scenario.params, **kwargs)

    # -- observations ------------------------------------------------------------------

    def _scale(self, key: str, space: spaces.Space) -> np.ndarray | None:
        """Column multipliers of a box entry: world lengths of tables by the perception radius,
        everything else by its bound."""
        if isinstance(space, spaces.MultiDiscrete):
            return None
        bound = np.maximum(np.abs(space.low), np.abs(space.high))
        scale = np.where(bound > 0, 1 / np.maximum(bound, 1e-12), 1).astype(F32)
        if key in TABLES:
            scale[..., list(TABLES[key].lengths)] = F32(1 / self.params.perception_radius)
        return scale

    def _bound(self, key: str, space: spaces.Space) -> np.ndarray:
        """The largest magnitude of each encoded number of the entry ``key``."""
        if isinstance(space, spaces.MultiDiscrete):
            return np.ones(int(space.nvec.sum()), F32)
        return (np.maximum(np.abs(space.low), np.abs(space.high)) * self._scales[key]).astype(F32)

    def observe(self, obs: dict[str, np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        """Encode a batch of raw observations (arrays with a leading batch axis)."""
        parts = {}
        for key, space in self.raw_observation_space.spaces.items():
            value = obs[key]
            if isinstance(space, spaces.MultiDiscrete):
                value = np.concatenate([np.eye(n, dtype=F32)[value[:, i]] for i, n in enumerate(space.nvec)], 1)
            else:
                if key in TABLES and TABLES[key].nearest_first:
                    value = np.take_along_axis(value, self.row_order(value, key)[..., None], 1)
                value = (value * self._scales[key]).astype(F32, copy=False)
            parts[key] = value.reshape(value.shape[0], -1)
        if self.team_size:  # rows are agents in order (merge_agents), every team of team_size
            parts["index"] = np.eye(self.team_size, dtype=F32)[np.arange(len(value)) % self.team_size]
        return parts if self.dict_obs else np.concatenate(list(parts.values()), 1)

    @staticmethod
    def shown(table: np.ndarray, key: str) -> np.ndarray:
        """Which rows of a batch of tables (B, N, C) are shown."""
        columns = TABLES[key].shown
        if not columns:
            return np.ones(table.shape[:2], bool)
        return (table[..., list(columns)] > 0).any(-1)

    @classmethod
    def row_order(cls, table: np.ndarray, key: str) -> np.ndarray:
        """Row order of a batch of tables (B, N, C): shown rows nearest first, then the rest by
        index; the rows as they are for tables whose order names them."""
        spec = TABLES[key]
        if not spec.nearest_first:
            return np.broadcast_to(np.arange(table.shape[1]), table.shape[:2])
        dx, dz = table[..., spec.dx], table[..., spec.dx + 1]
        distance = table[..., spec.lengths[2]] if key != "obstacles" else np.hypot(dx, dz)
        return np.argsort(np.where(cls.shown(table, key), distance, np.inf), axis=1, kind="stable")

    @staticmethod
    def nearest_of_kind(table: np.ndarray, order: np.ndarray, key: str, kind: np.ndarray):
        """Per world, the nearest shown row of ``kind`` (an int per world, or (B, K) kinds) and
        whether there is one (where not, the nearest row of any kind)."""
        rows = np.arange(len(table))[:, None]
        kind = np.asarray(kind).reshape(len(table), -1)
        ordered = table[rows, order]  # (B, N, C), nearest shown first
        is_kind = np.take_along_axis(ordered[..., TABLES[key].kinds:], kind[:, None, :], 2) > 0  # (B, N, K)
        candidate = is_kind & FlatEncoding.shown(ordered, key)[..., None]
        return order[rows, candidate.argmax(1)], candidate.any(1)  # argmax: the first candidate

    # -- actions -----------------------------------------------------------------------

    def _part(self, action: np.ndarray, name: str) -> np.ndarray:
        return action[:, self.components.index(name)]

    def _orders(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {key: self.row_order(obs[key], key) for key in (*self.move_targets, "resources", "stations")
                if key in obs}

    def _target_rows(self, key: str, obs: dict[str, np.ndarray], order: np.ndarray):
        """The rows (B, count) that ``move`` can walk to in table ``key``, and which are shown."""
        count = self.move_targets[key]
        if TABLES[key].nearest_first and self.targets_by_kind:
            kinds = np.broadcast_to(np.arange(count), (len(order), count))
            return self.nearest_of_kind(obs[key], order, key, kinds)
        rows = order[:, :count]
        return rows, self.shown(np.take_along_axis(obs[key], rows[..., None], 1), key)

    def decode(self, action: np.ndarray, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        """The structured actions (a batch ``Dict``) of flat ``action`` (B, components), answering ``obs``."""
        action = np.asarray(action)
        B = obs["agent"].shape[0]
        if action.shape != (B, len(self.components)):
            raise ValueError(f"flat actions must have shape {(B, len(self.components))}, got {action.shape}")
        if ((action < 0) | (action >= self.action_space.nvec)).any():
            raise ValueError(f"flat actions must lie in [0, {self.action_space.nvec.tolist()})")
        orders = self._orders(obs)
        rows = np.arange(B)
        tool = self.tool_ids[self._part(action, "tool")]
        # entries of tools not chosen stay 0, so that equal decoded actions mean equal effects
        out = {
            "tool": tool,
            "move_to": np.zeros((B, 3), F32),
            "collect": np.zeros(B, np.int64),
            "craft": np.zeros((B, 2), np.int64),
            "query_world": {"radius": np.full((B, 1), self.query_radius, F32), "filter": np.zeros(B, np.int64)},
            "send_message": np.zeros((B, 2), np.int64),
        }
        if "move" in self.components:
            tx, tz = self._move_targets(self._part(action, "move"), obs, orders)
            target = np.stack([tx, tz, self.speeds[self._part(action, "speed")]], 1)
            out["move_to"] = np.where((tool == MOVE_TO)[:, None], target, F32(0))
        if "collect" in self.components:
            collect = self._part(action, "collect")
            row = orders["resources"][rows, collect] if "resources" in orders else collect
            out["collect"] = np.where(tool == COLLECT, row, 0)
        if "recipe" in self.components:
            crafting = tool == CRAFT
            recipe = self._part(action, "recipe")
            out["craft"][:, 0] = np.where(crafting, recipe, 0)
            out["craft"][:, 1] = np.where(crafting, self._craft_station(recipe, obs, orders, action), 0)
        if "token" in self.components:
            out["send_message"][:, 0] = np.where(tool == SEND_MESSAGE, self._part(action, "token"), 0)
        return out

    def _craft_station(self, recipe, obs, orders, action=None) -> np.ndarray:
        """The station row a craft of ``recipe`` goes to."""
        if self.recipe_station is None:
            return self._part(action, "station")
        row, _ = self.nearest_of_kind(obs["stations"], orders["stations"], "stations", self.recipe_station[recipe])
        return row[:, 0]

    def _move_targets(self, move: np.ndarray, obs: dict[str, np.ndarray], orders: dict[str, np.ndarray]):
        """Target x and z of ``move`` components: a step in a direction, or a target (its own
        spot when the target is not shown)."""
        x, z = obs["agent"][:, 0], obs["agent"][:, 1]
        ux, uz = (self._unit[np.minimum(move, self.directions - 1)].T if self.directions
                  else np.zeros((2, len(move)), F32))  # no compass: every ``move`` is a target
        # shorten the step so the target stays where the agent can stand
        room = F32(self.params.half_size - self.params.agent_radius)

        def fit(position, u):  # how far along u the agent can go on this axis
            along = np.abs(u) > 1e-6
            return np.where(along, (np.sign(u) * room - position) / np.where(along, u, 1), np.inf)

        length = np.clip(np.minimum(fit(x, ux), fit(z, uz)), 0, self.step).astype(F32)
        dx, dz = ux * length, uz * length
        rows = np.arange(len(move))
        first = self.directions
        for key, count in self.move_targets.items():
            here = (move >= first) & (move < first + count)
            if here.any():
                target_rows, exists = self._target_rows(key, obs, orders[key])
                k = np.clip(move - first, 0, count - 1)
                table, shown = obs[key][rows, target_rows[rows, k]], exists[rows, k]
                dx = np.where(here, np.where(shown, table[:, TABLES[key].dx], 0), dx)
                dz = np.where(here, np.where(shown, table[:, TABLES[key].dx + 1], 0), dz)
            first += count
        w = F32(self.params.half_size)
        tx, tz = np.clip(x + dx, -w, w), np.clip(z + dz, -w, w)
        if self.detour:  # around the first shown hazard in the way
            hazards = obs["hazards"]
            tx, tz = detour(x, z, tx, tz, hazards[..., 2], hazards[..., 3], self.shown(hazards, "hazards"), self.params)
        return tx, tz

    def encode(self, actions: dict[str, Any], obs: dict[str, np.ndarray]) -> np.ndarray:
        """The flat actions whose :meth:`decode` is ``actions`` (unused components 0).

        Raises ``ValueError`` for an action no flat action decodes to (a tool outside
        ``tools``, a target that is neither a direction step nor a target, ...). Where
        several flat actions decode alike, the one with the lowest ``move`` wins.
        """
        tool = np.asarray(actions["tool"])
        B = tool.shape[0]
        flat = np.zeros((B, len(self.components)), np.int64)
        position = np.minimum(np.searchsorted(self.tool_ids, tool), len(self.tool_ids) - 1)
        if (self.tool_ids[position] != tool).any():
            raise ValueError(f"tools outside {self.tools} have no flat encoding")
        flat[:, self.components.index("tool")] = position
        orders = self._orders(obs)
        rows = np.arange(B)

        def put(name, used, value, problem):
            if (used & problem).any():
                raise ValueError(f"no flat encoding: {name} of {problem.sum()} actions")
            flat[:, self.components.index(name)] = np.where(used, value, 0)

        if "move" in self.components:
            moving = tool == MOVE_TO
            target = np.asarray(actions["move_to"], F32)
            move = np.full(B, -1)
            for m in range(self.action_space.nvec[self.components.index("move")] - 1, -1, -1):  # lowest wins
                tx, tz = self._move_targets(np.full(B, m), obs, orders)
                move = np.where((tx == target[:, 0]) & (tz == target[:, 1]), m, move)
            put("move", moving, move, move < 0)
            speed = self.speeds == target[:, 2:3]
            put("speed", moving, speed.argmax(1), ~speed.any(1))
        if "collect" in self.components:
            size = self.action_space.nvec[self.components.index("collect")]
            row = np.asarray(actions["collect"])
            if "resources" in orders:  # its rank, nearest first (only the chosen tool's entry matters)
                row = np.argsort(orders["resources"], axis=1)[rows, np.clip(row, 0, orders["resources"].shape[1] - 1)]
            put("collect", tool == COLLECT, row, row >= size)
        if "recipe" in self.components:
            craft = np.asarray(actions["craft"])
            recipe = np.clip(craft[:, 0], 0, self.action_space.nvec[self.components.index("recipe")] - 1)
            put("recipe", tool == CRAFT, recipe, recipe != craft[:, 0])
            if self.recipe_station is None:
                put("station", tool == CRAFT, craft[:, 1], np.zeros(B, bool))
            elif ((tool == CRAFT) & (self._craft_station(recipe, obs, orders) != craft[:, 1])).any():
                raise ValueError("no flat encoding: craft at a station other than the nearest of its type")
        if "token" in self.components:
            message = np.asarray(actions["send_message"])
            put("token", tool == SEND_MESSAGE, message[:, 0], message[:, 1] != 0)
        query = actions["query_world"]
        odd = (np.asarray(query["radius"])[:, 0] != self.query_radius) | (np.asarray(query["filter"]) != 0)
        if ((tool == QUERY_WORLD) & odd).any():
            raise ValueError(f"no flat encoding: flat queries use radius {self.query_radius} and no filter")
        return flat


class FlatEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A single arena env seen through a :class:`FlatEncoding` (keyword arguments choose it)."""

    def __init__(self, env: gym.Env, **encoding: Any):
        gym.utils.RecordConstructorArgs.__init__(self, **encoding)
        gym.Wrapper.__init__(self, env)
        self.encoding = FlatEncoding.for_env(env, **encoding)
        self.observation_space = self.encoding.observation_space
        self.action_space = self.encoding.action_space
        self.raw_obs: dict[str, np.ndarray] | None = None  # the last raw observation, batch of one

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs), info

    def step(self, action):
        if self.raw_obs is None:
            raise gym.error.ResetNeeded("call reset before step")
        structured = _row(self.encoding.decode(np.asarray(action)[None], self.raw_obs), 0)
        obs, reward, terminated, truncated, info = self.env.step(structured)
        return self._observe(obs), reward, terminated, truncated, info

    def _observe(self, obs):
        self.raw_obs = {k: np.asarray(v)[None] for k, v in obs.items()}
        return _row(self.encoding.observe(self.raw_obs), 0)


class FlatVectorEnv(VectorWrapper):
    """A vector env of an arena scenario seen through a :class:`FlatEncoding`, batch at once.

    Multi-agent vector envs (arrays ``(B, A, ...)``, such as ``team_capture_v0.vector_env``)
    keep their agent axis: every agent's observation is encoded alike and actions are
    ``(B, A, components)``; ``agent_observation_space`` and ``agent_action_space`` are one
    agent's. Under ``SAME_STEP`` autoreset the last observations in ``info["final_obs"]``
    are encoded too.
    """

    def __init__(self, envs: VectorEnv, **encoding: Any):
        super().__init__(envs)
        self.encoding = FlatEncoding.for_env(envs, **encoding)
        self.agents = len(getattr(envs.unwrapped, "agents", None) or ()) or None  # per world; None: no agent axis
        self.agent_observation_space = self.encoding.observation_space
        self.agent_action_space = self.encoding.action_space
        if self.agents:
            self.single_observation_space = batch_space(self.agent_observation_space, self.agents)
            self.single_action_space = batch_space(self.agent_action_space, self.agents)
        else:
            self.single_observation_space = self.agent_observation_space
            self.single_action_space = self.agent_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.raw_obs: dict[str, np.ndarray] | None = None  # the last raw observations

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        self.raw_obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(self.raw_obs), info

    def step(self, actions):
        if self.raw_obs is None:
            raise gym.error.ResetNeeded("call reset before step")
        flat, raw = merge_agents(np.asarray(actions), self.agents), merge_agents(self.raw_obs, self.agents)
        structured = self.encoding.decode(flat, raw)
        self.raw_obs, reward, terminated, truncated, info = self.env.step(split_agents(structured, self.agents))
        if "final_obs" in info:
            info = {**info, "final_obs": self._encode_final(info["final_obs"], info["_final_obs"])}
        return self._observe(self.raw_obs), reward, terminated, truncated, info

    def _observe(self, obs: dict[str, np.ndarray]):
        return split_agents(self.encoding.observe(merge_agents(obs, self.agents)), self.agents)

    def _encode_final(self, final_obs: np.ndarray, present: np.ndarray) -> np.ndarray:
        """Encode the worlds' last observations (an object array, one raw obs per finished world)."""
        done = np.flatnonzero(present)
        out = np.full(self.num_envs, None, dtype=object)
        if len(done):
            batch = {k: np.stack([final_obs[i][k] for i in done]) for k in final_obs[done[0]]}
            encoded = self._observe(batch)
            for j, i in enumerate(done):
                out[i] = _row(encoded, j)
        return out


def merge_agents(tree: Any, agents: int | None) -> Any:
    """Arrays (B, A, ...) as (B * A, ...): one row per agent (unchanged without an agent axis)."""
    if isinstance(tree, dict):
        return {k: merge_agents(v, agents) for k, v in tree.items()}
    return tree if agents is None else tree.reshape(tree.shape[0] * tree.shape[1], *tree.shape[2:])


def split_agents(tree: Any, agents: int | None) -> Any:
    """The inverse of :func:`merge_agents`."""
    if isinstance(tree, dict):
        return {k: split_agents(v, agents) for k, v in tree.items()}
    return tree if agents is None else tree.reshape(tree.shape[0] // agents, agents, *tree.shape[1:])


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return tree[i]
