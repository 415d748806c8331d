"""One tick of the 2D world as a fixed sequence of array operations, for any array library.

These are the rules of :mod:`arena_envs.tick`, :mod:`arena_envs.perception` and
:mod:`arena_envs.actions` written against the Python array API standard (``xp`` is taken
from the state's arrays, DESIGN §19), in the form a GPU needs: every agent and world is
computed and masks select with ``where``. Nothing branches on array values, no shape
depends on them and nothing is read back to the host, so a step is the same kernels
every time (and compiles whole). The numpy path of the CPU keeps its sparse form, which
gathers the few agents an event concerns: ``tests/test_backends.py`` holds the two to the
same trajectories.

Arithmetic follows the numpy rules operation for operation, including numpy's promotions
(the obstacle slide and the Foraging reward run in float64 there, so they do here), so
that torch on the CPU gives the same floats; ``hypot`` stays ``hypot`` for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import array_api_compat
import numpy as np

from arena_envs.world import (
    BUSY,
    COLLECT,
    CRAFT,
    IDLE,
    INVALID_PARAMS,
    INVENTORY_FULL,
    MISSING_MATERIALS,
    MOVE_TO,
    NO_TOOL,
    NOT_FOUND,
    OK,
    OUT_OF_RANGE,
    QUERY_FILTERS,
    QUERY_WORLD,
    SEND_MESSAGE,
    TOOL_NAMES,
    EntitySlots,
    RecipeTable,
    TickEvents,
    ToolActions,
    WorldParams,
    WorldState,
)
from arena_envs.xp import namespace


def f32(value: float) -> float:
    """``value`` rounded to float32 (to nearest, ties to even), as a Python float: a constant that
    every backend reads alike. Plain Python arithmetic, which torch.compile folds (numpy's
    float32 would break its graph); exact for normal numbers, which every rule's constant is."""
    if value == 0 or value != value or value in (float("inf"), float("-inf")):
        return float(value)
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(mantissa * (1 << 24)) / (1 << 24), exponent)


def constant(xp: Any, like: Any, values: Any, dtype: Any) -> Any:
    """A small constant table on ``like``'s device."""
    return xp.asarray(np.array(values), dtype=dtype, device=like.device)


def gather(table: Any, index: Any) -> Any:
    """``table[b, index[b, a]]`` for a (B, E) table and (B, A) indices in range: (B, A)."""
    xp = namespace(table)
    return xp.take_along_axis(table, index, axis=1)


# -- actions ------------------------------------------------------------------------------

ACTION_KEYS = ("tool", "move_to", "collect", "craft", "query_world", "send_message")


