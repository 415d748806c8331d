"""ToolCallWrapper: the seed's Common Patterns run unchanged as agents on Foraging."""

import copy
import json
import math
import pickle

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

import arena_envs  # noqa: F401
from arena_envs.observations import Observation, SimpleContext
from arena_envs.tools import Decision
from arena_envs.wrappers import ToolCallWrapper


def make(layout="classic"):
    return ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout=layout))


class SeedForager:
    """The seed's pursue_resources / move_away_from / error-handling snippets, verbatim bodies."""

    COLLECTION_RANGE = 2.0

    def __init__(self):
        self.last_target = None

    def pursue_resources(self, obs):
        if not obs.nearby_resources:
            return Decision.idle()

        closest = min(obs.nearby_resources, key=lambda r: r.distance)

        if closest.distance < self.COLLECTION_RANGE:
            # In range - collect it
            return Decision(tool="collect", params={"target_name": closest.name})
        else:
            # Not in range - move closer
            self.last_target = closest.position
            return Decision(tool="move_to", params={"target": closest.position})

    def move_away_from(self, hazard, obs):
        # Calculate direction away from hazard
        dx = obs.position[0] - hazard.position[0]
        dz = obs.position[2] - hazard.position[2]
        # Normalize and scale
        dist = (dx**2 + dz**2) ** 0.5
        if dist > 0:
            dx, dz = dx/dist * 5, dz/dist * 5  # Move 5 units away
        target = [obs.position[0] + dx, 0, obs.position[2] + dz]
        return Decision(tool="move_to", params={"target": target})

    def is_in_danger(self, obs, threshold: float = 3.0) -> bool:
        for hazard in obs.nearby_hazards:
            if hazard.distance < threshold:
                return True
        return False

    def decide(self, obs):
        # Check if last action failed
        if obs.last_action_result and not obs.last_action_result.success:
            error = obs.last_action_result.error_code
            if error == "OUT_OF_RANGE":
                # Move closer and retry
                return Decision(tool="move_to", params={"target": self.last_target})
        if self.is_in_danger(obs, threshold=1.4):
            return self.move_away_from(min(obs.nearby_hazards, key=lambda h: h.distance), obs)
        if not obs.nearby_resources and not obs.nearby_hazards:
            return Decision.idle()
        return self.pursue_resources(obs)


def count_item(obs, item_name: str) -> int:
    total = 0
    for item in obs.inventory:
        if item.name.lower() == item_name.lower():
            total += item.quantity
    return total


def can_craft(item_name, obs):
    recipe = obs.available_recipes.get(item_name)
    if not recipe:
        return False
    for material, needed in recipe.inputs.items():
        have = obs.inventory.get(material, 0)
        if have < needed:
            return False
    return True


def test_the_seed_forager_collects_on_the_classic_layout():
    env, agent = make(), SeedForager()
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, Observation) and obs.nearby_resources
    collected = 0
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step(agent.decide(obs))
        collected += reward > 0.5
        if terminated or truncated:
            break
    assert collected >= 3
    assert count_item(obs, "berry") + count_item(obs, "wood") + count_item(obs, "stone") == collected
    assert obs.inventory.get("wood", 0) == count_item(obs, "wood")
    assert not can_craft("iron_sword", obs)  # Foraging has no recipes


def test_collect_out_of_range_names_the_distance():
    env = make()
    obs, _ = env.reset(seed=0)
    far = max(obs.nearby_resources, key=lambda r: r.distance)
    obs, *_ = env.step(Decision(tool="collect", params={"target_name": far.name}))
    result = obs.last_action_result
    assert not result.success and result.error_code == "OUT_OF_RANGE"
    assert f"'{far.name}' is {far.distance:.1f} units away, collection range is 2.0" in result.error_message


