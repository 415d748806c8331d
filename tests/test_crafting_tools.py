"""Crafting through tool calls: the seed's craft snippets run unchanged against
``ToolCallWrapper``, craft by name with every error explained, and the observation's
stations, recipes, inventory details and crafting progress."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import arena_envs  # noqa: F401
from arena_envs.crafting import CraftingParams, Recipe
from arena_envs.observations import RecipeInfo, StationInfo
from arena_envs.tools import Decision, ToolPool
from arena_envs.wrappers import ToolCallWrapper

ENV_ID = "arena_envs/Crafting-v0"


def make(**kwargs) -> ToolCallWrapper:
    return ToolCallWrapper(gym.make(ENV_ID, **kwargs))


class SeedCrafter:
    """An agent built around the seed's ``attempt_craft`` and ``can_craft`` (bodies verbatim)."""

    def __init__(self):
        self.known: dict[str, tuple[str, tuple]] = {}  # name -> (type, position), from what was seen
        self.asked = False

    def attempt_craft(self, obs, item_name):
        # Check if we have the recipe requirements
        recipe = obs.available_recipes.get(item_name)
        if not recipe:
            return None  # Unknown recipe

        # Check materials
        for material, count in recipe.inputs.items():
            if obs.inventory.get(material, 0) < count:
                return None  # Missing materials

        # Find nearest station of correct type
        for station in obs.nearby_stations:
            if station.type == recipe.station_type:
                if station.distance < 3.0:
                    return Decision(
                        tool="craft",
                        params={"item_name": item_name, "station_name": station.name}
                    )
                else:
                    # Move to station first
                    return Decision(tool="move_to", params={"target": station.position})

        return None  # No suitable station found

    def can_craft(self, item_name, obs):
        recipe = obs.available_recipes.get(item_name)
        if not recipe:
            return False

        for material, needed in recipe.inputs.items():
            have = obs.inventory.get(material, 0)
            if have < needed:
                return False
        return True

    def next_item(self, obs) -> str:
        have = obs.inventory.get
        if have("iron_rod", 0) and have("wooden_handle", 0):
            return "iron_sword"
        if not have("iron_rod", 0):
            return "iron_rod" if have("iron_ingot", 0) else "iron_ingot"
        return "wooden_handle"

    def decide(self, obs):
        for entity in (obs.query_result or {}).get("entities", []):
            self.known[entity["name"]] = (entity.get("resource_type") or entity.get("station_type"),
                                          tuple(entity["position"]))
        if obs.custom["crafting"]:
            return Decision.idle()  # busy until the item arrives
        if not self.asked:
            self.asked = True
            return Decision(tool="query_world", params={"radius": 50})
        item = self.next_item(obs)
        recipe = obs.available_recipes[item]
        if self.can_craft(item, obs):
            decision = self.attempt_craft(obs, item)
            if decision is not None:
                return decision
            wanted = {recipe.station_type}  # no station in sight: walk to one we know
        else:
            wanted = {m for m, n in recipe.inputs.items() if obs.inventory.get(m, 0) < n}
        for resource in sorted(obs.nearby_resources, key=lambda r: r.distance):
            if resource.type in wanted and resource.distance < 2.0:
                self.known.pop(resource.name, None)
                return Decision(tool="collect", params={"target_name": resource.name})
        x, _, z = obs.position
        places = [pos for kind, pos in self.known.values() if kind in wanted]
        target = min(places, key=lambda p: (p[0] - x) ** 2 + (p[2] - z) ** 2)
        return Decision(tool="move_to", params={"target": list(target)})


def test_the_seed_snippets_make_the_sword():
    env, agent = make(), SeedCrafter()
    obs, _ = env.reset(seed=0)
    assert not agent.can_craft("iron_sword", obs) and agent.attempt_craft(obs, "gold_crown") is None
    for _ in range(600):
        obs, reward, terminated, truncated, info = env.step(agent.decide(obs))
        if terminated or truncated:
            break
    assert terminated and reward == 1.0
    assert obs.inventory.get("iron_sword", 0) == 1 and info["goal_crafted"] == 1
    # the snippet crafts once a station is nearer than 3.0, the craft range: no try is wasted
    assert info["items_crafted"] == 4 and info["craft_attempts"] == 4 and info["waste"] == 0.0
    assert info["score"] == pytest.approx(50 + 0.3 * info["recipe_efficiency"], rel=1e-5)