def decode(actions: Any, shape: tuple[int, ...], space: Any, params: WorldParams, like: Any) -> ToolActions:
    """A batch of structured actions (arrays of any library, numpy or on ``like``'s device) as
    :class:`ToolActions` (B, A) on ``like``'s device, checked as :func:`arena_envs.actions.decode_actions`
    checks them: a malformed batch raises ``ValueError``, a bad value makes that agent's
    action ``INVALID_PARAMS``; the values are checked with ``where``, never read back."""
    from arena_envs.actions import min_speed

    xp, device = namespace(like), like.device
    if not isinstance(actions, Mapping):
        raise ValueError(f"the action must be a dict with keys {ACTION_KEYS}, got {type(actions).__name__}")
    unknown = set(actions) - set(ACTION_KEYS)
    if unknown:
        raise ValueError(f"unknown action keys {sorted(unknown)}; expected a subset of {ACTION_KEYS}")
    if actions.get("tool") is None:
        raise ValueError("the action has no 'tool' entry")
    query = actions.get("query_world") or {}
    if not isinstance(query, Mapping) or set(query) - {"radius", "filter"}:
        raise ValueError("action 'query_world' must be a dict with 'radius' and 'filter'")

    def field(source, key, tail=(), label=None):
        value = source.get(key)
        if value is None:
            return None
        arr = value if array_api_compat.is_array_api_obj(value) and not isinstance(value, np.ndarray) else None
        if arr is None:
            value = np.asarray(value)
            if value.dtype.kind not in "iuf":
                raise ValueError(f"action '{label or key}' must be numeric (not boolean), got dtype {value.dtype}")
            arr = xp.asarray(value, device=device)
        else:
            arr = xp.asarray(arr, device=device)
            if not (xp.isdtype(arr.dtype, "integral") or xp.isdtype(arr.dtype, "real floating")):
                raise ValueError(f"action '{label or key}' must be numeric (not boolean), got dtype {arr.dtype}")
        if tuple(arr.shape) != shape + tail:
            raise ValueError(f"action '{label or key}' has shape {tuple(arr.shape)}, expected {shape + tail}")
        return arr

    def index(arr, n):
        """Whole numbers in [0, n) as int64 (0 elsewhere) and where they are."""
        n = int(n)
        if xp.isdtype(arr.dtype, "real floating"):
            ok = xp.isfinite(arr) & (arr == xp.round(arr)) & (arr >= 0) & (arr < n)
            return xp.astype(xp.where(ok, arr, xp.zeros_like(arr)), xp.int64), ok
        ok = (arr >= 0) & (arr < n)
        return xp.astype(xp.where(ok, arr, xp.zeros_like(arr)), xp.int64), ok

    def as_f32(arr):
        return xp.astype(arr, xp.float32)

    tool, valid = index(field(actions, "tool"), len(TOOL_NAMES))
    false = xp.zeros(shape, dtype=xp.bool, device=device)
    zeros_i = xp.zeros(shape, dtype=xp.int64, device=device)
    zeros_f = xp.zeros(shape, dtype=xp.float32, device=device)

    def check(tool_id, good):
        nonlocal valid
        valid = valid & (good | (tool != tool_id))

    move = field(actions, "move_to", (3,))
    if move is None:
        check(MOVE_TO, false)
        target_x = target_z = zeros_f
        speed = xp.ones(shape, dtype=xp.float32, device=device)
    else:
        move = as_f32(move)
        target_x, target_z, speed = move[..., 0], move[..., 1], move[..., 2]
        w = params.half_size
        check(MOVE_TO, (xp.abs(target_x) <= w) & (xp.abs(target_z) <= w)
              & (speed >= f32(min_speed(params))) & (speed <= params.max_speed_multiplier))
    collect = field(actions, "collect")
    if collect is None:
        check(COLLECT, false)
        collect_index = zeros_i
    else:
        collect_index, ok = index(collect, space["collect"].n)
        check(COLLECT, ok)

    def pair(key, nvec, tool_id):
        arr = field(actions, key, (2,))
        if arr is None:
            check(tool_id, false)
            return zeros_i, zeros_i
        first, ok_first = index(arr[..., 0], int(nvec[0]))
        second, ok_second = index(arr[..., 1], int(nvec[1]))
        check(tool_id, ok_first & ok_second)
        return first, second

    recipe, station = pair("craft", space["craft"].nvec, CRAFT)
    token, target = pair("send_message", space["send_message"].nvec, SEND_MESSAGE)
    radius = field(query, "radius", (1,), "query_world.radius")
    if radius is None:
        radius = xp.full(shape, f32(params.query_radius_default), dtype=xp.float32, device=device)
    else:
        radius = as_f32(radius)[..., 0]
        check(QUERY_WORLD, (radius > 0) & (radius <= params.query_radius_max))
    qfilter = field(query, "filter", (), "query_world.filter")
    if qfilter is None:
        qfilter = zeros_i
    else:
        qfilter, ok = index(qfilter, len(QUERY_FILTERS))
        check(QUERY_WORLD, ok)
    failure = xp.where(valid, xp.asarray(OK, dtype=xp.int8, device=device),
                       xp.asarray(INVALID_PARAMS, dtype=xp.int8, device=device))

    def agent_axis(arr):
        return arr[:, None] if len(shape) == 1 else arr

    fields = dict(tool=tool, failure=failure, target_x=target_x, target_z=target_z, speed=speed,
                  collect_index=collect_index, recipe=recipe, station=station, query_radius=radius,
                  query_filter=qfilter, message_token=token, message_target=target)
    return ToolActions(**{k: agent_axis(v) for k, v in fields.items()})


