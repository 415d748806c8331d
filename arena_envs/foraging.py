"""Foraging-v0: collect every resource of a field while staying out of pits and fires.

One agent walks a square world of side ``2 * half_size`` (default ±25) with the seven
universal tools. Resources (berry, wood, stone) are picked up with ``collect`` within 2.0
units; pits hurt 25 on entry and 5/s inside, fires 10/s; circular obstacles (trees, rocks,
bushes) block movement (the agent slides around them) and line of sight.

## Action space

The structured tool action of :mod:`arena_envs.actions` (``Dict``): ``tool`` picks one of
``move_to, collect, craft, query_world, query_inventory, send_message, idle`` and only that
tool's entry is read. ``collect`` is a row of the ``resources`` observation table (row
``i`` is always the same resource). Foraging has no stations, so ``craft`` answers
``NOT_FOUND``; with no teammates, ``send_message`` succeeds and reaches nobody.

## Observation space

A ``Dict`` of fixed-shape float32 arrays (R resource slots, H hazard slots, O obstacle
slots; padding and unseen rows are zero):

| key           | shape      | content                                                                  |
|---------------|------------|--------------------------------------------------------------------------|
| `agent`       | (7,)       | x, z, health, energy, moving (0/1), movement target x, target z          |
| `resources`   | (R, 8)     | visible, in query result, dx, dz, distance, one-hot berry/wood/stone     |
| `hazards`     | (H, 7)     | visible, in query result, dx, dz, distance, one-hot pit/fire             |
| `obstacles`   | (O, 4)     | visible, dx, dz, radius                                                  |
| `inventory`   | (3,)       | berries, wood, stones carried                                            |
| `last_action` | (2,) int   | ``MultiDiscrete([7, 7])``: last tool, its result code (0 = OK, then      |
|               |            | OUT_OF_RANGE, NOT_FOUND, MISSING_MATERIALS, INVALID_PARAMS, BUSY,        |
|               |            | INVENTORY_FULL)                                                          |
| `time_left`   | (1,)       | ticks until truncation                                                   |

Offsets are from the agent to the entity. Resources and hazards are visible within 10
units when no obstacle lies on the line of sight; obstacles within 10 units are always
visible. A ``query_world`` fills the ``in query result`` rows of its kind within its radius
in the next observation, ignoring line of sight.

## Rewards

+1 per resource collected, −0.01 per point of damage taken.

## Episode end

Terminates when every resource is collected or health reaches 0; truncates after
``max_ticks`` (600) ticks of 0.1 s.

## Info

``success`` (every resource collected), ``score`` (the Agent Arena score
``max(0, collected/total·100 − min(damage, 100))``),
``resources_collected``, ``resources_remaining``, ``damage_taken``, ``health``.

## Arguments

``layout="random"`` (seeded procedural world: ``num_resources``, ``num_hazards``,
``num_obstacles``) or ``"classic"`` (the Agent Arena scene), ``max_ticks``,
``reward_per_resource``, ``damage_penalty``, and every rule of
:class:`~arena_envs.world.WorldParams` (``half_size``, ``perception_radius``, ...).

    >>> import gymnasium as gym, arena_envs
    >>> env = gym.make("arena_envs/Foraging-v0", layout="classic")
    >>> envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=4096)
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_envs import dense
from arena_envs.actions import tool_action_space
from arena_envs.batch import step_subset
from arena_envs.dense import f32
from arena_envs.perception import entity_table, obstacle_table, relative, table_bounds
from arena_envs.tick import advance, apply_tools
from arena_envs.world import (
    F32,
    FAR,
    HAZARD_TYPES,
    OBSTACLE_KINDS,
    RESULT_CODES,
    TOOL_NAMES,
    EntitySlots,
    ToolActions,
    WorldParams,
    WorldState,
    first_valid,
    reduce_last_axis,
    reset_agents,
    split_columns,
)
from arena_envs.xp import namespace, uniforms

LAYOUTS = ("random", "classic")

# The Agent Arena foraging scene: (x, z, kind) rows.
CLASSIC_RESOURCES = ((-5, 3, 0), (4, -6, 0), (-1, -5, 0), (7, 4, 2), (-8, -3, 2), (9, -2, 1), (-4, 8, 1))
CLASSIC_HAZARDS = ((1, 1, 0), (-3, -3, 0))
CLASSIC_OBSTACLES = (  # (x, z, radius, kind): 5 trees, 3 rocks, 4 bushes
    (-12, 12, 1.0, 0), (12, 12, 1.0, 0), (-14, -10, 1.0, 0), (14, -10, 1.0, 0), (0, -14, 1.0, 0),
    (-7, 0, 1.5, 1), (2, -9, 1.5, 1), (10, 6, 1.5, 1),
    (3, 4, 0.8, 2), (-9, 5, 0.8, 2), (6, -4, 0.8, 2), (-6, -8, 0.8, 2),
)
CLASSIC_SPAWN = (0.0, 10.0)

CANDIDATES = 16  # placement tries per entity in the random layout
FAR_FLOAT = float(FAR)  # a Python float: what the dense rules compare with


@dataclass(frozen=True)
class ForagingParams(WorldParams):
    layout: str = "random"
    num_resources: int = 9
    num_hazards: int = 4
    num_obstacles: int = 10
    reward_per_resource: float = 1.0
    damage_penalty: float = 0.01

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        for name in ("num_resources", "num_hazards", "num_obstacles"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.layout == "random" and self.num_resources < 1:
            raise ValueError("num_resources must be at least 1")
        if self.max_ticks < 1:
            raise ValueError(f"max_ticks must be >= 1, got {self.max_ticks}")

    @property
    def table_sizes(self) -> tuple[int, int, int]:
        """Resource, hazard and obstacle slots."""
        if self.layout == "classic":
            return len(CLASSIC_RESOURCES), len(CLASSIC_HAZARDS), len(CLASSIC_OBSTACLES)
        return self.num_resources, self.num_hazards, self.num_obstacles


class Foraging:
    """The Foraging rules as pure functions over a batched :class:`WorldState`."""

    def __init__(self, params: ForagingParams | None = None, **kwargs):
        params = params or ForagingParams()
        self.params = dataclasses.replace(params, **kwargs) if kwargs else params
        p = self.params
        R, H, O = p.table_sizes
        self.sizes = (R, H, O)
        self.slots = EntitySlots(resources=R, hazards=H)
        res_low, res_high = table_bounds(p, len(p.resource_types))
        haz_low, haz_high = table_bounds(p, len(HAZARD_TYPES))
        w, reach = p.half_size, 2 * p.half_size
        self.observation_space = spaces.Dict({
            "agent": spaces.Box(np.array([-w, -w, 0, 0, 0, -w, -w], F32),
                                np.array([w, w, p.max_health, p.max_energy, 1, w, w], F32)),
            "resources": spaces.Box(np.tile(res_low, (R, 1)), np.tile(res_high, (R, 1))),
            "hazards": spaces.Box(np.tile(haz_low, (H, 1)), np.tile(haz_high, (H, 1))),
            "obstacles": spaces.Box(np.tile(np.array([0, -reach, -reach, 0], F32), (O, 1)),
                                    np.tile(np.array([1, reach, reach, reach], F32), (O, 1))),
            "inventory": spaces.Box(0, p.inventory_capacity, (len(p.item_names),), F32),
            "last_action": spaces.MultiDiscrete([len(TOOL_NAMES), len(RESULT_CODES)]),
            "time_left": spaces.Box(0, p.max_ticks, (1,), F32),
        })
        self.action_space = tool_action_space(p, resources=R, recipes=0, stations=0)
        self._layout = self.observation_layout()

    def init_state(self, batch: int) -> WorldState:
        return WorldState.zeros(batch, 1, self.slots, self.sizes[2], len(self.params.item_names))

    # -- reset ---------------------------------------------------------------------------

    def reset(self, state: WorldState, index: np.ndarray, rngs: Sequence[np.random.Generator],
              seeds: Sequence[int | None] | None = None) -> None:
        """Lay out fresh worlds at ``index``, each drawing from its own generator."""
        if len(index) == 0:
            return
        layout = self._classic(len(index)) if self.params.layout == "classic" else self._random(rngs)
        spawn_x, spawn_z, resources, hazards, obstacles = layout
        s, res, haz = state, self.slots.res, self.slots.haz
        (s.ent_x[index, res], s.ent_z[index, res], s.ent_kind[index, res], s.ent_alive[index, res]) = resources
        s.res_total[index] = resources[3].sum(1)
        (s.ent_x[index, haz], s.ent_z[index, haz], s.ent_kind[index, haz]) = hazards
        s.ent_alive[index, haz] = hazards[0] < FAR
        (s.obst_x[index], s.obst_z[index], s.obst_r[index], s.obst_kind[index]) = obstacles
        reset_agents(self.params, s, index, spawn_x[:, None], spawn_z[:, None])

    def _classic(self, n: int):
        def columns(rows, k):
            table = np.asarray(rows, F32).reshape(-1, k)
            return [np.repeat(table[None, :, c], n, 0) for c in range(k)]

        rx, rz, rk = columns(CLASSIC_RESOURCES, 3)
        hx, hz, hk = columns(CLASSIC_HAZARDS, 3)
        ox, oz, orad, ok = columns(CLASSIC_OBSTACLES, 4)
        spawn_x = np.full(n, CLASSIC_SPAWN[0], F32)
        spawn_z = np.full(n, CLASSIC_SPAWN[1], F32)
        return (spawn_x, spawn_z, (rx, rz, rk.astype(np.int8), np.ones(rx.shape, bool)),
                (hx, hz, hk.astype(np.int8)), (ox, oz, orad, ok.astype(np.int8)))

    def _random(self, rngs: Sequence[np.random.Generator]):
        """Seeded procedural placement, vectorized over the worlds being reset.

        Each world draws one block of uniforms from its own generator; every entity then
        takes the first of its candidate positions that keeps clear of the spawn point and
        of the entities placed before it (obstacles, then hazards, then resources).
        """
        p = self.params
        R, H, O = self.sizes
        C = CANDIDATES
        counts = (2, O * C * 4, H * C * 3, R * C * 3)
        u = np.stack([rng.random(sum(counts), dtype=F32) for rng in rngs])
        spawn_u, obst_u, haz_u, res_u = split_columns(u, counts)
        n = len(rngs)
        w = F32(p.half_size)
        spawn_x, spawn_z = ((spawn_u * 2 - 1) * (w - 5)).T
        # Fewer numpy calls, the same values (a reset of a few worlds is mostly call overhead, and
        # a batch restarts worlds on a large share of its steps): every x, z of the candidates in
        # one pass; the spawn point as one more placed entity; one check against obstacles and
        # hazards together; one np.where per table (the layout of 1, 3, 10 worlds: 135 -> 118,
        # 202 -> 176, 431 -> 376 us; the same layouts for 1,500 random sets of worlds and sizes)
        shifted = (u * 2 - 1) * (w - 2)
        _, obst_xz, haz_xz, res_xz = split_columns(shifted, counts)

        def clear_of(cx, cz, ex, ez, margin):
            """(n, K, C) candidates against (n, E) placed entities needing ``margin`` (n, E)."""
            d = np.hypot(cx[..., None] - ex[:, None, None, :], cz[..., None] - ez[:, None, None, :])
            return np.logical_and.reduce(d > margin[:, None, None, :], axis=-1)  # .all(-1), without its Python layer

        def placed_or_absent(chosen, placed, absent):
            """The chosen values of each slot, ``absent`` (per column) where none passed."""
            return np.where(placed[..., None], chosen, absent)

        o, o_xz = obst_u.reshape(n, O, C, 4), obst_xz.reshape(n, O, C, 4)
        o_x, o_z = o_xz[..., 0], o_xz[..., 1]
        o_r = F32(0.6) + o[..., 2] * F32(1.2)
        o_kind = np.minimum(o[..., 3] * len(OBSTACLE_KINDS), len(OBSTACLE_KINDS) - 1)
        ok = np.hypot(o_x - spawn_x[:, None, None], o_z - spawn_z[:, None, None]) > o_r + 3.0
        chosen, placed = first_valid(np.stack([o_x, o_z, o_r, o_kind], -1), ok)
        ox, oz, orad = placed_or_absent(chosen[..., :3], placed, np.array([FAR, FAR, 0.0], F32)).transpose(2, 0, 1)
        okind = chosen[..., 3].astype(np.int8)

        hz_r = F32(p.hazard_radius)
        h, h_xz = haz_u.reshape(n, H, C, 3), haz_xz.reshape(n, H, C, 3)
        h_x, h_z = h_xz[..., 0], h_xz[..., 1]
        h_kind = np.minimum(h[..., 2] * len(HAZARD_TYPES), len(HAZARD_TYPES) - 1)
        # clear of the obstacles placed and of the spawn point (one more entity, margin hz_r + 3)
        ok = clear_of(h_x, h_z, np.concatenate((ox, spawn_x[:, None]), 1), np.concatenate((oz, spawn_z[:, None]), 1),
                      np.concatenate((orad + hz_r + 0.5, np.full((n, 1), hz_r + 3.0, F32)), 1))
        chosen, placed = first_valid(np.stack([h_x, h_z, h_kind], -1), ok)
        hx, hz = placed_or_absent(chosen[..., :2], placed, FAR).transpose(2, 0, 1)
        hkind = chosen[..., 2].astype(np.int8)

        r, r_xz = res_u.reshape(n, R, C, 3), res_xz.reshape(n, R, C, 3)
        r_x, r_z = r_xz[..., 0], r_xz[..., 1]
        r_kind = np.minimum(r[..., 2] * len(p.resource_types), len(p.resource_types) - 1)
        # clear of the obstacles and the hazards placed
        ok = clear_of(r_x, r_z, np.concatenate((ox, hx), 1), np.concatenate((oz, hz), 1),
                      np.concatenate((orad + 1.0, np.full(hx.shape, hz_r + 1.0, F32)), 1))
        chosen, alive = first_valid(np.stack([r_x, r_z, r_kind], -1), ok)
        rx, rz = placed_or_absent(chosen[..., :2], alive, FAR).transpose(2, 0, 1)

        return (spawn_x, spawn_z,
                (rx, rz, chosen[..., 2].astype(np.int8), alive),
                (hx, hz, hkind),
                (ox, oz, orad, okind))

    # -- step ----------------------------------------------------------------------------

    def step(self, state: WorldState, actions: ToolActions, active: np.ndarray | None = None):
        """Advance the worlds where ``active`` is true by one tick: rewards, terminated, truncated."""
        return step_subset(self._step, state, actions, active)

    def _step(self, s: WorldState, actions: ToolActions):
        p = self.params
        events = apply_tools(p, self.slots, s, actions)
        advance(p, self.slots, s, events)
        reward = (events.collected[:, 0] * F32(p.reward_per_resource)
                  - events.damage[:, 0] * F32(p.damage_penalty)).astype(F32)
        terminated = ~(reduce_last_axis(np.logical_or, s.ent_alive[:, self.slots.res]) & s.alive[:, 0])
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return reward, terminated, truncated

    # -- observation and info ------------------------------------------------------------

    def observation_layout(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The arrays :meth:`observe` fills, as (shape of one world, dtype): the observation's
        entries are views of them (``resources`` and ``hazards`` share one entity table)."""
        p, (R, H, O) = self.params, self.sizes
        columns = 5 + max(len(p.resource_types), len(HAZARD_TYPES))
        return {"agent": ((7,), np.dtype(F32)), "table": ((1, R + H, columns), np.dtype(F32)),
                "obstacles": ((1, O, 4), np.dtype(F32)), "inventory": ((len(p.item_names),), np.dtype(F32)),
                "last_action": ((2,), np.dtype(np.int64)), "time_left": ((1,), np.dtype(F32))}

    def observation_views(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The observation whose entries are views of the arrays ``out`` (:meth:`observation_layout`)."""
        p, slots = self.params, self.slots
        table = out["table"][:, 0]
        return {
            "agent": out["agent"],
            "resources": table[:, slots.res, :5 + len(p.resource_types)],
            "hazards": table[:, slots.haz, :5 + len(HAZARD_TYPES)],
            "obstacles": out["obstacles"][:, 0],
            "inventory": out["inventory"],
            "last_action": out["last_action"],
            "time_left": out["time_left"],
        }

    def observe(self, s: WorldState, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The observation of every world, written into ``out`` (arrays of :meth:`observation_layout`
        with the batch axis in front) when given, else into new arrays."""
        p, slots = self.params, self.slots
        if out is None:
            out = {key: np.empty((s.batch_size, *shape), dtype) for key, (shape, dtype) in self._layout.items()}
        # one agent: the (B, 1) columns join along axis 1 into (B, 7) and (B, 2)
        np.concatenate((s.x, s.z, s.health, s.energy, s.moving, s.target_x, s.target_z), axis=1, out=out["agent"])
        np.concatenate((s.last_tool, s.last_code), axis=1, out=out["last_action"])
        obstacles = relative(s, s.obst_x, s.obst_z)
        entity_table(p, slots, s, max(len(p.resource_types), len(HAZARD_TYPES)), obstacles, out["table"])
        obstacle_table(p, s, obstacles, out["obstacles"])
        np.copyto(out["inventory"], s.inventory[:, 0], casting="same_kind")
        np.subtract(p.max_ticks, s.tick[:, None], dtype=F32, out=out["time_left"])
        return self.observation_views(out)

    def info(self, s: WorldState) -> dict[str, np.ndarray]:
        collected = s.collected[:, 0]
        damage = s.damage_taken[:, 0]
        # summed along the batch's leading axis: numpy is several times slower over a short last one
        remaining = np.add.reduce(np.ascontiguousarray(s.ent_alive[:, self.slots.res].T), axis=0, dtype=np.int32)
        return {
            "success": remaining == 0,
            "score": score(collected, s.res_total, damage),
            "resources_collected": collected.copy(),
            "resources_remaining": remaining,
            "damage_taken": damage.copy(),
            "health": s.health[:, 0].copy(),
        }


    # -- the same rules on any array library (arena_envs.dense: every world, no host sync) --

    def dense_reset(self, s: WorldState, mask: Any, keys: Any) -> None:
        """Lay out fresh worlds where ``mask`` (B,) is true, the random layout drawing from the
        counter generator's ``keys`` (B,): the worlds :meth:`reset` makes from
        :class:`~arena_envs.xp.CounterGenerator` s of the same keys."""
        xp = namespace(s.x)
        if self.params.layout == "classic":
            def rows(table, k):
                columns = [dense.constant(xp, s.x, [r[c] for r in table], xp.float32) for c in range(k)]
                return [xp.broadcast_to(column[None], (len(keys), len(table))) for column in columns]
            rx, rz, rk = rows(CLASSIC_RESOURCES, 3)
            hx, hz, hk = rows(CLASSIC_HAZARDS, 3)
            ox, oz, orad, okind = rows(CLASSIC_OBSTACLES, 4)
            alive = xp.ones(rx.shape, dtype=xp.bool, device=s.x.device)
            spawn_x = xp.full(keys.shape, CLASSIC_SPAWN[0], dtype=xp.float32, device=s.x.device)
            spawn_z = xp.full(keys.shape, CLASSIC_SPAWN[1], dtype=xp.float32, device=s.x.device)
        else:
            spawn_x, spawn_z, (rx, rz, rk, alive), (hx, hz, hk), (ox, oz, orad, okind) = self._dense_random(xp, keys)
        i8 = xp.int8
        res_total = xp.sum(xp.astype(alive, xp.int32), axis=1, dtype=xp.int32)
        new = dict(ent_x=xp.concat((rx, hx), axis=1), ent_z=xp.concat((rz, hz), axis=1),
                   ent_kind=xp.astype(xp.concat((rk, hk), axis=1), i8),
                   ent_alive=xp.concat((alive, hx < FAR_FLOAT), axis=1), res_total=res_total,
                   obst_x=ox, obst_z=oz, obst_r=orad, obst_kind=xp.astype(okind, i8))
        for name, value in new.items():
            setattr(s, name, dense.where_worlds(mask, xp.astype(value, getattr(s, name).dtype), getattr(s, name)))
        dense.reset_agents(self.params, s, mask, spawn_x[:, None], spawn_z[:, None])

    def _dense_random(self, xp: Any, keys: Any):
        """:meth:`_random` for every world at once, operation for operation."""
        p = self.params
        R, H, O = self.sizes
        C = CANDIDATES
        n = keys.shape[0]
        counts = (2, O * C * 4, H * C * 3, R * C * 3)
        u = uniforms(xp, keys, sum(counts))
        ends = list(itertools.accumulate(counts))
        w = f32(p.half_size)
        spawn = (u[:, :2] * 2 - 1) * (w - 5)
        spawn_x, spawn_z = spawn[:, 0], spawn[:, 1]
        shifted = (u * 2 - 1) * (w - 2)

        def block(a, i, shape):
            return xp.reshape(a[:, ends[i - 1]:ends[i]], shape)

        far = FAR_FLOAT
        o, o_xz = block(u, 1, (n, O, C, 4)), block(shifted, 1, (n, O, C, 4))
        o_x, o_z = o_xz[..., 0], o_xz[..., 1]
        o_r = f32(0.6) + o[..., 2] * f32(1.2)
        o_kind = xp.minimum(o[..., 3] * len(OBSTACLE_KINDS), float(len(OBSTACLE_KINDS) - 1))
        ok = xp.hypot(o_x - spawn_x[:, None, None], o_z - spawn_z[:, None, None]) > o_r + 3.0
        chosen, placed = dense.first_valid(xp.stack([o_x, o_z, o_r, o_kind], axis=-1), ok)
        absent = dense.constant(xp, u, [far, far, 0.0], xp.float32)
        kept = xp.where(placed[..., None], chosen[..., :3], absent)
        ox, oz, orad = kept[..., 0], kept[..., 1], kept[..., 2]
        okind = chosen[..., 3]

        hz_r = f32(p.hazard_radius)
        h, h_xz = block(u, 2, (n, H, C, 3)), block(shifted, 2, (n, H, C, 3))
        h_kind = xp.minimum(h[..., 2] * len(HAZARD_TYPES), float(len(HAZARD_TYPES) - 1))
        column = xp.ones((n, 1), dtype=xp.float32, device=u.device)
        ok = dense.clear_of(h_xz[..., 0], h_xz[..., 1], xp.concat((ox, spawn_x[:, None]), axis=1),
                            xp.concat((oz, spawn_z[:, None]), axis=1),
                            xp.concat(((orad + hz_r) + 0.5, column * f32(hz_r + 3.0)), axis=1))
        chosen, placed = dense.first_valid(xp.stack([h_xz[..., 0], h_xz[..., 1], h_kind], axis=-1), ok)
        hx = xp.where(placed, chosen[..., 0], far)
        hz = xp.where(placed, chosen[..., 1], far)
        hkind = chosen[..., 2]

        types = len(p.resource_types)
        r, r_xz = block(u, 3, (n, R, C, 3)), block(shifted, 3, (n, R, C, 3))
        r_kind = xp.minimum(r[..., 2] * types, float(types - 1))
        ok = dense.clear_of(r_xz[..., 0], r_xz[..., 1], xp.concat((ox, hx), axis=1), xp.concat((oz, hz), axis=1),
                            xp.concat((orad + 1.0, xp.ones_like(hx) * f32(hz_r + 1.0)), axis=1))
        chosen, alive = dense.first_valid(xp.stack([r_xz[..., 0], r_xz[..., 1], r_kind], axis=-1), ok)
        rx = xp.where(alive, chosen[..., 0], far)
        rz = xp.where(alive, chosen[..., 1], far)
        return spawn_x, spawn_z, (rx, rz, chosen[..., 2], alive), (hx, hz, hkind), (ox, oz, orad, okind)

    def dense_step(self, s: WorldState, actions: ToolActions):
        """:meth:`step` of every world: rewards, terminated, truncated."""
        xp, p = namespace(s.x), self.params
        events = dense.apply_tools(p, self.slots, s, actions)
        dense.advance(p, self.slots, s, events)
        f64 = xp.float64  # numpy's promotion of int32 by float32: the reward is made in float64
        reward = (xp.astype(events.collected[:, 0], f64) * f32(p.reward_per_resource)
                  - xp.astype(events.damage[:, 0] * f32(p.damage_penalty), f64))
        terminated = ~(xp.any(s.ent_alive[:, self.slots.res], axis=1) & s.alive[:, 0])
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return xp.astype(reward, xp.float32), terminated, truncated

    def dense_observe(self, s: WorldState) -> dict[str, Any]:
        """:meth:`observe` of every world, as new arrays of the state's library."""
        xp, p, slots = namespace(s.x), self.params, self.slots
        f = xp.float32
        agent = xp.concat([s.x, s.z, s.health, s.energy, xp.astype(s.moving, f), s.target_x, s.target_z], axis=1)
        obstacles = dense.relative(s, s.obst_x, s.obst_z)
        table = dense.entity_table(p, slots, s, max(len(p.resource_types), len(HAZARD_TYPES)), obstacles)[:, 0, ...]
        return {
            "agent": agent,
            "resources": table[:, slots.res, :5 + len(p.resource_types)],
            "hazards": table[:, slots.haz, :5 + len(HAZARD_TYPES)],
            "obstacles": dense.obstacle_table(p, s, obstacles)[:, 0, ...],
            "inventory": xp.astype(s.inventory[:, 0, ...], f),
            "last_action": xp.astype(xp.concat([s.last_tool, s.last_code], axis=1), xp.int64),
            "time_left": xp.astype(p.max_ticks - s.tick[:, None], f),
        }

    def dense_info(self, s: WorldState) -> dict[str, Any]:
        """:meth:`info` of every world, as arrays of the state's library."""
        xp = namespace(s.x)
        collected, damage = s.collected[:, 0], s.damage_taken[:, 0]
        remaining = xp.sum(xp.astype(s.ent_alive[:, self.slots.res], xp.int32), axis=1, dtype=xp.int32)
        share = xp.astype(collected, xp.float64) / xp.astype(xp.clip(s.res_total, 1, None), xp.float64) * 100.0
        score = xp.clip(share - xp.clip(xp.astype(damage, xp.float64), None, 100.0), 0.0, None)
        return {"success": remaining == 0, "score": xp.astype(score, xp.float32),
                "resources_collected": collected, "resources_remaining": remaining,
                "damage_taken": damage, "health": s.health[:, 0]}


def score(collected: np.ndarray, total: np.ndarray, damage: np.ndarray) -> np.ndarray:
    """The Agent Arena foraging score: max(0, collected/total·100 − min(damage, 100))."""
    share = collected / np.maximum(total, 1) * 100.0
    return np.maximum(0.0, share - np.minimum(damage, 100.0)).astype(F32)
