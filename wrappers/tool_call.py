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
import numpy as np

from arena_envs.observations import (
    ActionResult,
    EntityInfo,
    HazardInfo,
    Inventory,
    ItemInfo,
    Observation,
    ResourceInfo,
)
from arena_envs.tools import ToolCallError, parse_decision, validate_params
from arena_envs.world import (
    COLLECT,
    CRAFT,
    HAZARD_TYPES,
    INVALID_PARAMS,
    MOVE_TO,
    NOT_FOUND,
    OBSTACLE_KINDS,
    OK,
    QUERY_FILTERS,
    QUERY_INVENTORY,
    QUERY_WORLD,
    RESULT_CODES,
    TOOL_NAMES,
    ToolActions,
)

FOOD = {"berry", "apple", "meal"}


def entity_names(types: list[str], kinds: np.ndarray) -> list[str]:
    """``<Type><n>`` names for a table of entity kinds, numbered per type in row order."""
    seen: dict[str, int] = {}
    names = []
    for kind in kinds:
        type_name = types[int(kind)]
        seen[type_name] = seen.get(type_name, 0) + 1
        names.append(f"{type_name.capitalize()}{seen[type_name]}")
    return names


class ToolCallWrapper(gym.Wrapper):
    """Tool calls in, :class:`Observation` out, for the single-agent arena envs."""

    def __init__(self, env: gym.Env, agent_id: str = "agent_1"):
        super().__init__(env)
        self.arena = env.unwrapped
        if not hasattr(self.arena, "step_tools"):
            raise TypeError(f"ToolCallWrapper needs an arena env, got {type(self.arena).__name__}")
        self.scenario = self.arena.scenario
        self.params = self.scenario.params
        self.agent_id = agent_id
        self._names: dict[str, list[str]] = {}
        self._edge_error: ToolCallError | None = None
        self._last_call: dict[str, Any] = {}

    # -- gymnasium -----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        arrays, info = self.env.reset(seed=seed, options=options)
        slots, s = self.scenario.slots, self.arena.state
        self._names = {
            "resource": entity_names(list(self.params.resource_types), s.ent_kind[0, slots.res]),
            "hazard": entity_names(list(HAZARD_TYPES), s.ent_kind[0, slots.haz]),
            "obstacle": entity_names(list(OBSTACLE_KINDS), s.obst_kind[0]),
        }
        self._edge_error, self._last_call = None, {}
        return self.observation(arrays, info, first=True), info

    def step(self, call: Any):
        actions = ToolActions.idle((1, 1))
        self._last_call, self._edge_error = {}, None
        try:
            decision = parse_decision(call)
            self._last_call = {"tool": decision.tool}
            params = validate_params(decision.tool, decision.params)
            self._last_call.update(params)
            self._encode(actions, decision.tool, params)
        except ToolCallError as err:
            actions.failure[...] = RESULT_CODES.index(err.code.value)
            self._edge_error = err
        arrays, reward, terminated, truncated, info = self.arena.step_tools(actions)
        return self.observation(arrays, info), reward, terminated, truncated, info

    # -- tool call -> arrays -----------------------------------------------------------

    def _encode(self, actions: ToolActions, tool: str, params: dict[str, Any]) -> None:
        index = TOOL_NAMES.index(tool)
        actions.tool[...] = index
        if index == MOVE_TO:
            x, z, w = params["target_x"], params["target_z"], self.params.half_size
            if abs(x) > w or abs(z) > w:
                raise ToolCallError(f"move_to: target ({x:.1f}, {z:.1f}) is outside the world (±{w:g})",
                                    field="target_x" if abs(x) > w else "target_z")
            actions.target_x[...], actions.target_z[...] = x, z
            actions.speed[...] = params["speed"]
        elif index == COLLECT:
            actions.collect_index[...] = self._row("resource", params["target_name"])
        elif index == CRAFT:
            raise ToolCallError(f"craft: no station named '{params['station_name']}' in this world",
                                code="NOT_FOUND", field="station_name")
        elif index == QUERY_WORLD:
            actions.query_radius[...] = params["radius"]
            actions.query_filter[...] = QUERY_FILTERS.index(params["filter_type"] or "all")

    def _row(self, category: str, name: str) -> int:
        names = [n.lower() for n in self._names[category]]
        if name.lower() not in names:
            raise ToolCallError(f"Target '{name}' not found", code="NOT_FOUND", field="target_name")
        return names.index(name.lower())

    # -- arrays -> Observation ---------------------------------------------------------

    def observation(self, arrays: dict[str, np.ndarray], info: dict[str, Any], first: bool = False) -> Observation:
        """The :class:`Observation` of the single agent, from the env's arrays."""
        p, s = self.params, self.arena.state
        x, z = float(s.x[0, 0]), float(s.z[0, 0])

        def rows(table, category, types):
            for row, name in zip(table, self._names[category], strict=False):
                kind = types[int(np.argmax(row[5:5 + len(types)]))]
                yield row, name, kind, (x + float(row[2]), 0.0, z + float(row[3])), float(row[4])

        resources, hazards, queried = [], [], []
        for row, name, kind, pos, dist in rows(arrays["resources"], "resource", p.resource_types):
            if row[0]:
                resources.append(ResourceInfo(name, kind, pos, dist))
            if row[1]:
                queried.append({"name": name, "type": "resource", "resource_type": kind,
                                "position": list(pos), "distance": dist})
        for row, name, kind, pos, dist in rows(arrays["hazards"], "hazard", HAZARD_TYPES):
            damage = p.hazard_entry_damage[HAZARD_TYPES.index(kind)] or p.hazard_damage_per_s[HAZARD_TYPES.index(kind)]
            if row[0]:
                hazards.append(HazardInfo(name, kind, pos, dist, float(damage)))
            if row[1]:
                queried.append({"name": name, "type": "hazard", "hazard_type": kind,
                                "position": list(pos), "distance": dist})
        entities = [EntityInfo(r.name, "resource", r.position, r.distance, {"resource_type": r.type})
                    for r in resources]
        entities += [EntityInfo(h.name, "hazard", h.position, h.distance, {"hazard_type": h.type})
                     for h in hazards]
        for row, name, kind in zip(arrays["obstacles"], self._names["obstacle"], s.obst_kind[0], strict=False):
            if row[0]:
                pos = (x + float(row[1]), 0.0, z + float(row[2]))
                entities.append(EntityInfo(name, "obstacle", pos, float(np.hypot(row[1], row[2])),
                                           {"obstacle_type": OBSTACLE_KINDS[int(kind)], "radius": float(row[3])}))

        counts = s.inventory[0, 0]
        inventory = Inventory(ItemInfo(name, name, int(n)) for name, n in zip(p.item_names, counts, strict=True) if n)
        tool, code = int(s.last_tool[0, 0]), int(s.last_code[0, 0])
        asked = not first and code == OK
        return Observation(
            agent_id=self.agent_id,
            tick=int(s.tick[0]),
            position=(x, 0.0, z),
            velocity=None,
            visible_entities=entities,
            nearby_resources=sorted(resources, key=lambda r: r.distance),
            nearby_hazards=sorted(hazards, key=lambda h: h.distance),
            inventory=inventory,
            health=float(s.health[0, 0]),
            energy=float(s.energy[0, 0]),
            last_action_result=None if first else self._result(tool, code),
            query_result={"entities": sorted(queried, key=lambda e: e["distance"])}
            if asked and tool == QUERY_WORLD else None,
            inventory_details={
                "items": [{"name": i.name, "count": i.quantity, "type": "food" if i.name in FOOD else "material"}
                          for i in inventory],
                "capacity": p.inventory_capacity, "used": int(counts.sum())}
            if asked and tool == QUERY_INVENTORY else None,
            custom={**info, "time_limit": p.max_ticks * p.dt, "ticks_left": p.max_ticks - int(s.tick[0])},
        )

    def _result(self, tool: int, code: int) -> ActionResult:
        name = TOOL_NAMES[tool] if self._edge_error is None else self._last_call.get("tool") or "unknown"
        if code == OK:
            return ActionResult(True, tool=name)
        return ActionResult(False, RESULT_CODES[code], self._message(tool, code), tool=name)

    def _message(self, tool: int, code: int) -> str:
        if self._edge_error is not None:
            return self._edge_error.message
        s, p = self.arena.state, self.params
        target = self._last_call.get("target_name") or ""
        if tool == COLLECT and code == RESULT_CODES.index("OUT_OF_RANGE"):
            return (f"Target '{target}' is {float(s.last_value[0, 0]):.1f} units away, "
                    f"collection range is {p.collect_range:.1f}")
        if tool == COLLECT and code == NOT_FOUND:
            return f"Target '{target}' does not exist or was already collected"
        if code == RESULT_CODES.index("INVENTORY_FULL"):
            return f"Inventory is full ({p.inventory_capacity} items)"
        if code == INVALID_PARAMS:
            return f"{TOOL_NAMES[tool]}: invalid parameters"
        return f"{TOOL_NAMES[tool]} failed: {RESULT_CODES[code]}"


