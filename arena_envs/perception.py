"""What agents perceive: line of sight past obstacles and the observation tables of entities.

Everything works on whole batches: no Python loop runs over worlds or entities.
"""

from __future__ import annotations

import numpy as np

from arena_envs.world import F32, OK, QUERY_WORLD, EntitySlots, WorldParams, WorldState, any_true, reduce_last_axis


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
    # the pairs as flat indices, and gathers with np.take: several times faster than np.nonzero
    # of a 3D array and fancy indexing with two index arrays (same pairs, same order)
    pairs = np.flatnonzero(candidates & (d2 > (nearest_edge * nearest_edge)[:, :, None]))
    if len(pairs) == 0:
        return candidates
    agents, entities, obstacles_ = candidates.shape[1], candidates.shape[2], r.shape[1]
    ba, e = np.divmod(pairs, entities)  # ba = world * agents + agent
    b = ba // agents if agents > 1 else ba
    be = pairs if agents == 1 else b * entities + e  # flat index into the (B, E) arrays
    # gathering from the 2D coordinate arrays is cheaper than from the 3D offsets
    dx, dz = (ex.take(be) - s.x.take(ba))[:, None], (ez.take(be) - s.z.take(ba))[:, None]
    hidden = reduce_last_axis(np.logical_or, _blocks(
        ox.reshape(-1, obstacles_).take(ba, axis=0), oz.reshape(-1, obstacles_).take(ba, axis=0),
        r.take(b, axis=0), dx, dz, dx * dx + dz * dz))
    candidates.put(pairs[hidden], False)
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


def relative(s: WorldState, ex: np.ndarray, ez: np.ndarray):
    """Offsets and squared distances from every agent to every entity: (B, A, E) each."""
    dx = ex[:, None, :] - s.x[:, :, None]
    dz = ez[:, None, :] - s.z[:, :, None]
    return dx, dz, dx * dx + dz * dz


TABLE_COLUMNS = ("visible", "in_query", "dx", "dz", "distance")


def entity_table(params: WorldParams, slots: EntitySlots, s: WorldState, n_kinds: int,
                 obstacles: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """The observation rows of every point entity for every agent: (B, A, E, 5 + n_kinds).

    Columns: visible, in the last ``query_world`` result, dx, dz, distance, then the
    entity's kind one-hot (kinds of its own category). Rows neither visible nor queried
    are zero. Perception reaches ``perception_radius`` and needs a clear line of sight;
    a query ignores line of sight (DESIGN §5). Scenarios slice the rows per category.
    ``obstacles`` are the agents' offsets to the obstacles (:func:`relative`). ``out``, when
    given, is the array of that shape to fill (every element is written) and return.
    """
    dx, dz, d2 = relative(s, s.ent_x, s.ent_z)
    present = s.ent_alive[:, None, :]
    visible = line_of_sight(s, obstacles, s.ent_x, s.ent_z, d2,
                            (d2 <= F32(params.perception_radius**2)) & present & s.alive[:, :, None], (dx, dz))
    table = np.empty(d2.shape + (len(TABLE_COLUMNS) + n_kinds,), F32) if out is None else out
    table[..., 0] = visible
    asked = (s.last_tool == QUERY_WORLD) & s.acted  # a query answers once, not while the agent carries on
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


def obstacle_table(params: WorldParams, s: WorldState, obstacles: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """Obstacles near each agent: (B, A, O, 4) rows of visible, dx, dz, radius (filling ``out`` if given).

    An obstacle is visible when any part of it lies within the perception radius.
    """
    dx, dz, d2 = obstacles
    reach = F32(params.perception_radius) + s.obst_r
    seen = ((d2 <= (reach * reach)[:, None, :]) & (s.obst_r > 0)[:, None, :] & s.alive[:, :, None]).astype(F32)
    table = np.empty(seen.shape + (4,), F32) if out is None else out
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
