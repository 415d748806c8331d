"""What the seeds' snippets expect of the tool layer (issue 13): bare tool names, unknown
arguments named, unseen resources not measured, targets clamped to the world, velocity
and rotation, and "no new command" for a turn without a tool call or an agent left out."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from pettingzoo.utils import BaseParallelWrapper

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0
from arena_envs.tools import Decision, parse_decision
from arena_envs.wrappers import ToolCallWrapper


def foraging(**kwargs) -> ToolCallWrapper:
    return ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="classic", **kwargs))


# -- a bare tool name is a call with no parameters ------------------------------------------


@pytest.mark.parametrize("raw", ["idle", '"idle"', "  idle\n", "idle()", Decision("idle"), {"tool": "idle"}])
def test_a_bare_tool_name_is_a_call_without_parameters(raw):
    assert parse_decision(raw) == Decision("idle", {})
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step(raw)
    assert obs.last_action_result.success and obs.last_action_result.tool == "idle"


def test_the_seeds_decide_returning_move_to_asks_for_its_parameters():
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step("move_to")
    result = obs.last_action_result
    assert (result.success, result.error_code, result.tool) == (False, "INVALID_PARAMS", "move_to")
    assert "missing required parameter 'target_x'" in result.error_message


@pytest.mark.parametrize("call, unknown", [
    ({"tool": "collect", "params": {"target": "Apple1"}}, "target"),
    ('{"name": "move_to", "arguments": {"targetx": 1, "target_y": 0, "target_z": 2}}', "targetx"),
    ({"tool": "query_world", "params": {"radious": 5}}, "radious"),
])
def test_an_unknown_argument_is_named_not_reported_missing(call, unknown):
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step(call)
    message = obs.last_action_result.error_message
    assert f"unknown parameter '{unknown}'" in message and "missing" not in message


# -- collect of an unseen resource ----------------------------------------------------------


def test_collect_of_an_unseen_resource_says_so_without_its_distance():
    env = foraging()
    obs, _ = env.reset(seed=0)
    seen = {r.name for r in obs.nearby_resources}
    unseen = [name for name in env.session._names["resource"] if name not in seen]
    assert unseen, "the classic layout hides some resources from the spawn"
    obs, *_ = env.step({"tool": "collect", "params": {"target_name": unseen[0]}})
    result = obs.last_action_result
    assert result.error_code == "OUT_OF_RANGE"
    assert f"'{unseen[0]}' is not visible" in result.error_message
    assert "units away" not in result.error_message and not any(ch.isdigit() for ch in
                                                                result.error_message.replace(unseen[0], ""))


def test_a_queried_resource_is_known_so_its_distance_is_told():
    env = foraging()
    obs, _ = env.reset(seed=0)
    seen = {r.name for r in obs.nearby_resources}
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 50, "filter_type": "resource"}})
    far = next(e for e in obs.query_result["entities"] if e["name"] not in seen and e["distance"] > 2)
    obs, *_ = env.step({"tool": "collect", "params": {"target_name": far["name"]}})
    assert "units away, collection range is 2.0" in obs.last_action_result.error_message


# -- targets outside the world --------------------------------------------------------------


def test_the_seeds_move_away_from_near_the_edge_moves_as_far_as_it_can():
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "move_to", "params": {"target": [0, 0, 24]}})
    for _ in range(40):
        obs, *_ = env.step(None)
    assert obs.position[2] > 23
    obs, *_ = env.step({"tool": "move_to", "params": {"target": [3, 0, 60], "speed": 2}})
    result = obs.last_action_result
    assert result.success and result.error_code is None
    assert result.message == "target (3.0, 60.0) is outside the world (±25); clamped to (3.0, 24.5) at its edge"
    assert "ok (target (3.0, 60.0) is outside" in obs.to_text()
    for _ in range(20):
        obs, *_ = env.step(None)
    assert abs(obs.position[0] - 3) < 0.5 and obs.position[2] >= 24.0  # at the wall, as close as it gets
    assert not env.unwrapped.state.moving[0, 0]  # and it arrived: no endless walk into the wall


# -- velocity and rotation -------------------------------------------------------------------


def test_velocity_and_rotation_follow_the_movement():
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="random", num_obstacles=0, num_hazards=0))
    obs, _ = env.reset(seed=3)
    assert obs.velocity == (0.0, 0.0, 0.0) and obs.rotation == (0.0, 0.0, 0.0)
    env.step({"tool": "move_to", "params": {"target": [0, 0, 0], "speed": 2}})
    for _ in range(30):
        obs, *_ = env.step(None)
    assert math.hypot(obs.position[0], obs.position[2]) < 0.5 and obs.velocity == (0.0, 0.0, 0.0)
    x, _, z = obs.position
    # yaw about +Y as in Godot: 0 faces -Z, 90 faces -X, -90 faces +X, 180 faces +Z
    headings = [((x + 10, z), -90.0), ((x + 10, z - 10), 0.0), ((x, z - 10), 90.0), ((x, z), 180.0)]
    for (tx, tz), yaw in headings:
        obs, *_ = env.step({"tool": "move_to", "params": {"target": [tx, 0, tz]}})
        vx, vy, vz = obs.velocity
        assert vy == 0.0 and math.hypot(vx, vz) == pytest.approx(5.0, abs=1e-3)  # speed 1: 5 units/s
        assert obs.rotation == (0.0, pytest.approx(yaw, abs=0.01), 0.0)
        for _ in range(30):
            obs, *_ = env.step(None)
    obs, *_ = env.step("idle")
    assert obs.velocity == (0.0, 0.0, 0.0) and obs.rotation[1] == pytest.approx(180.0, abs=0.01)  # kept


def test_velocity_is_in_units_per_second_at_every_speed():
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="random", num_obstacles=0, num_hazards=0))
    obs, _ = env.reset(seed=5)
    x, _, z = obs.position
    obs, *_ = env.step({"tool": "move_to", "params": {"target": [x, 0, z + 8 if z < 0 else z - 8], "speed": 2}})
    assert abs(obs.velocity[2]) == pytest.approx(10.0, abs=1e-3)
    assert obs.rotation[1] in (pytest.approx(180.0), pytest.approx(0.0))


# -- no new command: the agent carries on ---------------------------------------------------


def test_a_turn_without_a_tool_call_carries_on():
    env = foraging()
    obs, _ = env.reset(seed=0)
    start = obs.position
    env.step({"tool": "move_to", "params": {"target": [start[0] + 8, 0, start[2]]}})
    positions = []
    for _ in range(5):
        obs, *_ = env.step(None)
        positions.append(obs.position[0])
        assert obs.last_action_result is None  # nothing was asked this tick
    assert positions == sorted(positions) and positions[-1] > positions[0]  # still walking
    obs, *_ = env.step("idle")
    stopped = obs.position
    obs, *_ = env.step(None)
    assert obs.position == stopped


def test_a_query_result_is_not_repeated_on_a_turn_without_a_call():
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "query_inventory"})
    assert obs.inventory_details is not None
    obs, *_ = env.step(None)
    assert obs.inventory_details is None and obs.query_result is None


class CountingWrapper(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.steps = []

    def step(self, action):
        self.steps.append(type(action).__name__)
        return self.env.step(action)


class CountingParallelWrapper(BaseParallelWrapper):
    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, actions):
        self.steps += 1
        return self.env.step(actions)


def test_the_wrapper_steps_through_the_wrapped_envs_public_step():
    counting = CountingWrapper(gym.make("arena_envs/Foraging-v0"))
    env = ToolCallWrapper(counting)
    env.reset(seed=0)
    env.step("idle")
    env.step(None)
    env.step("not a call")
    assert counting.steps == ["ToolActions"] * 3


def test_agents_left_out_of_a_parallel_step_carry_on():
    counting = CountingParallelWrapper(team_capture_v0.parallel_env())
    env = ToolCallWrapper(counting)
    observations, _ = env.reset(seed=0)
    start = observations["blue_agent_1"].position
    env.step({"blue_agent_1": {"tool": "move_to", "params": {"target": [0, 0, 0]}}})
    for _ in range(5):
        observations, *_ = env.step({"red_agent_1": "idle"})  # blue_agent_1 left out
    after = observations["blue_agent_1"]
    assert math.dist(after.position, start) == pytest.approx(3.0, abs=1e-3)  # 6 ticks of walking, 0.5 a tick
    assert after.last_action_result is None
    assert observations["red_agent_1"].last_action_result.success
    assert counting.steps == 6
    observations, *_ = env.step({"blue_agent_1": "idle"})
    stopped = observations["blue_agent_1"].position
    observations, *_ = env.step({})
    assert observations["blue_agent_1"].position == stopped
