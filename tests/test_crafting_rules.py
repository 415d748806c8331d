"""Crafting-v0 rules, each checked in a hand-built situation on a real vector env.

Worlds are classic layouts emptied of resources (see ``CraftWorld``); inventories and
positions are set in the state arrays and every step goes through ``VectorEnv.step``, so
decoding, the tick and the observation are the real ones. Every error code of ``craft``
is produced by a situation an agent can get into.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TOOLS, full_batch
from crafting_helpers import (
    BUSY,
    INVENTORY_FULL,
    MISSING_MATERIALS,
    NOT_FOUND,
    OK,
    OUT_OF_RANGE,
    RECIPES,
    CraftWorld,
    make_vec,
)

from arena_envs.crafting import Crafting, CraftingParams, Recipe
from arena_envs.tick import advance, apply_tools
from arena_envs.world import CRAFT, ToolActions, WorldState, reset_agents


@pytest.fixture
def world():
    made = []

    def factory(*args, **kwargs) -> CraftWorld:
        w = CraftWorld(*args, **kwargs)
        made.append(w)
        return w

    yield factory
    for w in made:
        w.envs.close()


CHAIN = [  # recipe, station, inputs, ticks
    ("iron_ingot", "furnace", {"iron_ore": 1, "coal": 1}, 30),
    ("iron_rod", "anvil", {"iron_ingot": 1}, 20),
    ("wooden_handle", "workbench", {"wood": 2}, 20),
    ("iron_sword", "anvil", {"iron_rod": 1, "wooden_handle": 1}, 40),
    ("torch", "workbench", {"wood": 1, "stone": 1}, 10),
    ("meal", "workbench", {"berry": 2}, 10),
]


# -- a successful craft ------------------------------------------------------------------------


@pytest.mark.parametrize("recipe, station, inputs, ticks", CHAIN)
def test_materials_go_at_the_start_and_the_output_arrives_after_the_ticks(world, recipe, station, inputs, ticks):
    w = world(2)
    for b in range(2):
        w.beside(b, station)
        w.give(b, **{item: n + 1 for item, n in inputs.items()})  # one of each left over
    obs, reward, *_ = w.craft(0, recipe, station)
    assert obs["last_action"][0].tolist() == [TOOLS["craft"], OK]
    for item in inputs:
        assert w.held(0, item) == 1 and w.held(1, item) == inputs[item] + 1
    k = RECIPES.index(recipe)
    assert obs["crafting"][0, k] == 1.0 and obs["crafting"][0, -1] == ticks - 1
    for tick in range(2, ticks + 1):  # the starting step is the first of the recipe's ticks
        assert w.held(0, recipe) == 0, f"tick {tick}"
        obs, reward, terminated, *_ = w.step()
    assert w.held(0, recipe) == 1 and w.held(1, recipe) == 0
    assert obs["inventory"][0, w.params.item_names.index(recipe)] == 1
    assert obs["crafting"][0].tolist() == [0.0] * 7
    assert terminated[0] == (recipe == "iron_sword") and not terminated[1]


def test_a_one_tick_recipe_delivers_in_the_step_that_starts_it(world):
    quick = Recipe("plank", {"wood": 1}, "workbench", 1, count=2)
    w = world(1, recipes=(*CraftingParams().recipes, quick))
    w.beside(0, "workbench")
    w.give(0, wood=1)
    obs, *_ = w.craft(0, "plank", "workbench")
    assert obs["last_action"][0, 1] == OK
    assert w.held(0, "plank") == 2 and w.held(0, "wood") == 0 and obs["crafting"][0, -1] == 0
    obs, *_ = w.do(0, "move_to", move_to=(3.0, 3.0, 1.0))
    assert obs["last_action"][0, 1] == OK  # not busy any more


def test_a_crafter_stops_and_stays_at_its_station(world):
    w = world(1)
    w.beside(0, "furnace", dx=2.0)
    w.give(0, iron_ore=1, coal=1)
    w.do(0, "move_to", move_to=(-10.0, 0.0, 1.0))  # walking away, still in range after one tick
    obs, *_ = w.craft(0, "iron_ingot", "furnace")
    assert obs["last_action"][0, 1] == OK
    where = obs["agent"][0, :2].copy()
    assert obs["agent"][0, 4] == 0.0  # no longer moving
    for _ in range(5):
        obs, *_ = w.step()
        np.testing.assert_array_equal(obs["agent"][0, :2], where)


# -- BUSY ---------------------------------------------------------------------------------------------


def test_a_crafter_is_busy_for_move_collect_and_craft_until_the_output_arrives(world):
    w = world(1)
    w.beside(0, "furnace")
    w.give(0, iron_ore=2, coal=2)
    w.resource(0, 0, 5.5, 0.5, "wood")  # within collection range
    w.craft(0, "iron_ingot", "furnace")
    furnace_row = 1
    for tool, entries in (("move_to", {"move_to": (0.0, 0.0, 1.0)}), ("collect", {"collect": 0}),
                          ("craft", {"craft": (0, furnace_row)})):
        left = int(w.state.craft_left[0, 0])
        obs, *_ = w.do(0, tool, **entries)
        assert obs["last_action"][0].tolist() == [TOOLS[tool], BUSY], tool
        assert w.state.last_value[0, 0] == left and w.state.last_index[0, 0] == furnace_row
    assert w.held(0, "iron_ore") == 1 and w.held(0, "wood") == 0 and w.state.ent_alive[0, 0]
    assert obs["agent"][0, :2].tolist() == [6.0, 0.0]
    for tool in ("idle", "query_world", "query_inventory", "send_message"):
        obs, *_ = w.do(0, tool)
        assert obs["last_action"][0].tolist() == [TOOLS[tool], OK], tool
    assert w.state.craft_left[0, 0] == 30 - 8  # idle does not cancel the craft
    w.wait(22)
    assert w.held(0, "iron_ingot") == 1
    obs, *_ = w.do(0, "collect", collect=0)
    assert obs["last_action"][0, 1] == OK and w.held(0, "wood") == 1


def two_crafters():
    """A world with two agents beside the furnace, each carrying ore and coal (the core, A = 2)."""
    scenario = Crafting()
    s = WorldState.zeros(1, 2, scenario.slots, 0, len(scenario.params.item_names))
    scenario.reset(s, np.array([0]), [np.random.default_rng(0)])  # the classic stations
    reset_agents(scenario.params, s, np.array([0]), np.array([[6.0, 4.0]]), np.array([[0.0, 0.0]]))
    s.inventory[0, :, :2] = 1
    return scenario, s


def craft_at_furnace(scenario, s, who):
    actions = ToolActions.idle((1, 2))
    actions.tool[0, who] = CRAFT
    actions.recipe[0, who] = 0
    actions.station[0, who] = 1
    events = apply_tools(scenario.params, scenario.slots, s, actions, scenario.recipes)
    advance(scenario.params, scenario.slots, s, events, scenario.recipes)


def test_a_station_serves_one_crafter_at_a_time():
    scenario, s = two_crafters()
    craft_at_furnace(scenario, s, [0])
    assert s.last_code[0].tolist() == [OK, OK] and s.craft_left[0].tolist() == [29, 0]
    craft_at_furnace(scenario, s, [1])
    assert s.last_code[0, 1] == BUSY and s.last_value[0, 1] == 0.0  # the furnace is taken
    assert s.inventory[0, 1, :2].tolist() == [1, 1]
    for _ in range(28):
        craft_at_furnace(scenario, s, [])
    assert s.craft_left[0, 0] == 0 and s.inventory[0, 0, 5] == 1
    craft_at_furnace(scenario, s, [1])
    assert s.last_code[0, 1] == OK  # free again


def test_two_crafters_starting_at_one_station_in_the_same_tick_the_first_wins():
    scenario, s = two_crafters()
    craft_at_furnace(scenario, s, [0, 1])
    assert s.last_code[0].tolist() == [OK, BUSY]
    assert s.inventory[0, :, :2].tolist() == [[0, 0], [1, 1]]


# -- failures ------------------------------------------------------------------------------------------


def assert_nothing_used(w: CraftWorld, b: int, before: np.ndarray) -> None:
    np.testing.assert_array_equal(w.state.inventory[b, 0], before)
    assert w.state.craft_left[b, 0] == 0


def test_a_station_of_the_wrong_type_is_not_found(world):
    w = world(1)
    w.beside(0, "anvil")
    w.give(0, iron_ore=1, coal=1)
    before = w.state.inventory[0, 0].copy()
    obs, reward, *_ = w.craft(0, "iron_ingot", "anvil")
    assert obs["last_action"][0].tolist() == [TOOLS["craft"], NOT_FOUND]
    assert w.state.last_index[0, 0] == 0 and w.state.last_value[0, 0] == pytest.approx(1.0)
    assert_nothing_used(w, 0, before)


def test_a_station_missing_from_the_world_is_not_found(world):
    w = world(1)
    w.state.ent_alive[0, w.slots.st.start + 1] = False  # this world has no furnace
    w.beside(0, "anvil", dx=0.0, dz=5.0)  # where the furnace was
    w.give(0, iron_ore=1, coal=1)
    before = w.state.inventory[0, 0].copy()
    obs, *_ = w.craft(0, "iron_ingot", "furnace")
    assert obs["last_action"][0, 1] == NOT_FOUND
    assert_nothing_used(w, 0, before)


@pytest.mark.parametrize("where", [(1.0, 0.0), (-10.0, 0.0)])  # beside the station, or far from it
def test_missing_materials(world, where):
    w = world(1)
    w.beside(0, "workbench", *where)
    w.give(0, wood=1, iron_ore=3)
    before = w.state.inventory[0, 0].copy()
    obs, *_ = w.craft(0, "wooden_handle", "workbench")
    assert obs["last_action"][0].tolist() == [TOOLS["craft"], MISSING_MATERIALS]
    assert obs["craftable"][0, RECIPES.index("wooden_handle")] == 0.0
    assert_nothing_used(w, 0, before)


@pytest.mark.parametrize("offset, code", [((3.0, 0.0), OK), ((1.5, 2.5), OK), ((3.1, 0.0), OUT_OF_RANGE),
                                          ((0.0, -7.0), OUT_OF_RANGE)])
def test_crafting_range_is_three_with_the_distance_reported(world, offset, code):
    w = world(1)
    w.beside(0, "furnace", *offset)
    w.give(0, iron_ore=1, coal=1)
    obs, *_ = w.craft(0, "iron_ingot", "furnace")
    assert obs["last_action"][0].tolist() == [TOOLS["craft"], code]
    assert w.state.last_value[0, 0] == pytest.approx(float(np.hypot(*offset)), abs=1e-5)
    assert w.held(0, "iron_ore") == (0 if code == OK else 1)


def test_an_output_that_would_not_fit_is_inventory_full(world):
    plank = Recipe("plank", {"wood": 1}, "workbench", 5, count=4)
    w = world(2, recipes=(*CraftingParams().recipes, plank))
    for b in range(2):
        w.beside(b, "workbench")
    w.give(0, wood=30, iron_ore=20)  # 50: 49 after the wood, 53 with the planks
    w.give(1, wood=30, iron_ore=17)  # 47: exactly 50 afterwards
    action = full_batch(2, TOOLS["craft"])
    action["craft"][:] = (6, 2)  # plank at the workbench
    obs, *_ = w.step(action)
    assert obs["last_action"][:, 1].tolist() == [INVENTORY_FULL, OK]
    assert w.held(0, "wood") == 30 and w.held(1, "wood") == 29


def test_collecting_at_capacity_is_inventory_full(world):
    w = world(1)
    w.resource(0, 0, 1.0, 0.0, "coal")
    w.give(0, wood=50)
    obs, *_ = w.do(0, "collect", collect=0)
    assert obs["last_action"][0].tolist() == [TOOLS["collect"], INVENTORY_FULL]
    assert w.state.ent_alive[0, 0] and w.held(0, "coal") == 0


def test_checks_come_in_the_documented_order(world):
    """Wrong station (NOT_FOUND) before materials, materials before fit, fit before range."""
    plank = Recipe("plank", {"wood": 1}, "workbench", 5, count=4)
    w = world(1, recipes=(*CraftingParams().recipes, plank))
    w.beside(0, "anvil", dx=-8.0)  # far from everything
    obs, *_ = w.craft(0, "plank", "anvil")
    assert obs["last_action"][0, 1] == NOT_FOUND
    obs, *_ = w.craft(0, "plank", "workbench")
    assert obs["last_action"][0, 1] == MISSING_MATERIALS
    w.give(0, wood=50)
    obs, *_ = w.craft(0, "plank", "workbench")
    assert obs["last_action"][0, 1] == INVENTORY_FULL
    w.give(0, wood=2)
    obs, *_ = w.craft(0, "plank", "workbench")
    assert obs["last_action"][0, 1] == OUT_OF_RANGE


# -- observation of crafting ------------------------------------------------------------------------


def test_observation_shows_the_station_in_use_and_what_can_be_crafted(world):
    w = world(1)
    w.beside(0, "furnace")
    w.give(0, iron_ore=1, coal=1, wood=2)
    obs, *_ = w.step()
    assert obs["craftable"][0].tolist() == [1, 0, 1, 0, 0, 0]
    assert obs["stations"][0, :, -1].tolist() == [0, 0, 0]
    obs, *_ = w.craft(0, "iron_ingot", "furnace")
    assert obs["stations"][0, :, -1].tolist() == [0, 1, 0]
    assert obs["craftable"][0].tolist() == [0, 0, 1, 0, 0, 0]
    furnace = obs["stations"][0, 1]
    assert furnace[:5].tolist() == [1, 0, -1, 0, 1] and furnace[5:8].tolist() == [0, 1, 0]
    w.wait(29)
    obs, *_ = w.step()
    assert obs["stations"][0, :, -1].tolist() == [0, 0, 0]
    assert obs["craftable"][0].tolist() == [0, 1, 1, 0, 0, 0]


# -- rewards, score, episode end ---------------------------------------------------------------------


def run_chain(w: CraftWorld, b: int = 0, extra_ingot: bool = False):
    """Craft the sword from carried materials, moved from station to station: the reward of
    every step, and the last step's terminated and info."""
    w.give(b, iron_ore=2 if extra_ingot else 1, coal=2 if extra_ingot else 1, wood=2)
    rewards = []

    def craft(recipe, station, ticks):
        w.beside(b, station)
        obs, reward, terminated, truncated, info = w.craft(b, recipe, station)
        assert obs["last_action"][b, 1] == OK, recipe
        rewards.append(float(reward[b]))
        for _ in range(ticks - 1):
            obs, reward, terminated, truncated, info = w.step()
            rewards.append(float(reward[b]))
        return terminated, info

    craft("iron_ingot", "furnace", 30)
    if extra_ingot:
        craft("iron_ingot", "furnace", 30)
    craft("iron_rod", "anvil", 20)
    craft("wooden_handle", "workbench", 20)
    return rewards, *craft("iron_sword", "anvil", 40)


