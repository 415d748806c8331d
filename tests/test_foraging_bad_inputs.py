"""A corpus of bad actions against the vector env (B = 8) and the single env.

* A bad parameter of one env's chosen tool (NaN, inf, out of range, missing entry,
  unknown tool id) gives that env ``INVALID_PARAMS`` (code 4) and nothing else; every
  other env ends up exactly as it would have with that env idling (a twin vector env
  stepped with the clean batch), and the bad env itself exactly as with a no-op
  ``query_inventory`` apart from the record of its last action.
* A batch malformed as a whole raises ``ValueError`` naming the field and changes no
  state at all (and the next valid step is the same as if it had never been tried).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from conftest import (
    QUERY_INVENTORY_TOOL,
    TOOLS,
    action_row,
    assert_snapshot_equal,
    assert_tree_equal,
    bad_clean_noop,
    break_entry,
    copy_action,
    drop_entry,
    make_single,
    make_vec,
    obs_row,
    policy_actions,
    snapshot,
)

B = 8
R = 9  # resource rows of the default random layout
INVALID_PARAMS = 4
LAST_ACTION_RECORD = ("last_tool", "last_code", "last_index", "last_value")
NAN, INF = float("nan"), float("inf")


def warmed_up(count: int, seed: int = 5, steps: int = 15, **kwargs):
    """``count`` identical vector envs, stepped alike into varied states (moving, carrying...)."""
    envs = [make_vec(B, **kwargs) for _ in range(count)]
    rng = np.random.default_rng(seed)
    for e in envs:
        obs, _ = e.reset(seed=seed)
    for _ in range(steps):
        action = policy_actions(rng, obs)
        for e in envs:
            obs, *_ = e.step(copy_action(action))
    return envs, obs, rng


# -- the corpus: (tool the bad env picks, how its parameters are broken) ------------------

def _nothing(action: dict, j: int) -> None:
    pass


CORPUS: dict[str, tuple[float, Callable]] = {
    # move_to: target x, target z, speed
    "move_to x NaN": (TOOLS["move_to"], break_entry("move_to", NAN, col=0)),
    "move_to z NaN": (TOOLS["move_to"], break_entry("move_to", NAN, col=1)),
    "move_to x +inf": (TOOLS["move_to"], break_entry("move_to", INF, col=0)),
    "move_to z -inf": (TOOLS["move_to"], break_entry("move_to", -INF, col=1)),
    "move_to x 25.5": (TOOLS["move_to"], break_entry("move_to", 25.5, col=0)),
    "move_to z -30": (TOOLS["move_to"], break_entry("move_to", -30.0, col=1)),
    "move_to x 1e30": (TOOLS["move_to"], break_entry("move_to", 1e30, col=0)),
    "move_to x 1e300 float64": (TOOLS["move_to"], break_entry("move_to", 1e300, dtype=np.float64, col=0)),
    "speed 0": (TOOLS["move_to"], break_entry("move_to", 0.0, col=2)),
    "speed 3": (TOOLS["move_to"], break_entry("move_to", 3.0, col=2)),
    "speed 2.001": (TOOLS["move_to"], break_entry("move_to", 2.001, col=2)),
    "speed -1": (TOOLS["move_to"], break_entry("move_to", -1.0, col=2)),
    "speed NaN": (TOOLS["move_to"], break_entry("move_to", NAN, col=2)),
    "speed inf": (TOOLS["move_to"], break_entry("move_to", INF, col=2)),
    # collect: a row of the resource table
    "collect -1": (TOOLS["collect"], break_entry("collect", -1)),
    "collect R": (TOOLS["collect"], break_entry("collect", R)),
    "collect 1000": (TOOLS["collect"], break_entry("collect", 1000)),
    "collect 2**40": (TOOLS["collect"], break_entry("collect", 2**40)),
    "collect 2.5 float": (TOOLS["collect"], break_entry("collect", 2.5, dtype=np.float64)),
    "collect NaN float": (TOOLS["collect"], break_entry("collect", NAN, dtype=np.float64)),
    "collect inf float": (TOOLS["collect"], break_entry("collect", INF, dtype=np.float32)),
    "collect -0.5 float": (TOOLS["collect"], break_entry("collect", -0.5, dtype=np.float64)),
    # craft: recipe, station (Foraging has one dummy of each)
    "craft recipe -1": (TOOLS["craft"], break_entry("craft", -1, col=0)),
    "craft recipe 1": (TOOLS["craft"], break_entry("craft", 1, col=0)),
    "craft station 1": (TOOLS["craft"], break_entry("craft", 1, col=1)),
    "craft station -1": (TOOLS["craft"], break_entry("craft", -1, col=1)),
    "craft NaN float": (TOOLS["craft"], break_entry("craft", NAN, dtype=np.float64, col=0)),
    "craft 0.5 float": (TOOLS["craft"], break_entry("craft", 0.5, dtype=np.float64, col=1)),
    # query_world: radius in (0, 50], filter in [0, 5)
    "radius 0": (TOOLS["query_world"], break_entry("query_world.radius", 0.0, col=0)),
    "radius 51": (TOOLS["query_world"], break_entry("query_world.radius", 51.0, col=0)),
    "radius NaN": (TOOLS["query_world"], break_entry("query_world.radius", NAN, col=0)),
    "radius -5": (TOOLS["query_world"], break_entry("query_world.radius", -5.0, col=0)),
    "radius inf": (TOOLS["query_world"], break_entry("query_world.radius", INF, col=0)),
    "filter -1": (TOOLS["query_world"], break_entry("query_world.filter", -1)),
    "filter 5": (TOOLS["query_world"], break_entry("query_world.filter", 5)),
    "filter 1.5 float": (TOOLS["query_world"], break_entry("query_world.filter", 1.5, dtype=np.float64)),
    "filter NaN float": (TOOLS["query_world"], break_entry("query_world.filter", NAN, dtype=np.float64)),
    # send_message: token in [0, 16), target in [0, 2) with one agent
    "message token -1": (TOOLS["send_message"], break_entry("send_message", -1, col=0)),
    "message token 16": (TOOLS["send_message"], break_entry("send_message", 16, col=0)),
    "message target -1": (TOOLS["send_message"], break_entry("send_message", -1, col=1)),
    "message target 2": (TOOLS["send_message"], break_entry("send_message", 2, col=1)),
    "message NaN float": (TOOLS["send_message"], break_entry("send_message", NAN, dtype=np.float64, col=0)),
    # the tool id itself
    "tool -1": (-1, _nothing),
    "tool 7": (7, _nothing),
    "tool 1000": (1000, _nothing),
    "tool 2.5 float": (2.5, _nothing),
    "tool NaN float": (NAN, _nothing),
    "tool inf float": (INF, _nothing),
    "tool -0.5 float": (-0.5, _nothing),
    # the chosen tool's entry is missing from the batch
    "move_to missing": (TOOLS["move_to"], drop_entry("move_to")),
    "collect missing": (TOOLS["collect"], drop_entry("collect")),
    "craft missing": (TOOLS["craft"], drop_entry("craft")),
    "send_message missing": (TOOLS["send_message"], drop_entry("send_message")),
}


def build_case(name: str, rng, obs, j: int):
    """The bad batch, the clean batch (env j idles) and the no-op batch (env j queries its inventory)."""
    tool, mutate = CORPUS[name]
    base = policy_actions(rng, obs)
    valid_tool = tool if float(tool).is_integer() and 0 <= tool < 7 else None
    if valid_tool is not None:
        for k in (1, 3):  # other envs use the same tool, validly, beside the bad one
            base["tool"][(j + k) % B] = valid_tool
    if name.endswith("missing"):  # nobody else can use a tool whose entry is absent
        base["tool"][base["tool"] == valid_tool] = TOOLS["idle"]
    as_float = not float(tool).is_integer() or not np.isfinite(tool)
    if as_float:
        base["tool"] = base["tool"].astype(np.float64)
    return bad_clean_noop(base, j, tool, mutate)


OVERFLOW = "ignore:overflow encountered in cast:RuntimeWarning"  # 1e300 does not fit a float32


@pytest.mark.filterwarnings(OVERFLOW)
@pytest.mark.parametrize("name", list(CORPUS))
def test_bad_parameters_give_invalid_params_and_touch_no_other_env(name):
    (envs, twin, noop_twin), obs, rng = warmed_up(3)
    j = 2 if "float" in name else 5
    bad, clean, noop = build_case(name, rng, obs, j)
    others = np.arange(B) != j

    out = envs.step(bad)
    want = twin.step(clean)
    want_noop = noop_twin.step(noop)

    obs_bad, obs_clean = out[0], want[0]
    assert obs_bad["last_action"][j, 1] == INVALID_PARAMS, obs_bad["last_action"][j]
    for i in np.flatnonzero(others):
        assert_tree_equal(obs_row(obs_bad, i), obs_row(obs_clean, i), f"obs of env {i}")
    for part, label in ((1, "reward"), (2, "terminated"), (3, "truncated")):
        np.testing.assert_array_equal(out[part][others], want[part][others], err_msg=label)
    for k in want[4]:
        np.testing.assert_array_equal(out[4][k][others], want[4][k][others], err_msg=f"info {k}")
    got_state = snapshot(envs.unwrapped.state)
    assert_snapshot_equal(got_state, snapshot(twin.unwrapped.state), rows=others, msg="other env")
    # the bad env: as after a no-op, apart from the record of its last action
    noop_state = snapshot(noop_twin.unwrapped.state)
    for key in got_state:
        if key not in LAST_ACTION_RECORD:
            np.testing.assert_array_equal(got_state[key][j], noop_state[key][j], err_msg=f"bad env {key}")
    assert out[1][j] == want_noop[1][j]
    assert envs.observation_space.contains(obs_bad)


def test_every_env_can_be_bad_at_once():
    (envs, noop_twin), obs, rng = warmed_up(2)
    action = policy_actions(rng, obs)
    action["tool"][:] = TOOLS["move_to"]
    action["move_to"][:, 2] = np.nan
    noop = copy_action(action)
    noop["tool"][:] = QUERY_INVENTORY_TOOL
    obs, reward, *_ = envs.step(action)
    _, reward_noop, *_ = noop_twin.step(noop)
    assert (obs["last_action"][:, 1] == INVALID_PARAMS).all()
    np.testing.assert_array_equal(reward, reward_noop)
    got, want = snapshot(envs.unwrapped.state), snapshot(noop_twin.unwrapped.state)
    for key in got:
        if key not in LAST_ACTION_RECORD:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_missing_optional_query_world_entries_use_the_defaults():
    (envs,), obs, rng = warmed_up(1)
    action = policy_actions(rng, obs)
    action["tool"][:] = TOOLS["query_world"]
    action["query_world"] = {}
    obs, *_ = envs.step(action)
    assert (obs["last_action"][:, 1] == 0).all()
    np.testing.assert_array_equal(envs.unwrapped.state.query_radius[:, 0], 20.0)
    np.testing.assert_array_equal(envs.unwrapped.state.query_filter[:, 0], 0)


def test_unused_entries_may_hold_bad_values():
    """Only the chosen tool's entry is read: NaN in another tool's entry is no error."""
    (envs, twin), obs, rng = warmed_up(2)
    action = policy_actions(rng, obs)
    action["tool"][:] = TOOLS["collect"]
    clean = copy_action(action)
    action["move_to"][:] = np.nan
    action["query_world"]["radius"][:] = -1.0
    action["send_message"][:] = -7
    assert_tree_equal(envs.step(action)[0], twin.step(clean)[0])
    assert_snapshot_equal(snapshot(envs.unwrapped.state), snapshot(twin.unwrapped.state))


# -- whole-batch malformed input ----------------------------------------------------------------


def _set(key, value):
    def mutate(a):
        if "." in key:
            outer, inner = key.split(".")
            a[outer][inner] = value
        else:
            a[key] = value
        return a

    return mutate


def _del(key):
    def mutate(a):
        del a[key]
        return a

    return mutate


MALFORMED: dict[str, tuple[Callable, str]] = {
    "unknown key": (_set("jump", np.zeros(B)), "jump"),
    "unknown query_world key": (_set("query_world.filtre", np.zeros(B, np.int64)), "filtre"),
    "tool missing": (_del("tool"), "tool"),
    "tool None": (_set("tool", None), "tool"),
    "tool too long": (_set("tool", np.zeros(B + 1, np.int64)), "tool"),
    "tool too short": (_set("tool", np.zeros(B - 1, np.int64)), "tool"),
    "tool 2-D": (_set("tool", np.zeros((B, 1), np.int64)), "tool"),
    "tool scalar": (_set("tool", 6), "tool"),
    "tool strings": (_set("tool", np.array(["idle"] * B)), "tool"),
    "tool objects": (_set("tool", np.array([None] * B, dtype=object)), "tool"),
    "tool complex": (_set("tool", np.zeros(B, np.complex64)), "tool"),
    "move_to (B, 2)": (_set("move_to", np.zeros((B, 2), np.float32)), "move_to"),
    "move_to (B,)": (_set("move_to", np.zeros(B, np.float32)), "move_to"),
    "move_to strings": (_set("move_to", np.full((B, 3), "1.0")), "move_to"),
    "move_to list of dicts": (_set("move_to", [{"x": 1.0}] * B), "move_to"),
    "move_to ragged list": (_set("move_to", [[0.0, 0.0, 1.0]] * (B - 1) + [[0.0, 0.0]]), "move_to"),
    "collect (B, 1)": (_set("collect", np.zeros((B, 1), np.int64)), "collect"),
    "collect strings": (_set("collect", np.array(["Berry1"] * B)), "collect"),
    "craft (B,)": (_set("craft", np.zeros(B, np.int64)), "craft"),
    "send_message (B, 3)": (_set("send_message", np.zeros((B, 3), np.int64)), "send_message"),
    "radius (B,)": (_set("query_world.radius", np.full(B, 5.0, np.float32)), "radius"),
    "radius strings": (_set("query_world.radius", np.full((B, 1), "far")), "radius"),
    "filter (B, 1)": (_set("query_world.filter", np.zeros((B, 1), np.int64)), "filter"),
    "query_world not a dict": (_set("query_world", np.zeros((B, 1), np.float32)), "query_world"),
}

NOT_A_DICT = {
    "list of dicts": lambda a: [action_row(a, i) for i in range(B)],
    "None": lambda a: None,
    "array": lambda a: np.zeros(B, np.int64),
    "string": lambda a: "idle",
    "tuple": lambda a: tuple(a.values()),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_batch_raises_naming_the_field_and_changes_nothing(name):
    # max_ticks 15 with 15 warm-up steps: every env is due for its autoreset on the next step
    (envs, twin), obs, rng = warmed_up(2, max_ticks=15)
    action = policy_actions(rng, obs)
    mutate, field = MALFORMED[name]
    before = snapshot(envs.unwrapped.state)
    with pytest.raises(ValueError, match=field):
        envs.step(mutate(copy_action(action)))
    assert_snapshot_equal(snapshot(envs.unwrapped.state), before, msg=name)
    # and the env goes on exactly as if the bad call had never been made
    got, want = envs.step(copy_action(action)), twin.step(copy_action(action))
    assert_tree_equal(got[0], want[0])
    assert not got[3].any() and got[0]["time_left"][0, 0] == 15  # the due autoreset happened
    assert_snapshot_equal(snapshot(envs.unwrapped.state), snapshot(twin.unwrapped.state))


@pytest.mark.parametrize("name", list(NOT_A_DICT))
def test_non_dict_batch_raises_and_changes_nothing(name):
    (envs,), obs, rng = warmed_up(1)
    before = snapshot(envs.unwrapped.state)
    with pytest.raises(ValueError, match="dict"):
        envs.step(NOT_A_DICT[name](policy_actions(rng, obs)))
    assert_snapshot_equal(snapshot(envs.unwrapped.state), before)


# -- the single env ---------------------------------------------------------------------------


def single_pair(seed: int = 8, steps: int = 10):
    envs = [make_single() for _ in range(2)]
    rng = np.random.default_rng(seed)
    for e in envs:
        obs, _ = e.reset(seed=seed)
    for _ in range(steps):
        action = action_row(policy_actions(rng, {k: v[None] for k, v in obs.items()}), 0)
        for e in envs:
            obs, *_ = e.step(copy_action(action))
    return envs, obs, rng


@pytest.mark.filterwarnings(OVERFLOW)
@pytest.mark.parametrize("name", list(CORPUS))
def test_single_env_bad_parameters_give_invalid_params_and_nothing_else(name):
    (env, noop_env), obs, rng = single_pair()
    batch_obs = {k: np.repeat(v[None], B, 0) for k, v in obs.items()}
    bad, _, noop = build_case(name, rng, batch_obs, 0)
    obs_bad, reward, terminated, truncated, info = env.step(action_row(bad, 0))
    obs_noop, reward_noop, terminated_noop, truncated_noop, info_noop = noop_env.step(action_row(noop, 0))
    assert obs_bad["last_action"][1] == INVALID_PARAMS
    assert env.observation_space.contains(obs_bad)
    for k in obs_bad:
        if k != "last_action":
            np.testing.assert_array_equal(obs_bad[k], obs_noop[k], err_msg=k)
    assert (reward, terminated, truncated, info) == (reward_noop, terminated_noop, truncated_noop, info_noop)
    got, want = snapshot(env.unwrapped.state), snapshot(noop_env.unwrapped.state)
    for key in got:
        if key not in LAST_ACTION_RECORD:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


SINGLE_MALFORMED: dict[str, tuple[Callable, str]] = {
    "unknown key": (_set("jump", 1), "jump"),
    "tool missing": (_del("tool"), "tool"),
    "tool None": (_set("tool", None), "tool"),
    "tool shape (1,)": (_set("tool", np.array([6])), "tool"),
    "tool string": (_set("tool", "idle"), "tool"),
    "move_to shape (2,)": (_set("move_to", np.zeros(2, np.float32)), "move_to"),
    "move_to batched": (_set("move_to", np.zeros((1, 3), np.float32)), "move_to"),
    "collect shape (1,)": (_set("collect", np.array([0])), "collect"),
    "collect string": (_set("collect", "Berry1"), "collect"),
    "radius scalar": (_set("query_world.radius", 5.0), "radius"),
    "query_world not a dict": (_set("query_world", 5.0), "query_world"),
}


@pytest.mark.parametrize("name", list(SINGLE_MALFORMED) + ["not a dict"])
def test_single_env_malformed_action_raises_and_changes_nothing(name):
    (env, twin), obs, rng = single_pair()
    action = action_row(policy_actions(rng, {k: v[None] for k, v in obs.items()}), 0)
    before = snapshot(env.unwrapped.state)
    if name == "not a dict":
        bad, field = [action], "dict"
    else:
        mutate, field = SINGLE_MALFORMED[name]
        bad = mutate(copy_action(action))
    with pytest.raises(ValueError, match=field):
        env.step(bad)
    assert_snapshot_equal(snapshot(env.unwrapped.state), before)
    assert_tree_equal(env.step(copy_action(action))[0], twin.step(copy_action(action))[0])
