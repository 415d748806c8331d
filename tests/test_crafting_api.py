"""Crafting-v0's Gymnasium API: registration, ``check_env``, the documented spaces, recipes as data."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, copy_action
from crafting_helpers import ENV_ID, ITEMS, MixedPolicy, make_single, make_vec
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from arena_envs.crafting import Crafting, CraftingParams, Recipe
from arena_envs.envs import ArenaEnv, ArenaVectorEnv
from arena_envs.render import MAP_PIXELS, STATION_COLOUR

INFO_KEYS = {"success", "score", "goal_crafted", "items_crafted", "craft_attempts", "recipe_efficiency", "waste",
             "resources_collected"}
PLANK_RECIPES = (  # a user's own recipe table: a different chain, goal and station use
    Recipe("plank", {"wood": 1}, "workbench", 5, count=2),
    Recipe("shield", {"plank": 3, "iron_ore": 1}, "anvil", 8),
)


@pytest.mark.parametrize("kwargs", [{}, {"layout": "random"},
                                    {"recipes": PLANK_RECIPES, "goal": "shield", "layout": "random"}])
def test_check_env_passes(kwargs):
    env = make_single(**kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the advice to normalise Box action spaces
        check_env(env.unwrapped)


def test_registration_gives_the_native_envs():
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, ArenaEnv) and env.spec.id == ENV_ID
    assert isinstance(env.unwrapped.scenario, Crafting)
    envs = gym.make_vec(ENV_ID, num_envs=4)
    assert isinstance(envs.unwrapped, ArenaVectorEnv) and isinstance(envs.unwrapped.scenario, Crafting)
    assert not isinstance(envs, gym.vector.SyncVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    same = gym.make_vec(ENV_ID, num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP)
    assert same.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP


def test_spaces_are_the_documented_tables():
    env = make_single()
    space = env.observation_space
    expected = {"agent": (7,), "resources": (8, 10), "stations": (3, 9), "inventory": (11,), "craftable": (6,),
                "crafting": (7,), "last_action": (2,), "time_left": (1,)}
    assert {k: s.shape for k, s in space.spaces.items()} == expected
    assert env.unwrapped.scenario.params.item_names == ITEMS
    assert space["crafting"].high.tolist() == [1] * 6 + [40]
    assert space["time_left"].high[0] == 900 and space["agent"].high[0] == 20
    action = env.action_space
    assert action["craft"].nvec.tolist() == [6, 3] and action["collect"].n == 8
    assert action["move_to"].high.tolist() == [20, 20, 2]
    obs, info = env.reset(seed=0)
    assert space.contains(obs)
    assert info == {k: 0 for k in INFO_KEYS}
    assert obs["agent"][:2].tolist() == [0.0, 10.0] and obs["crafting"].sum() == 0


def test_vector_env_stays_in_its_spaces_with_sampled_and_crafting_actions():
    envs = make_vec(6, layout="random", max_ticks=40)
    policy = MixedPolicy(envs, seed=1, random_share=0.5)
    obs, _ = envs.reset(seed=1)
    codes = set()
    for _ in range(120):
        obs, reward, terminated, truncated, info = envs.step(policy(obs))
        assert envs.observation_space.contains(obs)
        assert set(info) == INFO_KEYS | {"_" + k for k in INFO_KEYS}
        assert all(info[k].shape == (6,) for k in INFO_KEYS)
        codes |= set(obs["last_action"][:, 1].tolist())
    assert {0, 1, 2, 3} <= codes  # successes and failures both happened


def test_same_step_autoreset_matches_gymnasium_sync_vector_env():
    B, T, seed = 3, 60, 4
    native = make_vec(B, layout="random", max_ticks=T, autoreset_mode=AutoresetMode.SAME_STEP)
    sync = gym.vector.SyncVectorEnv([lambda: make_single(layout="random", max_ticks=T)] * B,
                                    autoreset_mode=AutoresetMode.SAME_STEP)
    obs, _ = native.reset(seed=seed)
    sync.reset(seed=seed)
    policy = MixedPolicy(native, seed=seed)
    finals = 0
    for _ in range(130):
        action = policy(obs)
        obs, reward, terminated, truncated, info = native.step(action)
        sobs, sreward, sterminated, struncated, sinfo = sync.step(copy_action(action))
        assert_tree_equal(obs, sobs)
        np.testing.assert_array_equal(reward, sreward)
        np.testing.assert_array_equal(terminated | truncated, sterminated | struncated)
        assert ("final_obs" in info) == ("final_obs" in sinfo)
        if "final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                assert_tree_equal(info["final_obs"][i], sinfo["final_obs"][i])
                for k in INFO_KEYS:
                    assert info["final_info"][k][i] == sinfo["final_info"][k][i], k
            finals += int(info["_final_obs"].sum())
    assert finals >= 2 * B


def test_reset_mask_resets_only_the_masked_worlds():
    envs = make_vec(3, layout="random")
    envs.reset(seed=0)
    before = envs.unwrapped.state.ent_x.copy()
    obs, _ = envs.reset(seed=50, options={"reset_mask": np.array([False, True, False])})
    after = envs.unwrapped.state.ent_x
    np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
    want, _ = make_single(layout="random").reset(seed=51)
    assert_tree_equal({k: v[1] for k, v in obs.items()}, want)


def test_user_recipes_are_data_with_their_own_items_and_goal():
    params = CraftingParams(recipes=PLANK_RECIPES, goal="shield", layout="random",
                            resource_counts={"wood": 2, "iron_ore": 1})
    assert params.item_names == ("iron_ore", "coal", "wood", "stone", "berry", "plank", "shield")
    env = make_single(params=params)
    assert env.action_space["craft"].nvec.tolist() == [2, 3]
    assert env.observation_space["inventory"].shape == (7,)
    scenario = env.unwrapped.scenario
    assert scenario.recipes.inputs.tolist() == [[0, 0, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 3, 0]]
    assert scenario.recipes.count.tolist() == [2, 1] and scenario.recipes.ticks.tolist() == [5, 8]
    # the same through gym.make keyword arguments, with tuples instead of Recipe records
    rows = [(r.name, r.inputs, r.station, r.ticks, r.output, r.count) for r in PLANK_RECIPES]
    same = make_single(recipes=rows, goal="shield").unwrapped.scenario.params
    assert same.recipes == PLANK_RECIPES and same.item_names == params.item_names
    assert len({CraftingParams(recipes=rows, goal="shield"), CraftingParams(recipes=PLANK_RECIPES, goal="shield")}) == 1


@pytest.mark.parametrize("kwargs, words", [
    ({"layout": "maze"}, "layout"),
    ({"max_ticks": 0}, "max_ticks"),
    ({"goal": "gold_crown"}, "goal"),
    ({"recipes": (Recipe("a", {"wood": 1}, "forge", 3),), "goal": "a"}, "forge"),
    ({"recipes": (Recipe("a", {"wood": 1}, "anvil", 0),), "goal": "a"}, "ticks"),
    ({"recipes": (Recipe("a", {}, "anvil", 3),), "goal": "a"}, "inputs"),
    ({"recipes": (Recipe("a", {"wood": 1}, "anvil", 3), Recipe("a", {"coal": 1}, "anvil", 3)), "goal": "a"},
     "unique"),
    ({"recipes": (Recipe("a", {"b": 1}, "anvil", 3), Recipe("b", {"a": 1}, "anvil", 3)), "goal": "a"}, "itself"),
    ({"layout": "random", "resource_counts": {"gold": 2}}, "gold"),
    ({"layout": "random", "resource_counts": {"wood": 0}}, "at least one"),
    ({"resource_types": ("iron_ore", "coal", "timber"), "resource_counts": {"coal": 1}}, "classic layout"),
])
def test_nonsense_arguments_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        make_single(**kwargs)
    with pytest.raises(ValueError, match=words):
        make_vec(2, **kwargs)


def test_render_draws_the_three_stations():
    env = make_single(render_mode="rgb_array")
    env.reset(seed=0)
    station_pixels = (env.render()[:MAP_PIXELS] == STATION_COLOUR).all(-1).sum()  # on the map, not the legend
    env.unwrapped.state.ent_alive[0, env.unwrapped.scenario.slots.st] = [True, False, False]
    assert station_pixels > 0 and (env.render()[:MAP_PIXELS] == STATION_COLOUR).all(-1).sum() == pytest.approx(
        station_pixels / 3, rel=0.1)


def test_bench_has_crafting_rows_and_their_ratio_to_cartpole(capsys):
    from arena_envs import bench

    rows = bench.run(["--seconds", "0.01", "--only", "crafting", "reference"])
    names = [name for name, _, _ in rows]
    assert names[:5] == [f"Crafting native batch B={b}" for b in (1, 64, 1024, 4096)] + [
        "Crafting single env (gym.make)"]
    assert all(rate > 0 for _, rate, _ in rows)
    out = capsys.readouterr().out
    assert "Crafting native batch B=4096 / CartPole-v1 native vector env B=4096 (reference):" in out
