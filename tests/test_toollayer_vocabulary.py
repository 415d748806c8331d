"""One source for the tool vocabulary: names, result codes, bounds and the numbers in the
texts all follow the world's definitions and the scenario's params (issue 12)."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0, world
from arena_envs.actions import min_speed
from arena_envs.tools import (
    TOOL_NAMES,
    UNIVERSAL_TOOLS,
    ErrorCode,
    ToolCallError,
    tool_schemas,
    validate_params,
)
from arena_envs.tools.registry import universal_tools
from arena_envs.world import WorldParams
from arena_envs.wrappers import ToolCallWrapper

ODD = {"max_speed_multiplier": 3.0, "query_radius_max": 80.0, "half_size": 40.0}


def odd_foraging() -> ToolCallWrapper:
    return ToolCallWrapper(gym.make("arena_envs/Foraging-v0", **ODD))


def schema_of(schemas: list[dict], tool: str) -> dict:
    return next(s["function"] for s in schemas if s["function"]["name"] == tool)


def test_names_and_codes_are_the_worlds():
    assert TOOL_NAMES is world.TOOL_NAMES
    assert tuple(UNIVERSAL_TOOLS) == world.TOOL_NAMES
    assert [code.value for code in ErrorCode] == [c for c in world.RESULT_CODES if c != "OK"]
    assert ErrorCode.BUSY == "BUSY" and str(ErrorCode.NOT_FOUND) == "NOT_FOUND"
    assert ErrorCode(world.RESULT_CODES[world.INVALID_PARAMS]) is ErrorCode.INVALID_PARAMS


def test_schemas_follow_the_scenarios_params():
    env = odd_foraging()
    params = env.unwrapped.scenario.params
    schemas = tool_schemas(params=params)
    speed = schema_of(schemas, "move_to")["parameters"]["properties"]["speed"]
    radius = schema_of(schemas, "query_world")["parameters"]["properties"]["radius"]
    assert (speed["minimum"], speed["maximum"]) == (min_speed(params), 3.0)
    assert (radius["default"], radius["maximum"]) == (params.query_radius_default, 80.0)
    assert "-40 to 40" in schema_of(schemas, "move_to")["description"]
    assert "from 0.002 to 3:" in speed["description"] and "at most 80" in radius["description"]
    # the session of the wrapper validates with exactly these
    assert env.session.tools is universal_tools(params)
    assert env.session.tools.schemas() == schemas


def test_descriptions_carry_every_number_from_params():
    params = WorldParams(collect_range=2.75, craft_range=3.25, move_speed=6.5, half_size=33.0)
    text = json.dumps(tool_schemas(params=params))
    for number in ("2.75 units", "3.25 units", "6.5 units per second", "-33 to 33"):
        assert number in text
    default_text = json.dumps(tool_schemas())
    for stale in ("2.75", "3.25", "6.5 units", "33"):
        assert stale not in default_text


def test_validation_and_messages_follow_the_params():
    odd = gym.make("arena_envs/Foraging-v0", **ODD).unwrapped.scenario.params
    assert validate_params("move_to", {"target": [0, 0, 0], "speed": 2.5}, odd)["speed"] == 2.5
    with pytest.raises(ToolCallError, match=r"'speed' must be >= 0\.002 and <= 3, got number 3\.5"):
        validate_params("move_to", {"target": [0, 0, 0], "speed": 3.5}, odd)
    assert validate_params("query_world", {"radius": 70}, odd)["radius"] == 70.0
    with pytest.raises(ToolCallError, match=r"'radius' must be > 0 and <= 80, got number 90"):
        validate_params("query_world", {"radius": 90}, odd)
    # the default world keeps its own bounds
    with pytest.raises(ToolCallError, match=r"<= 2, got number 2\.5"):
        validate_params("move_to", {"target": [0, 0, 0], "speed": 2.5})
    with pytest.raises(ToolCallError, match=r"<= 50, got number 70"):
        validate_params("query_world", {"radius": 70})


def test_the_wrapper_checks_the_bounds_of_its_world():
    env = odd_foraging()
    env.reset(seed=1)
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 70}})
    assert obs.last_action_result.success and obs.query_result is not None
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 81}})
    assert obs.last_action_result.error_code == "INVALID_PARAMS"
    assert "<= 80" in obs.last_action_result.error_message
    obs, *_ = env.step({"tool": "move_to", "params": {"target": [35, 0, 0], "speed": 3}})
    assert obs.last_action_result.success and obs.last_action_result.message is None  # inside ±40
    obs, *_ = env.step({"tool": "move_to", "params": {"target": [45, 0, 0]}})
    assert obs.last_action_result.success
    assert "(±40); clamped to (39.5, 0.0) at its edge" in obs.last_action_result.message


def test_default_query_radius_max_is_enforced_by_the_session():
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 70}})
    assert obs.last_action_result.error_code == "INVALID_PARAMS" and "<= 50" in obs.last_action_result.error_message


@pytest.mark.parametrize("make", [
    lambda: gym.make("arena_envs/Crafting-v0").unwrapped.scenario.params,
    lambda: team_capture_v0.parallel_env().unwrapped.scenario.params,
])
def test_every_scenario_gets_a_registry_of_its_own_params(make):
    params = make()
    tools = universal_tools(params)
    move = schema_of(tools.schemas(), "move_to")
    assert f"-{params.half_size:g} to {params.half_size:g}" in move["description"]
    assert move["parameters"]["properties"]["speed"]["minimum"] == min_speed(params)


def test_no_bound_is_written_by_hand_in_the_registry():
    """The numbers of the world's rules appear in the registry's source only as params."""
    from arena_envs.tools import registry

    source = open(registry.__file__, encoding="utf-8").read()
    declarations = source[source.index("def _declarations"):source.index("_REGISTRIES")]
    assert not re.findall(r"(?<![\w.])(?:2\.5|2\.0|50(?:\.0)?|25|20(?:\.0)?|5 units)(?![\w.])", declarations)
