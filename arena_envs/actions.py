"""The structured tool action: its Gymnasium space and its decoding into arrays.

One ``Dict`` action serves every 2D scenario (DESIGN §5)::

    tool          Discrete(7)          index into TOOL_NAMES
    move_to       Box(3)               target x, target z, speed multiplier in [min_speed, max]
    collect       Discrete(R)          row of the observed resource table
    craft         MultiDiscrete(2)     recipe index, station row
    query_world   Dict(radius Box(1) in (0, 50], filter Discrete(5))
    send_message  MultiDiscrete(2)     token, target (0 = all teammates, i = agent i)

Only the chosen tool's values are checked, so entries of other tools may be missing or
hold any values (of the right shape and a numeric dtype). A bad value for the chosen
tool (NaN, inf, out of range, a speed below :func:`min_speed`) makes that agent's action
``INVALID_PARAMS``; a batch that is malformed as a whole (unknown key, wrong shape, a
dtype that is not a number: booleans are not indices) raises a ``ValueError`` naming
the field before anything moves.
"""

from __future__ import annotations

import math
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

F32 = np.float32

ACTION_KEYS = ("tool", "move_to", "collect", "craft", "query_world", "send_message")
NUMBER_KINDS = "iuf"  # numpy dtype kinds an action may hold: not bool, which would index as 0 and 1


def min_speed(params: WorldParams) -> float:
    """The slowest speed multiplier ``move_to`` accepts (both as a tool call and as an action).

    Any slower and the agent could not cover even the arrival distance in a whole
    episode: the order could never arrive and would only look like idling. (Without a
    floor, a speed such as 1e-45 passed as "positive" although it is a float32 denormal.)
    It is rounded up to a thousandth so that messages show a plain number (0.002 by default).
    """
    slowest = params.arrive_distance / (params.move_speed * params.dt * params.max_ticks)
    return math.ceil(slowest * 1000) / 1000


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
    if single:
        decoded = _decode_single(actions, space, params)
        if decoded is not None:
            return decoded
    return _decode_arrays(actions, shape, space, params, single)


def _decode_arrays(actions: Any, shape: tuple[int, ...], space: spaces.Dict,
                   params: WorldParams, single: bool) -> ToolActions:
    """The general path of :func:`decode_actions`: any batch, every check, every error."""
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
        if arr.dtype.kind not in NUMBER_KINDS:
            raise ValueError(f"action '{label or key}' must be numeric (not boolean), got dtype {arr.dtype}")
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
        """Mark agents that chose ``tool_id`` invalid where ``good`` is false (True: nowhere)."""
        nonlocal valid
        if good is True:
            return
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
            ok = ((np.abs(tx) <= w) & (np.abs(tz) <= w) & (speed >= F32(min_speed(params)))
                  & (speed <= params.max_speed_multiplier))
            check(MOVE_TO, True if np.count_nonzero(ok) == ok.size else ok)
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
    failure = (np.zeros(shape, np.int8) if valid is True
               else np.where(valid, np.int8(OK), np.int8(INVALID_PARAMS)))
    return ToolActions(failure=failure[agent_axis], **{
        k: (zeros if v is None else v)[agent_axis] for k, v in out.items()})


def _index(arr: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray | bool]:
    """An index array and where it is a whole number in [0, n) (True: everywhere, the usual case)."""
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(arr) & (arr == np.round(arr)) & (arr >= 0) & (arr < n)
        return np.where(ok, arr, 0).astype(np.intp), ok
    # one comparison: seen unsigned, a negative index is a huge one (3 numpy calls fewer per field)
    unsigned = arr.view(_unsigned(arr.dtype)) if arr.dtype.kind == "i" else arr
    ok = unsigned < np.asarray(n, np.uint64)
    if np.count_nonzero(ok) == ok.size:  # every index is in range as it is
        return arr.astype(np.intp, copy=False), True
    return np.where(ok, arr, 0).astype(np.intp, copy=False), ok


_UNSIGNED: dict[np.dtype, np.dtype] = {}


def _unsigned(dtype: np.dtype) -> np.dtype:
    """The unsigned dtype of a signed integer one (kept: made from a string, it cost ~1 us a field)."""
    found = _UNSIGNED.get(dtype)
    if found is None:
        found = _UNSIGNED[dtype] = np.dtype(dtype.str.replace("i", "u"))
    return found


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
    check(tool_id, True if ok_first is True and ok_second is True else ok_first & ok_second)
    return first, second


