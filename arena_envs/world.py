"""The vectorized world shared by every 2D scenario.

A world is a :class:`WorldState`: a dataclass of numpy arrays whose first axis is the
batch (``B`` worlds) and, for per-agent fields, whose second axis is the agent (``A``).
Entity tables (resources, hazards, obstacles, stations) are padded to a fixed size per
scenario; padding rows are absent (``alive`` false, radius 0, or far away).

Coordinates are kept as separate ``x`` and ``z`` arrays (struct of arrays, float32):
reductions over a trailing axis of size 2 are slow in numpy. The ground plane is x–z;
y is always 0.

:func:`apply_tools` and :func:`advance` are the two halves of one tick; scenarios call
them from their own ``step`` and add rewards, termination and their own content.
Everything here works on whole batches: no Python loop runs over worlds or entities.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

# The universal tools, in the order of the structured action's ``tool`` entry.
TOOL_NAMES = ("move_to", "collect", "craft", "query_world", "query_inventory", "send_message", "idle")
MOVE_TO, COLLECT, CRAFT, QUERY_WORLD, QUERY_INVENTORY, SEND_MESSAGE, IDLE = range(len(TOOL_NAMES))
# No new command this tick: the agent carries on with what it was doing (an agent left out of
# a parallel step, an LLM turn without a tool call). ``idle`` is the explicit stop.
NO_TOOL = -1

# Result codes of the last action; 0 is success, the rest are the seed's error codes.
RESULT_CODES = ("OK", "OUT_OF_RANGE", "NOT_FOUND", "MISSING_MATERIALS", "INVALID_PARAMS", "BUSY", "INVENTORY_FULL")
OK, OUT_OF_RANGE, NOT_FOUND, MISSING_MATERIALS, INVALID_PARAMS, BUSY, INVENTORY_FULL = range(len(RESULT_CODES))

# ``query_world`` filters; 0 returns every kind.
QUERY_FILTERS = ("all", "resource", "hazard", "agent", "station")

HAZARD_TYPES = ("pit", "fire")
OBSTACLE_KINDS = ("tree", "rock", "bush")

F32 = np.float32
FAR = F32(1e4)  # where absent entities sit: outside every radius, never in the way


@dataclass(frozen=True)
class WorldParams:
    """The physical rules every 2D scenario shares (DESIGN §5). All are constructor arguments."""

    half_size: float = 25.0
    dt: float = 0.1
    move_speed: float = 5.0
    max_speed_multiplier: float = 2.0
    arrive_distance: float = 0.5
    agent_radius: float = 0.5
    perception_radius: float = 10.0
    collect_range: float = 2.0
    craft_range: float = 3.0  # the seed's attempt_craft pattern crafts below 3.0
    query_radius_default: float = 20.0
    query_radius_max: float = 50.0
    inventory_capacity: int = 50
    max_health: float = 100.0
    max_energy: float = 100.0
    energy_drain_per_s: float = 10.0  # per unit of speed multiplier above 1.0
    energy_regen_per_s: float = 5.0
    hazard_radius: float = 1.5
    hazard_entry_damage: tuple[float, ...] = (25.0, 0.0)  # per hazard type: pit, fire
    hazard_damage_per_s: tuple[float, ...] = (5.0, 10.0)
    message_vocab_size: int = 16
    max_ticks: int = 600
    item_names: tuple[str, ...] = ("berry", "wood", "stone")
    resource_types: tuple[str, ...] = ("berry", "wood", "stone")
    station_types: tuple[str, ...] = ()


QUERY_RESOURCE, QUERY_HAZARD, QUERY_AGENT, QUERY_STATION = 1, 2, 3, 4


@dataclass(frozen=True)
class EntitySlots:
    """Where each category of point entity sits in the state's entity table.

    Resources, hazards and stations share one table (``ent_*`` arrays, E = R + H + S
    columns) so that perception and queries are computed once for all of them.
    """

    resources: int = 0
    hazards: int = 0
    stations: int = 0

    @property
    def size(self) -> int:
        return self.resources + self.hazards + self.stations

    @property
    def res(self) -> slice:
        return slice(0, self.resources)

    @property
    def haz(self) -> slice:
        return slice(self.resources, self.resources + self.hazards)

    @property
    def st(self) -> slice:
        return slice(self.resources + self.hazards, self.size)

    @property
    def category(self) -> np.ndarray:
        """The ``query_world`` filter that matches each column."""
        return np.repeat(np.array([QUERY_RESOURCE, QUERY_HAZARD, QUERY_STATION], np.int8),
                         [self.resources, self.hazards, self.stations])


@dataclass
class WorldState:
    """Every array of a batch of worlds. Shapes use B worlds, A agents, E point entities
    (resources, hazards, stations: see :class:`EntitySlots`), O obstacles, I item kinds."""

    # agents (B, A)
    x: np.ndarray
    z: np.ndarray
    target_x: np.ndarray
    target_z: np.ndarray
    speed: np.ndarray
    moving: np.ndarray
    health: np.ndarray
    energy: np.ndarray
    alive: np.ndarray
    inventory: np.ndarray  # (B, A, I) int32
    in_hazard: np.ndarray  # (B, A, H) bool, for the pit's entry damage
    damage_taken: np.ndarray  # (B, A) float32, whole episode
    collected: np.ndarray  # (B, A) int32, whole episode
    # the last action of each agent and its outcome (read by observations and the tool layer)
    last_tool: np.ndarray  # (B, A) int8
    last_code: np.ndarray  # (B, A) int8
    last_index: np.ndarray  # (B, A) int16: the table row the action addressed
    last_value: np.ndarray  # (B, A) float32: a number for the message (a distance)
    query_radius: np.ndarray  # (B, A) float32
    query_filter: np.ndarray  # (B, A) int8
    # crafting: what each agent is making and where; its output arrives when craft_left reaches 0
    craft_recipe: np.ndarray  # (B, A) int16: row of the recipe table
    craft_station: np.ndarray  # (B, A) int16: row of the station slots
    craft_left: np.ndarray  # (B, A) int32: ticks until the output arrives, 0 when not crafting
    # point entities (B, E): resources, then hazards, then stations
    ent_x: np.ndarray
    ent_z: np.ndarray
    ent_kind: np.ndarray  # int8: index into resource_types / HAZARD_TYPES / station_types
    ent_alive: np.ndarray  # bool: false for padding and collected resources
    res_total: np.ndarray  # (B,) int32: resources placed this episode
    # obstacles (B, O): circles; radius 0 marks padding
    obst_x: np.ndarray
    obst_z: np.ndarray
    obst_r: np.ndarray
    obst_kind: np.ndarray  # int8, index into OBSTACLE_KINDS
    # time (B,)
    tick: np.ndarray
    episode: np.ndarray
    # scenario extras live here so that `take`/`put` carry them too
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def zeros(cls, batch: int, agents: int, slots: EntitySlots, obstacles: int, items: int) -> WorldState:
        B, A, E, H = batch, agents, slots.size, slots.hazards

        def f(*shape, fill=0.0):
            return np.full(shape, fill, F32)

        return cls(
            x=f(B, A), z=f(B, A), target_x=f(B, A), target_z=f(B, A), speed=f(B, A, fill=1.0),
            moving=np.zeros((B, A), bool), health=f(B, A), energy=f(B, A),
            alive=np.zeros((B, A), bool), inventory=np.zeros((B, A, items), np.int32),
            in_hazard=np.zeros((B, A, H), bool), damage_taken=f(B, A),
            collected=np.zeros((B, A), np.int32),
            last_tool=np.full((B, A), IDLE, np.int8), last_code=np.zeros((B, A), np.int8),
            last_index=np.zeros((B, A), np.int16), last_value=f(B, A),
            query_radius=f(B, A), query_filter=np.zeros((B, A), np.int8),
            craft_recipe=np.zeros((B, A), np.int16), craft_station=np.zeros((B, A), np.int16),
            craft_left=np.zeros((B, A), np.int32),
            ent_x=f(B, E, fill=FAR), ent_z=f(B, E, fill=FAR),
            ent_kind=np.zeros((B, E), np.int8), ent_alive=np.zeros((B, E), bool),
            res_total=np.zeros(B, np.int32),
            obst_x=f(B, obstacles, fill=FAR), obst_z=f(B, obstacles, fill=FAR),
            obst_r=f(B, obstacles), obst_kind=np.zeros((B, obstacles), np.int8),
            tick=np.zeros(B, np.int32), episode=np.zeros(B, np.int32),
        )

    @property
    def batch_size(self) -> int:
        return self.tick.shape[0]

    def arrays(self):
        """(name, array) for every array of the state, extras included."""
        for f_ in dataclasses.fields(self):
            if f_.name != "extra":
                yield f_.name, getattr(self, f_.name)
        yield from (("extra." + k, v) for k, v in self.extra.items())

    def take(self, index) -> WorldState:
        """A new state holding the worlds ``index`` (an integer array: a copy)."""
        kw = {f_.name: getattr(self, f_.name)[index] for f_ in dataclasses.fields(self) if f_.name != "extra"}
        return WorldState(**kw, extra={k: v[index] for k, v in self.extra.items()})

    def put(self, index, part: WorldState) -> None:
        """Write the worlds of ``part`` back at ``index``."""
        for f_ in dataclasses.fields(self):
            if f_.name != "extra":
                getattr(self, f_.name)[index] = getattr(part, f_.name)
        for k, v in self.extra.items():
            v[index] = part.extra[k]

    def copy(self) -> WorldState:
        kw = {f_.name: getattr(self, f_.name).copy() for f_ in dataclasses.fields(self) if f_.name != "extra"}
        return WorldState(**kw, extra={k: v.copy() for k, v in self.extra.items()})


@dataclass
class ToolActions:
    """A decoded batch of structured actions, one entry per agent (arrays (B, A)).

    ``failure`` is a result code already decided at the edge (``INVALID_PARAMS`` for bad
    parameters, ``NOT_FOUND`` for a name the tool layer could not resolve), 0 where the
    tool is to be carried out. A failed action is recorded and has no other effect.
    """

    tool: np.ndarray
    failure: np.ndarray
    target_x: np.ndarray
    target_z: np.ndarray
    speed: np.ndarray
    collect_index: np.ndarray
    recipe: np.ndarray
    station: np.ndarray
    query_radius: np.ndarray
    query_filter: np.ndarray
    message_token: np.ndarray
    message_target: np.ndarray

    def take(self, index) -> ToolActions:
        return ToolActions(**{f_.name: getattr(self, f_.name)[index] for f_ in dataclasses.fields(self)})

    @classmethod
    def idle(cls, shape: tuple[int, ...]) -> ToolActions:
        """A batch of ``idle`` actions of ``shape`` (B, A) whose fields can then be filled in."""
        actions = cls(**{f_.name: np.zeros(shape, np.intp) for f_ in dataclasses.fields(cls)})
        actions.tool[...] = IDLE
        actions.failure = np.zeros(shape, np.int8)
        for name in ("target_x", "target_z", "query_radius"):
            setattr(actions, name, np.zeros(shape, F32))
        actions.speed = np.ones(shape, F32)
        return actions

    @classmethod
    def none(cls, shape: tuple[int, ...]) -> ToolActions:
        """A batch of "no new command" (:data:`NO_TOOL`) whose fields can then be filled in."""
        actions = cls.idle(shape)
        actions.tool[...] = NO_TOOL
        return actions


@dataclass
class TickEvents:
    """What happened during one tick, for the scenario's rewards (arrays (B, A))."""

    collected: np.ndarray  # resources collected this tick (0 or 1)
    collected_kind: np.ndarray  # resource kind collected this tick, -1 if none
    damage: np.ndarray  # health lost this tick
    craft_started: np.ndarray  # recipe whose crafting started this tick, -1 if none
    crafted: np.ndarray  # recipe whose output arrived this tick, -1 if none

    @classmethod
    def none(cls, shape: tuple[int, ...]) -> TickEvents:
        """Nothing happened yet. The three -1 fields share one allocation (cheap for small batches)."""
        unset = np.full((3,) + shape, -1, np.int16)
        return cls(np.zeros(shape, np.int32), unset[0], np.zeros(shape, F32), unset[1], unset[2])


