"""One agent of one world, spoken to in tool calls: the heart of the tool-calling layer.

:class:`ToolSession` turns a tool call (a ``Decision``, a dict or raw model output) into
that agent's row of :class:`~arena_envs.world.ToolActions`, and builds the seed's
:class:`~arena_envs.observations.Observation` from the batch's arrays afterwards.
``ToolCallWrapper`` (one env) and ``ToolPool`` (many sessions, one batched step) both
use it, so a call means the same thing everywhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from arena_envs.observations import (
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    ActionResult,
    EntityInfo,
    HazardInfo,
    Inventory,
    ItemInfo,
    Message,
    Observation,
    RecipeInfo,
    ResourceInfo,
    StationInfo,
    bounded_text,
    quoted_name,
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
    NO_TOOL,
    NOT_FOUND,
    OBSTACLE_KINDS,
    OK,
    OUT_OF_RANGE,
    QUERY_FILTERS,
    QUERY_INVENTORY,
    QUERY_WORLD,
    RESULT_CODES,
    SEND_MESSAGE,
    TOOL_NAMES,
    ToolActions,
)

from .decision import parse_call
from .errors import ToolCallError
from .registry import universal_tools

"""The ``tool`` of an agent given no command this tick (``ToolActions.none``): it carries on."""


@functools.cache
def _title(type_name: str) -> str:
    """``iron_ore`` -> ``IronOre`` (cached: every reset names every entity, and this was half of it)."""
    return "".join(word.capitalize() for word in type_name.split("_"))


def entity_names(types: Sequence[str], kinds: np.ndarray) -> list[str]:
    """``<Type><n>`` names for a table of entity kinds, numbered per type in row order
    (``iron_ore`` becomes ``IronOre1``)."""
    seen: dict[str, int] = {}
    names = []
    for kind in kinds.tolist():
        type_name = types[kind]
        seen[type_name] = number = seen.get(type_name, 0) + 1
        names.append(f"{_title(type_name)}{number}")
    return names


class ToolSession:
    """One agent of one world of a batch, spoken to in tool calls.

    It turns a call into that agent's row of :class:`ToolActions` (resolving entity names
    to table rows) and builds its :class:`Observation` from the batch's arrays. The
    wrapper and the pool both use it, so tool calls mean the same thing everywhere.
    """

    def __init__(self, scenario, state, world: int = 0, agent: int = 0, agent_id: str = "agent_1",
                 team: Sequence[str] = ()):
        self.scenario, self.state, self.world, self.agent = scenario, state, world, agent
        self.params = scenario.params
        self.tools = universal_tools(self.params)  # bounds and messages of this scenario's world
        self.agent_id = agent_id
        self.team = tuple(team)  # the agent's team in the world's order, itself included; () when alone
        self._teammate_numbers = {member.lower(): number for number, member in enumerate(self.team, 1)}
        self.recipes = tuple(getattr(self.params, "recipes", ()))  # crafting scenarios have recipes
        self._time_limit = self.params.max_ticks * self.params.dt
        self._recipe_rows = {recipe.name.lower(): row for row, recipe in enumerate(self.recipes)}
        self._names: dict[str, list[str]] = {}
        self._entities: dict[str, list[tuple[str, str, tuple[float, float, float]]]] | None = None  # see begin
        self._edge_error: ToolCallError | None = None
        # the tool and parameters of the last call, for the messages of its result
        self._called: str | None = None
        self._params: dict[str, Any] = {}
        self._note: str | None = None  # said about a success (a clamped target)
        self._carrying_on = False  # the last encode gave no new command
        self.sent_message: Message | None = None  # the text of this agent's last send_message
        # resource rows this agent was shown (seen or queried) in its last observation, and
        # those it had been shown when it made the last call: an unseen one's distance is not told
        self._known: frozenset[int] = frozenset()
        self._known_at_call: frozenset[int] = frozenset()
        # (x, z, tick) of the last observation, for velocity; yaw of the last heading, degrees
        self._place: tuple[float, float, int] | None = None
        self._velocity = (0.0, 0.0, 0.0)
        self._yaw = 0.0

    def begin(self) -> None:
        """Learn the entities of a freshly reset world: names, kinds and places hold for the
        whole episode (only their distance and whether they are shown change)."""
        slots, s, b, p = self.scenario.slots, self.state, self.world, self.params
        kinds = {"resource": (p.resource_types, s.ent_kind[b, slots.res]),
                 "hazard": (HAZARD_TYPES, s.ent_kind[b, slots.haz]),
                 "station": (p.station_types, s.ent_kind[b, slots.st]),
                 "obstacle": (OBSTACLE_KINDS, s.obst_kind[b])}
        self._names = {category: entity_names(types, kind) for category, (types, kind) in kinds.items()}
        places = {category: list(zip(s.ent_x[b, part].tolist(), s.ent_z[b, part].tolist(), strict=True))
                  for category, part in (("resource", slots.res), ("hazard", slots.haz), ("station", slots.st))}
        places["obstacle"] = list(zip(s.obst_x[b].tolist(), s.obst_z[b].tolist(), strict=True))
        # (name, kind name, position) of every row: shared by this episode's observations,
        # which only ever read them (the positions are tuples)
        self._entities = {category: [(name, types[kind], (x, 0.0, z)) for name, kind, (x, z)
                                     in zip(self._names[category], kind_rows.tolist(), places[category], strict=True)]
                          for category, (types, kind_rows) in kinds.items()}
        # names are matched without regard to case
        self._rows = {category: {name.lower(): row for row, name in enumerate(names)}
                      for category, names in self._names.items()}
        self._edge_error, self._called, self._params, self.sent_message = None, None, {}, None
        self._note, self._carrying_on = None, False
        self._known = self._known_at_call = frozenset()
        self._place, self._velocity, self._yaw = None, (0.0, 0.0, 0.0), 0.0

    @property
    def begun(self) -> bool:
        """Whether :meth:`begin` has learnt the world since this session was made."""
        return self._entities is not None

    def encode(self, call: Any, actions: ToolActions) -> None:
        """Write ``call`` into this agent's row of ``actions``; a bad call becomes its failure code.

        ``call`` None is no new command (an LLM turn without a tool call, an agent left out
        of a parallel step): the agent carries on with what it was doing, as the seed says
        movement continues until the target is reached or a new command is given.
        """
        self._edge_error, self._called, self._params, self._note = None, None, {}, None
        self._known_at_call = self._known
        row = (self.world, self.agent)
        self._carrying_on = call is None
        if call is None:
            actions.tool[row] = NO_TOOL
            actions.failure[row] = OK
            return
        try:
            tool, params = parse_call(call)
            self._called = bounded_text(tool, MAX_NAME_CHARS)
            self._params = self.tools.spec(tool).validate(params)
            self._encode(actions, row, tool, self._params)
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
                # as far as the agent can go that way: where its body touches the world's edge,
                # so that it arrives (a target on the edge itself could never be reached)
                reach = w - self.params.agent_radius
                edge_x, edge_z = min(max(x, -reach), reach), min(max(z, -reach), reach)
                self._note = (f"target ({x:.1f}, {z:.1f}) is outside the world (±{w:g}); "
                              f"clamped to ({edge_x:.1f}, {edge_z:.1f}) at its edge")
                x, z = edge_x, edge_z
            actions.target_x[row], actions.target_z[row] = x, z
            actions.speed[row] = params["speed"]
        elif index == COLLECT:
            actions.collect_index[row] = self._row("resource", params["target_name"])
        elif index == CRAFT:
            # an unknown name becomes the row past its table: the world answers NOT_FOUND, after
            # BUSY, and counts the attempt like any other craft
            stations = self._rows["station"]
            actions.recipe[row] = self._recipe_rows.get(params["item_name"].lower(), len(self._recipe_rows))
            actions.station[row] = stations.get(params["station_name"].lower(), len(stations))
        elif index == QUERY_WORLD:
            actions.query_radius[row] = params["radius"]
            actions.query_filter[row] = QUERY_FILTERS.index(params["filter_type"] or "all")
        elif index == SEND_MESSAGE:
            actions.message_target[row] = self._recipient(params["target_agent"])
            # the world decides who receives it; the text stays here until it is delivered
            self.sent_message = Message(self.agent_id, bounded_text(params["message"], MAX_TEXT_CHARS),
                                        int(self.state.tick[self.world]))

    def _row(self, category: str, name: str) -> int:
        row = self._rows[category].get(name.lower())
        if row is None:
            raise ToolCallError(f"Target {quoted_name(name)} not found", code="NOT_FOUND", field="target_name")
        return row

    def _recipient(self, name: str) -> int:
        """The world's message target: 0 for every teammate, ``i`` for teammate ``i`` (from 1)."""
        if name.lower() == "all":
            return 0
        number = self._teammate_numbers.get(name.lower())
        if number is not None:
            return number
        if not self.team:
            raise ToolCallError(f"No agent named {quoted_name(name)}: this agent has no teammates; send to 'all'",
                                code="NOT_FOUND", field="target_agent")
        raise ToolCallError(f"No teammate named {quoted_name(name)}; messages reach only your team: "
                            f"{', '.join(self.team)} (or 'all')", code="NOT_FOUND", field="target_agent")

    # -- arrays -> Observation ---------------------------------------------------------

    def observation(self, arrays: Mapping[str, np.ndarray], info: dict[str, Any], first: bool = False) -> Observation:
        """The :class:`Observation` from this world's observation arrays (no batch axis) and info."""
        return self.observations([self], {k: v[None] for k, v in arrays.items()}, [info], first)[0]

    @classmethod
    def observations(cls, sessions: Sequence[ToolSession], arrays: Mapping[str, np.ndarray],
                     infos: Sequence[dict[str, Any]], first: bool = False) -> list[Observation]:
        """The observations of several sessions of one batch at once: row ``i`` of every array
        and ``infos[i]`` belong to ``sessions[i]``.

        The numpy work (finding the rows shown, their kinds, converting to Python numbers) is
        done once for all of them; only the Python objects are built one by one.
        """
        if not sessions:
            return []
        p = sessions[0].params
        views = _views(sessions)
        damage = {kind: float(entry or per_s) for kind, entry, per_s
                  in zip(HAZARD_TYPES, p.hazard_entry_damage, p.hazard_damage_per_s, strict=False)}
        entities = [session._entities for session in sessions]
        for i, r, visible, queried, dist, _ in _shown_rows(arrays.get("resources")):
            view, (name, kind, pos) = views[i], entities[i]["resource"][r]
            view.known.append(r)
            if visible:
                view.resources.append(ResourceInfo(name, kind, pos, dist))
                view.entities.append(EntityInfo(name, "resource", pos, dist, {"resource_type": kind}))
            if queried:
                view.queried.append({"name": name, "type": "resource", "resource_type": kind,
                                     "position": list(pos), "distance": dist})
        for i, r, visible, queried, dist, _ in _shown_rows(arrays.get("hazards")):
            view, (name, kind, pos) = views[i], entities[i]["hazard"][r]
            if visible:
                view.hazards.append(HazardInfo(name, kind, pos, dist, damage[kind]))
                view.entities.append(EntityInfo(name, "hazard", pos, dist, {"hazard_type": kind}))
            if queried:
                view.queried.append({"name": name, "type": "hazard", "hazard_type": kind,
                                     "position": list(pos), "distance": dist})
        for i, r, visible, queried, dist, in_use in _shown_rows(arrays.get("stations")):
            view, (name, kind, pos), in_use = views[i], entities[i]["station"][r], bool(in_use)
            if visible:
                view.stations.append(StationInfo(name, kind, pos, dist, in_use))
                view.entities.append(EntityInfo(name, "station", pos, dist, {"station_type": kind, "in_use": in_use}))
            if queried:
                view.queried.append({"name": name, "type": "station", "station_type": kind,
                                     "position": list(pos), "distance": dist, "in_use": in_use})
        _add_obstacles(sessions, views, arrays.get("obstacles"))
        return [session._assemble(view, info, first) for session, view, info in zip(sessions, views, infos,
                                                                                      strict=True)]

    def _assemble(self, view: _View, info: dict[str, Any], first: bool, **extra: Any) -> Observation:
        """The Observation of one session from what :meth:`observations` gathered for it.

        This runs once for every call of a pool's batch, so it builds no more than it must.
        """
        p, counts = self.params, view.counts
        items = Inventory([ItemInfo(name, name, n) for name, n in zip(p.item_names, counts, strict=True) if n]
                          if any(counts) else ())
        query_result = details = None
        self._known = frozenset(view.known)
        rotation, velocity = self._motion(view.x, view.z, view.tick, first)
        if not first and not self._carrying_on and view.code == OK:
            if view.tool == QUERY_WORLD:
                view.queried.sort(key=_by_distance)
                query_result = {"entities": view.queried}
            elif view.tool == QUERY_INVENTORY:
                details = {"items": [{"name": i.name, "count": i.quantity, "type": self._item_type(i.name)}
                                     for i in items],
                           "capacity": p.inventory_capacity, "used": sum(counts)}
        # the lists are this observation's own, so they are sorted in place (most hold 0 or 1)
        for shown in (view.resources, view.hazards, view.stations):
            if len(shown) > 1:
                shown.sort(key=_distance)
        custom = {**info, "time_limit": self._time_limit, "ticks_left": p.max_ticks - view.tick}
        recipes = {}
        if self.recipes:
            custom.update(self._crafting_status())
            recipes = {r.name: RecipeInfo(r.name, dict(r.inputs), r.station, r.ticks) for r in self.recipes}
        if extra:
            custom.update(extra)
        # positional, in the order of Observation's fields: keywords cost twice as much here
        return Observation(
            self.agent_id, view.tick, (view.x, 0.0, view.z), rotation, velocity,
            view.entities, view.resources, view.hazards, view.stations,
            items, view.health, view.energy, recipes,
            None if first or self._carrying_on else self._result(view.tool, view.code),
            query_result, details, view.messages, custom,
        )

    def _motion(self, x: float, z: float, tick: int, first: bool) -> tuple[tuple, tuple]:
        """``rotation`` (pitch, yaw, roll) and ``velocity`` (vx, vy, vz) of the seed's Observation.

        Velocity is the change of position per second since the last observation (units
        of ``dt``; zero on the first). Yaw, in degrees, follows the heading of the last
        movement and stays when the agent stands still. Y is up and yaw is a rotation
        about it, as in Godot (Agent Arena's engine): 0 faces -Z, 90 faces -X, -90
        faces +X, 180 faces +Z (range (-180, 180]). Pitch and roll are 0 on the flat ground.
        """
        place = self._place
        if first or place is None or tick < place[2]:
            self._velocity, self._yaw = (0.0, 0.0, 0.0), 0.0
        elif tick > place[2]:  # observed again on the same tick: the same motion
            dx, dz, seconds = x - place[0], z - place[1], (tick - place[2]) * self.params.dt
            self._velocity = (round(dx / seconds, 4), 0.0, round(dz / seconds, 4))
            if dx * dx + dz * dz > 1e-10:
                yaw = round(math.degrees(math.atan2(-dx, -dz)), 2)
                self._yaw = yaw + 360.0 if yaw <= -180.0 else yaw + 0.0  # in (-180, 180], never -0.0
        self._place = (x, z, tick)
        return (0.0, self._yaw, 0.0), self._velocity

    def _item_type(self, name: str) -> str:
        if name in self.params.food_items:
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
        name = TOOL_NAMES[tool] if self._edge_error is None else self._called or "unknown"
        if code == OK:
            return ActionResult(True, None, None, name, self._note)
        return ActionResult(False, RESULT_CODES[code], self._message(tool, code), name)

    def _message(self, tool: int, code: int) -> str:
        if self._edge_error is not None:
            return self._edge_error.message
        s, p = self.state, self.params
        target = quoted_name(self._params.get("target_name") or "")
        if tool == COLLECT and code == OUT_OF_RANGE:
            if int(s.last_index[self.world, self.agent]) not in self._known_at_call:
                # where an unseen resource lies is for perception or query_world to tell
                return f"Target {target} is not visible from here; move closer or use query_world to find it"
            return (f"Target {target} is {float(s.last_value[self.world, self.agent]):.1f} units away, "
                    f"collection range is {p.collect_range:.1f}")
        if tool == COLLECT and code == NOT_FOUND:
            return f"Target {target} does not exist or was already collected"
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
        item, station = self._params.get("item_name", ""), self._params.get("station_name", "")
        stations = self._names["station"]
        recipe = next((r for r in self.recipes if r.name.lower() == item.lower()), None)
        row = int(s.last_index[b, a])
        if code == NOT_FOUND:
            if not stations:
                return f"craft: no station named {quoted_name(station)} in this world"
            if recipe is None:
                return f"Unknown recipe {quoted_name(item)}; recipes: {', '.join(r.name for r in self.recipes)}"
            if station.lower() not in (n.lower() for n in stations):
                return f"No station named {quoted_name(station)}; stations: {', '.join(stations)}"
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