def test_the_chain_pays_each_intermediate_once_and_the_sword_ends_the_episode(world):
    w = world(2)
    rewards, terminated, info = run_chain(w, extra_ingot=True)
    paid = [(i, r) for i, r in enumerate(rewards) if r]
    ends = np.cumsum([30, 30, 20, 20, 40]) - 1
    assert paid == [(ends[0], pytest.approx(0.1)), (ends[2], pytest.approx(0.1)), (ends[3], pytest.approx(0.1)),
                    (ends[4], 1.0)]
    assert terminated.tolist() == [True, False]
    assert info["goal_crafted"][0] == 1 and info["items_crafted"][0] == 5 and info["craft_attempts"][0] == 5
    assert info["recipe_efficiency"][0] == 100.0
    assert info["waste"][0] == 2.0  # the second ingot's ore and coal
    assert info["score"][0] == pytest.approx(50 + 30 - 10)


def test_a_clean_chain_scores_eighty(world):
    w = world(1)
    _, terminated, info = run_chain(w)
    assert terminated[0] and info["waste"][0] == 0.0
    assert info["score"][0] == pytest.approx(80.0)


def test_waste_and_recipe_efficiency(world):
    w = world(1)
    w.beside(0, "workbench")
    w.give(0, wood=3, stone=1)
    obs, reward, _, _, info = w.craft(0, "torch", "workbench")
    assert info["waste"][0] == 2.0  # wood and stone gone into something the sword does not need
    w.wait(9)
    obs, reward, _, _, info = w.craft(0, "wooden_handle", "workbench")
    assert info["waste"][0] == 2.0  # a handle in progress is on the way to the sword
    w.wait(19)
    _, _, _, _, info = w.craft(0, "wooden_handle", "workbench")  # no wood left
    assert info["craft_attempts"][0] == 3 and info["items_crafted"][0] == 2
    assert info["recipe_efficiency"][0] == pytest.approx(200 / 3, rel=1e-6)
    assert info["score"][0] == pytest.approx(max(0.0, 0.3 * 200 / 3 - 5 * 2.0), rel=1e-5)
    assert info["goal_crafted"][0] == 0


