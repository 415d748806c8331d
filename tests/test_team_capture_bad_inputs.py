"""A corpus of bad actions against team_capture_v0's vector env and parallel env.

* A bad parameter of one agent's chosen tool (NaN, inf, out of range, missing entry,
  unknown tool id) gives that agent ``INVALID_PARAMS`` and nothing else: every other agent
  and world ends up exactly as in a twin where that agent idled, and the agent itself as
  after a no-op ``query_inventory``, apart from the record of its last action.
* A batch malformed as a whole raises ``ValueError`` naming the field and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from team_capture_helpers import INVALID_PARAMS, TOOLS, agent_action, copy_action, idle_actions, random_actions

from arena_envs import team_capture_v0

B, N = 4, 2
A = 2 * N
NAN, INF = float("nan"), float("inf")
BAD = (2, 1)  # world, agent (blue_agent_2)
LAST_ACTION_RECORD = ("last_tool", "last_code", "last_index", "last_value")


def _put(key: str, value, dtype=None, col: int | None = None) -> Callable:
    def mutate(action: dict) -> None:
        holder, name = (action["query_world"], key.split(".")[1]) if "." in key else (action, key)
        if dtype is not None:
            holder[name] = holder[name].astype(dtype)
        holder[name][BAD + (() if col is None else (col,))] = value

    return mutate


def _drop(key: str) -> Callable:
    def mutate(action: dict) -> None:
        del action[key]

    return mutate


def _nothing(action: dict) -> None:
    pass


CORPUS: dict[str, tuple[float, Callable]] = {
    "move_to x NaN": (TOOLS["move_to"], _put("move_to", NAN, col=0)),
    "move_to z -inf": (TOOLS["move_to"], _put("move_to", -INF, col=1)),
    "move_to x 30.5": (TOOLS["move_to"], _put("move_to", 30.5, col=0)),
    "move_to x 1e300 float64": (TOOLS["move_to"], _put("move_to", 1e300, dtype=np.float64, col=0)),
    "speed 0": (TOOLS["move_to"], _put("move_to", 0.0, col=2)),
    "speed 2.5": (TOOLS["move_to"], _put("move_to", 2.5, col=2)),
    "speed NaN": (TOOLS["move_to"], _put("move_to", NAN, col=2)),
    "collect 1": (TOOLS["collect"], _put("collect", 1)),
    "collect -1": (TOOLS["collect"], _put("collect", -1)),
    "craft recipe 1": (TOOLS["craft"], _put("craft", 1, col=0)),
    "radius 0": (TOOLS["query_world"], _put("query_world.radius", 0.0, col=0)),
    "radius NaN": (TOOLS["query_world"], _put("query_world.radius", NAN, col=0)),
    "filter 5": (TOOLS["query_world"], _put("query_world.filter", 5)),
    "message token -1": (TOOLS["send_message"], _put("send_message", -1, col=0)),
    "message token 16": (TOOLS["send_message"], _put("send_message", 16, col=0)),
    "message target -1": (TOOLS["send_message"], _put("send_message", -1, col=1)),
    "message target 3 (only 2 teammates)": (TOOLS["send_message"], _put("send_message", N + 1, col=1)),
    "message token 2.5 float": (TOOLS["send_message"], _put("send_message", 2.5, dtype=np.float64, col=0)),
    "message NaN float": (TOOLS["send_message"], _put("send_message", NAN, dtype=np.float64, col=1)),
    "tool -1": (-1, _nothing),
    "tool 7": (7, _nothing),
    "tool NaN float": (NAN, _nothing),
    "tool 1.5 float": (1.5, _nothing),
    "move_to missing": (TOOLS["move_to"], _drop("move_to")),
    "send_message missing": (TOOLS["send_message"], _drop("send_message")),
}


def stepped(count: int, seed: int = 3, steps: int = 20):
    """``count`` identical vector envs, stepped alike into varied states (moving, talking)."""
    envs = [team_capture_v0.vector_env(num_envs=B, agents_per_team=N, message_drop_prob=0.3) for _ in range(count)]
    rng = np.random.default_rng(seed)
    for e in envs:
        e.reset(seed=seed)
    for _ in range(steps):
        batch = random_actions(rng, (B, A), N)
        for e in envs:
            e.step(copy_action(batch))
    return envs, rng


def snapshot(envs) -> dict[str, np.ndarray]:
    return {name: array.copy() for name, array in envs.state.arrays()}


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("name", list(CORPUS))
def test_a_bad_parameter_is_invalid_for_that_agent_alone(name):
    (envs, twin, noop_twin), rng = stepped(3)
    tool, mutate = CORPUS[name]
    base = random_actions(rng, (B, A), N)
    if not float(tool).is_integer() or not np.isfinite(tool):
        base["tool"] = base["tool"].astype(np.float64)
    if name.endswith("missing"):  # nobody else can use a tool whose entry is absent
        base["tool"][base["tool"] == tool] = TOOLS["idle"]
    elif 0 <= tool < 7:
        base["tool"][0, 3] = base["tool"][3, 0] = tool  # others use the same tool, validly
    bad = copy_action(base)
    bad["tool"][BAD] = tool
    mutate(bad)
    clean = copy_action(base)
    clean["tool"][BAD] = TOOLS["idle"]
    if name.endswith("missing"):
        mutate(clean)
    noop = copy_action(clean)
    noop["tool"][BAD] = TOOLS["query_inventory"]

    got, want, want_noop = envs.step(bad), twin.step(clean), noop_twin.step(noop)
    recorded_tool, code = got[0]["last_action"][BAD]
    assert code == INVALID_PARAMS
    if float(tool).is_integer() and 0 <= tool < 7:
        assert recorded_tool == tool
    # the other worlds: as if the agent had idled
    other_worlds = np.arange(B) != BAD[0]
    for k in got[0]:
        np.testing.assert_array_equal(got[0][k][other_worlds], want[0][k][other_worlds], err_msg=k)
    for part in (1, 2, 3):
        np.testing.assert_array_equal(got[part][other_worlds], want[part][other_worlds])
    # its own world, itself included: as after a no-op, apart from the record of its action
    others = np.ones((B, A), bool)
    others[BAD] = False
    for k in got[0]:
        mask = others if k == "last_action" else np.ones((B, A), bool)
        np.testing.assert_array_equal(got[0][k][mask], want_noop[0][k][mask], err_msg=k)
    for part in (1, 2, 3):
        np.testing.assert_array_equal(got[part], want_noop[part])
    for k in want_noop[4]:
        np.testing.assert_array_equal(got[4][k], want_noop[4][k])
    state, noop_state = snapshot(envs), snapshot(noop_twin)
    for array_name, array in state.items():
        mask = others if array_name in LAST_ACTION_RECORD else slice(None)
        np.testing.assert_array_equal(array[mask], noop_state[array_name][mask], err_msg=array_name)


MALFORMED: dict[str, tuple[Callable, str]] = {
    "not a dict": (lambda a: [1, 2, 3], "dict"),
    "unknown key": (lambda a: {**a, "attack": np.zeros((B, A))}, "attack"),
    "no tool": (lambda a: {k: v for k, v in a.items() if k != "tool"}, "tool"),
    "tool per world, not per agent": (lambda a: {**a, "tool": np.zeros(B, np.int64)}, "tool"),
    "move_to without the agent axis": (lambda a: {**a, "move_to": np.zeros((B, 3), np.float32)}, "move_to"),
    "send_message flat": (lambda a: {**a, "send_message": np.zeros((B, A), np.int64)}, "send_message"),
    "strings": (lambda a: {**a, "tool": np.full((B, A), "idle")}, "tool"),
    "ragged": (lambda a: {**a, "send_message": [[[0, 0]] * A] * (B - 1) + [[[0]] * A]}, "send_message"),
    "query_world not a dict": (lambda a: {**a, "query_world": np.zeros((B, A))}, "query_world"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_batch_raises_naming_the_field_and_changes_nothing(name):
    (envs, twin), rng = stepped(2)
    make, field = MALFORMED[name]
    before = snapshot(envs)
    with pytest.raises(ValueError, match=field):
        envs.step(make(random_actions(rng, (B, A), N)))
    for array_name, array in snapshot(envs).items():
        np.testing.assert_array_equal(array, before[array_name], err_msg=array_name)
    batch = random_actions(rng, (B, A), N)
    got, want = envs.step(copy_action(batch)), twin.step(copy_action(batch))
    for k in got[0]:
        np.testing.assert_array_equal(got[0][k], want[0][k])


# -- the parallel env ---------------------------------------------------------------------------


def parallel_pair():
    envs = [team_capture_v0.parallel_env(agents_per_team=N) for _ in range(2)]
    for env in envs:
        env.reset(seed=9)
    return envs


def test_parallel_env_bad_value_is_invalid_for_that_agent_alone():
    env, twin = parallel_pair()
    actions = {a: agent_action(idle_actions((1, A)), 0, i) for i, a in enumerate(env.agents)}
    actions["red_agent_2"]["tool"] = TOOLS["move_to"]
    actions["red_agent_2"]["move_to"] = np.array([20.0, NAN, 1.0], np.float32)
    actions["blue_agent_1"]["tool"] = TOOLS["move_to"]
    actions["blue_agent_1"]["move_to"] = np.array([-20.0, 3.0, 1.0], np.float32)
    clean = copy_action(actions)
    clean["red_agent_2"]["tool"] = TOOLS["idle"]
    obs, rewards, *_ = env.step(actions)
    want, want_rewards, *_ = twin.step(clean)
    assert obs["red_agent_2"]["last_action"].tolist() == [TOOLS["move_to"], INVALID_PARAMS]
    assert obs["blue_agent_1"]["last_action"].tolist() == [TOOLS["move_to"], 0]
    for agent in ("blue_agent_1", "blue_agent_2", "red_agent_1"):
        for k in obs[agent]:
            np.testing.assert_array_equal(obs[agent][k], want[agent][k])
    assert rewards == want_rewards


def test_parallel_env_missing_and_none_actions_idle():
    env, twin = parallel_pair()
    idle = {a: agent_action(idle_actions((1, A)), 0, i) for i, a in enumerate(env.agents)}
    obs, *_ = env.step({"blue_agent_1": None})
    want, *_ = twin.step(idle)
    for agent in env.possible_agents:
        for k in obs[agent]:
            np.testing.assert_array_equal(obs[agent][k], want[agent][k])


@pytest.mark.parametrize("actions, message", [
    ({"green_agent_1": {"tool": 6}}, "green_agent_1"),
    ({"blue_agent_1": 6}, "blue_agent_1"),
    ({"blue_agent_2": {"tool": 0, "move_to": np.zeros(2)}}, "blue_agent_2.*move_to"),
    ({"red_agent_1": {"tool": 5, "send_message": np.zeros((1, 2))}}, "red_agent_1.*send_message"),
    ({"red_agent_1": {"tool": "idle"}}, "red_agent_1.*tool"),
    ([("blue_agent_1", {"tool": 6})], "dict"),
])
def test_parallel_env_malformed_actions_raise_naming_the_agent(actions, message):
    env, twin = parallel_pair()
    before = {name: array.copy() for name, array in env.world.arrays()}
    with pytest.raises(ValueError, match=message):
        env.step(actions)
    for name, array in env.world.arrays():
        np.testing.assert_array_equal(array, before[name], err_msg=name)