def any_true(a: np.ndarray) -> bool:
    """``a.any()`` without its Python-level overhead (about 4x faster on small arrays)."""
    return np.count_nonzero(a) > 0


@dataclass(frozen=True)
class RecipeTable:
    """A scenario's recipes as arrays (K recipes, I item kinds), read by the crafting rules.

    Recipe ``k`` consumes ``inputs[k]`` from the inventory at a station of type
    ``station[k]`` and, ``ticks[k]`` ticks later, adds ``count[k]`` of item ``output[k]``.
    """

    inputs: np.ndarray  # (K, I) int32
    station: np.ndarray  # (K,) int8: index into the scenario's station_types
    ticks: np.ndarray  # (K,) int32, at least 1
    output: np.ndarray  # (K,) intp: index into item_names
    count: np.ndarray  # (K,) int32

    @property
    def size(self) -> int:
        return len(self.ticks)


# ---------------------------------------------------------------------------------------
# one tick


def apply_tools(params: WorldParams, slots: EntitySlots, s: WorldState, act: ToolActions,
                recipes: RecipeTable | None = None) -> TickEvents:
    """Carry out the chosen tool of every living agent and record its result.

    ``craft`` follows the scenario's ``recipes`` (see :func:`_craft`); in a world without
    stations or recipes it answers ``NOT_FOUND``. An agent in the middle of a craft is
    busy: ``move_to``, ``collect`` and ``craft`` fail with ``BUSY`` until its output arrives.
    """
    tool = act.tool
    code = act.failure.astype(np.int8)
    ok = (code == OK) & s.alive
    index = np.zeros(tool.shape, np.int16)
    value = np.zeros(tool.shape, F32)
    used = np.bincount(tool.ravel() + 1, minlength=len(TOOL_NAMES) + 1)  # slot 0 counts NO_TOOL
    carry_on, used = used[0], used[1:]
    events = TickEvents.none(tool.shape)

    if slots.stations:  # only worlds with stations have crafters
        _refuse_busy(s, tool, ok, code, index, value)

    if used[MOVE_TO]:  # a persistent target; success means movement started
        move = ok & (tool == MOVE_TO)
        np.copyto(s.target_x, act.target_x, where=move)
        np.copyto(s.target_z, act.target_z, where=move)
        np.copyto(s.speed, act.speed, where=move)
        s.moving |= move
    if used[IDLE]:
        s.moving &= ~(ok & (tool == IDLE))
    if used[COLLECT] and slots.resources:
        _collect(params, slots, s, act, ok & (tool == COLLECT), code, index, value, events)
    elif used[COLLECT]:  # a world without resources (team capture) has nothing to collect
        code[ok & (tool == COLLECT)] = NOT_FOUND
    if used[CRAFT]:
        crafting = ok & (tool == CRAFT)
        if slots.stations and recipes is not None:
            _craft(params, slots, s, act, recipes, crafting, code, index, value, events)
        else:
            code[crafting] = NOT_FOUND
            index[crafting] = act.station[crafting]
    if used[QUERY_WORLD]:
        query = ok & (tool == QUERY_WORLD)
        np.copyto(s.query_radius, act.query_radius, where=query)
        np.copyto(s.query_filter, act.query_filter, where=query, casting="unsafe")

    if carry_on:  # an agent given no new command keeps its last action's record
        new = tool != NO_TOOL
        for last, now in ((s.last_tool, tool), (s.last_code, code), (s.last_index, index), (s.last_value, value)):
            np.copyto(last, now, where=new, casting="unsafe")
    else:
        s.last_tool[...] = tool
        s.last_code[...] = code
        s.last_index[...] = index
        s.last_value[...] = value
    return events