def crafting_at(env: ToolCallWrapper, station: str, **items: int):
    """Stand the agent beside ``station`` (a classic station name) carrying ``items``."""
    state, scenario = env.arena.state, env.arena.scenario
    row = env.session._names["station"].index(station)
    state.x[0, 0] = state.target_x[0, 0] = state.ent_x[0, scenario.slots.st][row] + 1.0
    state.z[0, 0] = state.target_z[0, 0] = state.ent_z[0, scenario.slots.st][row]
    for name, n in items.items():
        state.inventory[0, 0, scenario.params.item_names.index(name)] = n


def craft(item: str, station: str) -> Decision:
    return Decision(tool="craft", params={"item_name": item, "station_name": station})


@pytest.mark.parametrize("call, items, code, message", [
    (craft("wooden_handle", "Workbench1"), {"wood": 1}, "MISSING_MATERIALS", "Missing wood: need 2, have 1"),
    (craft("iron_ingot", "Furnace1"), {"wood": 1}, "MISSING_MATERIALS",
     "Missing iron_ore: need 1, have 0; Missing coal: need 1, have 0"),
    (craft("gold_crown", "Anvil1"), {}, "NOT_FOUND", "Unknown recipe 'gold_crown'; recipes: iron_ingot, iron_rod"),
    (craft("iron_rod", "Forge1"), {"iron_ingot": 1}, "NOT_FOUND",
     "No station named 'Forge1'; stations: Anvil1, Furnace1, Workbench1"),
    (craft("iron_ingot", "Anvil1"), {"iron_ore": 1, "coal": 1}, "NOT_FOUND",
     "iron_ingot is crafted at a furnace, and Anvil1 is an anvil"),
    (craft("iron_ingot", "Furnace1"), {"iron_ore": 1, "coal": 1}, "OUT_OF_RANGE",
     "Station 'Furnace1' is 5.1 units away, crafting range is 3.0"),
])
def test_craft_errors_explain_themselves(call, items, code, message):
    env = make()
    env.reset(seed=0)
    crafting_at(env, "Workbench1", **items)  # at (6, 5): 5.1 from the furnace
    before = env.arena.state.inventory.copy()
    obs, *_ = env.step(call)
    assert obs.last_action_result.error_code == code and obs.last_action_result.tool == "craft"
    assert message in obs.last_action_result.error_message
    assert (env.arena.state.inventory == before).all()
    assert obs.custom["craft_attempts"] == 1  # a craft by an unknown name is still an attempt


def test_inventory_full_names_the_output():
    plank = Recipe("plank", {"wood": 1}, "workbench", 3, count=4)
    env = make(recipes=(*CraftingParams().recipes, plank))
    env.reset(seed=0)
    crafting_at(env, "Workbench1", wood=50)
    obs, *_ = env.step(craft("plank", "Workbench1"))
    assert obs.last_action_result.error_code == "INVENTORY_FULL"
    assert obs.last_action_result.error_message == "Inventory is full: 4 plank would not fit in 50 items"


def test_busy_crafting_progress_stations_in_use_and_inventory_details():
    env = make()
    env.reset(seed=0)
    crafting_at(env, "Furnace1", iron_ore=2, coal=1)
    obs, *_ = env.step(craft("iron_ingot", "Furnace1"))
    assert obs.last_action_result.success
    assert obs.custom["crafting"] == {"item": "iron_ingot", "recipe": "iron_ingot", "station": "Furnace1",
                                      "ticks_left": 29, "progress": pytest.approx(1 / 30, abs=1e-4)}
    furnace = next(st for st in obs.nearby_stations if st.name == "Furnace1")
    assert isinstance(furnace, StationInfo) and furnace.type == "furnace" and furnace.in_use
    assert not next(st for st in obs.nearby_stations if st.name == "Anvil1").in_use
    assert [st.distance for st in obs.nearby_stations] == sorted(st.distance for st in obs.nearby_stations)

    obs, *_ = env.step({"tool": "move_to", "params": {"target": [0, 0, 0]}})
    assert obs.last_action_result.error_code == "BUSY"
    assert obs.last_action_result.error_message == "Busy crafting iron_ingot at Furnace1: 28 ticks left"
    obs, *_ = env.step(Decision(tool="query_inventory", params={}))
    assert obs.last_action_result.success
    assert obs.inventory_details == {"items": [{"name": "iron_ore", "count": 1, "type": "material"}],
                                     "capacity": 50, "used": 1}
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 50, "filter_type": "station"}})
    entries = obs.query_result["entities"]
    assert {e["name"]: e["in_use"] for e in entries} == {"Anvil1": False, "Furnace1": True, "Workbench1": False}
    assert all(e["type"] == "station" and e["station_type"] in e["name"].lower() for e in entries)
    for _ in range(26):  # 30 ticks from the one that started it
        assert obs.custom["crafting"] is not None
        obs, *_ = env.step(Decision.idle())
    assert obs.custom["crafting"] is None and obs.inventory.get("iron_ingot") == 1
    obs, *_ = env.step(Decision(tool="query_inventory", params={}))
    assert {"name": "iron_ingot", "count": 1, "type": "crafted"} in obs.inventory_details["items"]