_distance = attrgetter("distance")
_by_distance = itemgetter("distance")


class _View:
    """What one session observes, gathered as Python numbers before its Observation is built."""

    __slots__ = ("x", "z", "health", "energy", "tick", "tool", "code", "counts",
                 "entities", "resources", "hazards", "stations", "queried", "messages", "known")

    def __init__(self, x: float, z: float, health: float, energy: float, tick: int, tool: int, code: int,
                 counts: list[int]):
        self.x, self.z, self.health, self.energy, self.tick, self.tool, self.code, self.counts = (
            x, z, health, energy, tick, tool, code, counts)
        self.entities: list[EntityInfo] = []
        self.resources: list[ResourceInfo] = []
        self.hazards: list[HazardInfo] = []
        self.stations: list[StationInfo] = []
        self.queried: list[dict[str, Any]] = []
        self.messages: list[Message] = []
        self.known: list[int] = []  # resource rows shown (seen or queried)


def _views(sessions: Sequence[ToolSession]) -> list[_View]:
    """Each session's own agent read from the state, for all of them in one gather per array."""
    s = sessions[0].state
    worlds = np.fromiter((session.world for session in sessions), np.intp, len(sessions))
    agents = np.fromiter((session.agent for session in sessions), np.intp, len(sessions))
    columns = [a[worlds, agents].tolist() for a in (s.x, s.z, s.health, s.energy)]
    columns += [s.tick[worlds].tolist()]
    columns += [a[worlds, agents].tolist() for a in (s.last_tool, s.last_code, s.inventory)]
    return [_View(*row) for row in zip(*columns, strict=True)]