def _collect(params, slots, s, act, collecting, code, index, value, events) -> None:
    b, a = np.nonzero(collecting)
    if len(b) == 0:
        return
    r = act.collect_index[b, a]
    index[b, a] = r
    exists = s.ent_alive[b, r]
    dist = np.hypot(s.ent_x[b, r] - s.x[b, a], s.ent_z[b, r] - s.z[b, a])
    in_range = dist <= params.collect_range
    room = s.inventory[b, a].sum(-1) < params.inventory_capacity
    code[b, a] = np.where(~exists, NOT_FOUND, np.where(~in_range, OUT_OF_RANGE,
                                                        np.where(~room, INVENTORY_FULL, OK)))
    value[b, a] = np.where(exists, dist, 0.0)
    success = exists & in_range & room
    if s.x.shape[1] > 1:  # two agents on one resource in the same tick: the lower index wins
        order = np.flatnonzero(success)
        _, first = np.unique((b * slots.size + r)[order], return_index=True)
        lost = success.copy()
        lost[order[first]] = False
        code[b[lost], a[lost]] = NOT_FOUND
        success &= ~lost
    b, a, r = b[success], a[success], r[success]
    kind = s.ent_kind[b, r]
    s.ent_alive[b, r] = False
    s.inventory[b, a, resource_items(params)[kind]] += 1
    s.collected[b, a] += 1
    events.collected[b, a] = 1
    events.collected_kind[b, a] = kind


