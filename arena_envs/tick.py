"""One tick of the 2D world: the tools every agent chose, then movement, hazards and crafts.

:func:`apply_tools` and :func:`advance` are the two halves of one tick; scenarios call
them from their own ``step`` and add rewards, termination and their own content. Both
work on whole batches: no Python loop runs over worlds or entities.
"""

from __future__ import annotations

import numpy as np

from arena_envs.world import (
    BUSY,
    COLLECT,
    CRAFT,
    F32,
    IDLE,
    INVENTORY_FULL,
    MISSING_MATERIALS,
    MOVE_TO,
    NO_TOOL,
    NOT_FOUND,
    OK,
    OUT_OF_RANGE,
    QUERY_WORLD,
    TOOL_NAMES,
    EntitySlots,
    RecipeTable,
    TickEvents,
    ToolActions,
    WorldParams,
    WorldState,
    any_true,
    reduce_last_axis,
)


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
        s.acted[...] = new
    else:
        s.acted[...] = True
        s.last_tool[...] = tool
        s.last_code[...] = code
        s.last_index[...] = index
        s.last_value[...] = value
    return events


def _collect(params, slots, s, act, collecting, code, index, value, events) -> None:
    # flat indices and np.take: faster than np.nonzero and fancy indexing (as in _slide_around_obstacles)
    ba = np.flatnonzero(collecting)  # world * A + agent
    if len(ba) == 0:
        return
    agents, entities = collecting.shape[1], s.ent_x.shape[1]
    b, a = np.divmod(ba, agents) if agents > 1 else (ba, np.zeros_like(ba))
    r = act.collect_index.take(ba)
    index.put(ba, r)
    br = b * entities + r  # flat index into the (B, E) arrays
    exists = s.ent_alive.take(br)
    dist = np.hypot(s.ent_x.take(br) - s.x.take(ba), s.ent_z.take(br) - s.z.take(ba))
    in_range = dist <= params.collect_range
    carried = s.inventory.reshape(-1, s.inventory.shape[-1]).take(ba, axis=0)
    room = np.add.reduce(carried, axis=-1) < params.inventory_capacity
    code.put(ba, np.where(~exists, NOT_FOUND, np.where(~in_range, OUT_OF_RANGE,
                                                           np.where(~room, INVENTORY_FULL, OK))))
    value.put(ba, np.where(exists, dist, 0.0))
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
    s.inventory[b, a, resource_items(params).take(kind)] += 1
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
    """The inventory column each resource type goes to (a read-only array, made once per vocabulary)."""
    key = (params.item_names, params.resource_types)
    items = _RESOURCE_ITEMS.get(key)
    if items is None:
        items = np.array([params.item_names.index(t) for t in params.resource_types], np.intp)
        items.flags.writeable = False
        _RESOURCE_ITEMS[key] = items
    return items


_RESOURCE_ITEMS: dict[tuple, np.ndarray] = {}


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
    # the (world, agent) pairs as flat indices ba = b * A + a, gathered with np.take: several
    # times faster than np.nonzero and fancy indexing with two index arrays (same pairs, same order)
    ba = np.flatnonzero(reduce_last_axis(np.logical_or, overlap))
    b = ba // s.x.shape[1] if s.x.shape[1] > 1 else ba
    px, pz = s.x.take(ba), s.z.take(ba)
    ox, oz, rr = s.obst_x.take(b, axis=0), s.obst_z.take(b, axis=0), reach.take(b, axis=0)  # (k, O)
    # the obstacle in the way: the deepest overlap of the intended position
    j = np.argmin(np.hypot(nx.take(ba)[:, None] - ox, nz.take(ba)[:, None] - oz) - rr, axis=1)
    k = np.arange(len(ba))
    nrm_x, nrm_z = px - ox[k, j], pz - oz[k, j]
    nrm_len = np.maximum(np.hypot(nrm_x, nrm_z), F32(1e-6))
    nrm_x, nrm_z = nrm_x / nrm_len, nrm_z / nrm_len
    mvx, mvz, length = vx.take(ba), vz.take(ba), step.take(ba)
    into = mvx * nrm_x + mvz * nrm_z
    tx, tz = mvx - into * nrm_x, mvz - into * nrm_z  # the part of the move along the surface
    tangent_len = np.hypot(tx, tz)
    # head-on: go round on the side the target lies on (left when exactly behind)
    side = np.where(nrm_x * (s.target_z.take(ba) - pz) - nrm_z * (s.target_x.take(ba) - px) < 0, -1.0, 1.0)
    head_on = tangent_len < 0.1 * length
    safe_len = np.maximum(tangent_len, F32(1e-6))
    tx = np.where(head_on, -nrm_z * side, tx / safe_len) * length
    tz = np.where(head_on, nrm_x * side, tz / safe_len) * length
    slide_x, slide_z = px + tx, pz + tz
    # push the slid position out of the circles it overlaps, keep it in the world
    qx, qz = slide_x[:, None] - ox, slide_z[:, None] - oz
    qd = np.maximum(np.hypot(qx, qz), F32(1e-6))
    push = np.maximum(rr - qd, 0.0) / qd
    # np.minimum(np.maximum(...)) is np.clip without its Python layers (~3 us a call on small batches)
    slide_x = np.minimum(np.maximum(slide_x + np.add.reduce(qx * push, axis=-1), -bound), bound)
    slide_z = np.minimum(np.maximum(slide_z + np.add.reduce(qz * push, axis=-1), -bound), bound)
    stuck = reduce_last_axis(np.logical_or, np.hypot(slide_x[:, None] - ox, slide_z[:, None] - oz) < rr - F32(1e-3))
    nx.put(ba, np.where(stuck, px, slide_x))
    nz.put(ba, np.where(stuck, pz, slide_z))


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
    entry = np.asarray(params.hazard_entry_damage, F32).take(kind)
    per_tick = np.asarray(params.hazard_damage_per_s, F32).take(kind) * F32(params.dt)
    damage = np.minimum(np.add.reduce(entered * entry + inside * per_tick, axis=-1) * s.alive, s.health)
    s.health -= damage
    s.damage_taken += damage
    events.damage += damage
    s.alive &= s.health > 0
    s.moving &= s.alive


# ---------------------------------------------------------------------------------------
# perception
