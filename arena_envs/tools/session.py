"""One agent of one world, spoken to in tool calls: the heart of the tool-calling layer.

:class:`ToolSession` turns a tool call (a ``Decision``, a dict or raw model output) into
that agent's row of :class:`~arena_envs.world.ToolActions`, and builds the seed's
:class:`~arena_envs.observations.Observation` from the batch's arrays afterwards.
``ToolCallWrapper`` (one env) and ``ToolPool`` (many sessions, one batched step) both
use it, so a call means the same thing everywhere.
"""

from __future__ import annotations

from typing import Any

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

from .decision import parse_decision
from .errors import ToolCallError
from .registry import validate_params

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


class ToolSession:
    """One agent of one world of a batch, spoken to in tool calls.

    It turns a call into that agent's row of :class:`ToolActions` (resolving entity names
    to table rows) and builds its :class:`Observation` from the batch's arrays. The
    wrapper and the pool both use it, so tool calls mean the same thing everywhere.
    """

    def __init__(self, scenario, state, world: int = 0, agent: int = 0, agent_id: str = "agent_1"):
        self.scenario, self.state, self.world, self.agent = scenario, state, world, agent
        self.params = scenario.params
        self.agent_id = agent_id
        self._names: dict[str, list[str]] = {}
        self._edge_error: ToolCallError | None = None
        self._last_call: dict[str, Any] = {}

    def begin(self) -> None:
        """Learn the entity names of a freshly reset world."""
        slots, s, b = self.scenario.slots, self.state, self.world
        self._names = {
            "resource": entity_names(list(self.params.resource_types), s.ent_kind[b, slots.res]),
            "hazard": entity_names(list(HAZARD_TYPES), s.ent_kind[b, slots.haz]),
            "obstacle": entity_names(list(OBSTACLE_KINDS), s.obst_kind[b]),
        }
        self._edge_error, self._last_call = None, {}

    def encode(self, call: Any, actions: ToolActions) -> None:
        """Write ``call`` into this agent's row of ``actions``; a bad call becomes its failure code."""
        self._last_call, self._edge_error = {}, None
        row = (self.world, self.agent)
        try:
            decision = parse_decision(call)
            self._last_call = {"tool": decision.tool}
            params = validate_params(decision.tool, decision.params)
            self._last_call.update(params)
            self._encode(actions, row, decision.tool, params)
        except ToolCallError as err:
            actions.tool[row] = TOOL_NAMES.index("idle")
            actions.failure[row] = RESULT_CODES.index(err.code.value)
            self._edge_error = err

    # -- tool call -> arrays -----------------------------------------------------------

    def _encode(self, actions: ToolActions, row: tuple[int, int], tool: str, params: dict[str, Any]) -> None:
        index = TOOL_NAMES.index(tool)
        actions.tool[row] = index
        if index == MOVE_TO:
            x, z, w = params["target_x"], params["target_z"], self.params.half_size
            if abs(x) > w or abs(z) > w:
                raise ToolCallError(f"move_to: target ({x:.1f}, {z:.1f}) is outside the world (±{w:g})",
                                    field="target_x" if abs(x) > w else "target_z")
            actions.target_x[row], actions.target_z[row] = x, z
            actions.speed[row] = params["speed"]
        elif index == COLLECT:
            actions.collect_index[row] = self._row("resource", params["target_name"])
        elif index == CRAFT:
            raise ToolCallError(f"craft: no station named '{params['station_name']}' in this world",
                                code="NOT_FOUND", field="station_name")
        elif index == QUERY_WORLD:
            actions.query_radius[row] = params["radius"]
            actions.query_filter[row] = QUERY_FILTERS.index(params["filter_type"] or "all")

    def _row(self, category: str, name: str) -> int:
        names = [n.lower() for n in self._names[category]]
        if name.lower() not in names:
            raise ToolCallError(f"Target '{name}' not found", code="NOT_FOUND", field="target_name")
        return names.index(name.lower())

    # -- arrays -> Observation ---------------------------------------------------------

    def observation(self, arrays: dict[str, np.ndarray], info: dict[str, Any], first: bool = False) -> Observation:
        """The :class:`Observation` from this world's observation arrays and info."""
        p, s, b, a = self.params, self.state, self.world, self.agent
        x, z = float(s.x[b, a]), float(s.z[b, a])

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
        for row, name, kind in zip(arrays["obstacles"], self._names["obstacle"], s.obst_kind[b], strict=False):
            if row[0]:
                pos = (x + float(row[1]), 0.0, z + float(row[2]))
                entities.append(EntityInfo(name, "obstacle", pos, float(np.hypot(row[1], row[2])),
                                           {"obstacle_type": OBSTACLE_KINDS[int(kind)], "radius": float(row[3])}))

        counts = s.inventory[b, a]
        inventory = Inventory(ItemInfo(name, name, int(n)) for name, n in zip(p.item_names, counts, strict=True) if n)
        tool, code = int(s.last_tool[b, a]), int(s.last_code[b, a])
        asked = not first and code == OK
        return Observation(
            agent_id=self.agent_id,
            tick=int(s.tick[b]),
            position=(x, 0.0, z),
            velocity=None,
            visible_entities=entities,
            nearby_resources=sorted(resources, key=lambda r: r.distance),
            nearby_hazards=sorted(hazards, key=lambda h: h.distance),
            inventory=inventory,
            health=float(s.health[b, a]),
            energy=float(s.energy[b, a]),
            last_action_result=None if first else self._result(tool, code),
            query_result={"entities": sorted(queried, key=lambda e: e["distance"])}
            if asked and tool == QUERY_WORLD else None,
            inventory_details={
                "items": [{"name": i.name, "count": i.quantity, "type": "food" if i.name in FOOD else "material"}
                          for i in inventory],
                "capacity": p.inventory_capacity, "used": int(counts.sum())}
            if asked and tool == QUERY_INVENTORY else None,
            custom={**info, "time_limit": p.max_ticks * p.dt, "ticks_left": p.max_ticks - int(s.tick[b])},
        )

    def _result(self, tool: int, code: int) -> ActionResult:
        name = TOOL_NAMES[tool] if self._edge_error is None else self._last_call.get("tool") or "unknown"
        if code == OK:
            return ActionResult(True, tool=name)
        return ActionResult(False, RESULT_CODES[code], self._message(tool, code), tool=name)

    def _message(self, tool: int, code: int) -> str:
        if self._edge_error is not None:
            return self._edge_error.message
        s, p = self.state, self.params
        target = self._last_call.get("target_name") or ""
        if tool == COLLECT and code == RESULT_CODES.index("OUT_OF_RANGE"):
            return (f"Target '{target}' is {float(s.last_value[self.world, self.agent]):.1f} units away, "
                    f"collection range is {p.collect_range:.1f}")
        if tool == COLLECT and code == NOT_FOUND:
            return f"Target '{target}' does not exist or was already collected"
        if code == RESULT_CODES.index("INVENTORY_FULL"):
            return f"Inventory is full ({p.inventory_capacity} items)"
        if code == INVALID_PARAMS:
            return f"{TOOL_NAMES[tool]}: invalid parameters"
        return f"{TOOL_NAMES[tool]} failed: {RESULT_CODES[code]}"