def _refuse_busy(s, tool, ok, code, index, value) -> None:
    """A crafter may only idle, query and talk: its other tools fail with BUSY.

    ``last_index`` holds the station it works at and ``last_value`` the ticks left.
    """
    crafting = s.craft_left > 0
    if not any_true(crafting):
        return
    busy = crafting & ok & ((tool == MOVE_TO) | (tool == COLLECT) | (tool == CRAFT))
    code[busy] = BUSY
    index[busy] = s.craft_station[busy]
    value[busy] = s.craft_left[busy]
    ok &= ~busy


def _craft(params, slots, s, act, recipes, crafting, code, index, value, events) -> None:
    """Start the crafts that pass every check, the first failing one giving the result code:

    1. ``NOT_FOUND``: no such recipe or station row, or the station is not of the recipe's type;
    2. ``MISSING_MATERIALS``: the inventory lacks some input (told before range: no wasted walk);
    3. ``INVENTORY_FULL``: the output would not fit once the inputs are used up;
    4. ``OUT_OF_RANGE``: the station is farther than ``craft_range`` (distance in ``last_value``);
    5. ``BUSY``: another agent is crafting at the station (``last_value`` 0).

    The inputs are consumed now and the agent stops moving; the output arrives in
    :func:`advance` after the recipe's ticks. ``last_index`` holds the station row.
    """
    b, a = np.nonzero(crafting)
    if len(b) == 0:
        return
    k, j = act.recipe[b, a], act.station[b, a]
    known = (k >= 0) & (k < recipes.size) & (j >= 0) & (j < slots.stations)
    k, j = np.where(known, k, 0), np.where(known, j, 0)
    col = slots.st.start + j
    index[b, a] = j
    present = known & s.ent_alive[b, col]
    suitable = present & (s.ent_kind[b, col] == recipes.station[k])
    dist = np.hypot(s.ent_x[b, col] - s.x[b, a], s.ent_z[b, col] - s.z[b, a])
    carried, needs = s.inventory[b, a], recipes.inputs[k]
    enough = (carried >= needs).all(-1)
    room = carried.sum(-1) - needs.sum(-1) + recipes.count[k] <= params.inventory_capacity
    taken = ((s.craft_left[b] > 0) & (s.craft_station[b] == j[:, None])).any(-1)
    result = np.select([~suitable, ~enough, ~room, dist > params.craft_range, taken],
                       [NOT_FOUND, MISSING_MATERIALS, INVENTORY_FULL, OUT_OF_RANGE, BUSY], OK)
    value[b, a] = np.where(present & (result != BUSY), dist, 0.0)
    success = result == OK
    if s.x.shape[1] > 1:  # two agents starting at one station in the same tick: the lower index wins
        order = np.flatnonzero(success)
        _, first = np.unique((b * slots.stations + j)[order], return_index=True)
        lost = success.copy()
        lost[order[first]] = False
        result[lost] = BUSY
        value[b[lost], a[lost]] = 0.0
        success &= ~lost
    code[b, a] = result
    b, a, k, j = b[success], a[success], k[success], j[success]
    s.inventory[b, a] -= recipes.inputs[k]
    s.craft_recipe[b, a] = k
    s.craft_station[b, a] = j
    s.craft_left[b, a] = recipes.ticks[k]
    s.moving[b, a] = False  # the crafter stays at its station
    events.craft_started[b, a] = k