def test_recipes_names_and_text_in_the_observation():
    env = make(layout="random")
    obs, _ = env.reset(seed=3)
    assert set(obs.available_recipes) == {"iron_ingot", "iron_rod", "wooden_handle", "iron_sword", "torch", "meal"}
    assert obs.available_recipes["iron_sword"] == RecipeInfo("iron_sword", {"iron_rod": 1, "wooden_handle": 1},
                                                             "anvil", 40)
    obs, *_ = env.step({"tool": "query_world", "params": {"radius": 50}})
    names = sorted(e["name"] for e in obs.query_result["entities"])
    assert names == ["Anvil1", "Coal1", "Coal2", "Furnace1", "IronOre1", "IronOre2", "IronOre3", "Wood1", "Wood2",
                     "Wood3", "Workbench1"]
    assert obs.custom["goal"] == "iron_sword"
    ore = next(e for e in obs.query_result["entities"] if e["name"] == "IronOre1")
    env.arena.state.x[0, 0], env.arena.state.z[0, 0] = ore["position"][0] + 1.0, ore["position"][2]
    obs, *_ = env.step({"tool": "collect", "params": {"target_name": "IronOre1"}})
    assert obs.last_action_result.success and obs.inventory.get("iron_ore") == 1
    assert "stations:" in obs.to_text()


def test_a_pool_of_crafting_sessions_matches_solo_runs():
    def key(obs, reward):
        return (obs.tick, obs.position, obs.last_action_result and obs.last_action_result.error_code,
                [(i.name, i.quantity) for i in obs.inventory], round(reward, 6))

    def solo(seed):
        env, agent = make(layout="random"), SeedCrafter()
        obs, _ = env.reset(seed=seed)
        keys = []
        for _ in range(150):
            obs, reward, *_ = env.step(agent.decide(obs))
            keys.append(key(obs, reward))
        return keys

    async def pooled():
        pool = ToolPool(ENV_ID, size=3, layout="random")

        async def episode(seed):
            agent = SeedCrafter()
            obs = await pool.acquire(seed, seed=seed)
            keys = []
            for _ in range(150):
                step = await pool.call(agent.decide(obs), id=seed)
                obs = step.observation
                keys.append(key(obs, step.reward))
            return keys

        return await asyncio.gather(*(episode(seed) for seed in (1, 2, 3)))

    runs = asyncio.run(pooled())
    for seed, keys in zip((1, 2, 3), runs, strict=True):
        assert keys == solo(seed), seed
    assert any(k[-1] > 0 for k in runs[0] + runs[1] + runs[2])  # crafting happened


def test_the_seed_crafter_makes_the_sword_through_the_pool():
    """Four seed crafters share one pool (one batched step per round) and each makes the sword,
    exactly as it does alone through ToolCallWrapper."""

    def solo(seed):
        env, agent = make(), SeedCrafter()
        obs, _ = env.reset(seed=seed)
        for step in range(600):
            obs, reward, terminated, truncated, info = env.step(agent.decide(obs))
            if terminated or truncated:
                return step, obs.to_dict(), info

    async def pooled():
        pool = ToolPool(ENV_ID, size=4)
        steps = []
        original = pool.scenario.step

        def counting_step(state, actions, active=None):
            steps.append(state.batch_size if active is None else int(active.sum()))  # worlds stepped
            return original(state, actions, active)

        pool.scenario.step = counting_step

        async def episode(seed):
            agent = SeedCrafter()
            obs = await pool.acquire(seed, seed=seed)
            for step in range(600):
                result = await pool.call(agent.decide(obs), id=seed)
                obs = result.observation
                if result.terminated or result.truncated:
                    assert result.terminated and result.reward == 1.0
                    return step, obs.to_dict(), result.info

        return await asyncio.gather(*(episode(seed) for seed in range(4))), steps

    runs, steps = asyncio.run(pooled())
    for seed, (step, obs, info) in enumerate(runs):
        assert {"id": "iron_sword", "name": "iron_sword", "quantity": 1} in obs["inventory"]
        assert info["goal_crafted"] == 1
        assert (step, obs, info) == solo(seed), seed
    assert max(steps) == 4  # the sessions advanced together