# -- one tick -----------------------------------------------------------------------------


def no_events(like: Any) -> TickEvents:
    """Nothing happened yet, for (B, A) agents shaped like ``like``."""
    xp, device = namespace(like), like.device
    shape = tuple(like.shape)
    unset = xp.full(shape, -1, dtype=xp.int16, device=device)
    return TickEvents(xp.zeros(shape, dtype=xp.int32, device=device), unset,
                      xp.zeros(shape, dtype=xp.float32, device=device), unset, unset)


def apply_tools(params: WorldParams, slots: EntitySlots, s: WorldState, act: ToolActions,
                recipes: RecipeTable | None = None) -> TickEvents:
    """:func:`arena_envs.tick.apply_tools` over every agent: the state's arrays are replaced."""
    xp = namespace(s.x)
    tool = act.tool
    code = xp.astype(act.failure, xp.int8)
    ok = (code == OK) & s.alive
    index = xp.zeros_like(s.last_index)
    value = xp.zeros_like(s.last_value)
    events = no_events(s.x)

    def set_code(mask, result):
        return xp.where(mask, xp.asarray(result, dtype=xp.int8, device=code.device), code)

    if slots.stations:  # a crafter may only idle, query and talk
        busy = (s.craft_left > 0) & ok & ((tool == MOVE_TO) | (tool == COLLECT) | (tool == CRAFT))
        code = set_code(busy, BUSY)
        index = xp.where(busy, s.craft_station, index)
        value = xp.where(busy, xp.astype(s.craft_left, xp.float32), value)
        ok = ok & ~busy

    move = ok & (tool == MOVE_TO)
    s.target_x = xp.where(move, act.target_x, s.target_x)
    s.target_z = xp.where(move, act.target_z, s.target_z)
    s.speed = xp.where(move, act.speed, s.speed)
    s.moving = (s.moving | move) & ~(ok & (tool == IDLE))

    collecting = ok & (tool == COLLECT)
    if slots.resources:
        code, index, value = _collect(params, slots, s, act, collecting, code, index, value, events)
    else:  # a world without resources (team capture) has nothing to collect
        code = set_code(collecting, NOT_FOUND)
    crafting = ok & (tool == CRAFT)
    if slots.stations and recipes is not None:
        code, index, value = _craft(params, slots, s, act, recipes, crafting, code, index, value, events)
    else:
        code = set_code(crafting, NOT_FOUND)
        index = xp.where(crafting, xp.astype(act.station, xp.int16), index)
    query = ok & (tool == QUERY_WORLD)
    s.query_radius = xp.where(query, act.query_radius, s.query_radius)
    s.query_filter = xp.where(query, xp.astype(act.query_filter, xp.int8), s.query_filter)

    new = tool != NO_TOOL  # an agent given no new command keeps its last action's record
    s.last_tool = xp.where(new, xp.astype(tool, xp.int8), s.last_tool)
    s.last_code = xp.where(new, code, s.last_code)
    s.last_index = xp.where(new, index, s.last_index)
    s.last_value = xp.where(new, value, s.last_value)
    s.acted = new
    return events


def _lower_index_wins(xp: Any, success: Any, key: Any) -> Any:
    """Of the agents of a world that succeed on the same ``key`` (B, A), all but the lowest lose."""
    agents = success.shape[1]
    earlier = constant(xp, success, np.tri(agents, k=-1, dtype=bool), xp.bool)  # [a, a']: a' < a
    clash = (key[:, :, None] == key[:, None, :]) & success[:, None, :] & earlier[None]
    return success & xp.any(clash, axis=2)


