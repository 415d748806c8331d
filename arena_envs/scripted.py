"""Scripted baselines that act through the same observations and actions as any agent.

:class:`ScriptedForager` plays Foraging-v0 on a whole batch at once::

    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=64)
    forager = ScriptedForager()
    obs, info = envs.reset(seed=0)
    while True:
        obs, reward, terminated, truncated, info = envs.step(forager.act(obs))

It asks ``query_world`` once per episode for the whole map, remembers what it learned,
walks to the nearest remembered resource, steps around known hazards on the way, and
collects within range. It works unchanged for a single env (unbatched observations).

:class:`ScriptedCrafter` plays Crafting-v0 the same way, planning from the recipe table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from arena_envs.world import COLLECT, CRAFT, MOVE_TO, NOT_FOUND, OK, QUERY_WORLD, TOOL_NAMES, WorldParams

if TYPE_CHECKING:
    from arena_envs.crafting import CraftingParams

HAZARD_MARGIN = 0.6  # how far outside a hazard's radius the path must stay
DETOUR_MARGIN = 1.2  # how far outside it the detour waypoint sits


def empty_actions(batch: int, resources: int = 1) -> dict:
    """A batch of ``idle`` actions with every entry present."""
    return {
        "tool": np.full(batch, TOOL_NAMES.index("idle"), np.int64),
        "move_to": np.tile(np.array([0.0, 0.0, 1.0], np.float32), (batch, 1)),
        "collect": np.zeros(batch, np.int64),
        "craft": np.zeros((batch, 2), np.int64),
        "query_world": {"radius": np.full((batch, 1), 20.0, np.float32), "filter": np.zeros(batch, np.int64)},
        "send_message": np.zeros((batch, 2), np.int64),
    }


class ScriptedForager:
    """Nearest remembered resource first, around known hazards, for a batch of worlds.

    ``params`` must be the env's (for ``max_ticks``, ranges and the hazard radius).
    """

    def __init__(self, params: WorldParams | None = None):
        from arena_envs.foraging import ForagingParams

        self.params = params or ForagingParams()
        self.memory: dict[str, np.ndarray] | None = None

    def act(self, obs: dict) -> dict:
        """Actions for a batch of observations (or one unbatched observation)."""
        single = obs["agent"].ndim == 1
        if single:
            obs = {k: v[None] for k, v in obs.items()}
        m = self._remember(obs)
        B = obs["agent"].shape[0]
        x, z = obs["agent"][:, 0], obs["agent"][:, 1]
        rows = np.arange(B)

        dist = np.where(m["res"], np.hypot(m["res_x"] - x[:, None], m["res_z"] - z[:, None]), np.inf)
        target = dist.argmin(1)
        nearest = dist[rows, target]
        have_target = np.isfinite(nearest)
        collect = have_target & (nearest <= self.params.collect_range - 0.1)
        move = have_target & ~collect
        ask = ~have_target & ~m["asked"]
        tx, tz = self._detour(x, z, m["res_x"][rows, target], m["res_z"][rows, target])

        actions = empty_actions(B)
        actions["tool"][collect] = COLLECT
        actions["tool"][move] = MOVE_TO
        actions["tool"][ask] = QUERY_WORLD
        actions["collect"][:] = target
        actions["move_to"][:, 0] = tx
        actions["move_to"][:, 1] = tz
        actions["query_world"]["radius"][:] = self.params.query_radius_max
        m["asked"] |= ask
        m["last_collect"] = target
        if single:
            return _first(actions)
        return actions

    def _remember(self, obs: dict) -> dict[str, np.ndarray]:
        """Update the map of resources and hazards seen or queried so far."""
        res, haz = obs["resources"], obs["hazards"]
        if self.memory is None or self.memory["res"].shape != res.shape[:2]:
            self.memory = {
                "res": np.zeros(res.shape[:2], bool), "res_x": np.zeros(res.shape[:2], np.float32),
                "res_z": np.zeros(res.shape[:2], np.float32),
                "haz": np.zeros(haz.shape[:2], bool), "haz_x": np.zeros(haz.shape[:2], np.float32),
                "haz_z": np.zeros(haz.shape[:2], np.float32),
                "asked": np.zeros(res.shape[0], bool), "last_collect": np.zeros(res.shape[0], np.intp),
            }
        m = self.memory
        fresh = obs["time_left"][:, 0] >= self.params.max_ticks  # first observation of an episode
        for key in ("res", "haz", "asked"):
            m[key][fresh] = False

        x, z = obs["agent"][:, 0:1], obs["agent"][:, 1:2]
        for table, key in ((res, "res"), (haz, "haz")):
            seen = (table[..., 0] > 0) | (table[..., 1] > 0)
            np.copyto(m[key + "_x"], x + table[..., 2], where=seen)
            np.copyto(m[key + "_z"], z + table[..., 3], where=seen)
            m[key] |= seen
        # a resource just collected, or found gone, is forgotten
        tool, code = obs["last_action"][:, 0], obs["last_action"][:, 1]
        gone = np.flatnonzero(~fresh & (tool == COLLECT) & ((code == OK) | (code == NOT_FOUND)))
        m["res"][gone, m["last_collect"][gone]] = False
        return m

    def _detour(self, x, z, tx, tz):
        """The point to walk to: the target, or a waypoint beside the first hazard in the way."""
        m = self.memory
        return detour(x, z, tx, tz, m["haz_x"] - x[:, None], m["haz_z"] - z[:, None], m["haz"], self.params)


def detour(x, z, tx, tz, hx, hz, known, params: WorldParams):
    """Where to walk, from (x, z) towards (tx, tz) (arrays (B,)), past hazards at offsets (hx, hz)
    from the walker ((B, H), where ``known``): the target itself, or a waypoint beside the first
    hazard whose radius (plus a margin) the straight path would cross."""
    hr = params.hazard_radius
    sx, sz = (tx - x)[:, None], (tz - z)[:, None]
    seg2 = np.maximum(sx * sx + sz * sz, 1e-6)
    t = np.clip((hx * sx + hz * sz) / seg2, 0.0, 1.0)
    cx, cz = t * sx - hx, t * sz - hz  # from the hazard to the closest point of the path
    gap = np.hypot(cx, cz)
    blocking = known & (gap < hr + HAZARD_MARGIN)
    first = np.where(blocking, t, np.inf).argmin(1)
    rows = np.arange(len(x))
    blocked = blocking[rows, first]
    # step out sideways from the hazard (perpendicular to the path when dead centre)
    ox, oz, g = cx[rows, first], cz[rows, first], gap[rows, first]
    length = np.sqrt(seg2[:, 0])
    centred = g < 1e-3
    ox = np.where(centred, -sz[:, 0] / length, ox / np.maximum(g, 1e-6))
    oz = np.where(centred, sx[:, 0] / length, oz / np.maximum(g, 1e-6))
    wx = x + hx[rows, first] + ox * (hr + DETOUR_MARGIN)
    wz = z + hz[rows, first] + oz * (hr + DETOUR_MARGIN)
    limit = params.half_size - 1.0
    wx, wz = np.clip(wx, -limit, limit), np.clip(wz, -limit, limit)
    return np.where(blocked, wx, tx), np.where(blocked, wz, tz)


class ScriptedCrafter:
    """Plans from the recipe table and works the chain up to the goal, for a batch of worlds.

    Each step it expands the goal down the recipes into what is still missing (what one goal
    needs minus what is carried or being made). A recipe whose output is missing and whose
    inputs are all carried is crafted at the nearest known station of its type; otherwise
    it walks to the nearest remembered resource of a missing kind and collects it. It asks
    ``query_world`` for the whole map once per episode, and again from the centre of the
    world if something it needs was out of reach. ``params`` must be the env's.

        envs = gym.make_vec("arena_envs/Crafting-v0", num_envs=64, layout="random")
        crafter = ScriptedCrafter(envs.unwrapped.scenario.params)
        obs, info = envs.reset(seed=0)
        obs, reward, terminated, truncated, info = envs.step(crafter.act(obs))
    """

    def __init__(self, params: CraftingParams | None = None):
        from arena_envs.crafting import CraftingParams, recipe_table
        from arena_envs.tick import resource_items

        self.params = params or CraftingParams()
        p = self.params
        self.recipes = recipe_table(p)
        self.resource_items = resource_items(p)
        self.goal = p.item_names.index(p.goal)
        # the recipe making each item (raw materials have none), and the items ordered so that
        # every item comes before the inputs it is made from
        self.maker = {}
        for k, r in enumerate(p.recipes):
            if r.output not in p.resource_types:
                self.maker.setdefault(self.recipes.output[k], k)
        self.order: list[int] = []

        def visit(item: int) -> None:
            k = self.maker.get(item)
            for i in (np.flatnonzero(self.recipes.inputs[k]) if k is not None else ()):
                if i not in self.order:
                    visit(i)
            self.order.insert(0, item)

        visit(self.goal)
        self.memory: dict[str, np.ndarray] | None = None

    def act(self, obs: dict) -> dict:
        """Actions for a batch of observations (or one unbatched observation)."""
        single = obs["agent"].ndim == 1
        if single:
            obs = {k: v[None] for k, v in obs.items()}
        p, rec = self.params, self.recipes
        m = self._remember(obs)
        B = obs["agent"].shape[0]
        rows = np.arange(B)
        x, z = obs["agent"][:, 0], obs["agent"][:, 1]
        missing = self._missing(obs)
        busy = obs["crafting"][:, :rec.size].any(1)

        # a craft is ready when its output is missing and every input is carried
        ready = (missing[:, rec.output] > 0) & (obs["craftable"] > 0)
        recipe = ready.argmax(1)
        st_dist = np.where(m["st"] & (m["st_kind"] == rec.station[recipe][:, None]),
                           np.hypot(m["st_x"] - x[:, None], m["st_z"] - z[:, None]), np.inf)
        station = st_dist.argmin(1)
        to_station = ready.any(1) & np.isfinite(st_dist[rows, station])
        craft = to_station & (st_dist[rows, station] <= p.craft_range - 0.5)

        wanted = missing[:, self.resource_items] > 0  # (B, resource types)
        res_dist = np.where(m["res"] & wanted[rows[:, None], m["res_kind"]],
                            np.hypot(m["res_x"] - x[:, None], m["res_z"] - z[:, None]), np.inf)
        target = res_dist.argmin(1)
        gather = ~to_station & np.isfinite(res_dist[rows, target])
        collect = gather & (res_dist[rows, target] <= p.collect_range - 0.1)

        stuck = ~busy & ~to_station & ~gather  # nothing known to do: look around
        ask = stuck & (~m["asked"] | (~m["asked_centre"] & (np.hypot(x, z) < 1.0)))
        to_centre = stuck & ~ask & ~m["asked_centre"]

        actions = empty_actions(B)
        tool = actions["tool"]
        tool[to_station] = MOVE_TO
        tool[craft] = CRAFT
        tool[gather] = MOVE_TO
        tool[collect] = COLLECT
        tool[to_centre] = MOVE_TO
        tool[ask] = QUERY_WORLD
        tool[busy] = TOOL_NAMES.index("idle")
        actions["move_to"][:, 0] = np.where(to_station, m["st_x"][rows, station],
                                            np.where(gather, m["res_x"][rows, target], 0.0))
        actions["move_to"][:, 1] = np.where(to_station, m["st_z"][rows, station],
                                            np.where(gather, m["res_z"][rows, target], 0.0))
        actions["collect"][:] = target
        actions["craft"][:, 0] = recipe
        actions["craft"][:, 1] = station
        actions["query_world"]["radius"][:] = p.query_radius_max
        m["asked_centre"] |= ask & m["asked"]
        m["asked"] |= ask
        m["last_collect"] = np.where(collect, target, -1)
        return _first(actions) if single else actions

    def _missing(self, obs: dict) -> np.ndarray:
        """(B, I): units of each item one goal still needs beyond what is carried or being made."""
        rec = self.recipes
        held = obs["inventory"].astype(np.int64)
        making = obs["crafting"][:, :rec.size] > 0
        held += (making * rec.count) @ np.eye(len(held[0]), dtype=np.int64)[rec.output]
        need = np.zeros_like(held)
        need[:, self.goal] = 1
        for item in self.order:  # every consumer of an item is expanded before the item itself
            short = np.maximum(need[:, item] - held[:, item], 0)
            k = self.maker.get(item)
            if k is not None:
                need += -(-short // rec.count[k])[:, None] * rec.inputs[k]
        return np.maximum(need - held, 0)

    def _remember(self, obs: dict) -> dict[str, np.ndarray]:
        """Update the map of resources and stations seen or queried so far."""
        res, st = obs["resources"], obs["stations"]
        n_res, n_st = len(self.params.resource_types), len(self.params.station_types)
        B = res.shape[0]
        if self.memory is None or self.memory["res"].shape != res.shape[:2]:
            self.memory = {
                "res": np.zeros(res.shape[:2], bool), "res_kind": np.zeros(res.shape[:2], np.intp),
                "res_x": np.zeros(res.shape[:2], np.float32), "res_z": np.zeros(res.shape[:2], np.float32),
                "st": np.zeros(st.shape[:2], bool), "st_kind": np.zeros(st.shape[:2], np.intp),
                "st_x": np.zeros(st.shape[:2], np.float32), "st_z": np.zeros(st.shape[:2], np.float32),
                "asked": np.zeros(B, bool), "asked_centre": np.zeros(B, bool),
                "last_collect": np.full(B, -1, np.intp),
            }
        m = self.memory
        fresh = obs["time_left"][:, 0] >= self.params.max_ticks  # first observation of an episode
        for key in ("res", "st", "asked", "asked_centre"):
            m[key][fresh] = False

        x, z = obs["agent"][:, 0:1], obs["agent"][:, 1:2]
        for table, key, n in ((res, "res", n_res), (st, "st", n_st)):
            seen = (table[..., 0] > 0) | (table[..., 1] > 0)
            np.copyto(m[key + "_x"], x + table[..., 2], where=seen)
            np.copyto(m[key + "_z"], z + table[..., 3], where=seen)
            np.copyto(m[key + "_kind"], table[..., 5:5 + n].argmax(-1), where=seen)
            m[key] |= seen
        # a resource just collected, or found gone, is forgotten
        code = obs["last_action"][:, 1]
        gone = np.flatnonzero(~fresh & (m["last_collect"] >= 0) & ((code == OK) | (code == NOT_FOUND)))
        m["res"][gone, m["last_collect"][gone]] = False
        return m


def _first(actions: dict) -> dict:
    """The first action of a batch, unbatched."""
    return {k: _first(v) if isinstance(v, dict) else v[0] for k, v in actions.items()}


class ScriptedCaptureTeam:
    """Team Capture: one team splits over the nearest points it does not own, and says so.

    ``act(obs)`` takes one team's observations, arrays (B, N, ...) (cut from a vector env's
    with :func:`arena_envs.team_capture.split_teams`, or (N, ...) for one world) and returns
    that team's actions of the same shape::

        envs = team_capture_v0.vector_env(num_envs=64)
        blue, red = ScriptedCaptureTeam(envs.scenario.params), ScriptedCaptureTeam(envs.scenario.params)
        obs, info = envs.reset(seed=0)
        while True:
            blue_obs, red_obs = split_teams(obs, envs.scenario.agents_per_team)
            obs, *_ = envs.step(join_teams(blue.act(blue_obs), red.act(red_obs)))

    Every agent heads for the nearest point its team does not own that no lower-numbered
    teammate has claimed, and claims it with ``send_message`` (token = point index + 1, to
    all) on every tick it is not giving a new ``move_to``, so teammates in range pick other
    points; with none left it doubles up. With every point owned it guards the nearest one
    the enemy is taking, and otherwise stays put.
    """

    CLAIM_TICKS = 20  # how long a teammate's announcement keeps a point claimed
    ARRIVED = 1.0  # how near the point's centre counts as there
    SEND_MESSAGE = TOOL_NAMES.index("send_message")
    IDLE = TOOL_NAMES.index("idle")

    def __init__(self, params: WorldParams | None = None):
        from arena_envs.team_capture import TeamCaptureParams

        self.params = params or TeamCaptureParams()
        points = len(self.params.capture_points)
        if self.params.message_vocab_size < points + 1:
            raise ValueError(f"the scripted team needs a message vocabulary of at least {points + 1} tokens")
        self.target: np.ndarray | None = None  # (B, N) the point each agent is heading for, -1 none

    def act(self, obs: dict) -> dict:
        """Actions for one team's observations (B, N, ...), or (N, ...) for one world."""
        single = obs["agent"].ndim == 2
        if single:
            obs = {k: v[None] for k, v in obs.items()}
        points, agent = obs["points"], obs["agent"]
        B, N, P = points.shape[:3]
        if self.target is None or self.target.shape != (B, N):
            self.target = np.full((B, N), -1)
        self.target[obs["time_left"][..., 0] >= self.params.max_ticks] = -1  # a new episode

        dist = points[..., 2]
        wanted = points[..., 3] == 0  # not ours
        defend = (points[..., 3] > 0) & (points[..., 6] > 0)  # ours, and the enemy is taking it
        claimed = self._claimed(obs["messages"], P)
        # cheapest first: a free point we lack, one the enemy is taking from us, one a teammate claimed
        cost = dist + np.select([wanted & ~claimed, defend, wanted], [0.0, 100.0, 200.0], np.inf)
        choice = np.where(np.isfinite(cost.min(-1)), cost.argmin(-1), -1)

        rows, agents = np.arange(B)[:, None], np.arange(N)
        chosen = np.maximum(choice, 0)
        goal_x = agent[..., 0] + points[rows, agents, chosen, 0]
        goal_z = agent[..., 1] + points[rows, agents, chosen, 1]
        away = dist[rows, agents, chosen] > self.ARRIVED
        moving = agent[..., 3] > 0
        move = (choice >= 0) & ((choice != self.target) | (away & ~moving))
        self.target = choice

        actions = {
            "tool": np.where(move, MOVE_TO, np.where(choice >= 0, self.SEND_MESSAGE, self.IDLE)).astype(np.int64),
            "move_to": np.stack([goal_x, goal_z, np.ones((B, N), np.float32)], -1).astype(np.float32),
            "collect": np.zeros((B, N), np.int64),
            "craft": np.zeros((B, N, 2), np.int64),
            "query_world": {"radius": np.full((B, N, 1), 20.0, np.float32), "filter": np.zeros((B, N), np.int64)},
            "send_message": np.stack([chosen + 1, np.zeros((B, N), np.int64)], -1).astype(np.int64),
        }
        if single:
            return _first(actions)
        return actions

    def _claimed(self, messages: np.ndarray, points: int) -> np.ndarray:
        """(B, N, P): points a lower-numbered teammate announced lately (messages (B, N, N, 4))."""
        N = messages.shape[1]
        sender, token, age = messages[..., 0], messages[..., 1], messages[..., 2]
        lower = np.arange(N)[None, :] < np.arange(N)[:, None]  # (me, teammate): teammate numbered lower
        fresh = (sender > 0) & (age <= self.CLAIM_TICKS) & lower
        said = token[..., None] - 1 == np.arange(points)  # (B, N, N, P)
        return (said & fresh[..., None]).any(2)