def resource_items(params: WorldParams) -> np.ndarray:
    """The inventory column each resource type goes to."""
    return np.array([params.item_names.index(t) for t in params.resource_types], np.intp)


def advance(params: WorldParams, slots: EntitySlots, s: WorldState, events: TickEvents,
            recipes: RecipeTable | None = None) -> None:
    """Let one tick of time pass: movement, energy, hazards, death, crafting, the clock."""
    _move(params, s)
    if slots.hazards:
        _hazards(params, slots, s, events)
    if recipes is not None:
        _progress_crafts(s, recipes, events)
    s.tick += 1


def _progress_crafts(s: WorldState, recipes: RecipeTable, events: TickEvents) -> None:
    """One tick of work on every craft; a finished one puts its output in the inventory.

    A craft started this tick counts this tick, so a recipe of ``ticks`` t delivers at
    the end of the t-th step from the one that started it (t = 1: the same step).
    """
    crafting = (s.craft_left > 0) & s.alive
    if not any_true(crafting):
        return
    s.craft_left -= crafting
    b, a = np.nonzero(crafting & (s.craft_left == 0))
    k = s.craft_recipe[b, a]
    s.inventory[b, a, recipes.output[k]] += recipes.count[k]
    events.crafted[b, a] = k


def _move(params: WorldParams, s: WorldState) -> None:
    moving = s.moving & s.alive
    regen = F32(params.energy_regen_per_s * params.dt)
    if not any_true(moving):
        s.energy += regen
        np.minimum(s.energy, F32(params.max_energy), out=s.energy)
        return
    dx = s.target_x - s.x
    dz = s.target_z - s.z
    dist = np.sqrt(dx * dx + dz * dz)
    speed = np.where(s.energy > 0, s.speed, np.minimum(s.speed, F32(1.0)))
    step = np.minimum(F32(params.move_speed * params.dt) * speed, dist) * moving
    scale = step / np.maximum(dist, F32(1e-6))
    vx = dx * scale
    vz = dz * scale
    bound = F32(params.half_size - params.agent_radius)
    nx = np.maximum(np.minimum(s.x + vx, bound), -bound)
    nz = np.maximum(np.minimum(s.z + vz, bound), -bound)
    if s.obst_r.shape[1]:
        _slide_around_obstacles(params, s, nx, nz, vx, vz, step, bound)
    s.x[...] = nx
    s.z[...] = nz

    # energy: sprinting (speed above 1) drains it, anything slower regains it
    drain = F32(params.energy_drain_per_s * params.dt) * (speed - F32(1.0))
    s.energy += np.where(moving & (speed > 1.0), -drain, regen)
    np.maximum(np.minimum(s.energy, F32(params.max_energy)), F32(0.0), out=s.energy)

    dx = s.target_x - s.x
    dz = s.target_z - s.z
    s.moving &= dx * dx + dz * dz >= F32(params.arrive_distance**2)