def _add_items(xp: Any, inventory: Any, item: Any, count: Any) -> Any:
    """``inventory`` (B, A, I) with ``count`` (B, A) more of ``item`` (B, A) for every agent."""
    kinds = xp.arange(inventory.shape[-1], dtype=xp.int64, device=inventory.device)
    return inventory + xp.astype(item[..., None] == kinds, xp.int32) * xp.astype(count, xp.int32)[..., None]


def _collect(params, slots, s, act, collecting, code, index, value, events):
    xp = namespace(s.x)
    device = s.x.device
    r = xp.clip(act.collect_index, 0, slots.resources - 1)
    exists = gather(s.ent_alive, r)
    dist = xp.hypot(gather(s.ent_x, r) - s.x, gather(s.ent_z, r) - s.z)
    in_range = dist <= params.collect_range
    room = xp.sum(s.inventory, axis=-1, dtype=xp.int32) < params.inventory_capacity

    def c(v):
        return xp.asarray(v, dtype=xp.int8, device=device)

    result = xp.where(~exists, c(NOT_FOUND), xp.where(~in_range, c(OUT_OF_RANGE),
                                                       xp.where(~room, c(INVENTORY_FULL), c(OK))))
    code = xp.where(collecting, result, code)
    index = xp.where(collecting, xp.astype(r, xp.int16), index)
    value = xp.where(collecting, xp.where(exists, dist, xp.zeros_like(dist)), value)
    success = collecting & exists & in_range & room
    if s.x.shape[1] > 1:  # two agents on one resource in the same tick: the lower index wins
        lost = _lower_index_wins(xp, success, r)
        code = xp.where(lost, c(NOT_FOUND), code)
        success = success & ~lost
    entities = xp.arange(s.ent_x.shape[1], dtype=xp.int64, device=device)
    taken = xp.any((r[..., None] == entities) & success[..., None], axis=1)  # (B, E)
    kind = xp.astype(gather(s.ent_kind, r), xp.int64)
    s.ent_alive = s.ent_alive & ~taken
    items = constant(xp, s.x, [params.item_names.index(t) for t in params.resource_types], xp.int64)
    s.inventory = _add_items(xp, s.inventory, xp.reshape(xp.take(items, xp.reshape(kind, (-1,))), kind.shape), success)
    s.collected = s.collected + xp.astype(success, xp.int32)
    events.collected = xp.astype(success, xp.int32)
    events.collected_kind = xp.where(success, xp.astype(kind, xp.int16), events.collected_kind)
    return code, index, value