@pytest.mark.parametrize("goal_reward, intermediate_reward", [(5.0, 0.0), (1.0, 0.5)])
def test_rewards_are_configurable(world, goal_reward, intermediate_reward):
    w = world(1, goal_reward=goal_reward, intermediate_reward=intermediate_reward)
    rewards, terminated, _ = run_chain(w)
    expected = [goal_reward] + ([intermediate_reward] * 3 if intermediate_reward else [])
    assert sorted(r for r in rewards if r) == pytest.approx(sorted(expected))


def test_truncation_at_max_ticks_and_the_default_of_900(world):
    assert make_vec(1).unwrapped.scenario.params.max_ticks == 900
    w = world(2, max_ticks=5)
    for tick in range(1, 6):
        obs, reward, terminated, truncated, info = w.step()
        assert obs["time_left"][:, 0].tolist() == [5 - tick] * 2
        assert truncated.tolist() == [tick == 5] * 2 and not terminated.any()


def test_the_sword_on_the_last_tick_terminates_rather_than_truncates(world):
    w = world(1, max_ticks=40)
    w.beside(0, "anvil")
    w.give(0, iron_rod=1, wooden_handle=1)
    w.craft(0, "iron_sword", "anvil")
    obs, reward, terminated, truncated, _ = w.wait(39)
    assert terminated[0] and not truncated[0] and reward[0] == 1.0


