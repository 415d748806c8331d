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
"""

from __future__ import annotations

import numpy as np

from arena_envs.world import COLLECT, MOVE_TO, NOT_FOUND, OK, QUERY_WORLD, TOOL_NAMES, WorldParams

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
        hr = self.params.hazard_radius
        sx, sz = (tx - x)[:, None], (tz - z)[:, None]
        m = self.memory
        hx, hz = m["haz_x"] - x[:, None], m["haz_z"] - z[:, None]
        seg2 = np.maximum(sx * sx + sz * sz, 1e-6)
        t = np.clip((hx * sx + hz * sz) / seg2, 0.0, 1.0)
        cx, cz = t * sx - hx, t * sz - hz  # from the hazard to the closest point of the path
        gap = np.hypot(cx, cz)
        blocking = m["haz"] & (gap < hr + HAZARD_MARGIN)
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
        limit = self.params.half_size - 1.0
        wx, wz = np.clip(wx, -limit, limit), np.clip(wz, -limit, limit)
        return np.where(blocked, wx, tx), np.where(blocked, wz, tz)


def _first(actions: dict) -> dict:
    """The first action of a batch, unbatched."""
    return {k: _first(v) if isinstance(v, dict) else v[0] for k, v in actions.items()}