def _craft(params, slots, s, act, recipes, crafting, code, index, value, events):
    """:func:`arena_envs.tick._craft` over every agent (the first failing check gives the code)."""
    xp = namespace(s.x)
    device = s.x.device
    k, j = act.recipe, act.station
    known = (k >= 0) & (k < recipes.size) & (j >= 0) & (j < slots.stations)
    k, j = xp.where(known, k, xp.zeros_like(k)), xp.where(known, j, xp.zeros_like(j))
    col = slots.st.start + j
    index = xp.where(crafting, xp.astype(j, xp.int16), index)
    present = known & gather(s.ent_alive, col)
    station_type = constant(xp, s.x, recipes.station, xp.int8)
    suitable = present & (gather(s.ent_kind, col) == xp.reshape(xp.take(station_type, xp.reshape(k, (-1,))), k.shape))
    dist = xp.hypot(gather(s.ent_x, col) - s.x, gather(s.ent_z, col) - s.z)
    inputs = constant(xp, s.x, recipes.inputs, xp.int32)  # (K, I)
    needs = xp.reshape(xp.take(inputs, xp.reshape(k, (-1,)), axis=0), (*k.shape, inputs.shape[1]))
    enough = xp.all(s.inventory >= needs, axis=-1)
    count = xp.reshape(xp.take(constant(xp, s.x, recipes.count, xp.int32), xp.reshape(k, (-1,))), k.shape)
    room = (xp.sum(s.inventory, axis=-1, dtype=xp.int32) - xp.sum(needs, axis=-1, dtype=xp.int32) + count
            <= params.inventory_capacity)
    working = s.craft_left > 0  # (B, A'): is agent a' at a station now, and at which
    taken = xp.any(working[:, None, :] & (xp.astype(s.craft_station, xp.int64)[:, None, :] == j[:, :, None]), axis=2)

    def c(v):
        return xp.asarray(v, dtype=xp.int8, device=device)

    result = c(OK)  # the first failing check gives the code: applied last to first
    for failed, why in ((taken, BUSY), (dist > params.craft_range, OUT_OF_RANGE), (~room, INVENTORY_FULL),
                        (~enough, MISSING_MATERIALS), (~suitable, NOT_FOUND)):
        result = xp.where(failed, c(why), result)
    value = xp.where(crafting, xp.where(present & (result != BUSY), dist, xp.zeros_like(dist)), value)
    success = crafting & (result == OK)
    if s.x.shape[1] > 1:  # two agents starting at one station in the same tick: the lower index wins
        lost = _lower_index_wins(xp, success, j)
        result = xp.where(lost, c(BUSY), result)
        value = xp.where(lost, xp.zeros_like(value), value)
        success = success & ~lost
    code = xp.where(crafting, result, code)
    ticks = xp.reshape(xp.take(constant(xp, s.x, recipes.ticks, xp.int32), xp.reshape(k, (-1,))), k.shape)
    s.inventory = s.inventory - needs * xp.astype(success, xp.int32)[..., None]
    s.craft_recipe = xp.where(success, xp.astype(k, xp.int16), s.craft_recipe)
    s.craft_station = xp.where(success, xp.astype(j, xp.int16), s.craft_station)
    s.craft_left = xp.where(success, ticks, s.craft_left)
    s.moving = s.moving & ~success  # the crafter stays at its station
    events.craft_started = xp.where(success, xp.astype(k, xp.int16), events.craft_started)
    return code, index, value


def advance(params: WorldParams, slots: EntitySlots, s: WorldState, events: TickEvents,
            recipes: RecipeTable | None = None) -> None:
    """:func:`arena_envs.tick.advance` over every agent: movement, energy, hazards, crafts, the clock."""
    _move(params, s)
    if slots.hazards:
        _hazards(params, slots, s, events)
    if recipes is not None:
        _progress_crafts(s, recipes, events)
    s.tick = s.tick + 1


def _progress_crafts(s: WorldState, recipes: RecipeTable, events: TickEvents) -> None:
    xp = namespace(s.x)
    crafting = (s.craft_left > 0) & s.alive
    s.craft_left = s.craft_left - xp.astype(crafting, xp.int32)
    done = crafting & (s.craft_left == 0)
    k = xp.reshape(xp.astype(s.craft_recipe, xp.int64), (-1,))
    output = xp.reshape(xp.take(constant(xp, s.x, recipes.output, xp.int64), k), done.shape)
    count = xp.reshape(xp.take(constant(xp, s.x, recipes.count, xp.int32), k), done.shape)
    s.inventory = _add_items(xp, s.inventory, output, count * xp.astype(done, xp.int32))
    events.crafted = xp.where(done, xp.astype(s.craft_recipe, xp.int16), events.crafted)