# -- layouts -----------------------------------------------------------------------------------------------


def test_classic_layout_is_the_design_scene():
    envs = make_vec(2)
    obs, info = envs.reset(seed=5)
    s, slots = envs.unwrapped.state, envs.unwrapped.scenario.slots
    for b in range(2):
        stations = [(float(s.ent_x[b, c]), float(s.ent_z[b, c]), int(s.ent_kind[b, c])) for c in range(11)[slots.st]]
        assert stations == [(5.0, -5.0, 0), (5.0, 0.0, 1), (5.0, 5.0, 2)]
        kinds = np.bincount(s.ent_kind[b, slots.res], minlength=5)
        assert kinds.tolist() == [3, 2, 3, 0, 0]  # iron ore, coal, wood
        assert (s.x[b, 0], s.z[b, 0]) == (0.0, 10.0)
    obs2, _ = envs.reset(seed=999)
    for k in obs:
        np.testing.assert_array_equal(obs[k], obs2[k])


def test_random_layout_places_every_counted_entity_inside_the_world():
    counts = {"iron_ore": 4, "coal": 2, "wood": 5, "stone": 1}
    envs = make_vec(50, layout="random", resource_counts=counts)
    envs.reset(seed=0)
    s, slots = envs.unwrapped.state, envs.unwrapped.scenario.slots
    assert slots.resources == 12 and slots.stations == 3
    assert s.ent_alive[:, :15].all()
    assert (np.abs(s.ent_x) <= 18).all() and (np.abs(s.ent_z) <= 18).all()
    for kind, n in enumerate(counts.values()):
        assert ((s.ent_kind[:, slots.res] == kind).sum(1) == n).all()
    assert (s.ent_kind[:, slots.st] == [0, 1, 2]).all()
    sx, sz = s.ent_x[:, slots.st], s.ent_z[:, slots.st]
    gaps = np.hypot(sx[:, :, None] - sx[:, None, :], sz[:, :, None] - sz[:, None, :]) + np.eye(3) * 100
    assert (gaps.min((1, 2)) > 6.0).mean() > 0.95  # spaced apart (a crowded draw may fall back)
    assert len({s.ent_x[b].tobytes() for b in range(50)}) == 50