def _slide_around_obstacles(params, s, nx, nz, vx, vz, step, bound) -> None:
    """Keep agents out of obstacle circles: one that runs into a circle slides along it.

    ``nx, nz`` (the intended positions) are corrected in place. A slide that would still
    overlap a circle (a gap narrower than the agent, a circle against the wall) is not
    taken: the agent stays where it is, so no agent ever enters an obstacle.
    """
    reach = s.obst_r + F32(params.agent_radius)  # (B, O)
    cx = nx[:, :, None] - s.obst_x[:, None, :]
    cz = nz[:, :, None] - s.obst_z[:, None, :]
    overlap = cx * cx + cz * cz < (reach * reach)[:, None, :]
    if not any_true(overlap):
        return
    b, a = np.nonzero(reduce_last_axis(np.logical_or, overlap))
    px, pz = s.x[b, a], s.z[b, a]
    ox, oz, rr = s.obst_x[b], s.obst_z[b], reach[b]  # (k, O)
    # the obstacle in the way: the deepest overlap of the intended position
    j = np.argmin(np.hypot(nx[b, a][:, None] - ox, nz[b, a][:, None] - oz) - rr, axis=1)
    k = np.arange(len(b))
    nrm_x, nrm_z = px - ox[k, j], pz - oz[k, j]
    nrm_len = np.maximum(np.hypot(nrm_x, nrm_z), F32(1e-6))
    nrm_x, nrm_z = nrm_x / nrm_len, nrm_z / nrm_len
    mvx, mvz, length = vx[b, a], vz[b, a], step[b, a]
    into = mvx * nrm_x + mvz * nrm_z
    tx, tz = mvx - into * nrm_x, mvz - into * nrm_z  # the part of the move along the surface
    tangent_len = np.hypot(tx, tz)
    # head-on: go round on the side the target lies on (left when exactly behind)
    side = np.where(nrm_x * (s.target_z[b, a] - pz) - nrm_z * (s.target_x[b, a] - px) < 0, -1.0, 1.0)
    head_on = tangent_len < 0.1 * length
    safe_len = np.maximum(tangent_len, F32(1e-6))
    tx = np.where(head_on, -nrm_z * side, tx / safe_len) * length
    tz = np.where(head_on, nrm_x * side, tz / safe_len) * length
    slide_x, slide_z = px + tx, pz + tz
    # push the slid position out of the circles it overlaps, keep it in the world
    qx, qz = slide_x[:, None] - ox, slide_z[:, None] - oz
    qd = np.maximum(np.hypot(qx, qz), F32(1e-6))
    push = np.maximum(rr - qd, 0.0) / qd
    slide_x = np.clip(slide_x + (qx * push).sum(-1), -bound, bound)
    slide_z = np.clip(slide_z + (qz * push).sum(-1), -bound, bound)
    stuck = reduce_last_axis(np.logical_or, np.hypot(slide_x[:, None] - ox, slide_z[:, None] - oz) < rr - F32(1e-3))
    nx[b, a] = np.where(stuck, px, slide_x)
    nz[b, a] = np.where(stuck, pz, slide_z)


def _hazards(params: WorldParams, slots: EntitySlots, s: WorldState, events: TickEvents) -> None:
    hz = slots.haz
    dx = s.x[:, :, None] - s.ent_x[:, None, hz]
    dz = s.z[:, :, None] - s.ent_z[:, None, hz]
    inside = dx * dx + dz * dz < F32(params.hazard_radius**2)
    if not any_true(inside):
        s.in_hazard[...] = False
        return
    entered = inside & ~s.in_hazard
    s.in_hazard[...] = inside
    kind = s.ent_kind[:, None, hz]
    entry = np.asarray(params.hazard_entry_damage, F32)[kind]
    per_tick = np.asarray(params.hazard_damage_per_s, F32)[kind] * F32(params.dt)
    damage = np.minimum((entered * entry + inside * per_tick).sum(-1) * s.alive, s.health)
    s.health -= damage
    s.damage_taken += damage
    events.damage += damage
    s.alive &= s.health > 0
    s.moving &= s.alive