def _shown_rows(table: np.ndarray | None) -> Iterator[tuple]:
    """``(session, row, visible, queried, distance, last column)`` of every entity visible or
    in the query result, from a (sessions, rows, 5 + kinds ...) table (see
    :func:`~arena_envs.world.entity_table`), in session then row order."""
    if table is None or table.size == 0:
        return iter(())
    session, row = np.nonzero((table[..., 0] != 0) | (table[..., 1] != 0))
    shown = table[session, row]
    return zip(session.tolist(), row.tolist(), shown[:, 0].tolist(), shown[:, 1].tolist(), shown[:, 4].tolist(),
               shown[:, -1].tolist(), strict=True)


def _add_obstacles(sessions: Sequence[ToolSession], views: list[_View], table: np.ndarray | None) -> None:
    """Append the obstacles each session sees, from (sessions, obstacles, 4) rows of present, dx, dz, radius."""
    if table is None or table.size == 0:
        return
    session, row = np.nonzero(table[..., 0])
    seen = table[session, row]
    distance = np.hypot(seen[:, 1], seen[:, 2])
    for i, r, radius, dist in zip(session.tolist(), row.tolist(), seen[:, 3].tolist(), distance.tolist(),
                                  strict=True):
        name, kind, pos = sessions[i]._entities["obstacle"][r]
        views[i].entities.append(EntityInfo(name, "obstacle", pos, dist, {"obstacle_type": kind, "radius": radius}))