def _move(params: WorldParams, s: WorldState) -> None:
    xp = namespace(s.x)
    moving = s.moving & s.alive
    regen = f32(params.energy_regen_per_s * params.dt)
    dx = s.target_x - s.x
    dz = s.target_z - s.z
    dist = xp.sqrt(dx * dx + dz * dz)
    speed = xp.where(s.energy > 0, s.speed, xp.minimum(s.speed, xp.ones_like(s.speed)))
    step = xp.minimum(f32(params.move_speed * params.dt) * speed, dist) * xp.astype(moving, xp.float32)
    scale = step / xp.maximum(dist, xp.full_like(dist, f32(1e-6)))
    vx = dx * scale
    vz = dz * scale
    bound = f32(params.half_size - params.agent_radius)
    nx = xp.clip(s.x + vx, -bound, bound)
    nz = xp.clip(s.z + vz, -bound, bound)
    if s.obst_r.shape[1]:
        nx, nz = _slide_around_obstacles(params, s, nx, nz, vx, vz, step, bound)
    s.x, s.z = nx, nz
    # energy: sprinting (speed above 1) drains it, anything slower regains it
    drain = f32(params.energy_drain_per_s * params.dt) * (speed - 1.0)
    energy = s.energy + xp.where(moving & (speed > 1.0), -drain, xp.full_like(drain, regen))
    s.energy = xp.clip(energy, 0.0, f32(params.max_energy))
    dx = s.target_x - s.x
    dz = s.target_z - s.z
    s.moving = s.moving & (dx * dx + dz * dz >= f32(params.arrive_distance**2))


def _slide_around_obstacles(params, s, nx, nz, vx, vz, step, bound):
    """:func:`arena_envs.tick._slide_around_obstacles` for every agent; those not in a circle keep (nx, nz).

    The slide runs in float64 from the side choice on, as numpy's promotion makes it there.
    """
    xp = namespace(s.x)
    f64 = xp.float64
    reach = s.obst_r + f32(params.agent_radius)  # (B, O)
    ox, oz, rr = s.obst_x[:, None, :], s.obst_z[:, None, :], reach[:, None, :]  # (B, 1, O)
    cx = nx[:, :, None] - ox
    cz = nz[:, :, None] - oz
    overlap = xp.any(cx * cx + cz * cz < rr * rr, axis=-1)  # (B, A)
    px, pz = s.x, s.z
    # the obstacle in the way: the deepest overlap of the intended position
    j = xp.argmin(xp.hypot(cx, cz) - rr, axis=-1)  # (B, A)
    nrm_x, nrm_z = px - gather(s.obst_x, j), pz - gather(s.obst_z, j)
    nrm_len = xp.maximum(xp.hypot(nrm_x, nrm_z), xp.full_like(nrm_x, f32(1e-6)))
    nrm_x, nrm_z = nrm_x / nrm_len, nrm_z / nrm_len
    into = vx * nrm_x + vz * nrm_z
    tx, tz = vx - into * nrm_x, vz - into * nrm_z  # the part of the move along the surface
    tangent_len = xp.hypot(tx, tz)
    # head-on: go round on the side the target lies on (left when exactly behind)
    toward = nrm_x * (s.target_z - pz) - nrm_z * (s.target_x - px)
    side = xp.where(toward < 0, xp.full_like(toward, -1.0, dtype=f64), xp.full_like(toward, 1.0, dtype=f64))
    head_on = tangent_len < 0.1 * step
    safe_len = xp.maximum(tangent_len, xp.full_like(tangent_len, f32(1e-6)))
    length = xp.astype(step, f64)
    tx = xp.where(head_on, xp.astype(-nrm_z, f64) * side, xp.astype(tx / safe_len, f64)) * length
    tz = xp.where(head_on, xp.astype(nrm_x, f64) * side, xp.astype(tz / safe_len, f64)) * length
    slide_x, slide_z = xp.astype(px, f64) + tx, xp.astype(pz, f64) + tz
    # push the slid position out of the circles it overlaps, keep it in the world
    ox64, oz64, rr64 = xp.astype(ox, f64), xp.astype(oz, f64), xp.astype(rr, f64)
    qx, qz = slide_x[..., None] - ox64, slide_z[..., None] - oz64
    qd = xp.maximum(xp.hypot(qx, qz), xp.full_like(qx, f32(1e-6)))
    push = xp.maximum(rr64 - qd, xp.zeros_like(qd)) / qd
    slide_x = xp.clip(slide_x + xp.sum(qx * push, axis=-1), -bound, bound)
    slide_z = xp.clip(slide_z + xp.sum(qz * push, axis=-1), -bound, bound)
    stuck = xp.any(xp.hypot(slide_x[..., None] - ox64, slide_z[..., None] - oz64)
                   < xp.astype(rr - f32(1e-3), f64), axis=-1)
    slid_x = xp.astype(xp.where(stuck, xp.astype(px, f64), slide_x), xp.float32)
    slid_z = xp.astype(xp.where(stuck, xp.astype(pz, f64), slide_z), xp.float32)
    return xp.where(overlap, slid_x, nx), xp.where(overlap, slid_z, nz)


