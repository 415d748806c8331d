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
    RecipeInfo,
    ResourceInfo,
    StationInfo,
)
from arena_envs.world import (
    BUSY,
    COLLECT,
    CRAFT,
    HAZARD_TYPES,
    INVALID_PARAMS,
    INVENTORY_FULL,
    MISSING_MATERIALS,
    MOVE_TO,
    NOT_FOUND,
    OBSTACLE_KINDS,
    OK,
    OUT_OF_RANGE,
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
    """``<Type><n>`` names for a table of entity kinds, numbered per type in row order
    (``iron_ore`` becomes ``IronOre1``)."""
    seen: dict[str, int] = {}
    names = []
    for kind in kinds:
        type_name = types[int(kind)]
        seen[type_name] = seen.get(type_name, 0) + 1
        names.append("".join(word.capitalize() for word in type_name.split("_")) + str(seen[type_name]))
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
        self.recipes = tuple(getattr(self.params, "recipes", ()))  # crafting scenarios have recipes
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
            "station": entity_names(list(self.params.station_types), s.ent_kind[b, slots.st]),
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
            # an unknown name becomes the row past its table: the world answers NOT_FOUND, after
            # BUSY, and counts the attempt like any other craft
            recipes = [r.name.lower() for r in self.recipes]
            stations = [n.lower() for n in self._names["station"]]
            item, station = params["item_name"].lower(), params["station_name"].lower()
            actions.recipe[row] = recipes.index(item) if item in recipes else len(recipes)
            actions.station[row] = stations.index(station) if station in stations else len(stations)
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
        for row, name, kind, pos, dist in rows(arrays.get("hazards", ()), "hazard", HAZARD_TYPES):
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
        stations = []
        for row, name, kind, pos, dist in rows(arrays.get("stations", ()), "station", p.station_types):
            in_use = bool(row[-1])
            if row[0]:
                stations.append(StationInfo(name, kind, pos, dist, in_use))
                entities.append(EntityInfo(name, "station", pos, dist, {"station_type": kind, "in_use": in_use}))
            if row[1]:
                queried.append({"name": name, "type": "station", "station_type": kind,
                                "position": list(pos), "distance": dist, "in_use": in_use})
        for row, name, kind in zip(arrays.get("obstacles", ()), self._names["obstacle"], s.obst_kind[b],
                                   strict=False):
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
            nearby_stations=sorted(stations, key=lambda st: st.distance),
            available_recipes={r.name: RecipeInfo(r.name, dict(r.inputs), r.station, r.ticks) for r in self.recipes},
            inventory=inventory,
            health=float(s.health[b, a]),
            energy=float(s.energy[b, a]),
            last_action_result=None if first else self._result(tool, code),
            query_result={"entities": sorted(queried, key=lambda e: e["distance"])}
            if asked and tool == QUERY_WORLD else None,
            inventory_details={
                "items": [{"name": i.name, "count": i.quantity, "type": self._item_type(i.name)} for i in inventory],
                "capacity": p.inventory_capacity, "used": int(counts.sum())}
            if asked and tool == QUERY_INVENTORY else None,
            custom={**info, "time_limit": p.max_ticks * p.dt, "ticks_left": p.max_ticks - int(s.tick[b]),
                    **self._crafting_status()},
        )

    def _item_type(self, name: str) -> str:
        if name in FOOD:
            return "food"
        return "crafted" if any(r.output == name for r in self.recipes) else "material"

    def _crafting_status(self) -> dict[str, Any]:
        """The goal and the craft in progress (None when idle), for scenarios with recipes."""
        if not self.recipes:
            return {}
        s, b, a = self.state, self.world, self.agent
        left = int(s.craft_left[b, a])
        crafting = None
        if left:
            recipe = self.recipes[int(s.craft_recipe[b, a])]
            crafting = {"item": recipe.output, "recipe": recipe.name,
                        "station": self._names["station"][int(s.craft_station[b, a])],
                        "ticks_left": left, "progress": round(1.0 - left / recipe.ticks, 4)}
        return {"goal": self.params.goal, "crafting": crafting}

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
        if code == BUSY:
            return self._busy_message()
        if tool == CRAFT:
            return self._craft_message(code)
        if code == RESULT_CODES.index("INVENTORY_FULL"):
            return f"Inventory is full ({p.inventory_capacity} items)"
        if code == INVALID_PARAMS:
            return f"{TOOL_NAMES[tool]}: invalid parameters"
        return f"{TOOL_NAMES[tool]} failed: {RESULT_CODES[code]}"

    def _busy_message(self) -> str:
        s, b, a = self.state, self.world, self.agent
        station = self._names["station"][int(s.last_index[b, a])]
        if s.last_value[b, a] == 0:  # the world's mark for a station another agent works at
            return f"Station '{station}' is in use by another agent"
        recipe = self.recipes[int(s.craft_recipe[b, a])].name
        left = int(s.craft_left[b, a])
        return f"Busy crafting {recipe} at {station}: " + (f"{left} ticks left" if left else "done this tick")

    def _craft_message(self, code: int) -> str:
        s, p, b, a = self.state, self.params, self.world, self.agent
        item, station = self._last_call.get("item_name", ""), self._last_call.get("station_name", "")
        stations = self._names["station"]
        recipe = next((r for r in self.recipes if r.name.lower() == item.lower()), None)
        row = int(s.last_index[b, a])
        if code == NOT_FOUND:
            if not stations:
                return f"craft: no station named '{station}' in this world"
            if recipe is None:
                return f"Unknown recipe '{item}'; recipes: {', '.join(r.name for r in self.recipes)}"
            if station.lower() not in (n.lower() for n in stations):
                return f"No station named '{station}'; stations: {', '.join(stations)}"
            kind = p.station_types[int(s.ent_kind[b, self.scenario.slots.st][row])]
            if kind == recipe.station:  # the right type, so the station itself is gone
                return f"Station '{stations[row]}' is not in this world any more"
            article = {word: "an" if word[0] in "aeiou" else "a" for word in (recipe.station, kind)}
            return (f"{recipe.name} is crafted at {article[recipe.station]} {recipe.station}, "
                    f"and {stations[row]} is {article[kind]} {kind}")
        if code == MISSING_MATERIALS:
            have = dict(zip(p.item_names, s.inventory[b, a].tolist(), strict=True))
            return "; ".join(f"Missing {i}: need {n}, have {have[i]}" for i, n in recipe.inputs.items() if have[i] < n)
        if code == OUT_OF_RANGE:
            return (f"Station '{stations[row]}' is {float(s.last_value[b, a]):.1f} units away, "
                    f"crafting range is {p.craft_range:.1f}")
        if code == INVENTORY_FULL:
            return (f"Inventory is full: {recipe.count} {recipe.output} would not fit "
                    f"in {p.inventory_capacity} items")
        return f"craft failed: {RESULT_CODES[code]}"




