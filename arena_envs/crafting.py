"""Crafting-v0: gather materials and work them up a recipe chain into an iron sword.

One agent walks a square world of side ``2 * half_size`` (default ±20) with the seven
universal tools. Resources (iron ore, coal, wood; stone and berry exist as types) are
picked up with ``collect`` within 2.0 units; stations (anvil, furnace, workbench) turn
inventory materials into items with ``craft`` within 3.0 units. The recipes are data
(:class:`Recipe` records in ``CraftingParams.recipes``), so a user can pass their own:

| recipe          | inputs                   | station   | ticks |
|-----------------|--------------------------|-----------|-------|
| `iron_ingot`    | iron_ore + coal          | furnace   | 30    |
| `iron_rod`      | iron_ingot               | anvil     | 20    |
| `wooden_handle` | 2 wood                   | workbench | 20    |
| `iron_sword`    | iron_rod + wooden_handle | anvil     | 40    |
| `torch`         | wood + stone             | workbench | 10    |
| `meal`          | 2 berry                  | workbench | 10    |

## Crafting rules

``craft`` (recipe row, station row) checks, in this order: the recipe and the station
exist and the station is of the recipe's type (else ``NOT_FOUND``), the inventory holds
every input (``MISSING_MATERIALS``), the output fits in the inventory's 50 items once the
inputs are used up (``INVENTORY_FULL``), the station is within 3.0 units
(``OUT_OF_RANGE``), and no other agent works at it (``BUSY``). Then the inputs are
consumed at once, the agent stops, and the output arrives after the recipe's ticks,
counting the tick it started in. Meanwhile the agent is busy: ``move_to``, ``collect`` and
``craft`` fail with ``BUSY``; ``idle``, ``query_world``, ``query_inventory`` and
``send_message`` work.

Through :class:`~arena_envs.wrappers.ToolCallWrapper` the same rules take names
(``{"tool": "craft", "params": {"item_name": "iron_ingot", "station_name": "Furnace1"}}``),
errors name what is wrong ("Missing wood: need 2, have 1"), and the ``Observation``
carries ``nearby_stations``, ``available_recipes``, ``inventory_details`` and the craft in
progress in ``custom["crafting"]``.

## Action space

The structured tool action of :mod:`arena_envs.actions` (``Dict``): ``tool`` picks one of
``move_to, collect, craft, query_world, query_inventory, send_message, idle`` and only that
tool's entry is read. ``collect`` is a row of the ``resources`` table and ``craft`` is
``MultiDiscrete([K recipes, S stations])``: a row of the recipe table above and a row of
the ``stations`` table (row ``i`` is always the same entity).

## Observation space

A ``Dict`` of fixed-shape float32 arrays (R resource slots, S station slots, K recipes,
I item kinds; padding and unseen rows are zero):

| key           | shape      | content                                                                   |
|---------------|------------|---------------------------------------------------------------------------|
| `agent`       | (7,)       | x, z, health, energy, moving (0/1), movement target x, target z           |
| `resources`   | (R, 10)    | visible, in query result, dx, dz, distance, one-hot iron_ore/coal/wood/   |
|               |            | stone/berry                                                               |
| `stations`    | (S, 9)     | visible, in query result, dx, dz, distance, one-hot anvil/furnace/        |
|               |            | workbench, in use                                                         |
| `inventory`   | (I,)       | count of each item of ``item_names``: the resource types, then every      |
|               |            | recipe's items (iron_ingot, iron_rod, wooden_handle, iron_sword, torch,   |
|               |            | meal)                                                                     |
| `craftable`   | (K,)       | 1 where the inventory holds every input of recipe k                       |
| `crafting`    | (K + 1,)   | one-hot of the recipe in progress, then its ticks left (all 0 when idle)  |
| `last_action` | (2,) int   | ``MultiDiscrete([7, 7])``: last tool, its result code (0 = OK, then       |
|               |            | OUT_OF_RANGE, NOT_FOUND, MISSING_MATERIALS, INVALID_PARAMS, BUSY,         |
|               |            | INVENTORY_FULL)                                                           |
| `time_left`   | (1,)       | ticks until truncation                                                    |

Offsets are from the agent to the entity. Entities are visible within 10 units (there
are no obstacles); a ``query_world`` fills the ``in query result`` rows of its kind within
its radius in the next observation.

## Rewards

``goal_reward`` (+1) when the goal item (``iron_sword``) is made, ``intermediate_reward``
(+0.1) the first time each recipe of the goal's chain (iron_ingot, iron_rod,
wooden_handle) delivers. Nothing else.

## Episode end

Terminates when the goal item is in the inventory; truncates after ``max_ticks`` (900)
ticks of 0.1 s.

## Info

``success`` (the goal item made) and ``score``, the Agent Arena crafting score
``max(0, 50·goal + 0.3·recipe_efficiency − 5·waste)``, where ``goal`` is 1 once the goal
item is made, ``recipe_efficiency`` is 100 × crafts completed / ``craft`` calls, and
``waste`` counts the raw materials that
crafting used up without them ending in the goal item (or, before it is made, in the
intermediates one goal needs): a torch costs 2, a second iron ingot 2. Also
``goal_crafted``, ``items_crafted``, ``craft_attempts``, ``recipe_efficiency``,
``waste``, ``resources_collected``.

## Rendering

``render_mode`` ``"rgb_array"``, ``"ansi"`` (a text map) or ``"human"`` (a window):
stations are labelled squares with a mark of their type's colour; the one being worked
at gets an outline, the recipe's name and a progress bar; the inventory is listed top
left; the status line shows tick, score, health and the craft in progress (ticks done of
the recipe's); a legend strip names every symbol.

## Arguments

``layout="classic"`` (the Agent Arena scene: Anvil (5, −5), Furnace (5, 0), Workbench
(5, 5), iron ore ×3, coal ×2, wood ×3, spawn (0, 10)) or ``"random"`` (seeded placement of
``resource_counts`` and ``station_counts``), ``recipes``, ``goal``, ``goal_reward``,
``intermediate_reward``, ``max_ticks``, and every rule of
:class:`~arena_envs.world.WorldParams` (``half_size``, ``craft_range``,
``inventory_capacity``, ...).

    >>> import gymnasium as gym, arena_envs
    >>> env = gym.make("arena_envs/Crafting-v0")
    >>> envs = gym.make_vec("arena_envs/Crafting-v0", num_envs=4096, layout="random")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_envs import dense
from arena_envs.actions import tool_action_space
from arena_envs.batch import step_subset
from arena_envs.crafting_params import (
    CANDIDATES,
    CLASSIC_RESOURCES,
    CLASSIC_SPAWN,
    CLASSIC_STATIONS,
    STATION_SPACING,
    CraftingParams,
    recipe_costs,
    recipe_table,
)
from arena_envs.crafting_params import DEFAULT_RECIPES as DEFAULT_RECIPES  # the scenario's public names
from arena_envs.crafting_params import Recipe as Recipe
from arena_envs.dense import f32
from arena_envs.perception import entity_table, relative, table_bounds
from arena_envs.tick import advance, apply_tools
from arena_envs.world import (
    CRAFT,
    F32,
    RESULT_CODES,
    TOOL_NAMES,
    EntitySlots,
    ToolActions,
    WorldState,
    first_valid,
    reset_agents,
    split_columns,
)
from arena_envs.xp import namespace, uniforms


def station_in_use(slots: EntitySlots, s: WorldState) -> np.ndarray:
    """(B, S): whether some agent of the world is crafting at each station."""
    at = s.craft_station[:, :, None] == np.arange(slots.stations, dtype=np.int16)
    return ((s.craft_left > 0)[:, :, None] & at).any(1)


class Crafting:
    """The Crafting rules as pure functions over a batched :class:`WorldState`."""

    def __init__(self, params: CraftingParams | None = None, **kwargs):
        self.params = CraftingParams(**kwargs) if params is None else dataclasses.replace(params, **kwargs)
        p = self.params
        R, S = p.table_sizes
        self.sizes = (R, S)
        self.slots = EntitySlots(resources=R, stations=S)
        self.recipes = recipe_table(p)
        K, I = self.recipes.size, len(p.item_names)
        self.goal_item = p.item_names.index(p.goal)
        self.goal_recipe = [r.output for r in p.recipes].index(p.goal)

        # what the rewards and the score read, per recipe / per item
        raw, need = recipe_costs(p)
        made = np.zeros(I, bool)
        made[self.recipes.output] = True
        made[[p.item_names.index(t) for t in p.resource_types]] = False
        self._raw_inputs = (self.recipes.inputs * ~made).sum(1).astype(F32)  # raw materials each craft uses
        # the made items of one goal's chain: (item, units one goal needs, raw materials per unit)
        self._chain = [(i, F32(need[i]), F32(raw[i])) for i in np.flatnonzero(made & (need > 0))]
        self._goal_value = F32(raw[self.goal_item])
        # each recipe's inputs as (item, count) pairs: a few column tests beat one (B, K, I) test
        self._inputs = [[(i, self.recipes.inputs[k, i]) for i in np.flatnonzero(self.recipes.inputs[k])]
                        for k in range(K)]
        self._intermediate = (need[self.recipes.output] > 0) & (self.recipes.output != self.goal_item)

        n_res, n_st = len(p.resource_types), len(p.station_types)
        res_low, res_high = table_bounds(p, n_res)
        st_low, st_high = table_bounds(p, n_st)
        w = p.half_size
        self.observation_space = spaces.Dict({
            "agent": spaces.Box(np.array([-w, -w, 0, 0, 0, -w, -w], F32),
                                np.array([w, w, p.max_health, p.max_energy, 1, w, w], F32)),
            "resources": spaces.Box(np.tile(res_low, (R, 1)), np.tile(res_high, (R, 1))),
            "stations": spaces.Box(np.tile(np.append(st_low, F32(0)), (S, 1)),
                                   np.tile(np.append(st_high, F32(1)), (S, 1))),
            "inventory": spaces.Box(0, p.inventory_capacity, (I,), F32),
            "craftable": spaces.Box(0, 1, (K,), F32),
            "crafting": spaces.Box(np.zeros(K + 1, F32),
                                   np.append(np.ones(K, F32), F32(self.recipes.ticks.max()))),
            "last_action": spaces.MultiDiscrete([len(TOOL_NAMES), len(RESULT_CODES)]),
            "time_left": spaces.Box(0, p.max_ticks, (1,), F32),
        })
        self.action_space = tool_action_space(p, resources=R, recipes=K, stations=S)

    def init_state(self, batch: int) -> WorldState:
        s = WorldState.zeros(batch, 1, self.slots, 0, len(self.params.item_names))
        K = self.recipes.size
        s.extra.update(crafted=np.zeros((batch, K), np.int32), items_crafted=np.zeros(batch, np.int32),
                       craft_attempts=np.zeros(batch, np.int32), raw_spent=np.zeros(batch, F32))
        return s

    # -- reset ---------------------------------------------------------------------------

    def reset(self, state: WorldState, index: np.ndarray, rngs: Sequence[np.random.Generator],
              seeds: Sequence[int | None] | None = None) -> None:
        """Lay out fresh worlds at ``index``, each drawing from its own generator."""
        if len(index) == 0:
            return
        if self.params.layout == "classic":
            spawn_x, spawn_z, resources, stations = self._classic(len(index))
        else:
            spawn_x, spawn_z, resources, stations = self._random(rngs)
        s = state
        for part, (x, z, kind) in ((self.slots.res, resources), (self.slots.st, stations)):
            s.ent_x[index, part], s.ent_z[index, part], s.ent_kind[index, part] = x, z, kind
            s.ent_alive[index, part] = True
        s.res_total[index] = self.sizes[0]
        reset_agents(self.params, s, index, spawn_x[:, None], spawn_z[:, None])
        for value in s.extra.values():
            value[index] = 0

    def _classic(self, n: int):
        p = self.params

        def columns(rows, types):
            x, z, kind = zip(*rows, strict=True)
            kind = [types.index(t) for t in kind]
            return tuple(np.repeat(np.array(c, dtype)[None], n, 0)
                         for c, dtype in ((x, F32), (z, F32), (kind, np.int8)))

        return (np.full(n, CLASSIC_SPAWN[0], F32), np.full(n, CLASSIC_SPAWN[1], F32),
                columns(CLASSIC_RESOURCES, p.resource_types), columns(CLASSIC_STATIONS, p.station_types))

    def _random(self, rngs: Sequence[np.random.Generator]):
        """Seeded placement, vectorized over the worlds being reset.

        Each world draws one block of uniforms from its own generator. Stations are placed
        one after another, each at the first of its candidate spots that keeps clear of
        the spawn point and of the stations before it; resources take the first spot clear
        of the stations. When no candidate is clear the first one is used, so every entity
        is always placed and every layout is solvable.
        """
        p = self.params
        R, S = self.sizes
        C = CANDIDATES
        counts = (2, S * C * 2, R * C * 2)
        u = np.stack([rng.random(sum(counts), dtype=F32) for rng in rngs])
        spawn_u, station_u, resource_u = split_columns(u, counts)
        n = len(rngs)
        w = F32(p.half_size)
        spawn_x, spawn_z = ((spawn_u * 2 - 1) * (w - 3)).T

        spots = (station_u.reshape(n, S, C, 2) * 2 - 1) * (w - 3)
        sx, sz = np.full((n, S), 1e4, F32), np.full((n, S), 1e4, F32)
        for i in range(S):  # a few stations: each must see the ones placed before it
            cx, cz = spots[:, i, :, 0], spots[:, i, :, 1]
            ok = (np.hypot(cx - spawn_x[:, None], cz - spawn_z[:, None]) > 3.0) & (
                np.hypot(cx[..., None] - sx[:, None], cz[..., None] - sz[:, None]) > STATION_SPACING).all(-1)
            chosen, _ = first_valid(spots[:, i], ok)
            sx[:, i], sz[:, i] = chosen[:, 0], chosen[:, 1]

        spots = (resource_u.reshape(n, R, C, 2) * 2 - 1) * (w - 2)
        cx, cz = spots[..., 0], spots[..., 1]
        clear = np.hypot(cx[..., None] - sx[:, None, None], cz[..., None] - sz[:, None, None]) > p.craft_range
        ok = clear.all(-1) & (np.hypot(cx - spawn_x[:, None, None], cz - spawn_z[:, None, None]) > 1.0)
        chosen, _ = first_valid(spots, ok)

        def kinds(counts, types):
            return np.repeat(np.array([types.index(t) for t, _ in counts], np.int8), [k for _, k in counts])

        res_kind = np.broadcast_to(kinds(p.resource_counts, p.resource_types), (n, R))
        st_kind = np.broadcast_to(kinds(p.station_counts, p.station_types), (n, S))
        return spawn_x, spawn_z, (chosen[..., 0], chosen[..., 1], res_kind), (sx, sz, st_kind)

    # -- step ----------------------------------------------------------------------------

    def step(self, state: WorldState, actions: ToolActions, active: np.ndarray | None = None):
        """Advance the worlds where ``active`` is true by one tick: rewards, terminated, truncated."""
        return step_subset(self._step, state, actions, active)

    def _step(self, s: WorldState, actions: ToolActions):
        p, recipes, extra = self.params, self.recipes, s.extra
        events = apply_tools(p, self.slots, s, actions, recipes)
        advance(p, self.slots, s, events, recipes)
        extra["craft_attempts"] += (s.last_tool[:, 0] == CRAFT) & s.acted[:, 0] & s.alive[:, 0]  # not while carrying on
        reward = np.zeros(s.batch_size, F32)
        started = events.craft_started[:, 0]
        b = np.flatnonzero(started >= 0)
        extra["raw_spent"][b] += self._raw_inputs[started[b]]
        crafted = events.crafted[:, 0]
        b = np.flatnonzero(crafted >= 0)
        if len(b):
            k = crafted[b]
            first = extra["crafted"][b, k] == 0
            extra["crafted"][b, k] += 1
            extra["items_crafted"][b] += 1
            reward[b] = np.where(k == self.goal_recipe, p.goal_reward,
                                 np.where(first & self._intermediate[k], p.intermediate_reward, 0.0))
        terminated = s.inventory[:, 0, self.goal_item] > 0
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return reward, terminated, truncated

    # -- observation and info ------------------------------------------------------------

    def observe(self, s: WorldState) -> dict[str, np.ndarray]:
        p, slots, recipes = self.params, self.slots, self.recipes
        B, K = s.batch_size, recipes.size
        agent = np.empty((B, 7), F32)
        for column, value in enumerate((s.x, s.z, s.health, s.energy, s.moving, s.target_x, s.target_z)):
            agent[:, column] = value[:, 0]
        last_action = np.empty((B, 2), np.int64)
        last_action[:, 0] = s.last_tool[:, 0]
        last_action[:, 1] = s.last_code[:, 0]
        n_res, n_st = len(p.resource_types), len(p.station_types)
        table = entity_table(p, slots, s, max(n_res, n_st), relative(s, s.obst_x, s.obst_z))[:, 0]
        stations = np.empty((B, slots.stations, 6 + n_st), F32)
        stations[..., :-1] = table[:, slots.st, :5 + n_st]
        shown = np.maximum(stations[..., 0], stations[..., 1])
        np.multiply(station_in_use(slots, s), shown, out=stations[..., -1])
        inventory = s.inventory[:, 0]
        crafting = np.zeros((B, K + 1), F32)
        busy = np.flatnonzero(s.craft_left[:, 0])
        crafting[busy, s.craft_recipe[busy, 0]] = 1.0
        crafting[:, K] = s.craft_left[:, 0]
        return {
            "agent": agent,
            "resources": table[:, slots.res, :5 + n_res],
            "stations": stations,
            "inventory": inventory.astype(F32),
            "craftable": self._craftable(inventory),
            "crafting": crafting,
            "last_action": last_action,
            "time_left": (p.max_ticks - s.tick).astype(F32)[:, None],
        }

    def info(self, s: WorldState) -> dict[str, np.ndarray]:
        extra = s.extra
        attempts = extra["craft_attempts"]
        done = extra["items_crafted"]
        efficiency = (100.0 * done / np.maximum(attempts, 1)).astype(F32)
        goal = (s.inventory[:, 0, self.goal_item] > 0).astype(np.int32)
        waste = self.waste(s)
        return {
            "success": goal > 0,
            "score": score(goal, efficiency, waste),
            "goal_crafted": goal,
            "items_crafted": done.copy(),
            "craft_attempts": attempts.copy(),
            "recipe_efficiency": efficiency,
            "waste": waste,
            "resources_collected": s.collected[:, 0].copy(),
        }

    def waste(self, s: WorldState) -> np.ndarray:
        """Raw materials crafting used up that went neither into the goal nor into the
        intermediates one goal needs (an item in progress counts as held)."""
        inventory = s.inventory[:, 0]
        busy = s.craft_left[:, 0] > 0
        making = np.where(busy, self.recipes.output[s.craft_recipe[:, 0]], -1)
        making_count = self.recipes.count[s.craft_recipe[:, 0]]
        useful = np.zeros(s.batch_size, F32)
        for item, need, value in self._chain:
            held = inventory[:, item] + (making == item) * making_count
            useful += np.minimum(held, need) * value
        goal_made = (inventory[:, self.goal_item] > 0) | (making == self.goal_item)
        useful = np.where(goal_made, self._goal_value, useful)
        return np.maximum(s.extra["raw_spent"] - useful, F32(0))

    def _craftable(self, inventory: np.ndarray) -> np.ndarray:
        craftable = np.empty((len(inventory), self.recipes.size), F32)
        for k, inputs in enumerate(self._inputs):
            ok = inventory[:, inputs[0][0]] >= inputs[0][1]
            for item, n in inputs[1:]:
                ok &= inventory[:, item] >= n
            craftable[:, k] = ok
        return craftable

    # -- the same rules on any array library (arena_envs.dense: every world, no host sync) --

    def dense_reset(self, s: WorldState, mask: Any, keys: Any) -> None:
        """Lay out fresh worlds where ``mask`` (B,) is true, the random layout drawing from the
        counter generator's ``keys`` (B,): the worlds :meth:`reset` makes from
        :class:`~arena_envs.xp.CounterGenerator` s of the same keys."""
        xp, p = namespace(s.x), self.params
        n = keys.shape[0]
        if p.layout == "classic":
            def rows(table, types):
                x, z, kind = (dense.constant(xp, s.x, column, dtype) for column, dtype in (
                    ([r[0] for r in table], xp.float32), ([r[1] for r in table], xp.float32),
                    ([types.index(r[2]) for r in table], xp.int8)))
                return [xp.broadcast_to(c[None, :], (n, len(table))) for c in (x, z, kind)]
            resources = rows(CLASSIC_RESOURCES, p.resource_types)
            stations = rows(CLASSIC_STATIONS, p.station_types)
            spawn_x = xp.full((n,), CLASSIC_SPAWN[0], dtype=xp.float32, device=s.x.device)
            spawn_z = xp.full((n,), CLASSIC_SPAWN[1], dtype=xp.float32, device=s.x.device)
        else:
            spawn_x, spawn_z, resources, stations = self._dense_random(xp, keys)
        (rx, rz, rk), (sx, sz, sk) = resources, stations
        new = dict(ent_x=xp.concat((rx, sx), axis=1), ent_z=xp.concat((rz, sz), axis=1),
                   ent_kind=xp.concat((xp.astype(rk, xp.int8), xp.astype(sk, xp.int8)), axis=1),
                   ent_alive=xp.ones(s.ent_alive.shape, dtype=xp.bool, device=s.x.device),
                   res_total=xp.full_like(s.res_total, self.sizes[0]))
        for name, value in new.items():
            old = getattr(s, name)
            setattr(s, name, dense.where_worlds(mask, xp.astype(value, old.dtype), old))
        dense.reset_agents(p, s, mask, spawn_x[:, None], spawn_z[:, None])
        for name, old in s.extra.items():
            s.extra[name] = dense.where_worlds(mask, xp.zeros_like(old), old)

    def _dense_random(self, xp: Any, keys: Any):
        """:meth:`_random` for every world at once, operation for operation."""
        p = self.params
        R, S = self.sizes
        C = CANDIDATES
        n = keys.shape[0]
        counts = (2, S * C * 2, R * C * 2)
        u = uniforms(xp, keys, sum(counts))
        w = f32(p.half_size)
        spawn = (u[:, :2] * 2 - 1) * f32(w - 3)
        spawn_x, spawn_z = spawn[:, 0], spawn[:, 1]

        spots = (xp.reshape(u[:, 2:2 + counts[1]], (n, S, C, 2)) * 2 - 1) * f32(w - 3)
        sx = xp.full((n, S), 1e4, dtype=xp.float32, device=u.device)
        sz = xp.full((n, S), 1e4, dtype=xp.float32, device=u.device)
        column = xp.arange(S, device=u.device)
        for i in range(S):  # a few stations: each must see the ones placed before it
            cx, cz = spots[:, i, :, 0], spots[:, i, :, 1]
            ok = (xp.hypot(cx - spawn_x[:, None], cz - spawn_z[:, None]) > 3.0) & xp.all(
                xp.hypot(cx[..., None] - sx[:, None, :], cz[..., None] - sz[:, None, :]) > STATION_SPACING, axis=-1)
            chosen, _ = dense.first_valid(spots[:, i, ...], ok)
            sx = xp.where(column == i, chosen[:, 0:1], sx)
            sz = xp.where(column == i, chosen[:, 1:2], sz)

        spots = (xp.reshape(u[:, 2 + counts[1]:], (n, R, C, 2)) * 2 - 1) * f32(w - 2)
        cx, cz = spots[..., 0], spots[..., 1]
        clear = xp.hypot(cx[..., None] - sx[:, None, None, :], cz[..., None] - sz[:, None, None, :]) > p.craft_range
        ok = xp.all(clear, axis=-1) & (xp.hypot(cx - spawn_x[:, None, None], cz - spawn_z[:, None, None]) > 1.0)
        chosen, _ = dense.first_valid(spots, ok)

        def kinds(counts, types, size):
            kind = np.repeat(np.array([types.index(t) for t, _ in counts], np.int8), [k for _, k in counts])
            return xp.broadcast_to(dense.constant(xp, u, kind, xp.int8)[None, :], (n, size))

        return (spawn_x, spawn_z, (chosen[..., 0], chosen[..., 1], kinds(p.resource_counts, p.resource_types, R)),
                (sx, sz, kinds(p.station_counts, p.station_types, S)))

    def dense_step(self, s: WorldState, actions: ToolActions):
        """:meth:`step` of every world: rewards, terminated, truncated."""
        xp, p, recipes = namespace(s.x), self.params, self.recipes
        extra, i32 = s.extra, xp.int32
        events = dense.apply_tools(p, self.slots, s, actions, recipes)
        dense.advance(p, self.slots, s, events, recipes)
        tried = (s.last_tool[:, 0] == CRAFT) & s.acted[:, 0] & s.alive[:, 0]  # not while carrying on
        extra["craft_attempts"] = extra["craft_attempts"] + xp.astype(tried, i32)
        started = xp.astype(events.craft_started[:, 0], xp.int64)
        began = started >= 0
        spent = xp.take(dense.constant(xp, s.x, self._raw_inputs, xp.float32), xp.where(began, started, 0))
        extra["raw_spent"] = xp.where(began, extra["raw_spent"] + spent, extra["raw_spent"])
        crafted = xp.astype(events.crafted[:, 0], xp.int64)
        done = crafted >= 0
        k = xp.where(done, crafted, 0)
        first = dense.gather(extra["crafted"], k[:, None])[:, 0] == 0
        made = (k[:, None] == xp.arange(recipes.size, device=k.device)) & done[:, None]
        extra["crafted"] = extra["crafted"] + xp.astype(made, i32)
        extra["items_crafted"] = extra["items_crafted"] + xp.astype(done, i32)
        intermediate = xp.take(dense.constant(xp, s.x, self._intermediate, xp.bool), k)
        zero = xp.zeros(k.shape, dtype=xp.float32, device=k.device)
        reward = xp.where(k == self.goal_recipe, xp.full_like(zero, f32(p.goal_reward)),
                          xp.where(first & intermediate, xp.full_like(zero, f32(p.intermediate_reward)), zero))
        reward = xp.where(done, reward, zero)
        terminated = s.inventory[:, 0, self.goal_item] > 0
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return reward, terminated, truncated

    def dense_observe(self, s: WorldState) -> dict[str, Any]:
        """:meth:`observe` of every world, as new arrays of the state's library."""
        xp, p, slots, recipes = namespace(s.x), self.params, self.slots, self.recipes
        f = xp.float32
        agent = xp.concat([s.x, s.z, s.health, s.energy, xp.astype(s.moving, f), s.target_x, s.target_z], axis=1)
        n_res, n_st = len(p.resource_types), len(p.station_types)
        table = dense.entity_table(p, slots, s, max(n_res, n_st), dense.relative(s, s.obst_x, s.obst_z))[:, 0, ...]
        stations = table[:, slots.st, :5 + n_st]
        shown = xp.maximum(stations[..., 0], stations[..., 1])
        at = s.craft_station[:, :, None] == xp.arange(slots.stations, dtype=xp.int16, device=s.x.device)
        in_use = xp.any((s.craft_left > 0)[:, :, None] & at, axis=1)
        inventory = s.inventory[:, 0, ...]
        busy = s.craft_left[:, 0] > 0
        recipe = xp.astype(s.craft_recipe[:, 0], xp.int64)
        making = (recipe[:, None] == xp.arange(recipes.size, device=s.x.device)) & busy[:, None]
        inputs = dense.constant(xp, s.x, recipes.inputs, xp.int32)
        return {
            "agent": agent,
            "resources": table[:, slots.res, :5 + n_res],
            "stations": xp.concat([stations, (xp.astype(in_use, f) * shown)[..., None]], axis=-1),
            "inventory": xp.astype(inventory, f),
            "craftable": xp.astype(xp.all(inventory[:, None, :] >= inputs[None, ...], axis=-1), f),
            "crafting": xp.concat([xp.astype(making, f), xp.astype(s.craft_left[:, 0:1], f)], axis=1),
            "last_action": xp.astype(xp.concat([s.last_tool, s.last_code], axis=1), xp.int64),
            "time_left": xp.astype(p.max_ticks - s.tick[:, None], f),
        }

    def dense_info(self, s: WorldState) -> dict[str, Any]:
        """:meth:`info` of every world, as arrays of the state's library (numpy's float64 steps kept)."""
        xp, extra = namespace(s.x), s.extra
        f64 = xp.float64
        attempts, done = extra["craft_attempts"], extra["items_crafted"]
        efficiency = xp.astype(100.0 * xp.astype(done, f64) / xp.astype(xp.clip(attempts, 1, None), f64), xp.float32)
        goal = xp.astype(s.inventory[:, 0, self.goal_item] > 0, xp.int32)
        waste = self._dense_waste(s)
        total = (xp.astype(goal, f64) * 50.0 + xp.astype(efficiency * f32(0.3), f64)
                 - xp.astype(waste * f32(5.0), f64))
        return {
            "success": goal > 0,
            "score": xp.astype(xp.clip(total, 0.0, None), xp.float32),
            "goal_crafted": goal,
            "items_crafted": done,
            "craft_attempts": attempts,
            "recipe_efficiency": efficiency,
            "waste": waste,
            "resources_collected": s.collected[:, 0],
        }

    def _dense_waste(self, s: WorldState) -> Any:
        """:meth:`waste` of every world: ``held`` is int32 and the chain's numbers float32 scalars,
        so numpy makes each term in float64 and adds it to the float32 sum."""
        xp, recipes = namespace(s.x), self.recipes
        f64 = xp.float64
        inventory = s.inventory[:, 0, ...]
        k = xp.astype(s.craft_recipe[:, 0], xp.int64)
        output = xp.take(dense.constant(xp, s.x, recipes.output, xp.int64), k)
        making = xp.where(s.craft_left[:, 0] > 0, output, xp.full_like(output, -1))
        making_count = xp.take(dense.constant(xp, s.x, recipes.count, xp.int32), k)
        useful = xp.zeros(k.shape, dtype=xp.float32, device=k.device)
        for item, need, value in self._chain:
            held = inventory[:, int(item)] + xp.astype(making == int(item), xp.int32) * making_count
            term = xp.minimum(xp.astype(held, f64), float(need)) * float(value)
            useful = xp.astype(xp.astype(useful, f64) + term, xp.float32)
        goal_made = (inventory[:, self.goal_item] > 0) | (making == self.goal_item)
        useful = xp.where(goal_made, xp.full_like(useful, float(self._goal_value)), useful)
        return xp.clip(s.extra["raw_spent"] - useful, 0.0, None)


def score(goal: np.ndarray, efficiency: np.ndarray, waste: np.ndarray) -> np.ndarray:
    """The Agent Arena crafting score: max(0, 50·goal + 0.3·recipe_efficiency − 5·waste)."""
    return np.maximum(0.0, 50.0 * goal + 0.3 * efficiency - 5.0 * waste).astype(F32)