def _hazards(params: WorldParams, slots: EntitySlots, s: WorldState, events: TickEvents) -> None:
    xp = namespace(s.x)
    hz = slots.haz
    dx = s.x[:, :, None] - s.ent_x[:, None, hz]
    dz = s.z[:, :, None] - s.ent_z[:, None, hz]
    inside = dx * dx + dz * dz < f32(params.hazard_radius**2)
    entered = inside & ~s.in_hazard
    s.in_hazard = inside
    kind = xp.reshape(xp.astype(s.ent_kind[:, hz], xp.int64), (-1,))
    shape = (s.x.shape[0], 1, slots.hazards)
    entry = xp.reshape(xp.take(constant(xp, s.x, params.hazard_entry_damage, xp.float32), kind), shape)
    per_s = xp.reshape(xp.take(constant(xp, s.x, params.hazard_damage_per_s, xp.float32), kind), shape)
    per_tick = per_s * f32(params.dt)
    hurt = xp.astype(entered, xp.float32) * entry + xp.astype(inside, xp.float32) * per_tick
    damage = xp.minimum(xp.sum(hurt, axis=-1) * xp.astype(s.alive, xp.float32), s.health)
    s.health = s.health - damage
    s.damage_taken = s.damage_taken + damage
    events.damage = events.damage + damage
    s.alive = s.alive & (s.health > 0)
    s.moving = s.moving & s.alive


# -- perception ---------------------------------------------------------------------------


def relative(s: WorldState, ex: Any, ez: Any) -> tuple[Any, Any, Any]:
    """Offsets and squared distances from every agent to every entity: (B, A, E) each."""
    dx = ex[:, None, :] - s.x[:, :, None]
    dz = ez[:, None, :] - s.z[:, :, None]
    return dx, dz, dx * dx + dz * dz


def line_of_sight(s: WorldState, obstacles: tuple, dx: Any, dz: Any, d2: Any, candidates: Any) -> Any:
    """``candidates`` (B, A, E) less the pairs an obstacle hides (every pair against every obstacle)."""
    xp = namespace(s.x)
    if s.obst_r.shape[1] == 0:
        return candidates
    ox, oz, _ = obstacles
    fx, fz = ox[:, :, None, :], oz[:, :, None, :]  # (B, A, 1, O)
    ex, ez, seg2 = dx[..., None], dz[..., None], d2[..., None]
    r = s.obst_r[:, None, None, :]
    along = fx * ex + fz * ez
    across = fx * ez - fz * ex
    hidden = (across * across < r * r * seg2) & (along > 0) & (along < seg2)
    return candidates & ~xp.any(hidden, axis=-1)


