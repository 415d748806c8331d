"""What a replay needs to redraw a 2D world, tick by tick, as small JSON (not frames).

``world_header`` describes what does not change in an episode (the field, the names of
every kind, the legend with its colours); a :class:`TickReader` gives each tick's state:
agents, point entities, obstacles, what each agent did and how it went, and the scene's
own state (capture points, messages, the craft in progress). A tick keeps a carried key
(:data:`CARRIED`) only when it differs from the tick before; the page carries it forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from arena_envs.render.frame import Scene, legend
from arena_envs.world import HAZARD_TYPES, OBSTACLE_KINDS, RESULT_CODES, TOOL_NAMES

FORMAT = "arena-episode/1"
# keys of a tick that hold state (written when changed, carried forward by the reader); every
# other key is an event of that tick only (a tool call, its result, a message, a reward)
CARRIED = ("pos", "target", "health", "alive", "entities", "obstacles", "info", "points", "score",
           "inventory", "craft", "view", "cwd")
_CARRIED = frozenset(CARRIED)


def world_header(scenario: Any, scene: Scene | None = None) -> dict[str, Any]:
    """The parts of a scenario's world that stay the same through an episode."""
    p, slots = scenario.params, scenario.slots
    team = getattr(scenario, "team", None)
    agents = list(getattr(scenario, "possible_agents", None) or ["agent"])
    header = {
        "kind": "world", "half_size": p.half_size, "agent_radius": p.agent_radius, "hazard_radius": p.hazard_radius,
        "view_radius": getattr(scene, "view_radius", p.perception_radius), "agents": agents,
        "teams": None if team is None else [int(t) for t in team],
        "entity_classes": ["resource"] * slots.resources + ["hazard"] * slots.hazards + ["station"] * slots.stations,
        "kinds": {"resource": list(p.resource_types), "hazard": list(HAZARD_TYPES), "station": list(p.station_types),
                  "obstacle": list(OBSTACLE_KINDS)},
        "tools": list(TOOL_NAMES), "results": list(RESULT_CODES),
        "legend": [entry.as_dict() for entry in legend(scenario, scene)],
        "carried": list(CARRIED),
    }
    if hasattr(scene, "describe"):
        header.update(scene.describe(scenario))
    return header


class TickReader:
    """The ticks of worlds ``worlds`` of a batch, read together: every array is gathered and
    rounded for all of them in one numpy call, and a carried key is built only for the worlds
    where it changed since the last :meth:`read` (the others leave it out, as a recording
    keeps it). ``fresh`` worlds (a new episode) get every key."""

    def __init__(self, scenario: Any, scene: Scene | None, worlds: Sequence[int]):
        self.scenario, self.scene = scenario, scene
        self.worlds = np.asarray(worlds, int)
        self.previous: dict[str, np.ndarray] = {}

    def read(self, state: Any, fresh: np.ndarray | None = None) -> list[dict[str, Any]]:
        s, w = state, self.worlds
        n = len(w)
        fresh = np.ones(n, bool) if fresh is None or not self.previous else np.asarray(fresh, bool)
        arrays = {
            "pos": np.round(np.stack([s.x[w], s.z[w]], -1).astype(np.float64), 2),
            "target": np.where(s.moving[w][..., None], np.round(np.stack([s.target_x[w], s.target_z[w]], -1)
                                                                .astype(np.float64), 2), np.nan),
            "health": np.round(s.health[w].astype(np.float64), 1), "alive": s.alive[w].astype(int),
            "entities": np.concatenate([np.round(np.stack([s.ent_x[w], s.ent_z[w]], -1).astype(np.float64), 2),
                                        s.ent_kind[w][..., None], s.ent_alive[w][..., None]], -1),
            "obstacles": np.round(np.stack([s.obst_x[w], s.obst_z[w], s.obst_r[w], s.obst_kind[w]], -1)
                                  .astype(np.float64), 2),
        }
        ticks: list[dict[str, Any]] = [{"t": t} for t in s.tick[w].tolist()]
        for key, value in arrays.items():
            before = self.previous.get(key)
            if before is None:
                new = fresh
            else:
                differs = (value != before) & ~(np.isnan(value) & np.isnan(before)) if key == "target" else \
                    value != before
                new = fresh | differs.reshape(n, -1).any(1)
            self.previous[key] = value
            rows = np.flatnonzero(new)
            if len(rows):
                lists = value[rows].tolist()
                for i, row in zip(rows.tolist(), lists, strict=True):
                    ticks[i][key] = self._as_list(key, row)
        acted = s.acted[w]
        for i in np.flatnonzero(acted.any(1)):
            b, did = w[i], acted[i].tolist()
            ticks[i]["tool"] = [TOOL_NAMES[t] if a else None for t, a in zip(s.last_tool[b].tolist(), did, strict=True)]
            ticks[i]["result"] = [RESULT_CODES[c] if a else None
                                  for c, a in zip(s.last_code[b].tolist(), did, strict=True)]
        if hasattr(self.scene, "record"):
            for i, b in enumerate(w):
                ticks[i].update(self.scene.record(self.scenario, state, int(b)))
        return ticks

    @staticmethod
    def _as_list(key: str, value: list[Any]) -> list[Any]:
        if key == "target":
            return [None if xz[0] != xz[0] else xz for xz in value]  # NaN: not moving
        if key == "entities":
            return [[x, z, int(k), int(a)] for x, z, k, a in value]
        if key == "obstacles":
            return [[x, z, r, int(k)] for x, z, r, k in value if r > 0]
        return value


def world_tick(scenario: Any, state: Any, world: int = 0, scene: Scene | None = None) -> dict[str, Any]:
    """World ``world``'s whole state now, as JSON-ready lists (positions to the centimetre)."""
    return TickReader(scenario, scene, [world]).read(state)[0]


def changed(tick: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """``tick`` without the carried keys whose value is the one in ``last``, which is brought up
    to date (``last`` holds the latest value of every carried key of an episode)."""
    out = {}
    for key, value in tick.items():
        if key in _CARRIED:
            if key in last and last[key] == value:
                continue
            last[key] = value
        out[key] = value
    return out