@pytest.mark.parametrize("call, code, words", [
    ('{"tool": "collect", "params": {"target_name": "Berry99"}}', "NOT_FOUND", "Berry99"),
    ("I think I should go north", "INVALID_PARAMS", "no JSON"),
    ({"tool": "move_to", "params": {"target": [1, 0]}}, "INVALID_PARAMS", "target"),
    ({"tool": "move_to", "params": {"target": [1, 0, 1], "speed": 3}}, "INVALID_PARAMS", "speed"),
    ({"tool": "fly", "params": {}}, "INVALID_PARAMS", "fly"),
    ({"tool": "craft", "params": {"item_name": "torch", "station_name": "Workbench1"}}, "NOT_FOUND", "Workbench1"),
    ({"tool": "query_world", "params": {"radius": 80}}, "INVALID_PARAMS", "radius"),
    ({"tool": "send_message", "params": {"message": "hi", "target_agent": "agent_002"}}, "NOT_FOUND", "no teammates"),
])
def test_bad_calls_cost_a_tick_and_explain_themselves(call, code, words):
    env = make()
    env.reset(seed=0)
    obs, *_ = env.step(call)
    assert obs.tick == 1
    assert obs.last_action_result.error_code == code
    assert words in obs.last_action_result.error_message


def test_queries_fill_the_next_observation():
    env = make()
    env.reset(seed=0)
    obs, *_ = env.step({"name": "query_world", "arguments": json.dumps({"radius": 50, "filter_type": "resource"})})
    names = {e["name"] for e in obs.query_result["entities"]}
    assert len(names) == 7 and all(e["type"] == "resource" for e in obs.query_result["entities"])
    obs, *_ = env.step(Decision(tool="query_inventory", params={}))
    assert obs.query_result is None
    assert obs.inventory_details == {"items": [], "capacity": 50, "used": 0}
    obs, *_ = env.step(Decision(tool="send_message", params={"message": "hello"}))
    assert obs.last_action_result.success and obs.messages == []


def test_simple_context_and_text():
    env = make()
    obs, _ = env.reset(seed=0)
    simple = obs.to_simple()
    assert isinstance(simple, SimpleContext) and simple.tick == 0
    nearest = min(simple.nearby_resources, key=lambda r: r["distance"])
    assert nearest["name"] == min(obs.nearby_resources, key=lambda r: r.distance).name
    text = obs.to_text()
    assert "agent_1" in text and nearest["name"] in text
    assert json.dumps(obs.to_dict())


CLASSIC_PLACES = {  # DESIGN §6: the Agent Arena scene
    "Berry1": (-5.0, 0.0, 3.0), "Berry2": (4.0, 0.0, -6.0), "Berry3": (-1.0, 0.0, -5.0),
    "Stone1": (7.0, 0.0, 4.0), "Stone2": (-8.0, 0.0, -3.0), "Wood1": (9.0, 0.0, -2.0), "Wood2": (-4.0, 0.0, 8.0),
    "Pit1": (1.0, 0.0, 1.0), "Pit2": (-3.0, 0.0, -3.0),
}


def test_entities_keep_their_places_and_distances_follow_the_agent():
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", layout="classic"))
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 50}})
    assert {e["name"]: tuple(e["position"]) for e in obs.query_result["entities"]} == CLASSIC_PLACES
    for _ in range(14):  # walking toward Berry1, past Wood2
        obs, *_ = env.step({"tool": "move_to", "params": {"target": [-5, 0, 3]}})
        x, _, z = obs.position
        assert obs.nearby_resources
        for seen in [*obs.nearby_resources, *obs.nearby_hazards]:
            assert seen.position == CLASSIC_PLACES[seen.name]
            assert seen.distance == pytest.approx(math.hypot(seen.position[0] - x, seen.position[2] - z), abs=1e-4)
    assert obs.nearby_resources[0].name == "Berry1" and obs.nearby_resources[0].distance < 2.5


def test_observations_pickle_and_copy():
    env = ToolCallWrapper(gym.make("arena_envs/Crafting-v0"))
    obs, _ = env.reset(seed=1)
    assert obs.available_recipes and obs.nearby_stations
    assert pickle.loads(pickle.dumps(obs)) == obs
    assert copy.deepcopy(obs) == obs
    assert json.loads(json.dumps(obs.to_dict()))["agent_id"] == obs.agent_id


def test_step_before_reset_is_a_clear_error():
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    with pytest.raises(ResetNeeded, match="reset"):
        env.step({"tool": "idle", "params": {}})
    env.reset(seed=0)
    assert env.step({"tool": "idle", "params": {}})[0].last_action_result.success