# -- one env's action ------------------------------------------------------------------
# A single env steps one action at a time, where the array path above costs more than the
# whole tick. The common case (a well-formed, valid action of numpy values or Python
# numbers) is decoded here with Python scalars; anything else returns None and takes the
# array path, which raises or marks the action INVALID_PARAMS exactly as for a batch.

_TAILS = {"tool": (), "move_to": (3,), "collect": (), "craft": (2,), "query_world": None, "send_message": (2,)}
_QUERY_TAILS = {"radius": (1,), "filter": ()}


def _decode_single(actions: Any, space: spaces.Dict, params: WorldParams) -> ToolActions | None:
    """One env's action as :class:`ToolActions` of shape (1, 1), or None for the array path."""
    if type(actions) is not dict or not _plain(actions, _TAILS):
        return None
    query = actions.get("query_world")
    if query is not None and (type(query) is not dict or not _plain(query, _QUERY_TAILS)):
        return None
    tool = _plain_index(actions.get("tool"), len(TOOL_NAMES))
    if tool is None:
        return None
    target_x = target_z = radius = 0.0
    speed = 1.0
    collect = recipe = station = query_filter = token = target = 0
    if tool == MOVE_TO:
        move = _plain_floats(actions.get("move_to"))
        if move is None:
            return None
        target_x, target_z, speed = move
        # the bounds as float32 values, as the array path compares them
        w, top = float(np.float32(params.half_size)), float(np.float32(params.max_speed_multiplier))
        if not (abs(target_x) <= w and abs(target_z) <= w and float(np.float32(min_speed(params))) <= speed <= top):
            return None
    elif tool == COLLECT:
        collect = _plain_index(actions.get("collect"), space.spaces["collect"].n)
        if collect is None:
            return None
    elif tool == CRAFT:
        recipe, station = _plain_pair(actions.get("craft"), space.spaces["craft"].nvec)
        if station is None:
            return None
    elif tool == QUERY_WORLD:
        query = query or {}
        radius = params.query_radius_default
        if query.get("radius") is not None:
            radius = _plain_floats(query["radius"])[0]
            if not 0 < radius <= float(np.float32(params.query_radius_max)):
                return None
        if query.get("filter") is not None:
            query_filter = _plain_index(query["filter"], len(QUERY_FILTERS))
            if query_filter is None:
                return None
    elif tool == SEND_MESSAGE:
        token, target = _plain_pair(actions.get("send_message"), space.spaces["send_message"].nvec)
        if target is None:
            return None
    # every field is a (1, 1) view of one of two small arrays: two allocations, not twelve
    ints = np.array([tool, collect, recipe, station, query_filter, token, target], np.intp).reshape(7, 1, 1)
    floats = np.array([target_x, target_z, speed, radius], np.float32).reshape(4, 1, 1)
    return ToolActions(tool=ints[0], failure=np.zeros((1, 1), np.int8), target_x=floats[0], target_z=floats[1],
                       speed=floats[2], collect_index=ints[1], recipe=ints[2], station=ints[3],
                       query_radius=floats[3], query_filter=ints[4], message_token=ints[5], message_target=ints[6])


def _plain(source: dict, tails: dict) -> bool:
    """Whether every entry is a known key holding None or a numeric value of its shape."""
    for key, value in source.items():
        if key not in tails:
            return False
        tail = tails[key]
        if value is None or tail is None:  # query_world is checked by the caller
            continue
        if isinstance(value, (np.ndarray, np.generic)):
            if value.shape != tail or value.dtype.kind not in NUMBER_KINDS:
                return False
        elif type(value) not in (int, float) or tail != ():
            return False
    return True


def _plain_index(value, n: int) -> int | None:
    """An integer value in [0, n) as an int; None for anything else (floats, bools, out of range)."""
    if type(value) is not int and not (isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "iu"):
        return None
    index = int(value)
    return index if 0 <= index < n else None


def _plain_pair(value, nvec) -> tuple[int | None, int | None]:
    """Two integer values within ``nvec``; (None, None) for anything else."""
    if value is None or value.dtype.kind not in "iu":
        return None, None
    first, second = value.tolist()
    if 0 <= first < nvec[0] and 0 <= second < nvec[1]:
        return first, second
    return None, None


def _plain_floats(value) -> list[float] | None:
    """The values as float32 numbers (in Python floats), as the array path casts them."""
    if value is None:
        return None
    if value.dtype != np.float32:
        with np.errstate(over="ignore"):  # huge values become inf, which the checks reject
            value = value.astype(np.float32)
    return value.tolist()
