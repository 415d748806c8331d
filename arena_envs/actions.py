"""The structured tool action: its Gymnasium space and its decoding into arrays.

One ``Dict`` action serves every 2D scenario (DESIGN §5)::

    tool          Discrete(7)          index into TOOL_NAMES
    move_to       Box(3)               target x, target z, speed multiplier in (0, 2]
    collect       Discrete(R)          row of the observed resource table
    craft         MultiDiscrete(2)     recipe index, station row
    query_world   Dict(radius Box(1) in (0, 50], filter Discrete(5))
    send_message  MultiDiscrete(2)     token, target (0 = all teammates, i = agent i)

Only the chosen tool's values are checked, so entries of other tools may be missing or
hold any values (of the right shape and a numeric dtype). A bad value for the chosen
tool (NaN, inf, out of range) makes that agent's action ``INVALID_PARAMS``; a batch
that is malformed as a whole (unknown key, wrong shape, non-numeric dtype) raises a
``ValueError`` naming the field before anything moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_envs.world import (
    COLLECT,
    CRAFT,
    INVALID_PARAMS,
    MOVE_TO,
    OK,
    QUERY_FILTERS,
    QUERY_WORLD,
    SEND_MESSAGE,
    TOOL_NAMES,
    ToolActions,
    WorldParams,
)

ACTION_KEYS = ("tool", "move_to", "collect", "craft", "query_world", "send_message")


def tool_action_space(params: WorldParams, resources: int, recipes: int, stations: int,
                      agents: int = 1) -> spaces.Dict:
    """The structured action of one agent."""
    w = params.half_size
    return spaces.Dict({
        "tool": spaces.Discrete(len(TOOL_NAMES)),
        "move_to": spaces.Box(np.array([-w, -w, 0.0], np.float32),
                              np.array([w, w, params.max_speed_multiplier], np.float32)),
        "collect": spaces.Discrete(max(resources, 1)),
        "craft": spaces.MultiDiscrete([max(recipes, 1), max(stations, 1)]),
        "query_world": spaces.Dict({
            "radius": spaces.Box(0.0, params.query_radius_max, (1,), np.float32),
            "filter": spaces.Discrete(len(QUERY_FILTERS)),
        }),
        "send_message": spaces.MultiDiscrete([params.message_vocab_size, agents + 1]),
    })


def decode_actions(actions: Any, shape: tuple[int, ...], space: spaces.Dict,
                   params: WorldParams, single: bool = False) -> ToolActions:
    """Turn a batch of structured actions into :class:`ToolActions` with an agent axis.

    ``shape`` is the batch shape of each entry: ``(B,)`` for single-agent scenarios and
    ``(B, A)`` for multi-agent ones. With ``single=True`` the entries are one env's
    action (no batch axis) and ``shape`` must be ``(1,)``.
    """
    if not isinstance(actions, Mapping):
        raise ValueError(f"the action must be a dict with keys {ACTION_KEYS}, got {type(actions).__name__}")
    unknown = set(actions) - set(ACTION_KEYS)
    if unknown:
        raise ValueError(f"unknown action keys {sorted(unknown)}; expected a subset of {ACTION_KEYS}")
    if "tool" not in actions:
        raise ValueError("the action has no 'tool' entry")
    query = actions.get("query_world")
    if query is not None and not isinstance(query, Mapping):
        raise ValueError("action 'query_world' must be a dict with 'radius' and 'filter'")
    query = query or {}
    if set(query) - {"radius", "filter"}:
        raise ValueError(f"unknown query_world keys {sorted(set(query) - {'radius', 'filter'})}; "
                         "expected 'radius' and 'filter'")
    lead = () if single else shape

    def field(source, key, tail=(), label=None):
        value = source.get(key)
        if value is None:
            if key == "tool":
                raise ValueError("action 'tool' must be a tool index, got None")
            return None
        try:
            arr = np.asarray(value)
        except ValueError as err:  # ragged nested lists
            raise ValueError(f"action '{label or key}' is not a rectangular array: {err}") from None
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"action '{label or key}' must be numeric, got dtype {arr.dtype}")
        if arr.shape != lead + tail:
            raise ValueError(f"action '{label or key}' has shape {arr.shape}, expected {lead + tail}")
        return arr[None] if single else arr

    tool, valid = _index(field(actions, "tool"), len(TOOL_NAMES))
    fields = {
        MOVE_TO: field(actions, "move_to", (3,)),
        COLLECT: field(actions, "collect"),
        CRAFT: field(actions, "craft", (2,)),
        QUERY_WORLD: (field(query, "radius", (1,), "query_world.radius"),
                      field(query, "filter", (), "query_world.filter")),
        SEND_MESSAGE: field(actions, "send_message", (2,)),
    }
    used = np.bincount(tool.ravel(), minlength=len(TOOL_NAMES))
    sp = space.spaces
    out = dict(tool=tool, target_x=None, target_z=None, speed=None, collect_index=None, recipe=None,
               station=None, query_radius=None, query_filter=None, message_token=None, message_target=None)

    def check(tool_id, good):
        """Mark agents that chose ``tool_id`` invalid where ``good`` is false."""
        nonlocal valid
        valid = valid & (good | (tool != tool_id))

    if used[MOVE_TO]:
        move = fields[MOVE_TO]
        if move is None:
            check(MOVE_TO, False)
        else:
            with np.errstate(over="ignore"):  # huge targets become inf, which the check rejects
                move = move.astype(np.float32, copy=False)
            tx, tz, speed = move[..., 0], move[..., 1], move[..., 2]
            w = params.half_size  # NaN fails every comparison below
            check(MOVE_TO, (np.abs(tx) <= w) & (np.abs(tz) <= w) & (speed > 0)
                  & (speed <= params.max_speed_multiplier))
            out.update(target_x=tx, target_z=tz, speed=speed)
    if used[COLLECT]:
        out["collect_index"] = _checked_index(fields[COLLECT], sp["collect"].n, COLLECT, check)
    if used[CRAFT]:
        out["recipe"], out["station"] = _checked_pair(fields[CRAFT], sp["craft"].nvec, CRAFT, check)
    if used[QUERY_WORLD]:
        radius, qfilter = fields[QUERY_WORLD]
        if radius is None:
            radius = np.full(shape, params.query_radius_default, np.float32)
        else:
            with np.errstate(over="ignore"):
                radius = radius[..., 0].astype(np.float32, copy=False)
            check(QUERY_WORLD, (radius > 0) & (radius <= params.query_radius_max))
        out["query_radius"] = radius
        out["query_filter"] = (np.zeros(shape, np.intp) if qfilter is None
                               else _checked_index(qfilter, len(QUERY_FILTERS), QUERY_WORLD, check))
    if used[SEND_MESSAGE]:
        out["message_token"], out["message_target"] = _checked_pair(
            fields[SEND_MESSAGE], sp["send_message"].nvec, SEND_MESSAGE, check)

    zeros = np.zeros(shape, np.float32)
    out["speed"] = np.ones(shape, np.float32) if out["speed"] is None else out["speed"]
    agent_axis = (slice(None), None) if len(shape) == 1 else ...
    failure = np.where(valid, OK, INVALID_PARAMS).astype(np.int8)
    return ToolActions(failure=failure[agent_axis], **{
        k: (zeros if v is None else v)[agent_axis] for k, v in out.items()})


def _index(arr: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An index array and where it is a whole number in [0, n)."""
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(arr) & (arr == np.round(arr)) & (arr >= 0) & (arr < n)
        return np.where(ok, arr, 0).astype(np.intp), ok
    ok = (arr >= 0) & (arr < n)
    return np.where(ok, arr, 0).astype(np.intp, copy=False), ok


def _checked_index(arr, n, tool_id, check):
    if arr is None:
        check(tool_id, False)
        return None
    index, ok = _index(arr, n)
    check(tool_id, ok)
    return index


def _checked_pair(arr, nvec, tool_id, check):
    if arr is None:
        check(tool_id, False)
        return None, None
    first, ok_first = _index(arr[..., 0], int(nvec[0]))
    second, ok_second = _index(arr[..., 1], int(nvec[1]))
    check(tool_id, ok_first & ok_second)
    return first, second