# ---------------------------------------------------------------------------------------
# perception


def line_of_sight(s: WorldState, obstacles: tuple, ex: np.ndarray, ez: np.ndarray, d2: np.ndarray,
                  candidates: np.ndarray, offsets: tuple | None = None) -> np.ndarray:
    """Clear ``candidates`` (B, A, E) in place where an obstacle hides the entity.

    ``obstacles`` are the agents' offsets to the obstacles (:func:`relative`) and ``d2``
    the squared agent–entity distances. A pair needs testing only when some obstacle's
    edge is nearer to the agent than the entity; those pairs are gathered and tested
    against every obstacle of their world, so the cost follows what is near.
    ``offsets`` are the agent–entity ``(dx, dz)`` when the caller has them already.
    """
    if s.obst_r.shape[1] == 0 or not any_true(candidates):
        return candidates
    ox, oz, o2 = obstacles
    r = s.obst_r
    if candidates.size * r.shape[1] <= DENSE_LIMIT:  # small batches: test every pair at once
        if offsets is None:
            offsets = (ex[:, None, :] - s.x[:, :, None], ez[:, None, :] - s.z[:, :, None])
        dx, dz = offsets
        hidden = _blocks(ox[:, :, None, :], oz[:, :, None, :], r[:, None, None, :],
                         dx[..., None], dz[..., None], d2[..., None]).any(-1)
        candidates &= ~hidden
        return candidates
    nearest_edge = reduce_last_axis(np.minimum, np.sqrt(o2) - r[:, None, :])
    b, a, e = np.nonzero(candidates & (d2 > (nearest_edge * nearest_edge)[:, :, None]))
    if len(b) == 0:
        return candidates
    # gathering from the 2D coordinate arrays is cheaper than from the 3D offsets
    dx, dz = (ex[b, e] - s.x[b, a])[:, None], (ez[b, e] - s.z[b, a])[:, None]
    hidden = reduce_last_axis(np.logical_or, _blocks(ox[b, a], oz[b, a], r[b], dx, dz, dx * dx + dz * dz))
    candidates[b[hidden], a[hidden], e[hidden]] = False
    return candidates


DENSE_LIMIT = 4096  # pairs × obstacles below which line of sight skips the gather


def _blocks(fx, fz, r, dx, dz, seg2) -> np.ndarray:
    """Whether each obstacle (offset f, radius r; last axis) hides an entity at offset d (squared length seg2)."""
    along = fx * dx
    along += fz * dz
    across = fx * dz
    across -= fz * dx
    across *= across
    # the obstacle's centre projects inside the segment and lies closer to it than its radius
    return (across < r * r * seg2) & (along > 0) & (along < seg2)


