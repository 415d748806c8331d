"""The vectorized world shared by every 2D scenario.

A world is a :class:`WorldState`: a dataclass of numpy arrays whose first axis is the
batch (``B`` worlds) and, for per-agent fields, whose second axis is the agent (``A``).
Entity tables (resources, hazards, obstacles, stations) are padded to a fixed size per
scenario; padding rows are absent (``alive`` false, radius 0, or far away).

Coordinates are kept as separate ``x`` and ``z`` arrays (struct of arrays, float32):
reductions over a trailing axis of size 2 are slow in numpy. The ground plane is x–z;
y is always 0.

This module holds the state, the rules' parameters and vocabulary, and the decoded
actions; :mod:`arena_envs.tick` carries out one tick (tools, then movement, hazards and
crafts) and :mod:`arena_envs.perception` computes what agents see. Everything works on
whole batches: no Python loop runs over worlds or entities.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
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
    food_items: tuple[str, ...] = ("berry", "apple", "meal")  # items the tool layer reports as type "food"


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

    @functools.cached_property  # read on every step with a query: np.repeat cost ~4 us
    def category(self) -> np.ndarray:
        """The ``query_world`` filter that matches each column (read-only)."""
        category = np.repeat(np.array([QUERY_RESOURCE, QUERY_HAZARD, QUERY_STATION], np.int8),
                             [self.resources, self.hazards, self.stations])
        category.flags.writeable = False
        return category


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
    acted: np.ndarray  # (B, A) bool: given a command this tick (false while carrying on: NO_TOOL)
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
            last_index=np.zeros((B, A), np.int16), last_value=f(B, A), acted=np.zeros((B, A), bool),
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
        arrays = self.__dict__  # ndarray.take: a third of the time of fancy indexing here
        kw = {name: arrays[name].take(index, axis=0) for name in _STATE_ARRAYS}
        return WorldState(**kw, extra={k: v.take(index, axis=0) for k, v in self.extra.items()})

    def put(self, index, part: WorldState) -> None:
        """Write the worlds of ``part`` back at ``index``."""
        arrays, parts = self.__dict__, part.__dict__
        for name in _STATE_ARRAYS:
            arrays[name][index] = parts[name]
        for k, v in self.extra.items():
            v[index] = part.extra[k]

    def copy(self) -> WorldState:
        kw = {name: getattr(self, name).copy() for name in _STATE_ARRAYS}
        return WorldState(**kw, extra={k: v.copy() for k, v in self.extra.items()})


_STATE_ARRAYS = tuple(f_.name for f_ in dataclasses.fields(WorldState) if f_.name != "extra")
"""WorldState's array fields: ``take`` and ``put`` run on every partial step of a pool (a
server's), where ``dataclasses.fields`` cost as much as the copying of a small subset."""


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
        """The actions of the worlds ``index`` (an integer array: a copy)."""
        arrays = self.__dict__
        return ToolActions(**{name: arrays[name].take(index, axis=0) for name in _ACTION_ARRAYS})

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


_ACTION_ARRAYS = tuple(f_.name for f_ in dataclasses.fields(ToolActions))


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


def reduce_last_axis(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(a, axis=-1)`` for big arrays whose last axis is short (obstacles).

    numpy reduces a short trailing axis several times slower than a leading one
    (DESIGN §9), so the axis is moved to the front first; the result is the same.
    """
    # a plain transpose: np.moveaxis costs more than the reduction on small batches
    return ufunc.reduce(np.ascontiguousarray(a.transpose(_LAST_FIRST[a.ndim])), axis=0)


_LAST_FIRST = {n: (n - 1, *range(n - 1)) for n in range(1, 8)}  # ndim: the axes with the last one first


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
    s.acted[index] = False
    s.query_radius[index] = 0.0
    s.query_filter[index] = 0
    s.craft_recipe[index] = 0
    s.craft_station[index] = 0
    s.craft_left[index] = 0
    s.tick[index] = 0
    s.episode[index] += 1


def split_columns(u: np.ndarray, counts: tuple[int, ...]) -> list[np.ndarray]:
    """``u`` (n, sum(counts)) cut into column blocks of ``counts`` widths: ``np.split`` without its
    Python layers (23 -> 2 us, on every reset of a few worlds)."""
    ends = itertools.accumulate(counts)
    return [u[:, end - count:end] for count, end in zip(counts, ends, strict=True)]


def first_valid(candidates: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pick, per slot, the first candidate that passed its checks.

    ``candidates`` is (..., C, F) and ``ok`` is (..., C); returns the chosen (..., F) values
    and whether any candidate passed (slots where none did stay empty).
    """
    # one gather from the (slots, C, F) rows: np.take_along_axis builds its index arrays in Python
    # (a one-world reset picks 3 tables: 44 -> ~15 us a table)
    C, F = candidates.shape[-2:]
    rows = candidates.reshape(-1, C, F)
    chosen = rows[np.arange(len(rows)), ok.argmax(-1).reshape(-1)].reshape(*ok.shape[:-1], F)
    return chosen, np.logical_or.reduce(ok, axis=-1)  # ok.any(-1) without its Python layer
