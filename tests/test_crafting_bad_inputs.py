"""A corpus of bad actions against Crafting-v0 (B = 8), as for Foraging.

* A bad parameter of one env's chosen tool gives that env ``INVALID_PARAMS`` and nothing
  else: every other env ends up exactly as a twin stepped with that env idling, and the
  bad env itself as after a no-op ``query_inventory`` apart from its last-action record.
  The envs are warmed up by the scripted crafter, so some are busy crafting.
* A batch malformed as a whole raises ``ValueError`` naming the field and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from conftest import (
    TOOLS,
    action_row,
    assert_snapshot_equal,
    assert_tree_equal,
    bad_clean_noop,
    break_entry,
    copy_action,
    drop_entry,
    full_batch,
    obs_row,
    snapshot,
)
from crafting_helpers import INVALID_PARAMS, MixedPolicy, make_single, make_vec

B, K, S, R = 8, 6, 3, 8
LAST_ACTION_RECORD = ("last_tool", "last_code", "last_index", "last_value")
NAN, INF = float("nan"), float("inf")


def warmed_up(count: int, steps: int = 60, **kwargs):
    """``count`` identical vector envs stepped alike into varied states (carrying, crafting...)."""
    envs = [make_vec(B, layout="random", **kwargs) for _ in range(count)]
    policy = MixedPolicy(envs[0], seed=5, random_share=0.2)
    for e in envs:
        obs, _ = e.reset(seed=5)
    for _ in range(steps):
        action = policy(obs)
        for e in envs:
            obs, *_ = e.step(copy_action(action))
    return envs, obs, policy


CORPUS: dict[str, tuple[float, Callable]] = {
    # craft: a row of the recipe table, a row of the station table
    "recipe -1": (TOOLS["craft"], break_entry("craft", -1, col=0)),
    "recipe K": (TOOLS["craft"], break_entry("craft", K, col=0)),
    "recipe 2**40": (TOOLS["craft"], break_entry("craft", 2**40, col=0)),
    "station -1": (TOOLS["craft"], break_entry("craft", -1, col=1)),
    "station S": (TOOLS["craft"], break_entry("craft", S, col=1)),
    "recipe NaN float": (TOOLS["craft"], break_entry("craft", NAN, dtype=np.float64, col=0)),
    "recipe inf float": (TOOLS["craft"], break_entry("craft", INF, dtype=np.float32, col=0)),
    "station 0.5 float": (TOOLS["craft"], break_entry("craft", 0.5, dtype=np.float64, col=1)),
    "craft missing": (TOOLS["craft"], drop_entry("craft")),
    # the other tools, on Crafting's tables and world size
    "move_to x 20.5": (TOOLS["move_to"], break_entry("move_to", 20.5, col=0)),
    "move_to NaN": (TOOLS["move_to"], break_entry("move_to", NAN, col=1)),
    "speed 0": (TOOLS["move_to"], break_entry("move_to", 0.0, col=2)),
    "collect R": (TOOLS["collect"], break_entry("collect", R)),
    "collect -1": (TOOLS["collect"], break_entry("collect", -1)),
    "radius 51": (TOOLS["query_world"], break_entry("query_world.radius", 51.0, col=0)),
    "message token 16": (TOOLS["send_message"], break_entry("send_message", 16, col=0)),
    "tool 7": (7, lambda action, j: None),
    "tool NaN float": (NAN, lambda action, j: None),
}


def build_case(name: str, policy, obs, j: int):
    """The bad batch, the clean batch (env j idles) and the no-op batch (env j queries its inventory)."""
    tool, mutate = CORPUS[name]
    base = policy(obs)
    valid_tool = tool if float(tool).is_integer() and 0 <= tool < 7 else None
    if name.endswith("missing"):  # nobody else can use a tool whose entry is absent
        base["tool"][base["tool"] == valid_tool] = TOOLS["idle"]
    elif valid_tool is not None:
        base["tool"][(j + 1) % B] = valid_tool  # a neighbour uses the same tool, validly
    if not float(tool).is_integer():
        base["tool"] = base["tool"].astype(np.float64)
    return bad_clean_noop(base, j, tool, mutate)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("name", list(CORPUS))
def test_bad_parameters_give_invalid_params_and_touch_no_other_env(name):
    (envs, twin, noop_twin), obs, policy = warmed_up(3)
    assert (envs.unwrapped.state.craft_left > 0).any()  # some envs are busy crafting
    j = 3
    bad, clean, noop = build_case(name, policy, obs, j)
    others = np.arange(B) != j
    out, want, want_noop = envs.step(bad), twin.step(clean), noop_twin.step(noop)

    assert out[0]["last_action"][j, 1] == INVALID_PARAMS
    for i in np.flatnonzero(others):
        assert_tree_equal(obs_row(out[0], i), obs_row(want[0], i), f"obs of env {i}")
    for part in (1, 2, 3):
        np.testing.assert_array_equal(out[part][others], want[part][others])
    for k in want[4]:
        np.testing.assert_array_equal(out[4][k][others], want[4][k][others], err_msg=f"info {k}")
    got = snapshot(envs.unwrapped.state)
    assert_snapshot_equal(got, snapshot(twin.unwrapped.state), rows=others, msg="other env")
    noop_state = snapshot(noop_twin.unwrapped.state)
    attempted = int(CORPUS[name][0] == TOOLS["craft"])  # an invalid craft is still a craft attempt
    noop_state["extra.craft_attempts"][j] += attempted
    for key in got:
        if key not in LAST_ACTION_RECORD:
            np.testing.assert_array_equal(got[key][j], noop_state[key][j], err_msg=f"bad env {key}")
    assert out[1][j] == want_noop[1][j] and envs.observation_space.contains(out[0])


def test_an_invalid_craft_still_counts_as_an_attempt():
    (envs,), obs, policy = warmed_up(1, steps=0)
    action = policy(obs)
    action["tool"][:] = TOOLS["craft"]
    action["craft"][:, 0] = K  # no such recipe
    _, _, _, _, info = envs.step(action)
    assert (info["craft_attempts"] == 1).all() and (info["recipe_efficiency"] == 0).all()


def _set(key, value):
    def mutate(a):
        a[key] = value
        return a

    return mutate


MALFORMED = {
    "craft (B,)": _set("craft", np.zeros(B, np.int64)),
    "craft (B, 3)": _set("craft", np.zeros((B, 3), np.int64)),
    "craft strings": _set("craft", np.full((B, 2), "iron_ingot")),
    "craft ragged": _set("craft", [[0, 1]] * (B - 1) + [[0]]),
    "craft objects": _set("craft", np.array([[None, None]] * B, dtype=object)),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_craft_batch_raises_naming_the_field_and_changes_nothing(name):
    (envs, twin), obs, policy = warmed_up(2, steps=20)
    action = policy(obs)
    before = snapshot(envs.unwrapped.state)
    with pytest.raises(ValueError, match="craft"):
        envs.step(MALFORMED[name](copy_action(action)))
    assert_snapshot_equal(snapshot(envs.unwrapped.state), before, msg=name)
    assert_tree_equal(envs.step(copy_action(action))[0], twin.step(copy_action(action))[0])


@pytest.mark.parametrize("craft", [(K, 0), (0, S), (-1, 0), (np.nan, 0.0)])
def test_single_env_bad_craft_indices_give_invalid_params_and_nothing_else(craft):
    env, noop_env = make_single(), make_single()
    for e in (env, noop_env):
        obs, _ = e.reset(seed=0)
    action = action_row(full_batch(1, TOOLS["craft"]), 0)
    action["craft"] = np.array(craft)
    noop = copy_action(action)
    noop["tool"] = TOOLS["query_inventory"]
    got, want = env.step(action), noop_env.step(noop)
    assert got[0]["last_action"].tolist() == [TOOLS["craft"], INVALID_PARAMS]
    for k in got[0]:
        if k != "last_action":
            np.testing.assert_array_equal(got[0][k], want[0][k], err_msg=k)
    assert got[1:4] == want[1:4]