def reduce_last_axis(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(a, axis=-1)`` for big arrays whose last axis is short (obstacles).

    numpy reduces a short trailing axis several times slower than a leading one
    (DESIGN §9), so the axis is moved to the front first; the result is the same.
    """
    return ufunc.reduce(np.ascontiguousarray(np.moveaxis(a, -1, 0)), axis=0)


def relative(s: WorldState, ex: np.ndarray, ez: np.ndarray):
    """Offsets and squared distances from every agent to every entity: (B, A, E) each."""
    dx = ex[:, None, :] - s.x[:, :, None]
    dz = ez[:, None, :] - s.z[:, :, None]
    return dx, dz, dx * dx + dz * dz


TABLE_COLUMNS = ("visible", "in_query", "dx", "dz", "distance")


def entity_table(params: WorldParams, slots: EntitySlots, s: WorldState, n_kinds: int,
                 obstacles: tuple) -> np.ndarray:
    """The observation rows of every point entity for every agent: (B, A, E, 5 + n_kinds).

    Columns: visible, in the last ``query_world`` result, dx, dz, distance, then the
    entity's kind one-hot (kinds of its own category). Rows neither visible nor queried
    are zero. Perception reaches ``perception_radius`` and needs a clear line of sight;
    a query ignores line of sight (DESIGN §5). Scenarios slice the rows per category.
    ``obstacles`` are the agents' offsets to the obstacles (:func:`relative`).
    """
    dx, dz, d2 = relative(s, s.ent_x, s.ent_z)
    present = s.ent_alive[:, None, :]
    visible = line_of_sight(s, obstacles, s.ent_x, s.ent_z, d2,
                            (d2 <= F32(params.perception_radius**2)) & present & s.alive[:, :, None], (dx, dz))
    table = np.empty(d2.shape + (len(TABLE_COLUMNS) + n_kinds,), F32)
    table[..., 0] = visible
    asked = s.last_tool == QUERY_WORLD
    if any_true(asked):
        asked &= s.last_code == OK
        filt = s.query_filter[:, :, None]
        queried = (asked[:, :, None] & present & (d2 <= (s.query_radius * s.query_radius)[:, :, None])
                   & ((filt == 0) | (filt == slots.category)))
        table[..., 1] = queried
        shown = visible | queried
    else:
        table[..., 1] = 0.0
        shown = visible
    shown = shown.astype(F32)
    kind = s.ent_kind[:, None, :]
    if d2.size <= FEW_ROWS:  # fewer numpy calls: write the raw values, then zero the hidden rows at once
        table[..., 2] = dx
        table[..., 3] = dz
        np.sqrt(d2, out=table[..., 4])
        np.equal(kind[..., None], np.arange(n_kinds), out=table[..., 5:])
        table[..., 2:] *= shown[..., None]
        return table
    np.multiply(dx, shown, out=table[..., 2])
    np.multiply(dz, shown, out=table[..., 3])
    np.multiply(np.sqrt(d2), shown, out=table[..., 4])
    for k in range(n_kinds):  # column by column: numpy is slow over a short trailing axis
        np.multiply(kind == k, shown, out=table[..., 5 + k])
    return table


FEW_ROWS = 64  # table rows (B × A × entities) up to which tables are filled with fewer, wider calls


def table_bounds(params: WorldParams, n_kinds: int) -> tuple[np.ndarray, np.ndarray]:
    """Low and high of every column of :func:`entity_table`."""
    reach = max(2 * params.half_size, params.query_radius_max)
    low = np.array([0, 0, -reach, -reach, 0] + [0] * n_kinds, F32)
    high = np.array([1, 1, reach, reach, reach * np.sqrt(2)] + [1] * n_kinds, F32)
    return low, high


def obstacle_table(params: WorldParams, s: WorldState, obstacles: tuple) -> np.ndarray:
    """Obstacles near each agent: (B, A, O, 4) rows of visible, dx, dz, radius.

    An obstacle is visible when any part of it lies within the perception radius.
    """
    dx, dz, d2 = obstacles
    reach = F32(params.perception_radius) + s.obst_r
    seen = ((d2 <= (reach * reach)[:, None, :]) & (s.obst_r > 0)[:, None, :] & s.alive[:, :, None]).astype(F32)
    table = np.empty(seen.shape + (4,), F32)
    table[..., 0] = seen
    if d2.size <= FEW_ROWS:  # as in entity_table
        table[..., 1] = dx
        table[..., 2] = dz
        table[..., 3] = s.obst_r[:, None, :]
        table[..., 1:] *= seen[..., None]
        return table
    np.multiply(dx, seen, out=table[..., 1])
    np.multiply(dz, seen, out=table[..., 2])
    np.multiply(s.obst_r[:, None, :], seen, out=table[..., 3])
    return table


def reset_agents(params: WorldParams, s: WorldState, index: np.ndarray, x: np.ndarray, z: np.ndarray) -> None:
    """Put the agents of worlds ``index`` at (x, z) (arrays (n, A)) with fresh bodies."""
    s.x[index] = x
    s.z[index] = z
    s.target_x[index] = x
    s.target_z[index] = z
    s.speed[index] = 1.0
    s.moving[index] = False
    s.health[index] = params.max_health
    s.energy[index] = params.max_energy
    s.alive[index] = True
    s.inventory[index] = 0
    s.in_hazard[index] = False
    s.damage_taken[index] = 0.0
    s.collected[index] = 0
    s.last_tool[index] = IDLE
    s.last_code[index] = OK
    s.last_index[index] = 0
    s.last_value[index] = 0.0
    s.query_radius[index] = 0.0
    s.query_filter[index] = 0
    s.craft_recipe[index] = 0
    s.craft_station[index] = 0
    s.craft_left[index] = 0
    s.tick[index] = 0
    s.episode[index] += 1


def first_valid(candidates: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pick, per slot, the first candidate that passed its checks.

    ``candidates`` is (..., C, F) and ``ok`` is (..., C); returns the chosen (..., F) values
    and whether any candidate passed (slots where none did stay empty).
    """
    j = ok.argmax(-1)[..., None, None]
    chosen = np.take_along_axis(candidates, j, axis=-2)[..., 0, :]
    return chosen, ok.any(-1)