def entity_table(params: WorldParams, slots: EntitySlots, s: WorldState, n_kinds: int, obstacles: tuple) -> Any:
    """:func:`arena_envs.perception.entity_table`: (B, A, E, 5 + n_kinds) rows of every point entity."""
    xp = namespace(s.x)
    dx, dz, d2 = relative(s, s.ent_x, s.ent_z)
    present = s.ent_alive[:, None, :]
    visible = line_of_sight(s, obstacles, dx, dz, d2,
                            (d2 <= f32(params.perception_radius**2)) & present & s.alive[:, :, None])
    asked = (s.last_tool == QUERY_WORLD) & s.acted & (s.last_code == OK)  # a query answers once
    filt = s.query_filter[:, :, None]
    category = constant(xp, s.x, slots.category, xp.int8)
    queried = (asked[:, :, None] & present & (d2 <= (s.query_radius * s.query_radius)[:, :, None])
               & ((filt == 0) | (filt == category)))
    shown = xp.astype(visible | queried, xp.float32)
    kind = s.ent_kind[:, None, :]
    columns = [xp.astype(visible, xp.float32), xp.astype(queried, xp.float32),
               dx * shown, dz * shown, xp.sqrt(d2) * shown]
    columns += [xp.astype(kind == k, xp.float32) * shown for k in range(n_kinds)]
    return xp.stack(columns, axis=-1)


def obstacle_table(params: WorldParams, s: WorldState, obstacles: tuple) -> Any:
    """:func:`arena_envs.perception.obstacle_table`: (B, A, O, 4) rows of visible, dx, dz, radius."""
    xp = namespace(s.x)
    dx, dz, d2 = obstacles
    reach = f32(params.perception_radius) + s.obst_r
    seen = xp.astype((d2 <= (reach * reach)[:, None, :]) & (s.obst_r > 0)[:, None, :] & s.alive[:, :, None],
                     xp.float32)
    return xp.stack([seen, dx * seen, dz * seen, s.obst_r[:, None, :] * seen], axis=-1)


# -- resets -------------------------------------------------------------------------------


def where_worlds(mask: Any, new: Any, old: Any) -> Any:
    """``new`` in the worlds where ``mask`` (B,) is true, ``old`` elsewhere (any trailing axes)."""
    xp = namespace(old)
    return xp.where(xp.reshape(mask, (-1,) + (1,) * (old.ndim - 1)), new, old)


def reset_agents(params: WorldParams, s: WorldState, mask: Any, x: Any, z: Any) -> None:
    """:func:`arena_envs.world.reset_agents` where ``mask`` is true: agents at (x, z) (B, A) with fresh bodies."""
    xp = namespace(s.x)
    fresh = dict(x=x, z=z, target_x=x, target_z=z, speed=1.0, moving=False, health=f32(params.max_health),
                 energy=f32(params.max_energy), alive=True, inventory=0, in_hazard=False, damage_taken=0.0,
                 collected=0, last_tool=IDLE, last_code=OK, last_index=0, last_value=0.0, acted=False,
                 query_radius=0.0, query_filter=0, craft_recipe=0, craft_station=0, craft_left=0, tick=0)
    for name, value in fresh.items():
        old = getattr(s, name)
        new = value if hasattr(value, "shape") else xp.full_like(old, value)
        setattr(s, name, where_worlds(mask, xp.astype(new, old.dtype), old))
    s.episode = s.episode + xp.astype(mask, s.episode.dtype)


def first_valid(candidates: Any, ok: Any) -> tuple[Any, Any]:
    """:func:`arena_envs.world.first_valid`: per slot the first candidate (..., C, F) whose ``ok`` (..., C)
    holds (candidate 0 where none does) and whether one did."""
    xp = namespace(candidates)
    first = xp.argmax(xp.astype(ok, xp.int8), axis=-1)  # the first maximum: the first true
    chosen = xp.take_along_axis(candidates, first[..., None, None], axis=-2)[..., 0, :]
    return chosen, xp.any(ok, axis=-1)


def clear_of(cx: Any, cz: Any, ex: Any, ez: Any, margin: Any) -> Any:
    """(n, K, C) candidates against (n, E) placed entities, each needing ``margin`` (n, E) around it."""
    xp = namespace(cx)
    d = xp.hypot(cx[..., None] - ex[:, None, None, :], cz[..., None] - ez[:, None, None, :])
    return xp.all(d > margin[:, None, None, :], axis=-1)
